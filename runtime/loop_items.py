"""Items of a list or dict that a tensor loop's body replaces, carried as loop variables.

    class KV:                                   # a user's KV cache
        def __init__(self): self.k = []
    ...
    while not done.all():
        logits = model(nxt, cache)              # cache.k[i] = torch.cat([cache.k[i], k], 1)

The body runs its Python code once per trace; a list (or dict) whose length (keys) it
keeps but whose items it replaces by tensors or numbers is loop state: each changed item
is a location (``region_state.Location``) that ``staged_while`` carries as a loop
variable (a dim that grows dynamic), set into the list while the body is traced and to
the loop's result after it -- in place, so the list keeps its identity and every name
that reaches it sees eager's items. A list that grows or shrinks, or an item that is
another kind of value, is no such change (``region_state`` refuses it or carries it
another way). The front door refuses the change where the list existed before the call,
unless the call writes it back (an argument's list: ``argument_objects``).
"""
from __future__ import annotations

from typing import List, Optional, Tuple

from .region_state import TOUCHED, Location, carriable


class Item(Location):
    """Item ``name`` of the list or dict ``obj``."""
    __slots__ = ()

    def get(self):
        return list.__getitem__(self.obj, self.name) if type(self.obj) is list else \
            dict.__getitem__(self.obj, self.name)

    def set(self, value) -> None:
        if type(self.obj) is list:
            list.__setitem__(self.obj, self.name, value)
        else:
            dict.__setitem__(self.obj, self.name, value)

    def assign(self, value) -> None:
        TOUCHED.append((self.obj, self.name, self.before))
        self.set(value)


def replaced(obj, copy) -> Optional[List[Tuple[Item, object]]]:
    """(location, new value) of each item of ``obj`` (a plain list or dict; ``copy``: its
    items before the body) that the body replaced, when it kept the length (keys, in
    order) and every replaced item is a tensor or number before and after; else None."""
    if type(obj) is list and type(copy) is list and len(obj) == len(copy):
        keys = range(len(obj))
    elif type(obj) is dict and isinstance(copy, dict) and list(obj) == list(copy):
        keys = list(obj)
    else:
        return None
    found = []
    for k in keys:
        before, now = copy[k], obj[k]
        if now is before:
            continue
        if not (carriable(before, True) and carriable(now, True)):
            return None
        found.append((Item(before, f"{type(obj).__name__}[{k!r}]", obj=obj, name=k), now))
    return found or None


def put_back(obj, name, before) -> None:
    """Undo a noted change of an item (``region_state.untouch``)."""
    if type(obj) is list:
        list.__setitem__(obj, name, before)
    else:
        dict.__setitem__(obj, name, before)
