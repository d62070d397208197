"""Loops whose steps run in C (kernels/loop_driver.py) at many sizes, against eager.

The RNN ``for xt in xs`` (a counted loop whose body is one kernel: ``KernelLoop``) and
Newton's ``while`` (test and body one kernel each: ``KernelWhile``) at sizes the benchmark
suite does not use: batch 1, hidden 1, 0 and 1 steps, non-contiguous inputs, float64, in
strict and default mode, on two input sets (a value baked at trace time would show). A spy
on the driver checks the C loop really ran where it should; the same loops with the driver
off (the Python loop of direct calls) and in small chunks give bit-identical results.
Newton's two-kernel steps are checked with ``while_step``'s fused step off (it has its own
tests: ``test_while_step.py``).
"""
import warnings

import pytest
import torch

from runtime.kernels import compiler, loop_driver, while_step
from runtime.kernels.loop import KernelWhile
from tests.runtime.loop_programs import newton, newton_steps, rnn
from transpiler import to_graph

HAS_CC = compiler.compiler_available()

pytestmark = pytest.mark.usefixtures("module_kernel_cache")


def rnn_relu_range(xs, h, W, U, b):
    for t in range(xs.shape[0]):
        h = torch.relu(xs[t] @ W + h @ U + b) * 0.5
    return h


def rnn_inputs(T, B, F, H, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(T, B, F, generator=g, dtype=dtype),
            torch.randn(B, H, generator=g, dtype=dtype) * 0.1,
            torch.randn(F, H, generator=g, dtype=dtype) * F ** -0.5,
            torch.randn(H, H, generator=g, dtype=dtype) * H ** -0.5,
            torch.randn(H, generator=g, dtype=dtype) * 0.1)


def positives(n, seed, high=100.0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(n, generator=g, dtype=dtype) * (high - 0.5) + 0.5,)


class Spy:
    """Counts the C loops run through ``loop_driver.counted`` / ``while_`` and
    ``while_step``'s fused steps (``fused``: the runs it served)."""

    def __init__(self, monkeypatch):
        self.calls = {"counted": 0, "while_": 0, "fused": 0}
        for name in ("counted", "while_"):
            real = getattr(loop_driver, name)

            def wrapped(*a, _real=real, _name=name, **k):
                self.calls[_name] += 1
                return _real(*a, **k)
            monkeypatch.setattr(loop_driver, name, wrapped)
        real_run = while_step.FusedStep.run

        def run(step, *a, **k):
            done = real_run(step, *a, **k)
            self.calls["fused"] += done is not None
            return done
        monkeypatch.setattr(while_step.FusedStep, "run", run)


def compare(fn, arg_sets, strict=True, g=None, tol=1e-5):
    g = g or to_graph(fn, strict=strict)
    for args in arg_sets:
        exp = fn(*[a.clone() for a in args])
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            got = g(*args)
        assert got.dtype == exp.dtype and got.shape == exp.shape
        torch.testing.assert_close(got, exp, rtol=tol, atol=tol, equal_nan=True)
    return g


RNN_SIZES = [(50, 32, 64, 64), (50, 1, 16, 16), (50, 64, 64, 64), (6, 1, 64, 256),
             (9, 3, 5, 72), (5, 4, 8, 1), (1, 4, 8, 16), (2, 4, 8, 16), (0, 4, 8, 16),
             (13, 7, 3, 24)]


@pytest.mark.parametrize("strict", [True, False])
@pytest.mark.parametrize("shapes", RNN_SIZES)
def test_rnn_for_sizes(shapes, strict):
    compare(rnn, [rnn_inputs(*shapes, seed) for seed in (1, 2)], strict=strict)


@pytest.mark.parametrize("shapes", [(50, 32, 64, 64), (7, 1, 16, 16), (1, 2, 8, 8),
                                    (0, 2, 8, 8), (5, 3, 4, 1)])
def test_rnn_float64_and_relu_range(shapes):
    compare(rnn, [rnn_inputs(*shapes, seed, torch.float64) for seed in (1, 2)])
    compare(rnn_relu_range, [rnn_inputs(*shapes, seed) for seed in (3, 4)])


@pytest.mark.skipif(not HAS_CC, reason="no C compiler")
@pytest.mark.parametrize("shapes", [(50, 32, 64, 64), (50, 1, 16, 16), (3, 2, 8, 8)])
def test_rnn_steps_run_in_c(shapes, monkeypatch):
    spy = Spy(monkeypatch)
    compare(rnn, [rnn_inputs(*shapes, seed) for seed in (1, 2)])
    assert spy.calls["counted"] >= 2


@pytest.mark.skipif(not HAS_CC, reason="no C compiler")
def test_rnn_non_contiguous_inputs():
    g = to_graph(rnn, strict=True)
    for seed in (1, 2):
        xs, h, W, U, b = rnn_inputs(50, 32, 64, 64, seed)
        xs_t = xs.transpose(0, 1).contiguous().transpose(0, 1)      # same values, strided
        compare(rnn, [(xs_t, h, W, U, b)], g=g)
        compare(rnn, [(xs, h.t().contiguous().t(), W, U.t().contiguous().t(), b)], g=g)
        compare(rnn, [(xs[::2], h, W, U, b[:64])], g=g)


@pytest.mark.skipif(not HAS_CC, reason="no C compiler")
@pytest.mark.parametrize("shapes", [(20, 32, 64, 64), (11, 1, 16, 16)])
def test_c_steps_equal_python_steps_bitwise(shapes, monkeypatch):
    args = rnn_inputs(*shapes, seed=5)
    with_c = to_graph(rnn, strict=True)(*args)
    monkeypatch.setattr(loop_driver, "CHUNK", 3)            # steps in chunks of 3
    chunked = to_graph(rnn, strict=True)(*args)
    monkeypatch.setattr(loop_driver, "available", lambda pointers: False)
    python = to_graph(rnn, strict=True)(*args)
    assert torch.equal(with_c, python) and torch.equal(chunked, python)


def test_rnn_gradients_match_eager():
    g = to_graph(rnn, strict=True)
    for seed in (1, 2):
        args = [a.requires_grad_() for a in rnn_inputs(9, 4, 8, 16, seed)]
        got = g(*args)
        grads = torch.autograd.grad(got.sum(), args)
        exp = rnn(*args)
        expected = torch.autograd.grad(exp.sum(), args)
        torch.testing.assert_close(got, exp, rtol=1e-5, atol=1e-5)
        for x, y in zip(grads, expected):
            torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- while
@pytest.mark.parametrize("strict", [True, False])
@pytest.mark.parametrize("n", [1, 7, 1000, 10_000, 100_000])
def test_newton_sizes(n, strict):
    compare(newton, [positives(n, 1), positives(n, 2, high=1e6), positives(n, 3, high=2.0)],
            strict=strict)


@pytest.mark.parametrize("n", [1, 999, 20_000])
def test_newton_float64_and_strided(n):
    compare(newton, [positives(n, 1, dtype=torch.float64), positives(n, 2, dtype=torch.float64)])
    g = to_graph(newton, strict=True)
    compare(newton, [(positives(2 * n, 4)[0][::2],), positives(n, 5)], g=g)


@pytest.mark.skipif(not HAS_CC, reason="no C compiler")
def test_newton_zero_and_one_iterations(monkeypatch):
    monkeypatch.setattr(KernelWhile, "_fused_step", lambda self: None)
    spy = Spy(monkeypatch)
    g = to_graph(newton, strict=True)
    ones = (torch.ones(100),)                   # converged before the first step
    near = (torch.full((100,), 1.0 + 1e-6),)    # one step
    compare(newton, [ones, near, positives(100, 1)], g=g)
    assert spy.calls["while_"] == 3
    assert torch.equal(g(*ones), torch.ones(100))


@pytest.mark.skipif(not HAS_CC, reason="no C compiler")
def test_newton_c_steps_equal_python_steps_bitwise(monkeypatch):
    monkeypatch.setattr(KernelWhile, "_fused_step", lambda self: None)
    args = positives(5000, 7, high=1e6)
    with_c = to_graph(newton, strict=True)(*args)
    monkeypatch.setattr(loop_driver, "CHUNK", 2)
    chunked = to_graph(newton, strict=True)(*args)
    monkeypatch.setattr(loop_driver, "available", lambda pointers: False)
    python = to_graph(newton, strict=True)(*args)
    assert torch.equal(with_c, python) and torch.equal(chunked, python)


def test_newton_nan_input_stops_as_eager():
    x = positives(64, 9)[0]
    x[3] = float("nan")                 # max is nan: the test is False at once
    compare(newton, [(x,), positives(64, 10)])


# ----------------------------------------------------------------------------- stacked lists
def rnn_outs(xs, h, W, U, b):
    outs = []
    for xt in xs:
        h = torch.tanh(xt @ W + h @ U + b)
        outs.append(h)
    return torch.stack(outs)


def rnn_two_lists(xs, h, W, U, b):
    outs, doubled = [], []
    for xt in xs:
        h = torch.tanh(xt @ W + h @ U + b)
        outs.append(h)
        doubled.append(h * 2 + xt[0, 0])
    return h, torch.stack(outs), torch.stack(doubled, 0)


def rnn_reads_list(xs, h, W, U, b):
    outs = [h]
    for xt in xs:
        h = torch.tanh(xt @ W + outs[-1] @ U + b)
        outs.append(h)
    return torch.stack(outs)


def stacked_marks(g, args):
    return g.get_concrete(*args).executable.source.count(".append(")


@pytest.mark.parametrize("strict", [True, False])
@pytest.mark.parametrize("shapes", [(50, 32, 64, 64), (1, 4, 8, 16), (7, 1, 16, 16),
                                    (9, 3, 5, 72), (5, 4, 8, 1)])
def test_list_of_steps_stacked_once(shapes, strict):
    args = [rnn_inputs(*shapes, seed) for seed in (1, 2)]
    g = compare(rnn_outs, args, strict=strict)
    assert stacked_marks(g, args[0]) == 1       # kept per step, one stack after the loop
    g2 = to_graph(rnn_two_lists, strict=strict)
    for a in args:
        for x, y in zip(g2(*a), rnn_two_lists(*a)):
            assert x.dtype == y.dtype and x.shape == y.shape and x.is_contiguous()
            torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-5)
    assert stacked_marks(g2, args[0]) == 2


def test_list_read_in_the_loop_is_not_stacked():
    args = [rnn_inputs(6, 3, 4, 8, seed) for seed in (1, 2)]
    g = compare(rnn_reads_list, args)
    assert stacked_marks(g, args[0]) == 0


def test_stacked_list_gradients_and_result_not_aliased():
    g = to_graph(rnn_two_lists, strict=True)
    for seed in (1, 2):
        args = [a.requires_grad_() for a in rnn_inputs(6, 3, 4, 8, seed)]
        got, exp = g(*args), rnn_two_lists(*args)
        gg = torch.autograd.grad(got[1].sum() + 3 * got[2].sum(), args)
        ge = torch.autograd.grad(exp[1].sum() + 3 * exp[2].sum(), args)
        for x, y in zip(gg, ge):
            torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-5)
    h, outs, _ = g(*rnn_inputs(6, 3, 4, 8, 3))
    h.add_(1.0)                                 # the last state is its own tensor
    assert not torch.equal(h, outs[-1])


# ----------------------------------------------------------------------------- any / all
def newton_any(x):
    y = 0.5 * (x + 1.0)
    while ((y * y - x).abs() > 1e-5 * x).any():
        y = 0.5 * (y + x / y)
    return y


def newton_all(x):
    y = 0.5 * (x + 1.0)
    while not torch.all((y * y - x).abs() <= 1e-5 * x):
        y = 0.5 * (y + x / y)
    return y


def any_all_values(x, m):
    return (x > 0.5).any(), (x > -3.0).all(), torch.any(x * 2 < m), (x != x).any(), \
        (x > 0).all() | (x < 0).any()


@pytest.mark.parametrize("n", [1, 5, 3000, 100_000])
def test_newton_any_all_run_as_one_kernel_each(n, monkeypatch):
    spy = Spy(monkeypatch)
    for fn in (newton_any, newton_all):
        compare(fn, [positives(n, 1), positives(n, 2, high=1e6), (torch.ones(n),)])
        compare(fn, [positives(n, 3)], strict=False)
    assert spy.calls["while_"] + spy.calls["fused"] == (8 if HAS_CC else 0)


@pytest.mark.parametrize("shape", [(1,), (7,), (64, 33), (3, 1, 5)])
def test_fused_any_all_match_eager(shape):
    g = to_graph(any_all_values, strict=True)
    gen = torch.Generator().manual_seed(3)
    cases = [torch.randn(shape, generator=gen), -torch.rand(shape, generator=gen) - 1,
             torch.rand(shape, generator=gen) + 1, torch.full(shape, float("nan")),
             torch.zeros(shape)]
    for x in cases:
        m = torch.randn(shape[-1:], generator=gen)
        got, exp = g(x, m), any_all_values(x, m)
        for a, b in zip(got, exp):
            assert a.dtype == b.dtype == torch.bool and a.shape == b.shape and bool(a) == bool(b)
    x = torch.randn(0, 3)                       # empty: torch's any/all, not a kernel
    assert [bool(v) for v in to_graph(any_all_values, strict=True)(x, torch.ones(3))] == \
        [bool(v) for v in any_all_values(x, torch.ones(3))]


# ----------------------------------------------------------------------------- counters
def newton_capped(x, cap: int = 50):
    y = 0.5 * (x + 1.0)
    i = 0
    while i < cap and torch.max(torch.abs(y * y - x) / x) > 1e-5:
        y = 0.5 * (y + x / y)
        i += 1
    return y, i


def newton_capped_y(x):
    y = 0.5 * (x + 1.0)
    i = 3
    while i < 20 and torch.max(torch.abs(y * y - x) / x) > 1e-5:
        y = 0.5 * (y + x / y)
        i += 2
    return y


def check_pair(g, fn, args):
    (y, n), (ey, en) = g(*args), fn(*args)
    torch.testing.assert_close(y, ey, rtol=1e-5, atol=1e-5)
    assert int(n) == int(en)
    return int(en)


@pytest.mark.parametrize("strict", [True, False])
@pytest.mark.parametrize("n", [1, 1000, 50_000])
def test_capped_and_counted_newton_in_c(n, strict, monkeypatch):
    spy = Spy(monkeypatch)
    for cap in (50, 3, 0):          # the test ends it / the cap ends it / no step at all
        g = to_graph(newton_capped, strict=strict)
        seen = {check_pair(g, newton_capped, positives(n, seed, high=1e6) + (cap,))
                for seed in (1, 2)}
        assert max(seen) <= cap
    g = to_graph(newton_steps, strict=strict)
    assert check_pair(g, newton_steps, positives(n, 3, high=1e6)) > 5
    check_pair(g, newton_steps, (torch.ones(n),))
    compare(newton_capped_y, [positives(n, 4, high=1e6), positives(n, 5)], strict=strict)
    assert spy.calls["while_"] + spy.calls["fused"] == (8 if HAS_CC else 0)   # (cap 0: none)


@pytest.mark.skipif(not HAS_CC, reason="no C compiler")
def test_capped_newton_c_steps_equal_python_steps(monkeypatch):
    monkeypatch.setattr(KernelWhile, "_fused_step", lambda self: None)
    args = positives(3000, 7, high=1e6) + (9,)
    with_c = to_graph(newton_capped, strict=True)(*args)
    monkeypatch.setattr(loop_driver, "CHUNK", 2)
    chunked = to_graph(newton_capped, strict=True)(*args)
    monkeypatch.setattr(loop_driver, "available", lambda pointers: False)
    python = to_graph(newton_capped, strict=True)(*args)
    for a, b in ((with_c, python), (chunked, python)):
        assert torch.equal(a[0], b[0]) and int(a[1]) == int(b[1]) == 9
