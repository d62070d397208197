"""``tograph export FILE.py:FUNC --args '...' --format pt2|onnx -o OUT``: the artifacts
it writes load without tograph and match eager on each path and another batch size."""
import subprocess
import sys
import textwrap

import pytest
import torch

from transpiler import cli

USER = textwrap.dedent("""
    import torch


    def clip(x):
        if x.sum() > 0:
            y = x * 2
        else:
            y = -x
        while y.abs().max() > 4:
            y = y / 2
        return y


    def needs_size(x):
        return torch.zeros(int(x.shape[0]))
""")


@pytest.fixture
def user(tmp_path):
    path = tmp_path / "deploy_user.py"
    path.write_text(USER)
    return str(path)


def _reference(x):
    y = x * 2 if x.sum() > 0 else -x
    while y.abs().max() > 4:
        y = y / 2
    return y


def test_export_pt2_then_load_it_elsewhere(user, tmp_path, capsys):
    out = tmp_path / "clip.pt2"
    code = cli.main(["export", f"{user}:clip", "--args", "torch.ones(3, 4)", "-o", str(out)])
    assert code == 0
    assert f"wrote {out} (dynamic dimensions per tensor input: [(0,)])" in capsys.readouterr().out
    module = torch.export.load(str(out)).module()
    for x in (torch.full((3, 4), 5.0), -torch.full((6, 4), 3.0)):
        torch.testing.assert_close(module(x), _reference(x))


def test_export_onnx_runs_in_onnxruntime(user, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    out = tmp_path / "clip.onnx"
    assert cli.main(["export", f"{user}:clip", "--args", "torch.ones(3, 4)",
                     "--format", "onnx", "-o", str(out)]) == 0
    session = ort.InferenceSession(str(out))
    assert [i.name for i in session.get_inputs()] == ["x"]
    for x in (torch.full((3, 4), 5.0), -torch.full((5, 4), 3.0)):
        got = session.run(None, {"x": x.numpy()})[0]
        torch.testing.assert_close(torch.as_tensor(got), _reference(x))


def test_static_and_dynamic_choices(user, tmp_path, capsys):
    out = tmp_path / "s.pt2"
    assert cli.main(["export", f"{user}:clip", "--args", "torch.ones(3, 4)", "--static",
                     "-o", str(out)]) == 0
    assert "[()]" in capsys.readouterr().out
    assert cli.main(["export", f"{user}:clip", "--args", "torch.ones(3, 4)",
                     "--dynamic", "x:0,1", "-o", str(out)]) == 0
    assert "[(0, 1)]" in capsys.readouterr().out


def test_export_errors_are_one_line(user, tmp_path, capsys):
    code = cli.main(["export", f"{user}:needs_size", "--args", "torch.ones(3, 4)",
                     "--dynamic", "x:0", "-o", str(tmp_path / "n.pt2")])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "deploy_user.py:16" in err and "exported static" in err
    assert cli.main(["export", f"{user}:clip", "--args", "torch.ones(3, 4)", "--dynamic",
                     "x", "-o", str(tmp_path / "n.pt2")]) == 1
    assert "--dynamic expects NAME:DIM" in capsys.readouterr().err


def test_export_usage_errors_exit_2(user):
    for argv in (["export", f"{user}:clip"], ["export", f"{user}:clip", "-o", "x",
                                              "--format", "tflite"],
                 ["export", f"{user}:clip", "-o", "x", "--static", "--dynamic", "x:0"]):
        with pytest.raises(SystemExit) as info:
            cli.main(argv)
        assert info.value.code == 2


def test_export_help_mentions_the_options():
    done = subprocess.run([sys.executable, "-m", "transpiler.cli", "export", "--help"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    for option in ("--format", "pt2", "onnx", "--output", "--dynamic", "--static"):
        assert option in done.stdout
