"""What ``torch.compiler.is_compiling()`` answers to library code while a trace runs.

Libraries ask it to take the path written to be a graph (transformers' masks), so a trace
answers True, as torch.compile would (``operators.calls.call``; the user's own code gets
eager's False). Some of those paths only work under torch.compile: 18 transformers models
skip ``if attention_mask is None and not is_torchdynamo_compiling(): attention_mask =
torch.ones(...)`` and then index the None mask (SwitchTransformers, LongT5, ...). When a
trace that gave that answer fails, the front door traces once more with eager's answer
(``as_eager``): the path eager takes, which may convert where the compile path cannot.
"""
from __future__ import annotations

import contextlib
import threading

_STATE = threading.local()


def answer() -> bool:
    """The answer for library code now (True, or False within ``as_eager``); counted."""
    _STATE.asked = getattr(_STATE, "asked", 0) + 1
    return getattr(_STATE, "value", True)


def asked() -> int:
    """How many times library code asked on this thread so far."""
    return getattr(_STATE, "asked", 0)


@contextlib.contextmanager
def as_eager():
    """Within: library code is told False, as eagerly."""
    before = getattr(_STATE, "value", True)
    _STATE.value = False
    try:
        yield
    finally:
        _STATE.value = before
