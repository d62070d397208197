"""Plain Python objects whose attributes tensor-dependent control flow assigns.

    o = Namespace(v=x)
    if x.sum() > 0:
        o.v = x * 2          # a tensor branch assigns an attribute of a local object

Such an object is part of the state of the ``if``/loop. While staged, it travels as an
``ObjectState``: a pytree node whose leaves are the object's attribute values. Unflattening
one sets the attributes on the (same) object, so each branch or loop body trace sees its
own placeholders, and after the ``cond``/``while`` node the object holds its outputs.
"""
from __future__ import annotations

import types

import torch
import torch.utils._pytree as pytree

from ..tensor_list import TensorList


class ObjectState:
    """An object and a frozen copy of its attributes."""

    def __init__(self, obj, attrs: dict):
        self.obj = obj
        self.attrs = attrs

    @classmethod
    def of(cls, obj) -> "ObjectState":
        return cls(obj, dict(vars(obj)))

    def restore(self) -> None:
        """Put the frozen attributes back (after a trace that must leave no trace)."""
        current = vars(self.obj)
        for key in [k for k in current if k not in self.attrs]:
            del current[key]
        current.update(self.attrs)


def _flatten(state: ObjectState):
    keys = sorted(state.attrs)
    return [state.attrs[k] for k in keys], (state.obj, tuple(keys))


def _unflatten(values, context):
    obj, keys = context
    attrs = dict(zip(keys, values))
    vars(obj).update(attrs)
    return ObjectState(obj, attrs)


def _flatten_with_keys(state: ObjectState):
    values, context = _flatten(state)
    return [(pytree.GetAttrKey(k), v) for k, v in zip(context[1], values)], context


pytree.register_pytree_node(ObjectState, _flatten, _unflatten,
                            flatten_with_keys_fn=_flatten_with_keys)


def is_plain_object(value) -> bool:
    """An instance with a ``__dict__`` that is a value holder, not code or a module."""
    if isinstance(value, (torch.Tensor, torch.nn.Module, TensorList, type, types.ModuleType,
                          types.FunctionType, types.MethodType, types.BuiltinFunctionType)):
        return False
    if type(value).__module__.split(".")[0] == "runtime":   # our own markers
        return False
    return isinstance(getattr(value, "__dict__", None), dict)


def _wrap(value):
    """``value`` with the plain objects it holds, itself or in lists, tuples and dicts
    (``d["k"].t = ...``, ``lst[0].t = ...`` in a branch), as ``ObjectState``s; ``value``
    itself when it holds none."""
    if is_plain_object(value):
        return ObjectState.of(value)
    kind = type(value)
    if kind in (list, tuple):
        items = [_wrap(v) for v in value]
        return value if all(a is b for a, b in zip(items, value)) else kind(items)
    if kind is dict:
        items = {k: _wrap(v) for k, v in value.items()}
        return value if all(items[k] is v for k, v in value.items()) else items
    return value


def _unwrap(value):
    """``value`` with its ``ObjectState``s replaced by their objects (a container is
    rebuilt only when it held one)."""
    if isinstance(value, ObjectState):
        return value.obj
    kind = type(value)
    if kind in (list, tuple):
        items = [_unwrap(v) for v in value]
        return value if all(a is b for a, b in zip(items, value)) else kind(items)
    if kind is dict:
        items = {k: _unwrap(v) for k, v in value.items()}
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
