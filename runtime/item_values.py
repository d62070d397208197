"""``t.item()`` of a traced tensor: a graph value standing for the Python number.

Eagerly ``loss.item()`` is a Python number with no autograd history; in a trace it is the
tensor's one element, detached, as a 0-d value marked with the number's kind (float64 for
a float, int64 for an int, bool), as ``float(t)``/``int(t)``/``bool(t)`` give
(``operators.calls``): Python arithmetic and ``type()`` on it follow the number's rules,
and a result holding it is a 0-d tensor standing for the number. A tensor with more than
one element (eager raises) or only a run-time size, and complex values, need the value.
The stand-in of an inference tensor's item is a normal tensor (``inference_ops``).
"""
from __future__ import annotations

import math

import torch

from . import inference_ops
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
    if torch.is_inference_mode_enabled() or inference_ops.flag_of(t) is not False:
        with torch.inference_mode(False):       # eager's number has no kind: a normal copy
            value = t.detach().reshape(()).to(dtype, copy=True)
    else:
        value = t.detach().reshape(()).to(dtype)
    mark(value, kind)
    return value


def python_round(t: torch.Tensor, ndigits: int) -> torch.Tensor:
    """``round(x, ndigits)`` of the float ``t`` stands for, by Python's own ``round`` (its
    correctly rounded decimal result, which ``torch.round(decimals=)`` can miss by one)."""
    if t.is_meta:
        return torch.empty((), dtype=torch.float64, device="meta")
    return torch.tensor(round(float(t), ndigits), dtype=torch.float64)


def round_of(x, ndigits=None):
    """``round(x[, ndigits])`` of a traced value standing for a Python number: an int
    stand-in for ``round(x)`` (half to even on the exact value, as Python's), the number
    itself for an int, a float stand-in for a float with ``ndigits``. A traced tensor
    raises eager's TypeError (``Tensor`` has no ``__round__``)."""
    from .introspection import kind_of
    from .symbolic import dispatch_record, is_symbolic
    kind = kind_of(x)
    if kind not in ("int", "float", "bool") or is_symbolic(ndigits):
        if kind is None:
            raise TypeError("type Tensor doesn't define __round__ method")
        from .errors import GraphError
        raise GraphError(f"round() of a value whose kind ({kind}) or digits are known only "
                         f"when the graph runs")
    if kind != "float":
        value = x.to(torch.int64) if ndigits is None or ndigits >= 0 else \
            dispatch_record(python_round, (x.to(torch.float64), ndigits), {}).to(torch.int64)
        mark(value, "int")
        return value
    if ndigits is None:         # (int() of the rounded float: Python's errors, no wrap)
        from .number_checks import int_of
        from .source_info import user_location
        value = int_of(torch.round(x), user_location())
        mark(value, "int")
        return value
    value = dispatch_record(python_round, (x, int(ndigits)), {})
    mark(value, "float")
    return value
