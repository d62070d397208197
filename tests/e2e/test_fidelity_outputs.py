"""Results are rebuilt on every call with the caller's exact types; objects, dict
subclasses and dataclasses work as the state of tensor branches and loops.

Each test runs eagerly and converted (default and strict), on two inputs that take
different paths, and compares values, exact types, attributes and identities.
"""
import collections
import dataclasses
import warnings
from typing import Any, List, Optional

import pytest
import torch

from transpiler import ConversionError, FallbackWarning, to_graph


# --------------------------------------------------------------------------- classes
class Holder:
    def __init__(self, v, n=3):
        self.v = v
        self.n = n


@dataclasses.dataclass
class Rec:
    t: Any = None
    k: int = 0
    tag: str = ""


class MyDict(dict):
    """a plain dict subclass"""


class Point(collections.namedtuple("Point", "x y")):
    __slots__ = ()


class FakeModelOutput(collections.OrderedDict):
    """Like transformers' ModelOutput: an OrderedDict subclass that is a dataclass; keys
    for the fields that are not None; items and attributes kept in sync."""

    def __post_init__(self):
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if v is not None:
                self[f.name] = v

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        super().__setattr__(key, value)

    def __setattr__(self, name, value):
        if name in self.keys() and value is not None:
            super().__setitem__(name, value)
        super().__setattr__(name, value)

    def to_tuple(self):
        return tuple(self[k] for k in self.keys())


@dataclasses.dataclass
class CausalOutput(FakeModelOutput):
    logits: Optional[torch.Tensor] = None
    past_key_values: Any = None
    hidden: Optional[torch.Tensor] = None


class FakeCache:
    """Like transformers' DynamicCache: lists of tensors per layer in attributes."""

    def __init__(self):
        self.key_cache: List[torch.Tensor] = []
        self.value_cache: List[torch.Tensor] = []
        self.seen_tokens = 0

    def update(self, k, v, layer):
        if len(self.key_cache) <= layer:
            self.key_cache.append(k)
            self.value_cache.append(v)
        else:
            self.key_cache[layer] = torch.cat([self.key_cache[layer], k], dim=0)
            self.value_cache[layer] = torch.cat([self.value_cache[layer], v], dim=0)
        if layer == 0:
            self.seen_tokens += k.shape[0]
        return self.key_cache[layer], self.value_cache[layer]


class NeedsArgs:
    def __new__(cls, v):
        self = super().__new__(cls)
        self.v = v
        return self


GLOBAL_HOLDER = Holder(1.0)


# --------------------------------------------------------------------------- comparing
def same(got, exp, path="out"):
    """Values, dtypes, exact types, attributes and items, recursively; a 0-d tensor may
    stand for a Python number of the same kind."""
    if isinstance(exp, torch.Tensor):
        assert type(got) is torch.Tensor, f"{path}: {type(got).__name__}, not Tensor"
        assert got.dtype == exp.dtype and got.shape == exp.shape, path
        assert got.requires_grad == exp.requires_grad, f"{path}: requires_grad"
        torch.testing.assert_close(got.detach(), exp.detach(), msg=lambda m: f"{path}: {m}")
        return
    if isinstance(exp, (bool, int, float)) and not isinstance(got, (bool, int, float)):
        assert type(got) is torch.Tensor and got.dim() == 0, f"{path}: {got!r} for {exp!r}"
        assert got.item() == pytest.approx(exp), f"{path}: {got} != {exp}"
        return
    assert type(got) is type(exp), f"{path}: {type(got).__name__} != {type(exp).__name__}"
    if isinstance(exp, dict):
        assert list(got) == list(exp), f"{path}: keys {list(got)} != {list(exp)}"
        for k in exp:
            same(dict.__getitem__(got, k), dict.__getitem__(exp, k), f"{path}[{k!r}]")
    elif isinstance(exp, (list, tuple)):
        assert len(got) == len(exp), f"{path}: length"
        for i, (a, b) in enumerate(zip(got, exp)):
            same(a, b, f"{path}[{i}]")
    if isinstance(exp, collections.defaultdict):
        assert got.default_factory is exp.default_factory, f"{path}: default_factory"
    if hasattr(exp, "__dict__") and not isinstance(exp, type):
        assert sorted(vars(got)) == sorted(vars(exp)), f"{path}: attributes"
        for k in vars(exp):
            same(vars(got)[k], vars(exp)[k], f"{path}.{k}")
    elif not isinstance(exp, (dict, list, tuple)):
        assert got == exp, f"{path}: {got!r} != {exp!r}"


def run_both(fn, inputs, strict_too=True):
    """Eager vs converted (default; strict), per input; returns the converted results."""
    results = []
    for strict in (False, True) if strict_too else (False,):
        g = to_graph(fn, strict=strict)
        for args in inputs:
            exp = fn(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                got = g(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
            same(got, exp)
            results.append(got)
    return results


POS = (torch.tensor([1.0, 2.0, 3.0]),)
NEG = (torch.tensor([-1.0, -2.0, 0.5]),)


# --------------------------------------------------------------------------- results
def test_objects_made_inside_are_new_each_call_with_real_tensors():
    def f(x):
        o = Holder(x * 2)
        o.lst = [x + 1, 2, "s"]
        return x.sum(), o, Rec(t=x * 3, k=1, tag="a")
    r1, r2 = run_both(f, [POS, NEG], strict_too=False)
    assert r1[1] is not r2[1] and r1[2] is not r2[2]
    assert r1[1].n == 3 and r1[1].lst[1:] == [2, "s"]


@pytest.mark.parametrize("make", [
    lambda x: collections.OrderedDict(a=x * 2, b=1),
    lambda x: MyDict(a=x * 2, b=[x, 3]),
    lambda x: Point(x * 2, x.sum()),
    lambda x: Rec(t={"k": x * 2}, k=2),
], ids=["OrderedDict", "dict-subclass", "namedtuple-subclass", "dataclass-holding-dict"])
def test_containers_keep_their_class(make):
    def f(x):
        return make(x), [make(x + 1)], {"k": (make(x - 1),)}
    run_both(f, [POS, NEG])


def test_defaultdict_keeps_its_factory():
    def f(x):
        d = collections.defaultdict(list)
        d["a"].append(x * 2)
        d["b"] = x.sum()
        return d
    r1, r2, *_ = run_both(f, [POS, NEG])
    assert r1 is not r2 and r1.default_factory is list
    r1["new"].append(1)                          # the factory works on the result
    assert r1["new"] == [1] and "new" not in r2


def test_python_values_in_objects_are_fresh_per_call():
    def f(x):
        o = Holder(x + 1)
        o.names = ["a", "b"]
        return o
    g = to_graph(f, strict=True)
    r1 = g(POS[0])
    r1.names.append("mutated by the caller")
    r2 = g(POS[0])
    assert r2.names == ["a", "b"] and r2 is not r1


def test_existing_objects_are_returned_as_themselves():
    closed = Holder(2.0)

    def f(x, h):
        return x * h.v, h, GLOBAL_HOLDER, closed
    g = to_graph(f, strict=True)
    h = Holder(3.0)
    for x in (POS[0], NEG[0]):
        out = g(x, h)
        assert out[1] is h and out[2] is GLOBAL_HOLDER and out[3] is closed
        torch.testing.assert_close(out[0], x * 3.0)


def test_existing_object_given_a_traced_tensor_is_not_returned_stale():
    def f(x, h):
        h.v = x * 2            # the caller's object: written back after the graph runs
        return h
    g = to_graph(f, strict=True)
    h1, h2 = Holder(0), Holder(0)
    out = g(POS[0], h1)
    assert out is h1 and type(h1.v) is torch.Tensor
    torch.testing.assert_close(h1.v, POS[0] * 2)
    assert g(NEG[0], h2) is h2
    torch.testing.assert_close(h2.v, NEG[0] * 2)
    assert g(NEG[0] + 1, h1) is h1 and type(h1.v) is torch.Tensor
    torch.testing.assert_close(h1.v, (NEG[0] + 1) * 2)


def test_the_same_object_twice_stays_one_object():
    def f(x):
        child = Holder(x * 2)
        parent = Holder(x, n=child)
        return parent, child, [child, child]
    for r in run_both(f, [POS, NEG]):
        assert r[0].n is r[1] and r[2][0] is r[1] and r[2][1] is r[1]


def test_leftover_results_add_nothing_to_the_graph():
    def f(x):
        return Holder(x * 2), collections.OrderedDict(y=x + 1)
    g = to_graph(f, strict=True)
    out = g(POS[0])
    graph = g.graph(POS[0])
    count = len(graph.nodes)
    (out[0].v + out[1]["y"]).sum()
    assert len(graph.nodes) == count
    assert type(out[0].v) is torch.Tensor and type(out[1]["y"]) is torch.Tensor


def test_plain_results_build_no_objects():
    def f(x):
        return x * 2, (x + 1, [x - 1])
    g = to_graph(f, strict=True)
    g(POS[0])
    source = g.get_concrete(POS[0]).executable.source
    assert "_make" not in source


def test_gradients_through_object_results():
    def f(x):
        return Rec(t=x * x, k=1), collections.OrderedDict(y=(x * 3).sum())
    x1 = torch.tensor([1.0, 2.0], requires_grad=True)
    x2 = x1.detach().clone().requires_grad_(True)
    exp = f(x1)
    got = to_graph(f, strict=True)(x2)
    same(got, exp)
    (exp[0].t.sum() + exp[1]["y"]).backward()
    (got[0].t.sum() + got[1]["y"]).backward()
    torch.testing.assert_close(x2.grad, x1.grad)


# --------------------------------------------------------------------------- model outputs
def test_model_output_like_with_a_cache_object():
    def f(x, n_layers: int):
        cache = FakeCache()
        h = x
        for layer in range(n_layers):
            k, v = cache.update(h * 2, h + 1, layer)
            h = torch.tanh(h + k.sum(0))
        out = CausalOutput(logits=h @ h.T, past_key_values=cache)
        if h.sum() > 0:
            out["hidden"] = h * 2        # a key added on both paths (and its attribute)
        else:
            out["hidden"] = -h
        out.logits = out.logits + 1      # the item follows the attribute
        return out
    xs = [(torch.randn(2, 3), 2), (-torch.rand(2, 3) - 3, 2)]
    results = run_both(f, xs)
    for r in results:
        assert list(r.keys()) == ["logits", "past_key_values", "hidden"]
        assert r.logits is r["logits"] and r.hidden is r["hidden"]
        torch.testing.assert_close(r["logits"], r.logits)
        assert type(r.past_key_values) is FakeCache and r.past_key_values.seen_tokens == 2
        assert len(r.to_tuple()) == 3
    assert results[0].past_key_values is not results[1].past_key_values


def test_real_transformers_outputs():
    transformers = pytest.importorskip("transformers")
    from transformers.cache_utils import DynamicCache
    from transformers.modeling_outputs import CausalLMOutputWithPast

    def f(x):
        cache = DynamicCache()
        cache.update(x[None, None] * 2, x[None, None] + 1, 0)
        return CausalLMOutputWithPast(logits=x * 3, past_key_values=cache)
    g = to_graph(f)
    for x in (torch.randn(2, 4), torch.randn(2, 4)):
        got, exp = g(x), f(x)
        assert type(got) is type(exp) and list(got.keys()) == list(exp.keys())
        torch.testing.assert_close(got.logits, exp.logits)
        assert type(got.past_key_values) is type(exp.past_key_values)
    assert transformers is not None


# --------------------------------------------------------------------------- can't rebuild
def test_objects_that_cannot_be_rebuilt_fall_back():
    def needs_args(x):
        return NeedsArgs(x * 2)

    def holds_itself(x):
        o = Holder(x * 2)
        o.me = o
        return o
    for fn in (needs_args, holds_itself):
        g = to_graph(fn)
        with pytest.warns(FallbackWarning, match="rebuilt"):
            out = g(POS[0])
        assert type(out.v) is torch.Tensor
        with pytest.raises(ConversionError, match="rebuilt"):
            to_graph(fn, strict=True)(POS[0])


# --------------------------------------------------------------------------- branch state
@pytest.mark.parametrize("make", [
    lambda x: collections.OrderedDict(u=x * 0.0, c=0),
    lambda x: MyDict(u=x * 0.0, c=0),
    lambda x: collections.defaultdict(int, u=x * 0.0, c=0),
], ids=["OrderedDict", "dict-subclass", "defaultdict"])
def test_dict_subclasses_as_branch_and_loop_state(make):
    def f(x):
        d = make(x)
        if x.sum() > 0:
            d["u"] = d["u"] + x
            d["c"] += 1
        else:
            d["u"] = d["u"] - 1
        i = torch.tensor(0)
        while i < 3 and x.sum() > -10:
            d["u"] = d["u"] * 2
            i += 1
        return x, d
    run_both(f, [POS, NEG])


def test_objects_as_branch_and_loop_state():
    def f(x):
        o = Holder(x * 0.0)
        r = Rec(t=x, k=0, tag="r")
        if x.sum() > 0:
            o.v = o.v + x
            r.k += 1
            o.extra = x * 3          # added on both paths
        else:
            o.extra = x - 3
        for row in x[None].expand(2, 3):
            r.t = r.t + row
        return o, r
    run_both(f, [POS, NEG])


def test_an_object_returned_early_keeps_its_state_on_every_path():
    def f(a, b):
        d = collections.OrderedDict(u=a * 0.0, c=0)
        t = a
        if (b * 0.5).sum() > 0.0:
            d["u"] = d["u"] + 1
        if a.sum() < 0.5:
            d["u"] = d["u"] + a
        else:
            if not ((a * a).sum() > (a * b).mean()):
                return t, d
            t = b
        return t, d
    ones = torch.ones(3)
    run_both(f, [(ones, ones), (-ones, ones), (ones * 0.1, -ones), (ones, -ones)])


def test_a_key_added_on_one_path_only_is_a_clear_error():
    def branch(x):
        d = MyDict(u=x)
        if x.sum() > 0:
            d["new"] = x * 2
        return d

    def loop(x):
        o = Holder(x)
        i = torch.tensor(0)
        while i < x.sum():
            setattr(o, "n" + "ew", x)
            o.new = o.v + 1
            i += 1
        return o
    for fn in (branch, loop):
        with pytest.raises(ConversionError, match="structure"):
            to_graph(fn, strict=True)(POS[0])
        with pytest.warns(FallbackWarning):
            got = to_graph(fn)(POS[0])
        same(got, fn(POS[0]))


class Slotted:
    __slots__ = ("v", "n", "__private")

    def __init__(self, v):
        self.v = v
        self.n = 0
        self.__private = "p"

    def private(self):
        return self.__private


@dataclasses.dataclass(frozen=True)
class Frozen:
    t: Any
    k: int = 0


def test_slots_and_frozen_dataclasses_as_results_and_state():
    def f(x):
        s = Slotted(x)
        if x.sum() > 0:
            s.v = x * 2
            s.n = 1
        return s, Frozen(t=x + 1, k=2)
    for strict in (False, True):
        g = to_graph(f, strict=strict)
        for (x,) in (POS, NEG):
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                got = g(x.clone())
            exp = f(x.clone())
            assert type(got[0]) is Slotted and got[0].private() == "p"
            same(got[0].v, exp[0].v)
            same(got[0].n, exp[0].n)
            same(got[1], exp[1])


GLOBAL_TABLE = collections.OrderedDict(scale=2.0)


def test_existing_dict_subclasses_are_returned_as_themselves():
    def f(x, h):
        h.table = h.table            # (reads only)
        return x * GLOBAL_TABLE["scale"], GLOBAL_TABLE, h.table
    g = to_graph(f, strict=True)
    h = Holder(0)
    h.table = MyDict(a=1)
    for (x,) in (POS, NEG):
        out = g(x, h)
        assert out[1] is GLOBAL_TABLE and out[2] is h.table
        torch.testing.assert_close(out[0], x * 2.0)


SET_LOG = []


class Logged:
    """__setattr__ with an effect outside the object: a log of every assignment."""

    def __setattr__(self, name, value):
        SET_LOG.append(name)
        object.__setattr__(self, name, value)


def test_a_setattr_with_effects_elsewhere_falls_back():
    def f(x):
        o = Logged()
        o.v = x * 2
        return o
    g = to_graph(f)
    with pytest.warns(FallbackWarning, match="__setattr__ reaches global 'SET_LOG'"):
        out = g(POS[0])
    torch.testing.assert_close(out.v, POS[0] * 2)
    with pytest.raises(ConversionError, match="SET_LOG"):
        to_graph(f, strict=True)(POS[0])


# --------------------------------------------------------------------------- chosen values
def test_python_values_a_tensor_condition_chooses():
    def f(x):
        r = Rec(t=x, tag="init")
        label = None
        if x.sum() > 0:
            r.tag = "pos"
            label = 1
            if x.mean() > 1.5:
                r.tag = "big"
                label = 2.5
        else:
            r.t = r.t * 2
        return r, label, {"tag": r.tag}
    inputs = [(torch.full((2,), 2.0),), (torch.ones(2),), (-torch.ones(2),)]
    results = run_both(f, inputs)
    assert [r[0].tag for r in results[:3]] == ["big", "pos", "init"]
    assert [type(r[1]) for r in results[:3]] == [float, int, type(None)]


def _tagged(x):
    r = Rec(t=x, tag="init")
    if x.sum() > 0:
        r.tag = "pos"
    return r


def uses_is(x):
    r = _tagged(x)
    if r.tag is None:
        return x
    return r


def uses_print(x):
    r = _tagged(x)
    print(r.tag)
    return r


def uses_isinstance(x):
    r = _tagged(x)
    return isinstance(r.tag, str), r


def uses_compare(x):
    r = _tagged(x)
    if r.tag == "pos":
        return x * 2
    return x


def uses_format(x):
    r = _tagged(x)
    return f"<{r.tag}>"


def uses_key(x):
    r = _tagged(x)
    return {r.tag: x}


@pytest.mark.parametrize("f", [uses_is, uses_print, uses_isinstance, uses_compare,
                               uses_format, uses_key])
def test_chosen_values_used_while_tracing_fall_back(f, capsys):
    g = to_graph(f)
    with pytest.warns(FallbackWarning):
        got = g(POS[0])
    same(got, f(POS[0]))
    for (x,) in (POS, NEG):
        same(g(x), f(x))
    with pytest.raises(ConversionError):
        to_graph(f, strict=True)(POS[0])


GLOBAL_LIST = [1, 2]


def test_existing_lists_and_dicts_are_returned_as_themselves():
    def f(x, h):
        return x + 1, GLOBAL_LIST, h.cache, [GLOBAL_LIST]
    g = to_graph(f, strict=True)
    h = Holder(0)
    h.cache = {"k": torch.ones(2)}
    for (x,) in (POS, NEG):
        out = g(x, h)
        assert out[1] is GLOBAL_LIST and out[2] is h.cache and out[3][0] is GLOBAL_LIST
        assert type(out[3]) is list
