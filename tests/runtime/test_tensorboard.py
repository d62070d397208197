"""TensorBoard export: the event file read back by TensorBoard's own reader has every node,
scoped by cond/while subgraph, with ops, inputs wired by name, shapes and dtypes."""
import os
import subprocess
import sys

import pytest
import torch

import runtime
from test_dot import THIS_FILE, loop_graph, parts

pytest.importorskip("tensorboard.compat.proto.graph_pb2",
                    reason="tensorboard is not installed (pip install 'tograph[tensorboard]')")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402
from tensorboard.compat.proto import types_pb2  # noqa: E402


def read_back(graph, logdir):
    """Write ``graph`` to ``logdir``; the nodes TensorBoard reads back, by name."""
    path = graph.to_tensorboard(logdir)
    assert os.path.dirname(path) == str(logdir) and os.path.getsize(path) > 0
    graph_def = EventAccumulator(path).Reload().Graph()
    nodes = {n.name: n for n in graph_def.node}
    assert len(nodes) == len(graph_def.node), "node names must be unique"
    for node in graph_def.node:                      # every input names a node
        assert all(i in nodes for i in node.input), (node.name, list(node.input))
    return nodes


def shapes(node):
    return [[d.size for d in s.dim] for s in node.attr["_output_shapes"].list.shape]


def test_scopes_ops_and_wiring(tmp_path):
    g = loop_graph()
    loop, branch, then_mul, else_div = parts(g)
    nodes = read_back(g, tmp_path / "runs")
    w, c = loop.name, branch.name
    assert nodes[f"{w}/{w}"].op == "while"
    assert nodes[f"{w}/body/{c}/{c}"].op == "cond"
    assert nodes[f"{w}/body/{c}/then/{then_mul.name}"].op == "mul"
    assert nodes[f"{w}/body/{c}/else/{else_div.name}"].op == "div"
    test_ops = {n.name for n in loop.subgraphs[0].nodes if n.op != "placeholder"}
    assert {f"{w}/cond/{name}" for name in test_ops} <= set(nodes)
    x = g.inputs[0].name
    body_x, then_x = loop.subgraphs[1].inputs[1].name, branch.subgraphs[0].inputs[0].name
    assert list(nodes[f"{w}/body/{body_x}"].input) == [x]              # loop var from outside
    assert list(nodes[f"{w}/body/{c}/then/{then_x}"].input) == [f"{w}/body/{body_x}"]
    assert list(nodes[f"{w}/body/{c}/then/{then_mul.name}"].input) == \
        [f"{w}/body/{c}/then/{then_x}"]
    pred = branch.inputs[0].name
    assert list(nodes[f"{w}/body/{c}/{c}"].input) == [
        f"{w}/body/{pred}", f"{w}/body/{c}/then/return", f"{w}/body/{c}/else/return"]
    assert list(nodes[f"{w}/{w}"].input) == [f"{w}/cond/return", f"{w}/body/return"]
    gets = [n.name for n in g.nodes if n.op == "get"]
    assert all(list(nodes[name].input) == [f"{w}/{w}"] for name in gets)
    assert nodes[f"{w}/body/{body_x}"].attr["role"].s == b"operand"


def test_shapes_dtypes_and_locations(tmp_path):
    g = loop_graph()
    loop, branch, then_mul, _ = parts(g)
    nodes = read_back(g, tmp_path)
    x = nodes[g.inputs[0].name]
    assert shapes(x) == [[4, 8]] and x.attr["dtype"].type == types_pb2.DT_FLOAT
    pred = nodes[f"{loop.name}/body/{branch.inputs[0].name}"]
    assert shapes(pred) == [[]] and pred.attr["dtype"].type == types_pb2.DT_BOOL
    w = nodes[f"{loop.name}/{loop.name}"]
    assert shapes(w) == [[], [4, 8]]
    assert list(w.attr["dtypes"].list.type) == [types_pb2.DT_INT64, types_pb2.DT_FLOAT]
    mul = nodes[f"{loop.name}/body/{branch.name}/then/{then_mul.name}"]
    assert mul.attr["location"].s.decode() == f"{THIS_FILE}:{then_mul.location[1]}: x = x * 0.5"


def test_optimized_graph_lists_fused_ops(tmp_path):
    opt = loop_graph().optimize()
    nodes = read_back(opt, tmp_path)
    fused = [n for n in nodes.values() if n.op == "fused"]
    assert fused and all(n.attr["ops"].list.s for n in fused)
    expected = {tuple(n.attrs["ops"]) for n in opt.walk() if n.op == "fused"}
    assert {tuple(s.decode() for s in n.attr["ops"].list.s) for n in fused} == expected


def test_tf1_graph_captured_values_and_dynamic_dims(graph, tmp_path):
    x = runtime.placeholder(torch.float32, shape=(None, 3), name="x")
    y = runtime.placeholder(torch.float32, shape=(3,), name="y")
    out = runtime.cond(x.sum() > 0, lambda t: t * y, lambda t: t - y, (x,))
    nodes = read_back(graph, tmp_path)
    assert shapes(nodes["x"]) == [[-1, 3]] and nodes["x"].attr["role"].s == b"input"
    cond = out.node.args[0].name
    captured = [n for n in nodes.values()
                if n.name.startswith(f"{cond}/") and n.attr["role"].s == b"captured"]
    assert sorted(n.name.split("/")[1] for n in captured) == ["else", "then"]
    assert all(list(n.input) == ["y"] for n in captured)


def test_missing_tensorboard_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboard.compat.proto", None)
    with pytest.raises(ImportError, match=r"tograph\[tensorboard\]"):
        loop_graph().to_tensorboard(tmp_path)


def test_import_runtime_does_not_import_tensorboard():
    code = "import sys, runtime; assert 'tensorboard' not in sys.modules"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    subprocess.run([sys.executable, "-c", code], cwd=root, check=True)
