"""Real tensors whose ``requires_grad`` a tensor-dependent branch or loop body sets.

``if calls[0] == 2: net[0].requires_grad_(False)`` on a carried counter: the flag changes
only when the graph takes that path, so the call is a graph op there (``symbolic``'s
tracing mode records it instead of running it). For the rest of the trace the tensor's
flag, and whether a backward gives it a gradient, are known only when the graph runs:
a trace-time question about either (``p.requires_grad``, ``p.grad``) is refused, naming
the line, and the call falls back (strict: ConversionError), never answered with the
flag the trace found.

Requires: a graph being built (the set lives on its root).
"""
from __future__ import annotations

from .errors import GraphError
from .source_info import format_location, user_location


def note(graph, t) -> None:
    """``t``'s flag is set in a region of ``graph`` (a branch or loop body)."""
    varies = graph.root.__dict__.setdefault("_branch_grad_flags", {})
    varies[id(t)] = t          # (held: the id stays its own while the trace lives)


def refuse_read(graph, t, what: str) -> None:
    """GraphError naming the user's line if ``t``'s flag is set in a region of ``graph``."""
    varies = graph.root.__dict__.get("_branch_grad_flags") if graph is not None else None
    if varies and varies.get(id(t)) is t:
        location = user_location()
        error = GraphError(f"{format_location(location)}: {what} of a tensor whose "
                           f"requires_grad a tensor-dependent branch or loop body sets: "
                           f"it is known only when the graph runs")
        error.location = location
        error.names_its_line = True
        raise error
