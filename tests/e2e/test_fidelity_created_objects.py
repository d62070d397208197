"""Objects a call makes and returns, and class-level structures a trace reads through
``type(self)``: what Hugging Face models do with their caches and class attributes.

- A cache object made inside the call, holding lists of per-layer objects whose tensors
  grow, reached by converted code's own functions (a comprehension, a branch body): it is
  the call's, not state from before it, so it is rebuilt per call with real tensors (was:
  "existed before the call and now holds a traced tensor", a fallback).
- Such an object passed back in and grown by the function: the caller's object must end up
  as eager leaves it (reproduced, or a clean fallback), never holding trace values.
- A class attribute nested past the guard's depth that the traced code never names (a
  model class's ``config_class`` holding nested plans) does not make the call fall back; one
  it names, directly, by a string, or from a property, still does; a changed shallow class
  attribute read through ``type(self)`` retraces.
"""
import warnings

import pytest
import torch

from e2e_helpers import assert_same
from transpiler import ConversionError, FallbackWarning, to_graph


class Layer:
    def __init__(self):
        self.keys = []
        self.last = None

    def update(self, k):
        self.keys.append(k)
        self.last = k if self.last is None else torch.cat([self.last, k], 0)
        return self.last


class Cache:
    def __init__(self, n):
        self.layers = [Layer() for _ in range(n)]
        self.seen = 0

    def update(self, k, i):
        self.seen += 1
        return self.layers[i].update(k)


def made_in_comprehension(x):
    cache = Cache(2)
    outs = [cache.update(x * (i + 1), i) for i in range(2)]
    y = outs[0] + 1 if x.sum() > 0 else outs[1] - 1
    return y, cache


def made_in_branch_body(x):
    cache = Cache(2)
    for i in range(2):
        cache.update(x + i, i)
    if x.sum() > 0:
        y = cache.layers[0].last * 2
    else:
        y = cache.layers[1].last * 3
    return {"y": y, "cache": cache}


def grown_in_loop(x):
    cache = Cache(1)
    h = x
    for _ in range(3):
        h = torch.tanh(h)
        cache.update(h, 0)
    return cache, [layer.keys for layer in cache.layers]


def returned_twice(x):
    cache = Cache(1)
    cache.update(x, 0)
    pair = [cache.update(x * 2, 0) for _ in range(1)]
    return cache, cache.layers[0], pair


CREATED = [made_in_comprehension, made_in_branch_body, grown_in_loop, returned_twice]


def _same(got, exp, path="out"):
    """``assert_same``, and into objects: same class, same attributes."""
    if hasattr(exp, "__dict__") and not isinstance(exp, (torch.Tensor, type)):
        assert type(got) is type(exp), f"{path}: {type(got).__name__} != {type(exp).__name__}"
        assert got is not exp, f"{path}: the same object as eager's"
        assert set(vars(got)) == set(vars(exp)), f"{path}: attributes differ"
        for k in vars(exp):
            _same(vars(got)[k], vars(exp)[k], f"{path}.{k}")
    elif isinstance(exp, (list, tuple)) and not isinstance(exp, torch.Size):
        assert type(got) is type(exp) and len(got) == len(exp), f"{path}: {got!r}"
        for i, (a, b) in enumerate(zip(got, exp)):
            _same(a, b, f"{path}[{i}]")
    elif isinstance(exp, dict):
        assert type(got) is type(exp) and set(got) == set(exp), f"{path}: {got!r}"
        for k in exp:
            _same(got[k], exp[k], f"{path}[{k!r}]")
    else:
        assert_same(got, exp, path)


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "default"])
@pytest.mark.parametrize("fn", CREATED, ids=lambda f: f.__name__)
def test_created_object_rebuilt_per_call(fn, strict):
    g = to_graph(fn, strict=strict)
    results = []
    for x in (torch.tensor([1.0, 2.0]), torch.tensor([-3.0, 0.5]), torch.tensor([0.25, 4.0])):
        exp = fn(x.clone())
        with warnings.catch_warnings():
            warnings.simplefilter("error", FallbackWarning)
            got = g(x.clone())
        _same(got, exp)
        results.append(got)
    assert results[0] is not results[1]            # a fresh object each call
    if fn is returned_twice:                        # held twice: one object, as in eager
        cache, layer, _ = results[-1]
        assert cache.layers[0] is layer


def test_created_object_gradients():
    def fn(x):
        cache = Cache(2)
        outs = [cache.update(x * (i + 1), i) for i in range(2)]
        return (outs[0] * outs[1]).sum() if x.sum() > 0 else outs[1].sum(), cache
    g = to_graph(fn, strict=True)
    for v in ([1.0, 2.0], [-1.0, 0.5]):
        xe = torch.tensor(v, requires_grad=True)
        xg = torch.tensor(v, requires_grad=True)
        (le, ce), (lg, cg) = fn(xe), g(xg)
        le.backward()
        lg.backward()
        _same(cg.layers[1].last.detach(), ce.layers[1].last.detach())
        assert cg.layers[1].last.requires_grad == ce.layers[1].last.requires_grad
        torch.testing.assert_close(xg.grad, xe.grad)


def grows_caller_cache(x, cache):
    y = cache.update(x, 0)
    return (y.sum() if x.sum() > 0 else -y.sum()), cache


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "default"])
def test_cache_passed_in_and_grown(strict):
    """The caller's object grown by the call: eager's result and eager's cache (a
    reproduction or a clean fallback), never trace values left in the caller's object."""
    g = to_graph(grows_caller_cache, strict=strict)
    mine, theirs = Cache(1), Cache(1)
    for x in (torch.tensor([1.0, 2.0]), torch.tensor([-1.0, 3.0]), torch.tensor([2.0, 2.0])):
        exp = grows_caller_cache(x.clone(), theirs)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FallbackWarning)
                got = g(x.clone(), mine)
        except ConversionError:
            assert strict
            got = grows_caller_cache(x.clone(), mine)
        assert got[1] is mine
        _same(got[0], exp[0])
        _same(mine.layers[0], theirs.layers[0])
        assert mine.seen == theirs.seen


# --------------------------------------------------------------------------- class level
class Plans:
    """A library config class: plans nested past the guard's depth, never read by forward."""
    pp_plan = {"layers": ([["hidden_states", ["mask"]]], ["out"])}
    eps = 1e-3


class Net(torch.nn.Module):
    config_class = Plans                       # read by no traced code
    SCALE = 2.0

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        y = self.lin(x) * type(self).SCALE
        return y + 1 if y.sum() > 0 else y - 1


class NetNamesDeep(Net):
    TABLE = [[[[[1.0]]]]]

    def forward(self, x):
        return x * type(self).TABLE[0][0][0][0][0]


class NetGetattrDeep(NetNamesDeep):
    def forward(self, x):
        return x * getattr(type(self), "TABLE")[0][0][0][0][0]


class NetPropertyDeep(NetNamesDeep):
    @property
    def factor(self):
        return type(self).TABLE[0][0][0][0][0]

    def forward(self, x):
        return x * self.factor


def _inputs():
    return [torch.tensor([[1.0, 2.0, 3.0]]), torch.tensor([[-4.0, 0.5, 1.0], [2.0, 2.0, 2.0]])]


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "default"])
def test_unread_deep_class_attribute_converts(strict):
    torch.manual_seed(0)
    m = Net()
    g = to_graph(m, strict=strict)
    for step in range(3):
        if step == 2:
            Net.SCALE = 3.0                    # read through type(self): must retrace
        for x in _inputs():
            with warnings.catch_warnings():
                warnings.simplefilter("error", FallbackWarning)
                got = g(x)
            _same(got, m(x))
    Net.SCALE = 2.0


@pytest.mark.parametrize("cls", [NetNamesDeep, NetGetattrDeep, NetPropertyDeep],
                         ids=lambda c: c.__name__)
def test_read_deep_class_attribute_never_stale(cls):
    """A deep class structure the trace does read: a change deep inside between calls
    must show (the call falls back, or the guard sees it), never the old value."""
    m = cls()
    g = to_graph(m)
    for value in (1.0, 5.0, -2.0):
        cls.TABLE[0][0][0][0][0] = value
        for x in _inputs():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FallbackWarning)
                got = g(x)
            _same(got, m(x))
    with pytest.raises(ConversionError):
        to_graph(cls(), strict=True)(_inputs()[0])
    cls.TABLE[0][0][0][0][0] = 1.0
