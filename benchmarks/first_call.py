"""A model's first to_graph call in a fresh process: cold caches, then warm ones.

    from first_call import cold_and_warm
    cold_and_warm("gpt2", batch=1)    # {"cold": {...}, "warm": {...}}

    .venv/bin/python benchmarks/first_call.py gpt2,t5 [--threads 2] [--repeat 3]

What "first call" is here: a new Python process imports torch, the model's library
(transformers / torchvision) and tograph, builds the model and its inputs (not timed), then
times ``to_graph(model)`` and its first call under ``torch.no_grad()`` to the result
(timed: conversion of every function the call reaches, tracing, passes, lowering, kernel
builds as the kernel build mode does them, the run). Cold: an empty ``TOGRAPH_CACHE_DIR``
(no converted code, no kernels on disk, nothing in memory). Warm: a second process on the
directory the cold one filled (a cold process exits after its background kernel build
finishes, so the warm one finds the kernels). Reported per process: wall seconds, the
calling thread's CPU seconds (``thread_time``: what the caller waits for on a quiet
machine, besides the compiler when builds are synchronous), the process's CPU (torch's
threads too), the compiler's CPU (children), and FallbackWarnings. On a loaded machine
wall time stretches by the load; the CPU times do not.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _child(name: str, batch: int, threads: int) -> dict:
    import resource
    import time
    import warnings
    sys.path[:0] = [ROOT, HERE]
    import torch
    torch.set_num_threads(threads)
    from benchmarks.model_zoo import MODELS
    from transpiler import FallbackWarning, to_graph
    model, make_inputs = MODELS[name]()
    args, kwargs = make_inputs(batch, 1)

    def children() -> float:
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        return r.ru_utime + r.ru_stime

    dynamo = "torch._dynamo" in sys.modules
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        w0, t0, p0, c0 = time.perf_counter(), time.thread_time(), time.process_time(), \
            children()
        to_graph(model)(*args, **kwargs)
        w1, t1, p1, c1 = time.perf_counter(), time.thread_time(), time.process_time(), \
            children()
    return {"wall_s": w1 - w0, "thread_cpu_s": t1 - t0, "process_cpu_s": p1 - p0,
            "compiler_cpu_s": c1 - c0, "dynamo_imported_before": dynamo,
            "fallbacks": [str(w.message) for w in caught
                          if issubclass(w.category, FallbackWarning)]}


def _process(name: str, batch: int, threads: int, cache_dir: str) -> dict:
    env = dict(os.environ, TOGRAPH_CACHE_DIR=cache_dir)
    done = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", name,
                           "--batch", str(batch), "--threads", str(threads)],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return {"error": (done.stderr.strip().splitlines() or ["no output"])[-1]}
    return json.loads(lines[-1])


def cold_and_warm(name: str, batch: int = 1, threads: int = 2) -> dict:
    """The first call of ``name`` in a process with empty caches, then in one with the
    caches the first filled."""
    cache_dir = tempfile.mkdtemp(prefix="tograph-first-call-")
    try:
        cold = _process(name, batch, threads, cache_dir)
        warm = _process(name, batch, threads, cache_dir)
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)
    return {"cold": cold, "warm": warm}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("models", nargs="?", default=None, help="comma-separated (default: all)")
    p.add_argument("--child", metavar="MODEL", help=argparse.SUPPRESS)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=1, help="cold+warm pairs per model")
    a = p.parse_args(argv)
    if a.child:
        print(json.dumps(_child(a.child, a.batch, a.threads)))
        return
    sys.path[:0] = [ROOT]
    from benchmarks.model_zoo import MODELS
    names = a.models.split(",") if a.models else list(MODELS)
    print(f"{'model':20s} {'cold wall':>9s} {'cold thread':>11s} {'cc cpu':>6s} "
          f"{'warm wall':>9s} {'warm thread':>11s}  (medians of {a.repeat}; seconds)")
    for name in names:
        runs = [cold_and_warm(name, a.batch, a.threads) for _ in range(a.repeat)]
        bad = [r[k]["error"] for r in runs for k in ("cold", "warm") if "error" in r[k]]
        if bad:
            print(f"{name:20s} error: {bad[0]}")
            continue

        def med(state, field):
            return statistics.median(r[state][field] for r in runs)
        fallbacks = sum(len(r["cold"]["fallbacks"]) for r in runs)
        print(f"{name:20s} {med('cold', 'wall_s'):9.2f} {med('cold', 'thread_cpu_s'):11.2f} "
              f"{med('cold', 'compiler_cpu_s'):6.2f} {med('warm', 'wall_s'):9.2f} "
              f"{med('warm', 'thread_cpu_s'):11.2f}"
              + (f"  ({fallbacks} fallbacks)" if fallbacks else ""), flush=True)


if __name__ == "__main__":
    main()
