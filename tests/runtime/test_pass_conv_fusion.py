"""Eval batch norms folded into convolutions, conv epilogues, dropout in eval dropped
(passes/fold_batchnorm.py, passes/conv_epilogue.py, passes/drop_identity.py,
kernels/folded_conv.py).

Each test converts a small module (strict mode), checks which nodes the optimized graph
holds (the pattern hit, or not), and compares calls with eager: values within float
tolerance (folding rounds differently), NaN and Inf where eager has them, two calls with
other inputs, gradients where autograd records, and calls after the parameters changed
(in place, rebound, loaded).
"""
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from runtime.kernels import folded_conv
from runtime.options import options
from transpiler import to_graph

NAN, INF = float("nan"), float("inf")


@pytest.fixture(autouse=True)
def small_packing(monkeypatch):
    """Weights of 4096+ elements take the packed oneDNN convolution here (cin=64 cases),
    smaller ones ``conv2d`` (by default only 2^18+ are packed)."""
    monkeypatch.setattr(folded_conv, "MIN_PACKED", 4096)


def randn(*shape, seed=0, dtype=torch.float32):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def bn(c, seed=0, affine=True, dtype=torch.float32):
    """A BatchNorm2d with non-trivial statistics and affine parameters."""
    m = nn.BatchNorm2d(c, affine=affine).to(dtype)
    with torch.no_grad():
        m.running_mean.copy_(randn(c, seed=seed, dtype=dtype))
        m.running_var.copy_(randn(c, seed=seed + 1, dtype=dtype).abs() + 0.5)
        if affine:
            m.weight.copy_(randn(c, seed=seed + 2, dtype=dtype))
            m.bias.copy_(randn(c, seed=seed + 3, dtype=dtype))
    return m


class ConvBN(nn.Module):
    def __init__(self, cin=3, cout=8, act=None, bias=False, groups=1, dilation=1, stride=1,
                 padding=1, affine=True, dtype=torch.float32, k=3):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(cin, cout, k, stride, padding, dilation, groups, bias=bias).to(dtype)
        self.bn = bn(cout, affine=affine, dtype=dtype)
        self.act = act or nn.Identity()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class Block(nn.Module):
    """resnet's BasicBlock: ``out += identity`` then an in-place relu."""

    def __init__(self, c=8, spelling="iadd"):
        super().__init__()
        torch.manual_seed(1)
        self.c1, self.b1 = nn.Conv2d(c, c, 3, 1, 1, bias=False), bn(c, 1)
        self.c2, self.b2 = nn.Conv2d(c, c, 3, 1, 1, bias=False), bn(c, 5)
        self.relu = nn.ReLU(inplace=True)
        self.spelling = spelling

    def forward(self, x):
        out = self.relu(self.b1(self.c1(x)))
        out = self.b2(self.c2(out))
        if self.spelling == "iadd":
            out += x
        elif self.spelling == "left":
            out = x + out
        else:
            out = torch.add(out, x)
        return self.relu(out)


def conv_nodes(g, *args):
    return [n for n in g.graph(*args).optimize().walk() if n.op == "conv_bn"]


def ops(g, *args):
    return [n.op for n in g.graph(*args).optimize().walk()]


def compare(m, *inputs, rtol=1e-5, atol=1e-5, grad=False):
    """``to_graph(m)`` against ``m`` on each input (no_grad unless ``grad``)."""
    g = to_graph(m, strict=True)
    for x in inputs:
        with torch.set_grad_enabled(grad), warnings.catch_warnings():
            warnings.simplefilter("error")
            got, exp = g(x), m(x)
        assert got.dtype == exp.dtype and got.shape == exp.shape
        assert got.stride() == exp.stride()
        torch.testing.assert_close(got, exp, rtol=rtol, atol=atol, equal_nan=True)
        assert torch.equal(torch.isnan(got), torch.isnan(exp))
        assert torch.equal(torch.isinf(got), torch.isinf(exp))
    return g


# ------------------------------------------------------------------------------ folding
@pytest.mark.parametrize("act,name", [
    (None, None), (nn.ReLU(), "relu"), (nn.ReLU(inplace=True), "relu"),
    (nn.ReLU6(), "relu6"), (nn.Hardswish(), "hardswish"),
    (nn.Hardswish(inplace=True), "hardswish"), (nn.Hardsigmoid(), "hardsigmoid"),
    (nn.SiLU(), "silu"), (nn.SiLU(inplace=True), "silu")])
def test_conv_bn_activation_folds(act, name):
    m = ConvBN(act=act).eval()
    g = compare(m, randn(2, 3, 9, 9, seed=1), randn(2, 3, 9, 9, seed=2))
    with torch.no_grad():
        nodes = conv_nodes(g, randn(2, 3, 9, 9))
        assert len(nodes) == 1 and nodes[0].target.act == name
        assert "batch_norm" not in ops(g, randn(2, 3, 9, 9))


@pytest.mark.parametrize("kw", [dict(bias=True), dict(affine=False), dict(groups=8, cin=8),
                                dict(dilation=2, padding=2), dict(stride=2),
                                dict(padding="same"), dict(dtype=torch.float64),
                                dict(cin=64, cout=64), dict(cin=64, cout=64, k=1, padding=0)])
def test_conv_forms_fold(kw):
    """Conv bias, BN without affine, groups, dilation, stride, string padding, float64,
    and weights large enough for the packed oneDNN convolution (``MIN_PACKED``)."""
    m = ConvBN(act=nn.ReLU(), **kw).eval()
    cin, dtype = kw.get("cin", 3), kw.get("dtype", torch.float32)
    xs = [randn(2, cin, 9, 9, seed=s, dtype=dtype) for s in (1, 2)]
    g = compare(m, *xs)
    with torch.no_grad():
        assert len(conv_nodes(g, xs[0])) == 1
        kernel = g.get_concrete(xs[0]).optimized.nodes
        kernel = [n.target for n in kernel if n.op == "conv_bn"][0]
    packed = kernel._state[2] is not None
    assert packed == (cin == 64 and m.conv.weight.numel() >= 4096 and dtype == torch.float32
                      and kw.get("padding") != "same")


@pytest.mark.parametrize("spelling", ["iadd", "left", "add"])
def test_residual_block(spelling):
    m = Block(spelling=spelling).eval()
    g = compare(m, randn(1, 8, 6, 6, seed=3), randn(1, 8, 6, 6, seed=4))
    with torch.no_grad():
        nodes = conv_nodes(g, randn(1, 8, 6, 6))
    assert [(n.target.act, n.target.residual) for n in nodes] == [("relu", False),
                                                                   ("relu", True)]


def test_empty_batch_and_channels_last_input():
    m = ConvBN(act=nn.ReLU(), cin=64, cout=64).eval()
    compare(m, randn(0, 64, 5, 5))
    compare(m, randn(2, 64, 5, 5), randn(2, 64, 5, 5, seed=3).contiguous(
        memory_format=torch.channels_last))


def test_special_values():
    x = randn(2, 3, 9, 9, seed=1)
    x[0, 0, 2, 2], x[1, 1, 4, 4], x[1, 2, 0, 0] = NAN, INF, -INF
    compare(ConvBN(act=nn.ReLU()).eval(), x)
    compare(ConvBN(act=nn.Hardsigmoid()).eval(), x)
    compare(Block().eval(), torch.cat([x, x, x[:, :2]], 1)[:, :8])


def test_non_finite_parameters_run_eager():
    """A scale of Inf or a NaN statistic: eager's ops (the folded weights would differ)."""
    m = ConvBN(act=nn.ReLU()).eval()
    with torch.no_grad():
        m.bn.running_var[0] = 0.0
        m.bn.eps = 0.0                       # 1 / sqrt(0) = Inf on channel 0
        m.bn.running_mean[1] = NAN
    compare(m, randn(2, 3, 9, 9, seed=1))


def test_gradients_through_eager_ops():
    """Eval mode with autograd recording: eager's ops, eager's gradients."""
    m = ConvBN(act=nn.Hardswish(), bias=True).eval()
    g = to_graph(m, strict=True)
    x1, x2 = randn(2, 3, 9, 9, seed=1).requires_grad_(), randn(2, 3, 9, 9, seed=2)
    for x in (x1, x2):
        got, exp = g(x), m(x)
        torch.testing.assert_close(got, exp)
        params = [p for p in m.parameters()]
        gg = torch.autograd.grad(got.sum(), params + ([x] if x.requires_grad else []))
        ge = torch.autograd.grad(exp.sum(), params + ([x] if x.requires_grad else []))
        for a, b in zip(gg, ge):
            torch.testing.assert_close(a, b)


# ------------------------------------------------------------------- parameters change
def _change_in_place(m):
    with torch.no_grad():
        m.bn.running_var.mul_(2)
        m.conv.weight.add_(0.5)


def _rebind(m):
    m.bn.weight.data = m.bn.weight.data * 3
    m.conv.weight.data = m.conv.weight.data.flip(0).contiguous()


def _load(m):
    state = {k: v * 0.5 + 0.1 if v.is_floating_point() else v
             for k, v in m.state_dict().items()}
    m.load_state_dict(state)


def _optimizer_step(m):
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    m(randn(2, m.conv.in_channels, 9, 9, seed=7)).sum().backward()
    opt.step()


@pytest.mark.parametrize("change", [_change_in_place, _rebind, _load, _optimizer_step])
@pytest.mark.parametrize("cin", [3, 64])
def test_parameters_changed_between_calls(change, cin):
    m = ConvBN(act=nn.ReLU(), cin=cin, cout=64 if cin == 64 else 8).eval()
    g = to_graph(m, strict=True)
    x = randn(2, cin, 9, 9, seed=1)
    with torch.no_grad():
        before = g(x)
        torch.testing.assert_close(before, m(x), rtol=1e-5, atol=1e-5)
    change(m)
    with torch.no_grad():
        after, exp = g(x), m(x)
    assert not torch.allclose(after, before)
    torch.testing.assert_close(after, exp, rtol=1e-4, atol=1e-4)   # (larger weights now)


def test_option_off_keeps_batch_norm():
    """``fold_batchnorm`` off: the graph keeps eager's ops (and then sees writes through
    ``p.data``, which bypass the version counters the folded weights are keyed by)."""
    m = ConvBN(act=nn.ReLU()).eval()
    with options.override(fold_batchnorm=False):
        g = to_graph(m, strict=True)
        x = randn(2, 3, 9, 9, seed=1)
        with torch.no_grad():
            assert "batch_norm" in ops(g, x) and not conv_nodes(g, x)
            g(x)
            m.bn.weight.data.mul_(2)
            torch.testing.assert_close(g(x), m(x))


# ------------------------------------------------------------------------ not folded
def test_train_mode_does_not_fold():
    m = ConvBN(act=nn.ReLU()).train()
    ref = ConvBN(act=nn.ReLU()).train()
    g = to_graph(m, strict=True)
    for seed in (1, 2):
        x = randn(4, 3, 9, 9, seed=seed)
        torch.testing.assert_close(g(x), ref(x))
        torch.testing.assert_close(m.bn.running_mean, ref.bn.running_mean)
    assert "batch_norm" in ops(g, x) and not conv_nodes(g, x)


def test_no_running_stats_does_not_fold():
    m = ConvBN(act=nn.ReLU()).eval()
    m.bn = nn.BatchNorm2d(8, track_running_stats=False)
    g = compare(m, randn(4, 3, 9, 9, seed=1), randn(4, 3, 9, 9, seed=2))
    with torch.no_grad():
        assert not conv_nodes(g, randn(4, 3, 9, 9))


def test_conv_read_twice_does_not_fold():
    class M(ConvBN):
        def forward(self, x):
            y = self.conv(x)
            return self.bn(y) + y
    g = compare(M().eval(), randn(2, 3, 9, 9, seed=1))
    with torch.no_grad():
        assert not conv_nodes(g, randn(2, 3, 9, 9))


def test_write_between_conv_and_norm_does_not_fold():
    class M(ConvBN):
        def forward(self, x):
            y = self.conv(x)
            x.mul_(2)                         # the conv read x before this write
            return self.bn(y) + x.sum()
    m = M().eval()
    g = to_graph(m, strict=True)
    with torch.no_grad():
        for seed in (1, 2):
            torch.testing.assert_close(g(randn(2, 3, 9, 9, seed=seed)),
                                       m(randn(2, 3, 9, 9, seed=seed)))
        assert not conv_nodes(g, randn(2, 3, 9, 9))


def test_residual_of_other_shape_not_taken():
    class M(ConvBN):
        def forward(self, x, r):
            return torch.relu(self.bn(self.conv(x)) + r)        # r broadcasts
    m = M().eval()
    g = to_graph(m, strict=True)
    x, r = randn(2, 3, 9, 9, seed=1), randn(8, 1, 1, seed=2)
    with torch.no_grad():
        torch.testing.assert_close(g(x, r), m(x, r))
        nodes = conv_nodes(g, x, r)
    assert [(n.target.act, n.target.residual) for n in nodes] == [(None, False)]


def test_folded_conv_kernel_eager_fallbacks():
    """The target itself: a dtype it cannot fold runs eager's ops (and raises their errors)."""
    k = folded_conv.FoldedConv("relu")
    x = randn(1, 2, 5, 5)
    w, rm, rv = randn(4, 2, 3, 3), randn(4), randn(4).abs()
    exp = torch.relu(F.batch_norm(torch.conv2d(x, w), rm, rv, None, None, False, 0.1, 1e-5))
    torch.testing.assert_close(k(x, w, None, rm, rv, None, None, 1, 0, 1, 1, 1e-5), exp)
    with pytest.raises(RuntimeError):
        k(x.double(), w, None, rm, rv, None, None, 1, 0, 1, 1, 1e-5)


# ------------------------------------------------------------------------- dropout
class Drops(nn.Module):
    def __init__(self, inplace=False):
        super().__init__()
        self.d1 = nn.Dropout(0.3, inplace=inplace)
        self.d2 = nn.Dropout2d(0.2)

    def forward(self, x):
        y = self.d2(self.d1(x * 2))
        y = F.dropout(y, 0.5, training=self.training)
        return torch.dropout(y, 0.1, False) + 1


@pytest.mark.parametrize("inplace", [False, True])
def test_eval_dropout_dropped(inplace):
    m = Drops(inplace).eval()
    g = compare(m, randn(2, 3, 4, 4, seed=1), randn(2, 3, 4, 4, seed=2))
    assert not any("dropout" in op for op in ops(g, randn(2, 3, 4, 4)))


def test_eval_dropout_returns_its_input():
    def f(x):
        return F.dropout(x, 0.5, training=False)
    x = randn(3)
    assert f(x) is x and to_graph(f, strict=True)(x) is x


def test_train_dropout_kept():
    m = Drops().train()
    g = to_graph(m, strict=True)
    x = torch.ones(2, 3, 4, 4)
    out = g(x)
    assert (out == 1).any() and (out != 1).any()
    assert sum("dropout" in op for op in ops(g, x)) == 3       # torch.dropout(.., False) went


def test_dropout_of_other_rank_kept():
    """``dropout3d`` of a 4-D input reshapes (eager returns a new view): left alone."""
    def f(x):
        return F.dropout3d(x, 0.5, training=False)
    g = to_graph(f, strict=True)
    x = randn(2, 3, 4, 4)
    torch.testing.assert_close(g(x), f(x))
    assert "dropout3d" in ops(g, x)
