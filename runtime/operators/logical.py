"""``and``, ``or``, ``not`` and the ternary ``a if t else b``.

Python values: exactly Python's semantics (short-circuit, the deciding operand is the
result). Symbolic tensors: a ``cond`` node whose branches compute the rest lazily, so the
right operand is evaluated only on the path where Python would evaluate it.
"""
from __future__ import annotations

import torch

from ..control_flow import staged_cond
from ..errors import GraphError
from ..introspection import MIXED, kind_of, mark
from ..source_info import format_location, user_location
from ..symbolic import is_symbolic
from ..tensor_list import truth
from .decisions import _LISTENERS, note


def and_(a, *rest):
    """``a and b and ...``: ``rest`` are zero-argument functions computing the operands."""
    if not rest:
        return a
    if not is_symbolic(a):
        return and_(rest[0](), *rest[1:]) if a else a
    # (a stand-in for a Python bool is False itself where ``and`` stops: the paths may then
    # agree on a Python result, as ``n > 1 and mask is None`` with a mask does)
    stop = False if kind_of(a) == "bool" else a
    return staged_cond(a, lambda: and_(rest[0](), *rest[1:]), lambda: stop, ())


def or_(a, *rest):
    """``a or b or ...``: ``rest`` are zero-argument functions computing the operands."""
    if not rest:
        return a
    if not is_symbolic(a):
        return a if a else or_(rest[0](), *rest[1:])
    stop = True if kind_of(a) == "bool" else a     # (as in ``and_``)
    return staged_cond(a, lambda: stop, lambda: or_(rest[0](), *rest[1:]), ())


def is_bool(a, const: bool, negate: bool = False):
    """``a is True`` / ``a is False`` (``negate``: ``is not``): a stand-in for a Python bool
    (a run-time size test, ``n > 1`` in a tensor loop) *is* ``True`` exactly when its value
    is; Python's ``is`` on the stand-in object would always answer False. A tensor or a
    stand-in for another number is never the constant, as in Python."""
    if not is_symbolic(a):
        return (a is const) != negate
    kind = kind_of(a)
    if kind == MIXED:
        raise GraphError(f"{format_location(user_location())}: 'is {const}' of a value whose "
                         f"type depends on the path taken at run time")
    if kind != "bool":
        return negate
    out = a if const != negate else torch.logical_not(a)
    if out is not a:
        mark(out, "bool")
    return out


def not_(a):
    """``not a``: a bool tensor for a symbolic ``a``."""
    a = truth(a)                        # (``not L`` of a list grown in a tensor loop)
    if is_symbolic(a):
        out = torch.logical_not(a)
        if kind_of(a) is not None:      # ``not n`` of a Python number (a carried flag:
            mark(out, "bool")           # ``flags["flip"] = not flags["flip"]``) is a bool
        return out
    return not a


def ifexp(test, true_fn, false_fn):
    """``true_fn() if test else false_fn()``."""
    test = truth(test)
    if not is_symbolic(test):
        if _LISTENERS:
            note("ifexp", bool(test))
        return true_fn() if test else false_fn()
    return staged_cond(test, true_fn, false_fn, ())
