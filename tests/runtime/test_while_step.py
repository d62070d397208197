"""The fused step of a kernel ``while`` (kernels/while_step.py): the body and the next
test in one pass, split over threads.

Each program is converted, run until its fused step is built, then checked against eager
(values bit for bit, dtypes, the step count where the program returns it) and against the
same loop run as two kernels per step (``_fused_step`` forced off), at 1 and 2 threads, at
sizes below and above ``parallel_min`` (one not a multiple of the 16-element split);
NaN and Inf inputs end the loop where eager's ``max`` ends it. Tests of other forms check
that ``plan`` declines them (a sum's rounding depends on its order) and they still match.
"""
import pytest
import torch

import runtime.kernels
from runtime.kernels import compiler, while_step
from runtime.kernels.loop import KernelWhile
from tests.runtime.loop_programs import newton, newton_steps
from transpiler import to_graph

pytestmark = [pytest.mark.usefixtures("module_kernel_cache"),
              pytest.mark.skipif(not compiler.compiler_available(), reason="no C compiler")]


def newton_capped(x):
    y = 0.5 * (x + 1.0)
    i = torch.tensor(0)
    while i < 3 and torch.max(torch.abs(y * y - x) / x) > 1e-5:
        y = 0.5 * (y + x / y)
        i = i + 1
    return y, i


def newton_all(x):
    y = 0.5 * (x + 1.0)
    while not torch.all(torch.abs(y * y - x) / x < 1e-5):
        y = 0.5 * (y + x / y)
    return y


def newton_absmax(x):
    y = 0.5 * (x + 1.0)
    while (y * y - x).abs().amax() > 1e-3:
        y = 0.5 * (y + x / y)
    return y


def newton_min_test(x):                  # amin, and row math after the reduction
    y = 0.5 * (x + 1.0)
    while -torch.min(-torch.abs(y * y - x) / x) * 2.0 > 2e-5:
        y = 0.5 * (y + x / y)
    return y


def newton_tol(x, tol):
    y = 0.5 * (x + 1.0)
    steps = torch.tensor(0)
    while torch.max(torch.abs(y * y - x) / x) > tol:
        y = 0.5 * (y + x / y)
        steps = steps + 1
    return y, steps


def newton_sum(x):
    y = 0.5 * (x + 1.0)
    while torch.sum(torch.abs(y * y - x)) > 1e-2:
        y = 0.5 * (y + x / y)
    return y


def positives(n, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(n, generator=g, dtype=torch.float64) * 99.5 + 0.5).to(dtype)


def driver(g, *args) -> KernelWhile:
    entry = g.get_concrete(*args)
    (found,) = [v for k, v in entry.executable.fn.__globals__.items()
                if k.startswith("_kernel_while")]
    return found


def converted(fn, *args):
    """``fn`` converted, called once and its kernels built; (converted, its KernelWhile)."""
    g = to_graph(fn, strict=True)
    g(*args)
    runtime.kernels.wait()
    g(*args)
    runtime.kernels.wait()
    return g, driver(g, *args)


def unfused(g, *args):
    """``g(*args)`` with the loop run as two kernels per step."""
    kw = driver(g, *args)
    kw._step, saved = None, kw._step
    try:
        return g(*args)
    finally:
        kw._step = saved


def same(got, expected):
    for a, b in zip(got if isinstance(got, tuple) else (got,),
                    expected if isinstance(expected, tuple) else (expected,)):
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)   # bit for bit


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def threads(request):
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(before)


@pytest.mark.parametrize("n", [3, 1000, 100_003])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_newton_fused_matches_eager_and_two_kernels(n, dtype, threads):
    x = positives(n, 1, dtype)
    g, kw = converted(newton_steps, x)
    assert kw._fused_step() is not None and kw._fused_step()._functions() is not None
    for seed in (1, 2):
        x = positives(n, seed, dtype)
        got = g(x)
        same(got, newton_steps(x))
        same(got, unfused(g, x))
        assert int(got[1]) > 1


@pytest.mark.parametrize("x, steps", [(torch.ones(5), 0), (torch.full((7,), 1.01), 1)])
def test_zero_and_one_step(x, steps):
    g, kw = converted(newton_steps, x)
    assert kw._fused_step() is not None
    got = g(x)
    same(got, newton_steps(x))
    assert int(got[1]) == steps


@pytest.mark.parametrize("n", [1000, 100_003])
def test_nan_and_inf_end_the_loop_as_eager_max(n, threads):
    x = positives(n, 3)
    g, kw = converted(newton_steps, x)
    assert kw._fused_step() is not None
    nan, inf = x.clone(), x.clone()
    nan[n // 2] = float("nan")              # max is NaN at once: no step
    inf[n - 1] = float("inf")               # inf - inf: NaN at once
    zero = x.clone()
    zero[n // 3] = 0.0                      # |y*y| / 0 = inf for ~75 steps, then 0 / 0
    for v in (nan, inf, zero):
        got = g(v)
        same(got, newton_steps(v))
        same(got, unfused(g, v))
    assert int(g(zero)[1]) > 50 and int(g(nan)[1]) == 0


def test_cap_on_the_steps(threads):
    # ``while i < 3 and ...``: the step limit ends the loop while its test still holds
    x = positives(100_003, 4)
    g, kw = converted(newton_capped, x)
    assert kw._fused_step() is not None
    got = g(x)
    same(got, newton_capped(x))
    assert int(got[1]) == 3
    ones = torch.ones(100_003)
    same(g(ones), newton_capped(ones))


@pytest.mark.parametrize("fn", [newton_all, newton_absmax, newton_min_test])
def test_other_spellings_fuse(fn, threads):
    x = positives(100_003, 5)
    g, kw = converted(fn, x)
    assert kw._fused_step() is not None
    for seed in (5, 6):
        x = positives(100_003, seed)
        same(g(x), fn(x))
        same(g(x), unfused(g, x))


def test_two_dimensional_input(threads):
    x = positives(300 * 347, 7).reshape(300, 347)
    g, kw = converted(newton, x)
    assert kw._fused_step() is not None
    same(g(x), newton(x))
    same(g(x), unfused(g, x))


def test_a_sum_test_keeps_two_kernels():
    x = positives(1000, 8)
    g, kw = converted(newton_sum, x)
    assert kw._fused_step() is None
    torch.testing.assert_close(g(x), newton_sum(x), rtol=1e-5, atol=1e-5)


def test_one_pass_form():
    # the reduction must be the test's last pass: a sum, or pointwise math mixing a
    # reduced value with the elements (a second pass), is declined
    from runtime.kernels.codegen import KernelSpec, Operand, Step
    v, c, i = (lambda k: Operand("v", k)), (lambda x: Operand("c", x)), (lambda k: Operand("in", k))
    base = (Step("m_abs({0})", (i(0),)), Step("", (v(0),), reduce="amax"))
    gt = Step("({0} > {1})", (v(1), c(1.0)), row=True)
    assert while_step._one_pass(KernelSpec("float32", (("float32", "full"),), base + (gt,),
                                           ((2, "bool"),)))
    summed = (base[0], Step("", (v(0),), reduce="sum"), gt)
    assert not while_step._one_pass(KernelSpec("float32", (("float32", "full"),), summed,
                                               ((2, "bool"),)))
    mixed = base + (Step("({0} - {1})", (i(0), v(1)), row=False),
                    Step("", (v(2),), reduce="amax"), Step("({0} > {1})", (v(3), c(1.0)),
                                                            row=True))
    assert not while_step._one_pass(KernelSpec("float32", (("float32", "full"),), mixed,
                                               ((4, "bool"),)))


def test_steps_in_small_chunks_match(monkeypatch):
    # a long loop returns to Python every CHUNK steps: the buffer turn and the value
    # carried across chunks must not change a bit (high values: ~12 steps)
    x = positives(5000, 9) * 1e4
    g, kw = converted(newton_steps, x)
    assert kw._fused_step() is not None
    whole = g(x)
    monkeypatch.setattr(while_step, "CHUNK", 2)
    chunked = g(x)
    same(chunked, whole)
    same(chunked, newton_steps(x))
    assert int(whole[1]) > 4


def test_tolerance_tensor_read_on_every_call(threads):
    # a 0-d tolerance captured by the test's comparison after the reduction: read per call
    x = positives(100_003, 10)
    g, kw = converted(newton_tol, x, torch.tensor(1e-5))
    assert kw._fused_step() is not None
    counts = set()
    for tol in (1e-5, 1e-2, 10.0, float("nan")):
        t = torch.tensor(tol)
        got = g(x, t)
        same(got, newton_tol(x, t))
        counts.add(int(got[1]))
    assert len(counts) >= 3 and 0 in counts
