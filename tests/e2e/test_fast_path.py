"""The per-call fast path of ``GraphFunction.__call__``: a flat key for positional CPU
tensors and Python scalars, the compiled guard, and generated code that returns the output
structure. Every call is checked against eager, and each test checks that the fast path
was really taken (an entry under the flat key) or really left (a new trace).
"""
import collections
import copy
import math
import warnings

import pytest
import torch

from e2e_helpers import assert_same
from runtime.options import options
from transpiler import to_graph


@pytest.fixture(scope="module", autouse=True)
def kernel_cache(suite_kernel_cache):
    with options.override(cache_dir=suite_kernel_cache):
        yield


def fast(f):
    """The number of signatures the fast path knows."""
    return len(f._fast)


def traces(f):
    return len(f._history)


# ------------------------------------------------------------------------- repeated calls
def affine(x, s):
    return torch.tanh(x * s + 1.0) - s


def test_repeated_calls_take_the_fast_path():
    f = to_graph(affine, strict=True)
    for seed in range(5):
        x = torch.randn(4, 5, generator=torch.Generator().manual_seed(seed))
        assert_same(f(x, 2.0), affine(x, 2.0))
    assert traces(f) == 1 and fast(f) == 1


def test_changed_scalar_retraces():
    f = to_graph(affine, strict=True)
    x = torch.randn(3, 3)
    assert_same(f(x, 2.0), affine(x, 2.0))
    assert_same(f(x, 3.0), affine(x, 3.0))
    assert_same(f(x, 2.0), affine(x, 2.0))
    assert traces(f) == 2 and fast(f) == 2


def kinds(x, s):
    return x * s, type(s).__name__, s / 2


def test_int_float_bool_are_distinct_signatures():
    f = to_graph(kinds, strict=True)
    x = torch.arange(3)
    for s in (1, 1.0, True, 1, True, 1.0):
        assert_same(f(x, s), kinds(x, s))
    assert traces(f) == 3


def signed(x, s):
    return x * math.copysign(1.0, s)


def test_negative_zero_scalar_is_its_own_signature():
    f = to_graph(signed, strict=True)
    x = torch.arange(1.0, 4.0)
    assert_same(f(x, 0.0), signed(x, 0.0))
    assert_same(f(x, -0.0), signed(x, -0.0))


def test_tensor_shape_dtype_requires_grad_are_keys():
    f = to_graph(affine, strict=True)
    x = torch.randn(3, 4)
    f(x, 2.0)
    f(x.double(), 2.0)
    f(torch.randn(4, 3), 2.0)
    got = f(x.clone().requires_grad_(), 2.0)
    assert got.requires_grad
    got2 = f(x, 2.0)
    assert not got2.requires_grad
    assert traces(f) == 4 and fast(f) == 4


def test_requires_grad_on_and_off_gives_eager_gradients():
    f = to_graph(affine, strict=True)
    x = torch.randn(3, 4)
    assert_same(f(x, 2.0), affine(x, 2.0))
    xg, xe = x.clone().requires_grad_(), x.clone().requires_grad_()
    f(xg, 2.0).sum().backward()
    affine(xe, 2.0).sum().backward()
    assert_same(xg.grad, xe.grad)
    assert not f(x, 2.0).requires_grad


# ------------------------------------------------------------------------ guards
G = torch.ones(3)
N = 2.0


def reads_globals(x):
    return x + G * 2.0 + N


def test_global_changes_are_seen():
    global G, N
    old = G, N
    try:
        f = to_graph(reads_globals, strict=True)
        x = torch.arange(3.0)
        assert_same(f(x), reads_globals(x))
        G.mul_(3.0)                                   # mutated in place
        assert_same(f(x), reads_globals(x))
        G = torch.zeros(3)                            # rebound
        assert_same(f(x), reads_globals(x))
        N = 5.0                                       # a global number
        assert_same(f(x), reads_globals(x))
        assert traces(f) == 3
    finally:
        G, N = old


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(6, 6)
        self.bn = torch.nn.BatchNorm1d(6)
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.bn(self.lin(x)))


def test_train_eval_switch_follows_eager():
    torch.manual_seed(0)
    net = Net()
    ref = copy.deepcopy(net)
    f = to_graph(net, strict=True)
    x = torch.randn(8, 6)
    with torch.no_grad():
        net.eval(), ref.eval()
        assert_same(f(x), ref(x))
        assert_same(f(x), ref(x))
        net.train(), ref.train()
        torch.manual_seed(1)
        got = f(x)
        torch.manual_seed(1)
        exp = ref(x)
        assert_same(got, exp)
        assert (got == 0).any()                       # dropout ran
        assert_same(net.bn.running_mean, ref.bn.running_mean)
        net.eval(), ref.eval()
        assert_same(f(x), ref(x))
    assert traces(f) == 2


# ---------------------------------------------------------------- kwargs and containers
def takes_containers(xs, pair, table, scale=1.0):
    return xs[0] + xs[1] * scale, pair[0] - pair[1], table["a"] * table["b"]


def test_kwargs_and_containers():
    f = to_graph(takes_containers, strict=True)
    a, b = torch.randn(3), torch.randn(3)
    for _ in range(2):
        assert_same(f([a, b], (b, a), {"a": a, "b": b}),
                    takes_containers([a, b], (b, a), {"a": a, "b": b}))
        assert_same(f([a, b], (b, a), table={"a": b, "b": a}, scale=3.0),
                    takes_containers([a, b], (b, a), table={"a": b, "b": a}, scale=3.0))
    assert fast(f) == 0                               # containers take the full path
    assert traces(f) == 2


def structured(x):
    return [x + 1.0, {"k": x * 2.0, "n": 3}], (x,)


def test_outputs_are_fresh_containers():
    f = to_graph(structured, strict=True)
    x = torch.randn(3)
    first = f(x)
    first[0].append("junk")
    first[0][1]["k"] = None
    first[0][1]["extra"] = 1
    second = f(x)
    assert_same(second, structured(x))
    assert first[0] is not second[0] and first[0][1] is not second[0][1]
    assert fast(f) == 1


def returns_none(x):
    x + 1.0


def returns_number(x):
    return 3.5


Pair = collections.namedtuple("Pair", "a b")


def returns_namedtuple(x):
    return Pair(x + 1.0, {"k": [x * 2.0, None, 3, (x,)]})


@pytest.mark.parametrize("fn", [returns_none, returns_number, returns_namedtuple, structured])
def test_returned_structures(fn):
    f = to_graph(fn, strict=True)
    x = torch.randn(2, 3)
    for _ in range(3):
        assert_same(f(x), fn(x))
    got = f(x)
    if fn is returns_namedtuple:
        assert type(got) is Pair


def grow(x):
    out = []
    while x.sum() < 10.0:
        x = x + 1.0
        out.append(x * 2.0)
    return out


def test_list_grown_in_tensor_loop():
    f = to_graph(grow, strict=True)
    for start in (0.0, -3.0, 30.0, 0.0):
        x = torch.arange(3.0) + start
        got = f(x)
        assert type(got) is list
        assert_same(got, grow(x))
    assert traces(f) == 1


# ------------------------------------------------------------------------ errors, subclasses
def checked(x):
    assert x.sum() > 0, "must be positive"
    return x * 2.0


def test_runtime_error_points_at_user_line():
    f = to_graph(checked, strict=True)
    x = torch.ones(3)
    assert_same(f(x), checked(x))
    line = checked.__code__.co_firstlineno + 1
    with pytest.raises(AssertionError) as info:
        f(-x)                                        # the fast path, failing inside the graph
    assert str(info.value) == "must be positive"                 # eager's text, exactly
    assert f"{__file__}:{line}" in "".join(info.value.__notes__)   # where, in a note
    assert getattr(info.value, "location", None) is not None
    assert_same(f(x), checked(x))                    # still usable afterwards


def test_parameter_arguments():
    f = to_graph(affine, strict=True)
    p = torch.nn.Parameter(torch.randn(3, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = f(p, 2.0)
        got2 = f(p, 2.0)
    exp = affine(p, 2.0)
    assert_same(got, exp)
    assert_same(got2, exp)
    got.sum().backward()
    g = p.grad.clone()
    p.grad = None
    exp.sum().backward()
    assert_same(g, p.grad)
    x = torch.randn(3, 4)
    assert_same(f(x, 2.0), affine(x, 2.0))           # a plain tensor after the Parameter
