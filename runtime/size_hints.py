"""Example values for sizes known only at run time, so shape inference can use them.

A size of a run-time dimension (``x.size(1)`` when that dimension is dynamic, ``numel``)
is a graph value: a 0-d int64 node marked ``python_int`` (see ``symbolic``). Passed on as
a size (``x.view(-1, n)``, ``torch.zeros(n)``, ``arange(n)``, ``expand(n, -1)``), a meta
kernel would need its value. Its *hint* is the value it has for the example tensors that
shape inference runs on (the dimension's example size; integer arithmetic on hints), so
the op runs on meta tensors consistently; the output dimensions that follow the size are
then marked dynamic (``None``), and the executor passes the real size at run time.

Requires: nodes with ``_example`` (or ``meta``) on the tensors whose sizes are taken.
Provides: ``hint(node)``, ``run_time_sizes(args, kwargs)``, ``with_hints(value, hints)``,
``note_operand`` (a cond branch's operand that is a run-time size).
"""
from __future__ import annotations

from typing import List, Optional

import torch

from .graph import Node, find_leaves

_MAX_DEPTH = 64


def _example_shape(node: Node, grow: int, scale: int = 1):
    """The example shape of a tensor node, its run-time dimensions ``scale`` times as big
    and then ``grow`` bigger."""
    example = node.attrs.get("_example")
    meta_shape = getattr(node.meta, "shape", None)
    if isinstance(example, torch.Tensor):
        shape = tuple(example.shape)
    elif node.op == "placeholder" and node.attrs.get("captured"):
        for outer, inner in node.graph.captures:
            if inner is node:
                return _example_shape(outer, grow, scale)
        return None
    elif meta_shape is not None:
        shape = tuple(2 if d is None else d for d in meta_shape)
    else:
        return None
    if meta_shape is None or len(meta_shape) != len(shape):
        return shape if not grow and scale == 1 else None
    return tuple(s * scale + grow if d is None else s for s, d in zip(shape, meta_shape))


def hint(node: Node, grow: int = 0, depth: int = 0, scale: int = 1) -> Optional[int]:
    """The value of a ``python_int`` node for the example tensors (their run-time
    dimensions ``scale`` times as big and ``grow`` bigger, as ``shape_inference`` resizes
    them); None if unknown."""
    if depth > _MAX_DEPTH or not isinstance(node, Node):
        return None
    if node.op == "placeholder" and node.attrs.get("captured"):
        for outer, inner in node.graph.captures:
            if inner is node:
                return hint(outer, grow, depth + 1, scale)
        return None
    if node.op in ("dim_size", "numel") and node.args and isinstance(node.args[0], Node):
        shape = _example_shape(node.args[0], grow, scale)
        if shape is None:
            return None
        if node.op == "numel":
            return int(torch.Size(shape).numel())
        dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
        return shape[dim] if isinstance(dim, int) and -len(shape) <= dim < len(shape) else None
    if node.op == "placeholder" and OPERAND_HINTS in node.attrs:
        if scale != 1:
            return None             # (known at two sizes one apart only)
        at_zero, at_one = node.attrs[OPERAND_HINTS]
        return at_zero + grow * (at_one - at_zero)
    if not node.attrs.get("python_int") or node.target is None:
        return None
    values = []
    for a in node.args:             # integer arithmetic on sizes: on the hints
        if isinstance(a, Node):
            h = hint(a, grow, depth + 1, scale)
            if h is None:
                return None
            values.append(torch.tensor(h))
        elif isinstance(a, (int, torch.Tensor)):
            values.append(a)
        else:
            return None
    try:
        with torch._C.DisableTorchFunction():
            out = node.target(*values, **node.kwargs)
        return int(out)
    except Exception:   # noqa: BLE001 - no hint: shape inference fails as before
        return None


# placeholder.attrs[OPERAND_HINTS]: (hint, hint one bigger) of the run-time size a cond
# branch takes as an operand (``if (pad := n - m.shape[-1]) > 0: F.pad(m, (0, pad))``)
OPERAND_HINTS = "operand_hints"


def note_operand(placeholder: Node, outer) -> None:
    """Mark a branch's operand placeholder that stands for the run-time size ``outer`` as
    one too, with its hints (the branch reads it as a size, ``pad``/``view``/``arange``)."""
    node = getattr(outer, "_node", None) if isinstance(outer, torch.Tensor) else None
    if node is None or not node.attrs.get("python_int"):
        return
    with torch._C.DisableTorchFunction():      # (hints compute on real numbers)
        hints = (hint(node), hint(node, grow=1))
    if None not in hints:
        placeholder.attrs["python_int"] = True
        placeholder.attrs[OPERAND_HINTS] = hints


def _is_size(v) -> bool:
    node = getattr(v, "_node", None)
    return isinstance(v, torch.Tensor) and node is not None and \
        node.attrs.get("python_int", False) and v.dim() == 0


def run_time_sizes(args, kwargs) -> List[torch.Tensor]:
    """The symbolic sizes (``python_int``) among the arguments, in lists and tuples too."""
    return find_leaves((args, kwargs), _is_size, slices=False)


def with_hints(value, ints: dict):
    """``value`` with each symbolic size replaced by ``ints[id(size)]``."""
    if _is_size(value) and id(value) in ints:
        return ints[id(value)]
    if isinstance(value, tuple):
        items = tuple(with_hints(v, ints) for v in value)
        return type(value)(*items) if hasattr(value, "_fields") else items
    if isinstance(value, list):
        return [with_hints(v, ints) for v in value]
    if isinstance(value, dict):
        return {k: with_hints(v, ints) for k, v in value.items()}
    return value
