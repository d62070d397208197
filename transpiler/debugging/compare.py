"""``compare(fn, *args, **kwargs)``: run a function eagerly and converted on the same
inputs and say, per output, whether they agree.

    report = compare(f, torch.randn(4, 8), 3)
    print(report)          # per output: shapes, dtypes, max abs/rel difference, ok
    report.ok              # every output (and gradient) agrees, or both raised alike

Each side gets its own copy of the inputs (in-place updates cannot leak across). When
inputs require grad, both sides are differentiated with the same random cotangents and the
input gradients are compared too. The converted side runs the optimized graph with an
observer, so the report says which way each ``cond`` went and how often each ``while``
looped; if the function fell back to eager, the report says so and why. Tolerances are per
dtype (``TOLERANCES``: rtol, atol); integers, bools and Python values must be equal; NaN
must sit where eager has NaN.
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

TOLERANCES = {
    torch.float16: (1e-3, 1e-5), torch.bfloat16: (1.6e-2, 1e-5),
    torch.float32: (1e-5, 1e-6), torch.float64: (1e-7, 1e-9),
    torch.complex64: (1e-5, 1e-6), torch.complex128: (1e-7, 1e-9),
}


@dataclasses.dataclass
class OutputDiff:
    """One output leaf (``out``, ``out[0]``, ``out['h']``) or input gradient (``grad x``)."""
    path: str
    eager_shape: Optional[tuple] = None
    graph_shape: Optional[tuple] = None
    eager_dtype: Optional[str] = None
    graph_dtype: Optional[str] = None
    max_abs: Optional[float] = None
    max_rel: Optional[float] = None
    ok: bool = True
    note: str = ""


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


def _error_text(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


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
    from ..api import GraphFunction, to_graph
    gf = fn if isinstance(fn, GraphFunction) else to_graph(fn)
    python = gf.python_function
    report = CompareReport(function=getattr(gf, "__qualname__", None) or repr(fn))

    state = _ModuleState(gf._module)
    eager_args, eager_kwargs = _copy_inputs((args, kwargs))
    try:                         # (outputs copied: one may be a buffer a run updates)
        eager_out = pytree.tree_map(lambda v: v.clone() if isinstance(v, torch.Tensor) else v,
                                    python(*eager_args, **eager_kwargs))
    except Exception as e:
        eager_out, report.eager_error = None, _error_text(e)
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
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")       # the report carries the reason
                entry = gf._build(key, graph_args, graph_kwargs, flat, spec)
        if isinstance(entry, _Fallback):
            report.fell_back = True
            report.fallback_reason = entry.reason
            report.fallback_location = (entry.filename, entry.lineno) if entry.filename else None
            run = lambda: python(*graph_args, **graph_kwargs)   # noqa: E731
        else:
            exe = lower(entry.optimized, entry.inputs, entry.outputs, observer=observer)
            run = lambda: exe(*flat)                            # noqa: E731
        graph_out = run()
    except Exception as e:
        graph_out, report.graph_error = None, _error_text(e)
    if entry is not None and not isinstance(entry, _Fallback):
        report.branches = _branches(entry.optimized, observer)

    if report.eager_error is None and report.graph_error is None:
        report.outputs = _diff_tree(eager_out, graph_out, "out", rtol, atol)
        names = _leaf_names(gf._param_names, args, kwargs, len(flat))
        report.outputs += _diff_grads(eager_out, graph_out, eager_in,
                                      (graph_args, graph_kwargs), names, rtol, atol)
        if timing:
            with torch.no_grad():
                report.eager_seconds = _timed(lambda: python(*eager_args, **eager_kwargs))
                report.graph_seconds = _timed(lambda: gf(*graph_args, **graph_kwargs))


# --------------------------------------------------------------------------- differences
def _diff_tree(eager, graph, root: str, rtol, atol) -> List[OutputDiff]:
    e_leaves, e_spec = pytree.tree_flatten_with_path(eager)
    g_leaves, g_spec = pytree.tree_flatten_with_path(graph)
    if e_spec != g_spec:
        def text(spec):
            return " ".join(str(spec).split())
        return [OutputDiff(root, ok=False, note=f"structure differs: eager {text(e_spec)}, "
                                                f"converted {text(g_spec)}")]
    return [_diff_leaf(root + pytree.keystr(path), a, b, rtol, atol)
            for (path, a), (_, b) in zip(e_leaves, g_leaves)]


def _dtype_name(v) -> str:
    return str(v.dtype).replace("torch.", "") if isinstance(v, torch.Tensor) else \
        type(v).__name__


def _diff_leaf(path: str, a, b, rtol, atol) -> OutputDiff:
    diff = OutputDiff(path, eager_dtype=_dtype_name(a), graph_dtype=_dtype_name(b))
    ta, tb = isinstance(a, torch.Tensor), isinstance(b, torch.Tensor)
    if ta:
        diff.eager_shape = tuple(a.shape)
    if tb:
        diff.graph_shape = tuple(b.shape)
    if not ta and not tb:
        diff.ok = type(a) is type(b) and (a == b or (a != a and b != b))
        diff.note = "" if diff.ok else f"eager {a!r}, converted {b!r}"
        return diff
    if ta != tb:          # the contract: a 0-d tensor may stand for a Python number
        t, v = (a, b) if ta else (b, a)
        kind_ok = isinstance(v, (bool, int, float)) and t.dim() == 0 and \
            (t.dtype == torch.bool) == isinstance(v, bool) and \
            t.dtype.is_floating_point == isinstance(v, float)
        if not kind_ok:
            diff.ok, diff.note = False, "a tensor on one side, a Python value on the other"
            return diff
        diff.note = "a 0-d tensor stands for the Python number"
        try:
            a, b = (a, torch.tensor(b, dtype=a.dtype)) if ta else (torch.tensor(a, dtype=b.dtype), b)
        except (RuntimeError, OverflowError):
            diff.ok, diff.note = False, f"the Python number does not fit {_dtype_name(t)}"
            return diff
    if a.shape != b.shape or a.dtype != b.dtype:
        diff.ok = False
        diff.note = "shape differs" if a.shape != b.shape else "dtype differs"
        return diff
    diff.max_abs, diff.max_rel, close = _closeness(a.detach(), b.detach(), rtol, atol)
    diff.ok = close
    if not close:
        diff.note = "; ".join(filter(None, [diff.note, "values differ beyond tolerance"]))
    return diff


def _closeness(a: torch.Tensor, b: torch.Tensor, rtol, atol):
    if a.numel() == 0:
        return 0.0, 0.0, True
    if a.is_floating_point() or a.is_complex():
        default = TOLERANCES.get(a.dtype, (1e-5, 1e-6))
        rtol = default[0] if rtol is None else rtol
        atol = default[1] if atol is None else atol
        a64 = a.to(torch.complex128 if a.is_complex() else torch.float64).cpu()
        b64 = b.to(a64.dtype).cpu()
        same = (a64 == b64) | (torch.isnan(a64) & torch.isnan(b64))
        zero = torch.zeros((), dtype=torch.float64)
        delta = torch.where(same, zero, (a64 - b64).abs())
        delta = torch.where(torch.isnan(delta), zero + float("inf"), delta)  # NaN vs number
        rel = delta / a64.abs().clamp_min(torch.finfo(torch.float64).tiny)
        rel = torch.where(delta == 0, zero, torch.where(torch.isinf(delta), delta, rel))
        close = torch.isclose(a64, b64, rtol=rtol, atol=atol, equal_nan=True).all()
        return float(delta.max()), float(rel.max()), bool(close)
    delta = (a.long() - b.long()).abs() if a.dtype != torch.bool else (a != b).long()
    return float(delta.max()), float(delta.max() > 0), bool(torch.equal(a, b))


def _diff_grads(eager_out, graph_out, eager_in, graph_in, names, rtol, atol):
    """Input gradients of both sides under the same random cotangents."""
    e_inputs = [v for v in pytree.tree_leaves(eager_in) if isinstance(v, torch.Tensor)]
    g_inputs = [v for v in pytree.tree_leaves(graph_in) if isinstance(v, torch.Tensor)]
    leaf_names = [n for n, v in zip(names, pytree.tree_leaves(eager_in))
                  if isinstance(v, torch.Tensor)]
    wanted = [i for i, v in enumerate(e_inputs) if v.requires_grad]
    if not wanted or not torch.is_grad_enabled():
        return []
    e_outs = [v for v in pytree.tree_leaves(eager_out)
              if isinstance(v, torch.Tensor) and v.requires_grad]
    g_outs = [v for v in pytree.tree_leaves(graph_out)
              if isinstance(v, torch.Tensor) and v.requires_grad]
    if len(e_outs) != len(g_outs):
        return [OutputDiff("grad", ok=False, note=f"{len(e_outs)} eager outputs require grad, "
                                                  f"{len(g_outs)} converted ones")]
    if not e_outs:
        return []
    gen = torch.Generator().manual_seed(0)
    cotangents = [torch.randn(o.shape, generator=gen, dtype=torch.float64).to(o.dtype)
                  if o.is_floating_point() else None for o in e_outs]
    pairs = [(o, c) for o, c in zip(e_outs, cotangents) if c is not None]

    def grads(outs, inputs):
        chosen = [o for o, c in zip(outs, cotangents) if c is not None]
        try:
            return torch.autograd.grad(chosen, [inputs[i] for i in wanted],
                                       [c for _, c in pairs], allow_unused=True), None
        except RuntimeError as e:
            return None, _error_text(e)
    e_grads, e_err = grads(e_outs, e_inputs)
    g_grads, g_err = grads(g_outs, g_inputs)
    if e_err or g_err:
        return [OutputDiff("grad", ok=bool(e_err) == bool(g_err),
                           note=f"eager: {e_err or 'ok'}; converted: {g_err or 'ok'}")]
    out = []
    for i, a, b in zip(wanted, e_grads, g_grads):
        if a is None or b is None:
            out.append(OutputDiff(f"grad {leaf_names[i]}", ok=a is None and b is None,
                                  note="no gradient" if a is None and b is None else
                                  f"gradient only on the {'eager' if b is None else 'converted'} side"))
        else:
            out.append(_diff_leaf(f"grad {leaf_names[i]}", a, b, rtol, atol))
    return out


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
