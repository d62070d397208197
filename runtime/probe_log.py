"""Where probed values go: the log of ``tg.probe`` records while a probe call runs.

``collecting()`` opens a log; ``record(name, value, in_loop)`` (called by converted code
for Python values and by the ``probe_value`` graph op at run time) appends a copy of the
value, so later in-place updates or reused buffers cannot change what was seen. With no
log open, recording does nothing.
"""
from __future__ import annotations

import contextlib
from typing import Any, Dict, List, Tuple

import torch
import torch.utils._pytree as pytree

_OPEN: List["ProbeLog"] = []


class ProbeLog:
    """Every value recorded per name, in order, each with whether it was inside a loop."""

    def __init__(self):
        self.records: Dict[str, List[Tuple[bool, Any]]] = {}


def _copy(value):
    return pytree.tree_map(lambda v: v.detach().clone() if isinstance(v, torch.Tensor) else v,
                           value)


def record(name: str, value, in_loop: bool) -> None:
    if _OPEN:
        _OPEN[-1].records.setdefault(name, []).append((bool(in_loop), _copy(value)))


@contextlib.contextmanager
def collecting():
    log = ProbeLog()
    _OPEN.append(log)
    try:
        yield log
    finally:
        _OPEN.remove(log)
