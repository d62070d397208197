"""``print`` and ``assert`` in converted code, and the guard around ``try`` statements.

While a graph is traced, ``print`` and a tensor ``assert`` become graph nodes, so they act
on every run of the graph instead of once at trace time. The body of a ``try`` with
``except`` clauses must be decided at trace time as eagerly (``try_guard``): an exception
caught at trace time from tensor code says nothing about later runs.
"""
from __future__ import annotations

import builtins
import contextlib
import sys

from .. import grad_fn_names, graph_ops, try_replays
from ..errors import GraphError, TracingError
from ..graph import Node, node_count
from ..symbolic import (contains_symbolic, current_graph, dispatch_record, is_symbolic,
                        tracing_error_count)
from ..source_info import format_location, user_location
from .text import DeferredText, layout, needs_layout, refuse_traced_objects
from ..threads import PerThreadList


def print_(*args, **kwargs):
    """``print``: a graph node when tracing, the builtin otherwise."""
    if current_graph() is None:
        return builtins.print(*args, **kwargs)
    options = {k: v for k, v in kwargs.items() if k in ("sep", "end", "flush")}
    stream = kwargs.get("file")
    if stream is sys.stderr:            # the expression ``sys.stderr``, read on each run
        options["stream"] = "stderr"
    elif stream is not None and stream is not sys.stdout:
        raise GraphError(f"{format_location(user_location())}: print(file=...) to a file "
                         f"other than sys.stdout/sys.stderr cannot be part of a graph")
    if any(isinstance(options.get(k), DeferredText) for k in ("sep", "end")):
        raise GraphError(f"{format_location(user_location())}: print's sep or end made from "
                         f"a tensor's value cannot be part of a graph")
    for arg in args:
        refuse_traced_objects(arg)
    # a Python value's text is known now, exactly as print makes it (a torch.Size, a dtype)
    args = tuple(a if isinstance(a, (str, DeferredText)) or contains_symbolic(a) else str(a)
                 for a in args)
    if needs_layout(args):              # text made at run time: f-strings, Python numbers
        args, options["layout"] = layout(args)
    names = grad_fn_names.names(args)   # (eager's grad_fn=<...> in a tensor's text)
    if names is not None:
        options["grad_fns"] = names
    dispatch_record(graph_ops.print_values, args, options)
    return None


def assert_stmt(test, msg_fn=None):
    """``assert test, msg``: a graph node checking ``test`` on every run when symbolic."""
    if not is_symbolic(test):
        if not test:
            message = msg_fn() if msg_fn is not None else None
            if isinstance(message, DeferredText):   # eager's message is a str: let it say
                raise GraphError(f"{format_location(user_location())}: a failing assert "
                                 f"whose message is text made from a traced value")
            raise AssertionError(message) if msg_fn is not None else AssertionError()
        return None
    try:
        message = msg_fn() if msg_fn is not None else None
    except TracingError:          # a message formatting tensors: known only at run time
        message = None
    location = user_location()
    where = format_location(location)
    if message is not None and needs_layout((message,)):    # an f-string of tensors, ...
        values, (parts,) = layout((message,))
        dispatch_record(graph_ops.assert_true, (test, where, None) + values, {"layout": parts})
        return None
    dispatch_record(graph_ops.assert_true, (test, where, message), {})
    return None


def torch_assert(condition, message):
    """``torch._assert(condition, message)`` while tracing: eager runs ``assert condition,
    message``, so the same staged assert (a message made from a size known only when the
    graph runs, ``f"got {x.shape}"``, is rendered only if the check fails)."""
    return assert_stmt(condition, lambda: message)


# Errors the graph's own operations may raise when it runs (index out of range, a failed
# graph assert, ...): a handler catching one of these cannot be decided at trace time.
_RUN_TIME_ERRORS = (RuntimeError, IndexError, ValueError, TypeError, AssertionError,
                    ArithmeticError, MemoryError)
# per thread: try bodies refused while tracing (caught ones too), the last reason
_REFUSALS = PerThreadList([0, ""])


class _TryGuard:
    """See ``try_guard``."""

    def __init__(self, catches):
        self.catches = catches
        self.location = user_location()
        self.refusals = _REFUSALS[0]
        self.staged = set()     # error classes staged checks in the body raise (raise_if)

    def _refuse(self, why: str) -> GraphError:
        _REFUSALS[0] += 1
        _REFUSALS[1] = (f"{format_location(self.location)}: try/except around {why} cannot "
                        f"be converted to a graph (an exception caught while tracing says "
                        f"nothing about later runs)")
        return GraphError(_REFUSALS[1])

    def _graph_may_raise_caught(self) -> bool:
        try:
            types = self.catches() if self.catches is not None else (BaseException,)
        except Exception:  # noqa: BLE001  (the handler's type would fail eagerly too)
            return True
        flat, stack = [], [types]
        while stack:
            t = stack.pop()
            if isinstance(t, tuple):
                stack.extend(t)
            else:
                flat.append(t)
        errors = _RUN_TIME_ERRORS + tuple(self.staged)
        return any(not isinstance(t, type) or _torch_error(t) or
                   any(issubclass(err, t) for err in errors) for t in flat)

    @contextlib.contextmanager
    def body(self, control_flow: bool = False):
        """Around the ``try`` body, inside the ``try``: its exceptions pass through here.
        ``control_flow``: the body holds converted if/while/for statements, whose
        variables an exception raised inside them would lose (they travel by return)."""
        nodes, errors = node_count(), tracing_error_count()
        try:
            yield
        except BaseException as e:
            if isinstance(e, (GraphError, TracingError)) or node_count() != nodes or \
                    tracing_error_count() != errors:
                raise self._refuse(f"tensor-dependent code that raised while tracing "
                                   f"({_first_line(e)})") from e
            if control_flow:
                raise self._refuse(f"if/while/for statements that raised while tracing "
                                   f"({_first_line(e)})") from e
            raise
        if tracing_error_count() != errors:
            raise self._refuse("code that uses a tensor's value")
        if node_count() != nodes and self._graph_may_raise_caught():
            try_replays.note(self.location)     # a call whose graph raises runs eagerly


def _torch_error(t: type) -> bool:
    """Whether handler type ``t`` is one of torch's own errors (``torch.linalg.LinAlgError``,
    ``torch.OutOfMemoryError``, ...): subclasses of RuntimeError that its ops raise when
    the graph runs (a singular matrix), not while tracing."""
    return t.__module__.split(".")[0] == "torch" and issubclass(t, _RUN_TIME_ERRORS)


def _first_line(e: BaseException) -> str:
    text = str(e).splitlines()[0] if str(e) else ""
    return f"{type(e).__name__}: {text[:200]}" if text else type(e).__name__


_GUARDS = PerThreadList()    # (per thread) the try_guard of each try being run, innermost last


def note_staged_error(error: type) -> None:
    """A check just staged raises ``error`` at run time: every enclosing ``try`` (of this
    or a calling converted function) must not catch it (``_TryGuard.body``)."""
    for guard in _GUARDS:
        if guard is not None:
            guard.staged.add(error)


@contextlib.contextmanager
def try_body(control_flow: bool = False):
    """Around the body of the innermost ``try_guard``'s ``try`` (see ``_TryGuard.body``)."""
    guard = _GUARDS[-1] if _GUARDS else None
    if guard is None:
        yield
        return
    with guard.body(control_flow):
        yield


@contextlib.contextmanager
def try_guard(catches):
    """Around a ``try`` with ``except`` clauses (``catches``: a thunk giving the handlers'
    exception types, None for a bare ``except``). While tracing, the ``try`` body must be
    decided at trace time as it is eagerly: it may add graph nodes only when no handler can
    catch an error a graph raises at run time, and nothing it raises may come from traced
    tensor code. A refusal raises GraphError from the body and again here, outside the
    user's handlers, so catching it there does not hide it."""
    if current_graph() is None:
        _GUARDS.append(None)
        try:
            yield
        finally:
            _GUARDS.pop()
        return
    guard = _TryGuard(catches)
    _GUARDS.append(guard)
    try:
        yield
    finally:
        _GUARDS.pop()
        if _REFUSALS[0] != guard.refusals:
            raise GraphError(_REFUSALS[1])


def node_mark():
    """Before a ``try``/``finally`` without ``except`` clauses: where its body's nodes
    start (the graph being traced and its length), for ``finally_block``."""
    graph = current_graph()
    return None if graph is None else (graph, len(graph.nodes))


# ops that may raise when the graph runs, on the values (a singular matrix, an index out
# of range, a staged check); ops on static shapes are checked while tracing
_RAISING = frozenset({"inverse", "cholesky", "cholesky_inverse", "cholesky_solve",
                      "lu_solve", "triangular_solve", "assert_true", "index_select", "gather",
                      "take", "take_along_dim", "embedding", "scatter", "scatter_add",
                      "index_add", "index_copy", "index_fill", "index_put", "bincount"})
_INDEXING = frozenset({"getitem", "setitem"})
_LINALG_QUIET = frozenset({"linalg_vector_norm", "linalg_matrix_norm", "linalg_norm",
                           "linalg_det", "linalg_slogdet", "linalg_cross", "linalg_vecdot",
                           "linalg_matmul", "linalg_multi_dot", "linalg_diagonal",
                           "linalg_vander", "linalg_solve_triangular", "linalg_matrix_exp",
                           "linalg_solve_ex", "linalg_inv_ex", "linalg_cholesky_ex",
                           "linalg_lu_factor_ex", "linalg_ldl_factor_ex"})


def _holds_node(value) -> bool:
    if isinstance(value, (tuple, list)):
        return any(_holds_node(v) for v in value)
    if isinstance(value, slice):
        return any(_holds_node(v) for v in (value.start, value.stop, value.step))
    return isinstance(value, Node)


def _may_raise(node) -> bool:
    op = node.op
    return op in _RAISING or op.startswith("checked_") or \
        (op.startswith("linalg_") and op not in _LINALG_QUIET) or \
        (op in _INDEXING and _holds_node(node.args[1:2]))


@contextlib.contextmanager
def finally_block(mark):
    """Around the ``finally`` block of a ``try`` that ``mark`` (``node_mark``) came before.
    When the graph runs, an error an op of the ``try`` body raises (a singular ``solve``,
    an index out of range) stops it there, where eager runs the ``finally`` block first: a
    block that adds an effect (print, an in-place write) after such an op refuses the
    trace (the call falls back). While an error raised during the trace passes through,
    nothing is checked."""
    graph = current_graph()
    if graph is None or mark is None or mark[0] is not graph or sys.exc_info()[0] is not None:
        yield
        return
    before = len(graph.nodes)
    location = user_location()
    yield
    if any(_may_raise(n) for node in graph.nodes[mark[1]:before] for n in _walk(node)) and \
            any(node.impure for node in graph.nodes[before:]):
        raise GraphError(f"{format_location(location)}: a `finally` block with an effect "
                         f"(print, an in-place write, ...) after tensor operations that may "
                         f"raise when the graph runs: eager runs the block on that error, "
                         f"the graph would stop before it")


def _walk(node):
    yield node
    for sub in node.subgraphs:
        yield from sub.walk()


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


@contextlib.contextmanager
def suppress_traced(*exceptions):
    """``contextlib.suppress(*exceptions)`` entered while tracing: the ``try: ... except
    exceptions: pass`` it is (``try_guard``), so an error the graph raises in its body when
    it runs replays the call eagerly (``try_replays``), where eager suppresses it."""
    with try_guard(lambda: exceptions):
        try:
            with try_body():
                yield
        except exceptions:
            pass
