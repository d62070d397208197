"""Lists and dicts in a tensor region's state that another name also reaches.

    lst = [x]
    pair = (lst, lst)        # or: M = lst; d = {"l": lst}; o.items = lst; helper(lst)
    if x.sum() > 0:
        lst.append(x * 2)    # eager: pair sees the new item
    return pair

The state variables of a tensor ``if``/loop flow through its node as pytrees: a plain
list or dict among them (or inside them, or held by an object among them) comes out as a
new container holding the node's outputs. Where nothing else reaches the old container
that is exact. Where another name does -- a local of a running converted frame (or what
it holds: a tuple, a dict, an object's attribute), the caller's variable a helper got
as its argument, the same container twice in the state -- that name would keep the old
contents while eager's sees the change: silently wrong, so ``check`` raises GraphError
(the call falls back). Objects keep their identity through a region (``object_state``):
a container reached through one of the state's objects is not an alias. A local that
an enclosing ``if``/loop operator is threading through its own state (the same variable,
rebound when that operator returns) is not an alias either. The arguments of the
function being traced are reached by its caller's names (``d`` of ``f(x, d)``): a list or
dict among them (or held by them) in a region's state is an alias too (``arguments``);
so is one that existed before the call, reached through the traced function's globals,
closure or mutable defaults (``existing``: ``s = STATE; if t: s["best"] = v``), or a
global that a converted helper on the stack names (``_globals_used``).
"""
from __future__ import annotations

import contextlib
import sys
from typing import Dict, Tuple

import torch

from ..errors import GraphError
from ..outputs import items_of, reachable
from ..source_info import format_location, user_location
from . import argument_containers
from .held_containers import is_held
from .object_state import _attributes, is_plain_object
from ..threads import PerThreadList

_GENERATED = "<tograph generated"
_OPERATORS = ("if_stmt", "while_stmt", "for_stmt")
_HERE = __file__.rsplit("/", 1)[0]
_ARGUMENTS = PerThreadList()   # (per thread) (name, value): what traced calls were given
_EXISTING = PerThreadList()    # (per thread) (label, value): what existed before the call


@contextlib.contextmanager
def arguments(pairs):
    """While tracing a function: its arguments (``(name, value)`` pairs), which its caller
    still holds after the call -- a list or dict among them that a tensor region changes
    would keep the old contents there."""
    start = len(_ARGUMENTS)
    _ARGUMENTS.extend((f"the caller's argument {name!r}", v) for name, v in pairs)
    try:
        yield
    finally:
        del _ARGUMENTS[start:]


@contextlib.contextmanager
def existing(pairs):
    """While tracing a function: what it reaches that existed before the call and
    outlives it (``(label, value)``: its globals, closure values, mutable defaults). A
    list or dict among them that a region's state holds through a local (``s = STATE``,
    ``def f(x, s={...})``) and changes would keep the old contents there: the region
    hands the local a new container (``check``)."""
    start = len(_EXISTING)
    _EXISTING.extend(pairs)
    try:
        yield
    finally:
        del _EXISTING[start:]


def check(state, names, kind: str, defer: bool = False):
    """GraphError if a plain list or dict in ``state`` (a tensor region's state
    variables, named ``names``) is reached by another name (see the module docstring).

    ``defer``: return those containers instead, as ``(container, label, alias)``, for
    ``confirm`` to judge after the region (a ``cond`` hands back a container itself where
    both paths leave that very object in place)."""
    pending = []
    containers: Dict[int, Tuple[str, object]] = {}
    keep: Dict[int, object] = {}        # the state's objects: they keep their identity
    twice = []

    def collect(v, label, held=False):
        kind_ = type(v)
        if (held or argument_containers.held(v)) and is_held(v, is_plain_object):
            # carried in place (held_containers; the caller's: argument_containers)
            if id(v) in keep:
                return
            keep[id(v)] = v
            for x in (dict.values(v) if kind_ is dict else v):
                collect(x, label, True)
        elif kind_ is list or kind_ is dict:
            if id(v) in containers:
                twice.append((label, v))
                return
            containers[id(v)] = (label, v)
            for x in (dict.values(v) if kind_ is dict else v):
                collect(x, label)
        elif kind_ is tuple:
            for x in v:
                collect(x, label)
        elif is_plain_object(v) and id(v) not in keep:
            keep[id(v)] = v
            for x in _attributes(v).values():
                collect(x, label, True)
            if isinstance(v, dict):
                for _, x in items_of(v):
                    collect(x, label, True)
    labels = [str(n) for n in names] if len(names) == len(state) else ["a variable"] * len(state)
    for value, label in zip(state, labels):
        collect(value, label)
    if not containers:
        return
    if twice:
        if not defer:
            _refuse(kind, twice[0][0], "another state variable")
        pending += [(v, label, "another state variable") for label, v in twice]
    roots = _roots()
    stop = set(containers) | set(keep)
    for v in reachable([v for _, v in roots], stop=stop):
        if id(v) in containers:
            alias = next(name for name, root in roots
                         if any(w is v for w in reachable([root], stop=stop)))
            alias = alias if " " in alias else repr(alias)     # (a local's name: quoted)
            if not defer:
                _refuse(kind, containers[id(v)][0], alias, v)
            pending.append((v, containers[id(v)][0], alias))
    return pending


def confirm(pending, out, kind: str) -> None:
    """After a region: GraphError (as ``check``) unless each container ``check`` deferred
    is still the very object in the region's results ``out`` (both paths left it in
    place; what they changed in it was carried back into it)."""
    if not pending:
        return
    held = {id(v) for v in reachable(list(out)) if type(v) in (list, dict)}
    for container, label, alias in pending:
        if id(container) not in held:
            _refuse(kind, label, alias, container)


def _roots(arguments: bool = True):
    """(name, value) of the locals of the running converted frames, but for those an
    ``if``/loop operator called from the frame is threading through its state; and
    (``arguments``) the traced function's arguments, which its caller holds."""
    threaded: Dict[int, set] = {}
    frames = []
    frame = sys._getframe(2)
    while frame is not None:
        code = frame.f_code
        if code.co_name in _OPERATORS and code.co_filename.startswith(_HERE) and \
                frame.f_back is not None:
            names = frame.f_locals.get("names") or ()
            threaded.setdefault(id(frame.f_back), set()).update(str(n) for n in names)
        elif code.co_filename.startswith(_GENERATED):
            frames.append(frame)
        frame = frame.f_back
    return [(name, value) for f in frames for name, value in f.f_locals.items()
            if name not in threaded.get(id(f), ()) and  # (not our markers: Undefined, ...)
            (type(value).__module__.split(".")[0] not in ("runtime", "transpiler") or
             isinstance(value, torch.Tensor))] + \
        (list(_ARGUMENTS) + list(_EXISTING) + _globals_used(frames) if arguments else [])


def _globals_used(frames):
    """(label, value) of the module globals the running converted frames name (a helper's
    ``s = STATE`` too): they existed before the call and outlive it."""
    return [(f"the global {name!r}", f.f_globals[name]) for f in frames
            for name in f.f_code.co_names if name in f.f_globals]


class CallerContainer(GraphError):
    """The refusal of a region changing ``container``, which the caller reaches (a list or
    dict argument: the front door traces again with it held, ``held_arguments``)."""
    container = None


def _refuse(kind: str, label: str, alias: str, container=None) -> None:
    error = (GraphError if container is None or not alias.startswith("the caller") else
             CallerContainer)(
        f"{format_location(user_location())}: a list or dict in variable {label!r} is "
        f"changed by {kind} and is also reached as {alias}; the graph hands back a new "
        f"container, so {alias} would keep the old contents")
    error.container = container
    raise error
