"""The graph IR by hand: Graph.add_node/placeholder/constant, the verifier, the printer, names."""
import pytest
import torch

import runtime
from runtime import GraphError, TensorMeta

F32 = torch.float32


def meta(*shape, dtype=F32):
    return TensorMeta(tuple(shape), dtype)


def add_graph():
    """%a + %b * 2 built node by node."""
    g = runtime.Graph()
    a = g.placeholder(meta(2, 3), name="a")
    b = g.placeholder(meta(2, 3), name="b")
    two = g.constant(torch.tensor(2.0))
    m = g.add_node("mul", torch.mul, (b, two), meta=meta(2, 3))
    s = g.add_node("add", torch.add, (a, m), meta=meta(2, 3))
    g.outputs = (s,)
    return g, (a, b, m, s)


def hand_cond_graph():
    """out = x * 2 if p else x - c, with c captured from the outer graph."""
    g = runtime.Graph()
    p = g.placeholder(meta(dtype=torch.bool), name="p")
    x = g.placeholder(meta(3), name="x")
    c = g.constant(torch.tensor([1.0, 2.0, 3.0]), name="c")
    then_g = runtime.Graph(parent=g, name="then")
    tx = then_g.placeholder(meta(3), name="tx")
    then_g.placeholder(meta(3), name="tc")
    then_g.outputs = (then_g.add_node("mul", torch.mul, (tx, 2), meta=meta(3)),)
    else_g = runtime.Graph(parent=g, name="else")
    ex = else_g.placeholder(meta(3), name="ex")
    ec = else_g.placeholder(meta(3), name="ec")
    else_g.outputs = (else_g.add_node("sub", torch.sub, (ex, ec), meta=meta(3)),)
    node = g.add_node("cond", None, (p, x, c), meta=(meta(3),), attrs={"n_operands": 1},
                      subgraphs=[then_g, else_g])
    out = g.add_node("get", None, (node,), meta=meta(3), attrs={"index": 0})
    g.outputs = (out,)
    return g, node


# ------------------------------------------------------------------------ construction
def test_hand_built_graph_verifies_and_runs_like_eager():
    g, (a, b, m, s) = add_graph()
    runtime.verify(g)
    assert [n.op for n in g.nodes] == ["placeholder", "placeholder", "constant", "mul", "add"]
    assert g.inputs == [a, b]
    assert s.inputs == [a, m]
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    (out,) = g(x, y)
    torch.testing.assert_close(out, x + y * 2)


def test_placeholders_stay_before_other_nodes():
    g = runtime.Graph()
    a = g.placeholder(meta(2), name="a")
    k = g.constant(torch.ones(2))
    b = g.placeholder(meta(2), name="b")
    g.outputs = (g.add_node("add", torch.add, (a, b), meta=meta(2)), k)
    runtime.verify(g)
    assert g.inputs == [a, b]
    assert g.nodes.index(b) < g.nodes.index(k)


def test_hand_built_cond_graph_verifies_and_runs_both_branches():
    g, node = hand_cond_graph()
    runtime.verify(g)
    assert node.subgraphs[0].parent is g
    x = torch.tensor([1.0, 5.0, -2.0])
    c = torch.tensor([1.0, 2.0, 3.0])
    torch.testing.assert_close(g(torch.tensor(True), x)[0], x * 2)
    torch.testing.assert_close(g(torch.tensor(False), x)[0], x - c)


def test_constant_keeps_value_and_meta():
    g = runtime.Graph()
    value = torch.arange(6, dtype=torch.int32).reshape(2, 3)
    k = g.constant(value, name="k")
    assert k.attrs["value"] is value
    assert k.meta == TensorMeta((2, 3), torch.int32)
    assert g.constant(value) is g.constant(value)   # unnamed constants are shared


# ------------------------------------------------------------------------ names
def test_names_are_unique_and_user_names_kept(graph):
    a = runtime.placeholder(F32, shape=(2,), name="input_a")
    a2 = runtime.placeholder(F32, shape=(2,), name="input_a")
    assert a.name == "input_a"
    assert a2.name != "input_a" and a2.name.startswith("input_a")
    s1, s2, s3 = a + a2, a + a2, a + 1
    names = [t.name for t in (s1, s2, s3)]
    assert len(set(names)) == 3
    assert all(n.startswith("add") for n in names)


def test_names_unique_across_subgraphs(graph):
    x = runtime.placeholder(F32, shape=(3,), name="x")
    y = runtime.cond(x.sum() > 0, lambda v: v + 1, lambda v: v - 1, (x,))
    (z,) = runtime.while_loop(lambda v: v.sum() < 10, lambda v: v + 1, (y,))
    assert tuple(z.shape) == (3,)
    every = [n.name for n in graph.walk()]
    assert len(every) > 10
    assert len(every) == len(set(every)), every


def test_graph_tensor_looks_up_by_name(graph):
    a = runtime.placeholder(F32, shape=(2, 2), name="input_a")
    c = torch.matmul(a, a)
    assert graph.tensor("input_a").node is a.node
    assert graph.tensor(c.name).node is c.node
    assert graph.tensor(c.name + ":0").node is c.node
    found = graph.tensor(c.name)
    assert isinstance(found, runtime.SymbolicTensor)
    assert tuple(found.shape) == (2, 2) and found.dtype == F32
    with pytest.raises(KeyError, match="nope"):
        graph.tensor("nope")


def test_fresh_default_graph_is_isolated():
    outer = runtime.Graph()
    with outer.as_default():
        a = runtime.placeholder(F32, shape=(1,), name="a")
        inner = runtime.Graph()
        with inner.as_default():
            b = runtime.placeholder(F32, shape=(1,), name="a")
            assert runtime.get_default_graph() is inner
        assert runtime.get_default_graph() is outer
    assert a.graph is outer and b.graph is inner
    assert b.name == "a"            # names are per graph
    with pytest.raises(GraphError):
        a + b                       # tensors of two graphs cannot be mixed


# ------------------------------------------------------------------------ verifier
def test_verifier_rejects_use_before_definition():
    g, (a, b, m, s) = add_graph()
    g.nodes.remove(m)
    g.nodes.append(m)               # now %add reads %mul before it is defined
    with pytest.raises(GraphError, match="before it is defined"):
        runtime.verify(g)


def test_verifier_rejects_value_from_another_graph():
    g, (a, b, m, s) = add_graph()
    other, (oa, *_rest) = add_graph()
    s.args = (oa, m)
    with pytest.raises(GraphError, match="add"):
        runtime.verify(g)


def test_verifier_rejects_duplicate_names():
    g, (a, b, m, s) = add_graph()
    s.name = m.name
    with pytest.raises(GraphError, match="duplicate name"):
        runtime.verify(g)


def test_verifier_rejects_duplicate_names_between_graph_and_subgraph():
    g, node = hand_cond_graph()
    node.subgraphs[0].nodes[-1].name = g.nodes[0].name
    with pytest.raises(GraphError, match="duplicate"):
        runtime.verify(g)


def test_verifier_rejects_cond_arity_mismatch():
    g, node = hand_cond_graph()
    node.args = node.args[:-1]      # drop the captured operand: branches take 2, node passes 1
    with pytest.raises(GraphError, match="inputs"):
        runtime.verify(g)


def test_verifier_rejects_cond_with_one_subgraph():
    g, node = hand_cond_graph()
    node.subgraphs = node.subgraphs[:1]
    with pytest.raises(GraphError, match="two subgraphs"):
        runtime.verify(g)


def test_verifier_rejects_branch_dtype_disagreeing_with_node():
    g, node = hand_cond_graph()
    node.subgraphs[1].outputs[0].meta = meta(3, dtype=torch.int64)
    with pytest.raises(GraphError, match="dtype"):
        runtime.verify(g)


def test_verifier_rejects_get_out_of_range():
    g, node = hand_cond_graph()
    g.nodes[-1].attrs["index"] = 1
    with pytest.raises(GraphError, match="does not produce"):
        runtime.verify(g)


def test_verifier_rejects_undefined_output():
    g, (a, b, m, s) = add_graph()
    other, (_, _, _, os_) = add_graph()
    g.outputs = (os_,)
    with pytest.raises(GraphError, match="output"):
        runtime.verify(g)


def test_verifier_rejects_while_arity_mismatch(graph):
    x = runtime.placeholder(F32, shape=(3,), name="x")
    runtime.while_loop(lambda v: v.sum() < 10, lambda v: v + 1, (x,))
    (node,) = [n for n in graph.nodes if n.op == "while"]
    runtime.verify(graph)
    node.args = node.args + (x.node,)
    with pytest.raises(GraphError, match="inputs"):
        runtime.verify(graph)
    node.args = node.args[:-1]      # restore, so the fixture's final verify passes


# ------------------------------------------------------------------------ printer
def test_print_shows_shapes_dtypes_and_locations(graph):
    a = runtime.placeholder(F32, shape=(2, 2), name="input_a")
    n = runtime.placeholder(torch.int64, shape=(None, 3), name="n")
    c = torch.matmul(a, a)
    d = n.sum(0)
    assert d.shape == (3,)
    text = str(graph)
    assert "%input_a: f32[2,2]" in text
    assert "%n: i64[?,3]" in text
    assert f"%{c.name}: f32[2,2] = matmul %input_a %input_a" in text
    assert f"%{d.name}: i64[3] = sum %n 0" in text
    assert "test_graph.py:" in text


def test_print_nests_and_indents_subgraphs(graph):
    x = runtime.placeholder(F32, shape=(3,), name="x")

    def body(v):
        inner = runtime.cond(v.sum() > 5, lambda u: u * 2, lambda u: u + 1, (v,))
        return inner

    runtime.while_loop(lambda v: v.sum() < 100, body, (x,))
    lines = str(graph).splitlines()

    def indent(line):
        return len(line) - len(line.lstrip(" "))
    top = [l for l in lines if "= while" in l]
    assert len(top) == 1
    cond_lines = [l for l in lines if "= cond" in l]
    assert len(cond_lines) == 1
    assert indent(cond_lines[0]) > indent(top[0])
    headers = {l.strip().split("(")[0]: indent(l) for l in lines if l.rstrip().endswith("{")}
    assert {"cond", "body", "then", "else"} <= set(headers)
    assert headers["then"] > headers["body"] > indent(top[0])
    mul = [l for l in lines if "= mul" in l][0]
    assert indent(mul) > headers["then"]


def test_print_hand_built_graph():
    g, node = hand_cond_graph()
    text = str(g)
    assert text.splitlines()[0].startswith("graph(%p: bool[], %x: f32[3])")
    assert "%cond_1: (f32[3]) = cond %p %x %c" in text
    assert "    then(%tx: f32[3], %tc: f32[3]) {" in text
    assert text.rstrip().endswith("}")
