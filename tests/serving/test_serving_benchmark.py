"""``python -m benchmarks.serving --quick`` runs end to end (a smoke test: no timing is
asserted): every section reports, every result matched eager, no call fell back or raised,
``dynamic=False`` traces once per new size while the automatic mode does not, and the
Markdown report has its tables."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_serving_quick_run(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("TOGRAPH_RUN_EAGERLY",
                                                             "TOGRAPH_LOGS")}
    done = subprocess.run([sys.executable, "-m", "benchmarks.serving", "--quick", "--out",
                           str(tmp_path)], capture_output=True, text=True, timeout=600,
                          cwd=ROOT, env=env)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    assert "[####################] " in done.stderr                 # the progress bar
    results = json.loads((tmp_path / "serving.json").read_text())
    assert results["problems"] == []
    assert {"machine", "load", "settings", "threads", "sizes", "memory",
            "first_calls"} <= set(results)
    assert "busy_fraction" in results["load"]
    workloads = {"mlp", "transformer_block"}
    assert {(r["workload"], r["threads"]) for r in results["threads"]} == \
        {(w, t) for w in workloads for t in (1, 2)}
    for r in results["threads"]:
        assert r["eager"]["median"] > 0 and r["tograph"]["median"] > 0
    sizes = {(r["workload"], r["mode"]): r for r in results["sizes"]}
    assert set(sizes) == {(w, m) for w in workloads for m in ("automatic", "dynamic=False")}
    for w in workloads:
        static, auto = sizes[(w, "dynamic=False")], sizes[(w, "automatic")]
        assert static["traces"] == static["sizes"] == 4
        assert 1 <= auto["traces"] < auto["sizes"]
    memory = results["memory"]
    assert memory["functions"] == 40 and memory["rss_after_mb"] > 0
    assert memory["graph_functions_alive"] == 0          # dropped functions are freed
    assert {(r["workload"], r["threads"]) for r in results["first_calls"]} == \
        {(w, t) for w in workloads for t in (1, 2)}
    for r in results["first_calls"]:
        assert r["fallbacks"] == 0 and r["errors"] == 0 and r["traces"] >= 1, r
    md = (tmp_path / "SERVING.md").read_text()
    assert md.startswith("# Serving benchmark") and "PROBLEMS" not in md
    for title in ("## Threads x calls per second", "## New batch sizes",
                  "## Memory after dropping converted functions",
                  "## First calls from threads at once"):
        assert title in md
    assert "| mlp | dynamic=False | 4 | 4 |" in md
