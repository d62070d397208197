"""What converted control flow decided on Python values while tracing, for ``f.explain``.

Tensor conditions leave ``cond``/``while`` nodes (with their source lines) in the graph;
Python conditions leave nothing there, so the operators ``note`` them here: an ``if`` or
ternary that Python decided (and which way), a loop that ran as Python (how many times,
and whether its rest was then staged). Notes are taken only while someone listens.
"""
from __future__ import annotations

import contextlib

from ..source_info import user_location
from ..threads import PerThreadList

_LISTENERS = PerThreadList()     # the lists of notes listening, innermost last (per thread)


def note(kind: str, detail) -> None:
    """Record ``(location, kind, detail)`` for the innermost listener, if any."""
    if _LISTENERS:
        _LISTENERS[-1].append((user_location(), kind, detail))


@contextlib.contextmanager
def listening():
    """Collect the notes taken inside the block: a list of (location, kind, detail)."""
    notes: list = []
    _LISTENERS.append(notes)
    try:
        yield notes
    finally:
        _LISTENERS.remove(notes)
