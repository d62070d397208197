"""``compare(fn, *args, **kwargs)``: run a function eagerly and converted on the same
inputs and say, per output, whether they agree.

    report = compare(f, torch.randn(4, 8), 3)
    print(report)          # per output: shapes, dtypes, max abs/rel difference, ok
    report.ok              # every output (and gradient) agrees, or both raised alike

Each side gets its own copy of the inputs (in-place updates cannot leak across). When
inputs require grad, both sides are differentiated with the same random cotangents and the
input gradients are compared too. The converted side runs the optimized graph with an
observer, so the report says which way each ``cond`` went and how often each ``while``
looped; if the function fell back to eager, the report says so and why. How two results
are compared (tolerances per dtype, NaN, Python numbers) is ``differences.py``.
"""
from __future__ import annotations

import dataclasses
import linecache
import os
import statistics
import time
import warnings
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.utils._pytree as pytree

from runtime.executor import lower

from .differences import TOLERANCES, OutputDiff, diff_grads, diff_tree, error_text

__all__ = ["BranchRecord", "CompareReport", "OutputDiff", "TOLERANCES", "compare"]


@dataclasses.dataclass
class BranchRecord:
    """A ``cond`` (``taken``: {"then": n, "else": m}) or ``while`` node (``taken``:
    {"iterations": [k, ...]}, one count per time the loop ran) of the converted call."""
    kind: str
    node: str
    location: Optional[Tuple[str, int]]
    source: str
    taken: Dict[str, Any]

    def summary(self) -> str:
        if self.kind == "cond":
            then, other = self.taken["then"], self.taken["else"]
            if then + other == 0:
                return "not run"
            return ", ".join(f"{label} x{n}" if then + other > 1 else label
                             for label, n in (("then", then), ("else", other)) if n)
        runs = self.taken["iterations"]
        if not runs:
            return "not run"
        text = ", ".join(str(k) for k in runs[:8]) + (", ..." if len(runs) > 8 else "")
        return f"{text} iteration{'s' if runs != [1] else ''}"


@dataclasses.dataclass
class CompareReport:
    function: str
    outputs: List[OutputDiff] = dataclasses.field(default_factory=list)
    branches: List[BranchRecord] = dataclasses.field(default_factory=list)
    fell_back: bool = False
    fallback_reason: Optional[str] = None
    fallback_location: Optional[Tuple[str, int]] = None
    eager_error: Optional[str] = None
    graph_error: Optional[str] = None
    eager_seconds: Optional[float] = None
    graph_seconds: Optional[float] = None

    @property
    def ok(self) -> bool:
        if self.eager_error or self.graph_error:
            return (self.eager_error or "").split(":")[0] == (self.graph_error or "").split(":")[0]
        return all(o.ok for o in self.outputs)

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out["ok"] = self.ok
        return out

    def __str__(self) -> str:
        return format_report(self)


# --------------------------------------------------------------------------- running
class _Observer:
    """Counts which way each ``cond`` went and how often each ``while`` looped."""

    def __init__(self):
        self.conds: Dict[str, Dict[str, int]] = {}
        self.loops: Dict[str, List[int]] = {}

    def cond(self, name: str, pred) -> bool:
        taken = bool(pred)
        counts = self.conds.setdefault(name, {"then": 0, "else": 0})
        counts["then" if taken else "else"] += 1
        return taken

    def loop(self, name: str) -> None:
        self.loops.setdefault(name, []).append(0)

    def step(self, name: str) -> None:
        self.loops[name][-1] += 1


def _copy_inputs(value):
    def copy(v):
        if isinstance(v, torch.Tensor):
            c = v.detach().clone()
            return c.requires_grad_() if v.requires_grad else c
        return v
    return pytree.tree_map(copy, value)


def _timed(call, budget: float = 0.2, most: int = 200) -> float:
    """Median seconds per call (after one warm-up call) within about ``budget`` seconds."""
    call()
    times: List[float] = []
    start = time.perf_counter()
    while len(times) < 3 or (time.perf_counter() - start < budget and len(times) < most):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def compare(fn, *args, rtol: Optional[float] = None, atol: Optional[float] = None,
            timing: bool = False, **kwargs) -> CompareReport:
    """Run ``fn`` eagerly and converted on copies of the same inputs; the report says,
    per output (and per input gradient when inputs require grad), whether they agree.
    ``rtol``/``atol`` override the per-dtype tolerances; ``timing`` adds the median time
    per call of each side."""
    from ..api import graph_function
    gf = graph_function(fn)
    python = gf.python_function
    report = CompareReport(function=getattr(gf, "__qualname__", None) or repr(fn))

    state = _ModuleState(gf._module)
    eager_args, eager_kwargs = _copy_inputs((args, kwargs))
    try:                         # (outputs copied: one may be a buffer a run updates)
        eager_out = pytree.tree_map(lambda v: v.clone() if isinstance(v, torch.Tensor) else v,
                                    python(*eager_args, **eager_kwargs))
    except Exception as e:
        eager_out, report.eager_error = None, error_text(e)
    state.restore()              # each run starts from the module as it was; so does
    try:                         # the user after compare
        _converted_run(report, gf, args, kwargs, (eager_args, eager_kwargs), eager_out,
                       rtol, atol, timing)
    finally:
        state.restore()
    return report


class _ModuleState:
    """A module's parameters and buffers, to put back after a run updated them in place
    (running statistics, caches)."""

    def __init__(self, module):
        self.saved = [] if module is None else [
            (t, t.detach().clone()) for t in module.state_dict(keep_vars=True).values()
            if isinstance(t, torch.Tensor)]

    def restore(self) -> None:
        with torch.no_grad():
            for tensor, value in self.saved:
                if not torch.equal(tensor, value):
                    tensor.copy_(value)


def _converted_run(report, gf, args, kwargs, eager_in, eager_out, rtol, atol, timing):
    """The converted half of ``compare``: fills the report's outputs, branches, timings."""
    from ..api import _Fallback, _leaf_names
    python = gf.python_function
    eager_args, eager_kwargs = eager_in

    graph_args, graph_kwargs = _copy_inputs((args, kwargs))
    key, flat, spec = gf._signature(graph_args, graph_kwargs)
    observer = _Observer()
    entry = None
    try:
        entry = gf._entries.get(key)
        if entry is None or (not isinstance(entry, _Fallback) and not entry.holds()):
            held = gf._held
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")       # the report carries the reason
                entry = gf._build(key, graph_args, graph_kwargs, flat, spec)
            if gf._held is not held:   # the trace held a list/dict argument whole, as a call
                key, flat, spec = gf._signature(graph_args, graph_kwargs)
        if isinstance(entry, _Fallback):
            report.fell_back = True
            report.fallback_reason = entry.reason
            report.fallback_location = (entry.filename, entry.lineno) if entry.filename else None
            run = lambda: python(*graph_args, **graph_kwargs)   # noqa: E731
        else:
            exe = lower(entry.optimized, entry.inputs, entry.outputs, observer=observer)
            run = lambda: exe(*flat)                            # noqa: E731
        graph_out = run()
        if getattr(entry, "writes", False):     # to argument objects: as a call does
            from runtime.argument_objects import write_back
            graph_out, writes = graph_out
            write_back(flat.found, writes)
    except Exception as e:
        graph_out, report.graph_error = None, error_text(e)
    if entry is not None and not isinstance(entry, _Fallback):
        report.branches = _branches(entry.optimized, observer)

    if report.eager_error is None and report.graph_error is None:
        report.outputs = diff_tree(eager_out, graph_out, "out", rtol, atol)
        names = _leaf_names(gf._param_names, args, kwargs, len(flat))
        report.outputs += diff_grads(eager_out, graph_out, eager_in,
                                      (graph_args, graph_kwargs), names, rtol, atol)
        if timing:               # (a fallback's warning again per call: the report has it)
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                report.eager_seconds = _timed(lambda: python(*eager_args, **eager_kwargs))
                report.graph_seconds = _timed(lambda: gf(*graph_args, **graph_kwargs))


# --------------------------------------------------------------------------- control flow
def _branches(graph, observer: _Observer) -> List[BranchRecord]:
    records = []
    for node in graph.walk():
        if node.op not in ("cond", "while"):
            continue
        if node.op == "cond":
            taken = dict(observer.conds.get(node.name, {"then": 0, "else": 0}))
        else:
            taken = {"iterations": list(observer.loops.get(node.name, []))}
        source = linecache.getline(*node.location).strip() if node.location else ""
        records.append(BranchRecord(node.op, node.name, node.location, source, taken))
    return records


# --------------------------------------------------------------------------- text
def _fmt(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.3g}"


def _micros(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f} us" if seconds < 1e-2 else f"{seconds * 1e3:,.2f} ms"


def format_report(report: CompareReport) -> str:
    verdict = "agree" if report.ok else "DIFFER"
    lines = [f"compare {report.function}: eager and converted {verdict}"]
    if report.fell_back:
        where = f"{report.fallback_location[0]}:{report.fallback_location[1]}: " \
            if report.fallback_location else ""
        lines.append(f"  fell back to eager: {where}{report.fallback_reason}")
    if report.eager_error or report.graph_error:
        lines.append(f"  eager raised:     {report.eager_error or '-'}")
        lines.append(f"  converted raised: {report.graph_error or '-'}")
    rows = [("output", "shape", "dtype", "max abs", "max rel", "")]
    def shape_text(shape):
        return "scalar" if shape is None else str(tuple(shape))
    for o in report.outputs:
        shape = shape_text(o.eager_shape) if o.eager_shape == o.graph_shape else \
            f"{shape_text(o.eager_shape)} / {shape_text(o.graph_shape)}"
        dtype = o.eager_dtype if o.eager_dtype == o.graph_dtype else \
            f"{o.eager_dtype} / {o.graph_dtype}"
        status = "ok" if o.ok else "MISMATCH"
        rows.append((o.path, shape, dtype or "", _fmt(o.max_abs),
                     _fmt(o.max_rel), status + (f" ({o.note})" if o.note else "")))
    if len(rows) > 1:
        widths = [max(len(r[i]) for r in rows) for i in range(5)]
        for r in rows:
            lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[5])
    if report.branches:
        lines.append("  control flow on this call:")
        for b in report.branches:
            where = f"{os.path.basename(b.location[0])}:{b.location[1]}" if b.location else "?"
            lines.append(f"    {where:<14} {b.kind:<5} %{b.node:<10} {b.summary():<24} "
                         f"{b.source}")
    if report.eager_seconds is not None and report.graph_seconds is not None:
        ratio = report.eager_seconds / report.graph_seconds if report.graph_seconds else 0.0
        lines.append(f"  time per call: eager {_micros(report.eager_seconds)}, converted "
                     f"{_micros(report.graph_seconds)} ({ratio:.2f}x)")
    return "\n".join(lines)
