"""A GELU by itself becomes a kernel (fuse_elementwise.ALONE) where the kernel is the faster:
the tanh form at any size, the exact (erf) form up to ``ALONE_ERF_MAX`` elements and from
``ALONE_ERF_LARGE`` on; an exact GELU in between stays torch's op. Checked: which path the optimized graph takes, and values,
dtypes, strides and gradients against eager on both sides of the bound.
"""
import pytest
import torch
import torch.nn.functional as F

from runtime.passes.fuse_elementwise import ALONE_ERF_LARGE, ALONE_ERF_MAX
from transpiler import to_graph

pytestmark = pytest.mark.usefixtures("module_kernel_cache")


def gelu(x, approximate):
    return F.gelu(x, approximate=approximate)


@pytest.mark.parametrize("approximate, rows, fused", [
    ("none", ALONE_ERF_MAX // 128, True), ("none", ALONE_ERF_MAX // 128 + 1, False),
    ("none", 3, True), ("none", ALONE_ERF_LARGE // 128, True),
    ("tanh", ALONE_ERF_MAX // 128 + 1, True), ("tanh", 257, True)])
def test_lone_gelu_path_and_values(approximate, rows, fused):
    f = to_graph(gelu, strict=True)
    for seed in (0, 1):
        x = torch.randn(rows, 128, generator=torch.Generator().manual_seed(seed)) * 3
        got, want = f(x, approximate), gelu(x, approximate)
        assert got.dtype == want.dtype and got.stride() == want.stride()
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        xg, xe = x.clone().requires_grad_(), x.clone().requires_grad_()
        f(xg, approximate).sum().backward()
        gelu(xe, approximate).sum().backward()
        torch.testing.assert_close(xg.grad, xe.grad, rtol=1e-5, atol=1e-5)
    ops = [n.op for n in f.graph(x, approximate).optimize().nodes]
    assert ("fused" in ops) == fused and ("gelu" in ops) == (not fused), ops
