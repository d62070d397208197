"""RNN training steps over a grid of sizes (issue 15): eager against ``to_graph``.

    .venv/bin/python -m benchmarks.rnn_grid                         # b1/32/64 x h16..256
    .venv/bin/python -m benchmarks.rnn_grid --sizes 64x128,32x256 --threads 2 --rounds 9
    .venv/bin/python -m benchmarks.rnn_grid --baseline             # also without ProductLoop

One step of ``workloads.rnn_for`` (``for xt in xs: h = tanh(xt @ w_ih + h @ w_hh + b)``,
``--steps`` 50): forward, a mean-square loss, backward (the weights' gradients). Per
size a fresh ``to_graph`` (a second shape makes a converted function's graph
shape-generic, which compiles no loop kernels until ``hot_shapes`` promotes the size:
a fresh one measures the static graph from the first steps), gradients checked
against eager's (max relative difference), then rounds interleaved between the
contenders (order rotating), each round a number of steps calibrated to ~``--round-s``,
timed in CPU time of this thread (``time.thread_time``: other processes on a loaded
machine do not count) with ``torch.set_num_threads(--threads)``; printed: the median ms
per step, eager/contender ratios (median and range over rounds) and the load average.
``--baseline``: a third contender, ``to_graph`` with the product loop off (the per-step
path such loops took before ``kernels/loop_product.py``).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import torch  # noqa: E402

from benchmarks import workloads  # noqa: E402

GRID = [(b, h) for b in (1, 32, 64) for h in (16, 64, 128, 256)]


def _inputs(steps, b, h, seed=0):
    g = torch.Generator().manual_seed(seed)
    xs, h0 = torch.randn(steps, b, h, generator=g), torch.zeros(b, h)
    weights = [(torch.randn(h, h, generator=g) * h ** -0.5).requires_grad_(),
               (torch.randn(h, h, generator=g) * h ** -0.5).requires_grad_(),
               (torch.randn(h, generator=g) * 0.1).requires_grad_()]
    return xs, h0, weights


def _step(fn, xs, h0, weights):
    for w in weights:
        w.grad = None
    fn(xs, h0, *weights).pow(2).mean().backward()
    return [w.grad for w in weights]


def _baseline():
    """``to_graph(rnn_for)`` whose loops never become a ``ProductLoop``."""
    from runtime.passes import counted_loops
    from transpiler import to_graph
    converted = to_graph(workloads.rnn_for)
    real = counted_loops._step_product

    def run(*args):
        counted_loops._step_product = lambda *a: None
        try:
            return converted(*args)
        finally:
            counted_loops._step_product = real
    return run


def measure(b, h, steps, rounds, round_s, baseline=False):
    from transpiler import to_graph
    xs, h0, weights = _inputs(steps, b, h)
    contenders = {"eager": workloads.rnn_for, "tograph": to_graph(workloads.rnn_for)}
    if baseline:
        contenders["before"] = _baseline()
    want = _step(workloads.rnn_for, xs, h0, weights)
    err = {}
    for name, fn in contenders.items():
        got = _step(fn, xs, h0, weights)        # (the first call: conversion, kernels)
        err[name] = max(float((a - w).abs().max() / w.abs().max().clamp_min(1e-30))
                        for a, w in zip(got, want))
    t0 = time.thread_time()
    _step(workloads.rnn_for, xs, h0, weights)
    n = max(1, int(round_s / max(time.thread_time() - t0, 1e-4)))
    times = {name: [] for name in contenders}
    names = list(contenders)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            fn = contenders[name]
            t0 = time.thread_time()
            for _ in range(n):
                _step(fn, xs, h0, weights)
            times[name].append((time.thread_time() - t0) / n)
    return times, err


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default=None, help="BxH[,BxH] (default: the grid)")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--round-s", type=float, default=0.1)
    p.add_argument("--baseline", action="store_true")
    args = p.parse_args(argv)
    from runtime.options import options
    options.kernel_build = "sync"
    torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore")
    sizes = GRID if args.sizes is None else \
        [tuple(int(v) for v in s.split("x")) for s in args.sizes.split(",")]
    print(f"threads {args.threads}, {args.steps} steps, load {os.getloadavg()[0]:.1f}")
    for b, h in sizes:
        times, err = measure(b, h, args.steps, args.rounds, args.round_s, args.baseline)
        eager = times["eager"]
        row = f"b{b:<3} h{h:<4} eager {statistics.median(eager) * 1e3:8.3f} ms"
        for name in list(times)[1:]:
            ratios = sorted(e / t for e, t in zip(eager, times[name]))
            row += (f" | {name} {statistics.median(times[name]) * 1e3:8.3f} ms "
                    f"{statistics.median(ratios):5.2f}x ({ratios[0]:.2f}-{ratios[-1]:.2f}) "
                    f"err {err[name]:.0e}")
        print(row, flush=True)
    print(f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
