"""Differences between an eager and a converted result, leaf by leaf: what ``compare``
reports per output and per input gradient.

``diff_tree`` pairs the leaves of two results (a structure mismatch is one difference);
``diff_leaf`` compares one pair: tensors by shape, dtype and values within the dtype's
tolerance (``TOLERANCES``; NaN must sit where eager has NaN), Python values exactly, a 0-d
tensor against the Python number it stands for; ``diff_grads`` differentiates both sides
with the same random cotangents and compares the input gradients.
"""
from __future__ import annotations

import dataclasses
from typing import List, Optional

import torch
import torch.utils._pytree as pytree

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


def diff_tree(eager, graph, root: str, rtol, atol) -> List[OutputDiff]:
    e_leaves, e_spec = pytree.tree_flatten_with_path(eager)
    g_leaves, g_spec = pytree.tree_flatten_with_path(graph)
    if e_spec != g_spec:
        def text(spec):
            return " ".join(str(spec).split())
        return [OutputDiff(root, ok=False, note=f"structure differs: eager {text(e_spec)}, "
                                                f"converted {text(g_spec)}")]
    return [diff_leaf(root + pytree.keystr(path), a, b, rtol, atol)
            for (path, a), (_, b) in zip(e_leaves, g_leaves)]


def error_text(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def _dtype_name(v) -> str:
    return str(v.dtype).replace("torch.", "") if isinstance(v, torch.Tensor) else \
        type(v).__name__


def diff_leaf(path: str, a, b, rtol, atol) -> OutputDiff:
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


def diff_grads(eager_out, graph_out, eager_in, graph_in, names, rtol, atol):
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
            return None, error_text(e)
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
            out.append(diff_leaf(f"grad {leaf_names[i]}", a, b, rtol, atol))
    return out
