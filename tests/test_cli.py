"""The ``tograph`` command line: code, graph (--optimized, --render), compare (exit 0 when
eager and converted agree, 1 when they differ, it fell back or on errors), explain, report; --help on
every subcommand, bad usage exit 2, errors as one line (a traceback only with --verbose).

Most cases call ``transpiler.cli.main`` in this process (fast); a few run the real
program (``python -m transpiler.cli`` and the ``tograph`` console script) side by side.
"""
import importlib
import os
import shutil
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ElementTree

import pytest
import torch

from transpiler import cli, to_code, to_graph

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

USER = textwrap.dedent("""
    import random

    import torch


    def acc(x):
        n = 0
        while x.sum() > 1:
            if x.max() > 3:
                x = x - 2
            else:
                x = x * 0.5
            n = n + 1
        return x, n


    def noisy(x):
        return x * random.random()


    def needs_two(x, y):
        return x + y


    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 2)

        def forward(self, x):
            y = self.lin(x)
            if y.sum() > 0:
                y = torch.relu(y)
            return y
""")


def line_in(text, needle):
    hits = [i + 1 for i, line in enumerate(text.splitlines()) if line.strip().startswith(needle)]
    assert len(hits) == 1
    return hits[0]


WHILE_LINE = line_in(USER, "while x.sum() > 1:")
IF_LINE = line_in(USER, "if x.max() > 3:")
NOISY_LINE = line_in(USER, "return x * random.random()")


@pytest.fixture
def user(tmp_path):
    """The path of a user file; the modules ``load_target`` adds are removed after."""
    path = tmp_path / "cli_user.py"
    path.write_text(USER)
    saved_path, saved_modules = list(sys.path), set(sys.modules)
    yield str(path)
    sys.path[:] = saved_path
    for name in set(sys.modules) - saved_modules:
        if name.startswith("_tograph_cli_"):
            del sys.modules[name]


def run_cli(capsys, *argv):
    """``tograph argv`` in this process: (exit status, stdout, stderr)."""
    try:
        code = cli.main([str(a) for a in argv])
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def load_user(path):
    spec = importlib.util.spec_from_file_location("cli_user_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --------------------------------------------------------------------------- help and usage
@pytest.mark.parametrize("command, options", [
    ("code", ["target"]),
    ("graph", ["target", "--args", "--optimized", "--render", "--executor", "--kernels",
               "--memory"]),
    ("compare", ["target", "--args", "--rtol", "--atol", "--timing"]),
    ("explain", ["target", "--args"]),
    ("report", ["target", "--args", "--output"]),
])
def test_help_of_each_subcommand(capsys, command, options):
    code, out, err = run_cli(capsys, command, "--help")
    assert code == 0 and err == ""
    assert out.startswith(f"usage: tograph {command}")
    for option in options:
        assert option in out, (option, out)


def test_top_level_help_lists_the_subcommands(capsys):
    code, out, _ = run_cli(capsys, "--help")
    assert code == 0
    for command in ("code", "graph", "compare", "explain", "report", "--verbose"):
        assert command in out


@pytest.mark.parametrize("argv", [
    [],
    ["frob"],
    ["compare"],
    ["compare", "f.py:g", "--rtol", "abc"],
    ["graph", "f.py:g", "--no-such-option"],
    ["code", "f.py:g", "--args", "1"],                 # code takes no arguments
])
def test_bad_usage_exits_2(capsys, argv):
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and out == ""
    assert "usage: tograph" in err and "error:" in err


# --------------------------------------------------------------------------- code, graph
def test_code_prints_the_generated_code(capsys, user):
    code, out, err = run_cli(capsys, "code", f"{user}:acc")
    assert code == 0 and err == ""
    assert out.strip() == to_code(load_user(user).acc).strip()
    assert "tg.while_stmt" in out and "tg.if_stmt" in out


def test_code_of_a_module_class(capsys, user):
    code, out, _ = run_cli(capsys, "code", f"{user}:Net")
    assert code == 0 and "def forward(self, x):" in out and "tg.if_stmt" in out


def test_graph_and_optimized_graph(capsys, user):
    reference = to_graph(load_user(user).acc, strict=True).graph(torch.ones(2))
    code, out, err = run_cli(capsys, "graph", f"{user}:acc", "--args", "torch.ones(2)")
    assert code == 0 and err == ""
    assert out.strip() == str(reference).strip()
    assert "= while " in out and "= cond " in out and f"cli_user.py:{WHILE_LINE}" in out
    code, out, _ = run_cli(capsys, "graph", f"{user}:acc", "--args", "torch.ones(2)",
                           "--optimized")
    assert code == 0 and out.strip() == str(reference.optimize()).strip()


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz dot is not installed")
@pytest.mark.parametrize("optimized", [False, True])
def test_graph_render_writes_svg(capsys, user, tmp_path, optimized):
    target = tmp_path / "out.svg"
    argv = ["graph", f"{user}:acc", "--args", "torch.ones(2)", "--render", target]
    code, out, err = run_cli(capsys, *argv + (["--optimized"] if optimized else []))
    assert code == 0, err
    assert out.strip() == f"wrote {target}"
    root = ElementTree.parse(target).getroot()
    assert root.tag.endswith("svg")
    assert "while" in target.read_text()


# --------------------------------------------------------------------------- compare
def test_compare_agrees_exit_0(capsys, user):
    code, out, err = run_cli(capsys, "compare", f"{user}:acc", "--args",
                             "torch.tensor([5.0, 4.0])")
    assert code == 0 and err == ""
    assert out.splitlines()[0] == "compare acc: eager and converted agree"
    assert f"cli_user.py:{WHILE_LINE}" in out and f"cli_user.py:{IF_LINE}" in out
    assert "4 iterations" in out and "then x1, else x3" in out
    assert "time per call" not in out


def test_compare_timing(capsys, user):
    code, out, _ = run_cli(capsys, "compare", f"{user}:acc", "--args", "torch.ones(2) * 3",
                           "--timing")
    assert code == 0 and "time per call: eager " in out


def test_compare_differs_exit_1(capsys, user):
    code, out, _ = run_cli(capsys, "compare", f"{user}:noisy", "--args", "torch.ones(2)")
    assert code == 1
    assert "eager and converted DIFFER" in out
    assert f"cli_user.py:{NOISY_LINE}: calls Random.random()" in out    # see test_compare


def test_compare_tolerances_reach_the_report(capsys, user):
    # random.random() is below 1: the two runs differ by less than an atol of 1 (the exit
    # status is still 1: noisy falls back, it does not run as a graph)
    code, out, _ = run_cli(capsys, "compare", f"{user}:noisy", "--args", "torch.ones(2)",
                           "--atol", "1")
    assert code == 1 and "eager and converted agree" in out and "fell back to eager" in out
    code, out, _ = run_cli(capsys, "compare", f"{user}:noisy", "--args", "torch.ones(2)",
                           "--rtol", "1e9")
    assert code == 1 and "eager and converted agree" in out


def test_compare_a_module_class(capsys, user):
    code, out, _ = run_cli(capsys, "compare", f"{user}:Net", "--args", "torch.randn(4, 3)")
    assert code == 0 and "compare Net.forward: eager and converted agree" in out


def test_compare_of_a_function_that_cannot_run_exits_1(capsys, user):
    code, out, _ = run_cli(capsys, "compare", f"{user}:needs_two", "--args", "torch.ones(2)")
    assert "TypeError" in out
    assert code == 1


# --------------------------------------------------------------------------- explain, report
def test_explain_names_the_lines(capsys, user):
    code, out, err = run_cli(capsys, "explain", f"{user}:acc", "--args", "torch.ones(2)")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == "explain acc: traced into a graph"
    assert any(line.split()[:2] == [f"cli_user.py:{WHILE_LINE}", "while"] for line in lines)
    assert any(line.split()[:2] == [f"cli_user.py:{IF_LINE}", "cond"] for line in lines)
    assert "| while x.sum() > 1:" in out and "| if x.max() > 3:" in out


def test_explain_a_fallback(capsys, user):
    code, out, _ = run_cli(capsys, "explain", f"{user}:noisy", "--args", "torch.ones(2)")
    assert code == 1                                  # it does not run as a graph
    assert "falls back to eager" in out
    assert any(line.split()[:2] == [f"cli_user.py:{NOISY_LINE}", "fallback"]
               for line in out.splitlines())


def test_report_writes_an_html_file(capsys, user, tmp_path):
    try:
        importlib.import_module("transpiler.debugging.report")
    except Exception as e:                       # another engineer's module, tested there
        pytest.skip(f"the report module does not import: {e}")
    target = tmp_path / "report.html"
    code, out, err = run_cli(capsys, "report", f"{user}:acc", "--args", "torch.ones(2)",
                             "-o", target)
    assert code == 0, err
    assert out.strip() == f"wrote {target}"
    assert "<html" in target.read_text().lower()


# --------------------------------------------------------------------------- errors
@pytest.mark.parametrize("argv, message", [
    (["compare", "{user}:nope", "--args", "torch.ones(2)"], "has no 'nope'"),
    (["explain", "{user}:nope"], "has no 'nope'"),
    (["code", "{dir}/missing.py:f"], "no such file"),
    (["compare", "nocolon"], "expected FILE.py:FUNC"),
    (["compare", "{user}:acc", "--args", "torch.ones(2"], "SyntaxError|never closed|syntax"),
    (["compare", "{user}:acc", "--args", "undefined_name"], "undefined_name"),
    (["graph", "{user}:noisy", "--args", "torch.ones(2)"], "random"),
    (["graph", "{user}:needs_two", "--args", "torch.ones(2)"], "missing 1 required"),
])
def test_errors_are_one_line_without_traceback(capsys, user, argv, message):
    argv = [a.format(user=user, dir=os.path.dirname(user)) for a in argv]
    code, out, err = run_cli(capsys, *argv)
    assert code == 1 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"tograph {argv[0]}: error: ")
    assert any(m in lines[0] for m in message.split("|")), lines[0]
    assert "Traceback" not in err


def test_graph_error_names_the_user_line(capsys, user):
    _, _, err = run_cli(capsys, "graph", f"{user}:noisy", "--args", "torch.ones(2)")
    assert f"cli_user.py:{NOISY_LINE}: " in err


def test_verbose_shows_the_traceback(capsys, user):
    code, out, err = run_cli(capsys, "--verbose", "compare", f"{user}:nope")
    assert code == 1
    assert err.startswith("Traceback (most recent call last):")
    assert "AttributeError" in err
    assert err.strip().splitlines()[-1] == f"tograph compare: error: {user} has no 'nope'"


def test_verbose_after_the_subcommand(capsys, user):
    code, _, err = run_cli(capsys, "compare", f"{user}:nope", "--verbose")
    assert code == 1 and "Traceback" in err


# --------------------------------------------------------------------------- the real program
def _console_script():
    script = os.path.join(os.path.dirname(sys.executable), "tograph")
    return [script] if os.path.exists(script) else [sys.executable, "-m", "transpiler.cli"]


@pytest.fixture(scope="module")
def processes(tmp_path_factory):
    """The real program run on several command lines at once: name -> CompletedProcess."""
    path = tmp_path_factory.mktemp("cli") / "cli_user.py"
    path.write_text(USER)
    user = str(path)
    module = [sys.executable, "-m", "transpiler.cli"]
    runs = {
        "agree": _console_script() + ["compare", f"{user}:acc", "--args",
                                      "torch.tensor([5.0, 4.0])"],
        "differ": module + ["compare", f"{user}:noisy", "--args", "torch.ones(2)"],
        "error": module + ["compare", f"{user}:nope", "--args", "torch.ones(2)"],
        "verbose": module + ["--verbose", "compare", f"{user}:nope"],
    }
    env = {k: v for k, v in os.environ.items() if k != "TOGRAPH_RUN_EAGERLY"}
    started = {name: subprocess.Popen(argv, cwd=ROOT, env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
               for name, argv in runs.items()}
    done = {}
    for name, proc in started.items():
        out, err = proc.communicate(timeout=120)
        done[name] = subprocess.CompletedProcess(runs[name], proc.returncode, out, err)
    return user, done


def test_program_compare_agree_exit_0(processes):
    _, done = processes
    run = done["agree"]
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[0] == "compare acc: eager and converted agree"
    assert run.stderr == ""


def test_program_compare_differ_exit_1(processes):
    _, done = processes
    run = done["differ"]
    assert run.returncode == 1, run.stderr
    assert "eager and converted DIFFER" in run.stdout and "fell back to eager" in run.stdout
    assert run.stderr == ""                           # the report says it: no warning text


def test_program_error_is_one_line(processes):
    user, done = processes
    run = done["error"]
    assert run.returncode == 1 and run.stdout == ""
    assert run.stderr.strip().splitlines() == [f"tograph compare: error: {user} has no 'nope'"]


def test_program_verbose_traceback(processes):
    _, done = processes
    run = done["verbose"]
    assert run.returncode == 1
    assert "Traceback (most recent call last):" in run.stderr and "AttributeError" in run.stderr
