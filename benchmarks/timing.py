"""Timing: median time per call over rounds interleaved between contenders, and
first-call latencies.

Every contender's rounds alternate (eager, tograph, compile, script, eager, ...) and the
order rotates each round, so machine noise (other processes, frequency changes) falls on
all alike. Each contender runs a calibrated number of calls per round so one round takes
about ``round_s``; the time per call of a round is its total over its calls, and the
reported figure is the median over rounds.
"""
from __future__ import annotations

import gc
import statistics
import time
from typing import Callable, Dict, List, Sequence, Tuple

Call = Callable[..., object]


def _run_calls(fn: Call, inputs: Sequence[tuple], n: int, perf=time.perf_counter) -> float:
    k = len(inputs)
    if k == 1:
        args = inputs[0]
        t0 = perf()
        for _ in range(n):
            fn(*args)
        return perf() - t0
    t0 = perf()
    for i in range(n):
        fn(*inputs[i % k])
    return perf() - t0


def calibrate(fn: Call, inputs: Sequence[tuple], round_s: float, max_calls: int = 100_000,
              clock=time.perf_counter) -> int:
    """How many calls (a multiple of the number of input tuples) take about ``round_s``."""
    k = len(inputs)
    n = k
    while True:
        elapsed = _run_calls(fn, inputs, n, clock)
        if elapsed >= round_s / 4 or n >= max_calls:
            break
        n *= 4
    per_call = elapsed / n
    calls = int(round_s / per_call) if per_call > 0 else max_calls
    calls = max(k, min(max_calls, calls))
    return calls - calls % k if calls >= k else k


def interleaved(contenders: Dict[str, Call], inputs: Sequence[tuple], rounds: int,
                round_s: float, warmup: int = 3) -> Dict[str, Dict[str, float]]:
    """Median seconds per call of each contender; each warmed up ``warmup`` times per input."""
    samples, calls = interleaved_samples(contenders, inputs, rounds, round_s, warmup)
    return {name: {"median_s": statistics.median(s), "min_s": min(s), "max_s": max(s),
                   "calls_per_round": calls[name], "rounds": len(s)}
            for name, s in samples.items()}


def interleaved_samples(contenders: Dict[str, Call], inputs: Sequence[tuple], rounds: int,
                        round_s: float, warmup: int = 3, clock=time.perf_counter
                        ) -> Tuple[Dict[str, List[float]], Dict[str, int]]:
    """Seconds per call of each contender in each round (round ``r`` of every contender
    ran side by side, so ``a[r] / b[r]`` is a ratio under one machine state) and the calls
    per round. ``clock``: ``time.thread_time`` counts this thread's CPU time only (other
    processes on a loaded machine do not count; right with one torch thread)."""
    names = list(contenders)
    for name in names:
        for _ in range(warmup):
            for args in inputs:
                contenders[name](*args)
    calls = {name: calibrate(contenders[name], inputs, round_s, clock=clock) for name in names}
    samples: Dict[str, List[float]] = {name: [] for name in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            n = calls[name]
            samples[name].append(_run_calls(contenders[name], inputs, n, clock) / n)
    return samples, calls


def first_call(make: Callable[[], Call], args: tuple) -> Tuple[float, Call, object]:
    """Seconds from making a fresh callable (e.g. ``to_graph(fn)``) to the end of its first
    call; returns (seconds, the callable, the result).

    The garbage earlier measurements left (their graphs, compiled functions) is collected
    first, so a full collection it makes due is not billed to this one (measured: a
    collection 140-290 ms long landing in one warm first call out of three)."""
    gc.collect()
    t0 = time.perf_counter()
    fn = make()
    result = fn(*args)
    return time.perf_counter() - t0, fn, result
