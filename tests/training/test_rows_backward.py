"""Custom kernels under autograd: one autograd node each, with a generated C backward.

Rotary (``kernels/rotary.py``): the node's backward is the transposed rotation in C.
Row programs (``kernels/rows.py``: softmax, log_softmax, layernorm, RMSNorm, row sums
written out): the backward is a generated row program (``kernels/rows_backward.py``).
Gemm epilogues keep their torch ops under autograd: checked equal to eager only.
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


@pytest.fixture(autouse=True)
def _kernels_before_first_call():
    """Kernels compiled before a graph's first call (a cold first call may otherwise run
    torch ops while they build), so each call below is the kernel's."""
    from runtime.options import options
    if not hasattr(options, "kernel_build"):
        yield
        return
    with options.override(kernel_build="sync"):
        yield


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


# ------------------------------------------------------------------------- row programs
# Groups that reduce along the last dim (kernels/rows.py) run under autograd as one node
# whose backward is a generated row program (kernels/rows_backward.py).
def softmax(x):
    e = torch.exp(x - x.amax(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True)


def log_softmax(x):
    z = x - x.amax(-1, keepdim=True)
    return z - torch.log(torch.exp(z).sum(-1, keepdim=True))


def masked_softmax(x, mask):
    x = x.masked_fill(mask, float("-inf"))
    e = torch.exp(x - x.amax(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True)


def rmsnorm(x, w):                                   # LLaMA's
    v = x.pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(v + 1e-6))


def layernorm(x, w, b):
    m = x.mean(-1, keepdim=True)
    d = x - m
    v = (d * d).mean(-1, keepdim=True)
    return d * torch.rsqrt(v + 1e-5) * w + b


def layernorm_no_bias(x, w):
    m = x.mean(-1, keepdim=True)
    v = ((x - m) ** 2).mean(-1, keepdim=True)
    return (x - m) / torch.sqrt(v + 1e-5) * w


def residual_norm(x, r, w):                          # two outputs: the sum and its norm
    h = x + r
    return h, rmsnorm(h, w)


def row_stats(x, y, s):                              # a per-row input, row outputs
    d = (x * y).sum(-1, keepdim=True) * s
    return d, torch.tanh(x).mean(-1, keepdim=True) - d, x.amin(-1, keepdim=True) * 2


def whole(x, y):                                     # reduced over the whole tensor
    return (x * y).sum() + torch.sigmoid(x).mean() * 3


def scalar_param(x, t):                              # a 0-d tensor read per row and per element
    return torch.tanh(x * t).sum(-1, keepdim=True) * t


def broadcast_gain(x, gain):                         # an input copied to the full shape
    y = x * gain
    return softmax(y)


def _rows(n, seed, shapes, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(s(n) if callable(s) else s, generator=gen, dtype=dtype)
            for s in shapes]


ROW_CASES = {
    "softmax": (softmax, [lambda n: (3, 4, n)]),
    "log_softmax": (log_softmax, [lambda n: (5, n)]),
    "rmsnorm": (rmsnorm, [lambda n: (2, 3, n), lambda n: (n,)]),
    "layernorm": (layernorm, [lambda n: (4, n), lambda n: (n,), lambda n: (n,)]),
    "layernorm_no_bias": (layernorm_no_bias, [lambda n: (2, 2, n), lambda n: (n,)]),
    "residual_norm": (residual_norm, [lambda n: (3, n), lambda n: (3, n), lambda n: (n,)]),
    "row_stats": (row_stats, [lambda n: (4, n), lambda n: (4, n), lambda n: (4, 1)]),
    "whole": (whole, [lambda n: (3, n), lambda n: (3, n)]),
    "broadcast_gain": (broadcast_gain, [lambda n: (2, 3, n), lambda n: (2, 1, n)]),
    "scalar_param": (scalar_param, [lambda n: (3, n), ()]),
}


def _fused_nodes(out):
    outs = out if isinstance(out, tuple) else (out,)
    return [type(o.grad_fn).__name__ for o in outs if o.grad_fn is not None]


@needs_compiler
@pytest.mark.parametrize("n", [1, 7, 64, 1000])
@pytest.mark.parametrize("case", sorted(ROW_CASES))
def test_row_gradients_equal_eager(case, n):
    fn, shapes = ROW_CASES[case]
    g = to_graph(fn, strict=n == 64)     # strict mode at one width (CI time)
    for seed in (0, 1):                  # two calls: nothing baked at trace time
        args = [a.requires_grad_() for a in _rows(n, seed, shapes)]
        out, expected = g(*args), fn(*args)
        assert_same(out, expected)
        if n > 1:                        # (a width-1 row does not fuse: torch ops)
            assert "_FusedNodeBackward" in _fused_nodes(out)
        outs = out if isinstance(out, tuple) else (out,)
        exps = expected if isinstance(expected, tuple) else (expected,)
        gen = torch.Generator().manual_seed(seed + 10)
        dys = [torch.randn(e.shape, generator=gen) for e in exps]
        got = torch.autograd.grad(outs, args, dys)
        want = torch.autograd.grad(exps, args, dys)
        for a, b in zip(got, want):
            assert a.shape == b.shape and a.dtype == b.dtype
            # within 1e-5 of the gradient's scale (an argmax's share of a softmax is
            # summation noise, ~1e-6 of the row's, in eager's float sum as in ours)
            assert (a - b).abs().max() <= 1e-5 * b.abs().max() + 1e-7, (a, b)


@needs_compiler
@pytest.mark.parametrize("case", sorted(ROW_CASES))
def test_row_gradcheck_float64(case):
    fn, shapes = ROW_CASES[case]
    g = to_graph(fn)
    args = [a.requires_grad_() for a in _rows(5, 3, shapes, torch.float64)]
    g(*args)
    assert "_FusedNodeBackward" in _fused_nodes(g(*args))
    assert torch.autograd.gradcheck(g, tuple(args))
    if case == "rmsnorm":               # double backward: the node replays torch ops
        assert torch.autograd.gradgradcheck(g, tuple(args))


@needs_compiler
def test_masked_softmax_all_masked_rows():
    g = to_graph(masked_softmax, strict=True)
    for seed in (0, 1):
        x = torch.randn(4, 6, generator=torch.Generator().manual_seed(seed),
                        requires_grad=True)
        mask = torch.rand(4, 6, generator=torch.Generator().manual_seed(seed)) > 0.5
        mask[1] = True                    # a row all -inf: NaN out, as eager
        mask[2] = False
        out, expected = g(x, mask), masked_softmax(x, mask)
        assert "_FusedNodeBackward" in _fused_nodes(out)
        assert torch.equal(out.isnan(), expected.isnan()) and out[1].isnan().all()
        dy = torch.randn(4, 6)
        got, = torch.autograd.grad(out, x, dy)
        want, = torch.autograd.grad(expected, x, dy)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6, equal_nan=True)


@needs_compiler
def test_row_max_ties_and_nan_as_eager():
    """amax's gradient: shared among ties, NaN over a row holding a NaN (torch's
    scale_grad_by_count)."""
    def f(x):
        return x.amax(-1, keepdim=True) * torch.exp(x).sum(-1, keepdim=True)
    g = to_graph(f, strict=True)
    for call in range(2):
        x = torch.tensor([[1.0, 3.0, 3.0, 2.0], [0.5, float("nan"), 1.0, 2.0],
                          [4.0, 4.0, 4.0, 4.0 + call]], requires_grad=True)
        out = g(x)
        assert "_FusedNodeBackward" in _fused_nodes(out)
        got, = torch.autograd.grad(out.sum(), x)
        want, = torch.autograd.grad(f(x).sum(), x)
        torch.testing.assert_close(got, want, rtol=1e-6, atol=0, equal_nan=True)
        assert torch.equal(got.isnan(), want.isnan())


@needs_compiler
def test_non_contiguous_and_whole_max_take_torch_ops():
    g = to_graph(layernorm)
    w, b = torch.randn(8, requires_grad=True), torch.randn(8, requires_grad=True)
    x = torch.randn(8, 5).t().requires_grad_()                # non-contiguous: torch ops
    got = torch.autograd.grad(g(x, w, b).square().sum(), (x, w, b))
    want = torch.autograd.grad(layernorm(x, w, b).square().sum(), (x, w, b))
    for a, e in zip(got, want):
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-6)

    def peak(x):                                  # torch.max(x): NaN rule not amax's
        return torch.max(x) * torch.exp(x).sum()
    g = to_graph(peak)
    for call in range(2):
        x = torch.tensor([1.0, float("nan"), 2.0, float("nan")], requires_grad=True)
        got, = torch.autograd.grad(g(x), x)
        want, = torch.autograd.grad(peak(x), x)
        assert torch.equal(got.isnan(), want.isnan())


@needs_compiler
def test_saved_memory_at_most_eagers():
    """Bytes autograd keeps for backward (saved-tensor hooks): the node saves the group's
    inputs only (x, w, b), eager its intermediates too."""
    def saved_bytes(fn, *args):
        total = []

        def pack(t):
            total.append(t.numel() * t.element_size())
            return t
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            fn(*args)
        return sum(total)
    g = to_graph(layernorm)
    x = torch.randn(16, 64, requires_grad=True)
    w, b = torch.randn(64, requires_grad=True), torch.randn(64, requires_grad=True)
    g(x, w, b)
    assert "_FusedNodeBackward" in _fused_nodes(g(x, w, b))
    assert saved_bytes(g, x, w, b) <= saved_bytes(layernorm, x, w, b)


# ------------------------------------------------------------- gemm epilogues (product first)
# A small product absorbed into the kernel that reads it (passes/gemm_epilogue.py) runs as
# its torch ops under autograd (an autograd node keeping the fused forward was measured
# slower at the sizes the pass takes in): gradients are eager's, bias/activation/residual.
def bias_relu_residual(x, w, b, r):
    return torch.relu(torch.addmm(b, x, w)) + r


def gated(x, w):
    return torch.sigmoid(x @ w) * 2


def tanh_cell(x, w, b):
    return torch.tanh(torch.addmm(b, x, w)) * 0.5


GEMM_CASES = {
    "bias_relu_residual": (bias_relu_residual, [(8, 32), (32, 64), (64,), (8, 64)]),
    "gated": (gated, [(16, 64), (64, 64)]),
    "tanh_cell": (tanh_cell, [(4, 16), (16, 64), (1, 64)]),
}


def _gemm_kernels(g, *args):
    return [n.target for n in g.get_concrete(*args).optimized.walk()
            if n.op == "fused" and n.target.spec.gemm]


@needs_compiler
@pytest.mark.parametrize("case", sorted(GEMM_CASES))
def test_gemm_epilogue_gradients_equal_eager(case):
    fn, shapes = GEMM_CASES[case]
    g = to_graph(fn, strict=case == "gated")
    for seed in (0, 1):
        args = [a.requires_grad_() for a in _rows(0, seed, shapes)]
        out, expected = g(*args), fn(*args)
        assert_same(out, expected)
        dy = torch.randn(expected.shape, generator=torch.Generator().manual_seed(seed))
        got = torch.autograd.grad(out, args, dy)
        want = torch.autograd.grad(expected, args, dy)
        for a, e in zip(got, want):
            assert a.shape == e.shape
            assert (a - e).abs().max() <= 1e-5 * e.abs().max() + 1e-7
    assert len(_gemm_kernels(g, *args)) == 1        # the product is in the kernel
    with torch.no_grad():                           # and its C path serves inference
        assert_same(g(*args), fn(*args))
    args = _rows(0, 2, shapes)                      # a frozen weight, data
    args[0].requires_grad_()
    got, = torch.autograd.grad(g(*args).sum(), args[0])
    want, = torch.autograd.grad(fn(*args).sum(), args[0])
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
