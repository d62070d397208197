"""Counted loops (passes/counted_loops.py) and one-kernel loop bodies (kernels/loop.py).

A tensor ``for x_t in xs`` traces to a ``while`` on a 0-d counter; the pass marks it
counted (the executor runs ``for i in range(...)`` with an int counter), batches the row
products ``xs[i] @ W`` before the loop, and a body left as one compiled kernel runs
through ``KernelLoop``. Each test checks which path was taken (the mark, the hoisted
product, the generated source) and compares with eager on two calls with different
values (a value baked at trace time would show), in strict and default mode; loops that
must not take a path (break, counter read after the loop or used in arithmetic, a body
that writes in place) are checked to stay on the general path and still match.
"""
import warnings

import pytest
import torch
import torch.nn.functional as F

from runtime.kernels import compiler
from runtime.options import options
from runtime.passes.counted_loops import COUNTER
from tests.runtime.loop_programs import newton, newton_steps, rnn
from transpiler import to_graph

HAS_CC = compiler.compiler_available()

pytestmark = pytest.mark.usefixtures("module_kernel_cache")


def rnn_linear(xs, h, W, U, b):
    for xt in xs:
        h = torch.tanh(F.linear(xt, W.t(), b) + h @ U)
    return h


def rnn_range(xs, h, W, U, b):
    n = xs.shape[0]
    i = torch.tensor(0)
    while i < n:
        h = torch.tanh(xs[i] @ W + h @ U + b)
        i = i + 1
    return h


def rnn_break(xs, h, W, U, b):
    for xt in xs:
        h = torch.tanh(xt @ W + h @ U + b)
        if h.sum() > 1.0:
            break
    return h


def rnn_counter_out(xs, h, W, U, b):
    i = torch.tensor(0)
    while i < xs.shape[0]:
        h = torch.tanh(xs[i] @ W + h @ U + b)
        i = i + 1
    return h, i


def rnn_enumerate(xs, h, W, U, b):
    for i, xt in enumerate(xs):
        h = torch.tanh(xt @ W + h @ U + b * i)
    return h


def rnn_inplace(xs, h, W, U, b):
    for xt in xs:
        xs.mul_(0.5)
        h = torch.tanh(xt @ W + h @ U + b)
    return h


def inputs(T, B, F_, H, seed, grad=False):
    g = torch.Generator().manual_seed(seed)
    args = (torch.randn(T, B, F_, generator=g), torch.randn(B, H, generator=g) * 0.1,
            torch.randn(F_, H, generator=g) * F_ ** -0.5,
            torch.randn(H, H, generator=g) * H ** -0.5, torch.randn(H, generator=g) * 0.1)
    if grad:
        args = tuple(a.requires_grad_() for a in args)
    return args


def loops(graph):
    return [n for n in graph.walk() if n.op == "while"]


def run(fn, shapes, strict=True, grad_mode=False, seeds=(1, 2)):
    """Compare ``to_graph(fn)`` with eager on two input sets; returns the compiled entry."""
    g = to_graph(fn, strict=strict)
    for seed in seeds:
        args = inputs(*shapes, seed)
        exp = fn(*[a.clone() for a in args])
        with torch.set_grad_enabled(grad_mode), warnings.catch_warnings():
            warnings.simplefilter("error")
            got = g(*[a.clone() for a in args])
        for x, y in zip(got if isinstance(got, tuple) else (got,),
                        exp if isinstance(exp, tuple) else (exp,)):
            assert x.dtype == y.dtype and x.shape == y.shape
            torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-5)
    return g.get_concrete(*inputs(*shapes, seeds[0]))


def source(entry):
    return entry.executable.source


# ----------------------------------------------------------------------------- hit
@pytest.mark.parametrize("strict", [True, False])
@pytest.mark.parametrize("shapes", [(50, 32, 64, 64), (7, 1, 64, 64), (9, 3, 5, 72),
                                    (6, 4, 8, 5), (5, 2, 3, 24)])
def test_rnn_for_over_tensor_is_counted_and_batched(shapes, strict):
    entry = run(rnn, shapes, strict=strict)
    (loop,) = loops(entry.optimized)
    assert loop.attrs.get(COUNTER) is not None
    hoisted = [n for n in entry.optimized.nodes if n.op == "matmul"]
    assert hoisted and hoisted[0].meta.shape == (shapes[0], shapes[1], shapes[3])
    assert "while " not in source(entry)         # no test per step: a for over a range


def kernel_loop_of(entry):
    (driver,) = [v for k, v in entry.executable.fn.__globals__.items()
                 if k.startswith("_kernel_loop")]
    return driver


@pytest.mark.skipif(not HAS_CC, reason="no C compiler")
@pytest.mark.parametrize("shapes", [(50, 32, 64, 64), (7, 1, 64, 64), (9, 3, 5, 72)])
def test_one_kernel_body_runs_as_kernel_loop(shapes):
    entry = run(rnn, shapes)
    driver = kernel_loop_of(entry)
    xs, h, W, U, b = inputs(*shapes, seed=1)
    caps = [U, b, xs @ W]
    assert driver._direct(h, caps, driver.steps) is not None    # direct C calls
    if shapes[1] > 1:
        moved = h.t().contiguous().t()                          # layout: the launcher
        assert driver._direct(moved, caps, driver.steps) is None
    h.requires_grad_()
    assert driver._direct(h, caps, driver.steps) is None        # autograd: launcher


def test_kernel_loop_without_compiler_runs_torch_ops():
    with options.override(compiler=False):
        run(rnn, (8, 3, 16, 64))


def test_small_rows_keep_the_product_a_torch_op():
    """A product too narrow for the kernel's prologue stays torch's ``addmm``: the loop
    runs as a ``ProductLoop`` (the product by torch, the rest by the kernel's C call)."""
    from runtime.kernels.loop_product import ProductLoop
    entry = run(rnn, (6, 4, 8, 5))
    driver = kernel_loop_of(entry)
    assert "for _i_" not in source(entry) and isinstance(driver, ProductLoop)
    assert driver.product[0] == ("row", 2)      # addmm(XW[i], h, U)


def test_linear_and_explicit_counter_spellings():
    for fn in (rnn_linear, rnn_range):
        entry = run(fn, (12, 3, 16, 64))
        (loop,) = loops(entry.optimized)
        assert loop.attrs.get(COUNTER) is not None, fn.__name__
        assert any(n.op in ("matmul", "linear") and len(n.meta.shape) == 3
                   for n in entry.optimized.nodes), fn.__name__


def test_zero_iterations_return_the_initial_value():
    g = to_graph(rnn, strict=True)
    for T in (0, 3):
        args = inputs(T, 2, 4, 64, seed=T)
        torch.testing.assert_close(g(*args), rnn(*args), rtol=1e-5, atol=1e-5)
    args = inputs(0, 2, 4, 64, seed=5)
    assert g(*args) is args[1] or torch.equal(g(*args), args[1])


def test_non_contiguous_initial_state_and_rows():
    g = to_graph(rnn, strict=True)
    for seed in (1, 2):
        xs, h, W, U, b = inputs(10, 3, 8, 64, seed)
        h = h.t().contiguous().t()                        # a transposed layout
        xs = xs.transpose(0, 1).contiguous().transpose(0, 1)
        torch.testing.assert_close(g(xs, h, W, U, b), rnn(xs, h, W, U, b),
                                   rtol=1e-5, atol=1e-5)


def test_kernel_loop_result_is_a_fresh_tensor():
    g = to_graph(rnn, strict=True)
    args = inputs(4, 2, 8, 64, seed=3)
    first = g(*args)
    kept = first.clone()
    second = g(*args)
    assert first is not second and torch.equal(first, kept)
    assert all(first.data_ptr() != a.data_ptr() for a in args)


def test_gradients_match_eager():
    g = to_graph(rnn, strict=True)
    for seed in (1, 2):
        args = inputs(8, 3, 16, 64, seed, grad=True)
        exp = rnn(*args)
        exp_grads = torch.autograd.grad(exp.square().sum(), args)
        got = g(*args)
        assert got.requires_grad
        got_grads = torch.autograd.grad(got.square().sum(), args)
        for x, y in zip(got_grads, exp_grads):
            torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- not hit
@pytest.mark.parametrize("fn", [rnn_break, rnn_counter_out, rnn_enumerate])
def test_loops_that_need_their_counter_stay_general(fn):
    entry = run(fn, (9, 3, 8, 64))
    (loop,) = loops(entry.optimized)
    assert loop.attrs.get(COUNTER) is None
    assert "while " in source(entry)


def test_break_taken_early_matches():
    g = to_graph(rnn_break, strict=True)
    xs, h, W, U, b = inputs(20, 2, 8, 64, seed=4)
    b = b + 3.0                                 # h saturates: the sum passes 1 at once
    torch.testing.assert_close(g(xs, h, W, U, b), rnn_break(xs, h, W, U, b))


def test_body_writing_in_place_is_not_batched():
    g = to_graph(rnn_inplace, strict=True)
    for seed in (1, 2):
        args = inputs(6, 2, 8, 64, seed)
        exp_args = [a.clone() for a in args]
        exp = rnn_inplace(*exp_args)
        got_args = [a.clone() for a in args]
        got = g(*got_args)
        torch.testing.assert_close(got, exp, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got_args[0], exp_args[0])
    entry = g.get_concrete(*inputs(6, 2, 8, 64, 1))
    assert not any(n.op == "matmul" and len(n.meta.shape) == 3
                   for n in entry.optimized.nodes)


# ----------------------------------------------------------------------------- kernel while
def positives(n, seed):
    return torch.rand(n, generator=torch.Generator().manual_seed(seed)) * 99.5 + 0.5


@pytest.mark.parametrize("strict", [True, False])
@pytest.mark.parametrize("n", [1, 7, 1000, 4099])
def test_newton_while_runs_test_and_body_as_kernels(n, strict):
    g = to_graph(newton, strict=strict)
    for seed in (1, 2):
        x = positives(n, seed)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            got = g(x)
        torch.testing.assert_close(got, newton(x), rtol=1e-5, atol=1e-5)
    if HAS_CC:
        assert "_kernel_while" in source(g.get_concrete(positives(n, 1)))


def test_newton_zero_iterations_and_gradients():
    g = to_graph(newton, strict=True)
    ones = torch.ones(5)                          # y starts at sqrt(x): no iteration
    torch.testing.assert_close(g(ones), newton(ones))
    x = positives(16, 3).requires_grad_()
    got, exp = g(x), newton(x)
    assert got.requires_grad
    torch.testing.assert_close(torch.autograd.grad(got.sum(), x)[0],
                               torch.autograd.grad(exp.sum(), x)[0], rtol=1e-5, atol=1e-5)


def test_while_with_a_step_counter_counts_in_the_driver():
    # a second loop variable that only counts the steps (kernels/loop.py KernelWhile's
    # counter) runs with the kernel loop; the count comes back as a 0-d int64 tensor
    g = to_graph(newton_steps, strict=True)
    for seed in (1, 2):
        x = positives(50, seed)
        (y, steps), (ey, esteps) = g(x), newton_steps(x)
        torch.testing.assert_close(y, ey, rtol=1e-5, atol=1e-5)
        assert int(steps) == int(esteps) and steps.dtype == esteps.dtype
    assert ("_kernel_while" in source(g.get_concrete(positives(50, 1)))) == HAS_CC


def newton_two_states(x):
    y = 0.5 * (x + 1.0)
    last = x
    while torch.max(torch.abs(y * y - x) / x) > 1e-5:
        last = y
        y = 0.5 * (y + x / y)
    return y, last


def test_while_with_two_tensor_loop_variables_stays_general():
    g = to_graph(newton_two_states, strict=True)
    for seed in (1, 2):
        x = positives(50, seed)
        for a, b in zip(g(x), newton_two_states(x)):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert "_kernel_while" not in source(g.get_concrete(positives(50, 1)))


@pytest.mark.skipif(not HAS_CC, reason="no C compiler")
def test_loop_bodies_take_in_narrower_and_larger_products():
    # N = 16 (< MIN_N) and 64x64 @ 64x64 (> MAX_WORK) are library calls outside a loop;
    # in a loop body they become the kernel's prologue and the body one kernel
    for shapes in ((9, 32, 8, 16), (9, 64, 8, 64)):
        assert "_kernel_loop" in source(run(rnn, shapes)), shapes

    def step(h, U, b):
        return torch.tanh(h @ U + b)
    h, U, b = torch.randn(32, 16), torch.randn(16, 16), torch.randn(16)
    graph = to_graph(step, strict=True).get_concrete(h, U, b).optimized
    assert [n.op for n in graph.nodes if n.op in ("matmul", "mm", "addmm")]
    torch.testing.assert_close(to_graph(step)(h, U, b), step(h, U, b))
