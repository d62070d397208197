"""The pass manager, constant folding, branch folding, CSE and DCE, on graphs built by hand.

Each test builds a tiny graph, optimizes it (or runs one pass), asserts on the listing or
the op list, and runs both graphs to check the optimized one computes the same values.
The other test_pass_*.py files import the helpers below.
"""
import pytest
import torch

import runtime
from runtime import GraphError, TensorMeta
from runtime.ops import is_impure, op_name
from runtime.options import options
from runtime.passes import (CLEANUP, PASSES, cse, dce, fold, fold_cond, fuse_elementwise,
                            optimize, plan_memory)

F32, I64 = torch.float32, torch.int64


# --------------------------------------------------------------------------- helpers
@pytest.fixture(autouse=True)
def verify_every_pass():
    with options.override(verify_passes=True, optimize=True, compiler=False):
        yield


def meta(*shape, dtype=F32):
    return TensorMeta(tuple(shape), dtype)


def op(g, target, *args, meta=None, **kwargs):
    """A node calling ``target`` (impure as the op table says); meta defaults to f32[3]."""
    return g.add_node(op_name(target), target, args, kwargs,
                      TensorMeta((3,), F32) if meta is None else meta,
                      impure=is_impure(target, kwargs))


def graph_of(*shapes, dtype=F32):
    """A new graph with placeholders x, y, ... of these shapes."""
    g = runtime.Graph(name="g")
    names = "xyzw"
    return g, [g.placeholder(TensorMeta(tuple(s), dtype), name=names[i])
               for i, s in enumerate(shapes)]


def cleanup(g):
    """The cleanup passes to their fixed point (what the tests check, without the fusion
    passes that run after them)."""
    return optimize(g, passes=CLEANUP)


def ops(g):
    return [n.op for n in g.nodes if n.op != "placeholder"]


def all_ops(g):
    return [n.op for n in g.walk() if n.op != "placeholder"]


def same(got, expected):
    """Same structure, dtypes, shapes, values (NaN equal to NaN)."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(got, torch.Tensor)
        assert got.dtype == expected.dtype and got.shape == expected.shape, (got, expected)
        torch.testing.assert_close(got, expected, equal_nan=True)
    elif isinstance(expected, dict):
        assert isinstance(got, dict) and got.keys() == expected.keys()
        for k in expected:
            same(got[k], expected[k])
    else:
        assert type(got) is type(expected) and len(got) == len(expected)
        for a, b in zip(got, expected):
            same(a, b)


def run_both(g, opt, *inputs):
    """Outputs of ``g`` and of its optimized ``opt`` on the same inputs (compared)."""
    expected = g(*[i.clone() for i in inputs])
    got = opt(*[i.clone() for i in inputs])
    same(got, expected)
    return got


# --------------------------------------------------------------------------- the manager
def test_optimize_copies_keeps_signature_and_never_changes_its_input():
    g, (x, y) = graph_of((3,), (3,))
    a = op(g, torch.sin, x)
    b = op(g, torch.sin, x)
    g.outputs = {"s": op(g, torch.add, a, b), "y": [y]}
    before = str(g)
    optimize(g)
    opt = cleanup(g)
    assert str(g) == before                                  # the traced graph is untouched
    assert opt is not g and opt.name == "g"
    assert [p.name for p in opt.inputs] == ["x", "y"]
    assert set(opt.outputs) == {"s", "y"} and isinstance(opt.outputs["y"], list)
    assert ops(opt).count("sin") == 1
    run_both(g, opt, torch.randn(3), torch.randn(3))


def test_optimize_off_returns_the_verified_copy():
    g, (x,) = graph_of((3,))
    g.outputs = (op(g, torch.add, op(g, torch.sin, x), op(g, torch.sin, x)),)
    with options.override(optimize=False):
        opt = cleanup(g)
    assert opt is not g and ops(opt) == ops(g)


def test_pass_list_runs_final_passes_last():
    names = [p.__name__ for p in PASSES]
    # grad_out_of_place only marks nodes: it runs after plan_memory so that the in-place
    # activations memory planning makes are marked too; depthwise_train then points the
    # grouped convolutions autograd records at their bit-exact loops; batchnorm_train
    # folds activations into train batch norms before memory planning sees them
    final = [fuse_elementwise.__name__, "batchnorm_train", plan_memory.__name__,
             "grad_out_of_place", "depthwise_train"]
    at = [names.index(n) for n in final]
    assert at == sorted(at) and at[0] > names.index("fuse_patterns"), names
    assert names.index("fuse_patterns") > max(names.index(p.__name__) for p in CLEANUP)


def test_chosen_passes_only():
    g, (x,) = graph_of((3,))
    op(g, torch.exp, x)                                      # dead
    g.outputs = (op(g, torch.add, op(g, torch.sin, x), op(g, torch.sin, x)),)
    only_cse = optimize(g, passes=[cse])
    assert ops(only_cse) == ["exp", "sin", "add"]
    only_dce = optimize(g, passes=[dce])
    assert ops(only_dce) == ["sin", "sin", "add"]


def test_verification_after_each_pass_names_the_broken_pass():
    def breaks_graph(graph):
        graph.outputs = (graph.add_node("neg", torch.neg, (graph.inputs[0],), meta=meta(3)),)
        graph.nodes.reverse()                               # uses before definition
        return graph
    g, (x,) = graph_of((3,))
    g.outputs = (op(g, torch.sin, x),)
    with pytest.raises(GraphError, match="breaks_graph"):
        optimize(g, passes=[breaks_graph])
    with options.override(verify_passes=False):
        optimize(g, passes=[breaks_graph])                  # not checked: no error


# --------------------------------------------------------------------------- fold
def test_fold_computes_on_factories_once():
    g, (x,) = graph_of((3,))
    z = op(g, torch.zeros, 3)
    o = op(g, torch.ones, 3)
    two = op(g, torch.Tensor.mul, o, 2)
    c = op(g, torch.Tensor.add, z, two)
    g.outputs = (op(g, torch.Tensor.add, x, c),)
    opt = optimize(g, passes=[fold, dce])
    assert ops(opt) == ["constant", "add"]
    folded = opt.nodes[1]
    assert folded.attrs["folded"] is True and folded.meta == meta(3)
    assert "= constant [2.0, 2.0, 2.0]" in str(opt)
    run_both(g, opt, torch.randn(3))


def test_fold_never_reads_parameters():
    g, (x,) = graph_of((3,))
    w = g.constant(torch.ones(3, requires_grad=True), name="w")
    g.outputs = (op(g, torch.Tensor.add, x, op(g, torch.Tensor.mul, w, 2)),)
    assert ops(optimize(g, passes=[fold])) == ["constant", "mul", "add"]


def test_fold_keeps_factories_and_values_the_caller_gets():
    g, (x,) = graph_of((3,))
    z = op(g, torch.zeros, 3)
    doubled = op(g, torch.Tensor.mul, op(g, torch.ones, 3), 2)
    g.outputs = (z, doubled)                                 # fresh tensors on every call
    opt = optimize(g, passes=[fold])
    assert ops(opt) == ["zeros", "ones", "mul"]
    first, second = opt(torch.randn(3)), opt(torch.randn(3))
    assert first[1] is not second[1]


def test_fold_skips_large_mutated_and_random_values():
    g, (x,) = graph_of((3,))
    big = op(g, torch.ones, 100, 100, meta=meta(100, 100))
    s = op(g, torch.Tensor.sum, op(g, torch.Tensor.mul, big, 2), meta=meta())
    z = op(g, torch.zeros, 3)
    zz = op(g, torch.Tensor.mul, z, 2)                     # read before z is mutated...
    op(g, torch.Tensor.add_, z, 1)
    r = op(g, torch.Tensor.mul, op(g, torch.rand, 3), 2)
    g.outputs = (op(g, torch.Tensor.add, op(g, torch.Tensor.add, x, s), zz), r)
    opt = optimize(g, passes=[fold])
    assert "constant" not in ops(opt)
    assert ops(opt).count("mul") == 3


def test_fold_leaves_errors_to_run_time():
    g, (x,) = graph_of((3,))
    bad = op(g, torch.Tensor.add, op(g, torch.ones, 3), op(g, torch.ones, 2, meta=meta(2)))
    g.outputs = (op(g, torch.Tensor.add, x, bad),)
    opt = optimize(g, passes=[fold])
    assert ops(opt) == ops(g)
    with pytest.raises(RuntimeError):
        opt(torch.ones(3))


# --------------------------------------------------------------------------- fold_cond
def _cond_on(g, pred, x):
    then_g = runtime.Graph(parent=g, name="then")
    tx = then_g.placeholder(meta(3), name="tx")
    then_g.outputs = (op(then_g, torch.Tensor.mul, tx, 2),)
    else_g = runtime.Graph(parent=g, name="else")
    ex = else_g.placeholder(meta(3), name="ex")
    else_g.outputs = (op(else_g, torch.Tensor.sub, ex, 1),)
    node = g.add_node("cond", None, (pred, x), meta=(meta(3),), attrs={"n_operands": 1},
                      subgraphs=[then_g, else_g])
    return g.add_node("get", None, (node,), meta=meta(3), attrs={"index": 0})


@pytest.mark.parametrize("value, kept", [(1.0, "mul"), (-1.0, "sub")])
def test_cond_on_a_folded_predicate_becomes_the_taken_branch(value, kept):
    g, (x,) = graph_of((3,))
    one = op(g, torch.full, (), value, meta=meta())
    pred = op(g, torch.Tensor.gt, one, 0, meta=meta(dtype=torch.bool))
    g.outputs = (op(g, torch.Tensor.add, _cond_on(g, pred, x), 1),)
    opt = optimize(g, passes=[fold, fold_cond, dce])
    assert "cond" not in all_ops(opt)
    assert ops(opt) == [kept, "add"]
    run_both(g, opt, torch.randn(3))


def test_cond_on_a_parameter_is_kept():
    g, (x,) = graph_of((3,))
    flag = g.constant(torch.tensor(True), name="flag")      # may change between calls
    g.outputs = (_cond_on(g, flag, x),)
    assert "cond" in ops(optimize(g, passes=[fold, fold_cond]))


# --------------------------------------------------------------------------- cse
def test_cse_merges_equal_pure_nodes_and_their_users():
    g, (x,) = graph_of((3,))
    a = op(g, torch.Tensor.add, op(g, torch.sin, x), 1)
    b = op(g, torch.Tensor.add, op(g, torch.sin, x), 1)
    g.outputs = (op(g, torch.Tensor.mul, a, b),)
    opt = optimize(g, passes=[cse])
    assert ops(opt) == ["sin", "add", "mul"]
    mul = opt.nodes[-1]
    assert mul.args[0] is mul.args[1]
    run_both(g, opt, torch.randn(3))


def test_cse_tells_literals_apart_by_type_and_sign():
    g, (x,) = graph_of((3,), dtype=I64)
    i64 = meta(3, dtype=I64)
    outs = [op(g, torch.Tensor.add, x, 1, meta=i64), op(g, torch.Tensor.add, x, True, meta=i64),
            op(g, torch.Tensor.add, x, 1.0), op(g, torch.Tensor.mul, x, 0.0),
            op(g, torch.Tensor.mul, x, -0.0)]
    g.outputs = tuple(op(g, torch.Tensor.neg, o, meta=o.meta) for o in outs)
    opt = optimize(g, passes=[cse])
    assert ops(opt) == ops(g)
    got = run_both(g, opt, torch.tensor([1, 0, -2]))
    assert torch.signbit(got[3]).tolist() != torch.signbit(got[4]).tolist()


def test_cse_keeps_random_draws_and_effects():
    g, (x,) = graph_of((3,))
    r1, r2 = op(g, torch.rand, 3), op(g, torch.rand, 3)
    p1 = g.add_node("print_values", runtime.graph_ops.print_values, (x,), meta=None, impure=True)
    p2 = g.add_node("print_values", runtime.graph_ops.print_values, (x,), meta=None, impure=True)
    g.outputs = (r1, r2)
    opt = cleanup(g)
    assert ops(opt).count("rand") == 2 and ops(opt).count("print_values") == 2
    a, b = opt(torch.zeros(3))
    assert not torch.equal(a, b)
    assert p1 is not p2


def test_cse_never_merges_values_mutated_in_place():
    # a = x.clone(); b = x.clone(); a.add_(1); return a, b
    g, (x,) = graph_of((3,))
    a = op(g, torch.Tensor.clone, x)
    b = op(g, torch.Tensor.clone, x)
    a2 = op(g, torch.Tensor.add_, a, 1)
    g.outputs = (a2, b)
    opt = cleanup(g)
    assert ops(opt).count("clone") == 2
    va, vb = opt(torch.zeros(3))
    same((va, vb), (torch.ones(3), torch.zeros(3)))


def test_cse_never_merges_reads_around_a_mutation():
    # b1 = x + 1; v = x.view(3); v.add_(1); b2 = x + 1  (x mutated through a view)
    g, (x,) = graph_of((3,))
    c = op(g, torch.Tensor.clone, x)
    b1 = op(g, torch.Tensor.add, c, 1)
    v = op(g, torch.Tensor.view, c, 3)
    op(g, torch.Tensor.add_, v, 1)
    b2 = op(g, torch.Tensor.add, c, 1)
    g.outputs = (op(g, torch.Tensor.sub, b2, b1),)
    opt = cleanup(g)
    assert ops(opt).count("add") == 2
    same(opt(torch.zeros(3)), (torch.ones(3),))


def test_cse_keeps_two_outputs_two_objects():
    g, (x,) = graph_of((3,))
    g.outputs = (op(g, torch.Tensor.add, x, 1), op(g, torch.Tensor.add, x, 1))
    opt = cleanup(g)
    a, b = opt(torch.zeros(3))
    assert a is not b
    a.add_(5)
    same(b, torch.ones(3))


def test_cse_respects_grad_mode_regions():
    from runtime.graph_ops import set_grad_enabled
    g, (x,) = graph_of((3,))
    w = g.constant(torch.ones(3, requires_grad=True), name="w")
    inside = [g.add_node("set_grad_enabled", set_grad_enabled, (False,), meta=None, impure=True)]
    a = op(g, torch.Tensor.mul, w, 2)
    inside.append(g.add_node("set_grad_enabled", set_grad_enabled, (True,), meta=None, impure=True))
    b = op(g, torch.Tensor.mul, w, 2)
    g.outputs = (op(g, torch.Tensor.add, x, a), op(g, torch.Tensor.add, x, b))
    opt = cleanup(g)
    assert ops(opt).count("mul") == 2
    no_grad, with_grad = opt(torch.zeros(3))
    assert not no_grad.requires_grad and with_grad.requires_grad


# --------------------------------------------------------------------------- dce
def test_dce_drops_what_nothing_needs_and_keeps_effects():
    g, (x,) = graph_of((3,))
    op(g, torch.exp, op(g, torch.sin, x))
    g.add_node("print_values", runtime.graph_ops.print_values, (op(g, torch.cos, x),),
               meta=None, impure=True)
    c = op(g, torch.Tensor.clone, x)
    op(g, torch.Tensor.add_, c, 1)                         # mutates a value nobody reads
    g.outputs = (op(g, torch.tanh, x),)
    opt = optimize(g, passes=[dce])
    assert ops(opt) == ["cos", "print_values", "clone", "add_", "tanh"]


def test_dce_inside_loops_drops_unused_captures_from_both_subgraphs(graph):
    x = runtime.placeholder(F32, shape=(3,), name="x")
    k = runtime.placeholder(F32, shape=(), name="k")
    unused = runtime.placeholder(F32, shape=(3,), name="u")

    def body(v):
        (unused * 3).exp()                                    # dead: its capture goes too
        return (v + k,)
    (out,) = runtime.while_loop(lambda v: v.sum() < 20, body, (x,))
    graph.outputs = (out.node,)
    loop = next(n for n in graph.nodes if n.op == "while")
    assert len(loop.args) == 3
    opt = optimize(graph, passes=[dce])
    loop = next(n for n in opt.nodes if n.op == "while")
    assert len(loop.args) == 2
    assert [len(s.inputs) for s in loop.subgraphs] == [2, 2]
    assert "exp" not in all_ops(opt)
    run_both(graph, opt, torch.ones(3), torch.tensor(1.0), torch.ones(3))
