"""A fallback retried once the Python state it met has changed (a one-time write done).

    retry = fallback_retry.after(reason, previous, take)   # a _Fallback's .retry
    if entry.retry is not None and entry.retry.due():       # a later call
        ...trace the call again...

Libraries write state once, on a model's first call: ``*ForSequenceClassification`` and
``ViTForImageClassification`` set ``self.config.problem_type`` the first time they see
labels. A graph cannot repeat that write on every call, so the trace of that first call is
refused and the call runs eagerly, which makes the write. Cached for good, that fallback
would keep every later call eager, though now the write is done (``if problem_type is
None`` is false) and a trace would change nothing. The same for lazy modules
(``nn.LazyLinear``: the first call materializes the parameters, which a trace cannot).
So a fallback records the Python state the call reaches as it is before the eager run (a
``side_effects.Snapshot`` of the function, its arguments, its object and the helpers the
trace met, taken after the trace's writes were put back). A later call with the same
signature first asks whether that state changed since; if it did, the call is traced again
(from the state as it is then: nothing is written twice, nothing skipped -- a refused
trace puts back everything it wrote and stops before taking an iterator's item, and the
eager run made the write, once). Any reason qualifies: a trace that fails for a reason
the state does not decide fails the same way once more, and is then kept.

Bounded: a signature is retraced at most ``RETRIES`` times in all; a retry that falls back
for the same reason again (a write made on every call: a flag toggled, a new object
stored) keeps the fallback for good, without another warning; one that falls back for a
new reason warns again. A fallback whose state does not change within ``CHECKS`` calls stops
looking (each look compares the recorded state, as a guard does).
"""
from __future__ import annotations

from typing import Callable, Optional

RETRIES = 2     # traces of one signature after its first fallback, at most
CHECKS = 8      # calls that look for the change before the fallback is kept for good


class Retry:
    """A fallback's condition for tracing again: the state it recorded changed."""

    def __init__(self, snapshot, left: int):
        self.snapshot, self.left, self.checks, self.changed = snapshot, left, CHECKS, False

    def due(self) -> bool:
        """Whether the state changed since the fallback (asked at most ``CHECKS`` times
        while it has not; once it has, the answer stays yes)."""
        if self.changed:
            return True
        if self.checks <= 0:
            return False
        self.checks -= 1
        try:
            self.changed = bool(self.snapshot.changes())
        except Exception:  # noqa: BLE001 - a user __eq__ or property raising: keep eager
            self.checks = 0
            return False
        if not self.changed and self.checks <= 0:
            self.snapshot = None        # (what it holds is freed: no more looks)
        return self.changed


def after(reason: str, previous, take: Callable) -> Optional[Retry]:
    """The retry condition of a new fallback for ``reason``, or None. ``previous``: the
    fallback this trace retried (None on a first trace); ``take`` makes the ``Snapshot``
    of the state now."""
    left = RETRIES if previous is None else getattr(previous.retry, "left", 0) - 1
    if left <= 0 or (previous is not None and previous.reason == reason):
        return None     # (the same write again: made on every call, no one-time set-up)
    try:
        return Retry(take(), left)
    except Exception:  # noqa: BLE001 - state it cannot record (too deep): no retry
        return None


def warns(reason: str, previous) -> bool:
    """Whether a fallback for ``reason`` warns: a first one does, a retry only when its
    reason is new."""
    return previous is None or previous.reason != reason
