"""The CNN inference passes of issue 13 against eager: ``passes/channels_last.py`` (eval
``conv_bn`` chains run channels-last, converted back at the chain's edges).

Each program is checked against eager (values, shapes, layout of what leaves the graph) on
two inputs of different batch sizes, in default and strict mode, with the pass on and off;
the pass is checked to have fired (a test whose pass did nothing cannot fail)."""
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from runtime.options import options
from transpiler import to_graph

CL = torch.channels_last


def _bn(c):
    bn = nn.BatchNorm2d(c)
    with torch.no_grad():                       # running statistics other than 0 / 1
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.2, 0.2)
    return bn


class Block(nn.Module):
    """conv-bn-act chains, a depthwise conv, squeeze-excitation, residual, pools, cat."""

    def __init__(self, c=8):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, c, 3, 2, 1, bias=False), _bn(c), nn.Hardswish())
        self.dw = nn.Sequential(nn.Conv2d(c, c, 3, 1, 1, groups=c, bias=False), _bn(c),
                                nn.ReLU(inplace=True))
        self.fc1, self.fc2 = nn.Conv2d(c, 4, 1), nn.Conv2d(4, c, 1)
        self.pw = nn.Sequential(nn.Conv2d(c, c, 1, bias=False), _bn(c))
        self.b1 = nn.Sequential(nn.Conv2d(c, 4, 1, bias=False), _bn(4), nn.ReLU())
        self.b2 = nn.Sequential(nn.Conv2d(c, 4, 3, padding=1, bias=False), _bn(4), nn.ReLU())
        self.head = nn.Linear(8 * 4 * 4, 5)

    def forward(self, x):
        x = self.stem(x)
        y = self.dw(x)
        s = F.adaptive_avg_pool2d(y, 1)
        y = y * F.hardsigmoid(self.fc2(F.relu(self.fc1(s))))
        x = self.pw(y) + x
        x = F.max_pool2d(x, 3, 2, ceil_mode=True)
        x = torch.cat([self.b1(x), self.b2(F.max_pool2d(x, 3, 1, 1))], 1)
        x = F.adaptive_avg_pool2d(x, 4)
        return self.head(x.view(x.shape[0], -1))        # view: eager's layout needed


class Features(nn.Module):
    """The graph returns convolution results itself (and one of them twice)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), _bn(6), nn.ReLU())
        self.b = nn.Sequential(nn.Conv2d(6, 6, 3, padding=1), _bn(6), nn.SiLU())

    def forward(self, x):
        a = self.a(x)
        b = self.b(a)
        return a, b, b, F.avg_pool2d(b, 2)


def _models():
    torch.manual_seed(0)
    return {"block": Block().eval(), "features": Features().eval()}


def _inputs(seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2, 3, 16, 16, generator=g), torch.randn(5, 3, 16, 16, generator=g)]


def _close(got, exp):
    if isinstance(exp, tuple):
        assert type(got) is tuple and len(got) == len(exp)
        for g, e in zip(got, exp):
            _close(g, e)
        return
    torch.testing.assert_close(got, exp, rtol=1e-5, atol=1e-5)
    assert got.is_contiguous() == exp.is_contiguous()
    assert got.is_contiguous(memory_format=CL) == exp.is_contiguous(memory_format=CL)


def _optimized(g, x):
    return g.get_concrete(x).optimized


def _fired(graph) -> bool:
    convs = [n for n in graph.nodes if n.op == "conv_bn"]
    return bool(convs) and all(n.target.channels_last for n in convs) and \
        any(n.op == "eager_layout" for n in graph.nodes)


@pytest.mark.parametrize("name, strict", [("block", False), ("features", True)])
def test_channels_last_matches_eager(name, strict):
    model = _models()[name]
    on = to_graph(model, strict=strict)
    with options.override(channels_last=False):
        off = to_graph(model, strict=strict)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("error")
            off(_inputs(0)[0])
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")                  # no fallback
        for x in _inputs(0) + _inputs(1):
            exp = model(x)
            _close(on(x), exp)
            _close(off(x), exp)
        x = _inputs(0)[0]
        assert _fired(_optimized(on, x))
        assert not any(n.op == "eager_layout" for n in _optimized(off, x).nodes)


def test_outputs_take_eager_layout_for_a_channels_last_input():
    """A channels-last input gives channels-last results in eager: the edges keep them."""
    model = _models()["features"]
    g = to_graph(model, strict=True)
    with torch.no_grad():
        for x in _inputs(2):
            _close(g(x), model(x))
            xc = x.contiguous(memory_format=CL)
            _close(g(xc), model(xc))


def test_outputs_take_eager_layout_for_channels_last_weights():
    """``model.to(memory_format=channels_last)`` with a contiguous input: eager's
    convolutions return channels-last results (their weights are): so do the edges."""
    model = _models()["features"].to(memory_format=CL)
    g = to_graph(model, strict=True)
    with torch.no_grad():
        for x in _inputs(3):
            _close(g(x), model(x))


def test_autograd_keeps_eager_values_and_gradients():
    """Parameters requiring grad in eval mode: conv_bn runs eager's ops and layout."""
    models = [_models()["block"], _models()["block"]]
    g = to_graph(models[1], strict=True)
    for x in _inputs(3)[:1]:
        xs = [x.clone().requires_grad_(), x.clone().requires_grad_()]
        outs = [models[0](xs[0]), g(xs[1])]
        _close(outs[1], outs[0])
        outs[0].square().sum().backward()
        outs[1].square().sum().backward()
        torch.testing.assert_close(xs[1].grad, xs[0].grad, rtol=1e-5, atol=1e-6)
        for p, q in zip(models[0].parameters(), models[1].parameters()):
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-5, atol=1e-6)


class Written(nn.Module):
    """A value of the would-be region is written in place by a node the pass does not
    own: the pass stays off (a copy would take the write)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), _bn(4))
        self.b = nn.Sequential(nn.Conv2d(4, 4, 3, padding=1), _bn(4))

    def forward(self, x):
        a = self.a(x)
        b = self.b(a)
        v = b.view(b.shape[0], -1)
        v[:, 0] = 7.0                       # writes b through a view
        return b + a


def test_in_place_write_into_region_keeps_eager():
    torch.manual_seed(1)
    model = Written().eval()
    g = to_graph(model, strict=True)
    with torch.no_grad():
        for x in _inputs(4):
            _close(g(x), model(x))
        assert not any(n.op == "eager_layout" for n in _optimized(g, x).nodes)


def test_refolds_after_parameter_change():
    """The channels-last folded weights follow in-place parameter updates."""
    model = _models()["block"]
    g = to_graph(model, strict=True)
    x = _inputs(5)[0]
    with torch.no_grad():
        _close(g(x), model(x))
        model.stem[0].weight.mul_(1.5)
        model.dw[1].running_var.add_(0.25)
        _close(g(x), model(x))
