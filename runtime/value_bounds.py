"""Bounds of the integer values a traced tensor holds, where the graph proves them, so a
slice at traced offsets gets a static size: nanoGPT's ``get_batch``,

    ix = torch.randint(len(data) - block_size, (batch_size,))
    x = torch.stack([data[i:i + block_size] for i in ix])

``i`` is an item of ``randint``'s result, so ``0 <= i <= len(data) - block_size - 1`` and
``data[i:i + block_size]`` always has ``block_size`` items; without the bound each row's
size is known only when the graph runs and the stack of rows is refused.

``bounds(node)``: ``(low, high)`` (inclusive) for ``randint`` (its ``low``/``high``
arguments), an item of a bounded tensor (``getitem``/``select`` of it), a bounded value
plus or minus a Python int, and a branch or loop body's placeholder for a bounded outer
value (followed through the subgraph's captures); None for anything else.
``static_width(data_size, start, stop)``: ``stop - start`` where both are one value plus
Python ints (``i + 1`` and ``i + 1 + block_size``: ``c = block_size``), ``c >= 0``, and
``0 <= start`` and ``start + c <= data_size`` on every run.
"""
from __future__ import annotations

from typing import Optional, Tuple

_DEPTH = 12


def _node(value):
    return getattr(value, "_node", None)


def bounds(node, depth: int = 0) -> Optional[Tuple[int, int]]:
    if node is None or depth > _DEPTH:
        return None
    op, args = node.op, node.args
    if op == "randint" and not node.kwargs.get("low") and "high" not in node.kwargs:
        ints = [a for a in args if type(a) is int]
        if len(args) >= 2 and type(args[0]) is int and type(args[1]) is int and \
                len(ints) == 2 and args[1] > args[0]:
            return args[0], args[1] - 1
        if len(args) >= 2 and type(args[0]) is int and type(args[1]) is not int and \
                args[0] > 0:
            return 0, args[0] - 1
        return None
    if op in ("getitem", "select") and args and _is_node(args[0]):
        return bounds(args[0], depth + 1)
    if op in ("add", "sub") and len(args) == 2 and not node.kwargs:
        a, b = args
        if op == "add" and type(a) is int and _is_node(b):
            a, b = b, a
        inner = bounds(a, depth + 1) if _is_node(a) and type(b) is int else None
        if inner is None:
            return None
        shift = b if op == "add" else -b
        return inner[0] + shift, inner[1] + shift
    if op == "placeholder" and node.graph.parent is not None:
        outer = next((o for o, i in node.graph.captures if i is node), None)
        return bounds(outer, depth + 1) if outer is not None else None
    return None


def _is_node(value) -> bool:
    return hasattr(value, "op") and hasattr(value, "graph")


def offset(node, depth: int = 0):
    """``(base, c)`` with ``node`` = ``base + c`` through adds and subtractions of ints
    (``0 + n`` is ``radd``)."""
    if depth < _DEPTH and node.op in ("add", "radd", "sub") and len(node.args) == 2 and \
            not node.kwargs:
        a, b = node.args
        if node.op != "sub" and type(a) is int and _is_node(b):
            a, b = b, a
        if _is_node(a) and type(b) is int:
            base, c = offset(a, depth + 1)
            return base, c + (-b if node.op == "sub" else b)
    return node, 0


def static_width(data_size, start, stop) -> Optional[int]:
    """The number of items of ``x[start:stop]`` (``start``, ``stop``: traced values) on
    every run, when the graph proves it (the module docstring); else None."""
    a, b = _node(start), _node(stop)
    if a is None or b is None or type(data_size) is not int:
        return None
    (base_a, c_a), (base_b, c_b) = offset(a), offset(b)
    width = c_b - c_a
    if base_a is not base_b or width < 0:
        return None
    known = bounds(a)
    if known is None or known[0] < 0 or known[1] + width > data_size:
        return None
    return width
