"""Python constants compared as interchangeable values, not by ``==``.

``-0.0 == 0.0`` and ``1 == 1.0 == True`` in Python, yet each gives a different result
(``math.copysign(1, -0.0)``, ``type(k)``, ``1 / -0.0``); ``nan != nan`` although a NaN is
as good as another. Whatever dedups or merges constants (CSE, the merge of what two
branches of a ``cond`` leave, a path's choice among values) keys them by type and, for
floats and complex numbers, by ``repr`` (which tells ``-0.0`` from ``0.0`` and equates
NaNs).
"""
from __future__ import annotations

from typing import Any

import torch

from .graph import Node


def key_of(value: Any) -> Any:
    """A hashable key equal for values that are interchangeable as arguments."""
    kind = type(value)
    if kind is Node:
        return id(value)
    if kind is int or kind is bool or kind is str or kind is bytes or value is None or \
            value is Ellipsis:
        return (kind, value)
    if kind is float or kind is complex:
        return (kind, repr(value))
    if isinstance(value, (tuple, list)):
        return (kind,) + tuple(key_of(v) for v in value)
    if isinstance(value, dict):
        return (dict,) + tuple((k, key_of(v)) for k, v in value.items())
    if isinstance(value, slice):
        return (slice, key_of(value.start), key_of(value.stop), key_of(value.step))
    if isinstance(value, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return (kind, str(value))
    return ("id", id(value))


def same_constant(a, b) -> bool:
    """``a`` and ``b`` are the same Python value: same type, and for numbers the same
    bits as far as Python can tell (``-0.0`` is not ``0.0``)."""
    if a is b:
        return True
    return type(a) is type(b) and key_of(a) == key_of(b)
