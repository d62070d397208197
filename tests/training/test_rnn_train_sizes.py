"""RNN training across sizes (issue 15): a counted ``for xt in xs`` loop runs under autograd
as one node both when its step's product is a kernel's prologue (small: ``loop_backward``)
and when it is too large for that (``loop_product.ProductLoop``: the product by torch,
the elementwise rest in C); gradients equal eager's, the path taken is the one expected,
saved memory is at most eager's, and a double backward (``create_graph=True``) through
either node equals eager's (gradcheck and gradgradcheck in float64)."""
from __future__ import annotations

import copy

import pytest
import torch

from benchmarks import training_tasks, workloads
from runtime.kernels import compiler, loop_backward, loop_product
from runtime.passes import gemm_epilogue
from tests.training.rnn_grad_checks import (check as _check, close as _close,
                                            inputs as _inputs, loss as _loss, rnn_linear,
                                            rnn_relu, rnn_sigmoid)
from transpiler import to_graph

pytestmark = [pytest.mark.skipif(not compiler.compiler_available(), reason="no C compiler"),
              pytest.mark.usefixtures("sync_kernel_build")]


@pytest.fixture
def spy(monkeypatch):
    """Which loop node ran: "kernel" (the product in the kernel) or "product" (by torch),
    and how many steps ran by ``ProductLoop``'s direct calls without autograd."""
    runs = []
    for cls, name in ((loop_backward._LoopNode, "kernel"), (loop_product._ProductNode,
                                                              "product")):
        def apply(*args, _real=cls.apply, _name=name):
            runs.append(_name)
            return _real(*args)
        monkeypatch.setattr(cls, "apply", apply)
    real_run = loop_product.ProductLoop._run

    def run(self, plan, var, caps, stack):
        if stack is None:
            runs.append("direct")
        return real_run(self, plan, var, caps, stack)
    monkeypatch.setattr(loop_product.ProductLoop, "_run", run)
    return runs


@pytest.fixture
def no_prologue(monkeypatch):
    """Every product stays a torch op (the ProductLoop path at any size)."""
    monkeypatch.setattr(gemm_epilogue, "MAX_WORK", 0)
    monkeypatch.setattr(gemm_epilogue, "LOOP_MAX_WORK", 0)


def rnn(xs, h, w_ih, w_hh, bias, c):
    return workloads.rnn_for(xs, h, w_ih, w_hh, bias)


# ----------------------------------------------------------------------------- sizes
@pytest.mark.parametrize("batch,hidden,path", [
    (1, 16, "kernel"), (32, 64, "kernel"), (64, 128, "product"), (32, 256, "product")])
@pytest.mark.parametrize("strict", [True, False])
def test_sizes_equal_eager_on_the_expected_node(batch, hidden, path, strict, spy):
    _check(rnn, [_inputs(6, batch, hidden, seed) for seed in (0, 1)], strict)
    assert spy and set(spy) == {path}


@pytest.mark.parametrize("fn", [rnn_relu, rnn_sigmoid, rnn_linear])
def test_forms_through_the_product_node(fn, spy, no_prologue):
    _check(fn, [_inputs(7, 8, 16, seed) for seed in (2, 3)])
    assert spy and set(spy) == {"product"}


def rnn_two_products(xs, h, w_ih, w_hh, bias, c):
    for xt in xs:
        h = torch.tanh(xt @ w_ih + (h @ w_hh) @ w_hh + bias)
    return h


def rnn_residual(xs, h, w_ih, w_hh, bias, c):
    for xt in xs:
        h = torch.tanh(xt @ w_ih + h @ w_hh + bias) + h
    return h


@pytest.mark.parametrize("fn", [rnn_two_products, rnn_residual])
@pytest.mark.parametrize("grad", [True, False])
def test_other_steps_keep_the_general_loop(fn, grad, spy, no_prologue):
    """A step whose kernel reads a product of something else than the loop variable, or
    the loop variable itself, is no ProductLoop: eager's values and gradients."""
    if grad:
        _check(fn, [_inputs(5, 8, 16, seed) for seed in (20, 21)])
    else:
        converted = to_graph(fn, strict=True)
        with torch.no_grad():
            for seed in (20, 21):
                args = _inputs(5, 8, 16, seed)
                _close(converted(*args), fn(*args))
    assert "product" not in spy and "direct" not in spy


@pytest.mark.parametrize("needs", [
    (True, False, False, False, False, False),       # xs only
    (False, True, False, False, False, False),       # h0 only
    (False, False, False, True, False, False),       # only the recurrent weight
    (True, True, False, False, False, False)])       # frozen weights
def test_which_inputs_need_gradients(needs, spy, no_prologue):
    _check(rnn, [_inputs(5, 8, 16, seed, needs=needs) for seed in (4, 5)])
    assert set(spy) == {"product"}


def test_without_autograd_the_steps_run_direct(spy, no_prologue):
    converted = to_graph(rnn, strict=True)
    for seed in (6, 7):
        args = _inputs(9, 8, 16, seed)
        with torch.no_grad():
            got, want = converted(*args), rnn(*args)
        _close(got, want)
        _close(converted(*[a.detach() for a in args]), want)
    assert spy == ["direct"] * 4


@pytest.mark.parametrize("grad", [True, False])
def test_without_a_compiled_kernel_the_steps_run_as_torch_ops(grad, spy, no_prologue):
    from runtime.options import options
    with options.override(compiler=False):
        if grad:
            _check(rnn, [_inputs(5, 8, 16, seed) for seed in (40, 41)])
        else:
            converted = to_graph(rnn, strict=True)
            with torch.no_grad():
                for seed in (40, 41):
                    args = _inputs(5, 8, 16, seed)
                    _close(converted(*args), rnn(*args))
    assert spy == []


def test_twenty_sgd_steps_equal_eager(no_prologue, spy):
    params = [p.detach().clone() for p in _inputs(1, 8, 16, 8)[2:5]]
    runs = {}
    for name, fn in (("eager", rnn), ("tograph", to_graph(rnn, strict=True))):
        ps = [p.clone().requires_grad_() for p in params]
        opt = torch.optim.SGD(ps, lr=0.05, momentum=0.9)
        losses = []
        for step in range(20):
            xs, h0 = _inputs(6, 8, 16, 100 + step)[:2]
            opt.zero_grad()
            loss = fn(xs.detach(), h0.detach(), *ps, None).pow(2).mean()
            loss.backward()
            opt.step()
            losses.append(loss.detach())
        runs[name] = (torch.stack(losses), ps)
    _close(runs["tograph"][0], runs["eager"][0])
    for a, b in zip(runs["tograph"][1], runs["eager"][1]):
        _close(a.detach(), b.detach())
    assert spy.count("product") == 20


def test_module_weights_take_the_product_node(spy):
    """``to_graph(model)`` (weights traced as constants, passed in as captures) at a size
    past the prologue: the product node, gradients equal eager's over two batches."""
    model = training_tasks.RNN(128, 128)
    twin = copy.deepcopy(model)
    converted = to_graph(twin, strict=True)
    for seed in (30, 31):
        xs, h0 = _inputs(4, 64, 128, seed)[:2]
        for m in (model, twin):
            m.zero_grad()
        want, got = model(xs.detach(), h0.detach()), converted(xs.detach(), h0.detach())
        _loss(want).backward()
        _loss(got).backward()
        _close(got.detach(), want.detach())
        for a, b in zip(twin.parameters(), model.parameters()):
            _close(a.grad, b.grad)
    assert spy == ["product", "product"]


def test_saved_bytes_at_most_eagers(spy):
    args = _inputs(8, 64, 128, 9)

    def saved(fn):
        seen = {}

        def pack(t):
            if not any(t.untyped_storage().data_ptr() == a.untyped_storage().data_ptr()
                       for a in args):
                seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            fn(*args)
        return sum(seen.values())
    converted = to_graph(rnn, strict=True)
    converted(*args)
    assert spy == ["product"]
    assert 0 < saved(converted) <= saved(rnn)


# ----------------------------------------------------------------------------- double backward
def _penalty(fn, args):
    """A gradient penalty: the gradients' squared norm, differentiated again."""
    out = fn(*args)
    wanted = [a for a in args if a.requires_grad]
    grads = torch.autograd.grad(_loss(out), wanted, create_graph=True, allow_unused=True)
    total = sum((g * g).sum() for g in grads if g is not None)
    again = torch.autograd.grad(total, wanted, allow_unused=True)
    return [g.detach() if g is not None else None for g in grads] + list(again)


@pytest.mark.parametrize("fn", [rnn, rnn_relu, rnn_sigmoid, rnn_linear])
@pytest.mark.parametrize("path", ["kernel", "product"])
def test_double_backward_equals_eager(fn, path, spy, monkeypatch):
    if path == "product":
        monkeypatch.setattr(gemm_epilogue, "MAX_WORK", 0)
        monkeypatch.setattr(gemm_epilogue, "LOOP_MAX_WORK", 0)
    converted = to_graph(fn, strict=True)
    for seed in (10, 11):
        args = _inputs(5, 4, 16, seed)
        for got, want in zip(_penalty(converted, args), _penalty(fn, args)):
            assert (got is None) == (want is None)
            if want is not None:
                _close(got, want)
    assert spy and set(spy) == {path}


@pytest.mark.parametrize("path", ["kernel", "product"])
def test_gradcheck_and_gradgradcheck_float64(path, spy, monkeypatch):
    if path == "product":
        monkeypatch.setattr(gemm_epilogue, "MAX_WORK", 0)
        monkeypatch.setattr(gemm_epilogue, "LOOP_MAX_WORK", 0)
    args = tuple(_inputs(3, 2, 8, 12, dtype=torch.float64)[:5]) + (None,)
    converted = to_graph(rnn, strict=True)
    assert torch.autograd.gradcheck(converted, args)
    assert torch.autograd.gradgradcheck(converted, args, fast_mode=True)
    xs, h, w_ih, w_hh, bias, c = _inputs(2, 2, 8, 13, dtype=torch.float64)
    relu = to_graph(rnn_relu, strict=True)
    h = h.detach().abs().requires_grad_()         # (relu: away from its kink)
    bias = (bias.detach() + 0.5).requires_grad_()
    assert torch.autograd.gradgradcheck(relu, (xs, h, w_ih, w_hh, bias, c), fast_mode=True)
    assert spy and set(spy) == {path}


def test_third_order_equals_eager(spy):
    """The replay's steps are differentiable again (the saved output carries the node)."""
    args = _inputs(4, 2, 8, 14, dtype=torch.float64)[:5]

    def third(fn):
        out = fn(*args, None)
        g, = torch.autograd.grad(_loss(out), [args[3]], create_graph=True)
        gg, = torch.autograd.grad((g * g).sum(), [args[3]], create_graph=True)
        return torch.autograd.grad(gg.pow(3).sum(), args)
    for got, want in zip(third(to_graph(rnn, strict=True)), third(rnn)):
        _close(got, want, 1e-10)
    assert spy == ["kernel"]


def test_grid_benchmark_smoke(capsys):
    from benchmarks import rnn_grid
    threads = torch.get_num_threads()
    try:
        rnn_grid.main(["--sizes", "2x16", "--steps", "3", "--rounds", "2", "--round-s",
                       "0.001", "--baseline", "--threads", str(threads)])
    finally:
        torch.set_num_threads(threads)
    row = [line for line in capsys.readouterr().out.splitlines() if line.startswith("b2 ")]
    assert len(row) == 1 and "tograph" in row[0] and "before" in row[0]
    errors = [float(part.split("err")[1]) for part in row[0].split("|")[1:]]
    assert len(errors) == 2 and all(e <= 1e-5 for e in errors)
