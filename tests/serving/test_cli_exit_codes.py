"""``tograph``'s exit codes per subcommand (0 success; 1 could not convert or run, a
fallback in compare/explain/report, results that differ; 2 bad usage, including a function
that needs arguments and got no ``--args``), its start without torch, and the layering
rule (the AST layers import no torch and no runtime; runtime never imports transpiler).

The commands run in this process through ``cli.main`` (a subprocess costs seconds); one
subprocess checks that ``--help`` of every command leaves torch unimported.
"""
import ast
import os
import subprocess
import sys
import textwrap

import pytest

from transpiler import cli

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMMANDS = ("code", "graph", "compare", "explain", "report", "export")

USER = textwrap.dedent("""
    import random

    import torch


    def halve(x):
        while x.abs().max() > 1:
            x = x * 0.5
        return x


    def noisy(x):
        return x * random.random()


    def generator(x):
        yield x


    def fixed():
        return torch.ones(2) * 2


    def two(x, n=3):
        return x * n
""")


@pytest.fixture
def user(tmp_path):
    path = tmp_path / "exit_user.py"
    path.write_text(USER)
    saved_path, saved_modules = list(sys.path), set(sys.modules)
    yield str(path)
    sys.path[:] = saved_path
    for name in set(sys.modules) - saved_modules:
        if name.startswith("_tograph_cli_"):
            del sys.modules[name]


def run(capsys, *argv):
    """``tograph argv`` in this process: (exit status, stdout, stderr)."""
    try:
        code = cli.main([str(a) for a in argv])
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def tail(command, tmp_path):
    """The options a command needs besides the target and ``--args``."""
    return {"report": ["-o", tmp_path / "r.html"], "export": ["-o", tmp_path / "e.pt2",
                                                                "--static"]}.get(command, [])


# --------------------------------------------------------------------------- 0: success
@pytest.mark.parametrize("command", COMMANDS)
def test_success_exits_0(capsys, user, tmp_path, command):
    args = [] if command == "code" else ["--args", "torch.full((3,), 5.0)"]
    code, out, err = run(capsys, command, f"{user}:halve", *args, *tail(command, tmp_path))
    assert code == 0, err
    assert out.strip()


@pytest.mark.parametrize("command", ["graph", "compare", "explain", "report", "export"])
def test_no_args_needed_exits_0(capsys, user, tmp_path, command):
    code, _, err = run(capsys, command, f"{user}:fixed", *tail(command, tmp_path))
    assert code == 0, err


# --------------------------------------------------------------------------- 1: fallback
@pytest.mark.parametrize("command", ["compare", "explain", "report"])
def test_a_fallback_exits_1(capsys, user, tmp_path, command):
    # --atol 1 makes compare's values agree (random() < 1): the fallback alone says 1
    extra = ["--atol", "1"] if command == "compare" else []
    code, out, err = run(capsys, command, f"{user}:noisy", "--args", "torch.ones(2)",
                         *extra, *tail(command, tmp_path))
    assert code == 1, (out, err)
    text = out + err
    assert "fell back to eager" in text or "falls back to eager" in text
    assert "exit_user.py:14" in text                   # the line to change
    if command == "report":
        assert (tmp_path / "r.html").exists()          # the page is still written
        assert "Traceback" not in err


@pytest.mark.parametrize("command", ["graph", "export"])
def test_strict_commands_refuse_a_fallback_exit_1(capsys, user, tmp_path, command):
    code, out, err = run(capsys, command, f"{user}:noisy", "--args", "torch.ones(2)",
                         *tail(command, tmp_path))
    assert code == 1 and out == ""
    assert err.startswith(f"tograph {command}: error: ") and "exit_user.py:14" in err


def test_code_of_an_unconvertible_function_exits_1(capsys, user):
    code, out, err = run(capsys, "code", f"{user}:generator")
    assert code == 1 and out == ""
    assert "exit_user.py:18" in err and "Traceback" not in err


@pytest.mark.parametrize("command", COMMANDS)
def test_a_missing_target_exits_1(capsys, user, tmp_path, command):
    code, _, err = run(capsys, command, f"{user}:nope", *tail(command, tmp_path))
    assert code == 1 and "has no 'nope'" in err


@pytest.mark.parametrize("command", ["graph", "compare", "explain", "report", "export"])
def test_wrong_arguments_exit_1(capsys, user, tmp_path, command):
    code, _, err = run(capsys, command, f"{user}:halve", "--args", "torch.ones(2), 1, 2",
                       *tail(command, tmp_path))
    assert code == 1, err


# --------------------------------------------------------------------------- 2: bad usage
@pytest.mark.parametrize("command", ["graph", "compare", "explain", "report", "export"])
def test_needs_args_says_how_to_pass_them_exit_2(capsys, user, tmp_path, command):
    code, out, err = run(capsys, command, f"{user}:two", *tail(command, tmp_path))
    assert code == 2 and out == ""
    assert err.startswith(f"usage: tograph {command}")
    message = err.strip().splitlines()[-1]
    assert message.startswith(f"tograph {command}: error: ")
    assert "needs arguments (x)" in message            # n has a default: not listed
    assert "--args 'torch.randn(4, 8), 3'" in message


@pytest.mark.parametrize("command", COMMANDS)
def test_bad_options_exit_2(capsys, command):
    code, out, err = run(capsys, command, "f.py:g", "--no-such-option")
    assert code == 2 and out == "" and "usage: tograph" in err


# --------------------------------------------------------------------------- start, layers
def test_help_starts_without_torch():
    script = textwrap.dedent(f"""
        import sys
        from transpiler import cli
        for argv in [["--help"]] + [[c, "--help"] for c in {COMMANDS!r}]:
            try:
                cli.main(argv)
            except SystemExit as e:
                assert e.code == 0, (argv, e.code)
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "runtime"))
        print("LOADED", loaded)
        assert not loaded, loaded
    """)
    env = {k: v for k, v in os.environ.items() if k != "TOGRAPH_RUN_EAGERLY"}
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "LOADED []" in done.stdout


def test_the_package_names_load_on_first_use():
    import transpiler
    from transpiler import api, debugging, module_wrapper   # noqa: F401
    from transpiler.debugging import compare
    assert transpiler.to_graph is api.to_graph and transpiler.to_code is api.to_code
    assert transpiler.compare is compare.compare
    assert transpiler.ToGraphModule is module_wrapper.ToGraphModule
    assert set(transpiler.__all__) <= set(dir(transpiler))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        transpiler.nope


def _imports(path):
    """The top-level package of every module ``path`` imports (at any depth of the file),
    relative imports resolved to ``transpiler``/``runtime`` by where the file lives."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    own = os.path.relpath(path, ROOT).split(os.sep)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            yield own if node.level else (node.module or "").split(".")[0]


def _files(*parts):
    base = os.path.join(ROOT, *parts)
    if base.endswith(".py"):
        return [base]
    return [os.path.join(d, f) for d, _, fs in os.walk(base) for f in fs if f.endswith(".py")]


@pytest.mark.parametrize("layer", ["pyct", "analysis", "converters", "conversion.py"])
def test_the_ast_layers_import_no_torch_and_no_runtime(layer):
    files = _files("transpiler", layer)
    assert files
    for path in files:
        found = set(_imports(path)) & {"torch", "runtime", "numpy"}
        assert not found, f"{os.path.relpath(path, ROOT)} imports {sorted(found)}"


def test_runtime_never_imports_transpiler():
    files = _files("runtime")
    assert len(files) > 20
    for path in files:
        assert "transpiler" not in set(_imports(path)), os.path.relpath(path, ROOT)


def test_the_layer_check_sees_imports_inside_functions(tmp_path):
    path = tmp_path / "probe_layer.py"
    path.write_text("def f():\n    import torch.nn\n    from runtime.x import y\n")
    assert {"torch", "runtime"} <= set(_imports(str(path)))
