"""Transformer-block passes: ``multi_head_attention_forward`` opened into its ops
(passes/attention.py).

Each test converts a module (strict mode), checks whether the optimized graph still calls
the attention function or runs the opened ops, and compares two calls with different
inputs against eager (values, dtypes, shapes; gradients where the module trains).
"""
import warnings

import pytest
import torch
import torch.nn as nn

from tests.e2e.e2e_helpers import assert_same, op_counts
from transpiler import to_graph

MHA = "multi_head_attention_forward"


def randn(*shape, seed=0, dtype=torch.float32):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def optimized_ops(g, *args):
    entry = g.get_concrete(*args)
    return op_counts(entry.optimized)


def compare(module, make, opened, calls=((0,), (1,)), rtol=1e-5, grad=False):
    """Two calls of ``to_graph(module, strict=True)`` against eager; ``opened``: whether
    the optimized graph runs the opened ops instead of ``multi_head_attention_forward``."""
    g = to_graph(module, strict=True)
    for (seed,) in calls:
        args = make(seed)
        ctx = torch.enable_grad() if grad else torch.no_grad()
        with ctx:
            exp = module(*args)
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                got = g(*args)
            ops = optimized_ops(g, *args)
        assert (ops[MHA] == 0) == opened, ops
        # (a whole eval encoder block is one encoder_layer node: passes/encoder_layer.py)
        assert (ops["scaled_dot_product_attention"] + ops["encoder_layer"] > 0) == opened, ops
        if rtol == 1e-5:
            assert_same(got, exp)
        else:
            torch.testing.assert_close(got, exp, rtol=rtol, atol=rtol)
    return g


class SelfAttention(nn.Module):
    def __init__(self, dim=32, heads=4, batch_first=False, bias=True, dropout=0.0, **kw):
        super().__init__()
        torch.manual_seed(0)
        self.mha = nn.MultiheadAttention(dim, heads, dropout=dropout, bias=bias,
                                         batch_first=batch_first, **kw)

    def forward(self, x):
        out, _ = self.mha(x, x, x, need_weights=False)
        return out * 2 + 1


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("bias", [True, False])
def test_self_attention_opened(batch_first, bias):
    m = SelfAttention(batch_first=batch_first, bias=bias).eval()
    compare(m, lambda s: (randn(5, 3, 32, seed=s),), opened=True)


@pytest.mark.parametrize("heads", [1, 2, 8])
def test_head_counts(heads):
    m = SelfAttention(dim=16, heads=heads).eval()
    compare(m, lambda s: (randn(7, 2, 16, seed=s),), opened=True)


def test_float64():
    m = SelfAttention().double().eval()
    compare(m, lambda s: (randn(4, 2, 32, seed=s, dtype=torch.float64),), opened=True)


def test_gradients_match_when_training_without_dropout():
    m = SelfAttention(batch_first=True).train()
    g = to_graph(m, strict=True)
    for seed in (0, 1):
        x1 = randn(2, 6, 32, seed=seed).requires_grad_()
        x2 = x1.detach().clone().requires_grad_()
        m.zero_grad()
        m(x1).square().sum().backward()
        grads = [p.grad.clone() for p in m.parameters()]
        m.zero_grad()
        g(x2).square().sum().backward()
        assert optimized_ops(g, x2)[MHA] == 0
        torch.testing.assert_close(x2.grad, x1.grad, rtol=1e-5, atol=1e-6)
        for p, want in zip(m.parameters(), grads):
            torch.testing.assert_close(p.grad, want, rtol=1e-5, atol=1e-6)


def test_weights_changed_between_calls_are_seen():
    m = SelfAttention().eval()
    g = compare(m, lambda s: (randn(5, 3, 32, seed=s),), opened=True)
    with torch.no_grad():
        m.mha.in_proj_weight.mul_(0.5)
        m.mha.out_proj.bias.add_(1.0)
        x = randn(5, 3, 32, seed=3)
        assert_same(g(x), m(x))


# ------------------------------------------------------------------ forms left as they are
class Attend(nn.Module):
    """``mha(q, k, v, **kw)`` with ``q``/``k``/``v`` chosen from the inputs."""

    def __init__(self, dim=16, heads=2, pick=(0, 0, 0), **kw):
        super().__init__()
        torch.manual_seed(0)
        self.mha = nn.MultiheadAttention(dim, heads, **{k: v for k, v in kw.items()
                                                         if k in ("add_bias_kv", "add_zero_attn",
                                                                  "kdim", "vdim", "dropout")})
        self.call_kw = {k: v for k, v in kw.items() if k in ("need_weights", "attn_mask",
                                                              "key_padding_mask", "is_causal")}
        self.pick = pick

    def forward(self, a, b):
        xs = (a, b)
        out = self.mha(*(xs[i] for i in self.pick), **self.call_kw)
        return out[0] if out[1] is None else out


MASK = torch.triu(torch.full((5, 5), float("-inf")), 1)
BOOL_MASK = torch.triu(torch.ones(5, 5, dtype=torch.bool), 1)
MASK3 = randn(4, 5, 5, seed=9)                                # (B * H, T, S)
PAD = torch.tensor([[False] * 4 + [True], [False] * 5])
FLOAT_PAD = torch.zeros(2, 5).masked_fill(PAD, -1e9)


@pytest.mark.parametrize("kw", [
    dict(attn_mask=MASK), dict(attn_mask=BOOL_MASK), dict(attn_mask=MASK3),
    dict(attn_mask=MASK, is_causal=True), dict(attn_mask=BOOL_MASK, is_causal=True),
    dict(key_padding_mask=PAD), dict(key_padding_mask=FLOAT_PAD),
    dict(attn_mask=BOOL_MASK, key_padding_mask=PAD),
    dict(attn_mask=MASK3, key_padding_mask=FLOAT_PAD),
    dict(attn_mask=MASK, key_padding_mask=FLOAT_PAD, is_causal=True),
], ids=["float", "bool", "3d", "causal", "causal_bool", "padding", "float_padding",
        "both_bool", "both_float_3d", "causal_padding"])
def test_masks_opened(kw):
    m = Attend(need_weights=False, **kw).eval()
    compare(m, lambda s: (randn(5, 2, 16, seed=s), randn(5, 2, 16, seed=s + 7)), opened=True)


def test_fully_masked_rows_as_eager():
    """A sequence that is all padding: eager's sdpa call gives that row's attention as 0
    (not NaN); the opened form calls the same kernel with the same mask."""
    pad = torch.tensor([[True] * 5, [False] * 5])
    m = Attend(need_weights=False, key_padding_mask=pad).eval()
    with torch.no_grad():
        m.mha.out_proj.bias.fill_(0.5)
    compare(m, lambda s: (randn(5, 2, 16, seed=s), randn(5, 2, 16)), opened=True)


def test_mask_changed_between_calls_is_read():
    class Masked(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.mha = nn.MultiheadAttention(16, 2)

        def forward(self, x, pad):
            return self.mha(x, x, x, key_padding_mask=pad, need_weights=False)[0]
    m = Masked().eval()
    g = to_graph(m, strict=True)
    x = randn(5, 2, 16)
    for pad in (PAD, ~PAD.flip(0) & torch.tensor([[True] * 3 + [False] * 2] * 2), PAD.flip(0)):
        with torch.no_grad():
            assert_same(g(x, pad), m(x, pad))
    assert optimized_ops(g, x, PAD)[MHA] == 0


@pytest.mark.parametrize("kw", [
    dict(need_weights=True),
    dict(need_weights=False, pick=(0, 1, 1)),             # cross attention
    dict(need_weights=False, pick=(0, 0, 1)),
    dict(need_weights=False, add_bias_kv=True),
    dict(need_weights=False, add_zero_attn=True),
], ids=["weights", "cross", "kv_differ", "bias_kv", "zero_attn"])
def test_other_forms_not_opened(kw):
    m = Attend(**kw).eval()
    compare(m, lambda s: (randn(5, 2, 16, seed=s), randn(5, 2, 16, seed=s + 7)), opened=False)


def test_mixed_masks_not_opened_and_warn_each_call():
    """A bool attn_mask beside a float padding mask handed to the function itself: it
    warns on every call, so the call stays (and warns) as it is."""
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(16, 2).eval()
    params = (mha.in_proj_weight, mha.in_proj_bias, None, None, False, 0.0,
              mha.out_proj.weight, mha.out_proj.bias)

    def f(x, mask, pad):
        return torch.nn.functional.multi_head_attention_forward(
            x, x, x, 16, 2, *params, training=False, need_weights=False,
            attn_mask=mask, key_padding_mask=pad)[0]
    g = to_graph(f, strict=True)
    for seed in (0, 1):
        x = randn(5, 2, 16, seed=seed)
        with torch.no_grad():
            with pytest.warns(UserWarning, match="mismatched"):
                exp = f(x, BOOL_MASK, FLOAT_PAD)
            with pytest.warns(UserWarning, match="mismatched"):
                got = g(x, BOOL_MASK, FLOAT_PAD)
        assert_same(got, exp)
        assert optimized_ops(g, x, BOOL_MASK, FLOAT_PAD)[MHA] == 1


def test_unbatched_not_opened():
    m = SelfAttention(dim=16, heads=2).eval()
    compare(m, lambda s: (randn(5, 16, seed=s),), opened=False)


def test_training_with_dropout_not_opened():
    m = SelfAttention(dropout=0.5).train()
    g = to_graph(m, strict=True)
    x = randn(5, 3, 32)
    with torch.no_grad():
        g(x)
        assert optimized_ops(g, x)[MHA] == 1


# ------------------------------------------------------------------ whole modules
def test_transformer_encoder():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64,
                                       batch_first=True)
    m = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).eval()
    compare(m, lambda s: (randn(2, 6, 32, seed=s),), opened=True, rtol=1e-4)


def test_zoo_vit():
    from benchmarks import model_zoo
    model, make = model_zoo.vit()
    with torch.no_grad():           # torchvision starts the head at zero: logits all 0
        for p in model.heads.parameters():
            p.copy_(randn(*p.shape, seed=5))
    g = compare(model, lambda s: make(1 + s, s)[0], opened=True, rtol=1e-4)
    assert optimized_ops(g, *make(2, 1)[0])["patch_conv2d"] == 1


def test_functional_call_with_result_read_both_ways():
    """The result read batch-first by one reader and as (T, B, E) by another: the ops
    give (T, B, E) and the transpose stays."""
    torch.manual_seed(0)
    m = nn.MultiheadAttention(16, 4).eval()
    w_in, b_in = m.in_proj_weight.detach(), m.in_proj_bias.detach()
    w_out, b_out = m.out_proj.weight.detach(), m.out_proj.bias.detach()

    def f(x):
        xt = x.transpose(1, 0)
        out, _ = torch.nn.functional.multi_head_attention_forward(
            xt, xt, xt, 16, 4, w_in, b_in, None, None, False, 0.0, w_out, b_out,
            training=False, need_weights=False)
        return out.transpose(1, 0) + 1, out * 2, xt

    g = to_graph(f, strict=True)
    for seed in (0, 1):
        x = randn(3, 5, 16, seed=seed)
        assert_same(g(x), f(x))
        assert optimized_ops(g, x)[MHA] == 0


def test_batch_first_transposes_folded():
    m = SelfAttention(batch_first=True).eval()
    g = compare(m, lambda s: (randn(3, 5, 32, seed=s),), opened=True)
    assert optimized_ops(g, randn(3, 5, 32))["transpose"] == 0


# ------------------------------------------------------------------ patch convolutions
def conv_ops(g, *args):
    ops = optimized_ops(g, *args)
    return ops["conv2d"], ops["patch_conv2d"]


class Patchify(nn.Module):
    def __init__(self, cin=3, cout=8, kernel=4, **kw):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(cin, cout, kernel, **kw)

    def forward(self, x):
        return self.conv(x)


@pytest.mark.parametrize("kernel, shape, cout", [(4, (2, 3, 16, 16), 8), ((2, 4), (1, 3, 8, 12), 8),
                                           (8, (3, 3, 8, 8), 8), (2, (1, 5, 6, 10), 8),
                                           (2, (2, 3, 4, 6), 1), (4, (2, 3, 4, 4), 1)])
@pytest.mark.parametrize("bias", [True, False])
def test_patch_conv_is_a_product(kernel, shape, cout, bias):
    m = Patchify(cin=shape[1], cout=cout, kernel=kernel, stride=kernel, bias=bias).eval()
    g = to_graph(m, strict=True)
    for seed in (0, 1):
        x = randn(*shape, seed=seed)
        with torch.no_grad():
            got, exp = g(x), m(x)
        assert conv_ops(g, x) == (0, 1)
        assert got.is_contiguous() and got.stride() == exp.stride()
        torch.testing.assert_close(got, exp, rtol=1e-5, atol=1e-5)


def test_patch_conv_float64_and_gradients():
    m = Patchify(kernel=4, stride=4).double().train()
    g = to_graph(m, strict=True)
    x1 = randn(2, 3, 8, 8, dtype=torch.float64).requires_grad_()
    x2 = x1.detach().clone().requires_grad_()
    m(x1).sin().sum().backward()
    want = [p.grad.clone() for p in m.parameters()]
    m.zero_grad()
    g(x2).sin().sum().backward()
    assert conv_ops(g, x2) == (0, 1)
    torch.testing.assert_close(x2.grad, x1.grad)
    for p, w in zip(m.parameters(), want):
        torch.testing.assert_close(p.grad, w)


def test_patch_conv_sees_changed_weights():
    m = Patchify(kernel=4, stride=4).eval()
    g = to_graph(m, strict=True)
    x = randn(1, 3, 8, 8)
    with torch.no_grad():
        g(x)
        m.conv.weight.mul_(-2.0)
        m.conv.bias.data.add_(3.0)
        torch.testing.assert_close(g(x), m(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kw, shape", [
    (dict(kernel=1, stride=1), (1, 3, 8, 8)),              # pointwise: the conv passes' case
    (dict(kernel=4, stride=2), (1, 3, 8, 8)),              # overlapping
    (dict(kernel=4, stride=4, padding=1), (1, 3, 8, 8)),
    (dict(kernel=2, stride=2, dilation=2), (1, 3, 8, 8)),
    (dict(cin=4, kernel=2, stride=2, groups=2), (1, 4, 8, 8)),
    (dict(kernel=4, stride=4), (1, 3, 10, 8)),             # rows left over
], ids=["1x1", "overlap", "padding", "dilation", "groups", "remainder"])
def test_other_convolutions_stay(kw, shape):
    m = Patchify(**kw).eval()
    g = to_graph(m, strict=True)
    x = randn(*shape)
    with torch.no_grad():
        assert_same(g(x), m(x))
    assert conv_ops(g, x)[0] == 1


def test_patch_conv_channels_last_input_keeps_eager_layout():
    m = Patchify(kernel=4, stride=4).eval()
    g = to_graph(m, strict=True)
    for seed in (0, 1):
        x = randn(2, 3, 8, 8, seed=seed).to(memory_format=torch.channels_last)
        with torch.no_grad():
            got, exp = g(x), m(x)
        assert got.stride() == exp.stride()
        torch.testing.assert_close(got, exp, rtol=1e-5, atol=1e-5)


def test_transformer_encoder_with_padding_and_causal_masks():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64,
                                       batch_first=True)
    m = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).eval()
    causal = torch.triu(torch.ones(6, 6, dtype=torch.bool), 1)

    class Masked(nn.Module):
        def __init__(self):
            super().__init__()
            self.m = m

        def forward(self, x, pad):
            return self.m(x, mask=causal, src_key_padding_mask=pad, is_causal=True)
    pads = [torch.tensor([[False] * 6, [False] * 4 + [True] * 2]),
            torch.tensor([[False] * 5 + [True], [False] * 6])]
    compare(Masked(), lambda s: (randn(2, 6, 32, seed=s), pads[s]), opened=True, rtol=1e-4)


# ------------------------------------------------------------------ GELU as its own kernel
@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("shape, transposed", [((1, 17, 128), False), ((3, 5, 7), False),
                                               ((4, 6), True)])
def test_lone_gelu_is_a_kernel(approximate, shape, transposed):
    def mlp(x, w):
        h = torch.nn.functional.linear(x, w)
        h = h.transpose(-1, -2) if transposed else h
        return torch.nn.functional.gelu(h, approximate=approximate)
    g = to_graph(mlp, strict=True)
    w = randn(shape[-1], shape[-1], seed=3)
    for seed in (0, 1):
        x = randn(*shape, seed=seed) * 3
        x[..., 0] = float("nan")
        with torch.no_grad():
            got, exp = g(x, w), mlp(x, w)
        assert got.stride() == exp.stride()
        torch.testing.assert_close(got, exp, rtol=1e-5, atol=1e-6, equal_nan=True)
        fused = [n for n in g.get_concrete(x, w).optimized.nodes if n.op == "fused"]
        assert [n.attrs["ops"] for n in fused] == [["gelu"]]
    xg = randn(*shape).requires_grad_()
    g(xg, w).sum().backward()
    xe = xg.detach().clone().requires_grad_()
    mlp(xe, w).sum().backward()
    # (the fused backward is within the kernels' 1e-5 of eager's, not its bits: on an
    # AVX-512 CPU torch's tanh-GELU backward differed by 7e-6 relative at one element)
    torch.testing.assert_close(xg.grad, xe.grad, rtol=1e-5, atol=1e-5)
