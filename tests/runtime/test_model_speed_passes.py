"""Cheaper calls on the transformers' hot paths (issue 13, batch-1 speed): each cached or
lowered fast form is checked against eager on two calls with other values, in default and
strict mode, and against the general path where the fast one must not apply (autograd,
another dtype, another layout)."""
import pytest
import torch

from runtime.kernels import rotary as rotary_kernel
from tests.e2e.e2e_helpers import assert_same
from transpiler import to_graph


# --------------------------------------------------------------------------- rotary's cached call
def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def projected(x, w, cos, sin):
    """LLaMA's layout: a projection viewed as heads and transposed, then rotated."""
    q = torch.nn.functional.linear(x, w).view(x.shape[0], x.shape[1], -1, 8).transpose(1, 2)
    return q * cos + rotate_half(q) * sin


def _rotary(g, *args):
    nodes = [n for n in g.get_concrete(*args).optimized.walk() if n.op == "rotary"]
    assert len(nodes) == 1
    return nodes[0].target


def _inputs(seed, dtype=torch.float32, batch=2):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, 5, 16, generator=gen).to(dtype)
    w = torch.randn(32, 16, generator=gen).to(dtype)
    cos = torch.randn(batch, 1, 5, 8, generator=gen).to(dtype)
    sin = torch.randn(batch, 1, 5, 8, generator=gen).to(dtype)
    return x, w, cos, sin


def _compiled():
    if rotary_kernel._functions() is None:
        pytest.skip("no C compiler: rotary runs torch ops")


@pytest.mark.parametrize("strict", [False, True])
def test_cached_rotary_call_reads_each_calls_values(strict):
    """The second call takes the cached plan (same layouts) and must read its own x, cos
    and sin: values baked at the first call would show here."""
    _compiled()
    g = to_graph(projected, strict=strict)
    with torch.no_grad():
        first = _inputs(0)
        assert_same(g(*first), projected(*first))
        kernel = _rotary(g, *first)
        assert len(kernel._plans) == 1
        for seed in (1, 2):
            args = _inputs(seed)
            got, expected = g(*args), projected(*args)
            assert_same(got, expected)
            assert not torch.equal(got, g(*first))
        assert len(kernel._plans) == 1          # one layout, one plan


def test_cached_rotary_other_layout_and_dtype_take_their_own_plan():
    """The plan is keyed by every property the checks read: a contiguous x (not the
    transposed view) and float64 tables go through the checks again."""
    _compiled()
    x, _, cos, sin = _inputs(3)
    q = torch.randn(2, 5, 4, 8).transpose(1, 2)     # the transposed layout
    kernel = rotary_kernel.Rotary(lambda x, c, s: x * c + rotate_half(x) * s)
    with torch.no_grad():
        for args in [(q, cos, sin), (q.contiguous(), cos, sin), (q, cos, sin),
                     (q.double(), cos.double(), sin.double()),
                     (q.contiguous(), cos, sin)]:
            got = kernel(*args)
            expected = kernel.torch_fn(*args)
            assert got.dtype == expected.dtype
            assert got.stride() == expected.stride()
            torch.testing.assert_close(got, expected, rtol=0, atol=0)
    assert len(kernel._plans) == 3


def test_cached_rotary_under_autograd_gives_eagers_gradients():
    """A plan made without grad must not serve a call that records: the x gradient is
    eager's, and a call in no_grad afterwards still uses the plan."""
    _compiled()
    g = to_graph(projected)
    with torch.no_grad():
        args = _inputs(4)
        g(*args)
    x, w, cos, sin = _inputs(5)
    w1, w2 = w.clone().requires_grad_(), w.clone().requires_grad_()
    got = g(x, w1, cos, sin)
    expected = projected(x, w2, cos, sin)
    assert got.requires_grad and expected.requires_grad
    assert_same(got.detach(), expected.detach())
    got.pow(2).sum().backward()
    expected.pow(2).sum().backward()
    torch.testing.assert_close(w1.grad, w2.grad, rtol=1e-6, atol=1e-6)
    with torch.no_grad():
        args = _inputs(6)
        assert_same(g(*args), projected(*args))
