"""The examples run and show what they promise.

Each example's output is its section of the one run of examples/tour.py (the session
fixture ``tour``: the examples ran once, in the tour, rather than once more each on their
own); ``test_each_example_finds_the_package_itself`` checks what a standalone run adds: the
example, started as ``python examples/NAME.py``, puts the repository on ``sys.path`` itself.
"""
import ast
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")


@pytest.fixture
def run_example(tour):
    return tour.section


def _imports_tograph(stmt):
    names = ([a.name for a in stmt.names] if isinstance(stmt, ast.Import) else
             [stmt.module or ""] if isinstance(stmt, ast.ImportFrom) else [])
    return any(n.split(".")[0] in ("transpiler", "runtime", "benchmarks", "torch")
               for n in names)


@pytest.mark.parametrize("name", sorted(f for f in os.listdir(EXAMPLES) if f.endswith(".py")))
def test_each_example_finds_the_package_itself(name, monkeypatch):
    """Run as a script, sys.path[0] is examples/ and the repository is not on the path: the
    statements before the example's first import of torch or tograph must put it there (the
    tour's own insert would hide a missing one)."""
    path = os.path.join(EXAMPLES, name)
    with open(path, encoding="utf-8") as f:
        body = ast.parse(f.read(), path).body
    head = []           # (tour.py imports neither: all of it, its __main__ block not run)
    for stmt in body:
        if _imports_tograph(stmt):
            break
        head.append(stmt)
    bare = [EXAMPLES] + [p for p in sys.path if os.path.abspath(p or ".") != ROOT]
    monkeypatch.setattr(sys, "path", bare)
    exec(compile(ast.Module(head, []), path, "exec"), {"__file__": path, "__name__": "head"})
    assert ROOT in [os.path.abspath(p) for p in sys.path], (name, sys.path[:3])


def test_static_vs_dynamic(run_example):
    out = run_example("static_vs_dynamic.py")
    static, dynamic = out.split("2. Dynamic graph")
    # the symbolic c: a node with name, shape and dtype, no values
    assert 'Tensor("matmul_1", shape=(2, 2), dtype=torch.float32)' in static
    before_run = static.split("Session.run")[0]
    assert "[2., 4.]" not in before_run
    # the graph listing
    assert "%input_a: f32[2,2]" in static
    assert "%matmul_1: f32[2,2] = matmul %input_a %const_b" in static
    # the values after Session.run, and the fetch of [c, b]
    assert before_run != static
    after_run = static[len(before_run):]
    assert "[[2., 4.],\n        [6., 8.]]" in after_run
    assert "c = tensor([[2., 4.]" in after_run and "b = tensor([[1., 2.]" in after_run
    # eager PyTorch prints values at once
    assert "tensor([[2., 4.],\n        [6., 8.]], grad_fn=<MmBackward0>)" in dynamic


def test_debugging_shows_each_route(run_example):
    out = run_example("debugging.py")
    # route 1: Session.run fetches an extra node; probe returns per-iteration values
    assert "sess.run([c, extra]) -> [[5.0, 0.0], [0.0, 5.0]] and [[10.0, 0.0], [0.0, 10.0]]" in out
    assert "x per iteration: [[1.5, -2.0, 1.0], [0.75, -1.0, 0.5], [0.375, -0.5, 0.25]" in out
    assert "i per iteration: [1, 2, 3]  result unchanged: True" in out
    # route 2: the print op is in the graph and prints each run's value
    assert "the traced graph holds a print op: True" in out
    assert "normalize: iterations = 3" in out and \
        "normalize: iterations = 10" in out
    # route 3: the listing shows both control-flow nodes; a picture or a clear reason
    assert "= while " in out and "= cond " in out
    assert "Graphviz picture" in out or "no picture:" in out
    # eager route: traced once (a traced tensor answers type() as the real one), then
    # real tensors on every call
    assert "traced: x is symbolic, yet answers type() as the real tensor" in out
    assert out.count("inside, x is a SymbolicTensor") == 0
    assert out.count("inside, x is a Tensor of shape (2, 3)") == 3
    # compare on both paths, explain naming the lines
    assert out.count("eager and converted agree") == 2
    assert "then x3" in out and "else x2" in out
    assert "while        tensor loop test -> while node" in out
    assert "cond         tensor condition -> cond node" in out


def test_deploy_runs_both_artifacts_without_tograph(run_example):
    out = run_example("deploy.py")
    assert "plain torch.export fails on the data-dependent branch" in out
    assert "dynamic dims [(0,)]" in out
    for kind in ("pt2 ", "onnx"):
        lines = [l for l in out.splitlines() if l.strip().startswith(kind.strip()) and
                 "fresh process" in l]
        assert len(lines) == 4 and all(l.endswith("equals eager") for l in lines), out
    assert "batch 7" in out and "batch 5" in out
