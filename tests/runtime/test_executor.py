"""The executor: generated straight-line Python, linecache, dead values freed, located errors."""
import linecache
import os

import pytest
import torch

import runtime
from runtime import executor

F32 = torch.float32
THIS_FILE = os.path.basename(__file__)


def test_generated_source_is_inspectable_and_runs(graph, same):
    a = runtime.placeholder(F32, shape=(2, 2), name="input_a")
    b = runtime.constant([[1.0, 2.0], [3.0, 4.0]], name="const_b")
    c = torch.matmul(a, b)
    d = torch.relu(c - 5)
    exe = executor.lower(graph, [a.node], (d.node, c.node))
    src = exe.source
    assert src.startswith("def graph_fn(input_a):")
    assert "matmul" in src and "relu" in src and "return (" in src
    compile(src, "<check>", "exec")            # valid Python
    va = torch.tensor([[2.0, 0.0], [0.0, 2.0]])
    vc = va @ torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    same(exe(va), (torch.relu(vc - 5), vc))


def test_source_registered_in_linecache(graph):
    x = runtime.placeholder(F32, shape=(3,), name="x")
    y = (x * 2).sin()
    exe = executor.lower(graph, [x.node], (y.node,))
    assert exe.filename.startswith("<tograph")
    lines = linecache.getlines(exe.filename)
    assert "".join(lines) == exe.source
    assert linecache.getline(exe.filename, 1).startswith("def graph_fn(")


def test_dead_values_are_deleted(graph):
    x = runtime.placeholder(F32, shape=(3,), name="x")
    a = x + 1
    b = a * 2
    c = b - 3
    exe = executor.lower(graph, [x.node], (c.node,))
    src = exe.source
    assert "del " in src
    body = src.splitlines()
    a_name = a.name
    defined = next(i for i, l in enumerate(body) if l.strip().startswith(f"{a_name} ="))
    deleted = next(i for i, l in enumerate(body) if l.strip().startswith("del") and a_name in l)
    used = max(i for i, l in enumerate(body) if a_name in l and not l.strip().startswith("del"))
    assert defined < used < deleted        # freed right after its last reader
    # an output is never deleted
    assert not any(l.strip().startswith("del") and c.name in l for l in body)
    torch.testing.assert_close(exe(torch.ones(3))[0], torch.ones(3) * 4 - 3)


def test_unneeded_nodes_are_not_emitted(graph):
    x = runtime.placeholder(F32, shape=(3,), name="x")
    used = x + 1
    unused = x.exp()
    exe = executor.lower(graph, [x.node], (used.node,))
    assert unused.name not in exe.source and "exp" not in exe.source


def test_control_flow_lowered_to_nested_functions(graph, same):
    x = runtime.placeholder(F32, shape=(3,), name="x")
    y = runtime.cond(x.sum() > 0, lambda v: v * 2, lambda v: v - 1, (x,))
    (z,) = runtime.while_loop(lambda v: v.sum() < 50, lambda v: v + 3, (y,))
    exe = executor.lower(graph, [x.node], (z.node,))
    src = exe.source
    assert src.count("def ") == 5               # main, then, else, loop test, loop body
    assert "while " in src and " if " in src
    for xv in (torch.ones(3), -torch.ones(3)):
        v = xv * 2 if xv.sum() > 0 else xv - 1
        while v.sum() < 50:
            v = v + 3
        same(exe(xv), (v,))


def test_graph_call_uses_executor(same):
    g = runtime.Graph()
    with g.as_default():
        x = runtime.placeholder(F32, shape=(2,), name="x")
        y = x * 3
    g.outputs = (y.node,)
    runtime.verify(g)
    same(g(torch.ones(2)), (torch.full((2,), 3.0),))


def test_runtime_error_names_op_and_user_line(graph):
    m = runtime.placeholder(F32, shape=(None, None), name="m")
    n = runtime.placeholder(F32, shape=(None, None), name="n")
    line = test_runtime_error_names_op_and_user_line.__code__.co_firstlineno + 4
    p = torch.matmul(m, n)
    out = p.relu()
    with runtime.Session() as sess:
        sess.run(out, {m: torch.ones(2, 3), n: torch.ones(3, 4)})        # fine
        with pytest.raises(RuntimeError) as excinfo:
            sess.run(out, {m: torch.ones(2, 3), n: torch.ones(2, 4)})  # inner dims differ
    msg = str(excinfo.value)
    assert "matmul" in msg, msg
    assert f"{THIS_FILE}:{line}" in msg, msg
    assert p.name in msg, msg
    assert excinfo.value.location == (os.path.abspath(__file__), line) or \
        excinfo.value.location[1] == line


def test_runtime_error_inside_cond_branch_names_its_line(graph):
    x = runtime.placeholder(F32, shape=(None,), name="x")
    w = runtime.placeholder(F32, shape=(None, None), name="w")
    line = test_runtime_error_inside_cond_branch_names_its_line.__code__.co_firstlineno + 5
    out = runtime.cond(x.sum() > 0,
                       lambda v: torch.mv(w, v),
                       lambda v: v, (x,))
    with runtime.Session() as sess:
        with pytest.raises(RuntimeError) as excinfo:
            sess.run(out, {x: torch.ones(3), w: torch.ones(2, 5)})
    msg = str(excinfo.value)
    assert "'mv'" in msg and f"{THIS_FILE}:{line}" in msg, msg


def test_session_compiles_once_per_fetch_signature(graph):
    x = runtime.placeholder(F32, shape=(2,), name="x")
    y = x + 1
    with runtime.Session() as sess:
        sess.run(y, {x: torch.ones(2)})
        n = len(graph._cache)
        sess.run(y, {x: torch.zeros(2)})
        assert len(graph._cache) == n
        sess.run([y, x], {x: torch.zeros(2)})
        assert len(graph._cache) == n + 1
