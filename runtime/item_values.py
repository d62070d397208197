"""``t.item()`` of a traced tensor: a graph value standing for the Python number.

Eagerly ``loss.item()`` is a Python number with no autograd history; in a trace it is the
tensor's one element, detached, as a 0-d value marked with the number's kind (float64 for
a float, int64 for an int, bool), as ``float(t)``/``int(t)``/``bool(t)`` give
(``operators.calls``): Python arithmetic and ``type()`` on it follow the number's rules,
and a result holding it is a 0-d tensor standing for the number. A tensor with more than
one element (eager raises) or only a run-time size, and complex values, need the value.
"""
from __future__ import annotations

import math

import torch

from .introspection import mark


def item_of(t, needs_value):
    """The stand-in for ``t.item()``; ``needs_value(what)``: the error to raise when the
    number is needed now."""
    meta = t._node.meta
    if meta is None or not meta.is_static or math.prod(meta.shape) != 1 or \
            meta.dtype.is_complex:
        raise needs_value(".item()")
    kind, dtype = ("bool", torch.bool) if meta.dtype is torch.bool else \
        ("float", torch.float64) if meta.dtype.is_floating_point else ("int", torch.int64)
    value = t.detach().reshape(()).to(dtype)
    mark(value, kind)
    return value
