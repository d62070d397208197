"""The models benchmark of issue 13: eager vs to_graph vs torch.compile on real models.

    .venv/bin/python -m benchmarks.models                  # every model, batch 1 and 8 (~15 min)
    .venv/bin/python -m benchmarks.models --quick          # smoke test: batch 1, no compile
    .venv/bin/python -m benchmarks.models --models gpt2,resnet18 --batches 1 --no-compile

The models are ``benchmarks/model_zoo.py``'s (transformers GPT-2/BERT/LLaMA/T5 tiny configs,
torchvision CNNs and ViT, ``nn.TransformerEncoder``; random weights, no downloads), in eval
mode under ``torch.no_grad()``, on 2 threads. For each model and batch, in one process: fresh
contenders (to_graph: conversion cache cleared, a new kernel cache dir; torch.compile:
``torch._dynamo.reset()``, inductor's FX graph cache off) and their first-call latency; the
results of two inputs checked against eager (output types, every tensor's max abs diff,
<= 1e-4); to_graph's FallbackWarnings counted; the median time per call over rounds
interleaved between the contenders (``timing.interleaved``), with its range; the machine's
load per row and over the run. Writes ``<out>/models.json``, ``<out>/models.png`` (with
matplotlib) and ``benchmarks/MODELS.md`` (``<out>/MODELS.md`` with ``--out``), keeping the
hand-written reasons between the ``reasons`` markers of the file it replaces. Exits 1 when
a contender's result differs from eager.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import warnings
from typing import Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import run  # noqa: E402  (sets TORCHINDUCTOR_CACHE_DIR to this run's own before torch loads)
import report  # noqa: E402
import suite_report  # noqa: E402
import torch  # noqa: E402

from run import COMPILE, EAGER, THREADS, TOGRAPH, _short, compile_cold  # noqa: E402

CONTENDERS = [EAGER, TOGRAPH, COMPILE]
ATOL = 1e-4


def parse_args(argv=None):
    from benchmarks.model_zoo import MODELS
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", metavar="NAME[,NAME]", default=",".join(MODELS),
                   help=f"models to run (default: all: {', '.join(MODELS)})")
    p.add_argument("--batches", default=None, metavar="B[,B]",
                   help="batch sizes (default 1,8; --quick: 1)")
    p.add_argument("--rounds", type=int, default=None,
                   help="interleaved timing rounds (default 9; --quick: 2)")
    p.add_argument("--quick", action="store_true",
                   help="batch 1, 2 short rounds, no torch.compile: a smoke test, not a "
                        "measurement")
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    p.add_argument("--no-cold", action="store_true",
                   help="skip to_graph's first call in fresh processes (cold and warm caches; "
                        "benchmarks/first_call.py)")
    p.add_argument("--out", metavar="DIR", help="where to write models.json, models.png and "
                   "(with --out) MODELS.md; default benchmarks/results")
    p.add_argument("--report", metavar="JSON", help="run nothing: rewrite MODELS.md and the "
                   "plot from a saved models.json (or a cut-short run's models.partial.json)")
    args = p.parse_args(argv)
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in args.models if m not in MODELS]
    if unknown:
        p.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(MODELS)}")
    args.batches = [int(b) for b in (args.batches or ("1" if args.quick else "1,8")).split(",")]
    args.rounds = args.rounds or (2 if args.quick else 9)
    args.round_s = 0.02 if args.quick else 0.2
    args.no_compile = args.no_compile or args.quick
    args.no_cold = args.no_cold or args.quick
    return args


# --------------------------------------------------------------------------- checking
def leaves(obj, path: str = "out", seen=None) -> List[tuple]:
    """(path, type name) of every container and (path, tensor) of every tensor in a model's
    output: ModelOutputs and dicts by key, lists and tuples by index, a cache object
    (transformers' DynamicCache and its layers) by its attributes."""
    seen = set() if seen is None else seen
    if isinstance(obj, torch.Tensor):
        return [(path, obj)]
    if id(obj) in seen or obj is None or \
            isinstance(obj, (bool, int, float, str, torch.device, torch.dtype)):
        return [(path, obj)]
    seen.add(id(obj))
    out = [(path, type(obj).__name__)]
    if isinstance(obj, dict):
        items = [(f"{path}[{k!r}]", v) for k, v in obj.items()]
    elif isinstance(obj, (list, tuple)):
        items = [(f"{path}[{i}]", v) for i, v in enumerate(obj)]
    else:
        items = [(f"{path}.{k}", v) for k, v in sorted(vars(obj).items())
                 if not k.startswith("__") and not callable(v)] if hasattr(obj, "__dict__") \
            else []
    for p, v in items:
        out.extend(leaves(v, p, seen))
    return out


def compare(out, ref) -> Dict[str, object]:
    """{'check': 'ok' or 'MISMATCH: ...', 'max_abs_diff': float or None}."""
    got, want = leaves(out), leaves(ref)
    worst = 0.0
    if [p for p, _ in got] != [p for p, _ in want]:
        missing = sorted({p for p, _ in want} ^ {p for p, _ in got})[:3]
        return {"check": f"MISMATCH: output structure differs at {', '.join(missing)}",
                "max_abs_diff": None}
    for (path, g), (_, w) in zip(got, want):
        if isinstance(w, torch.Tensor):
            if type(g) is not torch.Tensor or g.device != w.device or g.is_meta:
                return {"check": f"MISMATCH: {path} is {type(g).__name__} "
                                 f"{getattr(g, 'device', '')}", "max_abs_diff": None}
            if g.shape != w.shape or g.dtype != w.dtype:
                return {"check": f"MISMATCH: {path} {tuple(g.shape)} {g.dtype} vs eager "
                                 f"{tuple(w.shape)} {w.dtype}", "max_abs_diff": None}
            if w.numel():
                diff = (g.double() - w.double()).abs().max().item()
                worst = max(worst, diff if diff == diff else float("inf"))
        elif isinstance(g, torch.Tensor) or g != w:
            return {"check": f"MISMATCH: {path} is {g!r}, eager's {w!r}",
                    "max_abs_diff": None}
    check = "ok" if worst <= ATOL else f"MISMATCH: max abs diff {worst:.3g} > {ATOL:g}"
    return {"check": check, "max_abs_diff": worst}


# --------------------------------------------------------------------------- one model
def _call(fn):
    """The contender as ``timing`` calls it: one input is an ``(args, kwargs)`` pair."""
    return lambda args, kwargs: fn(*args, **kwargs)


class ModelBench:
    def __init__(self, args, partial_path: Optional[str] = None):
        from machine import LoadMonitor
        from progress import Progress
        self.args = args
        self.monitor = LoadMonitor()
        per_row = 3 if args.no_compile else 4
        self.progress = Progress(1 + per_row * len(args.models) * len(args.batches))
        self.cache_root = tempfile.mkdtemp(prefix="tograph-models-cache-")
        self.one_off: Dict[str, float] = {}
        self.partial_path = partial_path    # rows so far, rewritten after each (long runs)

    def fresh_cache_dir(self) -> str:
        return tempfile.mkdtemp(dir=self.cache_root)

    def warm_up(self):
        """The one-off costs of the first to_graph / torch.compile call in the process
        (imports, first kernel build), paid on a tiny function and recorded apart."""
        from runtime.options import options
        from timing import first_call
        from transpiler import to_graph

        def tiny(x):
            return torch.relu(x) + 1.0
        x = torch.ones(4)
        with options.override(cache_dir=self.fresh_cache_dir()):
            self.one_off["tograph_first_call_s"] = first_call(lambda: to_graph(tiny), (x,))[0]
        if not self.args.no_compile:
            self.one_off["compile_first_call_s"] = compile_cold(tiny, (x,), caches=True)[0]

    def tograph_first_call(self, model, inputs, cache_dir):
        from runtime.options import options
        from timing import first_call
        from transpiler import api, to_graph
        api._CONVERTED.clear()                 # a fresh conversion, not the cached one
        with options.override(cache_dir=cache_dir):
            seconds, fn, _ = first_call(lambda: _call(to_graph(model)), inputs[0])
        import runtime.kernels
        runtime.kernels.wait()   # kernels built in the background: checked and timed as C
        return seconds, fn

    def row(self, name: str, batch: int) -> dict:
        from machine import LoadMonitor
        from benchmarks.model_zoo import MODELS
        from runtime.options import options
        from timing import interleaved
        from transpiler import FallbackWarning
        label = f"{name} batch {batch}"
        monitor = LoadMonitor().start()
        model, make_inputs = MODELS[name]()
        inputs = [make_inputs(batch, seed) for seed in (1, 2)]
        from timing import first_call
        seconds, _, first_ref = first_call(lambda: _call(model), inputs[0])
        refs = [first_ref] + [model(*a, **k) for a, k in inputs[1:]]
        params = sum(p.numel() for p in model.parameters())
        shape = " ".join(f"{tuple(t.shape)}" for t in list(inputs[0][0])
                         + list(inputs[0][1].values()) if isinstance(t, torch.Tensor))
        row = {"model": name, "batch": batch, "params": params, "inputs": shape,
               "results": {EAGER: {"status": "ok", "check": "ok", "max_abs_diff": 0.0,
                                   "first_call_s": seconds}}}
        res = row["results"]
        callables = {EAGER: _call(model)}
        cache_dir = self.fresh_cache_dir()

        self.progress.show(f"{label}: to_graph first call")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                seconds, fn = self.tograph_first_call(model, inputs, cache_dir)
                res[TOGRAPH] = {"status": "ok", "first_call_s": seconds}
                callables[TOGRAPH] = fn
            except Exception as e:  # noqa: BLE001 -- the benchmark reports, it does not stop
                res[TOGRAPH] = {"status": "error", "note": f"to_graph raised {_short(e)}"}
            self.progress.step(f"{label}: torch.compile first call")

            if self.args.no_compile:
                res[COMPILE] = {"status": "skipped", "note": "--no-compile"}
            else:
                try:
                    seconds, fn = compile_cold(model, inputs[0][0], kwargs=inputs[0][1])
                    res[COMPILE] = {"status": "ok", "first_call_s": seconds}
                    callables[COMPILE] = _call(fn)
                except Exception as e:  # noqa: BLE001
                    res[COMPILE] = {"status": "error", "note": _short(e)}
                self.progress.step(f"{label}: checking results against eager")

            raised = set()
            with options.override(cache_dir=cache_dir):
                for cname, fn in callables.items():
                    if cname == EAGER:
                        continue
                    try:
                        checks = [compare(fn(a, k), ref) for (a, k), ref in zip(inputs, refs)]
                    except Exception as e:  # noqa: BLE001
                        checks = [{"check": f"MISMATCH: raised {_short(e)}",
                                   "max_abs_diff": None}]
                        raised.add(cname)
                    bad = [c["check"] for c in checks if c["check"] != "ok"]
                    diffs = [c["max_abs_diff"] for c in checks]
                    res[cname]["check"] = bad[0] if bad else "ok"
                    res[cname]["max_abs_diff"] = None if None in diffs else max(diffs)
                    if bad:
                        self.progress.note(f"!!! {label} / {cname}: {bad[0]}")
        fallbacks = [str(c.message) for c in caught if issubclass(c.category, FallbackWarning)]
        if TOGRAPH in callables:
            res[TOGRAPH]["fallbacks"] = len(fallbacks)
            if fallbacks:
                res[TOGRAPH]["status"] = "fallback"
                res[TOGRAPH]["note"] = "FallbackWarning: " + fallbacks[0]
        self.progress.step(f"{label}: timing")
        if batch == self.args.batches[0] and not self.args.no_cold and TOGRAPH in callables:
            from first_call import cold_and_warm        # a fresh process, empty caches
            procs = cold_and_warm(name, batch, torch.get_num_threads())
            for state, got in procs.items():
                res[TOGRAPH][f"{state}_process"] = got

        with options.override(cache_dir=cache_dir), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ok = {n: f for n, f in callables.items() if n not in raised}
            try:
                times = interleaved(ok, inputs, self.args.rounds, self.args.round_s)
            except Exception as e:  # noqa: BLE001
                self.progress.note(f"!!! {label}: timing failed: {_short(e)}")
                times = {}
        eager_s = times.get(EAGER, {}).get("median_s")
        for cname, t in times.items():
            res[cname].update(median_us=t["median_s"] * 1e6,
                              spread_us=[t["min_s"] * 1e6, t["max_s"] * 1e6],
                              calls_per_round=t["calls_per_round"],
                              ratio=eager_s / t["median_s"] if eager_s else None)
        row["load"] = monitor.stop()
        self.progress.step(f"{label}: done")
        return row

    def run(self) -> dict:
        print(f"torch {torch.__version__}: torch.set_num_threads({THREADS}) -> "
              f"{torch.get_num_threads()} threads", flush=True)
        self.monitor.start()
        rows = []
        with torch.no_grad():
            self.progress.show("one-off warm-up")
            self.warm_up()
            self.progress.step("models")
            for batch in self.args.batches:        # every model at batch 1 first
                for name in self.args.models:
                    rows.append(self.row(name, batch))
                    suite_report.save_partial(self.partial_path,
                                              lambda: self.results(rows, partial=True))
        results = self.results(rows)
        self.progress.finish()
        return results

    def results(self, rows: List[dict], partial: bool = False) -> dict:
        return {"machine": suite_report.described_machine(), "load": self.monitor.stop(), "partial": partial,
                "settings": {"quick": self.args.quick, "rounds": self.args.rounds,
                             "round_s": self.args.round_s, "batches": self.args.batches,
                             "threads": torch.get_num_threads(), "atol": ATOL,
                             "compile": not self.args.no_compile, "no_grad": True},
                "one_off": self.one_off, "models": rows,
                "mismatches": [f"{r['model']} batch {r['batch']} / {n}: {c['check']}"
                               for r in rows for n, c in r["results"].items()
                               if c.get("check", "ok") != "ok"],
                "fallbacks": [f"{r['model']} batch {r['batch']}: {r['results'][TOGRAPH]['note']}"
                              for r in rows if r["results"][TOGRAPH]["status"] != "ok"]}


# --------------------------------------------------------------------------- report
HEADER = ["model", "batch", "eager ms", "tograph ms", "tograph x", "x best", "compile ms",
          "compile x", "x best", "tograph 1st s", "cold process 1st s", "warm process 1st s",
          "compile 1st s", "tograph max diff", "compile max diff",
          "fallbacks", "check"]


def best_ratio(eager: dict, r: dict) -> Optional[float]:
    """Eager's best round over the contender's best round: on a loaded machine the least
    disturbed rounds, closer to a quiet machine than the medians."""
    if not eager.get("spread_us") or not r.get("spread_us") or not r["spread_us"][0]:
        return None
    return eager["spread_us"][0] / r["spread_us"][0]


def _ms(eager: dict, r: dict, markdown: bool) -> List[str]:
    """[time (range), speedup, best-round speedup] of one contender."""
    from report import fmt_ratio
    if r.get("status") == "skipped":
        return ["skipped", "", ""]
    if r.get("median_us") is None:
        return ["**ERROR**" if markdown else "ERROR", "", ""]
    lo, hi = r["spread_us"]
    text = f"{r['median_us'] / 1e3:.2f} ({lo / 1e3:.2f}-{hi / 1e3:.2f})"
    if r.get("status") == "fallback":
        text += " FALLBACK"
    best = best_ratio(eager, r)
    return [text, fmt_ratio(r.get("ratio")), fmt_ratio(best) if best else "-"]


def rows_of(results: dict, markdown: bool = False) -> List[List[str]]:
    from report import fmt_s
    out = []
    for row in results["models"]:
        res = row["results"]
        tg, co = res[TOGRAPH], res[COMPILE]
        bad = [n for n, r in res.items() if r.get("check", "ok") != "ok"]
        check = "ok" if not bad else "MISMATCH: " + ", ".join(bad)
        diff = [f"{r['max_abs_diff']:.1e}" if r.get("max_abs_diff") is not None else "-"
                for r in (tg, co)]
        out.append([row["model"], str(row["batch"]),
                    f"{res[EAGER]['median_us'] / 1e3:.2f}" if res[EAGER].get("median_us")
                    else "-", *_ms(res[EAGER], tg, markdown), *_ms(res[EAGER], co, markdown),
                    fmt_s(tg.get("first_call_s"), "s"), *map(_process_first, (
                        tg.get("cold_process"), tg.get("warm_process"))),
                    fmt_s(co.get("first_call_s"), "s"),
                    *diff, str(tg.get("fallbacks", "-")),
                    f"**{check}**" if markdown and bad else check])
    return out


def _process_first(got: Optional[dict]) -> str:
    """A fresh process's first call (``first_call.py``): wall seconds (calling thread's CPU
    seconds)."""
    if not got:
        return "-"
    if "error" in got:
        return "error"
    return f"{got['wall_s']:.2f} ({got['thread_cpu_s']:.2f})"


def text_table(results: dict) -> str:
    rows = [HEADER] + rows_of(results)
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
    lines = ["  ".join(c.ljust(w) if i < 1 else c.rjust(w)
                       for i, (c, w) in enumerate(zip(r, widths))).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def summary_lines(results: dict) -> List[str]:
    """The load, the one-off costs, and per batch the range of each contender's speedup."""
    from report import fmt_ratio
    lines = suite_report.load_lines(results)
    o = results["one_off"]
    if o:
        lines.append("one-off per process, paid on a tiny function before the models and "
                     "not in their first calls: " + ", ".join(
                         f"{k.replace('_first_call_s', '')} {v:.2f} s" for k, v in o.items()))
    for batch in results["settings"]["batches"]:
        rows = [r for r in results["models"] if r["batch"] == batch]
        parts = []
        for name in (TOGRAPH, COMPILE):
            got = sorted((r["results"][name]["ratio"], r["model"]) for r in rows
                         if r["results"][name].get("ratio")
                         and r["results"][name].get("status") == "ok")
            if got:
                wins = sum(1 for r in rows if name == TOGRAPH
                           and (r["results"][TOGRAPH].get("ratio") or 0)
                           > (r["results"][COMPILE].get("ratio") or 0))
                parts.append(f"{name} {fmt_ratio(got[0][0])} ({got[0][1]}) to "
                             f"{fmt_ratio(got[-1][0])} ({got[-1][1]})"
                             + (f", ahead of torch.compile on {wins}/{len(rows)}"
                                if name == TOGRAPH and not results["settings"]["quick"]
                                and results["settings"]["compile"] else ""))
        if parts:
            lines.append(f"batch {batch}: speedup over eager " + "; ".join(parts))
    return lines


def markdown(results: dict, png_path: Optional[str], md_path: str) -> str:
    m, s = results["machine"], results["settings"]
    table = [HEADER] + rows_of(results, markdown=True)
    out = ["# Models benchmark", "",
           "Generated by `.venv/bin/python -m benchmarks.models` "
           + ("(`--quick`: a smoke test, not a measurement) " if s["quick"] else "")
           + "- do not edit by hand, except the reasons between the markers (kept when "
           "regenerated). Models from `benchmarks/model_zoo.py` (small configs, random "
           f"weights, eval mode) under `torch.no_grad()` on {s['threads']} threads. Times are "
           f"the median per call over {s['rounds']} rounds interleaved between the "
           "contenders, with the range over rounds in parentheses; `x` is the speedup over "
           "eager (> 1 is faster) of the medians, `x best` of the best rounds (the least "
           "disturbed on a loaded machine). First calls: a fresh `to_graph(model)` (conversion cache "
           "cleared, a new kernel cache dir) or `torch.compile(model)` (after "
           "`torch._dynamo.reset()`, inductor's FX graph cache off) and its first call, at "
           "that batch; at the first batch also in fresh processes (`benchmarks/first_call.py`: "
           "imports and the model's construction untimed; cold: empty `TOGRAPH_CACHE_DIR`, "
           "warm: the one the cold process filled), wall seconds with the calling thread's "
           "CPU seconds in parentheses. Checks: two inputs per row, every output tensor against eager "
           f"(max abs diff <= {s['atol']:g}) and the output's types and structure; fallbacks: "
           "FallbackWarnings of to_graph during its first calls.", "",
           suite_report.machine_line(m), ""]
    if results.get("partial"):
        out += [f"**A run cut short: {len(results['models'])} rows of "
                f"{len(s['batches'])} batch(es) x the models asked for.**", ""]
    out += [f"- {line}" for line in summary_lines(results)]
    out += suite_report.closing_sections(
        results, HEADER, "| --- | " + " | ".join("---:" for _ in HEADER[1:]) + " |",
        table[1:], ("to_graph did not convert", "RESULTS DIFFER FROM EAGER",
                    "Why tograph wins or loses"), png_path, md_path,
        "speedup over eager per model")
    return "\n".join(out) + "\n"


def plot(results: dict, path: str) -> bool:
    """Bars of each contender's speedup over eager per model and batch; False without
    matplotlib."""
    plt = report.pyplot()
    if plt is None:
        return False
    rows = results["models"]
    labels = [f"{r['model']}\nbatch {r['batch']}" for r in rows]
    fig, ax = plt.subplots(figsize=(max(8, 0.75 * len(rows) + 3), 5.5))
    for k, (name, color) in enumerate(((TOGRAPH, "tab:blue"), (COMPILE, "tab:orange"))):
        pts = [(i + (k - 0.5) * 0.4, r["results"][name]["ratio"]) for i, r in enumerate(rows)
               if r["results"][name].get("ratio")]
        if pts:
            ax.bar([p[0] for p in pts], [p[1] for p in pts], 0.4, label=name, color=color)
    for i, r in enumerate(rows):
        if r["results"][TOGRAPH]["status"] != "ok":
            ax.annotate(r["results"][TOGRAPH]["status"].upper(), (i, 1), ha="center",
                        va="bottom", color="red", fontsize=8)
    m = results["machine"]
    return suite_report.finish_plot(
        plt, fig, ax, path, labels, 7, "speedup over eager (eager time / time)",
        f"Models, speedup over eager — {m['cpu']}, {m['threads']} threads, "
        f"torch {m['torch']}" + (" (--quick)" if results["settings"]["quick"] else ""))


def write(results: dict, out: str, md_path: str) -> None:
    """Print the table and summary; write models.json, models.png and MODELS.md."""
    suite_report.write(results, out, md_path, "models", text_table, summary_lines, plot,
                       markdown)


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(THREADS)
    return suite_report.main(args, ModelBench, "models", "MODELS.md", HERE, write,
                             "to_graph fell back: ")


if __name__ == "__main__":
    sys.exit(main())
