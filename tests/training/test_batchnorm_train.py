"""Issue 15: train-mode BatchNorm (+ the hardswish/relu after it) as one autograd node run
by C loops (``kernels/batchnorm_bits.py``, ``kernels/batchnorm_train.py``,
``passes/batchnorm_train.py``) is eager's arithmetic bit for bit: the loops against
torch's ops per shape and thread count, and 20 training steps of a small CNN (BN +
hardswish/relu + depthwise + SE + residuals) converted both ways against eager."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.training.test_cnn_train_paths import _model, _train_both, train_step
from transpiler import to_graph

pytestmark = pytest.mark.usefixtures("one_thread")


def _loops():
    """The C loops, built now (skip where no C compiler exists)."""
    from runtime.kernels import background, batchnorm_bits
    batchnorm_bits._function()
    background.wait()
    if batchnorm_bits._function() is None:
        pytest.skip("no C compiler")
    return batchnorm_bits


def _count_nodes(monkeypatch):
    """How many forwards ran as the C node (less the plans' own checks), every channel
    size taking it (the small test shapes are below the size from which it pays)."""
    from runtime.kernels import batchnorm_bits, batchnorm_train
    monkeypatch.setattr(batchnorm_bits, "_plans", {})
    monkeypatch.setattr(batchnorm_train, "MIN_VALUES", 0)
    count = [0]
    real = batchnorm_bits.Plan.forward

    def counted(self, *args):
        count[0] += 1
        return real(self, *args)
    monkeypatch.setattr(batchnorm_bits.Plan, "forward", counted)
    return lambda: count[0] - sum(
        p.FORWARD_MODES.index(p.fmode) + 1 if p.ok else 0 for p in batchnorm_bits._plans.values())


# mobilenet_v3_small's training shapes at batch 8 x 64x64, odd sizes (spans shorter than
# 8 lanes, partial last steps), one image per channel value
SHAPES = [((8, 16, 32, 32), "hardswish"), ((8, 72, 16, 16), "relu"), ((8, 24, 8, 8), None),
          ((8, 96, 4, 4), "hardswish"), ((8, 576, 2, 2), "hardswish"), ((8, 96, 2, 2), None),
          ((3, 7, 5, 5), "hardswish"), ((4, 17, 7, 3), "relu"), ((2, 5, 3, 1), None),
          ((1, 9, 2, 2), "relu")]


@pytest.mark.parametrize("threads", [1, 2])
def test_loops_are_torchs_bits_or_decline(threads):
    """Where a plan answers, its forward (output, saved statistics, running statistics) and
    backward equal torch's ops bit for bit on data other than its own check's; with torch
    2.13's AVX-512 and AVX2 kernels (Zen 5, the latter by ATEN_CPU_CAPABILITY=avx2) they
    answer every shape here; elsewhere they may decline (torch's ops run)."""
    bb = _loops()
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        answered = 0
        for i, (shape, act) in enumerate(SHAPES):
            g = torch.Generator().manual_seed(i)
            c = shape[1]
            x = torch.randn(shape, generator=g) * 3 - 1
            w, b = torch.randn(c, generator=g), torch.randn(c, generator=g)
            rm, rv = torch.randn(c, generator=g), torch.rand(c, generator=g) + 0.1
            grad = torch.randn(shape, generator=g)
            for momentum in (0.1, 0.01):
                plan = bb.plan(x, act, momentum, 1e-3)
                if plan is None:
                    continue
                rm_t, rv_t, rm_m, rv_m = rm.clone(), rv.clone(), rm.clone(), rv.clone()
                z, mean, invstd = torch.native_batch_norm(x, w, b, rm_t, rv_t, True, momentum,
                                                          1e-3)
                want_y = {None: z, "relu": torch.relu(z), "hardswish": F.hardswish(z)}[act]
                dz = {None: grad, "relu": torch.ops.aten.threshold_backward(grad, want_y, 0),
                      "hardswish": torch.ops.aten.hardswish_backward(grad, z)}[act]
                want = torch.ops.aten.native_batch_norm_backward(
                    dz, x, w, rm_t, rv_t, mean, invstd, True, 1e-3, [True] * 3)
                y, m2, i2 = plan.forward(x, w, b, rm_m, rv_m, momentum, 1e-3)
                for got, ref in zip((y, m2, i2, rm_m, rv_m, *plan.backward(
                        x, grad, w, b, mean, invstd)), (want_y, mean, invstd, rm_t, rv_t, *want)):
                    assert torch.equal(got, ref), (shape, act, momentum)
                    assert got.stride() == ref.stride()
                answered += 1
        if torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512"):
            assert answered == 2 * len(SHAPES), answered
    finally:
        torch.set_num_threads(before)


def test_hardswish_at_three_takes_torchs_backward():
    """A pre-activation of exactly 3 (or NaN), where ATen's hardswish' depends on the
    element's position: the loops decline and torch's ops give eager's gradient."""
    bb = _loops()
    x = torch.randn(2, 3, 4, 4)
    x[0, 0, 0, 0] = float("nan")
    w, b = torch.ones(3), torch.zeros(3)
    plan = bb.plan(x, "hardswish", 0.1, 1e-5)
    if plan is None:
        pytest.skip("no plan on this CPU")
    _, mean, invstd = torch.native_batch_norm(x, w, b, None, None, True, 0.1, 1e-5)
    assert plan.backward(x, torch.randn(x.shape), w, b, mean, invstd) is None


@pytest.mark.parametrize("act", ["hardswish", "relu", "hardswish_copy", "relu_copy"])
def test_cnn_trains_bit_equal_through_the_node(act, monkeypatch):
    """20 steps of conv + train BN + activation, depthwise 5x5, SE, residuals: default,
    strict and the whole step converted, bit-equal to eager; the node ran."""
    _loops()
    ran = _count_nodes(monkeypatch)
    _train_both(_model(act), wrap=to_graph, steps=20, mode="default")
    if torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512"):
        assert ran() > 0
    _train_both(_model(act), wrap=lambda m: to_graph(m, strict=True), steps=4, mode="strict")
    _train_both(_model(act), step_fn=to_graph(train_step, strict=True), steps=4, mode="step")


def test_nan_input_and_small_channels_take_torchs_ops(monkeypatch):
    """A NaN pre-activation: the node's backward takes torch's ops (eager's NaN pattern);
    channels below ``MIN_VALUES`` values run eager's ops and never ask for a plan."""
    from runtime.kernels import batchnorm_bits, batchnorm_train
    _loops()
    node = batchnorm_train.BatchNormTrain(F.batch_norm, "hardswish")
    x = torch.randn(2, 3, 4, 4)
    x[1, 2, 3, 3] = float("nan")
    x.requires_grad_(True)
    w, b = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
    grad = torch.randn(x.shape)
    monkeypatch.setattr(batchnorm_train, "MIN_VALUES", 0)
    outs = []
    for fn in (node, lambda *a: F.hardswish(F.batch_norm(*a))):
        stats = (torch.zeros(3), torch.ones(3))
        y = fn(x, *stats, w, b, True, 0.1, 1e-5)
        outs.append((y, *torch.autograd.grad(y, (x, w, b), grad), *stats))
    assert outs[0][0].grad_fn.name().endswith("_BatchNormActBackward")
    for got, want in zip(*outs):
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    monkeypatch.setattr(batchnorm_train, "MIN_VALUES", 8192)
    monkeypatch.setattr(batchnorm_bits, "plan", None)         # never asked
    y = node(x, torch.zeros(3), torch.ones(3), w, b, True, 0.1, 1e-5)
    assert y.grad_fn.name() == "HardswishBackward0"


def test_graph_folds_the_activation_into_the_batch_norm():
    from runtime.kernels.batchnorm_train import BatchNormTrain
    model = _model("hardswish")
    converted = to_graph(model)
    x = torch.randn(2, 3, 16, 16)
    graph = converted.graph_function.graph(x).optimize()
    bns = [n for n in graph.nodes if n.op == "batch_norm"]
    assert bns and all(isinstance(n.target, BatchNormTrain) for n in bns)
    assert {n.target.act for n in bns} == {"hardswish", "relu", None}    # (BasicBlock: relu)
    assert "hardswish" not in {n.op for n in graph.nodes}


def test_double_backward_and_no_grad_take_eagers_ops(monkeypatch):
    """``create_graph=True`` replays eager's ops: first-order gradients bit-equal, the
    second-order ones within float rounding (autograd adds the paths into ``x`` in another
    order through the node); under no_grad the batch norm runs torch's op (running
    statistics as eager's)."""
    _loops()
    monkeypatch.setattr(__import__("runtime.kernels.batchnorm_train").kernels.batchnorm_train,
                        "MIN_VALUES", 0)
    torch.manual_seed(0)
    bn = torch.nn.Sequential(torch.nn.BatchNorm2d(4), torch.nn.Hardswish()).train()
    mine = to_graph(bn.__class__(*[m.__class__(*([4] if i == 0 else [])) for i, m in
                                   enumerate(bn)]).train())
    mine.load_state_dict(bn.state_dict())
    x = torch.randn(3, 4, 5, 5, requires_grad=True)
    for module in (bn, mine):
        (module.g,) = torch.autograd.grad(module(x).pow(2).sum(), x, create_graph=True)
        module.gg = torch.autograd.grad(module.g.pow(2).sum(), x)[0]
    assert torch.equal(bn.g, mine.g)
    torch.testing.assert_close(mine.gg, bn.gg, rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        assert torch.equal(bn(x), mine(x))
    for a, b in zip(bn.state_dict().values(), mine.state_dict().values()):
        assert torch.equal(a, b)
