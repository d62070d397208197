"""A size a shape-generic graph serves often gets its own static graph (transpiler.hot_shapes).

After a second size makes a converted function dynamic, its graph keeps sizes as values and
loses the kernels that need concrete sizes (the RNN's loop ran at 0.26x eager). Calls at one
size that have spent as long as the dynamic trace took trace that size static: these tests
set the budget to 0 (every size is due at its first call on the dynamic graph) or keep it
huge (never), and check which graph served, that it is the graph a fresh ``to_graph`` builds
at that size, and that every result equals eager's over size sequences with 0 and 1.
"""
from __future__ import annotations

import collections
import warnings

import pytest
import torch

from runtime.options import options
from transpiler import FallbackWarning, hot_shapes, to_graph
from tests.e2e.e2e_helpers import assert_same


def _g(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def rnn_for(xs, h, w_ih, w_hh, bias):
    for xt in xs:
        h = torch.tanh(xt @ w_ih + h @ w_hh + bias)
    return h


def newton(x):
    y = 0.5 * (x + 1.0)
    while (torch.abs(y * y - x) / x > 1e-5).any():     # (size 0: no iteration)
        y = 0.5 * (y + x / y)
    return y


def norm_softmax(x, gamma):
    mean = x.mean(dim=-1, keepdim=True)
    h = (x - mean) / torch.sqrt(((x - mean) ** 2).mean(dim=-1, keepdim=True) + 1e-5) * gamma
    if h.sum() > 0:
        h = h * 2
    return torch.softmax(h, dim=-1)


def _rnn(b, hidden, steps=4, grad=False, seed=0):
    scale = max(hidden, 1) ** -0.5
    ws = [_g(hidden, hidden, seed=seed + 1) * scale, _g(hidden, hidden, seed=seed + 2) * scale, _g(hidden, seed=seed + 3) * 0.1]
    return (_g(steps, b, hidden, seed=seed), torch.zeros(b, hidden),
            *[w.requires_grad_(grad) for w in ws])


def _newton(n, seed=0):
    return (_g(n, seed=seed).abs() + 0.5,)


def _norm(rows, seed=0):
    return (_g(rows, 8, seed=seed), _g(8, seed=seed + 1))


CASES = [(rnn_for, lambda n: _rnn(1, n)),
         (rnn_for, lambda n: _rnn(n, 8)),
         (newton, _newton),
         (norm_softmax, _norm)]
IDS = ["rnn_hidden", "rnn_batch", "newton", "norm_softmax"]


@pytest.fixture(scope="module", autouse=True)
def kernel_cache(suite_kernel_cache):
    """Each hidden size builds its loop kernels: compiled once, in the suite's cache."""
    with options.override(cache_dir=suite_kernel_cache):
        yield


@pytest.fixture
def budget(monkeypatch):
    def set_(value):
        monkeypatch.setattr(hot_shapes, "BUDGET", value)
    return set_


def _static_entries(g):
    return [e for e in g._entries.values() if not hasattr(e, "hot_sizes")]


def _dynamic(g):
    return [e for e in g._entries.values() if hasattr(e, "hot_sizes")]


def _ops(entry):
    return collections.Counter(n.op for n in entry.optimized.walk())


@pytest.mark.parametrize("fn, make, strict", [c + (i % 2 == 1,) for i, c in enumerate(CASES)],
                         ids=IDS)
def test_sizes_due_are_traced_static_and_equal_eager(fn, make, strict, budget):
    budget(0)
    g = to_graph(fn, strict=strict)
    sizes = [3, 5, 5, 0, 1, 6, 2, 2]
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        for i, n in enumerate(sizes):
            args = make(n)
            assert_same(g(*args), fn(*args), f"size {n} call {i}")
    dyn = _dynamic(g)
    assert len(dyn) == 1
    # every size the dynamic graph served (0/1 have static graphs of their own) is due,
    # and traced static at its next call: 6 was called once
    assert len(dyn[0].hot_done) == 3 and len(dyn[0].hot_due) == 1
    assert g.cache_info().traces == 6               # 3, dynamic, 0, 1, then 5 and 2
    # the promoted graph is the one a fresh to_graph builds at that size
    for n in (5,):
        args = make(n)
        fresh = to_graph(fn, strict=strict)
        fresh(*args)
        assert _ops(g.get_concrete(*args)) == _ops(fresh.get_concrete(*args))
        assert not hasattr(g.get_concrete(*args), "hot_sizes")


@pytest.mark.parametrize("fn, make", CASES, ids=IDS)
def test_no_size_is_due_under_a_large_budget(fn, make, budget):
    budget(1e9)
    g = to_graph(fn)
    for n in [3, 5, 7, 7, 7, 9, 9, 9, 9, 4]:
        args = make(n)
        assert_same(g(*args), fn(*args), f"size {n}")
    assert g.cache_info().traces == 2               # the first static graph and the dynamic
    assert not _dynamic(g)[0].hot_done
    assert len(_static_entries(g)) == 1


@pytest.mark.parametrize("dynamic", [True, {"x": [0]}])
def test_an_explicit_dynamic_option_keeps_one_graph(dynamic, budget):
    """``dynamic=`` asks for one shape-generic graph: no size is promoted, however hot."""
    budget(0)
    g = to_graph(newton, dynamic=dynamic)
    for n in [3, 5, 5, 5, 7, 7, 7]:
        args = _newton(n)
        assert_same(g(*args), newton(*args), f"size {n}")
    assert g.cache_info().traces == 1
    assert len(g._entries.values()) == 1 and not _dynamic(g)   # never watched


def test_promoted_graph_serves_new_values_and_gradients(budget):
    """Values are not baked in at the promoted trace: other inputs at the hot size, and the
    gradients of the weights, equal eager's."""
    budget(0)
    g = to_graph(rnn_for)
    for hidden in (4, 8, 12, 12, 12):
        g(*_rnn(2, hidden))
    assert len(_static_entries(g)) == 2              # hidden 4 (first) and 12 (promoted)
    for seed in (10, 20):
        args = _rnn(2, 12, grad=True, seed=seed)
        ref = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
        out, want = g(*args), rnn_for(*ref)
        assert_same(out, want)
        out.pow(2).mean().backward()
        want.pow(2).mean().backward()
        for a, r in zip(args[2:], ref[2:]):
            assert torch.allclose(a.grad, r.grad, atol=1e-6, rtol=1e-5)


def test_fast_path_calls_are_timed_and_unlinked_once_due(budget):
    """The dynamic graph's fast-path keys are dropped when a size becomes due, so the next
    call reaches the full path and traces; other sizes keep being served by the dynamic
    graph (their fast keys come back)."""
    budget(1e9)
    g = to_graph(newton)
    for n in (3, 5, 6, 6, 6):
        g(*_newton(n))
    dyn = _dynamic(g)[0]
    assert dyn in g._fast.values()                      # timed on the fast path too
    assert set(dyn.hot_sizes) == {(5,), (6,)}
    budget(0)
    g2 = to_graph(newton)
    for n in (3, 5, 6):
        g2(*_newton(n))
    assert all(e is not _dynamic(g2)[0] for e in g2._fast.values())
    traces = g2.cache_info().traces
    assert_same(g2(*_newton(6, seed=4)), newton(*_newton(6, seed=4)))
    assert g2.cache_info().traces == traces + 1
    assert_same(g2(*_newton(6, seed=5)), newton(*_newton(6, seed=5)))
    assert g2.cache_info().traces == traces + 1        # served by the static graph now


def _size_dependent(x):
    n = x.shape[0]
    if n > 6:                                   # a Python branch on a dynamic size
        return x * 2
    return x - 1


def test_a_static_trace_that_fails_keeps_the_dynamic_graph(budget, monkeypatch):
    """The promoted trace failing neither falls back nor raises (strict mode too): the
    dynamic graph goes on serving that size, and it is not tried again."""
    budget(0)
    g = to_graph(newton, strict=True)
    g(*_newton(3)), g(*_newton(5))
    real = g._trace

    def failing(args, kwargs, flat, spec, dynamic=None):
        if not dynamic:
            raise RuntimeError("no static trace")
        return real(args, kwargs, flat, spec, dynamic)
    monkeypatch.setattr(g, "_trace", failing)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        for seed in range(4):
            args = _newton(7, seed=seed)
            assert_same(g(*args), newton(*args))
    assert g.cache_info().fallbacks == 0
    assert (7,) in _dynamic(g)[0].hot_done and (7,) not in _dynamic(g)[0].hot_due


def test_tracked_sizes_are_bounded(budget, monkeypatch):
    budget(1e9)
    monkeypatch.setattr(hot_shapes, "TRACKED", 4)
    g = to_graph(newton)
    for n in range(3, 15):
        g(*_newton(n))
    assert len(_dynamic(g)[0].hot_sizes) <= 4



@pytest.mark.parametrize("limit, most", [(None, 3), (8, 2)])
def test_promotions_are_bounded(budget, monkeypatch, limit, most):
    """At most PROMOTED static graphs per function (and a quarter of its cache limit): the
    sizes after that stay on the dynamic graph, equal to eager, without evicting it."""
    budget(0)
    monkeypatch.setattr(hot_shapes, "PROMOTED", 3)
    g = to_graph(newton, cache_limit=limit)
    for n in (3, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9):
        args = _newton(n, seed=n)
        assert_same(g(*args), newton(*args), f"size {n}")
    assert g.cache_info().traces == 2 + most
    assert g.cache_info().evictions == 0 and len(_dynamic(g)) == 1
    # with no promotion left, the dynamic graph's calls are no longer timed
    dyn = _dynamic(g)[0]
    assert dyn.fn.__name__ != "timed"
    spent = dict(dyn.hot_sizes)
    args = _newton(11, seed=11)
    assert_same(g(*args), newton(*args), "size 11")
    assert dyn.hot_sizes == spent
