"""benchmarks/run.py runs end to end (a smoke test: no timing is asserted) and every
contender's result matches eager."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONTENDERS = {"eager", "tograph", "torch.compile", "jit.script"}


def test_quick_run_writes_results_that_match_eager(tmp_path):
    done = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "run.py"), "--quick", "--no-compile",
         "--only", "matmul_2x2,branchy", "--out", str(tmp_path)],
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
    assert set(rows) == {"matmul_2x2", "matmul_2x2 Session.run", "branchy"}
    for name in ("matmul_2x2", "branchy"):
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
