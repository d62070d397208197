"""A fused kernel with several outputs (a residual add and the RMSNorm of the sum) runs
through a generated launcher (one C call, outputs allocated for it) and equals eager."""
import pytest
import torch

from tests.e2e.e2e_helpers import assert_same
from transpiler import to_graph


def add_rmsnorm(x, r, w):
    h = x + r
    v = h.pow(2).mean(-1, keepdim=True)
    return h, w * (h * torch.rsqrt(v + 1e-6))


def _fused(g, *args):
    entry = g.get_concrete(*args)
    return [n for n in entry.optimized.nodes if n.op == "fused"]


@pytest.mark.parametrize("strict", [False, True])
def test_multi_output_kernel_has_a_launcher_and_equals_eager(strict):
    g = to_graph(add_rmsnorm, strict=strict)
    w = torch.randn(16)
    with torch.no_grad():
        for seed in (0, 1):
            gen = torch.Generator().manual_seed(seed)
            x, r = torch.randn(2, 5, 16, generator=gen), torch.randn(2, 5, 16, generator=gen)
            got = g(x, r, w)
            assert_same(got, add_rmsnorm(x, r, w))
            assert got[0].data_ptr() != got[1].data_ptr()
    (node,) = [n for n in _fused(g, x, r, w) if isinstance(n.meta, tuple)]
    if node.target.compiled:
        assert node.target.launcher is not node.target      # the generated one
    xt = x.transpose(0, 1)                  # not contiguous: the torch ops, eager's strides
    assert_same(g(xt, r.transpose(0, 1), w), add_rmsnorm(xt, r.transpose(0, 1), w))


def test_multi_output_kernel_gradients_equal_eager():
    g = to_graph(add_rmsnorm)
    x, r = torch.randn(2, 5, 16, requires_grad=True), torch.randn(2, 5, 16, requires_grad=True)
    w = torch.randn(16, requires_grad=True)
    a, b = g(x, r, w)
    got = torch.autograd.grad((a.sum() + b.pow(2).sum()), (x, r, w))
    a, b = add_rmsnorm(x, r, w)
    assert_same(got, torch.autograd.grad((a.sum() + b.pow(2).sum()), (x, r, w)))
