"""benchmarks/training.py runs end to end (a smoke test: no timing is asserted): the quick
run trains each contender, checks it against eager, measures saved-for-backward bytes and
first steps, writes JSON, Markdown (keeping the hand-written reasons) and, from the JSON
alone, the same Markdown again."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_quick_training_run_reports_every_contender(tmp_path):
    kept = "Hand-written: why the training step is faster."
    (tmp_path / "TRAINING.md").write_text("old table\n<!-- reasons: kept when regenerated -->\n"
                                          f"{kept}\n<!-- /reasons -->\nold plot\n")
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.training", "--quick", "--no-compile", "--models",
         "mlp,rnn", "--out", str(tmp_path)], capture_output=True, text=True, timeout=300,
        cwd=ROOT)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    assert "[####################] " in done.stderr            # the progress bar
    results = json.loads((tmp_path / "training.json").read_text())
    assert results["mismatches"] == []
    s = results["settings"]
    assert s["quick"] and not s["compile"] and s["steps"] == 3 and s["threads"] == 2
    assert "busy_fraction" in results["load"]
    assert [r["model"] for r in results["models"]] == ["mlp", "rnn"]
    for row in results["models"]:
        res = row["results"]
        assert set(res) == {"eager", "tograph", "tograph step", "torch.compile"}
        assert res["torch.compile"]["status"] == "skipped"
        for name in ("tograph", "tograph step"):
            r = res[name]
            assert r["check"] == "ok" and 0 <= r["max_rel_diff"] <= 1e-5, r
            assert r["steps"] == 3 and r["first_step_s"] > 0
            assert r["median_ms"] > 0 and r["ratio"] > 0 and r["steps_per_s"] > 0
            assert r["status"] == ("fallback" if r["fallbacks"] else "ok")
        tg, eager = res["tograph"], res["eager"]
        assert tg["status"] == "ok" and tg["fallbacks"] == 0, tg       # the model converts
        assert 0 < eager["saved"]["activations"] < eager["saved"]["total"]
        assert tg["saved"]["total"] <= eager["saved"]["total"]
        assert "others_fraction" in row["load"]
    md = (tmp_path / "TRAINING.md").read_text()
    assert md.startswith("# Training benchmark") and "old table" not in md
    assert kept in md and "| mlp |" in md and "| rnn |" in md
    assert not (tmp_path / "training.partial.json").exists()
    # the report alone, from the saved JSON: the same table, the reasons kept
    (tmp_path / "TRAINING.md").write_text(md.replace(kept, "Rewritten reasons."))
    again = subprocess.run(
        [sys.executable, "-m", "benchmarks.training", "--report",
         str(tmp_path / "training.json"), "--out", str(tmp_path)], capture_output=True,
        text=True, timeout=120, cwd=ROOT)
    assert again.returncode == 0, again.stderr[-3000:]
    assert (tmp_path / "TRAINING.md").read_text() == md.replace(kept, "Rewritten reasons.")


def test_a_training_that_differs_from_eager_fails_the_run(tmp_path, monkeypatch):
    """The exit status and the report say so when a contender's training differs (here the
    whole-step contender's step scales the weights by 1.01)."""
    import torch
    from benchmarks import training as T
    from benchmarks import training_check, training_tasks   # eager's Run keeps the real step
    real = training_tasks.training_step

    def off(model, opt, loss_fn, inputs, target):
        loss = real(model, opt, loss_fn, inputs, target)
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(1.01)
        return loss
    monkeypatch.setattr(training_tasks, "training_step", off)
    assert training_check.training_step is real
    threads = torch.get_num_threads()
    try:
        status = T.main(["--quick", "--models", "mlp", "--out", str(tmp_path)])
    finally:
        torch.set_num_threads(threads)
    assert status == 1
    assert "TRAINING DIFFERS FROM EAGER" in (tmp_path / "TRAINING.md").read_text()
    results = json.loads((tmp_path / "training.json").read_text())
    assert len(results["mismatches"]) == 1, results["mismatches"]
    assert results["mismatches"][0].startswith("mlp / tograph step: MISMATCH")
