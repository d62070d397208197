"""``all(t)`` and ``any(t)`` of a traced tensor (``if all(eos_reached): break``).

Python iterates a 1-D tensor's items and tests each one's truth (non-zero, NaN included),
so ``all(t)`` is ``t.all()`` and ``any(t)`` is ``t.any()``, answered when the graph runs
(a bool stand-in, so a tensor ``if``/``break`` on it is converted). A list or tuple of
traced 0-d values (``all([a > 0, b > 0])``) is reduced the same way. Anything else
(a 0-d tensor, rows of a 2-D one: eager raises) is left to Python's own builtin.
"""
from __future__ import annotations

import builtins

import torch

from ..introspection import kind_of, mark
from ..symbolic import is_symbolic


def _rank(t):
    shape = t._node.meta.shape
    return None if shape is None else len(shape)


def _items_tensor(value):
    """The 1-D tensor whose items ``all``/``any`` would test, or None."""
    if is_symbolic(value) and kind_of(value) is None and _rank(value) == 1:
        return value
    if isinstance(value, (list, tuple)) and value and \
            builtins.any(is_symbolic(v) for v in value) and \
            builtins.all((is_symbolic(v) and _rank(v) == 0) or
                         isinstance(v, (bool, int, float)) for v in value):
        return torch.stack([torch.as_tensor(v != 0) if is_symbolic(v) else
                            torch.tensor(builtins.bool(v)) for v in value])
    return None


def _reduce(python, method):
    def call(*args, **kwargs):
        items = _items_tensor(args[0]) if len(args) == 1 and not kwargs else None
        if items is None:
            return python(*args, **kwargs)
        result = getattr(items, method)()
        mark(result, "bool")
        return result
    return call


all_of = _reduce(builtins.all, "all")
any_of = _reduce(builtins.any, "any")
