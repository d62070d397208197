"""Graph.save / runtime.load: round trips, a fresh-process load, and tampered files."""
import json
import math
import os
import struct
import subprocess
import sys

import pytest
import torch

import runtime
from runtime import graph_ops, serialize
from runtime.errors import GraphError, GraphLoadError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def round_trip(graph, tmp_path, name="g.tograph"):
    path = tmp_path / name
    graph.save(path)
    loaded = runtime.load(path)
    runtime.verify(loaded)
    return loaded


def same(a, b):
    """Identical structure, dtypes and values (nan == nan)."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(a, b) or torch.allclose(a, b, rtol=0, atol=0, equal_nan=True), (a, b)
    elif isinstance(a, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b), (type(a), type(b))
        for x, y in zip(a, b):
            same(x, y)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            same(a[k], b[k])
    else:
        assert a == b and type(a) is type(b)


def split_file(data: bytes):
    magic, version, flags, n = struct.unpack_from("<8sIIQ", data, 0)
    doc = json.loads(data[24:24 + n])
    return doc, data[24 + n:]


def join_file(doc, blob: bytes, version=1) -> bytes:
    body = json.dumps(doc).encode()
    return struct.pack("<8sIIQ", b"TOGRAPH\x00", version, 0, len(body)) + body + blob


def all_nodes(doc_graph):
    for node in doc_graph["nodes"]:
        yield node
        for sub in node["subgraphs"]:
            yield from all_nodes(sub)


# --------------------------------------------------------------------------- seed graph
def seed_graph():
    g = runtime.Graph()
    with g.as_default():
        a = runtime.placeholder(torch.float32, shape=(2, 2), name="input_a")
        b = runtime.constant([[1.0, 2.0], [3.0, 4.0]], name="const_b")
        c = torch.matmul(a, b)
    g.outputs = (c.node,)
    return g, c


def test_seed_graph_round_trip(tmp_path):
    g, c = seed_graph()
    g2 = round_trip(g, tmp_path)
    feed = [[2.0, 0.0], [0.0, 2.0]]
    expected = torch.tensor([[2.0, 4.0], [6.0, 8.0]])
    assert c.name == "matmul_1"
    with runtime.Session(g2) as sess:
        same(sess.run("matmul_1", feed_dict={"input_a": feed}), expected)
        same(sess.run(g2.tensor(c.name), feed_dict={g2.tensor("input_a"): feed}), expected)
        same(sess.run(["matmul_1:0", "const_b"], feed_dict={"input_a:0": feed}),
             [expected, torch.tensor([[1.0, 2.0], [3.0, 4.0]])])
    same(g2(torch.tensor(feed)), g(torch.tensor(feed)))
    assert [n.name for n in g2.inputs] == ["input_a"]
    assert g2.inputs[0].attrs["shape"] == (2, 2)
    assert g2.node("matmul_1").target is torch.matmul
    assert g2.node("matmul_1").location == g.node("matmul_1").location
    assert str(g2) == str(g)
    assert g2.name == g.name
    with g2.as_default():                  # a loaded graph can grow: fresh names stay unique
        d = g2.tensor("matmul_1") * 2 + torch.matmul(g2.tensor("input_a"), g2.tensor("const_b"))
    assert d.name not in ("matmul_1", "input_a", "const_b")
    runtime.verify(g2)
    same(runtime.Session(g2).run(d, feed_dict={"input_a": feed}), expected * 3)


def test_default_graph_with_no_outputs(tmp_path):
    g, c = seed_graph()
    g.outputs = ()
    g2 = round_trip(g, tmp_path)
    assert g2.outputs == ()
    out = runtime.Session(g2).run("matmul_1", feed_dict={"input_a": torch.eye(2)})
    same(out, torch.tensor([[1.0, 2.0], [3.0, 4.0]]))


def test_save_is_deterministic(tmp_path):
    g, _ = seed_graph()
    g.save(tmp_path / "a")
    g.save(tmp_path / "b")
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes()
    assert (tmp_path / "a").read_bytes()[:8] == b"TOGRAPH\x00"


# --------------------------------------------------------------------------- control flow
def control_flow_graph():
    """A while loop whose body holds a cond; captures of a constant and a placeholder at
    two levels; dynamic placeholder dims."""
    g = runtime.Graph()
    with g.as_default():
        x = runtime.placeholder(torch.float32, shape=(None, 3), name="x")
        n = runtime.placeholder(torch.int64, shape=(), name="n")
        w = runtime.constant(torch.linspace(-1.0, 1.0, 3), name="w")

        def body(i, acc):
            acc = runtime.cond(acc.sum() > 0,
                               lambda a: a * w - x.mean(),
                               lambda a: a + x[0] * 2 + 0.5,
                               (acc,))
            return i + 1, acc

        i, acc = runtime.while_loop(lambda i, acc: i < n, body, (torch.tensor(0), x.sum(0)))
        rows = x.shape[0]               # a run-time dimension: a dim_size node
        out = acc * rows
    g.outputs = (i.node, out.node, {"acc": [acc.node]})
    return g


FEEDS = [
    ([[1.0, -2.0, 0.5], [0.25, 3.0, -1.0]], 3),
    ([[-1.0, -2.0, -3.0]], 5),
    ([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0], [2.0, -5.0, 0.5], [0.1, 0.2, 0.3]], 0),
    ([[4.0, -4.0, 1.0]] * 7, 8),
]

CHILD = r"""
import json, sys, torch, runtime
g = runtime.load(sys.argv[1])
results = []
for x, n in json.loads(sys.argv[2]):
    x, n = torch.tensor(x), torch.tensor(n)
    with runtime.Session(g) as sess:
        i, out = sess.run([g.outputs[0].name, g.outputs[1].name], feed_dict={"x": x, "n": n})
    called = g(x, n)
    results.append({"i": i.tolist(), "out": out.tolist(), "dtypes": [str(i.dtype), str(out.dtype)],
                    "call_i": called[0].tolist(), "call_out": called[1].tolist(),
                    "call_acc": called[2]["acc"][0].tolist()})
captures = [[[o.name, p.name] for o, p in sub.captures]
            for node in g.walk() for sub in node.subgraphs]
print(json.dumps({"text": str(g), "results": results, "captures": captures,
                  "inputs": [p.name for p in g.inputs]}))
"""


def test_control_flow_loaded_in_fresh_process(tmp_path):
    g = control_flow_graph()
    ops = [n.op for n in g.walk()]
    assert "while" in ops and "cond" in ops and "dim_size" in ops
    path = tmp_path / "cf.tograph"
    g.save(path)
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.run([sys.executable, "-c", CHILD, str(path), json.dumps(FEEDS)],
                          capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=300)
    assert proc.returncode == 0, proc.stderr
    child = json.loads(proc.stdout.strip().splitlines()[-1])
    assert child["text"] == str(g)
    assert child["inputs"] == ["x", "n"]
    assert child["captures"] == [[[o.name, p.name] for o, p in sub.captures]
                                 for node in g.walk() for sub in node.subgraphs]
    assert any(child["captures"]), "the subgraphs capture outer values"
    for (x, n), got in zip(FEEDS, child["results"]):
        i, out, d = g(torch.tensor(x), torch.tensor(n))
        assert got["dtypes"] == [str(i.dtype), str(out.dtype)]
        same(torch.tensor(got["i"], dtype=i.dtype), i)
        same(torch.tensor(got["out"], dtype=out.dtype), out)
        same(torch.tensor(got["call_i"], dtype=i.dtype), i)
        same(torch.tensor(got["call_out"], dtype=out.dtype), out)
        same(torch.tensor(got["call_acc"], dtype=out.dtype), d["acc"][0])


def test_control_flow_round_trip_in_process(tmp_path):
    g = control_flow_graph()
    g2 = round_trip(g, tmp_path)
    assert str(g2) == str(g)
    for x, n in FEEDS:
        same(g2(torch.tensor(x), torch.tensor(n)), g(torch.tensor(x), torch.tensor(n)))
    # captures restored as pairs (outer node of the parent graph, inner placeholder)
    for node, node2 in zip(g.walk(), g2.walk()):
        assert node.name == node2.name and node.op == node2.op
        for sub, sub2 in zip(node.subgraphs, node2.subgraphs):
            assert sub2.parent is node2.graph
            assert [(o.name, i.name) for o, i in sub.captures] == \
                   [(o.name, i.name) for o, i in sub2.captures]
            for outer, inner in sub2.captures:
                assert outer.graph is node2.graph and inner.graph is sub2
                assert inner.attrs.get("captured") is True
                assert sub2.capture(outer) is inner        # capture map rebuilt
            assert [p.name for p in sub.inputs] == [p.name for p in sub2.inputs]


def test_tampered_subgraphs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    g = control_flow_graph()
    g.save(tmp_path / "cf")
    data = (tmp_path / "cf").read_bytes()
    doc, _ = split_file(data)
    loop = next(n for n in doc["graph"]["nodes"] if n["op"] == "while")
    body = loop["subgraphs"][1]
    cond = next(n for n in all_nodes(body) if n["op"] == "cond")
    then = cond["subgraphs"][0]
    outer_name = doc["graph"]["nodes"][0]["name"]          # a root value, not captured

    def drop_placeholder(d, b):
        sub = next(n for n in d["graph"]["nodes"] if n["op"] == "while")["subgraphs"][1]
        ph = next(n for n in sub["nodes"] if n["op"] == "placeholder")
        sub["nodes"].remove(ph)

    def capture_non_placeholder(d, b):
        sub = next(n for n in d["graph"]["nodes"] if n["op"] == "while")["subgraphs"][1]
        last = sub["nodes"][-1]["name"]
        sub["captures"][0][1] = last

    def use_outer_directly(d, b):
        sub = next(n for n in d["graph"]["nodes"] if n["op"] == "while")["subgraphs"][1]
        node = next(n for n in sub["nodes"] if n["op"] != "placeholder")
        node["args"][0] = {"node": outer_name}

    def wrong_branch_count(d, b):
        node = next(n for n in all_nodes(d["graph"]) if n["op"] == "cond")
        node["subgraphs"].pop()

    def string_operand_count(d, b):
        node = next(n for n in all_nodes(d["graph"]) if n["op"] == "cond")
        node["attrs"]["n_operands"] = "1"

    assert then["captures"] and body["captures"]
    for fn, pattern in [(drop_placeholder, "unknown node|invalid"),
                        (capture_non_placeholder, "not a placeholder"),
                        (use_outer_directly, "unknown node"),
                        (wrong_branch_count, "malformed cond"),
                        (string_operand_count, "malformed cond")]:
        with pytest.raises(GraphLoadError, match=pattern):
            load_bytes(tmp_path, mutate(data, fn))


def test_namedtuple_outputs(tmp_path):
    import collections
    Pair = collections.namedtuple("Pair", ["low", "high"])
    g = runtime.Graph()
    with g.as_default():
        x = runtime.placeholder(torch.float32, shape=(4,), name="x")
        lo, hi = x.min(), x.max()
    g.outputs = Pair(lo.node, hi.node)
    g2 = round_trip(g, tmp_path)
    out = g2(torch.tensor([3.0, -1.0, 2.0, 8.0]))
    assert type(out).__name__ == "Pair" and out._fields == ("low", "high")
    assert out.low == -1.0 and out.high == 8.0 and tuple(out) == tuple(g(torch.tensor([3.0, -1.0, 2.0, 8.0])))


# --------------------------------------------------------------------------- values
def test_indexing_stack_multi_output_dtypes_and_special_floats(tmp_path):
    g = runtime.Graph()
    with g.as_default():
        x = runtime.placeholder(torch.float32, shape=(3, 4), name="x")
        specials = runtime.constant([math.inf, -math.inf, math.nan, 1.0], name="specials")
        a = x[..., None, 1:]                    # Ellipsis, None, slice
        b = x[0, ::2]
        c = x[1:, [0, 2]]
        m = torch.max(x, dim=0)                 # multi-output
        s = torch.stack([m.values, m.indices.to(torch.float32), b.repeat(2)], dim=1)
        d = x.to(torch.float64) * float("inf")
        e = torch.nan_to_num(x / 0.0, nan=float("nan"), posinf=1e300, neginf=-math.inf)
        f = torch.where(x > 0, specials, torch.zeros(4))
        h = x.contiguous(memory_format=torch.contiguous_format).to(device=torch.device("cpu"))
        k = torch.zeros_like(x, dtype=torch.int64, layout=torch.strided)
        t = x.T.sum(dim=(0,), keepdim=True)
        lin = torch.nn.functional.linear(x, torch.ones(2, 4), bias=torch.tensor([0.5, -0.5]))
    g.outputs = {"a": a.node, "rest": [b.node, c.node, s.node, (d.node, e.node)],
                 "f": f.node, "hk": (h.node, k.node), "t": t.node, "lin": lin.node, "n": None}
    g2 = round_trip(g, tmp_path)
    assert str(g2) == str(g)
    xv = torch.tensor([[1.0, -2.0, 0.0, 4.0], [5.0, 0.5, -7.0, 8.0], [0.0, 10.0, 11.0, -12.0]])
    same(g2(xv), g(xv))
    node = g2.node(a.name)
    assert node.args[1] == (Ellipsis, None, slice(1, None, None))
    assert g2.node(b.name).args[1] == (0, slice(None, None, 2))
    assert g2.node(c.name).args[1] == (slice(1, None, None), [0, 2])
    to_node = next(n for n in g2.nodes if n.op == "to" and n.args[1:] == (torch.float64,))
    assert to_node.args[1] is torch.float64
    assert g2.node(h.name).kwargs == {"device": torch.device("cpu")}
    assert g2.node(k.name).kwargs["layout"] is torch.strided
    const = g2.node("specials").attrs["value"]
    assert const.dtype == torch.float32 and const[0] == math.inf and const[1] == -math.inf
    assert math.isnan(const[2])
    e_node = g2.node(e.name)
    assert e_node.kwargs["posinf"] == 1e300 and e_node.kwargs["neginf"] == -math.inf
    assert math.isnan(e_node.kwargs["nan"])
    max_node = g2.node(m.values.node.args[0].name)
    assert isinstance(max_node.meta, tuple) and len(max_node.meta) == 2
    assert g2.node(lin.name).target is torch.nn.functional.linear
    assert g2.node(t.node.args[0].name).target == torch.Tensor.T.__get__


def test_constant_tensors_keep_dtype_bits_and_flags(tmp_path):
    g = runtime.Graph()
    values = {
        "bf16": torch.tensor([1.5, -2.25, 3e38], dtype=torch.bfloat16),
        "f16": torch.tensor([[0.1, 65504.0]], dtype=torch.float16),
        "f64": torch.tensor([math.pi, -0.0, 5e-324], dtype=torch.float64),
        "i8": torch.tensor([-128, 127], dtype=torch.int8),
        "u8": torch.tensor([0, 255], dtype=torch.uint8),
        "i64": torch.tensor([2 ** 62, -(2 ** 63)], dtype=torch.int64),
        "b": torch.tensor([[True, False], [False, True]]),
        "c64": torch.tensor([1 + 2j, -3.5j], dtype=torch.complex64),
        "scalar": torch.tensor(7),
        "empty": torch.zeros(0, 3),
        "strided": torch.arange(12.0).reshape(3, 4).t()[::2],       # not contiguous
        "conj": torch.tensor([1 + 1j]).conj(),
    }
    param = torch.nn.Parameter(torch.randn(2, 3))
    grad = torch.randn(3).requires_grad_()
    with g.as_default():
        nodes = {k: g.constant(v, name=k) for k, v in values.items()}
        pnode = g.constant(param, name="param")
        gnode = g.constant(grad, name="grad")
    g.outputs = tuple(nodes.values()) + (pnode, gnode)
    g2 = round_trip(g, tmp_path)
    for k, v in values.items():
        got = g2.node(k).attrs["value"]
        assert got.dtype == v.dtype and got.shape == v.shape, k
        assert torch.equal(got, v.resolve_conj()), k
        assert not got.requires_grad
    p2 = g2.node("param").attrs["value"]
    assert isinstance(p2, torch.nn.Parameter) and p2.requires_grad and torch.equal(p2, param)
    g2v = g2.node("grad").attrs["value"]
    assert g2v.requires_grad and g2v.is_leaf and torch.equal(g2v, grad)
    assert g2.node("f64").attrs["value"][1].item() == 0.0
    assert math.copysign(1.0, g2.node("f64").attrs["value"][1].item()) == -1.0
    out = g2()
    assert out[-2].requires_grad


def test_graph_ops_targets_and_registry(tmp_path):
    def twice(x):
        return x * 2

    g = runtime.Graph()
    with g.as_default():
        x = runtime.placeholder(torch.float32, shape=(None,), name="x")
        y = torch.ones(1) * x.shape[0]          # a run-time size: a graph_ops.dim_size node
    ph = g.node("x")
    node = g.add_node("twice", twice, (y.node,), meta=y.node.meta)
    g.outputs = (node,)
    with pytest.raises(GraphError, match=r"%twice_1"):
        g.save(tmp_path / "unregistered")
    graph_ops.register(twice, name="tests.twice")
    try:
        g2 = round_trip(g, tmp_path)
        assert g2.node("twice_1").target is twice
        same(g2(torch.ones(5)), (torch.full((1,), 10.0),))
        dim_nodes = [n for n in g2.nodes if n.op == "dim_size"]
        assert dim_nodes and dim_nodes[0].target is graph_ops.dim_size
        data = (tmp_path / "g.tograph").read_bytes()
    finally:
        del graph_ops.REGISTRY["tests.twice"]
    with pytest.raises(GraphLoadError, match="tests.twice"):
        serialize.loads(data)
    assert ph.op == "placeholder"


def test_factories_and_effects_recorded_while_tracing(tmp_path, capsys):
    from runtime.operators.effects import assert_stmt, print_
    from runtime.symbolic import tracing
    g = runtime.Graph()
    with g.as_default(), tracing(g):
        x = runtime.placeholder(torch.float32, shape=(None,), name="x")
        base = torch.zeros(()) + torch.tensor(1.5) + torch.ones_like(x).sum()
        y = x.new_full((2,), 3.0) * base
        print_("y is", y, sep="|")
        assert_stmt(base > 0, lambda: "base must be positive")
    g.outputs = (y.node,)
    ops = {n.op for n in g.nodes}
    assert {"zeros", "tensor", "new_full", "print_values", "assert_true"} <= ops
    g2 = round_trip(g, tmp_path)
    assert str(g2) == str(g)
    assert [n.impure for n in g2.nodes] == [n.impure for n in g.nodes]
    capsys.readouterr()
    same(g2(torch.ones(3)), (torch.full((2,), 13.5),))
    assert capsys.readouterr().out == "y is|tensor([13.5000, 13.5000])\n"


def test_unsavable_values_raise_graph_error(tmp_path):
    g = runtime.Graph()
    with g.as_default():
        x = runtime.placeholder(torch.float32, shape=(2,), name="x")
    node = g.add_node("add", torch.add, (g.node("x"), object()), meta=g.node("x").meta)
    g.outputs = (node,)
    with pytest.raises(GraphError, match=r"%add_1.*object"):
        g.save(tmp_path / "bad")
    assert not (tmp_path / "bad").exists()
    assert x is not None


# --------------------------------------------------------------------------- tampering
@pytest.fixture
def saved(tmp_path):
    g, _ = seed_graph()
    path = tmp_path / "seed.tograph"
    g.save(path)
    return path.read_bytes()


def load_bytes(tmp_path, data: bytes):
    path = tmp_path / "tampered.tograph"
    path.write_bytes(data)
    return runtime.load(path)


@pytest.mark.parametrize("cut", [0, 5, 23, 24, 40, -1, -16])
def test_truncated_files(tmp_path, saved, cut):
    with pytest.raises(GraphLoadError):
        load_bytes(tmp_path, saved[:cut])


def test_bad_magic_version_json_and_padding(tmp_path, saved):
    with pytest.raises(GraphLoadError, match="magic"):
        load_bytes(tmp_path, b"PICKLE!!" + saved[8:])
    with pytest.raises(GraphLoadError, match="version"):
        load_bytes(tmp_path, saved[:8] + struct.pack("<I", 99) + saved[12:])
    broken = bytearray(saved)
    broken[24] = ord("!")
    with pytest.raises(GraphLoadError, match="JSON"):
        load_bytes(tmp_path, bytes(broken))
    with pytest.raises(GraphLoadError, match="padded"):
        load_bytes(tmp_path, saved + b"\0\0\0\0")
    doc, blob = split_file(saved)
    text = json.dumps(doc).replace('"version": 1', '"version": NaN', 1).encode()
    with pytest.raises(GraphLoadError):
        load_bytes(tmp_path, struct.pack("<8sIIQ", b"TOGRAPH\x00", 1, 0, len(text)) + text + blob)
    with pytest.raises(GraphLoadError):
        runtime.load(tmp_path / "does-not-exist")


def mutate(saved, fn):
    doc, blob = split_file(saved)
    blob = fn(doc, blob) or blob
    return join_file(doc, blob)


def _node(doc, name):
    return next(n for n in all_nodes(doc["graph"]) if n["name"] == name)


TAMPERS = {
    "offset out of bounds": lambda d, b: d["tensors"][0].update(offset=10 ** 6),
    "negative offset": lambda d, b: d["tensors"][0].update(offset=-4),
    "nbytes disagree with shape": lambda d, b: d["tensors"][0].update(shape=[2, 3]),
    "tensor dtype name": lambda d, b: d["tensors"][0].update(dtype="float99"),
    "tensor dtype not a dtype": lambda d, b: d["tensors"][0].update(dtype="Tensor"),
    "meta dtype name": lambda d, b: _node(d, "matmul_1")["meta"].update(dtype="os.system"),
    "tensor index": lambda d, b: _node(d, "const_b")["attrs"].update(value={"tensor": 5}),
    "unknown node": lambda d, b: _node(d, "matmul_1").update(args=[{"node": "nope"}, {"node": "const_b"}]),
    "forward reference": lambda d, b: d["graph"]["nodes"].reverse(),
    "unknown output": lambda d, b: d["graph"].update(outputs={"tuple": [{"node": "ghost"}]}),
    "unknown tag": lambda d, b: _node(d, "matmul_1").update(args=[{"pickle": "x"}, {"node": "const_b"}]),
    "duplicate name": lambda d, b: _node(d, "matmul_1").update(name="const_b"),
    "disallowed dtype attr": lambda d, b: _node(d, "matmul_1")["kwargs"].update(out={"dtype": "__class__"}),
    "bad device": lambda d, b: _node(d, "matmul_1")["kwargs"].update(out={"device": "nowhere:9"}),
    "root captures": lambda d, b: d["graph"].update(captures=[["input_a", "input_a"]]),
    "builtin op with a target": lambda d, b: _node(d, "input_a").update(target="torch.abs"),
    "no target": lambda d, b: _node(d, "matmul_1").update(target=None),
    "kwargs key injection": lambda d, b: _node(d, "matmul_1")["kwargs"].update(
        {"x=__import__('os').system('touch MARKER')) or (": 1}),
    "bad location": lambda d, b: _node(d, "matmul_1").update(location=["f.py", "1; x"]),
    "deep nesting": lambda d, b: _node(d, "matmul_1")["kwargs"].update(
        deep=json.loads("[" * 400 + "]" * 400)),
}


@pytest.mark.parametrize("what", sorted(TAMPERS))
def test_tampered_structure(tmp_path, saved, what, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(GraphLoadError):
        load_bytes(tmp_path, mutate(saved, TAMPERS[what]))
    assert not (tmp_path / "MARKER").exists()


def test_get_index_injection_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    g = runtime.Graph()
    with g.as_default():
        x = runtime.placeholder(torch.float32, shape=(3,), name="x")
        m = torch.max(x, dim=0)
    g.outputs = (m.values.node,)
    g.save(tmp_path / "max")
    data = (tmp_path / "max").read_bytes()
    payload = "0] if __import__('os').system('touch MARKER') else _[0"
    bad = mutate(data, lambda d, b: _node(d, m.values.node.name)["attrs"].update(index=payload))
    with pytest.raises(GraphLoadError, match="index"):
        load_bytes(tmp_path, bad)
    bad = mutate(data, lambda d, b: _node(d, m.values.node.name)["attrs"].update(index=7))
    with pytest.raises(GraphLoadError, match="invalid"):      # the verifier's complaint
        load_bytes(tmp_path, bad)
    bad = mutate(data, lambda d, b: _node(d, m.values.node.name)["meta"].update(dtype="int8"))
    with pytest.raises(GraphLoadError, match="invalid"):
        load_bytes(tmp_path, bad)
    assert not (tmp_path / "MARKER").exists()


@pytest.mark.parametrize("target", [
    "os.system", "builtins.eval", "builtins.exec", "torch.load", "torch.save",
    "subprocess.call", "torch.Tensor.apply_", "torch.Tensor.register_hook",
    "torch.Tensor.__reduce_ex__", "torch._C._nn.linear", "runtime.serialize.save",
    "runtime.graph_ops.register", "runtime.graph_ops.effect", "__import__", "",
])
def test_disallowed_targets_never_run(tmp_path, saved, target, monkeypatch):
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "MARKER"
    arg = {"os.system": f"touch {marker}", "subprocess.call": f"touch {marker}",
           "builtins.eval": f"open({str(marker)!r}, 'w')",
           "builtins.exec": f"open({str(marker)!r}, 'w')"}.get(target, str(marker))

    def evil(doc, blob):
        node = _node(doc, "matmul_1")
        node.update(target=target, op="system", args=[arg], kwargs={})
    with pytest.raises(GraphLoadError) as info:
        load_bytes(tmp_path, mutate(saved, evil))
    assert repr(target) in str(info.value)
    assert not marker.exists()


def test_torch_ops_in_allow_list():
    for fn, name in [(torch.matmul, "torch.matmul"), (torch.Tensor.__add__, "torch.Tensor.__add__"),
                     (torch.Tensor.__getitem__, "torch.Tensor.__getitem__"),
                     (torch.Tensor.T.__get__, "torch.Tensor.T.__get__"),
                     (torch.nn.functional.linear, "torch.nn.functional.linear"),
                     (torch.nn.functional.relu, "torch.nn.functional.relu"),
                     (torch.linalg.norm, "torch.linalg.norm"), (torch.special.erf, "torch.special.erf"),
                     (torch.fft.fft, "torch.fft.fft"), (torch.abs_, "torch.abs_"),
                     (graph_ops.numel, "runtime.graph_ops.numel")]:
        assert serialize.target_name(fn) == name
        assert serialize.resolve_target(name) == fn
    for bad in [torch.load, torch.save, print, eval, os.system, graph_ops.register]:
        assert serialize.target_name(bad) is None


def test_random_corruption_only_raises_graph_load_error():
    """Random byte flips and random JSON edits: either a clean GraphLoadError, or a graph
    that verifies and compiles (no other exception, no generated-code syntax error)."""
    import copy
    import random
    from runtime.executor import lower
    data = serialize.dumps(control_flow_graph())
    doc, blob = split_file(data)
    rng = random.Random(0)
    weird = [None, True, 0, -1, 2 ** 70, 1.5, "x", "'); import os #", [], {}, {"node": "x"},
             {"tuple": []}, {"tensor": 0}, {"dtype": "float32"}, {"float": "nan"}, [1, [2]],
             {"dict": [["a", 1]]}, {"slice": [None, None, None]}, "torch.add"]

    def paths(o, p=()):
        yield p
        items = o.items() if isinstance(o, dict) else enumerate(o) if isinstance(o, list) else ()
        for k, v in items:
            yield from paths(v, p + (k,))
    all_paths = [p for p in paths(doc) if p]
    candidates = []
    for _ in range(400):
        b = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        candidates.append(bytes(b))
    for _ in range(600):
        d = copy.deepcopy(doc)
        p = rng.choice(all_paths)
        o = d
        for key in p[:-1]:
            o = o[key]
        o[p[-1]] = copy.deepcopy(rng.choice(weird))
        candidates.append(join_file(d, blob))
    loaded = 0
    for candidate in candidates:
        try:
            g2 = serialize.loads(candidate)
        except GraphLoadError:
            continue
        loaded += 1
        lower(g2)
    assert 0 < loaded < len(candidates)
