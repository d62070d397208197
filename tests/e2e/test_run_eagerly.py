"""``transpiler.run_eagerly``: converted functions run their original Python while it is on
(concrete shapes in ``print``, no tracing), graphs cached before are reused after."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import transpiler
from transpiler import run_eagerly, running_eagerly, to_graph

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(autouse=True)
def _restore_switch():
    before = running_eagerly()
    yield
    run_eagerly(before)


def shows_shape(x):
    print("shape:", x.shape)
    n = 0
    while x.sum() > 1:
        x = x * 0.5
        n = n + 1
    return x, n


def printed_shapes(capsys):
    return [line for line in capsys.readouterr().out.splitlines() if line.startswith("shape:")]


def reference(x):
    """``shows_shape`` without the print."""
    n = 0
    while x.sum() > 1:
        x = x * 0.5
        n = n + 1
    return x, n


def assert_same_result(got, x):
    exp_x, exp_n = reference(x.clone())
    assert torch.equal(got[0], exp_x) and int(got[1]) == exp_n


def test_the_switch_turns_on_and_off():
    run_eagerly(False)
    assert running_eagerly() is False and transpiler.running_eagerly() is False
    run_eagerly(True)
    assert running_eagerly() is True
    run_eagerly()                                           # default: on
    assert running_eagerly() is True
    run_eagerly(False)
    assert running_eagerly() is False
    assert "off" in repr(run_eagerly(False))


def test_context_manager_restores_the_previous_mode_nested():
    run_eagerly(False)
    with run_eagerly():
        assert running_eagerly()
        with run_eagerly(False):
            assert not running_eagerly()
            with run_eagerly(True):
                assert running_eagerly()
            assert not running_eagerly()
        assert running_eagerly()
    assert not running_eagerly()
    run_eagerly(True)
    with run_eagerly(False):
        assert not running_eagerly()
    assert running_eagerly()


def test_context_manager_restores_after_an_exception():
    run_eagerly(False)
    with pytest.raises(KeyError):
        with run_eagerly():
            raise KeyError("x")
    assert not running_eagerly()


def test_eager_mode_runs_the_original_python(capsys):
    run_eagerly(False)
    g = to_graph(shows_shape)
    x = torch.tensor([3.0, 2.0])
    assert_same_result(g(x.clone()), x)
    assert_same_result(g(x.clone()), x)
    assert printed_shapes(capsys) == ["shape: torch.Size([2])"] * 2     # (as eager prints)
    assert len(g._history) == 1

    with run_eagerly():
        assert_same_result(g(x.clone()), x)
        assert_same_result(g(torch.tensor([3.0, 2.0, 1.0])), torch.tensor([3.0, 2.0, 1.0]))
        assert_same_result(g(x.clone()), x)
    assert printed_shapes(capsys) == ["shape: torch.Size([2])", "shape: torch.Size([3])",
                                      "shape: torch.Size([2])"]
    assert len(g._history) == 1                            # nothing traced while eager


def test_results_are_identical_in_both_modes():
    g = to_graph(shows_shape)
    for values in ([5.0, 4.0], [0.1, 0.2], [1.5, 1.0]):
        x = torch.tensor(values)
        graph_x, graph_n = g(x.clone())
        with run_eagerly():
            eager_x, eager_n = g(x.clone())
        assert torch.equal(graph_x, eager_x) and int(graph_n) == eager_n
        assert isinstance(eager_n, int)                     # the original Python ran


def test_cached_graphs_are_reused_after_switching_back():
    g = to_graph(shows_shape)
    x = torch.tensor([3.0, 2.0])
    g(x.clone())
    entries, history = dict(g._entries), list(g._history)
    with run_eagerly():
        g(x.clone())
        g(torch.ones(5))
    run_eagerly(True)
    g(x.clone())
    run_eagerly(False)
    hits = g.cache_info().hits
    got = g(x.clone())
    assert_same_result(got, x)
    assert g._history == history and g._entries == entries
    assert g.cache_info().hits == hits + 1                   # the graph ran again


def test_methods_and_modules(capsys):
    class Net(torch.nn.Module):
        def forward(self, x):
            print("shape:", x.shape)
            if x.sum() > 0:
                x = x * 2
            return x

    class C:
        @to_graph
        def meth(self, x):
            print("shape:", x.shape)
            return x - 1

    net, c = to_graph(Net()), C()
    x = torch.ones(2)
    graph_out = (net(x), c.meth(x))
    assert printed_shapes(capsys) == ["shape: torch.Size([2])"] * 2     # (as eager prints)
    with run_eagerly():
        eager_out = (net(x), c.meth(x))
    assert printed_shapes(capsys) == ["shape: torch.Size([2])"] * 2
    assert torch.equal(graph_out[0], eager_out[0]) and torch.equal(graph_out[1], eager_out[1])
    assert torch.equal(eager_out[0], x * 2) and torch.equal(eager_out[1], x - 1)


SCRIPT = textwrap.dedent("""
    import torch
    from transpiler import to_graph, running_eagerly

    @to_graph
    def f(x):
        print("shape:", x.shape)
        return x * 2

    print("eager:", running_eagerly())
    for _ in range(2):
        print("result:", f(torch.ones(2)).tolist())
    print("traces:", len(f._history))
""")


def test_environment_variable_starts_a_process_in_eager_mode(tmp_path):
    script = tmp_path / "eager_env.py"              # a file: the converter needs the source
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "TOGRAPH_RUN_EAGERLY"}
    runs = {}
    for value in ("1", "0"):
        runs[value] = subprocess.Popen(
            [sys.executable, str(script)], cwd=ROOT, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, env=dict(env, TOGRAPH_RUN_EAGERLY=value))
    out = {}
    for value, proc in runs.items():
        stdout, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 0, stderr[-2000:]
        assert "Warning" not in stderr, stderr[-2000:]
        out[value] = stdout.splitlines()
    assert out["1"] == ["eager: True",
                        "shape: torch.Size([2])", "result: [2.0, 2.0]",
                        "shape: torch.Size([2])", "result: [2.0, 2.0]",
                        "traces: 0"]
    assert out["0"][0] == "eager: False" and out["0"][-1] == "traces: 1"
    assert out["0"].count("result: [2.0, 2.0]") == 2
    assert out["0"].count("shape: torch.Size([2])") == 2     # the graph prints as eager
