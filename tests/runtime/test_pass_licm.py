"""Loop-invariant code motion out of ``while`` loops built with ``runtime.while_loop``."""
import torch

import runtime
from runtime.passes import dce, licm
from test_passes import F32, all_ops, ops, optimize, run_both


def _loop(graph, x, k, body_extra):
    def body(v):
        return (v + body_extra(k),)
    (out,) = runtime.while_loop(lambda v: v.sum() < 30, body, (x,))
    graph.outputs = (out.node,)
    return next(n for n in graph.nodes if n.op == "while")


def _body(g):
    return next(n for n in g.nodes if n.op == "while").subgraphs[1]


def test_invariant_work_moves_before_the_loop(graph):
    x = runtime.placeholder(F32, shape=(3,), name="x")
    k = runtime.placeholder(F32, shape=(3,), name="k")
    _loop(graph, x, k, lambda k: (k.exp() * 2).sum())
    assert [n.op for n in _body(graph).nodes if n.op != "placeholder"] == ["exp", "mul", "sum", "add"]
    opt = optimize(graph, passes=[licm, dce])
    assert ops(opt)[:3] == ["exp", "mul", "sum"] and ops(opt)[3] == "while"
    loop = next(n for n in opt.nodes if n.op == "while")
    assert [n.op for n in loop.subgraphs[1].nodes if n.op != "placeholder"] == ["add"]
    assert len(loop.args) == len(loop.subgraphs[0].inputs) == len(loop.subgraphs[1].inputs)
    assert loop.args[-1].op == "sum"                 # the hoisted value comes in as a capture
    run_both(graph, opt, torch.ones(3), torch.full((3,), 0.5))


def test_loop_variables_and_their_users_stay(graph):
    x = runtime.placeholder(F32, shape=(3,), name="x")
    k = runtime.placeholder(F32, shape=(3,), name="k")

    def body(v):
        return (v * k + 1,)                         # reads the loop variable: not invariant
    (out,) = runtime.while_loop(lambda v: v.sum() < 30, body, (x,))
    graph.outputs = (out.node,)
    opt = optimize(graph, passes=[licm])
    assert ops(opt) == ops(graph) and all_ops(opt) == all_ops(graph)


def test_nothing_that_may_fail_is_hoisted_from_a_loop_that_may_not_run(graph):
    # integer division by zero raises: if the loop runs zero times, eager never divides
    x = runtime.placeholder(F32, shape=(3,), name="x")
    n = runtime.placeholder(torch.int64, shape=(), name="n")
    _loop(graph, x, n, lambda n: (10 // n).float())
    opt = optimize(graph, passes=[licm])
    assert "rfloordiv" in all_ops(_body(opt))
    run_both(graph, opt, torch.full((3,), 100.0), torch.tensor(0))


def test_random_and_mutated_values_stay_in_the_loop(graph):
    x = runtime.placeholder(F32, shape=(3,), name="x")
    k = runtime.placeholder(F32, shape=(3,), name="k")
    def extra(k):
        c = k.clone()
        c.add_(1)                                  # invariant, but mutated in the loop
        return torch.rand_like(k) * c
    _loop(graph, x, k, extra)
    opt = optimize(graph, passes=[licm])
    assert all_ops(_body(opt)) == all_ops(_body(graph))


def test_hoists_from_nested_loops_level_by_level(graph):
    x = runtime.placeholder(F32, shape=(3,), name="x")
    k = runtime.placeholder(F32, shape=(3,), name="k")

    def outer_body(v):
        (w,) = runtime.while_loop(lambda w: w.sum() < 10, lambda w: (w + k.cos().sum(),), (v,))
        return (w * 2,)
    (out,) = runtime.while_loop(lambda v: v.sum() < 100, outer_body, (x,))
    graph.outputs = (out.node,)
    opt = optimize(graph, passes=[licm, dce])
    assert ops(opt)[:2] == ["cos", "sum"]            # out of both loops
    run_both(graph, opt, torch.ones(3), torch.ones(3))
