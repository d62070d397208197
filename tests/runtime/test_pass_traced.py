"""The optimizer on traced functions: optimized graphs against eager torch, in values,
dtypes, aliasing seen by the caller, effects, randomness and gradients."""
import pytest
import torch

from runtime.options import options
from runtime.passes import CLEANUP
from transpiler import to_graph
from test_passes import all_ops, ops, optimize, same

W = torch.randn(3, 3, requires_grad=True)


@pytest.fixture(autouse=True)
def verify_every_pass():
    with options.override(verify_passes=True, optimize=True, compiler=False):
        yield


def _traced(fn, *args):
    """(graph function, traced graph, cleaned-up graph) for ``fn`` on ``args``."""
    graph_fn = to_graph(fn)
    g = graph_fn.graph(*args)
    return graph_fn, g, optimize(g, passes=CLEANUP)


def clones_one_mutated(x):
    a = x.clone()
    b = x.clone()
    a.add_(1)
    return a, b


def mutates_through_a_view(x):
    y = x.clone()
    before = y * 1 + 0.0
    y[0].add_(5)
    return before, y * 1, y.sum()


def two_draws(x):
    return x + torch.rand(3), x + torch.rand(3)


def returns_input_times_one(x):
    return x * 1, x.float(), -(-x)


def branch_on_a_constant(x):
    if torch.ones(()) > 0:
        y = x * 2
    else:
        y = x - 1
    return y + 1


def invariant_in_loop(x, n):
    k = 0
    while k < n:
        x = x + W.abs().sum() * 0.01
        k += 1
    return x


def grad_switch(x):
    with torch.no_grad():
        frozen = x * 1
    return frozen * x + (x * 1) * 2


def test_mutated_clones_stay_apart():
    f, g, opt = _traced(clones_one_mutated, torch.zeros(3))
    assert ops(opt).count("clone") == 2
    same(f(torch.zeros(3)), (torch.ones(3), torch.zeros(3)))


def test_mutation_through_a_view_is_seen():
    x = torch.arange(6.0).reshape(2, 3)
    f, g, opt = _traced(mutates_through_a_view, x)
    same(f(x), mutates_through_a_view(x))


def test_random_draws_stay_two():
    f, g, opt = _traced(two_draws, torch.zeros(3))
    assert all_ops(opt).count("rand") == 2
    a, b = f(torch.zeros(3))
    assert not torch.equal(a, b)


def test_outputs_are_not_the_inputs():
    x = torch.zeros(3)
    f, g, opt = _traced(returns_input_times_one, x)
    a, b, c = f(x)
    assert a is not x and c is not x and b is x is x.float()   # eager: .float() is x itself
    a.add_(1)
    c.add_(1)
    same(x, torch.zeros(3))


def test_branch_on_a_constant_is_inlined():
    f, g, opt = _traced(branch_on_a_constant, torch.zeros(3))
    assert "cond" in all_ops(g) and "cond" not in all_ops(opt)
    same(f(torch.ones(3)), torch.full((3,), 3.0))


def test_invariant_work_leaves_the_loop_and_gradients_agree():
    x = torch.randn(3, requires_grad=True)
    n = torch.tensor(4)
    f, g, opt = _traced(invariant_in_loop, x, n)
    loop = next(node for node in opt.nodes if node.op == "while")
    assert "sum" not in [node.op for node in loop.subgraphs[1].nodes]
    got = f(x, n)
    want = invariant_in_loop(x, n)
    same(got, want)
    grads = torch.autograd.grad(got.sum(), [x, W])
    wants = torch.autograd.grad(want.sum(), [x, W])
    for a, b in zip(grads, wants):
        torch.testing.assert_close(a, b)
    same(f(x, torch.tensor(0)), x)                      # zero iterations


def test_no_grad_regions_keep_their_gradients():
    x = torch.randn(3, requires_grad=True)
    f, g, opt = _traced(grad_switch, x)
    got = f(x)
    (grad,) = torch.autograd.grad(got.sum(), [x])
    (want,) = torch.autograd.grad(grad_switch(x).sum(), [x])
    torch.testing.assert_close(grad, want)
