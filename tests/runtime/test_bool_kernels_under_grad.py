"""A fused kernel whose results are all bools (a loop test) runs its C path under autograd:
there is nothing to record (eager's comparisons give tensors that do not require grad), so
the inputs requiring grad no longer send it through the autograd node each step (Newton's
``while`` in training: 0.8x eager, now ~1.1x). Checked: which path ran (the autograd
entry must not be reached), values, dtypes, ``requires_grad`` and gradients against eager.
"""
import pytest
import torch

from runtime.kernels import compiler, launch
from tests.runtime.loop_programs import newton, newton_steps
from transpiler import to_graph

HAS_CC = compiler.compiler_available()

pytestmark = pytest.mark.usefixtures("module_kernel_cache")


def positive(n, seed, high=100.0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, generator=g) * (high - 0.5) + 0.5


@pytest.mark.parametrize("n", [3, 1000, 1001])
@pytest.mark.parametrize("fn", [newton, newton_steps], ids=lambda f: f.__name__)
def test_newton_gradients_match_eager(fn, n):
    f = to_graph(fn, strict=True)
    for seed, high in ((0, 100.0), (1, 1e4)):       # different values: different step counts
        x = positive(n, seed, high)
        results = []
        for run in (fn, f):
            leaf = x.clone().requires_grad_()
            out = run(leaf)
            y = out[0] if isinstance(out, tuple) else out
            results.append((out, torch.autograd.grad(y.sum(), [leaf])[0]))
        (got, got_grad), (want, want_grad) = results[1], results[0]
        for g, w in zip(got if isinstance(got, tuple) else (got,),
                        want if isinstance(want, tuple) else (want,)):
            assert g.dtype == w.dtype and g.requires_grad == w.requires_grad
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got_grad, want_grad, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not HAS_CC, reason="needs a C compiler")
def test_a_bool_kernel_skips_the_autograd_node(monkeypatch):
    def test(x, y):
        return ((x * y - 1.0).abs() > 0.5) & (x < y)

    f = to_graph(test, strict=True)
    x, y = positive(64, 0, 3.0), positive(64, 1, 3.0)
    f(x, y)
    fused = [n for n in f.graph(x, y).optimize().nodes if n.op == "fused"]
    assert fused and not fused[0].target._differentiable

    def refuse(kernel, xs):
        raise AssertionError("a bool kernel went through the autograd node")
    monkeypatch.setattr(launch, "_autograd_call", refuse)
    xg, yg = x.clone().requires_grad_(), y.clone().requires_grad_()
    got, want = f(xg, yg), test(xg, yg)
    assert got.dtype == want.dtype == torch.bool and not got.requires_grad
    assert torch.equal(got, want)
