"""Fidelity of what a converted function hands back besides tensor values: the identity of
returned containers (one list in two places stays one list), lists and dicts that
tensor control flow changes while another name reaches them (falls back), printed text
of sizes, dtypes, containers and objects holding traced values, and the global random
state (``torch.manual_seed`` inside the function) -- each against eager, in default and
strict mode, on inputs taking different paths so that values baked at trace time show."""
import collections
import dataclasses
import functools
import io
import sys
import warnings

import pytest
import torch

from transpiler import ConversionError, FallbackWarning, to_graph

from e2e_helpers import _clone, assert_same
from fidelity_checks import converts, falls_back

POS = torch.tensor([1.0, 2.0, 3.0])
NEG = torch.tensor([-1.0, -2.0, 0.5])
PATHS = [(POS,), (NEG,), (POS * 2,)]


def same_exactly(got, exp, path="out"):
    """``assert_same`` plus exact container types and dict key order."""
    assert type(got) is type(exp), f"{path}: {type(got).__name__} != {type(exp).__name__}"
    if isinstance(exp, dict):
        assert list(got) == list(exp), f"{path}: keys {list(got)} != {list(exp)}"
        for k in exp:
            same_exactly(got[k], exp[k], f"{path}[{k!r}]")
    elif isinstance(exp, (list, tuple)):
        assert len(got) == len(exp), f"{path}: length"
        for i, (a, b) in enumerate(zip(got, exp)):
            same_exactly(a, b, f"{path}[{i}]")
    elif hasattr(exp, "__dict__") and not isinstance(exp, torch.Tensor):
        same_exactly(vars(got), vars(exp), f"{path}.__dict__")
    else:
        assert_same(got, exp, path)


def identity_agrees(fn, identities, mutate=None, inputs=PATHS):
    """Both modes convert; the result equals eager's, ``identities(result)`` (a tuple of
    ``is`` checks) equals eager's, and after ``mutate`` both results still agree."""
    for strict in (True, False):
        g = to_graph(fn, strict=strict)
        for args in inputs:
            exp = fn(*_clone(args))
            with warnings.catch_warnings():
                warnings.simplefilter("error", FallbackWarning)
                got = g(*_clone(args))
            same_exactly(got, exp)
            assert identities(got) == identities(exp), (identities(got), identities(exp))
            if mutate is not None:
                mutate(got)
                mutate(exp)
                same_exactly(got, exp, "after mutating")


# ============================================================ returned containers, shared
class Box:
    pass


def list_returned_twice_grown(x):
    lst = [x]
    if x.sum() > 0:
        lst.append(x * 2)
    return lst, lst


def list_in_dict_and_returned(x):
    lst = [x]
    d = {"l": lst, "m": [lst]}
    y = x * 2 if x.sum() > 0 else x - 1
    return d, lst, y


def object_in_list_and_dict(x):
    o = Box()
    o.v = x
    items = [o, {"k": o}]
    if x.sum() > 0:
        o.v = x * 2
    return items, o


def dict_returned_twice(x):
    d = {"a": x}
    if x.sum() > 0:
        d["a"] = x + 1
    return d, {"again": d}


def loop_grown_list_twice(x):
    out = []
    i = 0
    while i < x.abs().sum():
        out.append(x * i)
        i += 2
    return out, [out]


def list_held_by_returned_object(x):
    lst = [x]
    o = Box()
    o.items = lst
    y = x * 3 if x.sum() > 0 else x
    return o, lst, y


def test_list_returned_twice_after_growing_in_branch():
    identity_agrees(list_returned_twice_grown, lambda o: (o[0] is o[1],),
                    mutate=lambda o: o[0].append(torch.zeros(3)))


def test_list_held_by_returned_dict_and_returned():
    identity_agrees(list_in_dict_and_returned,
                    lambda o: (o[0]["l"] is o[1], o[0]["m"][0] is o[1]),
                    mutate=lambda o: o[1].append(torch.ones(3)))


def test_object_in_list_and_in_dict_and_returned():
    identity_agrees(object_in_list_and_dict,
                    lambda o: (o[0][0] is o[1], o[0][1]["k"] is o[1]),
                    mutate=lambda o: setattr(o[1], "w", 1))


def test_dict_returned_twice():
    identity_agrees(dict_returned_twice, lambda o: (o[0] is o[1]["again"],),
                    mutate=lambda o: o[0].update(b=2))


def test_loop_grown_list_returned_twice():
    identity_agrees(loop_grown_list_twice, lambda o: (o[0] is o[1][0],),
                    mutate=lambda o: o[0].clear())


def test_list_held_by_returned_object():
    identity_agrees(list_held_by_returned_object, lambda o: (o[0].items is o[1],),
                    mutate=lambda o: o[1].append(0))


def test_each_call_gets_fresh_containers():
    g = to_graph(list_in_dict_and_returned, strict=True)
    a, b = g(POS), g(POS)
    assert a[1] is not b[1] and a[0] is not b[0]


# ============================================================ changed while aliased
def alias_pair_appended(x):
    lst = [x]
    pair = (lst, lst)
    if x.sum() > 0:
        lst.append(x * 2)
    return pair


def alias_dict_holds_list(x):
    lst = [x, x]
    d = {"l": lst}
    if x.sum() > 0:
        lst[0] = x * 2
    return d


def alias_second_name(x):
    lst = [x]
    other = lst
    if x.sum() > 0:
        lst[0] = x * 2
    return other


def alias_read_inside_branch(x):
    lst = [x]
    other = lst
    if x.sum() > 0:
        lst[0] = x * 2
        y = other[0] + 1
    else:
        y = other[0] - 1
    return y


def alias_object_attribute(x):
    o = Box()
    o.items = [x]
    lst = o.items
    if x.sum() > 0:
        lst[0] = x * 2
    return o.items


def _append_if_positive(lst, x):
    if x.sum() > 0:
        lst.append(x * 2)
    return x


def alias_helper_argument(x):
    lst = [x]
    _append_if_positive(lst, x)
    return lst


def alias_in_tensor_loop(x):
    d = {"n": x}
    seen = [d]
    while x.sum() > 0:
        d["n"] = d["n"] + 1
        x = x - 2
    return seen, x


def alias_nested_list(x):
    rows = [[x]]
    first = rows[0]
    if x.sum() > 0:
        rows[0][0] = x * 2
    return first


def alias_same_list_two_variables(x):
    a = b = []
    if x.sum() > 0:
        a.append(x)
        b.append(x * 2)
    else:
        a.append(x - 1)
        b.append(x)
    return a


@pytest.mark.parametrize("fn", [alias_pair_appended, alias_dict_holds_list, alias_second_name,
                                alias_read_inside_branch, alias_object_attribute,
                                alias_helper_argument, alias_in_tensor_loop, alias_nested_list,
                                alias_same_list_two_variables])
def test_container_changed_while_another_name_reaches_it_falls_back(fn):
    falls_back(fn, *PATHS, match="also reached as")


def threaded_list_in_python_loop(x):
    out = []
    for i in range(3):
        if x[i] > 0:
            out.append(x[i] * 2)
        else:
            out.append(x[i])
    return out


def threaded_dict_in_nested_branches(x):
    d = {"s": x.sum()}
    if x[0] > 0:
        if x[1] > 0:
            d["s"] = d["s"] * 2
        else:
            d["s"] = d["s"] - 1
    return d


def rebound_not_aliased(x):
    lst = [x]
    if x.sum() > 0:
        lst = [x * 2, x]
    else:
        lst = [x, x * 3]
    return lst


@pytest.mark.parametrize("fn", [threaded_list_in_python_loop, threaded_dict_in_nested_branches,
                                rebound_not_aliased])
def test_container_threaded_through_regions_still_converts(fn):
    converts(fn, *PATHS)


# ============================================================ global random state
def seed_then_draw(x):
    torch.manual_seed(0)
    if x.sum() > 0:
        x = x + torch.randn(3)
    return x + torch.rand(3)


def seed_in_branch(x):
    if x.sum() > 0:
        torch.manual_seed(7)
    return x + torch.randn(3), torch.randn(2)


def seed_from_tensor(x):
    torch.random.manual_seed(int(x.abs().sum()))
    return torch.randn_like(x)


def state_saved_and_restored(x):
    s = torch.get_rng_state()
    a = torch.randn(3)
    if x.sum() > 0:
        torch.set_rng_state(s)
    return x + a - torch.randn(3)


def forked(x):
    with torch.random.fork_rng(devices=[]):
        a = torch.randn(3)
    return x + a, torch.randn(3)


def draws_only(x):
    y = torch.nn.functional.dropout(x, 0.5, training=True)
    if y.sum() > 0:
        y = torch.bernoulli(torch.sigmoid(y)) + torch.randn_like(y)
    while y.sum() > -1:
        y = y - torch.rand(3) - 0.5
    return y, torch.randint(0, 10, (4,))


def _random_agrees(fn, caller_seed=11):
    """Both modes convert: the results, and the caller's generator afterwards (the next
    draw), equal eager's on each call."""
    for strict in (True, False):
        g = to_graph(fn, strict=strict)
        for (x,) in PATHS:
            torch.manual_seed(caller_seed)
            exp, exp_next = fn(x.clone()), torch.rand(2)
            torch.manual_seed(caller_seed)
            with warnings.catch_warnings():
                warnings.simplefilter("error", FallbackWarning)
                got = g(x.clone())
            got_next = torch.rand(2)
            torch.testing.assert_close(got, exp, rtol=0, atol=0)
            torch.testing.assert_close(got_next, exp_next, rtol=0, atol=0)


@pytest.mark.parametrize("fn", [seed_then_draw, seed_in_branch, seed_from_tensor,
                                state_saved_and_restored, forked, draws_only])
def test_global_random_state_effects_run_every_call(fn):
    _random_agrees(fn)


def test_reseed_in_converted_helper():
    _random_agrees(helper_reseeds)


def test_graph_reseeds_on_each_run():
    g = to_graph(seed_then_draw, strict=True)
    first = g(POS)
    torch.rand(5)                                  # the caller's draws in between
    torch.testing.assert_close(g(POS), first, rtol=0, atol=0)
    assert any(n.op == "manual_seed" for n in g.graph(POS).walk())


def generator_argument(x, gen):
    if x.sum() > 0:
        x = x + torch.randn(3, generator=gen)
    return x + torch.rand(3, generator=gen)


def generator_made_inside(x):
    gen = torch.Generator().manual_seed(3)
    return x + torch.randn(3, generator=gen)


def initial_seed_read(x):
    return x * (torch.initial_seed() % 7)


def _set_seed(seed):
    torch.manual_seed(seed)


def helper_reseeds(x):
    _set_seed(3)                        # a user helper: converted, its reseed staged
    return x + torch.randn(3)


_RESEED = functools.partial(torch.manual_seed, 3)      # (not converted: runs as it is)


def library_reseeds(x):
    _RESEED()
    return x + torch.randn(3)


def fork_all_devices(x):
    with torch.random.fork_rng(devices=[0]):
        a = torch.randn(3)
    return x + a


def numpy_seeded(x):
    import numpy as np
    np.random.seed(0)
    return x + float(np.random.rand())


def test_a_generator_made_inside_converts_with_eagers_draws():
    """Its state is a graph value (``runtime/operators/traced_generators.py``): each call
    draws what eager draws, and the global generator is left as eager leaves it."""
    for strict in (True, False):
        g = to_graph(generator_made_inside, strict=strict)
        for (x,) in PATHS:
            torch.manual_seed(5)
            exp, exp_next = generator_made_inside(x.clone()), torch.rand(2)
            torch.manual_seed(5)
            with warnings.catch_warnings():
                warnings.simplefilter("error", FallbackWarning)
                got = g(x.clone())
            torch.testing.assert_close(got, exp, rtol=0, atol=0)
            torch.testing.assert_close(torch.rand(2), exp_next, rtol=0, atol=0)


@pytest.mark.parametrize("fn", [initial_seed_read, library_reseeds, fork_all_devices,
                                numpy_seeded])
def test_random_state_a_graph_cannot_repeat_falls_back(fn):
    for strict in (True, False):
        g = to_graph(fn, strict=strict)
        for (x,) in PATHS:
            torch.manual_seed(5)
            exp, exp_next = (fn(x.clone()), torch.rand(2)) if fn is not fork_all_devices \
                else (None, None)
            torch.manual_seed(5)
            if strict:
                with pytest.raises(ConversionError):
                    g(x.clone())
                continue
            with warnings.catch_warnings(record=True):
                warnings.simplefilter("always")
                try:
                    got = g(x.clone())
                except (RuntimeError, AssertionError):      # eager's own error (no CUDA)
                    assert fn is fork_all_devices
                    continue
            if exp is not None:
                torch.testing.assert_close(got, exp, rtol=0, atol=0)
                torch.testing.assert_close(torch.rand(2), exp_next, rtol=0, atol=0)


def test_generator_argument_falls_back():
    for strict in (True, False):
        g = to_graph(generator_argument, strict=strict)
        for (x,) in PATHS:
            exp = generator_argument(x, torch.Generator().manual_seed(2))
            if strict:
                with pytest.raises(ConversionError, match="torch.Generator"):
                    g(x, torch.Generator().manual_seed(2))
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FallbackWarning)
                got = g(x, torch.Generator().manual_seed(2))
            torch.testing.assert_close(got, exp, rtol=0, atol=0)


# ============================================================ printed text
@dataclasses.dataclass
class Stats:
    total: object
    count: int = 0


Pair = collections.namedtuple("Pair", "a b")


class Shown:
    def __init__(self, t):
        self.t = t

    def __repr__(self):
        return f"Shown({self.t})"


def print_size_in_branch(x):
    if x.sum() > 0:
        x = torch.cat([x, x])
        print("grew", x.shape, x.dtype, x.size(0), x.size(), x.device)
    else:
        print("kept", tuple(x.shape), [x.shape, x.dtype], {"s": x.shape})
    print(x.shape, x.size(), [x.shape[0], x.dtype], {"s": x.shape}, repr(x.shape))
    return x


def format_size_and_dtype(x):
    y = torch.cat([x, x]) if x.sum() > 0 else x
    print("{} {}".format(y.shape, y.dtype), "%s|%r" % (y.shape, y.dtype),
          f"{y.shape[0]:>4} {y.dtype!s}", sep="--", end="!\n")
    print(str(y.size()), repr(y.dtype), y.shape[-1], sep="")
    return y


def print_containers_of_tensors_and_numbers(x):
    n = 0
    y = x
    if x.sum() > 0:
        y = x * 2
        n = 3
    print([y, n], (y.sum(), 1.5), {"y": y, "n": n}, [[y], {"k": (n,)}])
    return y


@pytest.mark.parametrize("fn", [print_size_in_branch, format_size_and_dtype,
                                print_containers_of_tensors_and_numbers])
def test_printed_text_as_eager(fn, capsys):
    for strict in (True, False):
        g = to_graph(fn, strict=strict)
        for (x,) in PATHS:
            fn(x.clone())
            exp = capsys.readouterr().out
            with warnings.catch_warnings():
                warnings.simplefilter("error", FallbackWarning)
                g(x.clone())
            assert capsys.readouterr().out == exp


def print_dataclass_after_branch(x):
    s = Stats(total=x.sum())
    if x.sum() > 0:
        s.count = 2
    print(s)
    return s.count


def fstring_of_object(x):
    y = x * 2 if x.sum() > 0 else x
    return y, f"{Shown(y)!r}"


def str_of_list_of_objects(x):
    y = x * 2 if x.sum() > 0 else x
    print(str([Shown(y)]))
    return y


def print_namedtuple(x):
    y = x * 2 if x.sum() > 0 else x
    print(Pair(y, 3))
    return y


def print_ordered_dict(x):
    y = x * 2 if x.sum() > 0 else x
    print(collections.OrderedDict(a=y))
    return y


@pytest.mark.parametrize("fn", [print_dataclass_after_branch, fstring_of_object,
                                str_of_list_of_objects, print_namedtuple, print_ordered_dict])
def test_text_of_object_holding_traced_values_falls_back(fn, capsys):
    with pytest.raises(ConversionError, match="holding traced tensors|known only when"):
        to_graph(fn, strict=True)(POS)
    capsys.readouterr()
    g = to_graph(fn)
    for (x,) in PATHS:
        exp = fn(x.clone())
        exp_text = capsys.readouterr().out
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FallbackWarning)
            got = g(x.clone())
        assert capsys.readouterr().out == exp_text
        assert "%" not in exp_text and "Tensor(" not in str(got)
        same_exactly(got, exp)


def print_run_time_sizes(x):
    out = []
    while x.sum() > 0.5:
        x = x[:-1] if x.numel() > 1 else x / 2
        out.append(x.sum())
    print(x.shape, x.size(), x.size(0), x.numel(), len(out), x.dtype, sep=" | ", end=" <\n")
    print("%d items, shape %s" % (len(out), x.shape), f"{x.shape!r:>30}", f"{len(out):03d}")
    return x


def print_number_stand_ins(x):
    n = 0
    for r in x:
        if r > 0:
            n += 1
    print("n", n, [n, n + 1], (n,), {"n": n}, str(n), repr(n), sep=",")
    print(f"{n!r} {n:>3} {n:x}", "{:+d}".format(n), "%5.2f" % n)
    return x


def print_to_stderr(x):
    y = x.double() if x.sum() > 0 else x.double() * 2
    print(y.dtype, y.device, y.requires_grad, y.dim(), file=sys.stderr)
    print(y.sum(), f"{y.max():.3f}", file=sys.stdout, flush=True)
    return y


@pytest.mark.parametrize("fn", [print_run_time_sizes, print_number_stand_ins, print_to_stderr])
def test_printed_text_and_streams_as_eager(fn, capsys):
    inputs = [torch.tensor([1.0, 2.0, 3.0]), torch.tensor([-1.0, 0.2, 0.1]),
              torch.tensor([3.0, -1.0, 2.0, 5.0])]
    for strict in (True, False):
        g = to_graph(fn, strict=strict)
        for x in inputs:
            fn(x.clone())
            exp = capsys.readouterr()
            with warnings.catch_warnings():
                warnings.simplefilter("error", FallbackWarning)
                g(x.clone())
            got = capsys.readouterr()
            assert (got.out, got.err) == (exp.out, exp.err)


def print_to_buffer(x, buf):
    if x.sum() > 0:
        print("pos", x.sum(), file=buf)
    return x


def test_print_to_another_file_falls_back():
    with pytest.raises(ConversionError, match="print\\(file=...\\)"):
        to_graph(print_to_buffer, strict=True)(POS, io.StringIO())
    g = to_graph(print_to_buffer)
    for (x,) in PATHS:
        a, b = io.StringIO(), io.StringIO()
        print_to_buffer(x, a)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FallbackWarning)
            g(x, b)
        assert b.getvalue() == a.getvalue()


_DROP = torch.nn.Dropout(0.3).train()


def dropout_module_in_tensor_loop(x):
    i = 0
    while x.sum() > 0 and i < 4:
        x = _DROP(x) - 0.5
        i += 1
    return x


def inplace_and_factory_draws_per_path(x):
    y = torch.empty(5).uniform_(-1, 1)
    if x.sum() > 0:
        y = y[torch.randperm(5)]
    else:
        y = y + torch.multinomial(torch.ones(5), 3, replacement=True).sum()
    return y, torch.normal(0.0, 1.0, (2,))


def reseed_in_tensor_loop(x):
    torch.manual_seed(int(x.abs().sum()) + 1)
    for r in x:
        if r > 0:
            torch.manual_seed(2)
        x = x + torch.rand(1)
    return x


@pytest.mark.parametrize("fn", [dropout_module_in_tensor_loop, inplace_and_factory_draws_per_path,
                                reseed_in_tensor_loop])
def test_random_draws_in_tensor_control_flow_follow_the_caller_generator(fn):
    _random_agrees(fn, caller_seed=3)


# ============================================================ dict key order per path
def keys_in_branch_order(x):
    d = {"a": x}
    if x.sum() > 0:
        d["c"] = x * 2
        d["b"] = x
    else:
        d["b"] = x - 1
        d["c"] = x
    return d


def keys_rebuilt_per_branch(x):
    if x.sum() > 0:
        d = {"y": x, "x": x * 2}
    else:
        d = {"x": x, "y": x * 3}
    return {"inner": d, "n": 1}


@pytest.mark.parametrize("fn", [keys_in_branch_order, keys_rebuilt_per_branch])
def test_dict_key_order_is_eager_order_per_path(fn):
    identity_agrees(fn, lambda o: ())          # (same_exactly compares the key order)
