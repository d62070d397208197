"""passes.attention_arguments: constant boolean masks as is_causal or an additive mask,
repeated keys/values as enable_gqa; differential against eager."""
import pytest
import torch
import torch.nn.functional as F

from tests.e2e.e2e_helpers import assert_same
from transpiler import to_graph


def _sdpa(g, *args):
    entry = g.graph_function.get_concrete(*args) if hasattr(g, "graph_function") else \
        g.get_concrete(*args)
    return [n for n in entry.optimized.walk() if n.op == "scaled_dot_product_attention"]


def causal(q, k, v):
    L, S = q.shape[-2], k.shape[-2]
    mask = torch.ones(L, S, dtype=torch.bool).tril()[None, None]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.5)


def banded(q, k, v):
    L, S = q.shape[-2], k.shape[-2]
    mask = torch.ones(L, S, dtype=torch.bool).triu(1)      # row L-1 fully masked: NaN
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def repeat_kv(x, n):
    b, h, s, d = x.shape
    return x[:, :, None, :, :].expand(b, h, n, s, d).reshape(b, h * n, s, d)


def grouped(q, k, v):
    L, S = q.shape[-2], k.shape[-2]
    mask = torch.ones(L, S, dtype=torch.bool).tril()[None, None]
    return F.scaled_dot_product_attention(q, repeat_kv(k, 2), repeat_kv(v, 2), attn_mask=mask)


def grouped_no_mask(q, k, v):
    return F.scaled_dot_product_attention(q, repeat_kv(k, 2), repeat_kv(v, 2), scale=0.3)


def input_mask(q, k, v, m):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=m)


def _inputs(fn, L, S, seed):
    g = torch.Generator().manual_seed(seed)
    kv_heads = 2 if fn in (grouped, grouped_no_mask) else 4
    return (torch.randn(2, 4, L, 8, generator=g), torch.randn(2, kv_heads, S, 8, generator=g),
            torch.randn(2, kv_heads, S, 8, generator=g))


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("fn,L,S,expect", [
    (causal, 6, 6, {"is_causal": True}), (causal, 4, 6, {"is_causal": True}),
    (causal, 6, 4, {"is_causal": True}), (banded, 5, 5, {"float_mask": True}),
    (grouped, 5, 5, {"is_causal": True, "enable_gqa": True}),
    (grouped_no_mask, 5, 7, {"enable_gqa": True})])
def test_rewritten_call_equals_eager(fn, L, S, expect, strict):
    g = to_graph(fn, strict=strict)
    for seed in (0, 1):
        args = _inputs(fn, L, S, seed)
        assert_same(g(*args), fn(*args))
    (node,) = _sdpa(g, *args)
    assert node.kwargs.get("is_causal", False) == expect.get("is_causal", False)
    assert node.kwargs.get("enable_gqa", False) == expect.get("enable_gqa", False)
    mask = node.kwargs.get("attn_mask")
    if expect.get("float_mask"):
        assert mask.attrs["value"].dtype == torch.float32
    elif expect.get("is_causal"):
        assert mask is None


@pytest.mark.parametrize("fn", [causal, grouped, banded])
def test_gradients_equal_eager(fn):
    args = [a.requires_grad_() for a in _inputs(fn, 5, 5, 3)]
    g = to_graph(fn)
    got = torch.autograd.grad(g(*args).nan_to_num().sum(), args)
    expected = torch.autograd.grad(fn(*args).nan_to_num().sum(), args)
    assert_same(got, expected)


def test_mask_from_an_input_is_kept():
    g = to_graph(input_mask)
    q, k, v = _inputs(input_mask, 5, 5, 0)
    for m in (torch.ones(5, 5, dtype=torch.bool).tril(), torch.rand(5, 5) > 0.3):
        assert_same(g(q, k, v, m), input_mask(q, k, v, m))
    (node,) = _sdpa(g, q, k, v, m)
    assert node.kwargs.get("attn_mask") is not None and not node.kwargs.get("is_causal")
