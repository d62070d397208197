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

from tests.training.test_cnn_train_paths import _batch, _model, _train_both
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
