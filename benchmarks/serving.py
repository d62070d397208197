"""The serving benchmark of issue 14: a converted function under a server's load.

    .venv/bin/python -m benchmarks.serving            # full run (~2 min)
    .venv/bin/python -m benchmarks.serving --quick    # smoke test (~20 s), not a measurement

Two workloads, under ``torch.no_grad()``: an MLP with a tensor condition (a ``cond`` node)
and a small transformer block (``nn.TransformerEncoderLayer``, width 64, 4 heads), batch 8.
  threads    calls per second of one shared converted function from 1, 2, 4, 8 Python
             threads at once (torch at 1 intra-op thread), against eager the same way; rounds
             interleaved between the two, median and range over rounds
  new sizes  a warm function called at 30 batch sizes it has not seen: the time of each
             such call against a steady call, and the traces it took (``f.cache_info()``
             where the function has one, else counted); with ``dynamic=False`` too (a
             trace per size) where ``to_graph`` takes ``dynamic``
  memory     RSS and ``linecache`` entries after creating, tracing once and dropping N
             converted functions (1,000; --quick 40), per function
  first call first calls of a fresh function from 1, 2, 4, 8 threads at once, three batch
             sizes among them (warm kernel cache): the latency each thread saw, the
             traces, the fallbacks
Every result is checked against eager. Writes ``<out>/serving.json`` and
``benchmarks/SERVING.md`` (``<out>/SERVING.md`` with ``--out``); exits 1 when a result
differs from eager or a call raised.
"""
from __future__ import annotations

import argparse
import gc
import inspect
import json
import linecache
import os
import statistics
import sys
import threading
import time
import warnings
from typing import Callable, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for _path in (HERE, ROOT):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import report  # noqa: E402
import torch  # noqa: E402

THREAD_COUNTS = (1, 2, 4, 8)
BATCH = 8


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="short rounds, fewer sizes and "
                   "functions: a smoke test, not a measurement")
    p.add_argument("--out", metavar="DIR", help="where to write serving.json and (with "
                   "--out) SERVING.md; default benchmarks/results")
    args = p.parse_args(argv)
    args.rounds = 2 if args.quick else 5
    args.round_s = 0.05 if args.quick else 0.4
    args.sizes = 4 if args.quick else 30
    args.functions = 40 if args.quick else 1000
    args.threads = (1, 2) if args.quick else THREAD_COUNTS
    return args


# --------------------------------------------------------------------------- workloads
def mlp(x, w1, b1, w2, b2):
    h = torch.nn.functional.gelu(x @ w1 + b1)
    if h.mean() > 0.3:                  # a tensor condition: a cond node in the graph
        h = h * 0.5
    return h @ w2 + b2


def _mlp_weights(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(256, 512, generator=g) / 16, torch.randn(512, generator=g) / 16,
            torch.randn(512, 256, generator=g) / 22, torch.randn(256, generator=g) / 16)


def _block():
    torch.manual_seed(0)
    return torch.nn.TransformerEncoderLayer(64, 4, dim_feedforward=128, dropout=0.0,
                                            batch_first=True).eval()


class Workload:
    """``fn`` (what ``to_graph`` converts) and ``inputs(batch, seed)`` -> its arguments."""

    def __init__(self, name: str, fn, inputs: Callable[[int, int], tuple]):
        self.name, self.fn, self.inputs = name, fn, inputs


def workloads() -> List[Workload]:
    weights = _mlp_weights()
    block = _block()
    return [Workload("mlp", mlp, lambda b, s: (_randn(s, b, 256),) + weights),
            Workload("transformer_block", block, lambda b, s: (_randn(s, b, 16, 64),))]


def _randn(seed: int, *shape) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _same(got, want) -> bool:
    return isinstance(got, torch.Tensor) and got.shape == want.shape and \
        got.dtype == want.dtype and torch.allclose(got, want, rtol=1e-4, atol=1e-5)


def _traces(f) -> Callable[[], int]:
    """A counter of ``f``'s traces: ``f.cache_info()``'s when it has one, else a count of
    its ``_trace_graph`` calls."""
    gf = getattr(f, "graph_function", f)             # to_graph(module) wraps one
    info = getattr(gf, "cache_info", None)
    if callable(info):
        def from_info() -> int:
            got = info()
            return got["traces"] if isinstance(got, dict) else got.traces
        try:
            from_info()
            return from_info
        except (AttributeError, KeyError, TypeError):
            pass
    count = [0]
    trace = gf._trace_graph

    def counted(*args, **kwargs):
        count[0] += 1
        return trace(*args, **kwargs)
    gf._trace_graph = counted
    return lambda: count[0]


def _to_graph(fn, **options):
    from transpiler import to_graph
    if "dynamic" in options and "dynamic" not in inspect.signature(to_graph).parameters:
        return None
    return to_graph(fn, **options)


def _fallbacks(caught) -> List[str]:
    from transpiler import FallbackWarning
    return [str(w.message) for w in caught if issubclass(w.category, FallbackWarning)]


# --------------------------------------------------------------------------- threads
def _calls_in(fn, args, threads: int, seconds: float) -> float:
    """Calls per second of ``fn(*args)`` made from ``threads`` threads for ``seconds``."""
    counts = [0] * threads
    start = threading.Barrier(threads + 1)
    stop = [False]

    def worker(i):
        start.wait()
        n = 0
        while not stop[0]:
            fn(*args)
            n += 1
        counts[i] = n
    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    time.sleep(seconds)
    stop[0] = True
    for t in pool:
        t.join()
    return sum(counts) / (time.perf_counter() - t0)


def bench_threads(w: Workload, args, problems: List[str]) -> List[dict]:
    inputs = w.inputs(BATCH, 1)
    want = w.fn(*inputs)
    converted = _to_graph(w.fn)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = converted(*inputs)
    if not _same(got, want):
        problems.append(f"threads / {w.name}: the converted result differs from eager")
    problems += [f"threads / {w.name}: {m}" for m in _fallbacks(caught)]
    rows = []
    for threads in args.threads:
        samples: Dict[str, List[float]] = {"eager": [], "tograph": []}
        for r in range(args.rounds):              # interleaved, the order alternating
            for name in (("eager", "tograph") if r % 2 == 0 else ("tograph", "eager")):
                fn = w.fn if name == "eager" else converted
                samples[name].append(_calls_in(fn, inputs, threads, args.round_s))
        row = {"workload": w.name, "threads": threads}
        for name, s in samples.items():
            row[name] = {"median": statistics.median(s), "min": min(s), "max": max(s)}
        row["ratio"] = row["tograph"]["median"] / row["eager"]["median"]
        rows.append(row)
    return rows


# --------------------------------------------------------------------------- new sizes
def _steady_s(fn, inputs, calls: int = 30) -> float:
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn(*inputs)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_sizes(w: Workload, args, problems: List[str]) -> List[dict]:
    sizes = [s for s in range(1, 200) if s != BATCH][::3][:args.sizes]
    rows = []
    for label, options in (("automatic", {}), ("dynamic=False", {"dynamic": False})):
        f = _to_graph(w.fn, **options)
        if f is None:
            continue
        traces = _traces(f)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            base = w.inputs(BATCH, 1)
            f(*base)
            steady = _steady_s(f, base)
            before = traces()
            seconds = []
            for k, size in enumerate(sizes):
                inputs = w.inputs(size, 100 + k)
                t0 = time.perf_counter()
                got = f(*inputs)
                seconds.append(time.perf_counter() - t0)
                if not _same(got, w.fn(*inputs)):
                    problems.append(f"new sizes / {w.name} / {label}: batch {size} differs "
                                    f"from eager")
            traced = traces() - before
            again = _steady_s(f, w.inputs(sizes[-1], 100 + len(sizes) - 1))
        problems += [f"new sizes / {w.name} / {label}: {m}" for m in _fallbacks(caught)]
        info = getattr(getattr(f, "graph_function", f), "cache_info", None)
        rows.append({"cache_info": _plain(info()) if callable(info) else None,
                     "workload": w.name, "mode": label, "sizes": len(sizes),
                     "steady_s": steady, "steady_after_s": again,
                     "new_size_median_s": statistics.median(seconds),
                     "new_size_max_s": max(seconds), "new_sizes_total_s": sum(seconds),
                     "traces": traced, "per_size_over_steady": statistics.median(seconds) / steady})
    return rows


def _plain(info):
    """``f.cache_info()`` as a JSON-able dict."""
    fields = info._asdict() if hasattr(info, "_asdict") else dict(vars(info))
    def plain(v):
        if isinstance(v, dict):
            return {str(k): plain(x) for k, x in v.items()}
        if isinstance(v, (tuple, list)):
            return [plain(x) for x in v]
        return v if isinstance(v, (int, float, str, type(None))) else repr(v)
    return plain(fields)


# --------------------------------------------------------------------------- memory
def _rss_mb() -> float:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20
    except (OSError, ValueError):
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _fresh(k: int):
    """A new function object each time (as a server making functions at run time would):
    the same code and graph. (A closure constant used in tensor ops would be baked into the
    fused kernel: one C compile per distinct value, which is not what this measures.)"""
    def scaled(x):
        if x.sum() > 0:
            return x * 2.0 + 1.0
        return x - 1.0
    return scaled


def _drop_functions(n: int) -> None:
    from transpiler import to_graph
    x = torch.ones(4)
    for k in range(n):
        f = to_graph(_fresh(k))
        f(x)
        del f


def bench_memory(args, problems: List[str]) -> dict:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _drop_functions(20)                 # the one-off costs of the first conversions
        gc.collect()
        rss0, lines0 = _rss_mb(), len(linecache.cache)
        half = args.functions // 2
        _drop_functions(half)
        gc.collect()
        rss_half = _rss_mb()
        _drop_functions(args.functions - half)
        gc.collect()
        rss1, lines1 = _rss_mb(), len(linecache.cache)
        from transpiler.api import GraphFunction
        alive = sum(1 for o in gc.get_objects() if isinstance(o, GraphFunction))
    problems += [f"memory: {m}" for m in _fallbacks(caught)][:3]
    return {"functions": args.functions, "rss_before_mb": rss0, "rss_half_mb": rss_half,
            "rss_after_mb": rss1, "rss_growth_mb": rss1 - rss0,
            "kb_per_function": (rss1 - rss0) * 1024 / args.functions,
            "second_half_growth_mb": rss1 - rss_half,
            "linecache_growth": lines1 - lines0, "graph_functions_alive": alive}


# --------------------------------------------------------------------------- first calls
def bench_first_calls(w: Workload, args, problems: List[str]) -> List[dict]:
    from transpiler import to_graph
    batches = (BATCH, BATCH * 2, BATCH * 4)
    rows = []
    for threads in args.threads:
        _forget_conversions()                      # each row converts afresh
        f = to_graph(w.fn)
        traces = _traces(f)
        inputs = [w.inputs(batches[i % len(batches)], 200 + i) for i in range(threads)]
        wants = [w.fn(*a) for a in inputs]
        latency: List[Optional[float]] = [None] * threads
        errors: List[str] = []
        start = threading.Barrier(threads)

        def worker(i):
            start.wait()
            t0 = time.perf_counter()
            try:
                got = f(*inputs[i])
            except Exception as e:  # noqa: BLE001 -- reported, not raised
                errors.append(f"{type(e).__name__}: {e}")
                return
            latency[i] = time.perf_counter() - t0
            if not _same(got, wants[i]):
                errors.append(f"thread {i} (batch {inputs[i][0].shape[0]}) differs from eager")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
            t0 = time.perf_counter()
            for t in pool:
                t.start()
            for t in pool:
                t.join()
            wall = time.perf_counter() - t0
        fallbacks = _fallbacks(caught)
        problems += [f"first calls / {w.name} / {threads} threads: {e}"
                     for e in errors + fallbacks]
        done = [s for s in latency if s is not None]
        rows.append({"workload": w.name, "threads": threads,
                     "batches": sorted({a[0].shape[0] for a in inputs}),
                     "wall_s": wall, "median_s": statistics.median(done) if done else None,
                     "max_s": max(done) if done else None, "traces": traces(),
                     "fallbacks": len(fallbacks), "errors": len(errors)})
    return rows


def _forget_conversions() -> None:
    """Empty the conversion cache (what models.py does for a fresh first call)."""
    from transpiler import api
    cache = getattr(api, "_CONVERTED", None)
    if hasattr(cache, "clear"):
        cache.clear()


# --------------------------------------------------------------------------- run
def run(args) -> dict:
    from machine import LoadMonitor, describe
    from progress import Progress
    monitor = LoadMonitor().start()
    ws = workloads()
    progress = Progress(2 + 3 * len(ws))
    problems: List[str] = []
    results = {"threads": [], "sizes": [], "first_calls": []}
    threads_before = torch.get_num_threads()
    with torch.no_grad():                 # (the kernel cache as configured: a server's)
        torch.set_num_threads(1)
        try:
            for w in ws:
                progress.show(f"{w.name}: threads x calls per second")
                results["threads"] += bench_threads(w, args, problems)
                progress.step(f"{w.name}: new sizes")
                results["sizes"] += bench_sizes(w, args, problems)
                progress.step(f"{w.name}: first calls from threads")
                results["first_calls"] += bench_first_calls(w, args, problems)
                progress.step("next")
            progress.show(f"memory: {args.functions} functions made, traced, dropped")
            results["memory"] = bench_memory(args, problems)
        finally:
            torch.set_num_threads(threads_before)
    progress.finish()
    machine = describe()
    machine["threads"] = 1
    results.update(machine=machine, load=monitor.stop(), problems=problems,
                   settings={"quick": args.quick, "rounds": args.rounds,
                             "round_s": args.round_s, "batch": BATCH,
                             "thread_counts": list(args.threads), "no_grad": True,
                             "torch_threads": 1})
    return results


# --------------------------------------------------------------------------- report
def _ms(s: Optional[float]) -> str:
    return "-" if s is None else f"{s * 1e3:.2f}"


def tables(results: dict) -> List[str]:
    """The Markdown tables (a list of lines)."""
    out = ["## Threads x calls per second", "",
           "| workload | threads | eager calls/s | tograph calls/s | tograph / eager |",
           "| --- | ---: | ---: | ---: | ---: |"]
    for r in results["threads"]:
        cells = [f"{r[n]['median']:,.0f} ({r[n]['min']:,.0f}-{r[n]['max']:,.0f})"
                 for n in ("eager", "tograph")]
        out.append(f"| {r['workload']} | {r['threads']} | {cells[0]} | {cells[1]} | "
                   f"{report.fmt_ratio(r['ratio'])} |")
    out += ["", "## New batch sizes", "",
            "| workload | mode | new sizes | traces | steady call ms | new-size call ms "
            "(median / max) | new size / steady | all new sizes s |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in results["sizes"]:
        out.append(f"| {r['workload']} | {r['mode']} | {r['sizes']} | {r['traces']} | "
                   f"{_ms(r['steady_s'])} | {_ms(r['new_size_median_s'])} / "
                   f"{_ms(r['new_size_max_s'])} | {r['per_size_over_steady']:.1f}x | "
                   f"{r['new_sizes_total_s']:.2f} |")
    m = results["memory"]
    out += ["", "## Memory after dropping converted functions", "",
            "| functions | RSS before MB | RSS after MB | growth MB | KB per function | "
            "second half's growth MB | linecache entries left | GraphFunctions alive |",
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
            f"| {m['functions']} | {m['rss_before_mb']:.1f} | {m['rss_after_mb']:.1f} | "
            f"{m['rss_growth_mb']:+.1f} | {m['kb_per_function']:.1f} | "
            f"{m['second_half_growth_mb']:+.1f} | {m['linecache_growth']:+d} | "
            f"{m['graph_functions_alive']} |"]
    out += ["", "## First calls from threads at once", "",
            "| workload | threads | batches | latency ms (median / max) | wall ms | traces "
            "| fallbacks | errors |",
            "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in results["first_calls"]:
        out.append(f"| {r['workload']} | {r['threads']} | "
                   f"{', '.join(map(str, r['batches']))} | {_ms(r['median_s'])} / "
                   f"{_ms(r['max_s'])} | {_ms(r['wall_s'])} | {r['traces']} | "
                   f"{r['fallbacks']} | {r['errors']} |")
    return out


def markdown(results: dict) -> str:
    m, s = results["machine"], results["settings"]
    out = ["# Serving benchmark", "",
           "Generated by `.venv/bin/python -m benchmarks.serving` "
           + ("(`--quick`: a smoke test, not a measurement) " if s["quick"] else "")
           + "- do not edit by hand. An MLP with a tensor condition (256 -> 512 -> 256) and "
           "`nn.TransformerEncoderLayer(64, 4, 128)` at batch "
           f"{s['batch']} (sequence 16), under `torch.no_grad()`, torch at 1 intra-op "
           f"thread. Calls per second: {s['rounds']} rounds of {s['round_s']} s per thread "
           "count, interleaved between eager and tograph; median (range). New sizes: a warm "
           "function at batch sizes it has not seen; traces from `f.cache_info()` (else "
           "counted). First calls: a fresh function's first calls from N threads at once "
           "(batch 8, 16, 32 among them; warm kernel cache).", "",
           f"Machine: {m['cpu']}, {m['cores']} cores, torch {m['torch']}, Python "
           f"{m['python']}, {m['date']}.", ""]
    out += [f"- {line}" for line in report._load_lines(results)]
    out += [""] + tables(results)
    if results["problems"]:
        out += ["", "## PROBLEMS (results differ, calls raised or fell back)", ""]
        out += [f"- **{p}**" for p in results["problems"]]
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    args = parse_args(argv)
    out = args.out or os.path.join(HERE, "results")
    os.makedirs(out, exist_ok=True)
    md_path = os.path.join(out if args.out else HERE, "SERVING.md")
    results = run(args)
    json_path = os.path.join(out, "serving.json")
    with open(json_path, "w") as f:
        json.dump(results, f, indent=1)
    text = markdown(results)
    with open(md_path, "w") as f:
        f.write(text)
    print("\n".join(tables(results)))
    print(f"\nwrote {json_path}, {md_path}")
    return report.report_mismatches(results["problems"])


if __name__ == "__main__":
    sys.exit(main())
