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
tensor code). An error class of the user's with a constructor of its own
(``BudgetExceeded(spent, limit)`` formatting ``f"{spent:.2f}"``), or any class called with
several arguments (``StepLimit("over", lim)``), is staged too (``raise_made``) where each
argument is a Python value (text, a number, None) or a number the graph computes
(``s[-1].item()``): the graph calls the class with the run's Python numbers, on the runs
that raise only, as eager does. Anything else raises ``GraphError``: the call falls back
to eager. An enclosing ``try`` whose handler catches ``E`` refuses the trace
(``effects.try_guard``).
"""
from __future__ import annotations

import builtins

import torch

from .. import graph_ops
from ..errors import GraphError, TracingError
from ..graph_ops import effect
from ..introspection import NUMBER_KINDS, kind_of
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
    _error_class(error, where)
    name = graph_ops.warning_name(error)        # (a class's importable name, or itself)
    check = torch.logical_not(test)
    if args is not None and (len(args) > 1 or not _default_constructor(error)):
        kinds = _called_with(error, args, where)
        dispatch_record(raise_made, (check, user_location(), name, kinds) + tuple(args), {})
        note_staged_error(error)
        return None
    message = _message(error, args, where)
    if needs_layout((message,)):                # an f-string of tensors, ...
        values, (text,) = layout((message,))
        dispatch_record(graph_ops.assert_true, (check, where, None) + values,
                        {"layout": text, "error": name})
    else:
        dispatch_record(graph_ops.assert_true, (check, where, message), {"error": name})
    note_staged_error(error)
    return None


def _error_class(error, where: str) -> None:
    """GraphError unless ``error`` is an exception class (``raise X`` of an instance is not
    staged)."""
    if not (isinstance(error, type) and issubclass(error, BaseException)):
        raise GraphError(f"{where}: raising {type(error).__name__} object under a tensor "
                         f"condition (a graph stages a raise of an error class called with "
                         f"its message)")


def _called_with(error: type, args, where: str) -> tuple:
    """The number kind of each of ``args`` that is a number the graph computes (None: a
    Python value passed as it is); GraphError for any other argument."""
    kinds = []
    for arg in args:
        if is_symbolic(arg) and arg.dim() == 0 and kind_of(arg) in NUMBER_KINDS:
            kinds.append(kind_of(arg))
        elif isinstance(arg, _PLAIN) and not contains_symbolic(arg):
            kinds.append(None)
        else:
            raise GraphError(f"{where}: raising {error.__name__} under a tensor condition "
                             f"with a {type(arg).__name__} argument (a graph stages the "
                             f"call of an error class with Python values and numbers only)")
    return tuple(kinds)


@effect
def raise_made(test: torch.Tensor, location, error, kinds: tuple, *args) -> None:
    """``raise error(*args)`` where ``test`` fails, with each arg of a number ``kinds``
    as that Python number (the user's constructor runs then, once, as eager's does: the
    error is raised as made, its note here, not made again by ``executor.located``)."""
    if not bool(test):
        kind = error if isinstance(error, type) else graph_ops.warning_class(error)
        failed = kind(*[NUMBER_KINDS[k](a.item()) if k is not None else a
                        for a, k in zip(args, kinds)])
        failed.add_note(f"{format_location(location)}: raised by the graph's check of this "
                        f"raise under a tensor condition")
        failed._tograph_located = True
        failed.location = location
        raise failed


def _message(error, args, where: str):
    """The one argument of ``error``'s call (None: none), or GraphError."""
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
