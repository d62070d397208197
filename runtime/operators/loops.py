"""``while`` and ``for`` statements of converted code.

    (i, s) = tg.while_stmt(loop_test, loop_body, (i, s), ('i', 's'))
    (s,) = tg.for_stmt(iterable, extra_test, loop_body, (s,), ('s',))

A loop runs as Python while its test is a Python value, and is staged into one ``while``
node from the moment its test becomes symbolic (``while True`` with a tensor ``break``;
a counter assigned under a tensor ``if``): iterations already run stay unrolled, the
rest loops in the graph. ``for`` over a symbolic tensor (its first dimension), over
``range``/``enumerate``/``zip`` with symbolic arguments, or over a list built in a tensor
loop is a ``while`` node over an index. ``for`` over a Python iterable is a Python loop;
when a ``break`` becomes tensor-dependent, the rest of a ``range`` becomes a ``while``
node and the rest of any other iterable is unrolled under ``cond`` guards.

Before staging, the body is traced once more to find lists grown by ``append`` (they
become ``TensorList``s) and variables first assigned in the loop (an error unless the
loop provably runs once: then the first iteration is peeled off).
"""
from __future__ import annotations

import torch

from ..control_flow import staged_cond
from ..subgraphs import KindChange
from ..while_loop import graph_mark, staged_while
from ..errors import BranchMismatchError, GraphError
from ..graph import Graph
from ..python_state import Watch
from ..source_info import format_location, user_location
from ..symbolic import (building, current_graph, is_symbolic, rebound_mark,
                        restore_rebound)
from ..tensor_list import TensorList, UnstackableElement, note_converted, stack_list
from .cells import restoring_cells
from .decisions import _LISTENERS, note
from .iterables import _RangeSource, as_source, is_symbolic_iterable
from . import outside_iterators, state_aliases
from .. import int_overflow
from .object_state import object_states, unwrap_state, wrap_state, wrapping
from .fresh_loop_objects import adopting, settle
from .special_values import Undefined


# --------------------------------------------------------------------------- while
def while_stmt(test, body, state, names):
    state = tuple(state)
    test, body = restoring_cells(test, names), restoring_cells(body, names)
    graph, mark = graph_mark(state)
    verdict = test(*state)
    runs = 0
    while not is_symbolic(verdict):
        if not verdict:
            if _LISTENERS:
                note("while", (runs, False))
            return state
        state = tuple(body(*state))
        runs += 1
        graph, mark = graph_mark(state)
        verdict = test(*state)
    if _LISTENERS and runs:
        note("while", (runs, True))          # unrolled so far, the rest is a while node
    if graph is not None and verdict._node.graph is graph:
        graph.rollback(mark)
    location = user_location()
    state_aliases.check(state, names, "a tensor-dependent loop")
    state = wrap_state(state)
    state = _prepare_state(wrapping(body), state, names, location, "while")
    fresh: set = set()          # a variable rebound to a new object per iteration
    out = staged_while(wrapping_test(test), adopting(wrapping(body), fresh), state,
                       names=names, location=location)
    return tuple(settle(list(unwrap_state(out)), fresh, state, format_location(location)))


def wrapping_test(test):
    return lambda *s: test(*unwrap_state(s))


# --------------------------------------------------------------------------- for
def for_stmt(iterable, extra_test, body, state, names):
    state = tuple(state)
    body = restoring_cells(body, names)
    if is_symbolic_iterable(iterable):
        return _staged_for(as_source(iterable), extra_test, body, state, names)
    if isinstance(iterable, range):
        return _python_range_for(iterable, extra_test, body, state, names)
    outside_iterators.refuse_loop(iterable)     # (the caller's generator: before a step)
    iterator = iter(iterable)
    runs = 0
    for item in iterator:
        if extra_test is not None:
            go = extra_test(*state)
            if is_symbolic(go):
                if _LISTENERS:
                    note("for", (runs, True))
                return _guarded_rest(go, item, iterator, extra_test, body, state, names)
            if not go:
                break
        state = tuple(body(item, *state))
        runs += 1
    if _LISTENERS:
        note("for", (runs, False))
    return state


def _python_range_for(r: range, extra_test, body, state, names):
    runs = 0
    for index, item in enumerate(r):
        if extra_test is not None:
            go = extra_test(*state)
            if is_symbolic(go):
                if _LISTENERS:
                    note("for", (runs, True))
                return _staged_for(_RangeSource(r[index:]), extra_test, body, state, names)
            if not go:
                break
        state = tuple(body(item, *state))
        runs += 1
    if _LISTENERS:
        note("for", (runs, False))
    return state


def _guarded_rest(go, item, iterator, extra_test, body, state, names):
    """The remaining iterations of a Python loop, each under a ``cond`` on the test."""
    def step(item, go, state):
        return staged_cond(go, lambda *s: tuple(body(item, *s)), lambda *s: tuple(s),
                           state, names=names)
    state_aliases.check(state, names, "a tensor-dependent break")
    state = step(item, go, state)
    for item in iterator:
        go = extra_test(*state)
        state = step(item, go, state) if is_symbolic(go) else \
            (tuple(body(item, *state)) if go else state)
    return state


def _staged_for(source, extra_test, body, state, names):
    location = user_location()
    state_aliases.check(state, names, "a tensor-dependent loop")
    n = source.length()
    state = wrap_state(state)
    wrapped_body = wrapping(body, skip=1)

    def loop_body(i, *s):
        int_overflow.mark_bound(i, 0, n if isinstance(n, int) else int_overflow.SIZE_HIGH)
        return (i + 1,) + tuple(wrapped_body(source.item(i), *s))   # (i + 1: unchecked)

    def loop_test(i, *s):
        more = i < n
        if extra_test is None:
            return more
        go = extra_test(*unwrap_state(s))
        if not is_symbolic(go):
            return more if go else False
        if not is_symbolic(more):
            return go if more else False
        return torch.logical_and(more, go)
    if isinstance(n, int) and n == 0:
        return unwrap_state(state)
    full = (0,) + state
    full_names = ("index",) + tuple(names)
    try:
        try:
            full = _prepare_state(loop_body, full, full_names, location, "for")
        except UnstackableElement:
            if not _unrollable(source, n):
                raise
            return _unrolled(source, n, extra_test, body, unwrap_state(state), names)
        out = staged_while(loop_test, loop_body, full, names=full_names, location=location)
    except (_NeedsPeel, KindChange) as problem:
        # a variable first assigned in the loop, or a number the loop turns into a tensor
        # of another kind: fine if the loop surely runs once -- unroll that iteration
        if not isinstance(n, int):
            raise problem if isinstance(problem, KindChange) else \
                _first_assigned(location, problem.name) from None
        for obj in object_states(state):    # (the refused body trace wrote its objects:
            obj.restore()                   # the peeled iteration starts from before)
        if extra_test is not None and not _truthy_python(extra_test(*unwrap_state(state))):
            return unwrap_state(state)
        full = loop_body(*full)                          # the first iteration, unrolled
        if n == 1:
            return unwrap_state(full[1:])
        full = _prepare_state(loop_body, full, full_names, location, "for")
        out = staged_while(loop_test, loop_body, full, names=full_names, location=location)
    return unwrap_state(tuple(out[1:]))


# the most iterations a loop of static length unrolls to keep a list of lists (each one
# copies the body into the graph)
_UNROLL_LIMIT = 256


def _unrollable(source, n) -> bool:
    return isinstance(n, int) and n <= _UNROLL_LIMIT and not isinstance(source, _RangeSource)


def _unrolled(source, n: int, extra_test, body, state, names):
    """A tensor ``for`` of static length whose body appends what no stack holds
    (BiLSTM-CRF's ``backpointers.append(bptrs_t)``, a list of ``.item()`` ints): the
    iterations unrolled, as over a Python sequence (the probe's effects were put back)."""
    iterator = (source.item(i) for i in range(n))
    for item in iterator:
        if extra_test is not None:
            go = extra_test(*state)
            if is_symbolic(go):
                return _guarded_rest(go, item, iterator, extra_test, body, state, names)
            if not go:
                break
        state = tuple(body(item, *state))
    return state


def _truthy_python(value) -> bool:
    return True if is_symbolic(value) else bool(value)


# --------------------------------------------------------------------------- staging prep
class _NeedsPeel(Exception):
    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


def _first_assigned(location, name: str) -> GraphError:
    return BranchMismatchError(
        f"{format_location(location)}: variable {name!r} is first assigned inside a "
        f"tensor-dependent loop and used after it; it is undefined if the loop runs zero "
        f"times. Assign it before the loop")


def _prepare_state(body, state, names, location, kind):
    """Lists the body appends to become TensorLists; a variable the body defines but that
    is undefined before the loop needs the first iteration peeled (or is an error)."""
    lists = [i for i, v in enumerate(state) if isinstance(v, list)]
    dicts = [i for i, v in enumerate(state) if _holds_lists(v)]
    undefined = [i for i, v in enumerate(state) if isinstance(v, Undefined)]
    objects = list(object_states(state))
    if not lists and not dicts and not undefined:
        return state
    graph = current_graph()
    if graph is None:
        return state
    probe_graph = Graph(parent=graph, name="probe")
    probe_state = tuple(_probe_copy(v) for v in state)
    mark = rebound_mark()
    watch = Watch(body)     # the probe's Python effects (a nonlocal counter) are put back
    try:
        with building(probe_graph):
            out = tuple(body(*probe_state))
    finally:
        restore_rebound(mark, probe_graph)
        probe_graph.forget_all()
        for obj in objects:
            obj.restore()
        if watch.changed() is not None:
            watch.restore()
    for i in undefined:
        if not isinstance(out[i], Undefined):
            name = names[i] if i < len(names) else f"#{i}"
            if kind == "for":
                raise _NeedsPeel(name)
            raise _first_assigned(location, name)
    new_state = list(state)
    for i in lists:
        before, after = state[i], out[i]
        if isinstance(after, (list, TensorList)) and _grew(before, after, probe_state[i]):
            new_state[i] = _as_tensor_list(before, after, location)
    for i in dicts:
        new_state[i] = _dict_of_tensor_lists(state[i], out[i], probe_state[i], location)
    return tuple(new_state)


def _holds_lists(value) -> bool:
    return type(value) is dict and any(isinstance(v, list) for v in value.values())


def _dict_of_tensor_lists(before: dict, after, probe: dict, location) -> dict:
    """A plain dict whose lists the body appends to (POT's ``log['err'].append(err)``): a
    new dict, those lists TensorLists (the dict and its lists are noted as converted: the
    call falls back if the caller can see them). Unchanged if the body rebinds it or
    grows none of its lists."""
    if after is not probe:
        return before
    grown = {k: v for k, v in before.items() if isinstance(v, list) and
             isinstance(after.get(k), (list, TensorList)) and _grew(v, after[k], probe[k])}
    if not grown:
        return before
    note_converted(before)
    return {k: _as_tensor_list(v, after[k], location) if k in grown else v
            for k, v in before.items()}


def _probe_copy(value):
    """What the probe trace of a body gets for a state value: lists and plain dicts
    copied (``L.append``, ``D["c"] += 1`` in the probe must not reach the real ones; an
    object's state is put back after the probe)."""
    if isinstance(value, list):
        return list(value)
    return {k: list(v) if isinstance(v, list) else v for k, v in value.items()} \
        if type(value) is dict else value


def _grew(before: list, after, probe=None) -> bool:
    if isinstance(after, TensorList):
        return True
    # appended to or popped from: the body's list is the one it was given (its items may
    # be replaced too, ``L[0] = v``), or a new longer list that starts with the same items
    if after is probe:
        return len(after) != len(before)
    return len(after) > len(before) and all(a is b for a, b in zip(before, after))


def _as_tensor_list(before: list, after, location) -> TensorList:
    """The list ``before`` as a TensorList, typed like what the body appended to it (or
    like its own items, for a list the body only pops from)."""
    note_converted(before)
    like = after if isinstance(after, TensorList) else \
        after[len(before)] if len(after) > len(before) else before[0]
    return stack_list(before, like)
