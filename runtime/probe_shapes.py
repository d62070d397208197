"""The shape each value of a dynamic trace has at each size probe.

``shape_inference.strict_dims`` proves an op's output dims by running it again at the
probes of ``size_probes`` (every run-time input size ``s`` made ``s * scale + grow``). An
input's run-time dims are resized so; a value made from them need not be: tokens
flattened from (B, S, H) to (B*S, H) have 4BS rows when B and S are doubled, not 2BS.
Resizing every run-time dim by the formula probed the reshape back to (2B, 2S, H) on a
tensor of 2BS rows, and refused the dynamic trace (GPT-2's ``Conv1D``, the MoE blocks of
Mixtral and Qwen2-MoE: one trace per sequence length once the batch changed too).

So each op's output shapes at the probes that held are kept on its node (``note``), and
later ops and size hints see the value at those shapes (``resized``): every value is
probed at the size it has when the inputs have theirs. A value with no noted shape (a
graph input, a cond's or loop's result) is resized by the formula, as before.

Requires: ``node.attrs`` written while its graph is traced (one thread per trace).
Provides: ``note(node, per_probe)``, ``resized(node, shape, dims, scale, grow)``,
``key(node, probes)`` (the noted shapes, for shape inference's cache key).
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

from .graph import Node
from .meta import TensorMeta

KEY = "_probe_shapes"   # node.attrs: {(scale, grow): shape, or a tuple of them (multi-output)}
_MAX_DEPTH = 64


def note(node: Node, per_probe: Optional[dict]) -> None:
    """Keep ``per_probe`` ({probe: the op's output meta there}) as ``node``'s shapes."""
    if not per_probe:
        return
    shapes = {p: _shapes_of(m) for p, m in per_probe.items()}
    shapes = {p: s for p, s in shapes.items() if s is not None}
    if shapes:
        node.attrs[KEY] = shapes


def _shapes_of(meta):
    if isinstance(meta, TensorMeta):
        shape = meta.shape
        return tuple(shape) if shape is not None and None not in shape else None
    if isinstance(meta, tuple):
        return tuple(_shapes_of(m) for m in meta)
    return None


def at(node, probe: Tuple[int, int], depth: int = 0) -> Optional[tuple]:
    """``node``'s shape at ``probe`` as noted (through a captured placeholder to its outer
    value, through a ``get`` to its op's output); None if none was."""
    if not isinstance(node, Node) or depth > _MAX_DEPTH:
        return None
    shapes = node.attrs.get(KEY)
    if shapes is not None:
        shape = shapes.get(probe)
        return shape if _is_shape(shape) else None
    if node.op == "placeholder" and node.attrs.get("captured"):
        for outer, inner in node.graph.captures:
            if inner is node:
                return at(outer, probe, depth + 1)
        return None
    if node.op == "get" and node.args and isinstance(node.args[0], Node) and \
            KEY in node.args[0].attrs:
        outputs = node.args[0].attrs[KEY].get(probe)
        index = node.attrs.get("index")
        if isinstance(outputs, tuple) and isinstance(index, int) and \
                0 <= index < len(outputs) and _is_shape(outputs[index]):
            return outputs[index]
    return None


def _is_shape(shape) -> bool:
    return isinstance(shape, tuple) and all(type(d) is int for d in shape)


def resized(node, shape: Sequence[int], dims: Sequence[Optional[int]], scale: int,
            grow: int) -> list:
    """``shape`` (a value's example shape; ``dims`` its meta's, None where run-time) at the
    probe ``(scale, grow)``: the shape noted there when it agrees with the static dims,
    else each run-time dim ``s * scale + grow``."""
    known = at(node, (scale, grow))
    if known is not None and len(known) == len(shape) == len(dims) and \
            all(d is None or d == k for d, k in zip(dims, known)):
        return list(known)
    return [s * scale + grow if d is None else s for s, d in zip(shape, dims)]


def key(node, probes) -> tuple:
    """The shapes noted for ``node`` at ``probes`` (part of an inferred result's key: the
    same example shapes with other probe shapes are another result)."""
    return tuple(at(node, p) for p in probes)
