"""Python numbers the function never reads are keyed by their type, not their value.

    @to_graph
    def training_step(model, opt, batch, batch_idx):    # batch_idx: never read
        ...

A Python number argument is part of a call's signature by value (``api._leaf_key``): a
trace may branch on it, print it or bake it into the graph. Where the function's source
can never read it (``transpiler.analysis.unread_arguments``: the name is not loaded, or
only as ``n is None`` / ``isinstance(n, int)``), any value gives the same trace, so the
signature keys it by type only (``("unread", int)``) and one graph serves every value:
Lightning's ``batch_idx`` traced 30 times for 30 steps, now once. Inside a tuple, list or
dict argument, the elements the source never subscripts or unpacks to a name it loads are
keyed so too. Everything else is keyed by value, as before: a name loaded anywhere (on a
path the trace took or not, in a nested function, stored on an object), a ``*args`` or
``**kwargs`` parameter's numbers, a function that names ``locals``/``eval``/a frame,
``isinstance``/``type`` rebound in its globals, a module with forward hooks (which receive
the arguments), and a function without source.

A number only passed on as a plain argument (``self.shared_step(batch, batch_idx,
"train")``, ``helper(x, i=i)``) is unread where the function that name gives now (a
global or closure function the caller never rebinds locally, or a method of the class of
the bound ``self``) leaves it unread, 3 calls deep. That answer holds for those callees
only: after each trace it is asked again (``changed``), and a callee rebound to one that
reads the number (the guard of the old graph fails, and the new trace keys by value) is
keyed by value from then on.

Not seen: a callee reading its caller's frame (``sys._getframe(1).f_locals``).
"""
from __future__ import annotations

import inspect
import numbers
import types
from typing import Optional

import torch
import torch.utils._pytree as pytree

from transpiler import held_arguments
from transpiler.analysis import unread_arguments
from transpiler.pyct import parser

_NUMBERS = (int, float, bool)
_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
_CONTAINERS = (tuple, list, dict)


class Unread:
    """Which arguments of one function its source never reads, and the key that says so."""

    def __init__(self, positional: list, named: frozenset, spec: dict):
        self.positional = positional        # positional parameters' names, in order
        self.named = named                  # parameters a keyword binds
        self.spec = spec                    # name -> WHOLE or the element keys read
        whole = [n for n, what in spec.items() if what is unread_arguments.WHOLE]
        self.positions = tuple(i for i, n in enumerate(positional) if n in whole)
        self.names = tuple(n for n in whole if n in named)
        self.forwards = False               # (some through callees: see ``of``)

    def fast(self, args: tuple, kwargs: dict):
        """``(args, kwargs, types)`` for the fast path's key (``api._flat_key``): each
        unread top-level number replaced by None, and the types of what those positions
        hold (which tell a None passed from a number replaced)."""
        types = ()
        for i in self.positions:
            if i < len(args):
                cls = args[i].__class__
                types += (cls,)
                if cls in _NUMBERS:
                    args = args[:i] + (None,) + args[i + 1:]
        if kwargs:
            for name in self.names:
                cls = kwargs[name].__class__ if name in kwargs else None
                types += (cls,)
                if cls in _NUMBERS:
                    kwargs = {**kwargs, name: None}
        return args, kwargs, types

    def key(self, key: tuple, args: tuple, kwargs: dict, flat, held) -> tuple:
        """``key`` (``api.signature_of``'s: the spec, then one entry per flat leaf) with
        each unread number leaf keyed by its type."""
        masked = []
        offset = 0
        tops = [(i, self.positional[i] if i < len(self.positional) else None, a)
                for i, a in enumerate(args)]
        tops += [(k, k if k in self.named else None, v) for k, v in kwargs.items()]
        for position, name, value in tops:
            if position in held and held_arguments.leaf_count(value, True) == 1:
                offset += 1                 # (held whole: one leaf, keyed as an object)
                continue
            what = self.spec.get(name) if name is not None else None
            if what is None:
                offset += len(pytree.tree_leaves(value))
            elif what is unread_arguments.WHOLE:
                offset = _mask(value, offset, flat, masked)
            elif type(value) in _CONTAINERS:
                items = value.items() if type(value) is dict else enumerate(value)
                for element_key, element in items:
                    if element_key in what:
                        offset += len(pytree.tree_leaves(element))
                    else:
                        offset = _mask(element, offset, flat, masked)
            else:
                offset += len(pytree.tree_leaves(value))
        if not masked or offset > len(flat):
            return key
        key = list(key)
        for index in masked:
            key[1 + index] = ("unread", type(flat[index]))
        return tuple(key)


def masked(key: tuple) -> frozenset:
    """The flat leaves a signature key holds by type only (``Unread.key``)."""
    return frozenset(i - 1 for i, k in enumerate(key)
                     if k.__class__ is tuple and len(k) == 2 and k[0] == "unread")


_KNOWN = {id(c) for c in (isinstance, type, int, float, bool, complex, str, bytes, tuple,
                         list, dict, numbers.Number, numbers.Integral, numbers.Real,
                         numbers.Complex, torch.Tensor)}


def _rebound(function) -> bool:
    """Whether a name the type questions rely on (``isinstance``, ``int``...) is a global
    or closure value of ``function`` other than the built-in one."""
    names = unread_arguments.QUESTIONS | unread_arguments.CLASSES
    scope = dict(getattr(function, "__globals__", {}))
    for name, cell in zip(function.__code__.co_freevars, function.__closure__ or ()):
        try:
            scope[name] = cell.cell_contents
        except ValueError:          # (an empty cell)
            scope[name] = None
    return any(name in scope and id(scope[name]) not in _KNOWN for name in names)


def _mask(value, offset: int, flat, masked: list) -> int:
    """Note the number leaves of ``value`` (from ``offset`` in ``flat``): the next offset."""
    for leaf in pytree.tree_leaves(value):
        if offset < len(flat) and flat[offset] is leaf and type(leaf) in _NUMBERS:
            masked.append(offset)
        offset += 1
    return offset


def of(target, depth: int = 0) -> Optional[Unread]:
    """The unread arguments of ``target`` (a function or bound method with source, as
    ``api._python_function`` gives it); None when every argument may be read. A
    parameter only passed on to a function or method (``self.shared(batch, batch_idx)``)
    is unread where that callee, found now, leaves it unread (3 calls deep at most;
    ``forwards`` then says the answer holds for these callees only)."""
    function = getattr(target, "__func__", target)
    if not isinstance(function, types.FunctionType):
        return None
    try:
        node, _ = parser.parse_function(function)
        parameters = inspect.signature(target).parameters.values()
    except Exception:       # noqa: BLE001 - no source, no signature: all keyed by value
        return None
    spec = unread_arguments.unread(node)
    if _rebound(function):
        return None
    forwards = False            # (passed on: asked again after each trace, see api)
    for name, what in list(spec.items()):
        if isinstance(what, unread_arguments.Passed):
            del spec[name]
            forwards = True
            if depth < 3 and all(_unread_in(target, call, slot, depth) for call, slot in what):
                spec[name] = unread_arguments.WHOLE
    positional = [p.name for p in parameters if p.kind in _POSITIONAL]
    named = frozenset(p.name for p in parameters if p.kind in (
        inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY))
    spec = {name: what for name, what in spec.items() if name in named or name in positional}
    if not spec:            # (nothing unread: by value, with no callee to ask again)
        return None
    unread = Unread(positional, named, spec)
    unread.forwards = forwards
    return unread


def changed(unread: Unread, target) -> bool:
    """Whether ``unread``, found through callees (``forwards``), differs for the callees
    that ``target``'s names give now (asked after each trace: keys are the trace's)."""
    if not unread.forwards:
        return False
    fresh = of(target)
    return (fresh.spec if fresh is not None else {}) != unread.spec


def _unread_in(target, call, slot, depth: int) -> bool:
    """Whether the callee ``call`` names, in ``target``'s scope now, leaves its argument
    ``slot`` (a position or keyword) unread."""
    callee = _callee(target, call)
    found = of(callee, depth + 1) if callee is not None else None
    if found is None:
        return False
    name = slot if isinstance(slot, str) else (
        found.positional[slot] if slot < len(found.positional) else None)
    if isinstance(slot, str) and slot not in found.named:
        return False
    return found.spec.get(name) is unread_arguments.WHOLE


def _callee(target, call):
    """The Python function or bound method ``('name', f)`` / ``('attr', self, m)`` calls."""
    function = getattr(target, "__func__", target)
    if call[0] == "name":
        scope = dict(zip(function.__code__.co_freevars, function.__closure__ or ()))
        if call[1] in scope:
            try:
                found = scope[call[1]].cell_contents
            except ValueError:
                return None
        else:
            found = function.__globals__.get(call[1])
        return found if isinstance(found, types.FunctionType) else None
    owner = getattr(target, "__self__", None)
    first = next(iter(inspect.signature(function).parameters), None)
    if owner is None or call[1] != first or call[2] in getattr(owner, "__dict__", {}):
        return None
    found = inspect.getattr_static(type(owner), call[2], None)
    return found.__get__(owner) if isinstance(found, types.FunctionType) else None
