"""RetracingWarning (issue 14, item 4): at the caller's line, once per function and reason,
saying what changed and what to do for that change (``transpiler/retracing.py``).

Reasons: a Python number (pass it as a tensor), a tensor's shape (``dynamic=``), an object
argument, a global the trace read (named), a tensor's dtype, the arguments' structure.
Train/eval, grad mode and default-dtype changes never warn (one trace each is expected),
nor do re-traces of signatures dropped for the cache limit (``CacheLimitWarning`` says
that, once). Every call is checked against eager.
"""
import contextlib
import warnings

import pytest
import torch

from runtime.options import options
from tests.e2e.e2e_helpers import assert_same
from transpiler import RetracingWarning, to_graph
from transpiler.retracing import WARN_AFTER, CacheLimitWarning


@pytest.fixture(scope="module", autouse=True)
def no_kernels():
    with options.override(compiler=False):     # (the graphs are tiny: no C compile time)
        yield


@contextlib.contextmanager
def recorded():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught


def retracing(caught, exact=True):
    return [w for w in caught if (w.category is RetracingWarning if exact else
                                  issubclass(w.category, RetracingWarning))]


def scaled(x, n):
    if x.sum() > 0:
        return x * n
    return x - n


X = torch.tensor([1.0, 2.0, 3.0])


# ------------------------------------------------------------------------- where, how often
@pytest.mark.parametrize("strict", [False, True])
def test_python_value_warns_once_at_the_callers_line(strict):
    g = to_graph(scaled, strict=strict)
    with recorded() as caught:
        for n in range(12):
            assert_same(g(X, n), scaled(X, n)); line = _line()      # noqa: E702
    (w,) = retracing(caught)
    assert (w.filename, w.lineno) == (__file__, line)
    text = str(w.message)
    assert f"n: {WARN_AFTER - 1} -> {WARN_AFTER}" in text and "as a tensor" in text
    assert g.cache_info().traces == 12


def _line():
    import sys
    return sys._getframe(1).f_lineno


class Scaler(torch.nn.Module):
    def forward(self, x, n):
        if x.sum() > 0:
            return x * n
        return x


def test_module_in_a_container_warns_at_the_callers_line():
    inner = to_graph(Scaler())
    outer = torch.nn.ModuleList([inner])        # called through torch's frames
    with recorded() as caught:
        for n in range(8):
            assert_same(outer[0](X, float(n)), Scaler()(X, float(n))); line = _line()  # noqa
    (w,) = retracing(caught)
    assert (w.filename, w.lineno) == (__file__, line)


def test_each_reason_once():
    g = to_graph(scaled, dynamic=False)
    with recorded() as caught:
        for n in range(10):                                  # numbers
            assert_same(g(X, n), scaled(X, n))
        for b in range(2, 10):                               # shapes (dynamic=False)
            x = torch.ones(b, 2)
            assert_same(g(x, 1), scaled(x, 1))
        for dtype in (torch.float64, torch.float16, torch.bfloat16, torch.int32,
                      torch.int64, torch.float32):           # tensor dtypes
            x = X.to(dtype)
            assert_same(g(x, 1), scaled(x, 1))
    texts = [str(w.message) for w in retracing(caught)]
    assert len(texts) == 3, texts
    values, shapes, dtypes = texts
    assert "n: 3 -> 4" in values and "torch.tensor(n)" in values
    assert "x: shape" in shapes and "dynamic={'x': [0]}" in shapes
    assert "Automatic dynamic shapes" in shapes
    assert "x: dtype" in dtypes and "one dtype" in dtypes


def test_shape_advice_names_the_changing_dims():
    def f(x, y):
        return (x * 2).sum() + y.sum()

    g = to_graph(f, dynamic=False)
    with recorded() as caught:
        for s in range(2, 8):
            x, y = torch.ones(3, s, 4), torch.ones(s)
            assert_same(g(x, y), f(x, y))
    (w,) = retracing(caught)
    assert "dynamic={'x': [1], 'y': [0]}" in str(w.message)


# ------------------------------------------------------------------------- objects and state
class Config:
    def __init__(self, k):
        self.k = k


def test_object_argument():
    def f(x, cfg):
        return x * cfg.k

    g = to_graph(f)
    with recorded() as caught:
        for k in range(6):
            cfg = Config(float(k))
            assert_same(g(X, cfg), f(X, cfg))
    (w,) = retracing(caught)
    assert "cfg: another Config object" in str(w.message)
    assert "same object" in str(w.message)


FACTOR = 1.0


def by_global(x):
    if x.sum() > 0:
        return x * FACTOR
    return x


def test_global_read_by_the_trace_is_named():
    global FACTOR
    g = to_graph(by_global, strict=True)
    try:
        with recorded() as caught:
            for k in range(7):
                FACTOR = float(k)
                assert_same(g(X), by_global(X))
    finally:
        FACTOR = 1.0
    (w,) = retracing(caught)
    text = str(w.message)
    assert "Python state the last trace read changed" in text and "'FACTOR'" in text
    assert "as an argument" in text
    assert g.cache_info().entries == 1


def test_structure():
    def f(xs):
        return sum(xs)

    g = to_graph(f)
    with recorded() as caught:
        for n in range(1, 8):
            xs = [X * i for i in range(n)]
            assert_same(g(xs), f(xs))
    (w,) = retracing(caught)
    assert "structure of the arguments changed" in str(w.message)
    assert "stacked tensor" in str(w.message)


# ------------------------------------------------------------------------- never warned
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, 3)
        self.drop = torch.nn.Dropout(0.0)

    def forward(self, x):
        return self.drop(self.fc(x))


def test_modes_never_warn():
    torch.manual_seed(0)
    net = Net()
    m = to_graph(net)
    x = torch.randn(2, 3)
    old = torch.get_default_dtype()
    with recorded() as caught:
        try:
            for _ in range(2):
                for dtype in (torch.float32, torch.float64):
                    torch.set_default_dtype(dtype)
                    for training in (True, False):
                        net.train(training)
                        for grad in (True, False):
                            with torch.set_grad_enabled(grad):
                                assert_same(m(x), net(x))
        finally:
            torch.set_default_dtype(old)
            net.train()
    assert not retracing(caught, exact=False)
    assert m.cache_info().traces == 8


def test_evicted_signatures_warn_only_the_cache_limit():
    g = to_graph(scaled, cache_limit=2)
    with recorded() as caught:
        for _ in range(4):
            for n in (1, 2, 3):                      # 3 signatures, room for 2: all re-traced
                assert_same(g(X, n), scaled(X, n))
    kinds = [w.category for w in retracing(caught, exact=False)]
    assert kinds == [CacheLimitWarning]
    assert g.cache_info().traces == 12
