"""The sizes a dynamic trace probes an op at, to prove which output dims follow the inputs.

``shape_inference.strict_dims`` runs each op a second time with the run-time input dims
(and the sizes taken from them, ``size_hints``) changed: an output dim that changes is
dynamic, one that does not is proven static, and an op that fails there holds only at the
traced sizes (the dynamic trace is refused). A probe is ``(scale, grow)``: each run-time
size ``s`` becomes ``s * scale + grow``.

- Plain dynamic traces probe at ``(2, 0)``: doubling keeps sizes made from one another by
  products consistent (3 rows of 16 positions flattened: 48; doubled, 96 for 6 rows).
- *Shifted* traces (``expect_shifted``, chosen by ``transpiler.dynamic_shapes`` for a
  graph that serves only calls whose dynamic sizes all differ from the traced ones by the
  same amount, their offsets guarded) probe at ``(1, SHIFT)`` and ``(2, 0)``: a shift keeps
  sizes that differ by a constant consistent (an attention mask one longer than the KV
  cache: ``S + 1`` and ``S``; doubled, ``2S + 2`` against the ``2S + 1`` computed from the
  cache, which ``expand`` refuses). An op is proven when either probe holds; a dim is
  static only when no probe that holds changed it.

A plain trace refused by a probe that a shift would have passed says so
(``failed_by_offset``): the caller may try the shifted trace.
"""
from __future__ import annotations

import threading
from typing import Tuple

from .meta import TensorMeta

SHIFT = 67      # odd and past common chunk sizes: ``n // 64`` and ``n % 2`` move too
DOUBLED = (2, 0)
SHIFTED = (1, SHIFT)

_STATE = threading.local()


def expect_shifted(on: bool) -> None:
    """The next ``strict_dims`` trace of this thread is shifted (or not)."""
    _STATE.pending = bool(on)


def take_pending() -> bool:
    """What ``expect_shifted`` asked for, once (``strict_dims`` takes it on entry)."""
    pending = getattr(_STATE, "pending", False)
    _STATE.pending = False
    return pending


def probes(shifted: bool) -> Tuple[Tuple[int, int], ...]:
    return (SHIFTED, DOUBLED) if shifted else (DOUBLED,)


def note_failure(by_offset: bool) -> None:
    """A probe refused the trace; ``by_offset``: the shifted probe would have held."""
    _STATE.by_offset = by_offset


def clear_failure() -> None:
    _STATE.by_offset = False


def failed_by_offset() -> bool:
    """Whether this thread's last refused probe would have held shifted."""
    return getattr(_STATE, "by_offset", False)


def merge(seconds: list):
    """One meta from the metas of the probes that held: a dim keeps its size only when
    every probe gave the same (each meta a TensorMeta, a tuple of them, or None)."""
    out = seconds[0]
    for other in seconds[1:]:
        out = _join(out, other)
    return out


def _join(a, b):
    if isinstance(a, TensorMeta) and isinstance(b, TensorMeta):
        return a.join(TensorMeta(b.shape, a.dtype))
    if isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b):
        return tuple(_join(x, y) for x, y in zip(a, b))
    return a
