"""Unrolled steps rolled into one loop node (passes/roll_steps.py), and the row products
behind them (passes/batch_matmul.py: ``xs.unbind(0)`` rows and a list of inputs).

An RNN spelled ``while t < T``, ``for xt in xs.unbind(0)``, ``for t in range(T)`` or over
a list of step tensors (the programs of ``benchmarks/spellings.py`` and ``workloads.py``)
unrolls at trace time; its equal steps become one ``kernel_loop``
node (a ``KernelLoop`` or, with a library product per step, a ``ProductLoop``). Each test
checks the path taken (the node, its step count) and compares values, dtypes and, for
training, gradients with eager on two calls with different values. Chains that must not
roll (a state read twice, rows out of order, an intermediate state returned, too few
steps) are checked to stay unrolled and still match.
"""
import pytest
import torch

from benchmarks.spellings import rnn_unbind, rnn_while
from benchmarks.workloads import rnn_cell as rnn_range, rnn_for as rnn_list
from runtime.kernels import compiler
from runtime.options import options
from runtime.passes.roll_steps import MIN_STEPS
from transpiler import to_graph

HAS_CC = compiler.compiler_available()

pytestmark = pytest.mark.usefixtures("module_kernel_cache")


def inputs(steps, batch, d_in, hidden, seed=0, as_list=False):
    g = torch.Generator().manual_seed(seed)
    xs = torch.randn(steps, batch, d_in, generator=g)
    return (list(xs.unbind(0)) if as_list else xs, torch.randn(batch, hidden, generator=g),
            torch.randn(d_in, hidden, generator=g) * d_in ** -0.5,
            torch.randn(hidden, hidden, generator=g) * hidden ** -0.5,
            torch.randn(hidden, generator=g) * 0.1)


def loops(f, args):
    return [n for n in f.graph(*args).optimize().walk() if n.op == "kernel_loop"]


def check(fn, args_list, rolled: int = 1, steps=None):
    """``fn`` converted: ``rolled`` kernel_loop nodes (of ``steps`` steps), and results
    equal to eager's on each argument tuple."""
    f = to_graph(fn, strict=True)
    for args in args_list:
        got, want = f(*args), fn(*args)
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    found = loops(f, args_list[0])
    assert len(found) == rolled, f.graph(*args_list[0]).optimize()
    if steps is not None:
        assert all(n.attrs["steps"] == steps for n in found)
    return f, found


SPELLINGS = [(rnn_while, False), (rnn_unbind, False), (rnn_range, False), (rnn_list, True)]


@pytest.mark.parametrize("fn, as_list", SPELLINGS, ids=lambda v: getattr(v, "__name__", ""))
@pytest.mark.parametrize("size", [(9, 1, 16, 16), (7, 3, 10, 24), (6, 32, 64, 64)],
                         ids=str)
def test_spellings_roll_into_one_loop(fn, as_list, size):
    args = [inputs(*size, seed=s, as_list=as_list) for s in (0, 1)]
    _, found = check(fn, args, steps=size[0])
    if HAS_CC:
        assert found[0].target.kernel.compiled


def test_large_steps_roll_into_a_product_loop():
    """A product past the loop body's limit stays a library GEMM per step: a ProductLoop."""
    from runtime.kernels.loop_product import ProductLoop
    args = [inputs(5, 64, 32, 256, seed=s) for s in (0, 1)]
    _, found = check(rnn_while, args, steps=5)
    assert isinstance(found[0].target, ProductLoop)


@pytest.mark.parametrize("fn, as_list", SPELLINGS, ids=lambda v: getattr(v, "__name__", ""))
def test_training_gradients_match_eager(fn, as_list):
    f = to_graph(fn, strict=True)
    for seed in (0, 1):
        xs, h, *weights = inputs(8, 4, 12, 16, seed=seed, as_list=as_list)
        grads = []
        for run in (fn, f):
            leaves = [w.clone().requires_grad_() for w in weights]
            out = run(xs, h, *leaves)
            grads.append(torch.autograd.grad(out.pow(2).mean(), leaves) + (out.detach(),))
        for got, want in zip(grads[1], grads[0]):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    leaves = [w.requires_grad_() for w in weights]
    assert len(loops(f, (xs, h, *leaves))) == 1


def test_without_a_compiler_the_steps_run_as_torch_ops():
    with options.override(compiler=False):
        check(rnn_unbind, [inputs(6, 2, 8, 8, seed=s) for s in (0, 1)])


# ------------------------------------------------------------------ chains that stay
def rnn_residual(xs, h, w_ih, w_hh, bias):
    for t in range(xs.shape[0]):          # the state read twice by its step
        h = torch.tanh(xs[t] @ w_ih + h @ w_hh + bias) + h
    return h


def rnn_reversed(xs, h, w_ih, w_hh, bias):
    for t in range(xs.shape[0] - 1, -1, -1):     # rows in descending order
        h = torch.tanh(xs[t] @ w_ih + h @ w_hh + bias)
    return h


def rnn_outputs(xs, h, w_ih, w_hh, bias):
    outs = []
    for t in range(xs.shape[0]):          # every state returned
        h = torch.tanh(xs[t] @ w_ih + h @ w_hh + bias)
        outs.append(h)
    return torch.stack(outs)


def rnn_short(xs, h, w_ih, w_hh, bias):
    for t in range(MIN_STEPS - 1):
        h = torch.tanh(xs[t] @ w_ih + h @ w_hh + bias)
    return h


@pytest.mark.parametrize("fn", [rnn_residual, rnn_reversed, rnn_outputs, rnn_short],
                         ids=lambda f: f.__name__)
def test_chains_that_must_not_roll_stay_and_match(fn):
    check(fn, [inputs(6, 3, 8, 16, seed=s) for s in (0, 1)], rolled=0)


def test_list_of_inputs_batches_its_products_once():
    args = inputs(6, 2, 8, 8, as_list=True)
    f = to_graph(rnn_list, strict=True)
    f(*args)
    graph = f.graph(*args).optimize()
    stacks = [n for n in graph.nodes if n.op == "stack"]
    assert len(stacks) == 1 and stacks[0].meta.shape == (6, 2, 8)
