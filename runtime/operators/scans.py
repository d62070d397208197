"""torch's scan operators called while tracing, as the loop they stand for.

``torch._higher_order_ops.associative_scan.associative_scan`` and ``...scan.scan`` are
higher-order operators written for torch.compile: outside it they wrap the combine
function in ``torch.vmap`` or trace it with ``make_fx`` on meta tensors, which a graph
being traced cannot follow (the call fell back, "a meta tensor made outside the trace").
Libraries call them where ``torch.compiler.is_compiling()`` is True, which a trace answers
for library code (``calls.call``): transformers' Mamba and Jamba scan their state with
``associative_scan`` there, and with a Python loop over the sequence in eager.

While tracing, both run as that loop over the scanned dim, the combine function called on
one slice at a time (the scanned dim removed, as ``vmap`` presents it), the slices stacked
back: ``associative_scan`` is the inclusive scan ``out[0] = x[0]``, ``out[i] =
combine_fn(out[i-1], x[i])`` (the recurrence eager code writes, so its rounding is eager
Mamba's; torch's own tree of combines may round differently in the last bits), ``scan``
carries ``(carry, y) = combine_fn(carry, x[i])``. A length the graph only knows when it
runs, an empty scanned dim, ``pointwise`` mode off CUDA or arguments torch would refuse go
to torch's own operator, which raises or fails the trace as before.
"""
from __future__ import annotations

import functools
from typing import Callable, List

import torch
from torch.utils import _pytree as pytree

NOT_SCAN = object()


@functools.lru_cache(maxsize=None)
def _operators() -> dict:
    """torch's scan operators -> the loop each stands for (looked up on first use)."""
    found = {}
    try:
        from torch._higher_order_ops.associative_scan import associative_scan
        found[associative_scan] = _associative_scan
    except ImportError:                 # pragma: no cover - torch without the operator
        pass
    try:
        from torch._higher_order_ops.scan import scan
        found[scan] = _scan
    except ImportError:                 # pragma: no cover
        pass
    return found


def scan_call(f, args, kwargs):
    """The loop ``f`` (a torch scan operator) stands for, traced; or ``NOT_SCAN``."""
    try:
        run = _operators().get(f)
    except TypeError:                   # an unhashable callable
        return NOT_SCAN
    return NOT_SCAN if run is None else run(*args, **kwargs)


def _moved(leaves, dim: int, reverse: bool):
    """The leaves with ``dim`` first (flipped when ``reverse``) and their common length,
    or None where the loop cannot stand in for the operator."""
    if not leaves or any(not isinstance(x, torch.Tensor) or x.is_sparse for x in leaves):
        return None
    ndim = leaves[0].ndim
    if not isinstance(dim, int) or isinstance(dim, bool) or not -ndim <= dim < max(ndim, 1) \
            or any(x.ndim != ndim for x in leaves):
        return None
    dim %= ndim
    moved = [torch.movedim(x, dim, 0) for x in leaves]
    if reverse:
        moved = [x.flip(0) for x in moved]
    n = moved[0].shape[0]
    if type(n) is not int or n == 0 or any(x.shape[0] != n for x in moved):
        return None
    return moved, dim, n


def _back(columns: List[List[torch.Tensor]], dim: int, reverse: bool) -> List[torch.Tensor]:
    out = [torch.stack(c, 0) for c in columns]
    if reverse:
        out = [x.flip(0) for x in out]
    return [torch.movedim(x, 0, dim) if dim < x.ndim else x for x in out]


def _aliased(outs, ins) -> bool:
    """Whether the combine function returned one tensor twice, or an input as it is:
    torch's operators refuse that ("Higher order ops do not support aliasing")."""
    seen = {id(t) for t in ins}
    for t in outs:
        if id(t) in seen:
            return True
        seen.add(id(t))
    return False


def _flat(tree, spec, what: str) -> list:
    leaves, got = pytree.tree_flatten(tree)
    if got != spec:
        raise ValueError(f"{what}: the combine function returned {got}, expected {spec}")
    return leaves


def _associative_scan(combine_fn: Callable, xs, dim: int, reverse: bool = False,
                      combine_mode: str = "pointwise"):
    from torch._higher_order_ops.associative_scan import associative_scan
    leaves, spec = pytree.tree_flatten(xs)
    moved = _moved(leaves, dim, reverse) if callable(combine_fn) and \
        type(reverse) is bool and combine_mode == "generic" else None
    if moved is None:
        return associative_scan(combine_fn, xs, dim, reverse=reverse,
                                combine_mode=combine_mode)
    moved, dim, n = moved
    acc = [x[0] for x in moved]
    columns = [[a] for a in acc]
    for i in range(1, n):
        right = [x[i] for x in moved]
        new = _flat(combine_fn(pytree.tree_unflatten(acc, spec),
                               pytree.tree_unflatten(right, spec)),
                    spec, "associative_scan")
        if _aliased(new, acc + right):       # (torch's operator raises eager's error)
            return associative_scan(combine_fn, xs, dim, reverse=reverse,
                                    combine_mode=combine_mode)
        acc = new
        for column, a in zip(columns, acc):
            column.append(a)
    return pytree.tree_unflatten(_back(columns, dim, reverse), spec)


def _scan(combine_fn: Callable, init, xs, *, dim: int = 0, reverse: bool = False):
    from torch._higher_order_ops.scan import scan
    leaves, spec = pytree.tree_flatten(xs)
    carry, carry_spec = pytree.tree_flatten(init)
    moved = _moved(leaves, dim, reverse) if callable(combine_fn) and carry and \
        all(isinstance(c, torch.Tensor) for c in carry) and type(reverse) is bool else None
    if moved is None:
        return scan(combine_fn, init, xs, dim=dim, reverse=reverse)
    moved, dim, n = moved
    columns = None
    y_spec = None
    for i in range(n):
        right = [x[i] for x in moved]
        result = combine_fn(pytree.tree_unflatten(carry, carry_spec),
                            pytree.tree_unflatten(right, spec))
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            raise RuntimeError("scan: combine_fn must return a tuple (next_carry, y)")
        new = _flat(result[0], carry_spec, "scan")
        ys, got = pytree.tree_flatten(result[1])
        if _aliased(new + ys, carry + right):    # (torch's operator raises eager's error)
            return scan(combine_fn, init, xs, dim=dim, reverse=reverse)
        carry = new
        if columns is None:
            columns, y_spec = [[y] for y in ys], got
        elif got != y_spec:
            raise ValueError(f"scan: the combine function returned {got}, expected {y_spec}")
        else:
            for column, y in zip(columns, ys):
                column.append(y)
    return (pytree.tree_unflatten(carry, carry_spec),
            pytree.tree_unflatten(_back(columns, dim, reverse), y_spec))
