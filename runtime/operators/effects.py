"""``print`` and ``assert`` in converted code, and the guard around ``try`` statements.

While a graph is traced, ``print`` and a tensor ``assert`` become graph nodes, so they act
on every run of the graph instead of once at trace time. ``try`` statements may only wrap
code that adds nothing to the graph: an exception caught at trace time says nothing about
later runs.
"""
from __future__ import annotations

import builtins
import contextlib

from .. import graph_ops
from ..errors import GraphError, TracingError
from ..graph import node_count
from ..symbolic import current_graph, dispatch_record, is_symbolic, tracing_error_count
from ..source_info import format_location, user_location


def print_(*args, **kwargs):
    """``print``: a graph node when tracing, the builtin otherwise."""
    if current_graph() is None:
        return builtins.print(*args, **kwargs)
    if kwargs.get("file") is not None:
        raise GraphError(f"{format_location(user_location())}: print(file=...) cannot be "
                         f"part of a graph")
    dispatch_record(graph_ops.print_values, args,
                    {k: v for k, v in kwargs.items() if k in ("sep", "end", "flush")})
    return None


def assert_stmt(test, msg_fn=None):
    """``assert test, msg``: a graph node checking ``test`` on every run when symbolic."""
    if not is_symbolic(test):
        if not test:
            raise AssertionError(msg_fn()) if msg_fn is not None else AssertionError()
        return None
    try:
        message = msg_fn() if msg_fn is not None else None
    except TracingError:          # a message formatting tensors: known only at run time
        message = None
    location = user_location()
    where = format_location(location)
    dispatch_record(graph_ops.assert_true, (test, where, message), {})
    return None


@contextlib.contextmanager
def eager_only(reason: str):
    """Fail (so the caller falls back to eager) if the block adds to a graph being traced."""
    if current_graph() is None:
        yield
        return
    location = user_location()
    nodes, errors = node_count(), tracing_error_count()
    try:
        yield
    finally:
        if node_count() != nodes or tracing_error_count() != errors:
            raise GraphError(f"{format_location(location)}: {reason} around tensor-dependent "
                             f"code cannot be converted to a graph (an exception caught while "
                             f"tracing says nothing about later runs)")
