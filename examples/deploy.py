"""The seed's section 4: a static graph leaves Python. Convert a small model whose forward
has a data-dependent branch and a variable-length loop, export it as a torch.export
program (.pt2, with torch.cond / torch.while_loop) and as ONNX (If / Loop), and run each
artifact in a fresh process that never imports tograph.

torch.export alone fails on this model (``if h.mean() > 0`` is a data-dependent branch);
@to_graph rewrites the control flow, so the export keeps it.

Run:  python examples/deploy.py
"""
import contextlib
import io
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
from torch import nn  # noqa: E402

from runtime.export import dynamic_dims, to_onnx, to_torch_export  # noqa: E402
from transpiler import to_graph  # noqa: E402


class Refiner(nn.Module):
    """Project; gate by the sign of the mean; shrink until small (a data-dependent count)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        h = self.proj(x)
        if h.mean() > 0:                   # data-dependent branch -> torch.cond / If
            h = torch.relu(h)
        else:
            h = torch.tanh(h) - 1
        steps = torch.zeros((), dtype=torch.int64)
        while h.abs().sum() > 1:           # variable-length loop -> while_loop / Loop
            h = h * 0.5
            steps = steps + 1
        return h, steps


# The deployed side: only torch and onnxruntime. Importing tograph here would fail.
RUNNER = r"""
import importlib.abc, sys
class NoTograph(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("transpiler", "runtime"):
            raise ImportError("the deployed side must not import tograph")
sys.meta_path.insert(0, NoTograph())
import torch
kind, path, inputs = sys.argv[1], sys.argv[2], torch.load(sys.argv[3])
if kind == "pt2":
    model = torch.export.load(path).module()
    outs = [model(x) for x in inputs]
else:
    import onnxruntime
    session = onnxruntime.InferenceSession(path)
    name = session.get_inputs()[0].name
    outs = [tuple(torch.as_tensor(v) for v in session.run(None, {name: x.numpy()}))
            for x in inputs]
torch.save(outs, sys.argv[4])
"""


def run_elsewhere(kind, path, inputs, work):
    """Run an artifact in a new Python process that cannot import tograph."""
    torch.save(inputs, os.path.join(work, "inputs.pt"))
    out_path = os.path.join(work, f"outputs-{kind}.pt")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", RUNNER, kind, path,
                           os.path.join(work, "inputs.pt"), out_path],
                          capture_output=True, text=True, cwd=work, env=env, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    return torch.load(out_path)


def main():
    torch._logging.set_logs(all=logging.ERROR)       # torch.export's notes on stderr
    model = Refiner().eval()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            torch.export.export(model, (torch.randn(3, 4),))     # its long report: hidden
        print("plain torch.export: exported (unexpected)")
    except Exception as e:
        print("plain torch.export fails on the data-dependent branch:", type(e).__name__)

    converted = to_graph(model)
    example = (torch.randn(3, 4),)
    inputs = [torch.full((3, 4), 2.0), torch.full((3, 4), -2.0),      # each branch,
              torch.full((7, 4), 2.0), torch.randn(5, 4) * 10]        # other batch sizes
    with torch.no_grad():
        expected = [model(x) for x in inputs]
    work = tempfile.mkdtemp(prefix="tograph-deploy-")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = to_torch_export(converted, example)
            pt2 = os.path.join(work, "refiner.pt2")
            torch.export.save(program, pt2)
        print(f"wrote refiner.pt2: torch.cond and while_loop inside, dynamic dims "
              f"{dynamic_dims(program)} (the batch)")
        artifacts = [("pt2", pt2)]
        try:
            onnx_path = to_onnx(converted, os.path.join(work, "refiner.onnx"), example)
            print("wrote refiner.onnx: If and Loop inside, checked by onnx.checker")
            artifacts.append(("onnx", onnx_path))
        except ImportError as e:
            print("ONNX skipped:", e)
        for kind, path in artifacts:
            outs = run_elsewhere(kind, path, inputs, work)
            for x, (h, steps), (want_h, want_steps) in zip(inputs, outs, expected):
                same = torch.allclose(h, want_h, atol=1e-5) and int(steps) == int(want_steps)
                print(f"  {kind:4} in a fresh process without tograph: batch {x.shape[0]}, "
                      f"{int(steps)} loop steps -> {'equals eager' if same else 'DIFFERS'}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
