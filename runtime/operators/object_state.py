"""Python objects whose state tensor-dependent control flow changes.

    o = Namespace(v=x)
    if x.sum() > 0:
        o.v = x * 2          # a tensor branch assigns an attribute of a local object
        d["k"] = x + 1       # ... or an item of an OrderedDict / dict subclass

Such an object is part of the state of the ``if``/loop. While staged, it travels as an
``ObjectState``: a pytree node whose leaves are the object's attribute values (its
``__dict__`` and set ``__slots__``) and, for a dict subclass (``OrderedDict``,
``defaultdict``, ``ModelOutput``-like classes), its items in order; objects it holds are
ObjectStates too. Unflattening one makes the (same) object's state exactly that --
attributes and keys another path added are removed, ``__setattr__``/``__setitem__``
overrides bypassed -- so each branch or loop body trace starts from the state before the
construct, and after the ``cond``/``while`` node the object holds its outputs. The object
keeps its identity and class throughout. A key or attribute present on one path only is
a structure mismatch (``BranchMismatchError``): the call falls back.
"""
from __future__ import annotations

import collections
import itertools
import types
from typing import Optional

import torch
import torch.utils._pytree as pytree

from ..outputs import items_of, slot_names
from ..tensor_list import TensorList
from . import argument_containers
from .held_containers import HeldContainer, is_held, wrap_held


class ObjectState:
    """An object and a frozen copy of its state: its attributes and, for a dict subclass
    (``OrderedDict``, ``defaultdict``, a user's ``dict`` subclass), its items in order.
    Objects held in attributes or items are ObjectStates too (a cache object's config)."""

    __tograph_object_state__ = True     # (``subgraphs`` knows it by this mark)

    def __init__(self, obj, attrs: dict, items: Optional[dict] = None):
        self.obj = obj
        self.attrs = attrs
        self.items = items

    @classmethod
    def of(cls, obj, _active: frozenset = frozenset()) -> "ObjectState":
        active = _active | {id(obj)}

        def wrap(v):
            if is_plain_object(v) and id(v) not in active:
                return cls.of(v, active)
            if is_held(v, is_plain_object):       # (a cache's list of layers)
                return wrap_held(v, wrap)
            return v
        attrs = {k: wrap(v) for k, v in _attributes(obj).items()}
        items = {k: wrap(v) for k, v in items_of(obj)} if isinstance(obj, dict) else None
        return cls(obj, attrs, items)

    def restore(self) -> None:
        """Put the frozen state back (after a trace that must leave no trace)."""
        for v in itertools.chain(self.attrs.values(), (self.items or {}).values()):
            if isinstance(v, (ObjectState, HeldContainer)):
                v.restore()
        _set_state(self.obj, self.attrs, self.items)


class _Same:
    """The object in a pytree context: equal to itself only (a dataclass's ``__eq__``
    would compare tensors)."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __eq__(self, other) -> bool:
        return isinstance(other, _Same) and other.obj is self.obj

    def __hash__(self) -> int:
        return id(self.obj)

    def __repr__(self) -> str:
        return f"<{type(self.obj).__name__} object>"


def _plain(v):
    if isinstance(v, HeldContainer):
        return v.plain()
    return v.obj if isinstance(v, ObjectState) else v


def _set_state(obj, attrs: dict, items: Optional[dict]) -> None:
    """Make ``obj``'s attributes (and items) exactly these, bypassing ``__setattr__`` and
    ``__setitem__`` (a key or attribute one path added is gone on the other)."""
    slots = slot_names(type(obj))
    current = getattr(obj, "__dict__", None)
    if current is not None:
        for key in [k for k in current if k not in attrs]:
            del current[key]
        current.update({k: _plain(v) for k, v in attrs.items() if k not in slots})
    for name in slots:
        if name in attrs:
            object.__setattr__(obj, name, _plain(attrs[name]))
        elif hasattr(obj, name):
            object.__delattr__(obj, name)
    if items is not None:
        base = collections.OrderedDict if isinstance(obj, collections.OrderedDict) else dict
        if [k for k, _ in items_of(obj)] != list(items):
            base.clear(obj)
        for k, v in items.items():
            base.__setitem__(obj, k, _plain(v))


def _attributes(obj) -> dict:
    """``obj``'s attributes: its ``__dict__`` and the slots it has set."""
    attrs = dict(getattr(obj, "__dict__", {}))
    for name in slot_names(type(obj)):
        if hasattr(obj, name):
            attrs[name] = getattr(obj, name)
    return attrs


def _flatten(state: ObjectState):
    keys = sorted(state.attrs)
    items = state.items or {}
    values = [state.attrs[k] for k in keys] + list(items.values())
    return values, (_Same(state.obj), tuple(keys),
                    None if state.items is None else tuple(items))


def _unflatten(values, context):
    same, keys, item_keys = context
    attrs = dict(zip(keys, values))
    items = None if item_keys is None else dict(zip(item_keys, values[len(keys):]))
    _set_state(same.obj, attrs, items)
    return ObjectState(same.obj, attrs, items)


def _flatten_with_keys(state: ObjectState):
    values, context = _flatten(state)
    keys = [pytree.GetAttrKey(k) for k in context[1]] + \
        [pytree.MappingKey(k) for k in (context[2] or ())]
    return list(zip(keys, values)), context


pytree.register_pytree_node(ObjectState, _flatten, _unflatten,
                            flatten_with_keys_fn=_flatten_with_keys)


def is_plain_object(value) -> bool:
    """An instance with a ``__dict__`` that is a value holder, not code or a module."""
    if isinstance(value, (torch.Tensor, torch.nn.Module, TensorList, type, types.ModuleType,
                          types.FunctionType, types.MethodType, types.BuiltinFunctionType)):
        return False
    if type(value).__module__.split(".")[0] == "runtime" and \
            not getattr(type(value), "__tograph_carried__", False):   # our own markers
        return False
    if isinstance(value, tuple):
        return False
    return isinstance(getattr(value, "__dict__", None), dict) or \
        (isinstance(value, dict) and type(value) is not dict) or \
        bool(slot_names(type(value)))       # a defaultdict; a class with __slots__ only


def _wrap(value):
    """``value`` with the plain objects it holds, itself or in lists, tuples and dicts
    (``d["k"].t = ...``, ``lst[0].t = ...`` in a branch), as ``ObjectState``s; ``value``
    itself when it holds none."""
    if is_plain_object(value):
        return ObjectState.of(value)
    if argument_containers.held(value):   # the caller's list: carried in place
        return wrap_held(value, _wrap)
    return _inside(value, _wrap)


def _unwrap(value):
    """``value`` with its ``ObjectState``s replaced by their objects (a container is
    rebuilt only when it held one)."""
    if isinstance(value, ObjectState):
        return value.obj
    if isinstance(value, HeldContainer):    # (the caller's list: argument_containers)
        return value.plain()
    return _inside(value, _unwrap)


def _inside(value, fn):
    """A plain list, tuple or dict with ``fn`` applied to its items, rebuilt only when an
    item changed (else ``value`` itself, so identity is kept); other values as they are."""
    kind = type(value)
    if kind in (list, tuple):
        items = [fn(v) for v in value]
        return value if all(a is b for a, b in zip(items, value)) else kind(items)
    if kind is dict:
        items = {k: fn(v) for k, v in value.items()}
        return value if all(items[k] is v for k, v in value.items()) else items
    return value


def object_states(state):
    """The ``ObjectState``s in wrapped state, also those inside lists, tuples and dicts."""
    for value in state:
        if isinstance(value, ObjectState):
            yield value
        elif type(value) in (list, tuple):
            yield from object_states(value)
        elif type(value) is dict:
            yield from object_states(value.values())


def wrap_state(state: tuple) -> tuple:
    """State values with the plain objects they hold (``a``, ``d["k"]``, ``lst[0]``) as
    ``ObjectState``s."""
    return tuple(_wrap(v) for v in state)


def unwrap_state(state) -> tuple:
    return tuple(_unwrap(v) for v in state)


def wrapping(fn, skip: int = 0):
    """``fn`` taking and returning plain state, as a function of wrapped state; the first
    ``skip`` arguments (a loop item) pass as they are."""
    def run(*args):
        head, state = args[:skip], args[skip:]
        out = fn(*head, *unwrap_state(state))
        return wrap_state(tuple(out))
    return run
