"""passes.rotary / kernels.rotary: q * cos + rotate_half(q) * sin as one C loop reading q
through its strides; values equal eager's, strides the graph's torch ops' (the ``addcmul``
that ``patterns`` makes of the sum already differs from eager's layout on a transposed q:
not checked against eager here)."""
import pytest
import torch

from tests.e2e.e2e_helpers import assert_same
from tests.runtime.rotary_programs import projected, rotate_half
from transpiler import to_graph


def plain(q, cos, sin):
    return q * cos + rotate_half(q) * sin


def swapped(q, cos, sin):
    return rotate_half(q) * sin + cos * q


def _rotary_nodes(g, *args):
    return [n for n in g.get_concrete(*args).optimized.walk() if n.op == "rotary"]


def _tables(b, L, form, seed):
    gen = torch.Generator().manual_seed(seed)
    c, s = torch.randn(b, L, 8, generator=gen), torch.randn(b, L, 8, generator=gen)
    if form == "per_batch":
        return c.unsqueeze(1), s.unsqueeze(1)
    if form == "shared":
        return c[:1].unsqueeze(1), s[:1].unsqueeze(1)
    return c[0], s[0]                                   # [L, D]


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("form", ["per_batch", "shared", "table"])
def test_projected_rotary_equals_eager(form, strict):
    g = to_graph(projected, strict=strict)
    w = torch.randn(32, 16)
    with torch.no_grad():
        for seed in (0, 1):
            x = torch.randn(2, 5, 16)
            cos, sin = _tables(2, 5, form, seed)
            got, expected = g(x, w, cos, sin), projected(x, w, cos, sin)
            assert_same(got, expected)
    (node,) = _rotary_nodes(g, x, w, cos, sin)
    q = torch.nn.functional.linear(x, w).view(2, 5, -1, 8).transpose(1, 2)
    assert got.stride() == node.target.torch_fn(q, cos, sin).stride()


@pytest.mark.parametrize("fn,rewritten", [(plain, True), (swapped, False)])
def test_layouts_and_special_values(fn, rewritten):
    g = to_graph(fn)
    cos, sin = _tables(2, 6, "per_batch", 3)
    base = torch.randn(2, 6, 3, 8)
    base[0, 1, 2, 5] = float("nan")
    base[1, 0, 0, 1] = float("inf")
    base[1, 2, 1, 6] = -0.0
    with torch.no_grad():
        for q in (base.transpose(1, 2), base.permute(0, 2, 1, 3).contiguous(),
                  base.transpose(1, 2)[:, :, 1:]):
            c, s = (cos, sin) if q.shape[2] == 6 else (cos[:, :, 1:], sin[:, :, 1:])
            got, expected = g(q, c, s), fn(q, c, s)
            assert_same(got, expected)
            assert torch.equal(got.isnan(), expected.isnan())
            nodes = _rotary_nodes(g, q, c, s)
            assert len(nodes) == rewritten      # (patterns leaves the swapped sum as it is)
            if nodes:
                assert got.stride() == nodes[0].target.torch_fn(q, c, s).stride()


def test_other_dtypes_and_gradients_take_the_torch_ops():
    g = to_graph(plain)
    cos, sin = _tables(2, 6, "per_batch", 4)
    q = torch.randn(2, 3, 6, 8, dtype=torch.float64)
    assert_same(g(q, cos.double(), sin.double()), plain(q, cos.double(), sin.double()))
    q = torch.randn(2, 3, 6, 8, requires_grad=True)
    got = torch.autograd.grad(g(q, cos, sin).pow(2).sum(), q)
    assert_same(got, torch.autograd.grad(plain(q, cos, sin).pow(2).sum(), q))
