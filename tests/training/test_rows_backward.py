"""Custom kernels under autograd: one autograd node each, with a generated C backward.

Rotary (``kernels/rotary.py``): the node's backward is the transposed rotation in C.
Gradients are compared with eager's (float32: equal within 1e-5 relative; the rotary
backward rounds as eager's, so exactly), ``gradcheck`` in float64, and the node is checked
to be the one that ran (its ``grad_fn``), so a test cannot pass on the torch fallback.
"""
import pytest
import torch

from runtime.kernels import rotary as rotary_kernel
from tests.e2e.e2e_helpers import assert_same
from transpiler import to_graph

needs_compiler = pytest.mark.skipif(rotary_kernel._functions() is None,
                                    reason="no C compiler")


def _close(got, expected):
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6, equal_nan=True)


# ------------------------------------------------------------------------------- rotary
def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rope(q, cos, sin):
    return q * cos + rotate_half(q) * sin


def rope_projected(x, w, cos, sin):
    """LLaMA's layout: q is a transposed view of a projection."""
    q = torch.nn.functional.linear(x, w).view(x.shape[0], x.shape[1], -1, 8).transpose(1, 2)
    return q * cos + rotate_half(q) * sin


def _tables(b, L, D, seed, dtype=torch.float32, form="per_batch"):
    gen = torch.Generator().manual_seed(seed)
    c = torch.randn(b, L, D, generator=gen, dtype=dtype)
    s = torch.randn(b, L, D, generator=gen, dtype=dtype)      # not cat(f, f): general sin
    if form == "per_batch":
        return c.unsqueeze(1), s.unsqueeze(1)
    return c[0], s[0]                                         # [L, D], shared


def _grad_node(g, *args):
    return [n for n in g.get_concrete(*args).optimized.walk() if n.op == "rotary"]


@needs_compiler
@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("form", ["per_batch", "table"])
def test_rotary_gradients_equal_eager(form, strict):
    g = to_graph(rope_projected, strict=strict)
    for seed, L in ((0, 5), (1, 5), (2, 7), (3, 7)):
        gen = torch.Generator().manual_seed(seed)
        x = torch.randn(2, L, 16, generator=gen)
        w = torch.randn(32, 16, generator=gen, requires_grad=True)
        cos, sin = _tables(2, L, 8, seed, form=form)
        out = g(x, w, cos, sin)
        if seed == 1:                 # (a first call per shape may run as it traces)
            assert "Rotary" in type(out.grad_fn).__name__     # the kernel's node ran
        expected = rope_projected(x, w, cos, sin)
        assert_same(out, expected)
        dy = torch.randn(out.shape, generator=gen)
        got, = torch.autograd.grad(out, w, dy)
        want, = torch.autograd.grad(expected, w, dy)
        _close(got, want)
    assert len(_grad_node(g, x, w, cos, sin)) == 1


@needs_compiler
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_rotary_node_backward_is_eagers(dtype):
    """The kernel directly: non-contiguous x (transposed, sliced), a non-contiguous and an
    expanded incoming gradient; float32 exactly eager's."""
    node = rotary_kernel.Rotary(rope)
    cos, sin = _tables(2, 6, 8, 3, dtype)
    base = torch.randn(2, 6, 3, 8, dtype=dtype)
    for x in (base.transpose(1, 2), base.transpose(1, 2)[:, :, 1:]):
        c, s = (cos, sin) if x.shape[2] == 6 else (cos[:, :, 1:], sin[:, :, 1:])
        x = x.detach().requires_grad_()
        out = node(x, c, s)
        assert "Rotary" in type(out.grad_fn).__name__
        for dy in (torch.randn(out.shape, dtype=dtype).transpose(0, 1).contiguous()
                   .transpose(0, 1), torch.ones((), dtype=dtype).expand(out.shape)):
            got, = torch.autograd.grad(out, x, dy, retain_graph=True)
            want, = torch.autograd.grad(rope(x, c, s), x, dy)
            assert torch.equal(got, want)


@needs_compiler
def test_rotary_gradcheck_float64():
    node = rotary_kernel.Rotary(rope)
    cos, sin = _tables(1, 3, 4, 5, torch.float64)
    x = torch.randn(1, 3, 2, 4, dtype=torch.float64).transpose(1, 2).requires_grad_()
    assert torch.autograd.gradcheck(lambda x: node(x, cos, sin), (x,))
    # double backward runs torch ops (the node's backward is recorded then)
    assert torch.autograd.gradgradcheck(lambda x: node(x, cos, sin), (x,))


@needs_compiler
def test_rotary_tables_requiring_grad_take_torch_ops():
    node = rotary_kernel.Rotary(rope)
    cos, sin = _tables(2, 4, 8, 6)
    cos.requires_grad_()
    x = torch.randn(2, 4, 3, 8).transpose(1, 2).requires_grad_()
    out = node(x, cos, sin)
    assert "Rotary" not in type(out.grad_fn).__name__
    got = torch.autograd.grad(out.square().sum(), (x, cos))
    _close(got, torch.autograd.grad(rope(x, cos, sin).square().sum(), (x, cos)))
