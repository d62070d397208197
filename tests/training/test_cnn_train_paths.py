"""Issue 15: CNN training through ``to_graph`` is eager's computation, bit for bit.

A CNN training step is convolutions, BatchNorm in train mode (batch statistics and
running-stat updates) and activations, forward and backward, all torch's own kernels under
autograd. The training check of the benchmark (``benchmarks/training_check.py``: 20 steps,
``max |a - b| / max |b|`` per tensor <= 1e-5) can only be met by the same arithmetic:
mobilenet_v3_small's ``features.1.block.2.1.bias`` (a BatchNorm bias feeding a 1x1
convolution and a train-mode BatchNorm, which removes any per-channel shift) has a
gradient that is mathematically 0, so its entries are rounding noise (~3e-9 against
~1e-2 elsewhere), and the next norm's ``running_mean`` is noise too (~4e-10). Any change
of summation order (oneDNN's channels-last depthwise convolutions, a GEMM for the SE
block's 1x1 convolutions, torch.compile's decomposed BatchNorm, eager itself on 2 threads
instead of 1) gives such a tensor a relative difference of order 1. So these tests ask for
``torch.equal``: losses, every gradient at every step, the final parameters, running
statistics and ``num_batches_tracked``, in default and strict mode, and for the whole
step converted, on the building blocks of mobilenet_v3 and resnet (conv + BatchNorm +
relu/hardswish/relu6/silu, in place or not, depthwise 5x5 on small images, squeeze-and-
excitation, residual adds), with a new batch each step (a value baked in at trace time
differs from step 2 on).

What must stay true as inference passes (BatchNorm folding, conv epilogues, channels-last
chains) grow: a model in eval mode whose parameters require grad (frozen-BatchNorm
fine-tuning) runs eager's ops where autograd records, and the folded path only where it
does not; a channels-last input trains as eager's does (the same strides everywhere).
"""
from __future__ import annotations

import copy
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from benchmarks.training_check import saved_bytes
from transpiler import FallbackWarning, to_graph

STEPS = 4


pytestmark = pytest.mark.usefixtures("one_thread")


class SqueezeExcite(nn.Module):
    """mobilenet_v3's SE block: pool, 1x1 conv + relu, 1x1 conv, hardsigmoid, scale."""

    def __init__(self, c: int, squeeze: int):
        super().__init__()
        self.fc1 = nn.Conv2d(c, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, c, 1)

    def forward(self, x):
        s = F.adaptive_avg_pool2d(x, 1)
        s = F.hardsigmoid(self.fc2(F.relu(self.fc1(s))))
        return x * s


def _act(name: str) -> nn.Module:
    return {"relu": nn.ReLU(inplace=True), "relu_copy": nn.ReLU(),
            "hardswish": nn.Hardswish(inplace=True), "hardswish_copy": nn.Hardswish(),
            "relu6": nn.ReLU6(inplace=True), "silu": nn.SiLU(inplace=True),
            "none": nn.Identity()}[name]


def conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1,
            act: str = "relu") -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
                         nn.BatchNorm2d(cout), _act(act))


class InvertedResidual(nn.Module):
    """mobilenet_v3's block: expand 1x1, depthwise kxk, SE, project 1x1 (+ residual)."""

    def __init__(self, c: int, expand: int, k: int, stride: int, act: str):
        super().__init__()
        self.expand = conv_bn(c, expand, 1, act=act)
        self.depthwise = conv_bn(expand, expand, k, stride, groups=expand, act=act)
        self.se = SqueezeExcite(expand, max(expand // 4, 8))
        self.project = conv_bn(expand, c, 1, act="none")
        self.residual = stride == 1

    def forward(self, x):
        y = self.project(self.se(self.depthwise(self.expand(x))))
        return y + x if self.residual else y


class BasicBlock(nn.Module):
    """resnet's block: two 3x3 conv + BatchNorm, ``out += identity``, relu."""

    def __init__(self, c: int):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, c, 3, 1, 1, bias=False), nn.BatchNorm2d(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, 1, 1, bias=False), nn.BatchNorm2d(c)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)), inplace=True)
        out = self.bn2(self.conv2(out))
        out += x
        return F.relu(out)


class SmallCNN(nn.Module):
    def __init__(self, act: str = "hardswish", k: int = 5):
        super().__init__()
        self.stem = conv_bn(3, 16, 3, 2, act=act)
        self.blocks = nn.Sequential(InvertedResidual(16, 48, k, 2, act),
                                    InvertedResidual(16, 64, k, 1, act),
                                    BasicBlock(16))
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        y = self.blocks(self.stem(x))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(y, 1), 1))


def _model(act="hardswish", k=5, dtype=torch.float32, seed=0) -> nn.Module:
    torch.manual_seed(seed)
    return SmallCNN(act, k).to(dtype).train()


def _batch(step: int, dtype=torch.float32, size=16, n=4):
    g = torch.Generator().manual_seed(100 + step)
    x = torch.randn(n, 3, size, size, generator=g, dtype=dtype)
    return x, torch.randint(0, 10, (n,), generator=g)


def train_step(model, opt, x, y):
    opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss.detach()


def _train_both(model, wrap=None, step_fn=None, steps=STEPS, dtype=torch.float32,
                batch=_batch, mode=None):
    """Train ``model`` (eager) and a deep copy (``wrap(copy)`` called by ``step_fn``) side by
    side; assert every loss and gradient, and the final state, are bit-equal."""
    ref = model
    mine = copy.deepcopy(model)
    called = wrap(mine) if wrap else mine
    step_fn = step_fn or train_step
    o_ref = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9)
    o_mine = torch.optim.SGD(mine.parameters(), lr=0.05, momentum=0.9)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        for i in range(steps):
            x, y = batch(i, dtype)
            want = train_step(ref, o_ref, x, y)
            got = step_fn(called, o_mine, x, y)
            assert torch.equal(got, want), (mode, i, got, want)
            for (name, p), q in zip(ref.named_parameters(), mine.parameters()):
                assert (p.grad is None) == (q.grad is None), (mode, i, name)
                if p.grad is not None:
                    assert q.grad.stride() == p.grad.stride(), (mode, i, name)
                    assert torch.equal(q.grad, p.grad), \
                        (mode, i, name, (q.grad - p.grad).abs().max().item())
    for (name, a), b in zip(ref.state_dict().items(), mine.state_dict().values()):
        assert torch.equal(b, a), (mode, name)
    return ref, mine, called


@pytest.mark.parametrize("act", ["relu", "relu_copy", "hardswish", "hardswish_copy",
                                 "relu6", "silu"])
def test_cnn_blocks_train_bit_equal_to_eager(act):
    """conv + train BatchNorm + each activation, depthwise 5x5, SE, residuals: default
    and strict mode."""
    _train_both(_model(act), wrap=to_graph, mode="default")
    _train_both(_model(act), wrap=lambda m: to_graph(m, strict=True), mode="strict")


def test_whole_step_converted_trains_bit_equal():
    """forward, loss, backward and the optimizer step in one converted function."""
    _train_both(_model(), step_fn=to_graph(train_step, strict=True), mode="step")


def test_float64_and_depthwise_3x3():
    _train_both(_model("relu", k=3, dtype=torch.float64), wrap=to_graph,
                dtype=torch.float64, mode="float64")


def test_running_stats_move_as_eagers_and_graph_is_reused():
    """The running statistics and ``num_batches_tracked`` advance each step as eager's, with
    one trace serving every step (batch statistics are not baked in)."""
    _, mine, converted = _train_both(_model(), wrap=to_graph, steps=5)
    bn = mine.stem[1]
    assert int(bn.num_batches_tracked) == 5
    assert not torch.equal(bn.running_mean, torch.zeros_like(bn.running_mean))
    info = converted.graph_function.cache_info()
    assert info.traces == 1 and info.fallbacks == 0, info


def test_channels_last_input_trains_as_eager():
    """A channels-last batch: eager's convolutions then run channels-last (oneDNN): the
    graph must keep the same layouts, so the same kernels and bits."""
    def batch(i, dtype):
        x, y = _batch(i, dtype)
        return x.contiguous(memory_format=torch.channels_last), y
    _train_both(_model(), wrap=to_graph, batch=batch, mode="channels_last")


def test_frozen_batchnorm_finetuning_runs_eagers_ops():
    """eval mode (BatchNorm uses its running statistics) with parameters that require
    grad: the conv + BatchNorm pairs are folded for inference, but where autograd records
    they run eager's ops (gradients bit-equal, running statistics untouched); under
    no_grad the same graph serves inference (folded: within rounding of eager)."""
    model = _model()
    _train_both(model, wrap=to_graph, steps=2, mode="train")      # non-trivial statistics
    model.eval()
    before = [t.clone() for t in model.buffers()]
    ref, mine, converted = _train_both(model, wrap=to_graph, steps=3, mode="eval, grads")
    for a, b in zip(before, mine.buffers()):
        assert torch.equal(a, b)
    x = _batch(7)[0]
    with torch.no_grad():
        want, got = ref(x), converted(x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert got.stride() == want.stride()
    got = converted(x)                      # grad mode again: eager's ops, eager's bits
    assert got.requires_grad and torch.equal(got, ref(x))


def test_saved_for_backward_at_most_eagers():
    model = _model()
    converted = to_graph(copy.deepcopy(model), strict=True)
    x, y = _batch(0)
    converted(x)                                          # traced before measuring
    exclude = list(model.parameters()) + [x]
    eager = saved_bytes(lambda: F.cross_entropy(model(x), y), exclude)
    mine = saved_bytes(lambda: F.cross_entropy(converted(x), y),
                       list(converted.parameters()) + [x])
    assert 0 < mine["total"] <= eager["total"], (mine, eager)
    assert mine["activations"] <= eager["activations"], (mine, eager)
