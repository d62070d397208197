"""Every benchmark workload at several sizes and spellings, inference and training (issue
13: a speedup that holds only at the suite's own shape is not a speedup).

    .venv/bin/python -m benchmarks.sweep                        # everything (~10 min)
    .venv/bin/python -m benchmarks.sweep --only rnn,newton --modes infer --rounds 5
    .venv/bin/python -m benchmarks.sweep --threads 2 --out /tmp/sweep

A cell is one workload family (``workloads.py``), one spelling of it (``spellings.py``),
one size and one mode: ``infer`` (a call) or ``train`` (a call, ``out.pow(2).mean()`` and
``torch.autograd.grad`` of the inputs the family trains). Per cell: a fresh ``to_graph``
(one shape per converted function, so each cell measures its static graph), its result
(and gradients) checked against eager's (max difference relative to eager's largest
magnitude), a FallbackWarning noted, then ``timing.interleaved_samples``: rounds
interleaved between eager and tograph, each a calibrated number of calls, timed in this
thread's CPU time (``time.thread_time``) with one torch thread (the default: other
processes on a shared machine do not count), in wall time with more; the ratio of each
round (eager / tograph, > 1 is faster) is taken under one machine state, and the table
gives their median and range. Writes ``<out>/SWEEP.md`` and ``<out>/sweep.json``
(default ``benchmarks/results``) with the load average before and after.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import warnings
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import torch  # noqa: E402

from benchmarks import spellings, timing, workloads  # noqa: E402
from benchmarks.workloads import _randn  # noqa: E402


@dataclass
class Family:
    """A workload at several sizes: ``make(size, spelling)`` -> one input tuple; ``suite``:
    the size label ``workloads.py`` measures; ``grads``: the argument indices trained
    (None: every floating tensor argument)."""
    name: str
    spellings: Dict[str, Callable]
    sizes: Dict[str, tuple]
    make: Callable[[tuple, str], tuple]
    suite: str
    grads: Optional[Tuple[int, ...]] = None


def _rnn(size, spelling):
    steps, batch, hidden = size
    xs = _randn(steps, batch, hidden, seed=24)
    return (list(xs.unbind(0)) if spelling == "list" else xs, torch.zeros(batch, hidden),
            _randn(hidden, hidden, seed=25, scale=hidden ** -0.5),
            _randn(hidden, hidden, seed=26, scale=hidden ** -0.5),
            _randn(hidden, seed=27, scale=0.1))


def _newton(size, spelling):
    n, high = size
    return (torch.rand(n, generator=torch.Generator().manual_seed(14)) * (high - 0.5) + 0.5,)


def _pair(size, spelling):
    return _randn(*size, seed=1), _randn(*size, seed=2)


def _one(size, spelling):
    return (_randn(*size, seed=20),)


def _positive(size, spelling):
    return (_randn(*size, seed=20).abs() + 0.1,)


def _rows(size, spelling):
    rows, cols = size
    return (_randn(rows, cols, seed=21), 1.0 + _randn(cols, seed=22, scale=0.1),
            _randn(cols, seed=23, scale=0.1))


def _mlp(size, spelling):
    return (_randn(size[0], 256, seed=7), *workloads._mlp_inputs(False)[0][1:])


def _conv(size, spelling):
    n, hw = size
    return (_randn(n, 16, hw, hw, seed=4), _randn(32, 16, 3, 3, seed=5, scale=0.1),
            _randn(1, 32, 1, 1, seed=6))


FAMILIES: List[Family] = [
    Family("rnn", {"for xt in xs": workloads.rnn_for, "for t in range": workloads.rnn_cell,
                   "while t < T": spellings.rnn_while, "xs.unbind(0)": spellings.rnn_unbind,
                   "list": workloads.rnn_for},          # (given a list of steps)
           {"50x32x64": (50, 32, 64), "50x1x16": (50, 1, 16), "50x1x64": (50, 1, 64),
            "50x3x100": (50, 3, 100), "50x64x256": (50, 64, 256), "400x32x64": (400, 32, 64)},
           _rnn, suite="50x32x64", grads=(2, 3, 4)),
    Family("newton", {"while tol": workloads.newton_sqrt, "8 steps": spellings.newton_sqrt_fixed},
           {"1000": (1000, 100.0), "3": (3, 100.0), "1001": (1001, 100.0),
            "10K": (10_000, 100.0), "1M": (1_000_000, 100.0)}, _newton, suite="1000"),
    Family("pointwise", {"chain": workloads.pointwise_chain},
           {"1M": (1 << 20,), "3": (3,), "1000": (1000,), "65537": (65537,),
            "1000003": (1_000_003,)}, _pair, suite="1M"),
    Family("gelu", {"tanh formula": spellings.gelu_tanh, "erf": spellings.gelu_erf,
                    "F.gelu": spellings.gelu_functional},
           {"64x512": (64, 512), "1x768": (1, 768), "3x1000": (3, 1000),
            "1024x3072": (1024, 3072)}, _one, suite="64x512"),
    Family("layernorm_softmax", {"by hand": workloads.layernorm_softmax,
                                 "F.layer_norm+softmax": spellings.layernorm_softmax_functional,
                                 "softmax by hand": spellings.softmax_by_hand},
           {"64x512": (64, 512), "1x768": (1, 768), "3x1000": (3, 1000),
            "256x1024": (256, 1024), "2048x1024": (2048, 1024)}, _rows, suite="64x512"),
    Family("loop_100", {"for range(100)": workloads.loop_100},
           {"64": (64,), "1": (1,), "1000": (1000,), "65537": (65537,)}, _one, suite="64"),
    Family("branchy", {"if/else": workloads.branchy},
           {"256": (256,), "1": (1,), "1001": (1001,), "1M": (1 << 20,)}, _positive,
           suite="256"),
    Family("mlp", {"x @ w + b": workloads.mlp},
           {"64": (64,), "1": (1,), "3": (3,), "257": (257,)}, _mlp, suite="64"),
    Family("conv_bias_relu", {"conv2d+bias+relu": workloads.conv_bias_relu},
           {"8x56x56": (8, 56), "1x56x56": (1, 56), "3x15x15": (3, 15)}, _conv,
           suite="8x56x56"),
    Family("matmul_2x2", {"a @ const": workloads.matmul_2x2},
           {"2x2": (2, 2), "1x2": (1, 2), "1000x2": (1000, 2)}, _one, suite="2x2"),
]


# --------------------------------------------------------------------------- one cell
def _trained(args: tuple, grads: Optional[Sequence[int]]) -> Tuple[tuple, List[int]]:
    """``args`` with the trained tensors made leaves that require grad, and their indices."""
    which = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)
             and a.is_floating_point()] if grads is None else list(grads)
    args = tuple(a.detach().requires_grad_() if i in which else a for i, a in enumerate(args))
    return args, which


def _train_step(fn: Callable, which: List[int]) -> Callable:
    def step(*args):
        return torch.autograd.grad(fn(*args).pow(2).mean(), [args[i] for i in which])
    return step


def _error(got, want) -> float:
    """Max |got - want| over every tensor, relative to eager's largest magnitude."""
    got, want = (list(v) if isinstance(v, (tuple, list)) else [v] for v in (got, want))
    return max(float((g - w).abs().max() / w.abs().max().clamp_min(1e-30))
               for g, w in zip(got, want))


def measure(fn: Callable, args: tuple, train: bool, grads, rounds: int,
            round_s: float) -> dict:
    from transpiler import FallbackWarning, to_graph
    converted = to_graph(fn)
    if train:
        args, which = _trained(args, grads)
        eager, graph = _train_step(fn, which), _train_step(converted, which)
    else:
        eager, graph = fn, converted
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        got = graph(*args)
        first_s = time.perf_counter() - t0
    fallback = [str(w.message).splitlines()[0][:160] for w in caught
                if issubclass(w.category, FallbackWarning)]
    err = _error(got, eager(*args))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clock = time.thread_time if torch.get_num_threads() == 1 else time.perf_counter
        samples, calls = timing.interleaved_samples({"eager": eager, "tograph": graph},
                                                    [args], rounds, round_s, clock=clock)
    ratios = sorted(e / t for e, t in zip(samples["eager"], samples["tograph"]))
    return {"eager_us": statistics.median(samples["eager"]) * 1e6,
            "tograph_us": statistics.median(samples["tograph"]) * 1e6,
            "ratio": statistics.median(ratios), "ratio_min": ratios[0], "ratio_max": ratios[-1],
            "error": err, "first_call_s": first_s, "fallback": fallback[:1],
            "calls_per_round": calls}


# --------------------------------------------------------------------------- the table
def _cells(only: Optional[str], modes: Sequence[str], quick: bool):
    wanted = [w.strip() for w in only.split(",")] if only else None
    for fam in FAMILIES:
        if wanted and not any(fam.name == w or fam.name.startswith(w) for w in wanted):
            continue
        sizes = {fam.suite: fam.sizes[fam.suite]} if quick else fam.sizes
        for mode in modes:
            for label, size in sizes.items():
                for spelling, fn in fam.spellings.items():
                    yield fam, mode, label, size, spelling, fn


def _key(cell: dict) -> tuple:
    return cell["family"], cell["spelling"], cell["size"], cell["mode"]


def _row(cell: dict, before: Optional[dict] = None) -> str:
    size = cell["size"] + (" (suite's)" if cell["suite"] else "")
    check = "ok" if cell["error"] < 1e-4 else f"**differs {cell['error']:.0e}**"
    note = f"fallback: {cell['fallback'][0]}" if cell["fallback"] else ""
    ratio = f"{cell['ratio']:.2f}x"
    if cell["ratio"] < 1.0:
        ratio = f"**{ratio}**"
    old = "" if before is None else " - |"
    if before and _key(cell) in before:
        was = before[_key(cell)]
        old = f" {was['ratio']:.2f}x ({was['ratio_min']:.2f}-{was['ratio_max']:.2f}) |"
    return (f"| {cell['family']} | {cell['spelling']} | {size} | {cell['mode']} | "
            f"{cell['eager_us']:,.1f} | {cell['tograph_us']:,.1f} | {ratio} | "
            f"{cell['ratio_min']:.2f}-{cell['ratio_max']:.2f} |{old} {check} | {note} |")


def write(out: str, cells: List[dict], meta: dict, before: Optional[str] = None) -> str:
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "sweep.json"), "w") as f:
        json.dump({"meta": meta, "cells": cells}, f, indent=1)
    slow = [c for c in cells if c["ratio"] < 1.0]
    old, was = None, []
    if before:
        with open(before) as f:
            earlier = json.load(f)
        old = {_key(c): c for c in earlier["cells"]}
        m = earlier["meta"]
        was = [f"`before`: the same cells in an earlier run ({m['date']}, load "
               f"{m['load_before']:.2f} -> {m['load_after']:.2f}; "
               f"{sum(c['ratio'] < 1.0 for c in earlier['cells'])} cells below 1.0x then).", ""]
    lines = [
        "# Sweep: every workload at several sizes and spellings",
        "",
        f"Generated by `.venv/bin/python -m benchmarks.sweep {meta['argv']}`; "
        f"{meta['date']}, torch {meta['torch']}, {meta['threads']} thread(s), "
        f"{meta['rounds']} rounds of ~{meta['round_s']} s per contender interleaved, "
        f"{'CPU time of the thread' if meta['threads'] == 1 else 'wall time'}. "
        f"`x`: eager time / tograph time, the median of the per-round ratios, with their "
        f"range; bold: slower than eager. Load average (1 min) before {meta['load_before']:.2f}"
        f", after {meta['load_after']:.2f} on {os.cpu_count()} cores; took "
        f"{meta['seconds']:.0f} s.",
        "",
        f"{len(cells)} cells, {len(slow)} below 1.0x.",
        "",
        *was,
        "| family | spelling | size | mode | eager µs | tograph µs | x | range |"
        + (" before |" if old is not None else "") + " check | note |",
        "| --- | --- | --- | --- | ---: | ---: | ---: | --- |"
        + (" --- |" if old is not None else "") + " --- | --- |",
        *[_row(c, old) for c in cells],
        "",
    ]
    path = os.path.join(out, "SWEEP.md")
    with open(path, "w") as f:
        f.write("\n".join(lines))
    return path


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", help="families (comma separated prefixes), e.g. rnn,newton")
    p.add_argument("--modes", default="infer,train")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--round-s", type=float, default=0.05)
    p.add_argument("--quick", action="store_true", help="the suite's size only")
    p.add_argument("--out", default=os.path.join(HERE, "results"))
    p.add_argument("--before", help="an earlier run's sweep.json: its ratios side by side")
    args = p.parse_args(argv)
    from runtime.options import options
    options.kernel_build = "sync"
    torch.set_num_threads(args.threads)
    meta = {"argv": " ".join(sys.argv[1:] if argv is None else argv), "torch": torch.__version__,
            "threads": args.threads, "rounds": args.rounds, "round_s": args.round_s,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "load_before": os.getloadavg()[0]}
    t0 = time.perf_counter()
    cells = []
    for fam, mode, label, size, spelling, fn in _cells(args.only, args.modes.split(","),
                                                       args.quick):
        got = measure(fn, fam.make(size, spelling), mode == "train", fam.grads, args.rounds,
                      args.round_s)
        cell = {"family": fam.name, "spelling": spelling, "size": label, "mode": mode,
                "suite": label == fam.suite, **got}
        print(_row(cell), flush=True)
        cells.append(cell)
    meta.update(load_after=os.getloadavg()[0], seconds=time.perf_counter() - t0)
    print(write(args.out, cells, meta, args.before))


if __name__ == "__main__":
    main()
