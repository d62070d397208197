"""A trace that stopped on the user's own error: the call raises eager's, with no fallback.

A ``raise`` or a failing ``assert`` under a Python-valued condition (``if k >
x.shape[0]: raise ValueError(...)``, ``match name: case _: raise``) runs while tracing,
as it runs eagerly: the trace stops with that error. It is the caller's mistake, not a
conversion failure, so it must not read "tracing failed ... running eagerly".

    outcome = user_errors.run_eagerly(fn, args, kwargs, traced_error)
    outcome.raised_same   # eager raised the trace's error: raise outcome.error, warn not
    outcome.error         # eager's own error (None: eager returned outcome.result)
    NOT_RUN               # the outcome before (or without) an eager run

The call then runs eagerly once (its effects up to the error happen, as they would), and
when eager raises an error of the same type with the same message, that error (eager's,
with eager's traceback) is what the caller gets: no warning, nothing cached (a later call
traces again). Anything else (eager raised another error, or none) is a conversion
failure: the caller falls back as before, with eager's outcome of this call in hand (so
the call does not run twice). Never wrong: the caller always gets what eager did.
"""
from __future__ import annotations

from typing import Any, Optional

from runtime.errors import GraphError

from . import caller_frames


class Outcome:
    """What an eager run of the call did (see the module docstring); ``ran``: whether it
    ran at all (``NOT_RUN``: it did not)."""

    __slots__ = ("result", "error", "raised_same", "ran")

    def __init__(self, result: Any = None, error: Optional[BaseException] = None,
                 raised_same: bool = False, ran: bool = True):
        self.result, self.error, self.raised_same = result, error, raised_same
        self.ran = ran


NOT_RUN = Outcome(ran=False)


def _text(error: BaseException) -> str:
    """An error's text without a leading ``file:line: `` that tracing put there."""
    text = str(error)
    head, sep, rest = text.partition(": ")
    file, colon, line = head.rpartition(":")
    if sep and colon and line.isdigit():
        return rest
    return text


def _first_line(text: str) -> str:
    return text.split("\n", 1)[0]


def same_error(eager: BaseException, traced: BaseException) -> bool:
    """Whether ``eager`` is the error ``traced`` stood for: one type, one message (its
    first line: pytest adds the failing ``assert``'s expression to eager's, and gives a
    bare ``assert`` one)."""
    if type(eager) is not type(traced):
        return False
    if type(traced) is AssertionError and not str(traced):
        return True
    return _first_line(str(eager)) in (_first_line(str(traced)), _first_line(_text(traced)))


def run_eagerly(fn, args: tuple, kwargs: dict, traced: BaseException) -> Outcome:
    """Run ``fn`` eagerly on the call whose trace raised ``traced``: its ``Outcome``."""
    try:
        result = caller_frames.call(fn, args, kwargs)
    except Exception as e:          # noqa: BLE001 - eager's own error, handed back
        return Outcome(error=e, raised_same=same_error(e, traced))
    return Outcome(result=result)


def misjudged(traced: BaseException) -> GraphError:
    """The conversion failure to fall back on when shape inference judged an op's error
    the user's own (eager fails so on these shapes) and eager then ran through: the values
    the check stood in for the traced tensors were not the ones eager saw (a size list read
    from a traced tensor), so the error was the trace's."""
    error = GraphError(f"{_first_line(_text(traced))} while tracing, though eager runs this "
                       f"call (an error of the trace's stand-in values)")
    error.location = getattr(traced, "location", None)
    return error
