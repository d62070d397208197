"""Depthwise convolutions and squeeze-excite blocks of issue 13 against eager:
``kernels/depthwise.py`` (a channels-last ``conv_bn`` chain's depthwise convolution as one C
loop with its epilogue) and ``passes/squeeze_excite.py`` + ``kernels/squeeze_excite.py``
(pool -> 1x1 conv -> act -> 1x1 conv -> gate -> mul as one node and one C loop).

Small convnets written here (mobilenet_v3-like and efficientnet-like blocks, several
spellings of the block) run against eager on two inputs of different batch sizes, in default
and strict mode; each test checks that the C loops really ran (a test whose kernel did
nothing cannot fail). The kernels are checked against torch's ops directly (on/off), and
under autograd (train mode, or eval with gradients) the graph's gradients equal eager's:
these are eval / no-autograd paths only."""
import gc
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from runtime.kernels.depthwise import Depthwise
from runtime.kernels.folded_conv import FoldedConv
from runtime.kernels.squeeze_excite import SqueezeExcite
from runtime.options import options
from transpiler import FallbackWarning, to_graph
from tests.runtime.test_cnn_speed_passes import _bn

CL = torch.channels_last
TOL = 1e-5


class SE(nn.Module):
    """Squeeze-excite in the spellings models use."""

    def __init__(self, c, r, act="relu", gate="hardsigmoid", pool="adaptive", bias=True):
        super().__init__()
        self.fc1 = nn.Conv2d(c, r, 1, bias=bias)
        self.fc2 = nn.Conv2d(r, c, 1, bias=bias)
        self.act, self.gate, self.pool = act, gate, pool

    def forward(self, x):
        if self.pool == "adaptive":
            s = F.adaptive_avg_pool2d(x, 1)
        elif self.pool == "mean":
            s = x.mean((2, 3), keepdim=True)
        else:
            s = torch.mean(x, dim=[-1, -2], keepdim=True)
        s = self.fc1(s)
        s = {"relu": F.relu, "silu": F.silu, "none": lambda t: t}[self.act](s)
        s = self.fc2(s)
        s = torch.sigmoid(s) if self.gate == "sigmoid" else F.hardsigmoid(s)
        return x * s if self.pool == "adaptive" else s * x


class Inverted(nn.Module):
    """expand 1x1 -> depthwise kxk (stride, dilation) -> SE -> project 1x1 (+ residual)."""

    def __init__(self, cin, mid, cout, k, stride, act, se, dilation=1):
        super().__init__()
        a = {"relu": nn.ReLU(inplace=True), "hardswish": nn.Hardswish(), "silu": nn.SiLU(),
             "relu6": nn.ReLU6(inplace=True)}[act]
        self.expand = nn.Sequential(nn.Conv2d(cin, mid, 1, bias=False), _bn(mid), a)
        pad = (k - 1) // 2 * dilation
        self.dw = nn.Sequential(nn.Conv2d(mid, mid, k, stride, pad, dilation, groups=mid,
                                          bias=False), _bn(mid), a)
        self.se = se
        self.project = nn.Sequential(nn.Conv2d(mid, cout, 1, bias=False), _bn(cout))
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        y = self.dw(self.expand(x))
        if self.se is not None:
            y = self.se(y)
        y = self.project(y)
        return y + x if self.residual else y


def mobile_net():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, 2, 1, bias=False), _bn(16), nn.Hardswish(),
        Inverted(16, 32, 16, 3, 1, "relu", SE(32, 8)),
        Inverted(16, 48, 24, 5, 2, "hardswish", SE(48, 12, pool="mean")),
        Inverted(24, 72, 24, 5, 1, "hardswish", SE(72, 24, gate="sigmoid")),
        Inverted(24, 40, 33, 3, 1, "relu6", None, dilation=2),
        nn.Conv2d(33, 40, 1, bias=False), _bn(40), nn.Hardswish(),
    ).eval()


def efficient_net():
    torch.manual_seed(1)
    return nn.Sequential(
        nn.Conv2d(3, 24, 3, 2, 1, bias=False), _bn(24), nn.SiLU(),
        Inverted(24, 96, 24, 3, 1, "silu", SE(96, 6, act="silu", gate="sigmoid",
                                                pool="torch.mean")),
        Inverted(24, 96, 40, 5, 2, "silu", SE(96, 6, act="silu", gate="sigmoid",
                                                bias=False)),
        Inverted(40, 120, 40, 3, 1, "silu", SE(120, 10, act="none", gate="sigmoid")),
    ).eval()


def _inputs(seed, batch, size=32, layout=None):
    x = torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(seed))
    return x.contiguous(memory_format=layout) if layout is not None else x


def _close(out, ref):
    assert out.shape == ref.shape and out.dtype == ref.dtype
    assert torch.equal(out.isnan(), ref.isnan())
    assert (out - ref).nan_to_num().abs().max().item() <= TOL * max(1.0, ref.abs().max().item())
    # the layout eager gives what leaves the graph
    assert out.is_contiguous() == ref.is_contiguous()
    assert out.is_contiguous(memory_format=CL) == ref.is_contiguous(memory_format=CL)


def _run_pair(model, strict, layout=None):
    g = to_graph(model, strict=strict)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        with torch.no_grad():
            for seed, batch in ((0, 1), (1, 3)):
                x = _inputs(seed, batch, layout=layout)
                _close(g(x), model(x))
    return g


def _targets():
    """Every Depthwise and SqueezeExcite object alive (their graphs hold them)."""
    return [o for o in gc.get_objects() if type(o) in (Depthwise, SqueezeExcite)]


@pytest.fixture(autouse=True)
def _sync_builds(suite_kernel_cache):
    with options.override(kernel_build="sync", cache_dir=suite_kernel_cache):
        yield


@pytest.mark.parametrize("build", [mobile_net, efficient_net])
@pytest.mark.parametrize("strict", [False, True])
def test_convnets_match_eager_and_take_the_c_loops(build, strict):
    model = build()
    before = {id(o) for o in _targets()}
    _run_pair(model, strict)
    fresh = [o for o in _targets() if id(o) not in before]
    dws = [o for o in fresh if isinstance(o, Depthwise) and o._plans]
    ses = [o for o in fresh if isinstance(o, SqueezeExcite) and o._plans]
    assert len(dws) >= 3 and len(ses) == 3, (len(dws), len(ses))


@pytest.mark.parametrize("build", [mobile_net, efficient_net])
def test_channels_last_input(build):
    model = build().to(memory_format=CL)
    _run_pair(model, strict=True, layout=CL)


def test_se_node_replaces_the_block_in_every_spelling():
    model = efficient_net()
    x = _inputs(0, 2)
    g = to_graph(model, strict=True)
    with torch.no_grad():
        g(x)
        graph = g.graph(x).optimize()
    ops = [n.op for n in graph.nodes]
    assert ops.count("squeeze_excite") == 3
    assert "hardsigmoid" not in ops and "sigmoid" not in ops and "adaptive_avg_pool2d" \
        not in ops and "mean" not in ops
    acts = sorted((n.target.act or "none", n.target.gate) for n in graph.nodes
                  if n.op == "squeeze_excite")
    assert acts == [("none", "sigmoid"), ("silu", "sigmoid"), ("silu", "sigmoid")]


class LoneSE(nn.Module):
    """A block outside any channels-last chain (contiguous x) and near misses that must
    stay as they are."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(2)
        self.se = SE(12, 4)
        self.fc1, self.fc2 = nn.Conv2d(12, 4, 1), nn.Conv2d(4, 12, 1)
        self.strided = nn.Conv2d(4, 12, 1, stride=2)

    def forward(self, x):
        y = self.se(x)                                          # rewritten
        s = F.hardsigmoid(self.fc2(F.relu(self.fc1(F.adaptive_avg_pool2d(y, 1)))))
        z = y * s                                               # gate read twice: kept
        t = F.adaptive_avg_pool2d(z, 2)                         # 2x2 pool: not a squeeze
        u = z * torch.sigmoid(self.fc2(F.relu(self.fc1(t))))[:, :, :1, :1]
        return u, s


def test_near_misses_stay_and_lone_block_matches_eager():
    model = LoneSE().eval()
    g = to_graph(model, strict=True)
    with torch.no_grad():
        for seed, batch in ((0, 2), (1, 1)):
            x = torch.randn(batch, 12, 5, 7, generator=torch.Generator().manual_seed(seed))
            for out, ref in zip(g(x), model(x)):
                _close(out, ref)
        graph = g.graph(x).optimize()
    assert [n.op for n in graph.nodes].count("squeeze_excite") == 1


def test_nan_propagates_as_in_eager():
    model = mobile_net()
    g = to_graph(model, strict=True)
    x = _inputs(3, 2)
    x[0, 1, 5, 7] = float("nan")            # image 0 only: the squeeze spreads it over it
    with torch.no_grad():
        ref, out = model(x), g(x)
    assert ref[0].isnan().any() and not ref[1].isnan().any()
    _close(out, ref)


@pytest.mark.parametrize("act", [None, "relu", "relu6", "hardswish", "hardsigmoid", "silu"])
@pytest.mark.parametrize("k,stride,padding,dilation,channels,size", [
    (3, 1, 1, 1, 33, 9), (3, 2, 1, 1, 16, 10), (5, 2, 2, 1, 40, 7), (5, 1, 2, 1, 8, 3),
    (3, 1, 2, 2, 24, 6), (3, 1, 0, 1, 12, 5), ((3, 5), (1, 2), (1, 2), 1, 17, 8),
])
def test_depthwise_kernel_equals_torch(act, k, stride, padding, dilation, channels, size):
    kh, kw = (k, k) if type(k) is int else k
    g = torch.Generator().manual_seed(channels * size)
    w = torch.randn(channels, 1, kh, kw, generator=g)
    b = torch.randn(channels, generator=g)
    x = torch.randn(2, channels, size, size + 1, generator=g).contiguous(memory_format=CL)
    x[1, 0, 0, 0] = float("nan")
    dw = Depthwise.make(w, stride, padding, dilation, channels)
    y = F.conv2d(x, w, b, stride, padding, dilation, channels)
    other = torch.randn(y.shape, generator=g).contiguous(memory_format=CL)
    eager_act = {None: lambda t: t, "relu": F.relu, "relu6": F.relu6,
                 "hardswish": F.hardswish, "hardsigmoid": F.hardsigmoid,
                 "silu": F.silu}[act]
    for res in (None, other):
        ref = eager_act(y if res is None else y + res)
        out = dw(x, b, res, act)
        assert out is not None and out.is_contiguous(memory_format=CL)
        _close(out, ref)


def test_depthwise_declines_what_it_was_not_made_for():
    w, b = torch.randn(8, 1, 3, 3), torch.randn(8)
    dw = Depthwise.make(w, 1, 1, 1, 8)
    assert dw(torch.randn(1, 8, 5, 5), b, None, "relu") is None          # contiguous x
    assert dw(torch.randn(1, 8, 5, 5).double().contiguous(memory_format=CL),
              b, None, None) is None                                    # another dtype
    y = dw(torch.randn(1, 8, 5, 5).contiguous(memory_format=CL), b,
           torch.randn(1, 8, 5, 5), None)                               # contiguous residual
    assert y is None
    assert Depthwise.make(torch.randn(8, 2, 3, 3), 1, 1, 1, 4) is None   # not depthwise
    assert Depthwise.make(w.double(), 1, 1, 1, 8) is None
    assert Depthwise.make(w, 1, "same", 1, 8) is None


@pytest.mark.parametrize("act", [None, "relu", "silu"])
@pytest.mark.parametrize("gate", ["hardsigmoid", "sigmoid"])
@pytest.mark.parametrize("layout", [None, CL])
def test_se_kernel_equals_torch(act, gate, layout):
    g = torch.Generator().manual_seed(7)
    x = torch.randn(3, 20, 4, 6, generator=g)
    x = x.contiguous(memory_format=layout) if layout is not None else x
    w1, b1 = torch.randn(5, 20, 1, 1, generator=g), torch.randn(5, generator=g)
    w2, b2 = torch.randn(20, 5, 1, 1, generator=g), torch.randn(20, generator=g)

    def eager(x, w1, b1, w2, b2):
        s = F.conv2d(F.adaptive_avg_pool2d(x, 1), w1, b1)
        s = {None: s, "relu": F.relu(s), "silu": F.silu(s)}[act]
        s = F.conv2d(s, w2, b2)
        return (torch.sigmoid(s) if gate == "sigmoid" else F.hardsigmoid(s)) * x

    se = SqueezeExcite(act, gate, eager)
    for biases in ((b1, b2), (None, None)):
        ref = eager(x, w1, biases[0], w2, biases[1])
        out = se(x, w1, biases[0], w2, biases[1])
        _close(out, ref)
        assert out.stride() == ref.stride()
    assert se._plans, "the C loop did not run"
    # what it was not made for runs the block's ops: autograd, a strided x, float64
    xg = x.clone().requires_grad_()
    assert se(xg, w1, b1, w2, b2).grad_fn is not None
    _close(se(x[:, :, :, ::2], w1, b1, w2, b2), eager(x[:, :, :, ::2], w1, b1, w2, b2))
    _close(se(x.double(), w1.double(), b1.double(), w2.double(), b2.double()),
           eager(x.double(), w1.double(), b1.double(), w2.double(), b2.double()))


def _grads(model, x):
    model.zero_grad()
    out = model(x)
    out.square().mean().backward()
    return out.detach(), [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("train", [True, False])
def test_autograd_keeps_eager_ops_and_gradients(train):
    model = efficient_net().train(train)
    g = to_graph(model, strict=True)
    for seed in (0, 1):
        x = _inputs(seed, 2, size=16)
        state = {k: v.clone() for k, v in model.state_dict().items()}
        ref, ref_grads = _grads(model, x)
        model.load_state_dict(state)           # train-mode batch norms moved their stats
        out, grads = _grads(g, x)
        assert torch.allclose(out, ref, atol=1e-6, rtol=1e-5)
        for a, b in zip(grads, ref_grads):
            assert torch.allclose(a, b, atol=1e-6, rtol=1e-5)
    ops = [n.op for n in g.graph(x).optimize().nodes]     # the nodes ran their torch ops
    assert ops.count("squeeze_excite") == 3


def test_channels_last_off_takes_torch_convolutions_same_values():
    model = mobile_net()
    x = _inputs(5, 2)
    with torch.no_grad():
        on = to_graph(model, strict=True)(x)
        with options.override(channels_last=False):
            off = to_graph(model, strict=True)(x)
        ref = model(x)
    _close(on, ref)
    _close(off, ref)


def test_background_build_runs_torch_until_bound(tmp_path):
    """``built_once(background=True)`` on a cold cache: None (the torch path) at first,
    the library's function once the background worker bound it; on a warm cache at once."""
    import ctypes

    from runtime.kernels import background
    from runtime.kernels.built_once import built_once

    source = "int tg_test_answer(void) { return 42; }\n"

    def bind(lib):
        fn = lib.tg_test_answer
        fn.restype = ctypes.c_int
        return fn

    with options.override(kernel_build="background", cache_dir=str(tmp_path)):
        cold = built_once("tg_test_answer", lambda: source, bind, background=True)
        assert cold() is None                   # queued: the caller takes its torch path
        assert background.wait(timeout=120)
        assert cold()() == 42
        warm = built_once("tg_test_answer", lambda: source, bind, background=True)
        assert warm()() == 42                   # on disk now: loaded at once
        with options.override(compiler=False):
            off = built_once("tg_test_answer", lambda: source, bind, background=True)
            assert off() is None
        assert off()() == 42                    # 'no compiler' was not remembered
