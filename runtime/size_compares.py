"""Comparisons of run-time sizes that every run answers alike: Python bools, not graph values.

A dynamic trace's sizes (``x.shape[1]`` of a dynamic dim, ``numel``) are graph values
standing for Python ints, and comparing them records a 0-d bool the graph computes; an
``if`` on it stages a ``cond`` taking both paths. Where the answer is the same for every
size the graph can be called with, it is the Python bool eager gives, and the code takes
one path as it does. Two cases are decided:

- a size is never negative, nor is a sum or product of sizes and non-negative ints:
  transformers' mask code asks ``kv_length >= local_attention_size`` with a window of 0,
  where staging made one path return None and the other a mask (a branch mismatch that
  refused the dynamic trace of Qwen2-MoE with a KV cache and no mask: one trace per length);
- two sizes that are one size plus ints (``kv_length = past_seen_tokens + q_length`` with
  an empty cache's 0; ``n + 1`` against ``n``) compare as those ints do: masking_utils'
  ``kv_length == q_length``, sdpa's ``kv_length > q_length``.

Nothing else is decided: sizes of different tensors that happen to be equal stay graph
values (a dynamic graph serves other sizes), as do tests against a bound a size may cross.

Requires: nodes of ``dim_size``/``numel`` marked ``python_int`` (``symbolic``).
Provides: ``decided(func, args, kwargs)``: the Python bool, or None.
"""
from __future__ import annotations

import operator
from typing import Optional

import torch

from .ops import op_name
from .value_bounds import offset

_DEPTH = 32

# Python's comparisons of a size (``n >= 0`` reaches torch as ``Tensor.ge``; ``0 <= n`` as
# ``n.ge(0)``): a size stands for a Python int, so it has no other way to be compared
_COMPARE = {"ge": operator.ge, "gt": operator.gt, "le": operator.le, "lt": operator.lt,
            "eq": operator.eq, "ne": operator.ne}


def decided(func, args, kwargs) -> Optional[bool]:
    """``args[0] <op> args[1]`` as a Python bool when every run answers it alike."""
    compare = _COMPARE.get(op_name(func))
    if compare is None or kwargs or len(args) != 2:
        return None
    a, b = (_size(v) for v in args)
    if a is None or b is None:
        return None
    if isinstance(b, int):
        return _against(compare, a, b)
    (base_a, c_a), (base_b, c_b) = offset(a), offset(b)
    return compare(c_a, c_b) if base_a is base_b else None


def _size(value):
    """The node of a run-time size, or a Python int; None for anything else."""
    if type(value) is int:
        return value
    node = getattr(value, "_node", None)
    if isinstance(value, torch.Tensor) and node is not None and \
            node.attrs.get("python_int") and value.dim() == 0:
        return node
    return None


def _against(compare, node, k: int) -> Optional[bool]:
    """``size <op> k`` where the size's least value decides it."""
    low = least(node)
    needed = k if compare in (operator.ge, operator.lt) else k + 1
    if low is None or low < needed:
        return None
    return compare(low, k)      # (as every value from ``low`` up answers it)


def least(node, depth: int = 0) -> Optional[int]:
    """A least value of the run-time size ``node``: 0 for a size or an element count;
    sums, products and floor quotients by positive ints of such carry it; None where
    unknown (a size a condition chose, a number read from a tensor)."""
    if depth > _DEPTH or not hasattr(node, "op"):
        return None
    op, args = node.op, node.args
    if op in ("dim_size", "numel"):
        return 0
    if op == "placeholder" and node.attrs.get("captured"):
        outer = next((o for o, i in node.graph.captures if i is node), None)
        return least(outer, depth + 1)
    if not node.attrs.get("python_int") or node.kwargs or len(args) != 2:
        return None
    lows = [a if type(a) is int else least(a, depth + 1) for a in args]
    if None in lows:
        return None
    if op in ("add", "radd"):
        return lows[0] + lows[1]
    if op in ("mul", "rmul") and min(lows) >= 0:
        return lows[0] * lows[1]
    if op == "floordiv" and type(args[1]) is int and args[1] > 0:
        return lows[0] // args[1]
    return None
