"""Errors raised while building, checking or running a graph.

Every error that can be traced to a user's source line carries it in its message as
``file:line``.
"""


class GraphError(Exception):
    """A graph is malformed, or an operation cannot be added to it."""


class TracingError(GraphError):
    """Python code asked for a concrete value of a symbolic tensor (bool, int, iteration...)."""


class BranchMismatchError(GraphError):
    """The branches of a cond (or a loop body and its inputs) disagree in structure or dtype."""


class FeedError(GraphError, ValueError):
    """A Session.run feed is missing, unknown, or of the wrong shape or dtype."""


class GraphLoadError(GraphError):
    """A saved graph file is malformed, tampered with, or names a forbidden operation."""
