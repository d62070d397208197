"""Where probed values go: the log of ``tg.probe`` records while a probe call runs.

``collecting()`` opens a log; ``record(name, value, loop)`` (called by converted code for
Python values and by the ``probe_value`` graph op at run time) appends a copy of the value
(later in-place updates or reused buffers cannot change what was seen) with the loop it
was bound in and that loop's iteration; ``record(None, None, loop)`` is the tick that
starts the loop's next iteration. With no log open, recording does nothing.
"""
from __future__ import annotations

import contextlib
from typing import Any, Dict, List, Tuple

import torch
import torch.utils._pytree as pytree

from .threads import PerThreadList

_OPEN = PerThreadList()      # the logs open, innermost last (per thread: runtime.threads)


class ProbeLog:
    """Every value recorded per name, in order: (loop or None, iteration, value)."""

    def __init__(self):
        self.records: Dict[str, List[Tuple[Any, int, Any]]] = {}
        self.ticks: Dict[Any, int] = {}

    def last_per_iteration(self, name: str) -> List[Any]:
        """The value each loop iteration ended with, for a name bound inside loops."""
        ends: Dict[Tuple[Any, int], Any] = {}
        for loop, iteration, value in self.records.get(name, ()):
            if loop is not None:
                ends[(loop, iteration)] = value      # dicts keep first-insertion order
        return list(ends.values())


def _copy(value):
    return pytree.tree_map(lambda v: v.detach().clone() if isinstance(v, torch.Tensor) else v,
                           value)


def record(name, value, loop) -> None:
    if not _OPEN:
        return
    log = _OPEN[-1]
    if name is None:
        log.ticks[loop] = log.ticks.get(loop, 0) + 1
    else:
        iteration = log.ticks.get(loop, 0) if loop is not None else 0
        log.records.setdefault(name, []).append((loop, iteration, _copy(value)))


@contextlib.contextmanager
def collecting():
    log = ProbeLog()
    _OPEN.append(log)
    try:
        yield log
    finally:
        _OPEN.remove(log)
