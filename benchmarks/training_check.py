"""Checks of a training run against eager's (issue 15): N steps from the same weights on the
same batches, and the bytes autograd saves for backward in one forward.

Relative difference of two tensors: ``max |a - b| / max |b|`` (the largest error against the
tensor's own scale, so a gradient entry that is 0 in one run and 1e-12 in the other does not
count as 100% off); of a run: the largest over every step's loss and every parameter's
gradient, and the final parameters and buffers (BatchNorm running statistics).
"""
from __future__ import annotations

import contextlib
import gc
import time
import warnings
from typing import Callable, Dict, List, Optional

import torch

from benchmarks.training_tasks import Task, training_step


def rel_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """``max |a - b| / max |b|``; inf for a shape/dtype mismatch or a NaN; 0 if both empty."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return float("inf")
    if not b.numel():
        return 0.0
    a, b = a.detach(), b.detach()
    if not b.is_floating_point():                    # counters (num_batches_tracked), masks
        return 0.0 if torch.equal(a, b) else float("inf")
    err = (a - b).abs().max().item()                 # float32 is exact enough: < 1e-6
    scale = b.abs().max().item()
    if err != err or scale != scale:
        return float("inf")
    return err / scale if scale else (0.0 if err == 0 else float("inf"))


class Run:
    """One contender's training of a fresh copy of the task's model: the model called through
    ``wrap(model)`` (identity: eager), each step ``step_fn(called, opt, loss_fn, inputs,
    target)`` (default ``training_step``; a converted whole step replaces it), inside
    ``context()`` (e.g. torch.compile's caches off). ``first_step_s``: seconds from ``wrap``
    to the end of the first step (a fresh contender's first-step latency); ``fallbacks``: the
    FallbackWarnings its steps raised; ``error``: what stopped it, if anything."""

    def __init__(self, task: Task, wrap: Callable = None, step_fn: Optional[Callable] = None,
                 context: Callable = contextlib.nullcontext):
        self.task = task
        self.model, self.opt = task.fresh()
        self.wrap = wrap or (lambda m: m)
        self.step_fn = step_fn or training_step
        self.context = context
        self.called = None
        self.first_step_s: Optional[float] = None
        self.fallbacks: List[str] = []
        self.error: Optional[BaseException] = None

    def step(self, inputs: tuple, target: torch.Tensor) -> torch.Tensor:
        from transpiler import FallbackWarning
        with self.context(), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", FallbackWarning)
            if self.called is None:
                gc.collect()                 # earlier garbage is not billed to this step
                t0 = time.perf_counter()
                self.called = self.wrap(self.model)
                loss = self.step_fn(self.called, self.opt, self.task.loss, inputs, target)
                self.first_step_s = time.perf_counter() - t0
            else:
                loss = self.step_fn(self.called, self.opt, self.task.loss, inputs, target)
        for w in caught:
            if issubclass(w.category, FallbackWarning):
                self.fallbacks.append(str(w.message))
            else:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        return loss

    def bare_step(self, inputs: tuple, target: torch.Tensor) -> torch.Tensor:
        """A step after the first without ``context`` or catching warnings (for timing)."""
        return self.step_fn(self.called, self.opt, self.task.loss, inputs, target)

    def grads(self) -> list:
        return [p.grad for p in self.model.parameters()]

    def state(self) -> list:
        return list(self.model.state_dict().values())


class Diff:
    """The running largest relative difference of one run's losses, gradients and final
    state from a reference run's, and where it was."""

    def __init__(self):
        self.worst = {"losses": 0.0, "grads": 0.0, "state": 0.0}
        self.where: Dict[str, str] = {}
        self.steps = 0

    def add(self, kind: str, d: float, where: str) -> None:
        if d > self.worst[kind]:
            self.worst[kind], self.where[kind] = d, where

    def step(self, i: int, loss, want_loss, grads: list, want_grads: list) -> None:
        self.steps += 1
        self.add("losses", rel_diff(loss, want_loss), f"step {i}")
        if len(grads) != len(want_grads):
            self.add("grads", float("inf"), f"step {i}: {len(grads)} parameters")
        for k, (a, b) in enumerate(zip(grads, want_grads)):
            d = 0.0 if a is None and b is None else \
                float("inf") if a is None or b is None else rel_diff(a, b)
            self.add("grads", d, f"step {i} parameter #{k}")

    def final(self, state: list, want_state: list) -> None:
        if len(state) != len(want_state):
            self.add("state", float("inf"), f"{len(state)} state_dict entries")
        for k, (a, b) in enumerate(zip(state, want_state)):
            self.add("state", rel_diff(a, b), f"state_dict entry #{k}")

    def result(self) -> Dict[str, object]:
        return {"max_rel_diff": max(self.worst.values()), "worst": dict(self.worst),
                "where": dict(self.where), "steps": self.steps}


def train_side_by_side(task: Task, runs: Dict[str, Run], steps: int,
                       reference: str = "eager") -> Dict[str, Dict[str, object]]:
    """Train every run ``steps`` steps in lockstep on the task's batches 0..steps-1 and
    compare each with the reference run after every step (nothing is kept per step, so a
    big model's 20 steps of gradients need no memory). Returns each other run's
    ``Diff.result()``; a run that raises gets ``error`` set and stops there."""
    diffs = {name: Diff() for name in runs if name != reference}
    for i in range(steps):
        inputs, target = task.batch(i)
        losses = {}
        for name, run in runs.items():
            if run.error is None:
                try:
                    losses[name] = run.step(inputs, target)
                except Exception as e:  # noqa: BLE001 -- reported by the caller
                    if name == reference:
                        raise
                    run.error = e
        want = runs[reference]
        for name, diff in diffs.items():
            if name in losses:
                diff.step(i, losses[name], losses[reference], runs[name].grads(), want.grads())
    for name, diff in diffs.items():
        if runs[name].error is None:
            diff.final(runs[name].state(), want.state())
    return {name: diff.result() for name, diff in diffs.items()}


def saved_bytes(forward: Callable[[], torch.Tensor],
                exclude: List[torch.Tensor] = ()) -> Dict[str, int]:
    """Bytes of the unique storages autograd saves for backward while ``forward()`` runs
    (``torch.autograd.graph.saved_tensors_hooks``): ``total``, and ``activations`` without
    the storages of ``exclude`` (the parameters and inputs, which exist anyway)."""
    seen: Dict[int, int] = {}

    def pack(t):
        try:
            storage = t.untyped_storage()
            seen.setdefault(storage.data_ptr(), storage.nbytes())
        except (RuntimeError, NotImplementedError):   # a tensor without storage
            pass
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = forward()
    del out
    kept = {t.untyped_storage().data_ptr() for t in exclude}
    return {"total": sum(seen.values()),
            "activations": sum(n for p, n in seen.items() if p not in kept),
            "tensors": len(seen)}
