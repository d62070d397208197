"""A counted kernel loop under autograd runs as one autograd node (kernels/loop_backward.py):
gradients equal eager's (functions and modules, sizes, which inputs need a gradient,
activations, rows of a strided loop, 20 SGD steps), gradcheck in float64, and the node is
really the one that ran where it should (a spy on its apply)."""
from __future__ import annotations

import copy

import pytest
import torch

from benchmarks import training_tasks, workloads
from runtime.kernels import compiler, loop_backward
from tests.training.rnn_grad_checks import (check as _check, close as _close,
                                            inputs as _inputs, loss as _loss, rnn_linear,
                                            rnn_relu, rnn_sigmoid)
from transpiler import to_graph

pytestmark = [pytest.mark.skipif(not compiler.compiler_available(), reason="no C compiler"),
              pytest.mark.usefixtures("sync_kernel_build")]


@pytest.fixture
def spy(monkeypatch):
    runs = []
    real = loop_backward._LoopNode.apply

    def apply(*args):
        runs.append(len(args[0].steps))
        return real(*args)
    monkeypatch.setattr(loop_backward._LoopNode, "apply", apply)
    return runs


@pytest.mark.parametrize("fn", [workloads.rnn_for, rnn_relu, rnn_sigmoid, rnn_linear])
@pytest.mark.parametrize("strict", [True, False])
def test_forms_equal_eager_and_run_as_one_node(fn, strict, spy):
    def call(f):
        return lambda *a: f(*a) if f is not workloads.rnn_for else f(*a[:5])
    args = [_inputs(12, 32, 64, seed) for seed in (0, 1)]
    _check(call(fn), args, strict)
    assert spy, "the loop did not run as one autograd node"


@pytest.mark.parametrize("steps,batch,hidden", [
    (50, 32, 64), (50, 1, 16), (50, 64, 16), (1, 32, 64), (0, 32, 64), (20, 1, 256),
    (20, 64, 256)])
def test_sizes(steps, batch, hidden):
    _check(lambda *a: workloads.rnn_for(*a[:5]),
           [_inputs(steps, batch, hidden, seed) for seed in (2, 3)])


@pytest.mark.parametrize("needs", [
    (True, False, False, False, False, False),       # xs only
    (False, True, False, False, False, False),       # h0 only
    (False, False, True, True, True, False),         # weights only
    (True, True, False, False, False, False),        # frozen weights
    (False, False, False, True, False, False)])      # only the recurrent weight
def test_which_inputs_need_gradients(needs, spy):
    _check(lambda *a: workloads.rnn_for(*a[:5]),
           [_inputs(10, 32, 64, seed, needs=needs) for seed in (4, 5)])
    assert spy


def test_strided_rows_against_the_per_step_path(spy, monkeypatch):
    """A loop over rows 1, 3, .., 11 of 12 (the gradient of the rows' tensor scattered into
    the rows visited) against the same KernelLoop's per-step launcher path."""
    from runtime.passes.counted_loops import counted, kernel_loop
    from runtime.kernels.loop import KernelLoop
    args = _inputs(12, 32, 64, 8)
    converted = to_graph(workloads.rnn_for, strict=True)
    graph = converted.get_concrete(*args[:5]).optimized
    node = next(n for n in graph.nodes if n.op == "while")
    driver = kernel_loop(node, counted(node))
    strided = KernelLoop(driver.kernel, driver.roles, range(1, 12, 2))
    xs, h, w_ih, w_hh, bias, _ = args
    position = {id(v): j for j, v in enumerate(graph.inputs)}
    assert [a.op for a in node.args[2:] if id(a) not in position] == ["matmul"]

    def grads():
        values = [args[position[id(a)]] if id(a) in position else xs @ w_ih
                  for a in node.args[2:]]
        out = strided(h, *values)
        leaves = [h, w_ih, w_hh, bias, xs]
        return [out.detach()] + list(torch.autograd.grad(_loss(out), leaves))
    got = grads()
    assert spy == [6]
    monkeypatch.setattr(loop_backward, "call", lambda *a: None)
    for a, b in zip(got, grads()):
        _close(a, b)


def test_gradcheck_float64(spy):
    xs, h, w_ih, w_hh, bias, c = _inputs(3, 2, 8, 6, dtype=torch.float64)
    tanh = to_graph(workloads.rnn_for, strict=True)
    assert torch.autograd.gradcheck(tanh, (xs, h, w_ih, w_hh, bias))
    converted = to_graph(rnn_relu, strict=True)
    h = h.detach().abs().requires_grad_()         # (relu: away from its kink)
    bias = (bias.detach() + 0.5).requires_grad_()
    assert torch.autograd.gradcheck(converted, (xs, h, w_ih.detach(), w_hh, bias, c))
    assert spy


def test_in_place_change_of_a_saved_weight_raises_as_eager(spy):
    xs, h, w_ih, w_hh, bias, _ = _inputs(8, 32, 64, 7)
    w_hh = w_hh.detach().clone().requires_grad_()
    for fn in (workloads.rnn_for, to_graph(workloads.rnn_for)):
        base = w_hh.detach().clone()
        w = base.clone().requires_grad_()
        out = fn(xs, h, w_ih, w, bias)
        with torch.no_grad():
            w.add_(1.0)
        with pytest.raises(RuntimeError, match="modified by an inplace"):
            out.sum().backward()
    assert spy


def test_twenty_sgd_steps_of_the_module_equal_eager(spy):
    task = training_tasks.rnn("quick")
    for freeze in (False, True):
        eager, opt_e = task.fresh()
        model, opt_g = task.fresh()
        if freeze:
            eager.w_ih.requires_grad_(False)
            model.w_ih.requires_grad_(False)
        graph = to_graph(model, strict=True)
        for step in range(20):
            inputs, target = task.batch(step)
            loss_e = training_tasks.training_step(eager, opt_e, task.loss, inputs, target)
            grads_e = [None if p.grad is None else p.grad.clone() for p in eager.parameters()]
            loss_g = training_tasks.training_step(graph, opt_g, task.loss, inputs, target)
            _close(loss_g, loss_e)
            for p, want in zip(model.parameters(), grads_e):
                assert (p.grad is None) == (want is None)
                if want is not None:
                    _close(p.grad, want)
        for p, q in zip(model.parameters(), eager.parameters()):
            _close(p.detach(), q.detach())
    assert spy


def test_saved_bytes_at_most_eagers(spy):
    task = training_tasks.rnn("quick")
    model = task.model()
    graph = to_graph(copy.deepcopy(model), strict=True)
    (xs, h0), _ = task.batch(0)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()} | \
        {p.untyped_storage().data_ptr() for p in graph.parameters()} | \
        {xs.untyped_storage().data_ptr(), h0.untyped_storage().data_ptr()}

    def saved(fn):
        seen = {}

        def pack(t):
            ptr = t.untyped_storage().data_ptr()
            if ptr not in params:
                seen[ptr] = t.untyped_storage().nbytes()
            return t
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            fn(xs, h0).sum()
        return sum(seen.values())
    assert saved(graph) <= saved(model)
    assert spy
