"""The benchmark suite of issue 4: eager vs to_graph vs torch.compile vs torch.jit.script.

    .venv/bin/python benchmarks/run.py                 # everything (minutes: torch.compile)
    .venv/bin/python benchmarks/run.py --quick         # fewer rounds, smaller sizes
    .venv/bin/python benchmarks/run.py --only branchy,pointwise --no-compile --out /tmp/b

For each workload, in one process: median time per call (rounds interleaved between the
contenders), speedup over eager, a check of every contender's result against eager, and
first-call latencies (to_graph with a cold and a warm kernel cache; torch.compile after
``torch._dynamo.reset()``; jit.script). Prints a table, writes ``<out>/latest.json`` and
``<out>/speedups.png`` and regenerates ``benchmarks/RESULTS.md`` (``<out>/RESULTS.md`` when
``--out`` is given). Exits 1 when a contender's result differs from eager.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import warnings
from typing import Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for path in (HERE, ROOT):
    if path not in sys.path:
        sys.path.insert(0, path)

# torch.compile's first calls are measured with a cold inductor cache of this run's own.
_INDUCTOR_DIR = tempfile.mkdtemp(prefix="tograph-bench-inductor-")
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", _INDUCTOR_DIR)

import torch  # noqa: E402

THREADS = 2
EAGER, TOGRAPH, COMPILE, SCRIPT, SESSION = "eager", "tograph", "torch.compile", "jit.script", \
    "Session.run"
CONTENDERS = [EAGER, TOGRAPH, COMPILE, SCRIPT]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="fewer rounds and smaller sizes (a smoke test, not a measurement)")
    p.add_argument("--only", metavar="NAME[,NAME]",
                   help="run only these workloads (a prefix such as 'pointwise' picks all)")
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    p.add_argument("--force-compile", action="store_true",
                   help="torch.compile even the workloads it is skipped on (too slow to compile)")
    p.add_argument("--out", metavar="DIR", help="where to write latest.json, speedups.png "
                   "and (with --out) RESULTS.md; default benchmarks/results")
    return p.parse_args(argv)


def _short(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    text = lines[0] if lines else ""
    return f"{type(e).__name__}: {text}"[:300]


def _check(refs, outs, workload) -> str:
    """'ok', or 'MISMATCH: ...' for the first input whose result differs from eager."""
    for i, (out, ref) in enumerate(zip(outs, refs)):
        try:
            torch.testing.assert_close(out, ref, rtol=workload.rtol, atol=workload.atol)
        except AssertionError as e:
            return f"MISMATCH (input #{i}): {_short(e)}"
    return "ok"


def compile_caches(on: bool):
    """A context in which inductor's FX graph cache and AOTAutograd's cache are on or off
    (off: a function compiled before in this process really compiles again)."""
    import contextlib
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config
    stack = contextlib.ExitStack()
    if not on:
        stack.enter_context(inductor_config.patch(fx_graph_cache=False))
        stack.enter_context(functorch_config.patch(enable_autograd_cache=False))
    return stack


def compile_cold(fn, args: tuple, caches: bool = False, kwargs: Optional[dict] = None):
    """(seconds, compiled): ``torch._dynamo.reset()``, ``torch.compile(fn)`` and its first
    call on ``args`` (and ``kwargs``). Inductor's FX graph and autograd caches are off unless ``caches``, so a
    function compiled before in this process (the one-off measured apart, with them on)
    really compiles again."""
    from timing import first_call
    torch._dynamo.reset()
    with compile_caches(caches):
        made = []

        def make():
            made.append(torch.compile(fn))
            return lambda *a: made[0](*a, **(kwargs or {}))
        seconds, _, _ = first_call(make, args)
    return seconds, made[0]


class Suite:
    def __init__(self, args):
        from machine import LoadMonitor
        from progress import Progress
        import workloads
        self.args = args
        self.quick = args.quick
        self.workloads = workloads.select(args.only)
        self.rounds = 3 if args.quick else 9
        self.round_s = 0.01 if args.quick else 0.1
        steps_per = 5 if not args.no_compile else 4
        self.progress = Progress(1 + steps_per * len(self.workloads))
        self.monitor = LoadMonitor()
        self.one_off = {}
        self.cache_root = tempfile.mkdtemp(prefix="tograph-bench-cache-")
        self._dirs = 0

    def fresh_cache_dir(self) -> str:
        self._dirs += 1
        path = os.path.join(self.cache_root, f"c{self._dirs}")
        os.makedirs(path)
        return path

    # ------------------------------------------------------------------ first calls
    def tograph_first_calls(self, w, inputs):
        """(cold_s, warm_s, the warm GraphFunction, its cache dir) or raises."""
        from runtime.options import options
        from transpiler import api, to_graph
        from timing import first_call

        def fresh(cache_dir):
            api._CONVERTED.clear()               # a fresh conversion, not the cached one
            with options.override(cache_dir=cache_dir):
                got = first_call(lambda: to_graph(w.fn), inputs[0])
            import runtime.kernels
            runtime.kernels.wait()     # its kernels, built in the background, on disk
            return got

        # The first call of this function in the process pays one-off costs too (torch
        # loading meta kernels for ops first met): measured apart, before the cold one.
        first, _, _ = fresh(self.fresh_cache_dir())
        if "tograph_first_call_s" not in self.one_off:
            self.one_off["tograph_first_call_s"] = first
            self.one_off["tograph_first_workload"] = w.name
        cache_dir = self.fresh_cache_dir()
        cold, _, _ = fresh(cache_dir)
        warm, fn, _ = fresh(cache_dir)
        return first, cold, warm, fn, cache_dir

    def compile_first_call(self, w, inputs):
        if "compile_first_call_s" not in self.one_off:
            seconds, _ = compile_cold(w.fn, inputs[0], caches=True)
            self.one_off["compile_first_call_s"] = seconds
            self.one_off["compile_first_workload"] = w.name
        return compile_cold(w.fn, inputs[0])

    # ------------------------------------------------------------------ one workload
    def run_workload(self, w):
        from timing import interleaved, first_call
        from runtime.options import options
        from transpiler import FallbackWarning
        args = self.args
        inputs = w.make_inputs(self.quick)
        refs = [w.fn(*i) for i in inputs]
        row = {"name": w.name, "family": w.family, "size": w.size(self.quick),
               "target": w.target,
               "target_text": w.target_text, "elements": w.elements(self.quick),
               "results": {EAGER: {"status": "ok", "check": "ok"}}}
        callables = {EAGER: w.fn}
        res = row["results"]
        cache_dir = None

        # -- to_graph
        self.progress.show(f"{w.name}: to_graph first call")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                first, cold, warm, fn, cache_dir = self.tograph_first_calls(w, inputs)
                res[TOGRAPH] = {"status": "ok", "first_call_s": cold, "first_call_warm_s": warm,
                                "first_call_in_process_s": first}
                callables[TOGRAPH] = fn
            except Exception as e:     # noqa: BLE001 -- the suite reports, it does not stop
                res[TOGRAPH] = {"status": "error", "note": f"to_graph raised {_short(e)}"}
        fallbacks = [str(c.message) for c in caught if issubclass(c.category, FallbackWarning)]
        if fallbacks and TOGRAPH in callables:
            res[TOGRAPH]["status"] = "fallback"
            res[TOGRAPH]["note"] = "FallbackWarning: " + fallbacks[0]
        others = [f"{c.category.__name__}: {c.message}" for c in caught
                  if not issubclass(c.category, FallbackWarning)]
        if others and TOGRAPH in res:
            res[TOGRAPH]["warnings"] = others[:3]
        self.progress.step(f"{w.name}: " + ("jit.script first call" if args.no_compile
                                             else "torch.compile first call"))

        # -- torch.compile
        if args.no_compile:
            res[COMPILE] = {"status": "skipped", "note": "--no-compile"}
        elif w.skip_compile and not args.force_compile:
            res[COMPILE] = {"status": "n/a", "note": "torch.compile " + w.skip_compile}
        else:
            try:
                seconds, fn = self.compile_first_call(w, inputs)
                res[COMPILE] = {"status": "ok", "first_call_s": seconds}
                callables[COMPILE] = fn
            except Exception as e:     # noqa: BLE001
                res[COMPILE] = {"status": "n/a", "note": _short(e)}
            self.progress.step(f"{w.name}: jit.script first call")

        # -- torch.jit.script
        try:
            seconds, fn, _ = first_call(lambda: torch.jit.script(w.fn), inputs[0])
            res[SCRIPT] = {"status": "ok", "first_call_s": seconds}
            callables[SCRIPT] = fn
        except Exception as e:         # noqa: BLE001
            res[SCRIPT] = {"status": "n/a", "note": _short(e)}
        self.progress.step(f"{w.name}: checking results against eager")

        # -- the seed's TF1-style Session.run, for the 2x2 matmul
        session_row = None
        if w.name == "matmul_2x2":
            from workloads import session_matmul
            session_row = {"name": "matmul_2x2 Session.run", "size": row["size"],
                           "target": None, "target_text": "", "elements": 0,
                           "results": {EAGER: {"status": "ok", "check": "ok"}}}
            try:
                seconds, fn, _ = first_call(session_matmul, inputs[0])
                session_row["results"][SESSION] = {"status": "ok", "first_call_s": seconds}
                callables[SESSION] = fn
            except Exception as e:     # noqa: BLE001
                session_row["results"][SESSION] = {"status": "error", "note": _short(e)}

        # -- correctness
        raised = set()
        with options.override(**({"cache_dir": cache_dir} if cache_dir else {})):
            for name, fn in callables.items():
                if name == EAGER:
                    continue
                target = session_row["results"] if name == SESSION else res
                try:
                    outs = [fn(*i) for i in inputs]
                    target[name]["check"] = _check(refs, outs, w)
                except Exception as e:  # noqa: BLE001
                    target[name]["check"] = f"MISMATCH: raised {_short(e)}"
                    raised.add(name)
                if target[name]["check"] != "ok":
                    self.progress.note(f"!!! {w.name} / {name}: {target[name]['check']}")
            self.progress.step(f"{w.name}: timing")

            # -- timing, interleaved between the contenders
            ok = {n: f for n, f in callables.items() if n not in raised}
            try:
                times = interleaved(ok, inputs, self.rounds, self.round_s)
            except Exception as e:     # noqa: BLE001
                self.progress.note(f"!!! {w.name}: timing failed: {_short(e)}")
                times = {}
        eager_s = times.get(EAGER, {}).get("median_s")
        for name, t in times.items():
            target = session_row["results"] if name == SESSION else res
            target[name]["median_us"] = t["median_s"] * 1e6
            target[name]["spread_us"] = [t["min_s"] * 1e6, t["max_s"] * 1e6]
            target[name]["calls_per_round"] = t["calls_per_round"]
            target[name]["ratio"] = eager_s / t["median_s"] if eager_s and t["median_s"] else None
        if session_row:
            session_row["results"][EAGER].update(res[EAGER])
        self.progress.step(f"{w.name}: done")
        return [row] + ([session_row] if session_row else [])

    # ------------------------------------------------------------------ everything
    def run(self):
        from machine import bandwidth, describe
        print(f"torch {torch.__version__}: torch.set_num_threads({THREADS}) -> "
              f"{torch.get_num_threads()} threads", flush=True)
        self.monitor.start()
        self.progress.show("memory bandwidth")
        bw = bandwidth(n=(1 << 22) if self.quick else (1 << 24), repeats=5 if self.quick else 20)
        self.progress.step("workloads")
        rows = []
        for w in self.workloads:
            rows.extend(self.run_workload(w))
        load = self.monitor.stop()
        self.progress.finish()
        for row in rows:
            if row["elements"]:
                bound_s = bw["bytes_per_element"] * row["elements"] / (bw["add_gbs"] * 1e9)
                row["bandwidth_bound_us"] = bound_s * 1e6
                for r in row["results"].values():
                    if r.get("median_us"):
                        r["bandwidth_fraction"] = bound_s * 1e6 / r["median_us"]
        return {
            "machine": describe(),
            "load": load,
            "bandwidth": bw,
            "settings": {"quick": self.quick, "rounds": self.rounds, "round_s": self.round_s,
                         "threads": torch.get_num_threads(),
                         "compile": not self.args.no_compile,
                         "inductor_cache_dir": os.environ.get("TORCHINDUCTOR_CACHE_DIR")},
            "one_off": self.one_off,
            "workloads": rows,
        }


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(THREADS)
    import report
    suite = Suite(args)
    results = suite.run()
    report.annotate(results)
    print()
    print(report.text_table(results))
    print()
    print(report.text_summary(results))
    out = args.out or os.path.join(HERE, "results")
    os.makedirs(out, exist_ok=True)
    json_path = os.path.join(out, "latest.json")
    with open(json_path, "w") as f:
        json.dump(results, f, indent=1, sort_keys=False)
    png_path = os.path.join(out, "speedups.png")
    plotted = report.plot(results, png_path)
    md_path = os.path.join(out, "RESULTS.md") if args.out else os.path.join(HERE, "RESULTS.md")
    with open(md_path, "w") as f:
        f.write(report.markdown(results, png_path if plotted else None, md_path))
    print(f"\nwrote {json_path}")
    print(f"wrote {png_path}" if plotted else
          "no plot: matplotlib is not installed (pip install -e .[bench])")
    print(f"wrote {md_path}")
    return report.report_mismatches(results["mismatches"])


if __name__ == "__main__":
    sys.exit(main())
