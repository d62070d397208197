"""``if test: raise E(msg)`` in converted code: ``tg.raise_if(test, parts)``.

``parts()`` gives ``(E, args)``: the error class and the arguments of its call, or
``(X, None)`` for ``raise X``. Python semantics: a Python ``test`` raises ``E(*args)`` (or
``X``) when true, as the ``if`` would. Staged semantics: a traced ``test`` becomes a check
the graph makes on every run (``graph_ops.assert_true``), raising eager's error type with
eager's message where the test holds, the user's ``raise`` line in a note (as a failing
``assert`` does); the code after the check is the other branch.

Staged only when it raises what eager raises: ``E`` a builtin exception or a class whose
constructor is a builtin exception's (``class MyError(ValueError): pass``; a custom
``__str__`` is fine: the graph calls the same class with the same argument), one
argument at most (text made from traced values, ``f"{x.max()}"``, is rendered on each run
that fails), and ``parts`` adding no effect to the graph (its assignments are pure
tensor code). Anything else raises ``GraphError``: the call falls back to eager. An
enclosing ``try`` whose handler catches ``E`` refuses the trace (``effects.try_guard``).
"""
from __future__ import annotations

import builtins

import torch

from .. import graph_ops
from ..errors import GraphError, TracingError
from ..source_info import format_location, user_location
from ..subgraphs import _check_pred
from ..symbolic import contains_symbolic, current_graph, dispatch_record, is_symbolic
from .effects import note_staged_error
from .text import DeferredText, layout, needs_layout

_PLAIN = (str, int, float, bool, bytes, type(None))


def raise_if(test, parts) -> None:
    """``if test: raise`` what ``parts()`` names (see the module docstring)."""
    if not is_symbolic(test):
        if test:
            error, args = parts()
            raise error if args is None else error(*args)
        return None
    where = format_location(user_location())     # (the user's ``raise``)
    _check_pred(test, where)
    graph = current_graph()
    before = len(graph.nodes)
    try:
        error, args = parts()
    except (TracingError, GraphError) as e:
        raise GraphError(f"{where}: the error raised under a tensor condition is made "
                         f"from a traced value the graph cannot repeat ({e})") from e
    if any(node.impure for node in graph.nodes[before:]):
        raise GraphError(f"{where}: the code before a raise under a tensor condition has an "
                         f"effect (it would act on every run, not only where it raises)")
    message = _message(error, args, where)
    name = graph_ops.warning_name(error)        # (a class's importable name, or itself)
    check = torch.logical_not(test)
    if needs_layout((message,)):                # an f-string of tensors, ...
        values, (text,) = layout((message,))
        dispatch_record(graph_ops.assert_true, (check, where, None) + values,
                        {"layout": text, "error": name})
    else:
        dispatch_record(graph_ops.assert_true, (check, where, message), {"error": name})
    note_staged_error(error)
    return None


def _message(error, args, where: str):
    """The one argument of ``error``'s call (None: none), or GraphError."""
    if not (isinstance(error, type) and issubclass(error, BaseException)):
        raise GraphError(f"{where}: raising {type(error).__name__} object under a tensor "
                         f"condition (a graph stages a raise of an error class called with "
                         f"its message)")
    if not _default_constructor(error):
        raise GraphError(f"{where}: raising {error.__name__} under a tensor condition: its "
                         f"constructor is its own, which a graph does not call for it")
    args = () if args is None else args         # (``raise E``: ``raise E()``)
    if len(args) > 1 or (args and args[0] is None):
        raise GraphError(f"{where}: raising {error.__name__} with these arguments under a "
                         f"tensor condition (a graph stages one message or none)")
    if not args:
        return None
    (message,) = args
    if isinstance(message, DeferredText) or (isinstance(message, _PLAIN) and
                                             not contains_symbolic(message)):
        return message
    raise GraphError(f"{where}: raising {error.__name__} of a {type(message).__name__} under "
                     f"a tensor condition (a graph stages text or a Python number)")


def _default_constructor(error: type) -> bool:
    """Whether ``error.__new__`` and ``__init__`` are a builtin exception's own."""
    for method in ("__new__", "__init__"):
        owner = next(c for c in error.__mro__ if method in c.__dict__)
        if getattr(builtins, owner.__name__, None) is not owner:
            return False
    return True
