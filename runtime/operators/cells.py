"""Closure cells that converted code carries as state.

A variable of the user's function that a nested ``def``/``lambda`` reads is a closure
cell. The converter makes each body function (branch, loop body, loop test) keep such a
state variable in the cell itself -- ``nonlocal v; v = v_in`` on entry -- so a closure
called inside the body sees the value eager code would. The operators wrap those body
functions with ``restoring_cells``: after each call the cells hold again what they held
before it, so the other branch (and the next trace of a loop body) starts from the entry
value, and the statement's own assignment of its results is what sets them afterwards.
"""
from __future__ import annotations

_EMPTY = object()


def _contents(cell):
    try:
        return cell.cell_contents
    except ValueError:          # an unbound cell
        return _EMPTY


def _put(cell, value) -> None:
    if value is _EMPTY:
        try:
            del cell.cell_contents
        except ValueError:
            pass
    else:
        cell.cell_contents = value


def restoring_cells(fn, names):
    """``fn``, or (when it keeps some of ``names`` in closure cells) a function calling it
    that puts those cells back as they were after each call."""
    code = getattr(fn, "__code__", None)
    if code is None or not fn.__closure__:
        return fn
    cells = [c for n, c in zip(code.co_freevars, fn.__closure__) if n in names]
    if not cells:
        return fn

    def run(*args):
        saved = [_contents(c) for c in cells]
        try:
            return fn(*args)
        finally:
            for cell, value in zip(cells, saved):
                _put(cell, value)
    return run
