"""tograph's own looks into the user's containers run none of their class's code (h88).

A dict or list subclass can override what reading it runs: transformers' ``ACT2FN`` (an
``OrderedDict`` whose ``__getitem__`` builds a module) had every activation of its table
built by the guards and snapshots of a trace, XIELU's ``nn.Parameter`` among them, so Mamba
and DeBERTa-v2 fell back. Here each container kind (dict, ``OrderedDict``, ``defaultdict``,
``Counter``, list, tuple, set, deque subclasses; ``UserDict``, ``ChainMap``) overrides its
reading methods with counting ones; a function reading one item of it (a global, a closure
variable, an argument, a module's attribute, held by a plain object) runs eagerly and
through ``to_graph`` (default and strict) three times each: values equal, no
FallbackWarning, and every overridden method called at most as often as eager called it.
"""
import collections
import os
import sys
import types
import warnings

import pytest
import torch

from transpiler import FallbackWarning, to_graph

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

CALLS = collections.Counter()
_READS = ["__getitem__", "__iter__", "__reversed__", "items", "values", "keys", "__len__",
          "__contains__", "get", "__eq__", "__ne__", "__copy__", "__deepcopy__",
          "__reduce_ex__", "__bool__", "__missing__", "copy", "__setitem__", "__delitem__",
          "clear", "update", "extend", "append", "pop", "setdefault"]


def _counted(base):
    """``base``'s subclass whose methods in ``_READS`` count their calls in ``CALLS``."""
    def wrap(name, method):
        def counted(self, *args, **kwargs):
            CALLS[name] += 1
            return method(self, *args, **kwargs)
        return counted
    ns = {n: wrap(n, getattr(base, n)) for n in _READS if hasattr(base, n)}
    if getattr(base, "__hash__", None) is None:
        ns["__hash__"] = None
    return type("Counted" + base.__name__, (base,), ns)


KINDS = {
    "dict": _counted(dict), "OrderedDict": _counted(collections.OrderedDict),
    "defaultdict": _counted(collections.defaultdict), "Counter": _counted(collections.Counter),
    "list": _counted(list), "tuple": _counted(tuple), "set": _counted(set),
    "deque": _counted(collections.deque), "UserDict": _counted(collections.UserDict),
    "ChainMap": _counted(collections.ChainMap),
}


def _table(kind):
    """A container of kind ``kind`` holding two tensors (Counter: two numbers)."""
    a, b = torch.tensor([2.0, 3.0, 4.0]), torch.tensor([0.5, 1.5, 2.5])
    cls = KINDS[kind]
    if kind in ("list", "tuple", "deque"):
        return cls([a, b])
    if kind == "set":
        return cls([2.0, 3.0])
    if kind == "defaultdict":
        made = cls(lambda: torch.zeros(3))
        dict.update(made, a=a, b=b)
        return made
    if kind == "Counter":
        return cls(a=2, b=3)
    if kind == "ChainMap":
        return cls({"a": a}, {"b": b})
    return cls(a=a, b=b)


def _read(t, x):
    """What the function computes from the table: one item (a set: its size)."""
    if isinstance(t, collections.abc.Set):
        return x * len(t)
    if isinstance(t, (list, tuple, collections.deque)):
        return x * t[0] + 1
    return x * t["a"] + 1


def _programs(kind):
    """(place, callable, its arguments) for ``kind``'s table in each place."""
    glob = types.FunctionType(_global_read.__code__, {"T": _table(kind), "_read": _read})
    table = _table(kind)

    def closure(x):
        return _read(table, x)

    holder = types.SimpleNamespace(table=_table(kind))
    nested = types.FunctionType(_nested_read.__code__, {"CFG": holder, "_read": _read})

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.table = _table(kind)

        def forward(self, x):
            return _read(self.table, x)

    return [("global", glob, lambda x: (x,)), ("closure", closure, lambda x: (x,)),
            ("argument", _argument_read, lambda x: (x, _table(kind))),
            ("held", nested, lambda x: (x,)), ("module", Model(), lambda x: (x,))]


def _global_read(x):
    return _read(T, x)  # noqa: F821 -- T is the function's global (see _programs)


def _nested_read(x):
    return _read(CFG.table, x)  # noqa: F821


def _argument_read(x, t):
    return _read(t, x)


def _calls(fn, args_of, xs):
    """Outputs and overridden-method calls of ``fn`` over the inputs ``xs``."""
    CALLS.clear()
    outs = [fn(*args_of(x)) for x in xs]
    return outs, collections.Counter(CALLS)


def _no_fallback(fn, *args):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        out = fn(*args)
    fallbacks = [str(w.message) for w in seen if issubclass(w.category, FallbackWarning)]
    assert not fallbacks, fallbacks
    return out


def _items(t):
    """What ``t`` stores, read as tograph must (identities)."""
    if isinstance(t, collections.UserDict):
        t = t.data
    if isinstance(t, collections.ChainMap):
        return [_items(m) for m in t.maps]
    if isinstance(t, dict):
        return [(k, id(v)) for k, v in dict.items(t)]
    return sorted(id(v) for v in (set if isinstance(t, set) else type(t).__mro__[1]).__iter__(t))


@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_reading_one_item_runs_what_eager_runs(kind, strict):
    xs = [torch.randn(3), torch.randn(3), torch.randn(3)]
    for (place, eager, args_of), (_, other, other_args) in zip(_programs(kind),
                                                               _programs(kind)):
        want, eager_calls = _calls(eager, args_of, xs)
        conv = to_graph(other, strict=strict)
        held = [other_args(x) for x in xs]
        stored = [_items(a[1]) for a in held if len(a) > 1]
        CALLS.clear()
        got = [_no_fallback(conv, *a) for a in held]
        extra = {m: n for m, n in CALLS.items() if n > eager_calls[m]}
        assert not extra, f"{kind} {place}: tograph called {extra}; eager {dict(eager_calls)}"
        assert stored == [_items(a[1]) for a in held if len(a) > 1], f"{kind} {place}"
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and torch.allclose(g, w), f"{kind} {place}"


def test_counted_methods_are_seen():
    """The counting itself works: eager's reads are counted (a test that can fail)."""
    _, calls = _calls(_argument_read, lambda x: (x, _table("OrderedDict")), [torch.ones(3)])
    assert calls["__getitem__"] == 1
    CALLS.clear()
    list(_table("list"))
    assert CALLS["__iter__"] == 1


# --------------------------------------------------------------- a table building modules
class Instantier(collections.OrderedDict):
    """transformers.activations.ClassInstantier's shape: indexing builds a module."""
    built = []

    def __getitem__(self, key):
        Instantier.built.append(key)
        return super().__getitem__(key)()


class WithParameter(torch.nn.Module):
    """XIELUActivation's shape: its __init__ makes an nn.Parameter from tensor ops."""

    def __init__(self):
        super().__init__()
        self.alpha = torch.nn.Parameter(torch.log(torch.expm1(torch.tensor([0.8]))))

    def forward(self, x):
        return x * self.alpha


ACT = Instantier({"gelu": torch.nn.GELU, "xielu": WithParameter, "tanh": torch.nn.Tanh})


def _activation(x):
    return ACT["gelu"](x) + 1


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return ACT["tanh"](self.lin(x))


@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict"])
def test_table_builds_only_the_key_asked(strict):
    conv = to_graph(_activation, strict=strict)
    for x in (torch.randn(3), torch.randn(3), torch.randn(2, 5)):
        Instantier.built.clear()
        got = _no_fallback(conv, x)
        assert set(Instantier.built) <= {"gelu"}, Instantier.built
        assert torch.allclose(got, torch.nn.functional.gelu(x) + 1)


@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict"])
def test_module_forward_indexing_the_table(strict):
    torch.manual_seed(0)
    m = Block()
    conv = to_graph(m, strict=strict)
    for x in (torch.randn(2, 4), torch.randn(3, 4)):
        Instantier.built.clear()
        got = _no_fallback(conv, x)
        assert set(Instantier.built) <= {"tanh"}, Instantier.built
        assert torch.allclose(got, torch.tanh(m.lin(x)))


# ------------------------------------------------------------------------ neighbours
DEFAULTS = KINDS["defaultdict"](lambda: torch.zeros(3))
COUNTS = KINDS["Counter"](a=2)


def _defaults_present(x):
    return x + DEFAULTS["a"]


def _counter_missing(x):
    return x * COUNTS["missing"] + COUNTS["a"]


@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict"])
def test_defaultdict_present_key_inserts_nothing(strict):
    dict.clear(DEFAULTS)
    dict.__setitem__(DEFAULTS, "a", torch.ones(3))
    conv = to_graph(_defaults_present, strict=strict)
    for x in (torch.randn(3), torch.randn(3)):
        CALLS.clear()
        assert torch.equal(_no_fallback(conv, x), x + 1)
        assert list(dict.keys(DEFAULTS)) == ["a"]
        assert CALLS["__missing__"] == 0 and CALLS["__getitem__"] <= 1, CALLS


@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict"])
def test_counter_missing_key_is_zero_and_not_stored(strict):
    conv = to_graph(_counter_missing, strict=strict)
    for x in (torch.randn(3), torch.randn(3)):
        assert torch.equal(_no_fallback(conv, x), x * 0 + 2)
        assert dict(dict.items(COUNTS)) == {"a": 2}


def _records(x):
    SEEN[len(SEEN)] = x.sum().item()  # noqa: F821 -- SEEN is the function's global
    return x * 2


@pytest.mark.parametrize("kind", ["dict", "OrderedDict", "defaultdict"])
def test_fallback_restores_a_dict_subclass_through_its_base(kind):
    """A function storing a new key of a global dict subclass on every call falls back (a
    graph would not store again); the trace's store is undone through the base class and
    the eager run's kept: the dict ends as eager's, in eager's order. Besides the user's own
    ``__setitem__`` and ``len`` (run by the trace, then by the eager run), tograph calls
    none of the dict's methods."""
    xs = [torch.ones(3), -torch.ones(3), torch.full((3,), 2.0)]
    eager_seen, conv_seen = _table(kind), _table(kind)
    eager = types.FunctionType(_records.__code__, {"SEEN": eager_seen})
    conv = to_graph(types.FunctionType(_records.__code__, {"SEEN": conv_seen}))
    for x in xs:
        want = eager(x)
        CALLS.clear()
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            assert torch.equal(conv(x), want)
        assert set(CALLS) <= {"__setitem__", "__len__"}, CALLS
        for w in seen:
            if issubclass(w.category, FallbackWarning):
                assert "mutates global 'SEEN'" in str(w.message), str(w.message)
    assert list(dict.keys(conv_seen)) == list(dict.keys(eager_seen)) == ["a", "b", 2, 3, 4]
    assert list(dict.values(conv_seen))[2:] == list(dict.values(eager_seen))[2:] == \
        [3.0, -3.0, 6.0]


TABLE = KINDS["OrderedDict"](scale=torch.tensor(1.5), shift=torch.tensor(0.5))


def _loop(x):
    while x.abs().sum() < 100:
        x = x * TABLE["scale"] + TABLE["shift"]
    return x


@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict"])
def test_tensor_loop_reading_the_table(strict):
    conv = to_graph(_loop, strict=strict)
    for x in (torch.ones(3), torch.full((3,), 2.0)):
        CALLS.clear()
        want = _loop(x)
        eager = CALLS["__getitem__"]
        CALLS.clear()
        assert torch.allclose(_no_fallback(conv, x), want)
        assert set(CALLS) <= {"__getitem__"} and CALLS["__getitem__"] <= eager, CALLS


# ------------------------------------------------------------------ transformers models
def _transformers():
    from benchmarks.torchvision_cpu import import_torchvision
    import_torchvision()
    return pytest.importorskip("transformers")


@pytest.mark.parametrize("name", ["mamba", "deberta_v2"])
def test_act2fn_models_convert(name):
    """Tiny Mamba (sequential scan: ``use_associative_scan=False``) and DeBERTa-v2 (its
    forward indexes ``ACT2FN``) convert with no FallbackWarning and give eager's logits."""
    transformers = _transformers()
    torch.manual_seed(0)
    if name == "mamba":
        config = transformers.MambaConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1,
                                          state_size=4, use_mambapy=False,
                                          use_associative_scan=False)
        model = transformers.MambaForCausalLM(config)
    else:
        config = transformers.DebertaV2Config(
            vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
            intermediate_size=32, max_position_embeddings=32, relative_attention=True,
            pos_att_type=["p2c", "c2p"], max_relative_positions=8, position_buckets=4)
        model = transformers.DebertaV2ForSequenceClassification(config)
    model.eval()
    conv = to_graph(model)
    ids = torch.randint(3, 64, (2, 7))
    with torch.no_grad():
        got = _no_fallback(conv, ids).logits
        want = model(ids).logits
    assert got.shape == want.shape and torch.allclose(got, want, atol=1e-5, rtol=1e-4)

