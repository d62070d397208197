"""runtime.cond / runtime.while_loop: one node each, same values as plain Python control flow."""
import os

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import runtime
from runtime import BranchMismatchError

F32 = torch.float32
THIS_FILE = os.path.basename(__file__)
EXAMPLES = settings(max_examples=50, deadline=None)

floats = st.floats(-10, 10, allow_nan=False, width=32)
vectors = st.lists(floats, min_size=1, max_size=6).map(lambda v: torch.tensor(v, dtype=F32))
positive = st.lists(st.floats(0, 10, allow_nan=False, width=32), min_size=1, max_size=5) \
    .map(lambda v: torch.tensor(v, dtype=F32))
thresholds = st.floats(-20, 60, allow_nan=False, width=32)


def ops(graph):
    """The ops of the graph's own nodes (not of its subgraphs)."""
    return [n.op for n in graph.nodes]


def count(graph, op):
    return ops(graph).count(op)


# ------------------------------------------------------------------------ cond
def test_cond_is_one_node_and_matches_python(graph, run, same):
    x = runtime.placeholder(F32, shape=(None,), name="x")
    t = runtime.placeholder(F32, shape=(), name="t")
    # t is captured by both branches as a closure variable
    out = runtime.cond(x.sum() > t, lambda v: v * 2, lambda v: v - t, (x,))
    assert count(graph, "cond") == 1
    assert out.node.meta.shape == (None,) and out.dtype == F32

    def reference(xv, tv):
        return xv * 2 if xv.sum() > tv else xv - tv

    @EXAMPLES
    @given(xv=vectors, tv=thresholds)
    def check(xv, tv):
        tv = torch.tensor(tv)
        same(run(out, {x: xv, t: tv}), reference(xv, tv))
    check()


@EXAMPLES
@given(xv=vectors, limit=thresholds)
def test_cond_traced_per_threshold(fresh_graph, same, xv, limit):
    """A Python threshold baked into the graph, a dict of outputs, a Python constant leaf."""
    with fresh_graph() as g:
        x = runtime.placeholder(F32, shape=(xv.shape[0],), name="x")
        out = runtime.cond(x.max() < limit,
                           lambda v: {"y": v.abs() + limit, "n": 3, "i": v.argmax()},
                           lambda v: {"y": v * v, "n": 3, "i": v.argmin()}, [x])
        assert count(g, "cond") == 1
        assert out["n"] == 3 and isinstance(out["n"], int)
        got = runtime.Session(g).run({"y": out["y"], "i": out["i"]}, {x: xv})
    if xv.max() < limit:
        expected = {"y": xv.abs() + limit, "i": xv.argmax()}
    else:
        expected = {"y": xv * xv, "i": xv.argmin()}
    same(got, expected)


def test_cond_branch_shapes_differ_gives_dynamic_dim(graph, run, same):
    x = runtime.placeholder(F32, shape=(3,), name="x")
    out = runtime.cond(x.sum() > 0, lambda v: torch.cat([v, v]), lambda v: v[:1], (x,))
    assert out.node.meta.shape == (None,)
    for xv in (torch.tensor([1.0, 2.0, 3.0]), torch.tensor([-1.0, 0.0, 0.5])):
        same(run(out, {x: xv}), torch.cat([xv, xv]) if xv.sum() > 0 else xv[:1])


def test_cond_python_numbers_that_differ_become_tensors(graph, run, same):
    x = runtime.placeholder(F32, shape=(2,), name="x")
    k, y = runtime.cond(x.sum() > 0, lambda v: (1, v), lambda v: (2, -v), (x,))
    assert isinstance(k, runtime.SymbolicTensor) and k.dtype == torch.int64
    same(run([k, y], {x: torch.ones(2)}), [torch.tensor(1), torch.ones(2)])
    same(run([k, y], {x: -torch.ones(2)}), [torch.tensor(2), torch.ones(2)])


def test_cond_without_operands_uses_closures(graph, run, same):
    x = runtime.placeholder(F32, shape=(2,), name="x")
    y = runtime.placeholder(F32, shape=(2,), name="y")
    out = runtime.cond(x.sum() > y.sum(), lambda: x - y, lambda: y * 2)
    (node,) = [n for n in graph.nodes if n.op == "cond"]
    assert node.subgraphs[0].captures and node.subgraphs[1].captures
    for xv, yv in [(torch.ones(2), torch.zeros(2)), (torch.zeros(2), torch.ones(2))]:
        same(run(out, {x: xv, y: yv}), xv - yv if xv.sum() > yv.sum() else yv * 2)


def test_cond_only_runs_the_taken_branch(graph, run, same):
    x = runtime.placeholder(F32, shape=(3,), name="x")
    idx = runtime.placeholder(torch.int64, shape=(), name="idx")
    # the then-branch would fail (index out of range) if it ran when idx >= 3
    out = runtime.cond(idx < 3, lambda v, i: v[i],
                       lambda v, i: v.sum(), (x, idx))
    xv = torch.tensor([1.0, 2.0, 4.0])
    same(run(out, {x: xv, idx: 1}), torch.tensor(2.0))
    same(run(out, {x: xv, idx: 7}), torch.tensor(7.0))


@pytest.mark.parametrize("pred", [True, False, torch.tensor(True), torch.tensor(False), 0, 3])
def test_concrete_predicate_runs_python_without_node(graph, pred):
    x = runtime.placeholder(F32, shape=(2,), name="x")
    calls = []

    def then(v):
        calls.append("then")
        return v + 1

    def other(v):
        calls.append("else")
        return v - 1
    before = len(graph.nodes)
    out = runtime.cond(pred, then, other, (x,))
    assert calls == (["then"] if bool(pred) else ["else"])
    assert "cond" not in ops(graph)
    assert ops(graph)[before:] == (["add"] if bool(pred) else ["sub"])
    assert out.shape == (2,)


def test_concrete_operands_become_constants(graph, run, same):
    x = runtime.placeholder(F32, shape=(2,), name="x")
    c = torch.tensor([10.0, 20.0])
    out = runtime.cond(x.sum() > 0, lambda v, w: v + w, lambda v, w: v * w, (x, c))
    same(run(out, {x: torch.ones(2)}), torch.ones(2) + c)
    same(run(out, {x: -torch.ones(2)}), -torch.ones(2) * c)


# ------------------------------------------------------------------------ cond errors
def _mismatch(fn, *words):
    with pytest.raises(BranchMismatchError) as excinfo:
        fn()
    msg = str(excinfo.value)
    for w in words:
        assert w in msg, msg
    assert f"{THIS_FILE}:" in msg, msg
    return msg


def test_branch_dtype_mismatch_names_output(graph):
    x = runtime.placeholder(F32, shape=(2,), name="x")
    before = list(graph.nodes)
    _mismatch(lambda: runtime.cond(x.sum() > 0, lambda v: (v, v), lambda v: (v, v.long()),
                                   (x,), names=["first", "second"]),
              "'second'", "dtype", "float32", "int64")
    assert "cond" not in ops(graph)
    assert all(n in graph.nodes for n in before)


def test_branch_dtype_mismatch_without_names_gives_position(graph):
    x = runtime.placeholder(F32, shape=(2,), name="x")
    msg = _mismatch(lambda: runtime.cond(x.sum() > 0, lambda v: (v, v), lambda v: (v, v.int()),
                                         (x,)), "#1", "int32")
    assert "#0" not in msg


def test_branch_structure_mismatch(graph):
    x = runtime.placeholder(F32, shape=(2,), name="x")
    _mismatch(lambda: runtime.cond(x.sum() > 0, lambda v: (v, v), lambda v: v, (x,)),
              "structure")
    _mismatch(lambda: runtime.cond(x.sum() > 0, lambda v: [v], lambda v: {"a": v}, (x,)),
              "structure")


def test_branch_tensor_vs_none(graph):
    x = runtime.placeholder(F32, shape=(2,), name="x")
    _mismatch(lambda: runtime.cond(x.sum() > 0, lambda v: v, lambda v: None, (x,),
                                   names=["result"]),
              "'result'", "tensor", "None")


def test_branch_python_values_of_different_types(graph):
    x = runtime.placeholder(F32, shape=(2,), name="x")
    _mismatch(lambda: runtime.cond(x.sum() > 0, lambda v: (v, "a"), lambda v: (v, 2), (x,)),
              "#1")


def test_cond_predicate_with_many_values_is_rejected(graph):
    x = runtime.placeholder(F32, shape=(2,), name="x")
    with pytest.raises(runtime.GraphError, match="ambiguous"):
        runtime.cond(x > 0, lambda v: v, lambda v: -v, (x,))


# ------------------------------------------------------------------------ while
def test_while_is_one_node_and_matches_python(graph, run, same):
    x = runtime.placeholder(F32, shape=(None,), name="x")
    t = runtime.placeholder(F32, shape=(), name="t")
    i, v = runtime.while_loop(lambda i, v: v.sum() < t,
                              lambda i, v: (i + 1, v * 2 + 1), (0, x))
    assert count(graph, "while") == 1 and "cond" not in ops(graph)
    assert i.dtype == torch.int64 and i.node.meta.shape == ()    # Python 0 became a tensor
    assert v.node.meta.shape == (None,)

    def reference(xv, tv):
        i, v = 0, xv
        while v.sum() < tv:
            i, v = i + 1, v * 2 + 1
        return torch.tensor(i), v

    @EXAMPLES
    @given(xv=positive, tv=thresholds)
    def check(xv, tv):
        tv = torch.tensor(tv)
        same(tuple(run([i, v], {x: xv, t: tv})), reference(xv, tv))
    check()


def test_while_with_nested_cond(graph, run, same):
    x = runtime.placeholder(F32, shape=(None,), name="x")
    t = runtime.placeholder(F32, shape=(), name="t")
    step = runtime.placeholder(F32, shape=(), name="step")

    def body(n, v):
        # step is an outer placeholder captured through the while into the cond
        v = runtime.cond(v.max() > 4, lambda u: u + step, lambda u: u * 2 + 1, (v,))
        return n + 1, v

    n, v = runtime.while_loop(lambda n, v: (v.sum() < t) & (n < 50), body, (0, x))
    assert count(graph, "while") == 1 and "cond" not in ops(graph)
    (loop,) = [node for node in graph.nodes if node.op == "while"]
    assert [m.op for m in loop.subgraphs[1].nodes].count("cond") == 1

    def reference(xv, tv, sv):
        n, v = 0, xv
        while v.sum() < tv and n < 50:
            v = v + sv if v.max() > 4 else v * 2 + 1
            n += 1
        return [torch.tensor(n), v]

    @EXAMPLES
    @given(xv=positive, tv=thresholds, sv=st.floats(0.5, 5, width=32))
    def check(xv, tv, sv):
        feed = {x: xv, t: torch.tensor(tv), step: torch.tensor(sv)}
        same(run([n, v], feed), reference(xv, tv, sv))
    check()


def test_cond_with_nested_while(graph, run, same):
    x = runtime.placeholder(F32, shape=(None,), name="x")
    t = runtime.placeholder(F32, shape=(), name="t")

    def grow(v):
        (w,) = runtime.while_loop(lambda u: u.sum() < t, lambda u: u * 2 + 1, (v,))
        return w

    out = runtime.cond(x.mean() > 5, lambda v: v - 5, lambda v: grow(v.abs()), (x,))
    assert count(graph, "cond") == 1 and "while" not in ops(graph)

    def reference(xv, tv):
        if xv.mean() > 5:
            return xv - 5
        w = xv.abs()
        while w.sum() < tv:
            w = w * 2 + 1
        return w

    @EXAMPLES
    @given(xv=vectors, tv=thresholds)
    def check(xv, tv):
        same(run(out, {x: xv, t: torch.tensor(tv)}), reference(xv, torch.tensor(tv)))
    check()


def test_while_shape_changing_gives_dynamic_dim(graph, run, same):
    x = runtime.placeholder(F32, shape=(2,), name="x")
    t = runtime.placeholder(F32, shape=(), name="t")
    (v,) = runtime.while_loop(lambda v: v.sum() < t, lambda v: torch.cat([v, v + 1]), (x,))
    assert v.node.meta.shape == (None,)
    assert count(graph, "while") == 1

    @EXAMPLES
    @given(xv=st.lists(st.floats(0, 5, width=32), min_size=2, max_size=2), tv=thresholds)
    def check(xv, tv):
        v_ref = torch.tensor(xv)
        while v_ref.sum() < tv:
            v_ref = torch.cat([v_ref, v_ref + 1])
        same(run(v, {x: torch.tensor(xv), t: torch.tensor(tv)}), v_ref)
    check()


def test_while_python_counter_and_float_accumulator(graph, run, same):
    x = runtime.placeholder(F32, shape=(), name="x")
    k, acc = runtime.while_loop(lambda k, acc: acc < x, lambda k, acc: (k + 1, acc + 0.5 * k),
                                (0, 0.0))
    # a Python int counter's product with a float is Python's, in double: the Python-float
    # accumulator is carried as float64 (a tensor accumulator below stays float32)
    _check_counter_loop(run, same, x, k, acc, torch.float64)


def test_while_python_counter_with_symbolic_accumulator(graph, run, same):
    x = runtime.placeholder(F32, shape=(), name="x")
    k, acc = runtime.while_loop(lambda k, acc: acc < x, lambda k, acc: (k + 1, acc + 0.5 * k),
                                (0, x * 0))
    _check_counter_loop(run, same, x, k, acc)


def _check_counter_loop(run, same, x, k, acc, acc_dtype=torch.float32):
    assert k.dtype == torch.int64 and acc.dtype == acc_dtype
    for xv in (-1.0, 0.0, 3.0, 10.0):
        k_ref, acc_ref = 0, 0.0
        while acc_ref < xv:
            k_ref, acc_ref = k_ref + 1, acc_ref + 0.5 * k_ref
        same(run([k, acc], {x: torch.tensor(xv)}), [torch.tensor(k_ref), torch.tensor(acc_ref, dtype=acc_dtype)])


def test_while_keeps_structure_of_loop_vars(graph, run, same):
    x = runtime.placeholder(F32, shape=(3,), name="x")
    out = runtime.while_loop(lambda s: s["v"].sum() < 20,
                             lambda s: {"v": s["v"] + 1, "tag": "same"},
                             [{"v": x, "tag": "same"}])
    assert isinstance(out, list) and out[0]["tag"] == "same"
    same(run(out[0]["v"], {x: torch.zeros(3)}), torch.full((3,), 7.0))


def test_concrete_while_runs_python_without_node(graph, run, same):
    x = runtime.placeholder(F32, shape=(2,), name="x")
    i, v = runtime.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, v * 2), (0, x))
    assert i == 3 and isinstance(i, int)
    assert "while" not in ops(graph) and ops(graph).count("mul") == 3
    same(run(v, {x: torch.ones(2)}), torch.full((2,), 8.0))


def test_while_that_never_runs(graph, run, same):
    x = runtime.placeholder(F32, shape=(2,), name="x")
    (v,) = runtime.while_loop(lambda v: v.sum() > 100, lambda v: v * 0, (x,))
    same(run(v, {x: torch.ones(2)}), torch.ones(2))


def test_loop_var_dtype_change_raises(graph):
    x = runtime.placeholder(F32, shape=(2,), name="x")
    with pytest.raises(BranchMismatchError) as excinfo:
        runtime.while_loop(lambda v: v.sum() < 10, lambda v: (v + 1).long(), (x,), names=["v"])
    msg = str(excinfo.value)
    assert "'v'" in msg and "float32" in msg and "int64" in msg and f"{THIS_FILE}:" in msg
    assert "while" not in ops(graph)


def test_loop_var_tensor_to_none_raises(graph):
    x = runtime.placeholder(F32, shape=(2,), name="x")
    with pytest.raises(BranchMismatchError, match="#1"):
        runtime.while_loop(lambda v, w: v.sum() < 10, lambda v, w: (v + 1, None), (x, x))


def test_loop_structure_change_raises(graph):
    x = runtime.placeholder(F32, shape=(2,), name="x")
    with pytest.raises(BranchMismatchError, match="structure"):
        runtime.while_loop(lambda v, w: v.sum() < 10, lambda v, w: (v + 1, (w, w)), (x, x))
