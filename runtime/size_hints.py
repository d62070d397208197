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
``note_operand`` (a cond branch's operand that is a run-time size), ``note_chosen`` (a
cond's result that is one: a size on one path, an int or a size on the other).
"""
from __future__ import annotations

from typing import List, Optional

import torch

from . import probe_shapes
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
    return tuple(probe_shapes.resized(node, shape, meta_shape, scale, grow))


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
    if node.op == "placeholder" and OPERAND in node.attrs:
        return hint(node.attrs[OPERAND], grow, depth + 1, scale)
    if node.op == "get" and node.attrs.get("python_int"):
        return _chosen(node, grow, depth, scale, varying=True)
    if not node.attrs.get("python_int") or node.target is None:
        return None
    return _computed(node, hint, grow, depth, scale)


def _computed(node: Node, value_of, grow: int, depth: int, scale: int) -> Optional[int]:
    """``node``'s op run on ``value_of`` its operands (integer arithmetic on sizes, a
    comparison of them): its value for the example tensors; None if unknown."""
    values = []
    for a in node.args:
        if isinstance(a, Node):
            h = value_of(a, grow, depth + 1, scale)
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


# --------------------------------------------------------------- sizes chosen by a cond
# A size that a tensor ``if`` chooses (``0 if k.numel() == 0 else k.shape[-2]``, as
# transformers' ``DynamicLayer.get_seq_length``) is one when every path gives an int and
# one gives a size (``note_chosen``). Its hint is the chosen path's: the cond's test is
# computed on the hints too (comparisons and ``not``/``and``/``or`` of sizes), so every
# probe of ``shape_inference`` takes the path the example tensors would. A path whose int
# does not follow the run-time dimensions (the 0) gives no hint: an output dimension that
# follows the size would look static where the other path makes it vary.
_TESTS = {"eq", "ne", "lt", "le", "gt", "ge", "logical_not", "logical_and", "logical_or",
          "bitwise_not", "bitwise_and", "bitwise_or", "__and__", "__or__", "__invert__"}


def note_chosen(leaf, paths) -> None:
    """Mark a cond's result ``leaf`` a run-time size when its ``paths``' values are ints
    and sizes, at least one a size."""
    sizes = [v for v in paths if is_size(v)]
    if sizes and all(is_size(v) or type(v) is int for v in paths):
        leaf._node.attrs["python_int"] = True


def _test(node: Node, grow: int, depth: int, scale: int) -> Optional[int]:
    """The value of a size or a test of sizes for the example tensors; None if unknown."""
    if depth > _MAX_DEPTH or not isinstance(node, Node):
        return None
    if node.attrs.get("python_int"):
        return hint(node, grow, depth, scale)
    if node.op == "get":
        is_bool = node.attrs.get("python_number") == "bool"
        return _chosen(node, grow, depth, scale, varying=False) if is_bool else None
    if node.op == "placeholder" and node.attrs.get("captured"):
        for outer, inner in node.graph.captures:
            if inner is node:
                return _test(outer, grow, depth + 1, scale)
        return None
    if node.op not in _TESTS or node.target is None:
        return None
    return _computed(node, _test, grow, depth, scale)


def _chosen(node: Node, grow: int, depth: int, scale: int, varying: bool) -> Optional[int]:
    """The value of a cond's result ``node`` (a ``get``) on the path the cond's test takes
    for the example tensors; with ``varying``, None where that path's value does not change
    when the run-time dimensions grow."""
    cond = node.args[0] if node.args else None
    if depth > _MAX_DEPTH or not isinstance(cond, Node) or cond.op != "cond" or \
            not cond.args or len(cond.subgraphs) != 2:
        return None
    test = _test(cond.args[0], grow, depth + 1, scale)
    outputs = cond.subgraphs[0 if test else 1].outputs if test is not None else ()
    index = node.attrs.get("index")
    if not isinstance(index, int) or not 0 <= index < len(outputs):
        return None
    value = _path_value(outputs[index], cond, grow, depth + 1, scale)
    if varying and value is not None and \
            _path_value(outputs[index], cond, grow + 1, depth + 1, scale) == value:
        return None
    return value


def _path_value(out: Node, cond: Node, grow: int, depth: int, scale: int) -> Optional[int]:
    """The value of a cond path's output ``out``: a constant int, an operand of the cond
    (its value outside), a size or a test of sizes."""
    if not isinstance(out, Node):
        return None
    if out.target is torch.tensor and len(out.args) == 1 and type(out.args[0]) in (int, bool):
        return int(out.args[0])     # a Python int made a tensor where the paths meet
    if out.op == "constant":
        value = out.attrs.get("value")
        if isinstance(value, torch.Tensor) and value.dim() == 0 and \
                not value.is_floating_point() and not value.is_complex():
            return int(value)
        return None
    if out.op == "placeholder" and not out.attrs.get("captured"):
        explicit = [n for n in out.graph.inputs if not n.attrs.get("captured")]
        j = next((i for i, n in enumerate(explicit) if n is out), None)
        if j is None or j >= cond.attrs.get("n_operands", 0):
            return None
        return _test(cond.args[1 + j], grow, depth, scale)
    return _test(out, grow, depth, scale)


# placeholder.attrs[OPERAND]: the outer node of the run-time size a cond branch takes as
# an operand (``if (pad := n - m.shape[-1]) > 0: F.pad(m, (0, pad))``): its hints, at
# every probe (``strict_dims`` doubles the sizes), are the outer size's
OPERAND = "_operand_size"


def note_operand(placeholder: Node, outer) -> None:
    """Mark a branch's operand placeholder that stands for the run-time size ``outer`` as
    one too, hinted as it (the branch reads it as a size, ``pad``/``view``/``arange``)."""
    node = getattr(outer, "_node", None) if isinstance(outer, torch.Tensor) else None
    if node is None or not node.attrs.get("python_int"):
        return
    with torch._C.DisableTorchFunction():      # (hints compute on real numbers)
        known = hint(node) is not None
    if known:
        placeholder.attrs["python_int"] = True
        placeholder.attrs[OPERAND] = node


def is_size(v) -> bool:
    node = getattr(v, "_node", None)
    return isinstance(v, torch.Tensor) and node is not None and \
        node.attrs.get("python_int", False) and v.dim() == 0


def run_time_sizes(args, kwargs) -> List[torch.Tensor]:
    """The symbolic sizes (``python_int``) among the arguments, in lists and tuples too."""
    return find_leaves((args, kwargs), is_size, slices=False)


def with_hints(value, ints: dict):
    """``value`` with each symbolic size replaced by ``ints[id(size)]``."""
    if is_size(value) and id(value) in ints:
        return ints[id(value)]
    if isinstance(value, tuple):
        items = tuple(with_hints(v, ints) for v in value)
        return type(value)(*items) if hasattr(value, "_fields") else items
    if isinstance(value, list):
        return [with_hints(v, ints) for v in value]
    if isinstance(value, dict):
        return {k: with_hints(v, ints) for k, v in value.items()}
    return value
