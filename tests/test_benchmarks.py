"""benchmarks/run.py and benchmarks/models.py run end to end (smoke tests: no timing is
asserted), every contender's result matches eager, and the suite runs its workloads at
several sizes."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONTENDERS = {"eager", "tograph", "torch.compile", "jit.script"}


def test_quick_run_writes_results_that_match_eager(tmp_path):
    done = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "run.py"), "--quick", "--no-compile",
         "--only", "matmul_2x2,branchy,layernorm_softmax,rnn_for_b32_h64", "--out",
         str(tmp_path)],
        capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    assert "MISMATCH" not in done.stdout
    assert "[####################] " in done.stderr            # the progress bar
    assert (tmp_path / "RESULTS.md").exists()

    results = json.loads((tmp_path / "latest.json").read_text())
    assert {"machine", "load", "bandwidth", "settings", "one_off", "workloads", "targets",
            "mismatches", "problems"} <= set(results)
    assert results["mismatches"] == [] and results["problems"] == []
    assert results["machine"]["threads"] == 2
    assert "busy_fraction" in results["load"] and "loadavg_before" in results["load"]
    assert results["bandwidth"]["add_gbs"] > 0
    assert "tograph_first_call_s" in results["one_off"]

    rows = {row["name"]: row for row in results["workloads"]}
    assert set(rows) == {"matmul_2x2", "matmul_2x2 Session.run", "branchy", "layernorm_softmax",
                         "layernorm_softmax_256x1024", "rnn_for_b32_h64"}
    assert rows["layernorm_softmax_256x1024"]["family"] == "layernorm_softmax"
    assert rows["rnn_for_b32_h64"]["family"] == "rnn_for"
    # the same program at two sizes: the range of its speedups is reported
    assert "layernorm_softmax, 2 sizes/spellings: tograph " in done.stdout
    assert "## Across sizes" in (tmp_path / "RESULTS.md").read_text()
    for name in ("matmul_2x2", "branchy", "layernorm_softmax", "layernorm_softmax_256x1024",
                 "rnn_for_b32_h64"):
        res = rows[name]["results"]
        assert set(res) == CONTENDERS
        assert res["torch.compile"]["status"] == "skipped"
        tg = res["tograph"]
        assert tg["status"] == "ok", tg
        assert tg["check"] == "ok"
        assert tg["median_us"] > 0 and tg["ratio"] > 0
        assert tg["first_call_s"] > 0 and tg["first_call_warm_s"] > 0
    assert rows["branchy"]["results"]["jit.script"]["check"] == "ok"
    # a global tensor is not scriptable: shown as n/a with the reason in a footnote
    script = rows["matmul_2x2"]["results"]["jit.script"]
    assert script["status"] == "n/a" and script["footnote"] >= 1
    assert rows["matmul_2x2 Session.run"]["results"]["Session.run"]["check"] == "ok"


def _workloads():
    spec = importlib.util.spec_from_file_location(
        "bench_workloads", os.path.join(ROOT, "benchmarks", "workloads.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module           # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def test_suite_runs_each_program_at_several_sizes():
    import torch
    w = _workloads()
    families = {}
    for workload in w.WORKLOADS:
        families.setdefault(workload.family, []).append(workload)
    # issue 13: the `for xt in xs` RNN at batch 1/32/64 x hidden 16/64/256, 50 steps
    rnn = families["rnn_for"]
    shapes = set()
    for workload in rnn:
        assert workload.fn is w.rnn_for
        (xs, h, w_ih, w_hh, bias), = workload.make_inputs(False)
        assert xs.shape[0] == 50 and h.shape == (xs.shape[1], w_hh.shape[0])
        shapes.add((xs.shape[1], h.shape[1]))
    assert shapes == {(b, n) for b in (1, 32, 64) for n in (16, 64, 256)}
    assert [x.target for x in rnn if x.target] == [2.0]          # the b32 h64 row
    # Newton's while at several lengths and iteration counts (one row alternates 2 and 12)
    newton = families["newton_sqrt"]
    lengths = {x.make_inputs(False)[0][0].numel() for x in newton}
    assert len(newton) >= 4 and {1000, 10_000, 1_000_000} <= lengths
    assert max(len(x.make_inputs(False)) for x in newton) == 2
    sizes = {tuple(x.make_inputs(False)[0][0].shape) for x in families["layernorm_softmax"]}
    assert sizes == {(64, 512), (256, 1024)}
    # the spellings compute what they claim: rnn_for is rnn_cell written over the tensor
    (xs, h, w_ih, w_hh, bias), = rnn[0].make_inputs(True)
    torch.testing.assert_close(w.rnn_for(xs, h, w_ih, w_hh, bias),
                               w.rnn_cell(xs, h, w_ih, w_hh, bias))
    assert [x.name for x in w.select("rnn_for")] == [x.name for x in rnn]


def _have_models_extra() -> bool:
    return all(importlib.util.find_spec(m) for m in ("transformers", "torchvision"))


@pytest.mark.skipif(not _have_models_extra(), reason="needs the 'models' extra")
def test_models_quick_run_reports_every_model(tmp_path):
    kept = "Hand-written: why tograph wins here."
    (tmp_path / "MODELS.md").write_text("old table\n<!-- reasons: kept when regenerated -->\n"
                                        f"{kept}\n<!-- /reasons -->\nold plot\n")
    models = ["bert", "resnet18", "transformer_encoder"]
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.models", "--quick", "--models", ",".join(models),
         "--out", str(tmp_path)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    assert "[####################] " in done.stderr            # the progress bar
    results = json.loads((tmp_path / "models.json").read_text())
    assert results["mismatches"] == []
    assert results["settings"]["batches"] == [1] and not results["settings"]["compile"]
    assert "busy_fraction" in results["load"] and "tograph_first_call_s" in results["one_off"]
    assert [(r["model"], r["batch"]) for r in results["models"]] == [(m, 1) for m in models]
    for row in results["models"]:
        res = row["results"]
        assert set(res) == {"eager", "tograph", "torch.compile"}
        assert res["torch.compile"]["status"] == "skipped"
        tg = res["tograph"]
        assert tg["check"] == "ok" and 0 <= tg["max_abs_diff"] <= 1e-4, tg
        assert tg["first_call_s"] > 0 and tg["median_us"] > 0 and tg["ratio"] > 0
        assert tg["status"] == ("fallback" if tg["fallbacks"] else "ok")
        assert "others_fraction" in row["load"]
    md = (tmp_path / "MODELS.md").read_text()
    assert md.startswith("# Models benchmark") and "old table" not in md
    assert kept in md                       # the reasons survive regeneration
    assert all(f"| {m} | 1 |" in md for m in models)
    assert not (tmp_path / "models.partial.json").exists()
    # the report alone, from the saved JSON: the same table, the reasons kept
    (tmp_path / "MODELS.md").unlink()
    (tmp_path / "MODELS.md").write_text(md.replace(kept, "Rewritten reasons."))
    again = subprocess.run(
        [sys.executable, "-m", "benchmarks.models", "--report", str(tmp_path / "models.json"),
         "--out", str(tmp_path)], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert again.returncode == 0, again.stderr[-3000:]
    assert (tmp_path / "MODELS.md").read_text() == md.replace(kept, "Rewritten reasons.")


COMPARE = """
import collections, sys, torch
sys.argv = ["x"]
from benchmarks.models import compare
class Out(collections.OrderedDict):
    pass
t = torch.randn(2, 3)
ref = Out(logits=t, past=[(t, t)])
print(compare(Out(logits=t.clone(), past=[(t, t)]), ref)["check"])
print(compare(Out(logits=t + 1e-3, past=[(t, t)]), ref)["check"])
print(compare(dict(logits=t, past=[(t, t)]), ref)["check"])
print(compare(Out(logits=t), ref)["check"])
print(compare(Out(logits=t.double(), past=[(t, t)]), ref)["check"])
print(compare(Out(logits=t.to("meta"), past=[(t, t)]), ref)["check"])
print(compare(Out(logits=t, past=[(t, 1)]), ref)["check"])
"""


def test_models_check_catches_values_types_and_structure():
    done = subprocess.run([sys.executable, "-c", COMPARE], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "ok"
    assert lines[1].startswith("MISMATCH: max abs diff 0.001")
    assert all(line.startswith("MISMATCH: ") for line in lines[1:]) and len(lines) == 7, lines


@pytest.mark.parametrize("family", ["rnn_for", "newton_sqrt", "layernorm_softmax"])
def test_every_size_of_a_workload_converts_and_matches_eager(family):
    """The suite's programs at each of their sizes, strict mode, two calls with other
    values: a size the optimizer was not tuned to must still convert and give eager's
    result (a while-loop rewrite that held at one RNN shape raised at six others)."""
    import torch
    from transpiler import to_graph
    w = _workloads()
    for workload in w.WORKLOADS:
        if workload.family != family:
            continue
        fn = to_graph(workload.fn, strict=True)
        for inputs in workload.make_inputs(True):
            other = tuple(t * 0.5 + 0.25 if t.dtype.is_floating_point else t for t in inputs)
            for args in (inputs, other):
                torch.testing.assert_close(fn(*args), workload.fn(*args), rtol=1e-5,
                                           atol=workload.atol, msg=workload.name)


def test_sweep_cells_match_eager_and_are_written(tmp_path):
    """``benchmarks.sweep``: every spelling of two families at the suite's size, inference
    and training, in one process; each cell's result (and gradients) is checked against
    eager's, the table and the json are written."""
    from benchmarks import sweep
    sweep.main(["--only", "rnn,gelu", "--quick", "--rounds", "1", "--round-s", "0.001",
                "--out", str(tmp_path)])
    cells = json.loads((tmp_path / "sweep.json").read_text())["cells"]
    spellings = {(c["family"], c["spelling"], c["mode"]) for c in cells}
    assert len(spellings) == 2 * (5 + 3) == len(cells)
    assert all(c["error"] < 1e-4 and not c["fallback"] and c["ratio"] > 0 for c in cells), \
        [c for c in cells if c["error"] >= 1e-4 or c["fallback"]]
    table = (tmp_path / "SWEEP.md").read_text()
    assert table.count("| rnn |") == 10 and "(suite's)" in table
