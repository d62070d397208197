"""``all(t)`` and ``any(t)`` of a traced tensor (``if all(eos_reached): break``).

Python iterates a 1-D tensor's items and tests each one's truth (non-zero, NaN included),
so ``all(t)`` is ``t.all()`` and ``any(t)`` is ``t.any()``, answered when the graph runs
(a bool stand-in, so a tensor ``if``/``break`` on it is converted). A list or tuple of
traced 0-d values (``all([a > 0, b > 0])``) is reduced the same way. Anything else
(a 0-d tensor, rows of a 2-D one: eager raises) is left to Python's own builtin.

A generator (``any((x > t).all() for t in thresholds)``) is consumed as Python would, one
item at a time, and stops at the first deciding Python value. At the first traced item
Python would stop or go on by its value, known only when the graph runs: the rest of the
items are evaluated while tracing (a Python value among them that decides makes the answer
that value) and the traced ones reduced as a list is. Eager may not evaluate those items,
so evaluating them must have no effect a graph would show: a change to Python state
(``region_effects.run_watched``), an impure node (a print, an in-place write), or an
error raises GraphError, which falls back.
"""
from __future__ import annotations

import builtins
import dis
import types

import torch

from ..errors import GraphError
from ..introspection import kind_of, mark
from ..region_effects import run_watched
from ..source_info import format_location, user_location
from ..symbolic import current_graph, is_symbolic


def _rank(t):
    shape = t._node.meta.shape
    return None if shape is None else len(shape)


def _items_tensor(value):
    """The 1-D tensor whose items ``all``/``any`` would test, or None."""
    if is_symbolic(value) and kind_of(value) is None and _rank(value) == 1:
        return value
    if isinstance(value, (list, tuple)) and value and \
            builtins.any(is_symbolic(v) for v in value) and \
            builtins.all((is_symbolic(v) and _rank(v) == 0) or
                         isinstance(v, (bool, int, float)) for v in value):
        return torch.stack([torch.as_tensor(v != 0) if is_symbolic(v) else
                            torch.tensor(builtins.bool(v)) for v in value])
    return None


def _impure(nodes) -> bool:
    return builtins.any(n.impure or builtins.any(_impure(g.nodes) for g in n.subgraphs)
                        for n in nodes)


def _refuse(why: str) -> GraphError:
    location = user_location()
    error = GraphError(f"{format_location(location)}: {why}")
    error.location = location
    return error


def _rest(items, first):
    """``first`` and the rest of generator ``items``, evaluated while tracing; GraphError
    if evaluating them showed an effect (eager may stop before them)."""
    graph = current_graph()
    start = len(graph.nodes)
    code, frame = items.gi_code, items.gi_frame
    if builtins.any(i.opname == "STORE_DEREF" for i in dis.get_instructions(code)):
        raise _refuse("any()/all() of a generator that binds a name (:=): eager binds it "
                      "for the items it evaluates, known only when the graph runs")
    if "print" in code.co_names:    # (a generator's own calls are not converted: staged)
        raise _refuse("any()/all() of a generator that prints: an effect eager runs only "
                      "for the items it evaluates, known only when the graph runs")
    # what the generator's code reaches (its free variables and globals), watched
    bound = frame.f_locals
    view = types.FunctionType(code, frame.f_globals, closure=builtins.tuple(
        types.CellType(bound[n]) if n in bound else types.CellType()
        for n in code.co_freevars))

    def consume():
        view                    # noqa: B018 - in the closure: the watch reaches it
        return builtins.list(items)
    try:
        rest = run_watched(consume, (), "the items after a traced one in any()/all() of "
                           "a generator")
    except GraphError:          # (an effect, or bool() of a traced value in an item)
        raise
    except Exception as e:      # noqa: BLE001 - eager may stop before the failing item
        raise _refuse(f"any()/all() of a generator: an item after a traced one raised "
                      f"{type(e).__name__} while tracing (eager evaluates it only if the "
                      f"traced one does not decide)") from e
    if _impure(graph.nodes[start:]):
        raise _refuse("any()/all() of a generator: an item after a traced one has an "
                      "effect (a print, an in-place write) that eager runs only if the "
                      "traced one does not decide")
    return [first] + rest


def _of_generator(method, items):
    """``any``/``all`` of generator ``items``: Python's while the items are Python values."""
    stop = method == "any"          # the truth value that decides
    for item in items:
        if not is_symbolic(item):
            if builtins.bool(item) is stop:
                return stop
            continue
        seen = _rest(items, item)
        if builtins.any(builtins.bool(v) is stop for v in seen if not is_symbolic(v)):
            return stop
        traced = _items_tensor([v for v in seen if is_symbolic(v)])
        if traced is None:          # (eager's bool() of it raises unless one element)
            raise _refuse(f"{method}() of a generator yielding a traced tensor that is not "
                          f"0-d: its truth is known only when the graph runs")
        result = getattr(traced, method)()
        mark(result, "bool")
        return result
    return not stop


def of_generator(f, args, kwargs) -> bool:
    """``all``/``any`` of a generator while tracing (its items may be traced)."""
    return f in (builtins.all, builtins.any) and len(args) == 1 and not kwargs and \
        isinstance(args[0], types.GeneratorType) and current_graph() is not None


def _reduce(python, method):
    def call(*args, **kwargs):
        if of_generator(python, args, kwargs):
            return _of_generator(method, args[0])
        items = _items_tensor(args[0]) if len(args) == 1 and not kwargs else None
        if items is None:
            return python(*args, **kwargs)
        result = getattr(items, method)()
        mark(result, "bool")
        return result
    return call


all_of = _reduce(builtins.all, "all")
any_of = _reduce(builtins.any, "any")
