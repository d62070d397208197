"""The examples run standalone and show what they promise."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_example(name):
    env = dict(os.environ, PYTHONIOENCODING="utf-8")
    env.pop("PYTHONPATH", None)             # the example must find the package itself
    proc = subprocess.run([sys.executable, os.path.join("examples", name)], cwd=ROOT,
                          capture_output=True, text=True, encoding="utf-8", env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_static_vs_dynamic():
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


def test_debugging_shows_each_route():
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


def test_deploy_runs_both_artifacts_without_tograph():
    out = run_example("deploy.py")
    assert "plain torch.export fails on the data-dependent branch" in out
    assert "dynamic dims [(0,)]" in out
    for kind in ("pt2 ", "onnx"):
        lines = [l for l in out.splitlines() if l.strip().startswith(kind.strip()) and
                 "fresh process" in l]
        assert len(lines) == 4 and all(l.endswith("equals eager") for l in lines), out
    assert "batch 7" in out and "batch 5" in out
