"""The training benchmark of issue 15: training steps per second of eager, to_graph and
torch.compile, first-step latency, memory saved for backward, and a 20-step check.

    .venv/bin/python -m benchmarks.training                    # every model (~10-20 min)
    .venv/bin/python -m benchmarks.training --quick            # smoke test: small, no compile
    .venv/bin/python -m benchmarks.training --models gpt2,rnn --rounds 5 --no-compile

The tasks are ``benchmarks/training_tasks.py``'s (the MLP, the ``for xt in xs`` RNN at b32
h64, GPT-2 tiny, mobilenet_v3_small, resnet18; train mode, dropout 0). One step = forward,
loss, backward, optimizer step (SGD with momentum; why not AdamW: training_tasks.py).
Contenders, each on its own copy of the same initial weights: eager; ``tograph``:
``to_graph(model)`` in the eager step; ``tograph step``: ``to_graph(training_step)``, the
whole step converted; and ``torch.compile(model)``. After a one-off warm-up (a tiny MLP's
first step under each, recorded apart), per model, in one process, on 2 threads
(``--threads``):

- each contender fresh (to_graph: conversion cache cleared, a new kernel cache dir;
  torch.compile: ``torch._dynamo.reset()``, inductor's FX graph and AOTAutograd caches off)
  trains ``--steps`` steps (default 20) on the same batches, in lockstep with eager; its
  first step's latency (from wrapping to the end of the optimizer step) is recorded, and
  its losses, every step's gradients and the final parameters and buffers are compared
  with eager's (``training_check.train_side_by_side``: max relative difference, <= 1e-5);
- torch.compile's first steps take 20-140 s here: its checked steps (its compiles) run only
  while the ``--compile-budget`` (seconds, all models together) lasts: a SIGALRM stops the
  step that spends it, and later models skip torch.compile;
- bytes of the unique storages autograd saves for backward in one forward
  (``saved_tensors_hooks``), in all and without the parameters' and inputs' storages;
- the median time per step over rounds interleaved between the contenders
  (``timing.interleaved``), with its range; the machine's load per row and over the run.

Writes ``<out>/training.json``, ``<out>/training.png`` (with matplotlib) and
``benchmarks/TRAINING.md`` (``<out>/TRAINING.md`` with ``--out``), keeping the hand-written
reasons between the markers. Exits 1 when a contender's training differs from eager's.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import sys
import tempfile
import time
import warnings
from typing import Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for _path in (HERE, ROOT):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import run  # noqa: E402  (sets TORCHINDUCTOR_CACHE_DIR to this run's own before torch loads)
import report  # noqa: E402
import suite_report  # noqa: E402
import torch  # noqa: E402

from run import COMPILE, EAGER, THREADS, TOGRAPH, _short  # noqa: E402

STEP = "tograph step"
CONTENDERS = [EAGER, TOGRAPH, STEP, COMPILE]
RTOL = 1e-5


def parse_args(argv=None):
    from benchmarks.training_tasks import TASKS
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", metavar="NAME[,NAME]", default=",".join(TASKS),
                   help=f"models to train (default: all: {', '.join(TASKS)})")
    p.add_argument("--rounds", type=int, default=None,
                   help="interleaved timing rounds (default 7; --quick: 2)")
    p.add_argument("--steps", type=int, default=None,
                   help="steps of the check against eager (default 20; --quick: 3)")
    p.add_argument("--quick", action="store_true",
                   help="the tests' small sizes, 3 checked steps, 2 short rounds, no "
                        "torch.compile: a smoke test, not a measurement")
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    p.add_argument("--threads", type=int, default=THREADS,
                   help=f"torch threads (default {THREADS}, the issue's setting; 1 on a "
                        "machine other processes oversubscribe)")
    p.add_argument("--compile-budget", type=float, default=900.0, metavar="S",
                   help="seconds torch.compile's first steps may take, all models together; "
                        "models after it is spent skip torch.compile (default 900)")
    p.add_argument("--out", metavar="DIR", help="where to write training.json, training.png "
                   "and (with --out) TRAINING.md; default benchmarks/results")
    p.add_argument("--report", metavar="JSON", help="run nothing: rewrite TRAINING.md and the "
                   "plot from a saved training.json")
    args = p.parse_args(argv)
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in args.models if m not in TASKS]
    if unknown:
        p.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(TASKS)}")
    args.rounds = args.rounds or (2 if args.quick else 7)
    args.steps = args.steps or (3 if args.quick else 20)
    args.round_s = 0.02 if args.quick else 0.5
    args.scale = "test" if args.quick else "bench"
    args.no_compile = args.no_compile or args.quick
    return args


# --------------------------------------------------------------------------- one model
def _timed_out(e: Optional[BaseException]) -> bool:
    """Whether ``e`` is, or was raised from, the budget's TimeoutError (inductor wraps it in
    BackendCompilerFailed)."""
    seen = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, TimeoutError):
            return True
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return False


def _cpu_timed(step, sink: List[float]):
    """``step`` that appends the CPU time of each call (all the process's threads) to
    ``sink``: less disturbed than wall time when other processes oversubscribe the cores."""
    def call(inputs, target):
        t0 = time.process_time()
        out = step(inputs, target)
        sink.append(time.process_time() - t0)
        return out
    return call


class TrainingBench:
    def __init__(self, args, partial_path: Optional[str] = None):
        from machine import LoadMonitor
        from progress import Progress
        self.args = args
        self.monitor = LoadMonitor()
        self.progress = Progress(3 * len(args.models))
        self.cache_root = tempfile.mkdtemp(prefix="tograph-training-cache-")
        self.compile_spent = 0.0
        self.one_off: Dict[str, float] = {}
        self.partial_path = partial_path

    def warm_up(self) -> None:
        """The one-off costs of the process's first training step under each contender
        (imports, torch's first ops, to_graph's first kernel build, inductor's start), paid
        on a tiny MLP before the models and recorded apart, so the first model's first steps
        are not billed for them."""
        from benchmarks.training_check import Run, train_side_by_side
        from benchmarks.training_tasks import MLP, Task
        from runtime.options import options
        import torch.nn.functional as F
        g = torch.Generator().manual_seed(0)
        tiny = Task("tiny", "", lambda: MLP(8, 8, 4),
                    lambda s: ((torch.randn(4, 8, generator=g),), torch.arange(4)),
                    F.cross_entropy)
        runs = {n: self.contender(tiny, n) for n in (EAGER, TOGRAPH)}
        if not self.args.no_compile:         # caches on, no budget: a one-off, as models.py
            torch._dynamo.reset()
            runs[COMPILE] = Run(tiny, wrap=torch.compile)
        with options.override(cache_dir=tempfile.mkdtemp(dir=self.cache_root)):
            train_side_by_side(tiny, runs, 1)
        self.one_off = {n: r.first_step_s for n, r in runs.items() if r.error is None}
        self.compile_spent = 0.0                 # the budget is the models' own

    def contender(self, task, name: str):
        """A fresh ``training_check.Run`` of the contender on the task."""
        from benchmarks.training_check import Run
        from benchmarks.training_tasks import training_step
        from transpiler import api, to_graph
        if name == EAGER:
            return Run(task)
        if name == TOGRAPH:
            api._CONVERTED.clear()             # a fresh conversion, not the cached one
            return Run(task, wrap=to_graph)
        if name == STEP:
            api._CONVERTED.clear()
            return Run(task, step_fn=to_graph(training_step))
        torch._dynamo.reset()
        return Run(task, wrap=torch.compile, context=self.compile_budget)

    @contextlib.contextmanager
    def compile_budget(self):
        """Around each of torch.compile's checked steps: its caches off, the time spent
        counted against ``--compile-budget``, and a SIGALRM raising TimeoutError in the
        step (a compile included) once the budget is spent."""
        budget = self.args.compile_budget

        def out_of_time(signum, frame):
            raise TimeoutError(f"torch.compile's --compile-budget of {budget:g} s ran out")
        left = budget - self.compile_spent
        if left <= 0:
            out_of_time(None, None)
        old = signal.signal(signal.SIGALRM, out_of_time)
        signal.setitimer(signal.ITIMER_REAL, left)
        t0 = time.perf_counter()
        try:
            with run.compile_caches(False):
                yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
            self.compile_spent += time.perf_counter() - t0

    @staticmethod
    def saved(task, called) -> Dict[str, int]:
        from benchmarks.training_check import saved_bytes
        inputs, target = task.batch(0)
        exclude = list(task.model().parameters()) + list(called.parameters()) + \
            [t for t in inputs if isinstance(t, torch.Tensor)]
        return saved_bytes(lambda: task.loss(called(*inputs), target), exclude)

    def row(self, name: str) -> dict:
        from machine import LoadMonitor
        from runtime.options import options
        from timing import interleaved
        from benchmarks.training_check import train_side_by_side
        from benchmarks.training_tasks import TASKS
        monitor = LoadMonitor().start()
        task = TASKS[name](self.args.scale)
        model = task.model()
        row = {"model": name, "size": task.size, "optimizer": task.optimizer,
               "params": sum(p.numel() for p in model.parameters()), "results": {}}
        res = row["results"]
        runs = {}
        for cname in CONTENDERS:
            if cname == COMPILE and self.args.no_compile:
                res[cname] = {"status": "skipped", "note": "--no-compile"}
            elif cname == COMPILE and self.compile_spent >= self.args.compile_budget:
                res[cname] = {"status": "skipped", "note": "the --compile-budget of "
                              f"{self.args.compile_budget:g} s was spent"}
            else:
                runs[cname] = self.contender(task, cname)
        with options.override(cache_dir=tempfile.mkdtemp(dir=self.cache_root)):
            self.progress.show(f"{name}: {self.args.steps} steps of {', '.join(runs)}")
            diffs = train_side_by_side(task, runs, self.args.steps)
            self.progress.step(f"{name}: saved for backward")
            for cname, got in runs.items():
                fb = got.fallbacks
                r = res[cname] = {"status": "fallback" if fb else "ok", "fallbacks": len(fb),
                                  "first_step_s": got.first_step_s}
                if fb:
                    r["note"] = "FallbackWarning: " + fb[0]
                if _timed_out(got.error):                      # the compile budget
                    r.update(status="skipped", note="stopped in its checked steps: the "
                             f"--compile-budget of {self.args.compile_budget:g} s ran out")
                elif got.error is not None:
                    r.update(status="error", note=_short(got.error), check="MISMATCH: "
                             f"raised {_short(got.error)}")
                    self.progress.note(f"!!! {name} / {cname}: {r['note']}")
                elif cname != EAGER:
                    r.update(diffs[cname])
                    d = r["max_rel_diff"]
                    r["check"] = "ok" if d <= RTOL else \
                        f"MISMATCH: max relative diff {d:.3g} > {RTOL:g} ({r['where']})"
                    if r["check"] != "ok":
                        self.progress.note(f"!!! {name} / {cname}: {r['check']}")
                if cname != STEP and got.error is None:   # a whole step has no forward alone
                    try:
                        r["saved"] = self.saved(task, got.called)
                    except Exception as e:  # noqa: BLE001
                        r["saved_note"] = _short(e)
            self.progress.step(f"{name}: timing")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                batches = [task.batch(100), task.batch(101)]
                cpu = {c: [] for c, g in runs.items() if g.error is None}
                steps = {c: _cpu_timed(runs[c].bare_step, cpu[c]) for c in cpu}
                try:
                    times = interleaved(steps, batches,
                                        self.args.rounds, self.args.round_s, warmup=1)
                except Exception as e:  # noqa: BLE001
                    self.progress.note(f"!!! {name}: timing failed: {_short(e)}")
                    times = {}
        for cname, t in times.items():       # the CPU time of the rounds' steps (the last)
            n = t["rounds"] * t["calls_per_round"]
            t["cpu_s"] = statistics.median(cpu[cname][-n:])
        eager_cpu = times.get(EAGER, {}).get("cpu_s")
        eager_s = times.get(EAGER, {}).get("median_s")
        for cname, t in times.items():
            res[cname].update(median_ms=t["median_s"] * 1e3,
                              spread_ms=[t["min_s"] * 1e3, t["max_s"] * 1e3],
                              steps_per_s=1.0 / t["median_s"],
                              steps_per_round=t["calls_per_round"],
                              ratio=eager_s / t["median_s"] if eager_s else None,
                              cpu_ms=t["cpu_s"] * 1e3,
                              cpu_ratio=eager_cpu / t["cpu_s"] if eager_cpu else None)
        row["load"] = monitor.stop()
        self.progress.step(f"{name}: done")
        return row

    def run(self) -> dict:
        print(f"torch {torch.__version__}: torch.set_num_threads({self.args.threads}) -> "
              f"{torch.get_num_threads()} threads", flush=True)
        self.monitor.start()
        self.progress.show("one-off warm-up")
        self.warm_up()
        rows = []
        for name in self.args.models:
            rows.append(self.row(name))
            suite_report.save_partial(self.partial_path,
                                      lambda: self.results(rows, partial=True))
        results = self.results(rows)
        self.progress.finish()
        return results

    def results(self, rows: List[dict], partial: bool = False) -> dict:
        return {"machine": suite_report.described_machine(), "load": self.monitor.stop(), "partial": partial,
                "settings": {"quick": self.args.quick, "rounds": self.args.rounds,
                             "round_s": self.args.round_s, "steps": self.args.steps,
                             "scale": self.args.scale, "threads": torch.get_num_threads(),
                             "rtol": RTOL, "compile": not self.args.no_compile,
                             "compile_budget_s": self.args.compile_budget,
                             "compile_spent_s": round(self.compile_spent, 1)},
                "one_off_first_step_s": self.one_off, "models": rows,
                "mismatches": [f"{r['model']} / {n}: {c['check']}" for r in rows
                               for n, c in r["results"].items()
                               if c.get("check", "ok") != "ok"],
                "fallbacks": [f"{r['model']} / {n}: {c['note']}" for r in rows
                              for n, c in r["results"].items()
                              if c.get("status") in ("fallback", "error")
                              or c.get("status") == "skipped" and c["note"] != "--no-compile"]}


# --------------------------------------------------------------------------- report
HEADER = ["model", "size", "eager steps/s", "tograph x", "tograph step x", "compile x",
          "1st step s eager / tograph / step / compile", "saved MB eager / tograph / compile",
          "activations MB eager / tograph / compile", "max rel diff tograph / step / compile",
          "check"]


def _ratio(r: dict, markdown: bool) -> str:
    if r.get("status") == "skipped":
        return "skipped"
    if r.get("ratio") is None:
        return "**ERROR**" if markdown else "ERROR"
    text = report.fmt_ratio(r["ratio"])
    lo, hi = r["spread_ms"]
    text += f" ({r['median_ms']:.1f} ms, {lo:.1f}-{hi:.1f})"
    if r.get("cpu_ratio"):
        text += f" cpu {report.fmt_ratio(r['cpu_ratio'])}"
    return text + (" FALLBACK" if r.get("status") == "fallback" else "")


def _mb(r: dict, key: str) -> str:
    saved = r.get("saved")
    return f"{saved[key] / 2 ** 20:.2f}" if saved else "-"


def rows_of(results: dict, markdown: bool = False) -> List[List[str]]:
    out = []
    for row in results["models"]:
        res = row["results"]
        e = res[EAGER]
        others = [res.get(c, {}) for c in (TOGRAPH, STEP, COMPILE)]
        bad = [n for n, r in res.items() if r.get("check", "ok") != "ok"]
        check = "ok" if not bad else "MISMATCH: " + ", ".join(bad)
        diffs = [f"{r['max_rel_diff']:.1e}" if r.get("max_rel_diff") is not None else "-"
                 for r in others]
        out.append([row["model"], row["size"],
                     f"{e['steps_per_s']:.1f}" if e.get("steps_per_s") else "-",
                     *[_ratio(r, markdown) for r in others],
                     " / ".join(report.fmt_s(r.get("first_step_s"), "s")
                                for r in [e] + others),
                     " / ".join(_mb(r, "total") for r in (e, others[0], others[2])),
                     " / ".join(_mb(r, "activations") for r in (e, others[0], others[2])),
                     " / ".join(diffs), f"**{check}**" if markdown and bad else check])
    return out


def text_table(results: dict) -> str:
    rows = [HEADER] + rows_of(results)
    return "\n".join(" | ".join(r) for r in rows)


def summary_lines(results: dict) -> List[str]:
    lines = suite_report.load_lines(results)
    s = results["settings"]
    one_off = results.get("one_off_first_step_s")
    if one_off:
        lines.append("one-off per process, a tiny MLP's first training step before the models "
                     "(not in their first steps): " + ", ".join(
                         f"{k} {v:.2f} s" for k, v in one_off.items()))
    if s["compile"]:
        lines.append(f"torch.compile's checked steps (its compiles) took "
                     f"{s['compile_spent_s']:g} s (budget {s['compile_budget_s']:g} s)")
    for name in (TOGRAPH, STEP, COMPILE):
        got = sorted((r["results"][name]["ratio"], r["model"]) for r in results["models"]
                     if r["results"].get(name, {}).get("ratio")
                     and r["results"][name].get("status") == "ok")
        if got:
            cpu = sorted((r["results"][name]["cpu_ratio"], r["model"])
                         for r in results["models"]
                         if r["results"][name].get("cpu_ratio")
                         and r["results"][name].get("status") == "ok")
            lines.append(f"{name}: steps/s over eager's {report.fmt_ratio(got[0][0])} "
                         f"({got[0][1]}) to {report.fmt_ratio(got[-1][0])} ({got[-1][1]})"
                         + (f"; by CPU time {report.fmt_ratio(cpu[0][0])} ({cpu[0][1]}) to "
                            f"{report.fmt_ratio(cpu[-1][0])} ({cpu[-1][1]})" if cpu else ""))
    diffs = [(r["results"][n]["max_rel_diff"], r["model"], n) for r in results["models"]
             for n in (TOGRAPH, STEP, COMPILE)
             if r["results"].get(n, {}).get("max_rel_diff") is not None]
    if diffs:
        d = max(diffs)
        lines.append(f"{s['steps']} steps against eager: largest relative difference "
                     f"{d[0]:.1e} ({d[1]} / {d[2]}; the check asks <= {s['rtol']:g})")
    return lines


def markdown(results: dict, png_path: Optional[str], md_path: str) -> str:
    m, s = results["machine"], results["settings"]
    table = [HEADER] + rows_of(results, markdown=True)
    out = ["# Training benchmark", "",
           "Generated by `.venv/bin/python -m benchmarks.training` "
           + ("(`--quick`: a smoke test, not a measurement) " if s["quick"] else "")
           + "- do not edit by hand, except the reasons between the markers (kept when "
           "regenerated). Tasks from `benchmarks/training_tasks.py` (train mode, dropout 0); "
           "one step = forward, loss, backward, optimizer step, on "
           f"{s['threads']} thread{'s' if s['threads'] != 1 else ''}. `x`: steps per second over eager's (> 1 is faster), "
           f"the median of {s['rounds']} rounds interleaved between the contenders, with the "
           "median time per step and its range over rounds; `cpu`: the same ratio of the "
           "median CPU time per step (`time.process_time`, all threads; less disturbed when "
           "other processes oversubscribe the cores). `tograph`: `to_graph(model)` in "
           "the eager step; `tograph step`: `to_graph` of the whole step function; "
           "`compile`: `torch.compile(model)`. First step: a fresh contender (conversion "
           "cache cleared and a new kernel cache dir; `torch._dynamo.reset()`, inductor's "
           "caches off) from wrapping to the end of its first optimizer step. Saved: bytes "
           "of the unique storages autograd saves for backward during one forward "
           "(`torch.autograd.graph.saved_tensors_hooks`), in all and as activations (without "
           f"parameters and inputs). Check: {s['steps']} steps from the same weights on the "
           "same batches; the largest relative difference (max |a - b| / max |b| per tensor) "
           f"of the losses, every step's gradients and the final parameters and buffers, "
           f"<= {s['rtol']:g}.", "",
           suite_report.machine_line(m), ""]
    if results.get("partial"):
        out += [f"**A run cut short: {len(results['models'])} models.**", ""]
    out += [f"- {line}" for line in summary_lines(results)]
    out += suite_report.closing_sections(
        results, HEADER,
        "| --- | --- | " + " | ".join("---:" for _ in HEADER[2:-1]) + " | --- |", table[1:], ("Fell back, failed or skipped", "TRAINING DIFFERS FROM EAGER", "Why"),
        png_path, md_path, "training steps per second over eager")
    return "\n".join(out) + "\n"


def plot(results: dict, path: str) -> bool:
    """Bars of each contender's training steps/s over eager's per model; False without
    matplotlib."""
    plt = report.pyplot()
    if plt is None:
        return False
    rows = results["models"]
    fig, ax = plt.subplots(figsize=(max(7, 1.2 * len(rows) + 3), 5))
    colors = {TOGRAPH: "tab:blue", STEP: "tab:green", COMPILE: "tab:orange"}
    for k, (name, color) in enumerate(colors.items()):
        pts = [(i + (k - 1) * 0.27, r["results"][name]["ratio"]) for i, r in enumerate(rows)
               if r["results"].get(name, {}).get("ratio")]
        if pts:
            ax.bar([p[0] for p in pts], [p[1] for p in pts], 0.27, label=name, color=color)
        for i, r in enumerate(rows):
            status = r["results"].get(name, {}).get("status")
            if status in ("fallback", "error"):
                ax.annotate(status.upper(), (i + (k - 1) * 0.27, 1), ha="center",
                            va="bottom", color="red", fontsize=7, rotation=90)
    m = results["machine"]
    n = m["threads"]
    return suite_report.finish_plot(
        plt, fig, ax, path, [r["model"] for r in rows], 8, "training steps/s over eager's",
        f"Training step speed — {m['cpu']}, {n} thread{'s' if n != 1 else ''}, torch "
        f"{m['torch']}" + (" (--quick)" if results["settings"]["quick"] else ""))


def write(results: dict, out: str, md_path: str) -> None:
    """Print the table and summary; write training.json, training.png and TRAINING.md."""
    suite_report.write(results, out, md_path, "training", text_table, summary_lines, plot,
                       markdown)


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    return suite_report.main(args, TrainingBench, "training", "TRAINING.md", HERE, write, "")


if __name__ == "__main__":
    sys.exit(main())
