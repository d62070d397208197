"""Issue 15: each faster path of CNN training is eager's arithmetic, bit for bit.

The training check (``benchmarks/training_check.py``) compares every gradient and running
statistic of 20 steps within 1e-5 relative per tensor; mobilenet_v3_small has gradients
that are mathematically 0 (rounding noise), so a path is admitted only if it gives eager's
bits (``torch.equal``): losses, every gradient at every step, the final parameters and
BatchNorm running statistics, in default and strict mode, with a new batch each step.

Paths here:
- in-place activations that autograd would copy first (``hardswish_``, ``hardsigmoid_``,
  ``silu_``, ``mish_``, ``hardtanh_``/``relu6``, ``threshold_``) run out of place while
  autograd records, when nothing else sees their input (``passes/grad_out_of_place.py``):
  no ``clone`` per activation, the same kernel and backward formula.
"""
from __future__ import annotations

import copy
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from tests.training.test_cnn_train_paths import STEPS, _batch, _model, _train_both
from transpiler import FallbackWarning, to_graph

pytestmark = pytest.mark.usefixtures("one_thread")

# activation spellings whose in-place form autograd copies first (eager: clone + op_)
COPYING = {
    "hardswish": lambda x: F.hardswish(x, inplace=True),
    "hardswish_module": nn.Hardswish(inplace=True),
    "hardsigmoid": lambda x: F.hardsigmoid(x, inplace=True),
    "silu": lambda x: F.silu(x, inplace=True),
    "mish": lambda x: F.mish(x, inplace=True),
    "relu6_module": nn.ReLU6(inplace=True),                 # F.hardtanh(x, 0., 6., True)
    "hardtanh": lambda x: F.hardtanh(x, -1.0, 1.0, True),
    "threshold": lambda x: F.threshold(x, 0.1, -2.0, True),
}


class _Ops(TorchDispatchMode):
    """The ATen ops a region runs (forward and, when it runs inside, backward)."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func.__name__)
        return func(*args, **(kwargs or {}))


class ConvBNAct(nn.Module):
    def __init__(self, act, c=8):
        super().__init__()
        self.conv1 = nn.Conv2d(3, c, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, 2, 1, groups=c, bias=False)
        self.bn2 = nn.BatchNorm2d(c)
        self.act = act
        self.head = nn.Linear(c, 10)

    def forward(self, x):
        y = self.act(self.bn1(self.conv1(x)))
        y = self.act(self.bn2(self.conv2(y)))
        return self.head(F.adaptive_avg_pool2d(y, 1).flatten(1))


def _conv_model(act, seed=0, dtype=torch.float32):
    torch.manual_seed(seed)
    return ConvBNAct(act).to(dtype).train()


@pytest.mark.parametrize("name", sorted(COPYING))
def test_copying_activation_trains_bit_equal_without_clone(name):
    """Default and strict mode: eager's bits over STEPS steps (new batch each step), and
    the converted forward under autograd runs no ``clone`` where eager runs one per
    activation."""
    act = COPYING[name]
    _train_both(_conv_model(act), wrap=to_graph, mode="default")
    _, mine, converted = _train_both(_conv_model(act), wrap=lambda m: to_graph(m, strict=True),
                                     mode="strict")
    x = _batch(9)[0]
    with _Ops() as eager_ops:
        mine(x)
    with _Ops() as graph_ops:
        out = converted(x)
    assert eager_ops.ops.count("clone.default") == 2, eager_ops.ops
    assert "clone.default" not in graph_ops.ops, graph_ops.ops
    assert out.requires_grad


def test_float64_and_a_second_shape_stay_bit_equal():
    _train_both(_conv_model(COPYING["hardswish"], dtype=torch.float64), wrap=to_graph,
                dtype=torch.float64, mode="float64")

    def small(i, dtype):
        return _batch(i, dtype, size=8, n=3)
    _train_both(_conv_model(COPYING["silu"]), wrap=to_graph, batch=small, mode="8x8")


def test_small_cnn_hardswish_se_residual_bit_equal():
    """mobilenet_v3's building blocks (expand, depthwise 5x5, SE with hardsigmoid, project,
    residual) with in-place hardswish everywhere."""
    _train_both(_model("hardswish"), wrap=to_graph, mode="blocks")


def _run_both(fn, make_args, grad=True):
    """``fn`` eager and converted (default and strict) on fresh copies of the arguments:
    the result, every argument after the call and the gradients of the leaves are equal."""
    for strict in (False, True):
        converted = to_graph(fn, strict=strict)
        for call in range(2):                        # two inputs: nothing baked in
            want_args, got_args = make_args(call), make_args(call)
            with torch.set_grad_enabled(grad), warnings.catch_warnings():
                warnings.simplefilter("error", FallbackWarning)
                want = fn(*want_args)
                got = converted(*got_args)
            assert torch.equal(got, want), (strict, call)
            assert got.requires_grad == want.requires_grad
            for a, b in zip(got_args, want_args):
                assert torch.equal(a.detach(), b.detach()), (strict, call)
            if grad and want.requires_grad:
                want.sum().backward()
                got.sum().backward()
                for a, b in zip(got_args, want_args):
                    if b.requires_grad:
                        assert torch.equal(a.grad, b.grad), (strict, call)


def _leaf(shape, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * 4).requires_grad_()


def test_input_read_again_after_the_inplace_activation_keeps_eagers_semantics():
    """``y`` is read after ``hardswish_(y)`` (the activated values) and before it (the
    original ones, kept by ``u``)."""
    def f(x, w):
        y = x * w
        u = y * 3
        z = F.hardswish(y, inplace=True)
        return z + y * 2 + u

    _run_both(f, lambda s: (_leaf((4, 6), s), _leaf((6,), s + 10)))


def test_view_taken_before_the_inplace_activation_sees_it():
    def f(x, w):
        y = x * w
        v = y[1:]
        F.silu(y, inplace=True)
        return v * 3

    _run_both(f, lambda s: (_leaf((4, 6), s), _leaf((6,), s + 10)))


def test_argument_activated_in_place_is_mutated_for_the_caller():
    """An argument activated in place: the caller's tensor changes (not marked: it is an
    input, not made by the graph)."""
    def f(x):
        F.hardswish(x, inplace=True)
        return x * 2

    def args(s):
        g = torch.Generator().manual_seed(s)
        return (torch.randn(4, 6, generator=g) * 4,)

    _run_both(f, args, grad=False)


def test_no_grad_still_runs_in_place_and_equals_eager():
    """Without autograd the marked op runs in place (``inplace=_plan``): ``hardswish_``,
    no copy, eager's values and running statistics (train-mode norms under no_grad)."""
    model = _conv_model(COPYING["hardswish"])
    mine = copy.deepcopy(model)
    converted = to_graph(mine, strict=True)
    for i in range(3):                                  # (the first call traces)
        x = _batch(i)[0]
        with torch.no_grad():
            want = model(x)
            with _Ops() as graph_ops:
                got = converted(x)
        assert torch.equal(got, want)
        assert i == 0 or graph_ops.ops.count("hardswish_.default") == 2, graph_ops.ops
        assert "clone.default" not in graph_ops.ops, graph_ops.ops
    for a, b in zip(model.state_dict().values(), mine.state_dict().values()):
        assert torch.equal(a, b)


def test_the_pass_marks_only_what_it_may():
    from runtime.passes.grad_out_of_place import KEY

    def f(x, w):
        a = F.hardswish(x * w, inplace=True)          # fresh, one reader: marked
        y = x + w
        v = y[:1]                                     # a view of y taken first:
        b = F.hardswish(y, inplace=True)              # not marked
        c = F.relu(x - w, inplace=True)               # relu_ saves its result: not marked
        return a + b + c + v + y                      # (y is b now)

    converted = to_graph(f, strict=True)
    args = (_leaf((3, 4), 0), _leaf((4,), 1))
    graph = converted.graph(*args).optimize()
    marked = [n.op for n in graph.walk() if n.attrs.get(KEY)]
    assert marked == ["hardswish"], marked
    _run_both(f, lambda s: (_leaf((3, 4), s), _leaf((4,), s + 1)))


def test_inside_a_tensor_loop_and_branch():
    """Marked ops inside ``while``/``cond`` bodies: the body's own ``_plan`` decides."""
    def f(x, w):
        y = x
        while y.abs().sum() < 50:
            y = F.hardswish(y * w + 1, inplace=True) * 2
        if y.sum() > 0:
            z = F.silu(y * w, inplace=True)
        else:
            z = F.mish(y - w, inplace=True)
        return z

    def args(s):
        g = torch.Generator().manual_seed(s)
        return (torch.randn(3, 4, generator=g), (torch.randn(4, generator=g) * (s * 2 - 1) +
                                                 1.5).requires_grad_())

    _run_both(f, args)
    _run_both(f, args, grad=False)
    converted = to_graph(f, strict=True)
    graph = converted.graph(*args(0)).optimize()
    from runtime.passes.grad_out_of_place import KEY
    ops = {n.op for n in graph.walk() if n.attrs.get(KEY)}
    assert {"while", "cond"} <= {n.op for n in graph.nodes} and \
        ops == {"hardswish", "silu", "mish"}, ops


# ---------------------------------------------------------------- depthwise convolutions
# (kernels/depthwise_bits.py, kernels/depthwise_train.py, passes/depthwise_train.py)

def _dw_kernel():
    """The C loops, built now (skip where no C compiler exists)."""
    from runtime.kernels import background, depthwise_bits
    depthwise_bits._function()
    background.wait()
    if depthwise_bits._function() is None:
        pytest.skip("no C compiler")
    return depthwise_bits


def _dw_calls(monkeypatch):
    """Count the loops' runs in training: (forward, input_grad, weight_grad) calls that
    returned a tensor, less the ones each new plan makes to check itself."""
    from runtime.kernels import depthwise_bits
    monkeypatch.setattr(depthwise_bits, "_plans", {})
    counts = {"forward": 0, "input_grad": 0, "weight_grad": 0}
    for name in counts:
        real = getattr(depthwise_bits.Plan, name)

        def counted(self, *args, _real=real, _name=name):
            out = _real(self, *args)
            counts[_name] += out is not None
            return out
        monkeypatch.setattr(depthwise_bits.Plan, name, counted)

    def ran():
        plans = len(depthwise_bits._plans)
        return {k: v - plans for k, v in counts.items()}
    return ran


# (N, C, H, W, k, stride, padding, dilation): mobilenet_v3_small's training shapes (5x5 on
# 2x2 and 4x4: oneDNN's gemv order; 3x3: its FMA chain), spatial sizes with every remainder
# of the 16-position blocks (25 = 16+8+1, 36 = 32+4, 49 = 48+1, 6 = 4+2), dilation, odd C
DW_SHAPES = [(8, 576, 2, 2, 5, 1, 2, 1), (8, 240, 4, 4, 5, 1, 2, 1), (8, 288, 4, 4, 5, 2, 2, 1),
             (8, 96, 8, 8, 5, 2, 2, 1), (8, 72, 16, 16, 3, 2, 1, 1), (8, 88, 8, 8, 3, 1, 1, 1),
             (3, 7, 5, 5, 5, 1, 2, 1), (2, 33, 6, 6, 5, 1, 2, 1), (2, 17, 7, 7, 5, 1, 2, 1),
             (4, 9, 2, 3, 5, 1, 2, 1), (2, 12, 9, 9, 3, 1, 2, 2), (1, 3, 1, 1, 5, 1, 2, 1),
             (2, 5, 7, 6, 3, 2, 0, 1)]


@pytest.mark.parametrize("threads", [1, 2])
def test_depthwise_loops_are_torchs_bits_or_decline(threads):
    """Where a loop answers, its result equals torch's forward / ``convolution_backward``
    bit for bit (strides too) on data other than its own check's; on the AVX2 CPUs they
    were written for they answer mobilenet's shapes."""
    dwb = _dw_kernel()
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        answered = []
        for i, (n, c, h, w, k, s, p, d) in enumerate(DW_SHAPES):
            g = torch.Generator().manual_seed(i)
            x = torch.randn(n, c, h, w, generator=g) * 3
            weight = torch.randn(c, 1, k, k, generator=g)
            out = F.conv2d(x, weight, None, s, p, d, c)
            grad = torch.randn(out.shape, generator=g)
            dx, dw, _ = torch.ops.aten.convolution_backward(
                grad, x, weight, None, [s, s], [p, p], [d, d], False, [0, 0], c,
                [True, True, False])
            plan = dwb.plan(x, weight, (s, s), (p, p), (d, d))
            results = (plan.forward(x, weight), plan.input_grad(grad, weight),
                       plan.weight_grad(x, grad))
            for got, want in zip(results, (out, dx, dw)):
                if got is not None:
                    assert torch.equal(got, want), (n, c, h, w, k, s, p, d)
                    assert got.stride() == want.stride()
            answered.append(i) if None not in results else None
        if torch.backends.cpu.get_cpu_capability() == "AVX2":
            assert {0, 1, 2, 3, 4, 5} <= set(answered), answered
    finally:
        torch.set_num_threads(before)


class DepthwiseNet(nn.Module):
    """expand 1x1 -> depthwise (5x5 or 3x3) -> BN -> hardswish -> project, twice."""

    def __init__(self, c=24, k=5):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, c, 3, 2, 1, bias=False), nn.BatchNorm2d(c),
                                  nn.Hardswish(inplace=True))
        self.dw1 = nn.Sequential(nn.Conv2d(c, c, k, 1, k // 2, groups=c, bias=False),
                                 nn.BatchNorm2d(c), nn.Hardswish(inplace=True))
        self.dw2 = nn.Sequential(nn.Conv2d(c, c, 3, 2, 1, groups=c, bias=False),
                                 nn.BatchNorm2d(c), nn.ReLU(inplace=True))
        self.head = nn.Linear(c, 10)

    def forward(self, x):
        y = self.dw2(self.dw1(self.stem(x)) + self.stem[0](x) * 0.5)
        return self.head(y.mean((2, 3)))


def _dw_model(seed=0, k=5):
    torch.manual_seed(seed)
    return DepthwiseNet(k=k).train()


@pytest.mark.parametrize("size,n", [(16, 4), (12, 3)])
def test_depthwise_training_bit_equal_on_the_c_loop(monkeypatch, size, n):
    """Default and strict mode, two input shapes (8x8 and 6x6 after the stem: 16x4 and
    32+4 position blocks), new batch each step: losses, every gradient, parameters and
    running statistics are eager's bits, and the C loop ran."""
    _dw_kernel()
    ran = _dw_calls(monkeypatch)

    def batch(i, dtype):
        return _batch(i, dtype, size=size, n=n)
    _train_both(_dw_model(), wrap=to_graph, batch=batch, mode=f"default {size}")
    _train_both(_dw_model(1), wrap=lambda m: to_graph(m, strict=True), batch=batch,
                mode=f"strict {size}")
    if torch.backends.cpu.get_cpu_capability() == "AVX2":
        assert min(ran().values()) >= 2 * STEPS, ran()


def test_mobilenet_blocks_bit_equal_on_the_c_loop(monkeypatch):
    """SmallCNN (expand, depthwise 5x5, SE, project, residual) and a 3x3 variant."""
    _dw_kernel()
    ran = _dw_calls(monkeypatch)
    _train_both(_model("hardswish"), wrap=to_graph, mode="blocks 5x5")
    _train_both(_model("relu", k=3), wrap=to_graph, mode="blocks 3x3")
    if torch.backends.cpu.get_cpu_capability() == "AVX2":
        assert min(ran().values()) >= STEPS, ran()


def test_depthwise_before_the_loop_is_built_takes_torchs_op(monkeypatch):
    """Until the background build is done (and without a compiler) the node runs torch's
    convolution and ``convolution_backward``: the same bits, no loop called."""
    from runtime.kernels import depthwise_bits
    ran = _dw_calls(monkeypatch)
    monkeypatch.setattr(depthwise_bits, "_function", lambda: None)
    _train_both(_dw_model(), wrap=to_graph, mode="unbuilt")
    assert ran() == {"forward": 0, "input_grad": 0, "weight_grad": 0}


def test_depthwise_two_threads_bit_equal(monkeypatch):
    _dw_kernel()
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        _train_both(_dw_model(2), wrap=to_graph, mode="2 threads")
    finally:
        torch.set_num_threads(before)


def test_depthwise_double_backward_and_no_grad_equal_eager():
    """A gradient penalty (``create_graph=True``) through the node, input gradients, and
    a no-grad call: eager's values."""
    _dw_kernel()

    def f(x, w):                 # (the loss is taken outside: a fused mean sums in
        return F.hardswish(F.conv2d(x, w, None, 1, 2, 1, x.shape[1])) * 1.5   # its order)

    for strict in (False, True):
        converted = to_graph(f, strict=strict)
        for call in range(2):
            g = torch.Generator().manual_seed(call)
            x0 = torch.randn(2, 8, 4, 4, generator=g)
            w0 = torch.randn(8, 1, 5, 5, generator=g)
            results = []
            for fn in (f, converted):
                x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
                loss = fn(x, w).square().mean()
                gx, gw = torch.autograd.grad(loss, (x, w), create_graph=True)
                (gw.square().sum() + gx.abs().sum()).backward()
                with torch.no_grad():
                    plain = fn(x0, w0)
                results.append((loss.detach(), gx.detach(), gw.detach(), x.grad, w.grad,
                                plain))
            for a, b in zip(*results):
                assert torch.equal(a, b), (strict, call)


def test_pass_retargets_only_grouped_convs_that_record():
    from runtime.kernels.depthwise_train import DepthwiseConvTrain

    def f(x, w1, w2):
        return F.conv2d(F.conv2d(x, w1, None, 1, 1), w2, None, 1, 2, 1, 4)

    args = (torch.randn(2, 3, 6, 6), torch.randn(4, 3, 3, 3, requires_grad=True),
            torch.randn(4, 1, 5, 5, requires_grad=True))
    graph = to_graph(f, strict=True).graph(*args).optimize()
    wrapped = [type(n.target).__name__ for n in graph.walk() if n.op == "conv2d"]
    assert wrapped.count(DepthwiseConvTrain.__name__) == 1, wrapped
    with torch.no_grad():
        plain = to_graph(f, strict=True).graph(*args).optimize()
    assert not any(isinstance(n.target, DepthwiseConvTrain) for n in plain.walk())


def test_depthwise_under_cpu_autocast_and_without_onednn_equal_eager(monkeypatch):
    """CPU autocast casts the convolution (the node calls torch's op, which autocast
    sees); with oneDNN off torch sums in other orders (the plan is checked again under
    that flag): eager's bits in both."""
    _dw_kernel()
    ran = _dw_calls(monkeypatch)

    def f(x, w):
        return F.hardswish(F.conv2d(x, w, None, 1, 2, 1, x.shape[1]))

    for strict in (False, True):
        converted = to_graph(f, strict=strict)
        for call in range(2):
            g = torch.Generator().manual_seed(call)
            x0 = torch.randn(4, 16, 4, 4, generator=g)
            w0 = torch.randn(16, 1, 5, 5, generator=g)
            results = []
            for fn in (f, converted):
                x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    y = fn(x, w)
                y.float().square().sum().backward()
                results.append((y, x.grad, w.grad))
            for a, b in zip(*results):
                assert a.dtype == b.dtype and torch.equal(a, b), (strict, call)
    assert ran() == {"forward": 0, "input_grad": 0, "weight_grad": 0}, ran()
    with torch.backends.mkldnn.flags(enabled=False):
        _train_both(_dw_model(3), wrap=to_graph, mode="oneDNN off")
