"""Loop tests and branch predicates computed by a fused kernel come back as Python bools.

A ``while`` test or ``cond`` predicate that a fused kernel computes and nothing else reads
is called through ``FusedKernel.predicate``: the C function returns the one bool instead
of writing a 0-d tensor that Python then asks ``bool()`` of. Each test checks which path
the generated code took and compares the results with eager, on NaN tests, autograd,
no compiler, values read elsewhere, and inputs the kernel was not specialized for.
"""
import pytest
import torch

from runtime.executor import lower
from runtime.kernels import compiler
from runtime.options import options
from transpiler import to_graph

HAS_CC = compiler.compiler_available()
needs_cc = pytest.mark.skipif(not HAS_CC, reason="no C compiler")


pytestmark = pytest.mark.usefixtures("module_kernel_cache")


def newton(x):
    """Cube roots by Newton's method, until every relative residual is small."""
    y = x / 3.0 + 1.0
    while torch.amax(torch.abs(y * y * y - x) / x) > 1e-5:
        y = (2.0 * y + x / (y * y)) / 3.0
    return y


def branchy(x):
    if torch.mean(x * x) > 1.0:                 # the predicate: one fused kernel
        return torch.sigmoid(x) - 0.5
    return torch.sin(x) * 2.0


def read_twice(x):
    t = x.sum() > 0
    if t:
        y = x * 2.0
    else:
        y = x - 1.0
    return y, t


def launchers(f, *args):
    """Names of the generated launch functions the graph's code calls: 'test' or 'launch'."""
    graph = f.graph(*args).optimize()
    names = lower(graph).fn.__globals__
    return sorted(getattr(v, "__name__", "") for k, v in names.items()
                  if k.startswith("_fused"))


def same(got, exp):
    if isinstance(exp, tuple):
        for g, e in zip(got, exp):
            same(g, e)
        return
    assert got.dtype == exp.dtype and got.shape == exp.shape
    torch.testing.assert_close(got, exp, rtol=1e-6, atol=1e-6, equal_nan=True)


@needs_cc
def test_while_test_is_a_bool():
    x = torch.rand(300, generator=torch.Generator().manual_seed(0)) * 50 + 0.5
    f = to_graph(newton, strict=True)
    names = lower(f.graph(x).optimize()).fn.__globals__
    loops = [v for k, v in names.items() if k.startswith("_kernel_while")]
    if loops:       # test and body one kernel each: the loop calls the C test (kernels/loop)
        assert loops[0].test.predicate is not None
    else:
        assert "test" in launchers(f, x)
    same(f(x), newton(x))


@needs_cc
def test_branch_predicate_is_a_bool_both_ways():
    x = torch.randn(64, generator=torch.Generator().manual_seed(1))
    f = to_graph(branchy, strict=True)
    assert launchers(f, x).count("test") == 1
    for arg in (x * 0.5, x * 2.0):
        same(f(arg), branchy(arg))


def test_nan_test_is_false_as_in_eager():
    x = torch.tensor([4.0, float("nan"), 9.0])
    f = to_graph(newton, strict=True)
    same(f(x), newton(x))                    # NaN > eps is False: the loop never runs
    f = to_graph(branchy, strict=True)
    same(f(x), branchy(x))


def test_predicate_read_elsewhere_stays_a_tensor():
    x = torch.randn(16, generator=torch.Generator().manual_seed(2))
    f = to_graph(read_twice, strict=True)
    assert "test" not in launchers(f, x)
    same(f(x), read_twice(x))
    same(f(-x.abs()), read_twice(-x.abs()))


def test_autograd_takes_the_torch_path():
    x = (torch.rand(50, generator=torch.Generator().manual_seed(3)) * 9 + 1).requires_grad_()
    x2 = x.detach().clone().requires_grad_()
    f = to_graph(newton, strict=True)
    got, exp = f(x), newton(x2)
    same(got, exp)
    got.sum().backward()
    exp.sum().backward()
    torch.testing.assert_close(x.grad, x2.grad)


def test_without_compiler_no_predicate():
    x = torch.rand(20, generator=torch.Generator().manual_seed(4)) * 9 + 1
    with options.override(compiler=False):
        f = to_graph(newton, strict=True)
        assert "test" not in launchers(f, x)
        same(f(x), newton(x))


@needs_cc
def test_non_contiguous_input_takes_the_checked_path():
    base = torch.rand(40, generator=torch.Generator().manual_seed(5)) * 9 + 1
    f = to_graph(newton, strict=True)
    f(base[:20].clone())
    same(f(base[::2]), newton(base[::2]))     # a strided view of the same shape


@needs_cc
def test_predicate_function_directly():
    x = torch.randn(64, generator=torch.Generator().manual_seed(6))
    graph = to_graph(branchy, strict=True).graph(x).optimize()
    kernel = next(n.target for n in graph.nodes if n.op == "fused" and
                  n.meta.dtype == torch.bool)
    for arg, expected in ((x * 0.5, False), (x * 2.0, True)):
        assert bool(torch.mean(arg * arg) > 1.0) is expected
        assert kernel.predicate(arg) is expected
    wide = next(n.target for n in graph.walk() if n.op == "fused" and
                n.meta.dtype != torch.bool)
    assert wide.predicate is None               # not a single bool


def inner_break(x):
    s = torch.zeros(())
    for row in x:
        for v in row:
            if v < 0:
                break
            s = s + v
    return s


def test_predicate_planned_into_a_dead_buffer_still_runs():
    # memory planning may give the test's kernel a dead 0-d buffer (out=); as a bool
    # the test needs none
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(7))
    f = to_graph(inner_break, strict=True)
    same(f(x), inner_break(x))
    same(f(x.abs()), inner_break(x.abs()))
