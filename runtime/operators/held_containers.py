"""Lists, dicts and tuples that an object carried through a tensor region holds, when
they hold objects in turn.

    cache.layers = [DynamicLayer, DynamicLayer]      # each: .keys, .values tensors
    while not done.all():
        out = model(nxt, past_key_values=cache)      # layer.keys = torch.cat([...], -2)

``ObjectState`` makes the objects inside such a container ``ObjectState``s too, so their
tensors are leaves of the region's state (a loop's variables: a dim that grows becomes
dynamic), and the container travels as a ``HeldContainer``: a pytree node whose context
is the container itself, by identity. Unflattening one puts its items back into the same
list or dict in place (the object keeps the very list eager's keeps, and the layer
objects in it); a tuple is kept when its items are the same objects, else rebuilt. A
body that puts another container in its place, or changes its length or keys, changes
the structure of the loop variables: the loop falls back naming its line.
"""
from __future__ import annotations

import torch.utils._pytree as pytree

_KINDS = (list, dict, tuple)


class HeldContainer:
    """A plain list, dict or tuple held by a carried object, and its (wrapped) items."""

    __slots__ = ("obj", "items")

    def __init__(self, obj, items):
        self.obj = obj
        self.items = items      # a list (list, tuple) or a dict, of wrapped values

    def plain(self):
        """The container holding the items' plain values (written in place; a tuple is
        itself while its items are, else a new one)."""
        from .object_state import _plain
        if type(self.obj) is dict:
            values = {k: _plain(v) for k, v in self.items.items()}
            if list(self.obj) != list(values) or \
                    any(self.obj[k] is not v for k, v in values.items()):
                dict.clear(self.obj)
                dict.update(self.obj, values)
            return self.obj
        values = [_plain(v) for v in self.items]
        if len(values) == len(self.obj) and all(a is b for a, b in zip(values, self.obj)):
            return self.obj
        if type(self.obj) is tuple:
            return tuple(values)
        list.__setitem__(self.obj, slice(None), values)
        return self.obj

    def restore(self) -> None:
        """Put the frozen items back, and those of the objects among them."""
        from .object_state import ObjectState
        for v in (self.items.values() if type(self.obj) is dict else self.items):
            if isinstance(v, (ObjectState, HeldContainer)):
                v.restore()
        self.plain()


def is_held(value, is_object) -> bool:
    """Whether a carried object's attribute (or item) ``value`` travels as a
    HeldContainer: a plain list or dict (written in place, so every name that reaches it
    sees eager's items), or a tuple holding objects."""
    return type(value) in (list, dict) or holds_objects(value, is_object)


def holds_objects(value, is_object, _depth: int = 0) -> bool:
    """Whether a plain list/dict/tuple holds (at any depth of such containers) a value
    ``is_object`` accepts."""
    if type(value) not in _KINDS or _depth > 8:
        return False
    items = value.values() if type(value) is dict else value
    return any(is_object(v) or holds_objects(v, is_object, _depth + 1) for v in items)


def wrap_held(value, wrap):
    """``value`` (a container ``holds_objects`` accepted) as a HeldContainer whose items
    are ``wrap``ped (objects as ObjectStates, containers of objects as HeldContainers)."""
    if type(value) is dict:
        return HeldContainer(value, {k: wrap(v) for k, v in value.items()})
    return HeldContainer(value, [wrap(v) for v in value])


class _Held:
    """The container in a pytree context: equal to the same list or dict only (another
    one in its place is another structure); a tuple, a value, to any tuple."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __eq__(self, other) -> bool:
        if not isinstance(other, _Held):
            return False
        if type(self.obj) is tuple:
            return type(other.obj) is tuple
        return other.obj is self.obj

    def __hash__(self) -> int:
        return 0 if type(self.obj) is tuple else id(self.obj)

    def __repr__(self) -> str:
        return f"<{type(self.obj).__name__} held by an object>"


def _flatten(held: HeldContainer):
    if type(held.obj) is dict:
        return list(held.items.values()), (_Held(held.obj), tuple(held.items))
    return list(held.items), (_Held(held.obj), None)


def _unflatten(values, context):
    same, keys = context
    items = dict(zip(keys, values)) if keys is not None else list(values)
    held = HeldContainer(same.obj, items)
    held.plain()
    return held


def _flatten_with_keys(held: HeldContainer):
    values, context = _flatten(held)
    keys = [pytree.MappingKey(k) for k in context[1]] if context[1] is not None else \
        [pytree.SequenceKey(i) for i in range(len(values))]
    return list(zip(keys, values)), context


pytree.register_pytree_node(HeldContainer, _flatten, _unflatten,
                            flatten_with_keys_fn=_flatten_with_keys)
