"""Python effects of a staged region that its graph would not repeat.

A tensor ``if`` traces both branches and a tensor loop traces its body once, so Python
code in them runs once per trace, not once per taken path or iteration: a context
manager's ``__enter__`` counting entries, an inner function bumping a ``nonlocal``, a
helper appending to a list it closes over. The region's declared state (the variables
the converter passes in and out, objects whose attributes it assigns, lists it appends to)
is carried by the graph; any other change to what the region's code can reach is an
effect the graph cannot repeat, so tracing stops with a ``GraphError`` naming the line
that reaches the changed value (the ``with`` line, the call line), which falls back.
"""
from __future__ import annotations

import builtins
import functools
import re
import types
from typing import Callable, Optional

import torch
import torch.utils._pytree as pytree

from . import builtin_state, region_state
from .errors import GraphError
from .python_state import Watch, difference, fingerprint, is_tensor, line_naming
from .source_info import _is_library, format_location, map_location, user_location


_PLAIN = (bool, int, float, complex, str, bytes)


def run_watched(fn: Callable, args: tuple, kind: str, carry: Optional[list] = None,
                numbers_only: bool = False, names=()):
    """``fn(*args)``, raising GraphError if it changed Python state it does not carry.
    ``carry``: a list to receive (Location, new value) of changes the region can carry
    instead (``region_state``; the state is put back as before), numbers and tensors only
    if ``numbers_only``; ``names``: the region's state variables."""
    watch = Watch(fn, _carried(args), _held(args, names))
    try:
        out = fn(*args)
    except BaseException:
        watch.restore()     # (a ``with`` the error passes through sees the state before)
        raise
    root = watch.changed()
    if root is not None and carry is not None:
        found = region_state.changes(watch, numbers_only, names)
        if found is not None and not region_state.held_by(found, out):
            carry.extend(found)
            return out
    if root is not None:
        now = root.current()
        where = "" if now is not root.value else \
            difference(root.print, fingerprint(now, carried=watch.carried))
        location = _location(root)
        error = GraphError(
            f"{format_location(location)}: {root.describe(where)} changes while tracing "
            f"{kind}: tensor-dependent control flow runs its Python code once per trace, not "
            f"once per path taken or iteration, so the graph cannot repeat this Python side "
            f"effect")
        error.location = location
        # a module's own state (its mode, a flag): the line said even when a counter the
        # region's condition reads was the first trace's reason (``transpiler.api``)
        error.names_its_line = isinstance(now, torch.nn.Module)
        watch.restore()
        raise error
    return out


def _carried(args) -> list:
    """The objects whose attributes the region carries as state (``ObjectState``)."""
    from .operators.held_containers import HeldContainer
    from .operators.object_state import ObjectState
    found, stack = [], [args]
    while stack:
        v = stack.pop()
        if isinstance(v, ObjectState):
            found.append(v.obj)
            stack.extend(v.attrs.values())
            stack.extend((getattr(v, "items", None) or {}).values())
        elif isinstance(v, HeldContainer):      # (a carried object's list of objects)
            found.append(v.obj)
            stack.extend(v.items.values() if isinstance(v.items, dict) else v.items)
        elif isinstance(v, (tuple, list)):
            stack.extend(v)
        elif isinstance(v, dict):
            stack.extend(v.values())
    return found


_IMMUTABLE = (str, bytes, int, float, complex, bool, tuple, frozenset, range, slice,
              type(None), memoryview, type({}.keys()), type({}.values()), type({}.items()),
              types.MappingProxyType, re.Pattern, re.Match)


def refuse_unseen_call(f, args) -> None:
    """While a tensor branch or loop body is traced: a method called on an object whose
    state the watch cannot see (a C object with no ``__dict__`` that ``builtin_state``
    does not know: a hash's ``update``, a lock's ``acquire``; ``next`` of such an
    iterator) may be an effect the graph would not repeat per path or iteration, so it
    raises GraphError (the call falls back). So does a call of an ``lru_cache``/``cache``
    function: its cache fills per path traced, not per path taken."""
    from .symbolic import current_graph
    graph = current_graph()
    if graph is None or graph.parent is None or _pure_query(f):
        return
    if f is builtins.next and args:
        owner, name = args[0], "next"
    elif isinstance(getattr(f, "__func__", f), functools._lru_cache_wrapper):
        owner, name = getattr(f, "__func__", f), "__call__"     # its cache: hidden state
    elif isinstance(f, (types.BuiltinMethodType, types.MethodWrapperType)):
        owner, name = getattr(f, "__self__", None), getattr(f, "__name__", "?")
    else:
        return
    if owner is None or not (name == "__call__" or _unseen(owner)):
        return
    location = user_location()
    error = GraphError(
        f"{format_location(location)}: calls {type(owner).__name__}.{name} in tensor-"
        f"dependent control flow, on an object whose state the graph cannot follow: the "
        f"region runs its Python code once per trace, not once per path taken or "
        f"iteration")
    error.location = location
    raise error


# C functions that only answer a question about the interpreter's state, the same on
# every path (torchvision's ``_is_tracing()``: None outside ``torch.jit.trace``)
_PURE_QUERIES = (torch._C._get_tracing_state,)


def _pure_query(f) -> bool:
    return any(f is q for q in _PURE_QUERIES)


def _unseen(owner) -> bool:
    cls = type(owner)
    if isinstance(owner, _IMMUTABLE + (types.ModuleType, type, list, dict, set, bytearray)) \
            or is_tensor(owner) or hasattr(owner, "__dict__") or \
            cls.__module__.split(".")[0] in ("runtime", "transpiler", "torch"):
        return False
    return builtin_state.state_of(owner) is None


def _held(args, names) -> list:
    """(name, object) of the non-tensor values passed to a region that it may change
    without the graph carrying the change: a set, an iterator, a numpy array (its lists
    and dicts are rebuilt for each trace, and objects' attributes are ``ObjectState``)."""
    held = []
    for i, arg in enumerate(args):
        name = names[i] if i < len(names) else f"#{i}"
        for leaf in pytree.tree_leaves(arg):
            if not (leaf is None or isinstance(leaf, _PLAIN) or is_tensor(leaf)):
                held.append((name, leaf))
    return held


def _location(root):
    for code, name in root.path:
        if _is_library(code.co_filename):
            continue
        line = line_naming(code, name)
        if line is not None:
            return map_location(code.co_filename, line) or (code.co_filename, line)
    return None
