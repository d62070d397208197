"""A ``try`` whose handler may catch an error the graph raises when it runs: the call that
raises runs again eagerly, so the handler does what eager's does.

    try:                                        # LayoutLM, LiLT: validating by catching
        left = self.x_position_embeddings(bbox[:, :, 0])
    except IndexError as e:
        raise IndexError("The `bbox` coordinate values should be within 0-1000 range.") from e

While tracing, the body runs on tensors with no data and cannot fail the way it fails at
run time (an index out of range), so a trace cannot decide the handler; such a ``try``
made the whole function fall back. Now the trace follows the body (the path every call
that does not raise takes: its values are eager's) and the graph is marked
(``note``). A call whose graph raises anything then runs the function eagerly, with a
``FallbackWarning`` naming the ``try`` (strict mode: ``ConversionError``): eager's handler
decides, and the caller gets eager's result or eager's error.

Running the call again is right only when the failed run left nothing the caller can see:
the graph may have no effects (``int_overflow``'s rule: no in-place write into a tensor it
did not make, no print, no optimizer or autograd call, ...; ``refusal`` keeps the fallback
otherwise). Random draws are allowed: the default generator's state is taken before each
run and put back before the replay, so eager draws what it would have drawn; so are staged
checks (a tensor ``assert``, a ``raise`` under a tensor ``if``), whose one effect is the
error the replay hands to eager's handler. ``contextlib.suppress(E)`` is such a ``try``
(``operators.effects.suppress_traced``).
"""
from __future__ import annotations

from typing import Optional

import torch

from .int_overflow import _no_visible_effects
from .ops import RANDOM, op_name
from .source_info import format_location
from .symbolic import current_graph

KEY = "replay_on_error"


def note(location) -> None:
    """The ``try`` at ``location`` lets its handler catch what the graph being traced may
    raise when it runs: its calls replay eagerly when they raise."""
    graph = current_graph()
    if graph is None:
        return
    while graph.parent is not None:
        graph = graph.parent
    if getattr(graph, KEY, None) is None:
        setattr(graph, KEY, location or ("<unknown location>", None))


_CHECKS = {"assert_true", "raise_made"}     # staged checks: their one effect is to raise


def _undone(node) -> bool:
    """A draw from the default generator (its state is restored before a replay) or a
    staged check (a tensor ``assert``, a ``raise`` under a tensor ``if``: it only raises)."""
    name = op_name(node.target)
    return name in _CHECKS or name in RANDOM and node.kwargs.get("generator") is None


def refusal(graph) -> Optional[str]:
    """Why ``graph`` (a finished trace marked by ``note``) cannot replay a failed call, or
    None."""
    where = getattr(graph, KEY, None)
    if where is None or _no_visible_effects(graph, allowed=_undone):
        return None
    return (f"{format_location(where)}: try/except around tensor operations whose run-time "
            f"errors it may catch, in a function with effects (an in-place write, print, a "
            f"generator's draw, an optimizer or autograd call): a call that raises could not "
            f"run again eagerly, so it cannot be converted to a graph")


def replaying(fn, graph):
    """``fn`` (``graph`` compiled) tagging what it raises with what a replay needs."""
    where = getattr(graph, KEY, None)
    if where is None:
        return fn
    draws = any(callable(n.target) and op_name(n.target) in RANDOM for n in graph.walk())
    get_state = torch.random.get_rng_state

    def run(*args):
        state = get_state() if draws else None
        try:
            return fn(*args)
        except Exception as e:
            e._tograph_replay = (where, state)
            raise
    return run


def replay_of(error: BaseException):
    """``((file, line), rng_state)`` when ``error`` (or what it was raised from) came out of a
    replaying graph, else None."""
    for _ in range(4):
        if error is None:
            return None
        found = getattr(error, "_tograph_replay", None)
        if found is not None:
            return found
        error = error.__cause__ or error.__context__
    return None


def restore(state) -> None:
    """Put back the generator state a failed run started from (see ``replaying``)."""
    if state is not None:
        torch.random.set_rng_state(state)
