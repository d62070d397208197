"""Python values a tensor-dependent loop changes: one of a few options, chosen per run.

    r = Rec(tag="init")
    for row in m:                # a loop over a tensor's rows (or a tensor ``while``)
        if row.sum() > 0:
            break
        r.tag = "seen"           # "init" if the body never got here, else "seen"
    return r

A loop variable holding a Python value that is not a number (a str, None, bytes...), which
the body sets to other such values, cannot be a tensor. Its values form a finite set when
the body only ever sets constants (or values a ``cond`` in the body chose among
constants) and never reads the value itself: the loop then carries an int64 index into
those options (``Slot.options``), each body trace turning its output into an index, and
the loop's result is a ``PathValue`` (``runtime.path_values``): refused when used while
tracing, rebuilt with the option the run took on each call. Inside the body and the test
the variable is a ``PathValue`` too, so a body that reads it (``r.tag + "!"``,
``if r.tag == "init"``) raises ``GraphError`` and the call falls back.
"""
from __future__ import annotations

from typing import Optional

import torch

from .errors import BranchMismatchError
from .meta import TensorMeta, meta_empty
from .path_values import MADE, PathValue, _NUMBERS, _choosable, _same, allowed
from .subgraphs import Slot, _kind


def widen(slot: Slot, new, name: str, where: str) -> Optional[Slot]:
    """For a loop variable that is (or becomes) a chosen Python value: ``slot`` itself when
    the body's output ``new`` is among its options, a slot with more options when it is
    not; None when the variable is no such value (the other rules apply)."""
    if slot.options is None:
        old = slot.const
        if slot.meta is not None or new is old or not (_choosable(old) and _choosable(new)):
            return None
        if not isinstance(old, PathValue) and not isinstance(new, PathValue) and (
                _same(old, new) or isinstance(old, _NUMBERS) and isinstance(new, _NUMBERS)):
            return None
        if not allowed():
            return None
        options = _options(old)
    else:
        if not _choosable(new):
            raise BranchMismatchError(f"{where}: loop variable {name} changes from a Python "
                                      f"value to {_kind(new)}")
        options = slot.options
    more = _union(options, _options(new))
    if slot.options is not None and len(more) == len(options):
        return slot
    meta = TensorMeta((), torch.int64)
    return Slot(meta, None, meta_empty((), torch.int64), False, None, options=more)


def index_of(value, options: tuple):
    """``value`` (one of ``options``, or a PathValue among them) as an int64 index into
    ``options``, recorded in the graph being built."""
    if not isinstance(value, PathValue):
        return torch.tensor(_position(value, options), dtype=torch.int64)
    positions = [_position(o, options) for o in value.options]
    if positions == list(range(len(positions))):
        return value.index
    return torch.tensor(positions, dtype=torch.int64)[value.index]


def chosen(index, options: tuple) -> PathValue:
    """The loop variable inside a trace, or after the loop: the option ``index`` picks."""
    MADE[0] += 1
    return PathValue(index, options)


def _options(value) -> tuple:
    return value.options if isinstance(value, PathValue) else (value,)


def _union(first: tuple, second: tuple) -> tuple:
    out = list(first)
    for o in second:
        if not any(_same(o, p) for p in out):
            out.append(o)
    return tuple(out)


def _position(value, options: tuple) -> int:
    return next(i for i, o in enumerate(options) if _same(value, o))
