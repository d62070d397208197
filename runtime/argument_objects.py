"""Tensors inside argument objects are graph inputs; what the call writes there is
written back to the caller's objects after the graph runs.

    out = model(nxt, past_key_values=cache)   # cache.layers[i].keys = torch.cat([...])
    step(x, state)                            # state.h.append(h); state.t = state.t + x

An argument that is an object (not a tensor, a Python scalar, a pytree container, an
``nn.Module`` or an object of torch's own: an optimizer) is walked as the guard walks it
(``python_state.guard_print``, to its depth): every list, dict and object ``__dict__`` (or
``__slots__``: kind "slots") it looks into is a *holder*, in walk order, and every tensor a holder holds (not an
``nn.Parameter``) is a graph input, appended to the call's flattened arguments
(``ArgumentLeaves``: one input per distinct tensor; one that is also a tensor argument is
that argument). The signature holds their metadata (so a dim that grows call after call
becomes dynamic like an argument's), the guard prints them as inputs by place, not by
identity, and the holders' structure (classes, lengths, keys, Python values) as before.

While tracing, the holders hold the placeholders (``Installed``); after it, what the trace
changed in each holder (an attribute rebound, a list appended to, a dict item set) is a
*write*: (holder index, kind, the holder's new items), its tensors graph outputs, objects
made by the call rebuilt per call (``runtime.outputs``), the call's own holders referred
to by place. The holders then get back exactly what they held before, so the side-effect
check sees no change. ``write_back`` applies a call's writes to that call's holders (found
again by the same walk): in place, keeping the identity of every object and container,
their tensors replaced as eager replaces them.
"""
from __future__ import annotations

import collections
import types
from typing import Any, Dict, List, Optional, Tuple

import torch

from .introspection import kind_of
from .operators import argument_containers
from .python_state import InputSlots, guard_print, is_tensor, slots_of, slotted
from .outputs import resolve_arguments

_ATOMS = (int, float, complex, str, bytes, bool, type(None))
_SKIP = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
         type, types.CodeType)


def walks(v) -> bool:
    """Whether argument leaf ``v`` is an object whose tensors become graph inputs."""
    if isinstance(v, _ATOMS) or isinstance(v, _SKIP) or is_tensor(v) or \
            isinstance(v, torch.nn.Module):
        return False
    module = type(v).__module__.split(".")[0]
    if module in ("torch", "runtime", "transpiler", "builtins") and \
            not isinstance(v, (list, dict)):
        return False
    return isinstance(getattr(v, "__dict__", None), dict) or isinstance(v, (list, dict)) or \
        slotted(v)


class Found:
    """What a call's argument objects hold: ``holders`` [(container, kind)] in walk order
    (all leaves, one after the other), ``slots`` [(holder index, key, flat index)],
    ``extra`` (the tensors appended to the flat arguments), ``leaves`` (the flat indices
    walked) and ``key`` (for the signature: where each slot's tensor is)."""

    __slots__ = ("holders", "slots", "extra", "leaves", "key", "owners")

    def __init__(self, flat, walked: Dict[int, InputSlots]):
        self.holders: List[Tuple[Any, str]] = []
        self.owners: List[int] = []         # holder index -> the flat leaf it is under
        self.slots: List[Tuple[int, Any, int]] = []
        self.extra: list = []
        self.leaves = tuple(sorted(walked))
        index = {id(t): i for i, t in enumerate(flat) if isinstance(t, torch.Tensor)}
        for i in self.leaves:
            found = walked[i]
            base = len(self.holders)
            self.holders += found.holders
            self.owners += [i] * len(found.holders)
            for h, k, t in found.slots:
                j = index.get(id(t))
                if j is None:
                    j = index[id(t)] = len(flat) + len(self.extra)
                    self.extra.append(t)
                self.slots.append((base + h, k, j))
        self.key = ("objects", self.leaves, tuple(j for _, _, j in self.slots))


class ArgumentLeaves(list):
    """A call's flattened arguments followed by the tensors its argument objects hold;
    ``found``: where they are."""
    __slots__ = ("found",)

    def __init__(self, items, found: Found):
        super().__init__(items)
        self.found = found


def find(flat) -> Optional[Found]:
    """The argument objects' holders and tensors (None: no argument is an object)."""
    walked: Dict[int, InputSlots] = {}
    for i, v in enumerate(flat):
        if walks(v):
            slots = InputSlots()
            guard_print(v, modules=[], inputs=slots)
            if not slots.exhausted:     # (too large to walk: its tensors stay constants)
                walked[i] = slots
    return Found(flat, walked) if walked else None


def extend(flat) -> list:
    """``flat`` with its argument objects' tensors appended (an ``ArgumentLeaves``), or
    ``flat`` itself when it holds no object."""
    found = find(flat)
    return flat if found is None else ArgumentLeaves(list(flat) + found.extra, found)


# --------------------------------------------------------------------------- holders
def _dict(container) -> type:
    """The dict methods that keep ``container`` consistent, bypassing a subclass's own
    overrides: an ``OrderedDict``'s (its order lives outside the dict), else dict's."""
    return collections.OrderedDict if isinstance(container, collections.OrderedDict) else dict


def items(container, kind: str):
    """A shallow copy of a holder's items (not through a subclass's overrides)."""
    if kind == "list":
        return list(list.__iter__(container))
    if kind == "dict":
        return dict(_dict(container).items(container))
    if kind == "slots":
        return slots_of(container)
    return dict(vars(container))


def _same(a, b, kind: str) -> bool:
    if kind == "list":
        return len(a) == len(b) and all(x is y for x, y in zip(a, b))
    return list(a) == list(b) and all(a[k] is b[k] for k in a)


def put_items(container, kind: str, state) -> None:
    """Set a holder's items to ``state`` in place (its identity kept)."""
    if kind == "list":
        list.__setitem__(container, slice(None), state)
    elif kind == "dict":
        methods = _dict(container)
        methods.clear(container)
        for k, v in state.items():
            methods.__setitem__(container, k, v)
    elif kind == "slots":           # (bypassing a class's own __setattr__, as vars())
        for name in slots_of(container):
            if name not in state:
                object.__delattr__(container, name)
        for k, v in state.items():
            object.__setattr__(container, k, v)
    else:
        attrs = vars(container)
        attrs.clear()
        attrs.update(state)


def _put(container, kind: str, key, value) -> None:
    if kind == "list":
        list.__setitem__(container, key, value)
    elif kind == "dict":
        _dict(container).__setitem__(container, key, value)
    elif kind == "slots":
        object.__setattr__(container, key, value)
    else:
        vars(container)[key] = value


class Installed:
    """The holders of ``found`` holding the trace's placeholders (``sym``: the flat
    arguments as the trace receives them) until ``writes()`` or ``restore()``."""

    def __init__(self, found: Found, sym):
        self.found = found
        self.originals = [items(c, kind) for c, kind in found.holders]
        self.done = False
        for h, k, j in found.slots:
            c, kind = found.holders[h]
            _put(c, kind, k, sym[j])
        self.installed = [items(c, kind) for c, kind in found.holders]
        self.holding = argument_containers.hold([c for c, _ in found.holders])

    def restore(self) -> None:
        """Put back what the holders held before the trace (once)."""
        if not self.done:
            self.done = True
            argument_containers.release(self.holding)
            for (c, kind), state in reversed(list(zip(self.found.holders, self.originals))):
                if not _same(items(c, kind), state, kind):
                    put_items(c, kind, state)

    def writes(self) -> List[Tuple[int, str, Any]]:
        """What the trace changed: (holder index, kind, its new items) per holder whose
        items are not the ones it held (by identity); then the originals are put back."""
        out = []
        for j, ((c, kind), before) in enumerate(zip(self.found.holders, self.installed)):
            now = items(c, kind)
            if not _same(now, before, kind):
                out.append((j, kind, now))
        self.restore()
        return out

    def refused(self, writes) -> Optional[Tuple[int, Any]]:
        """(flat leaf index, key) of a number or text the call set in a holder (a counter
        bumped: ``cm.enters += 1``), or None. A graph would set the value of its trace on
        every call: the guard would see the new value and trace again, call after call,
        so such a call falls back. Flags and other values (``is_initialized = True``, a
        device, None) are constants of the trace, set again by each call."""
        for j, kind, now in writes:
            before = self.installed[j]
            keys = range(len(now)) if kind == "list" else now.keys()
            for k in keys:
                old = (before[k] if k < len(before) else _MISSING) if kind == "list" else \
                    before.get(k, _MISSING)
                new = now[k]
                if new is not old and (isinstance(new, _COUNTED) and not isinstance(new, bool)
                                       or is_tensor(new) and kind_of(new) is not None):  # int(t)
                    return self.found.owners[j], k
        return None

    def references(self) -> Dict[int, tuple]:
        """id of each holder -> its reference in a write (``outputs.ArgRef`` path)."""
        return {id(c): (0, j) for j, (c, _) in enumerate(self.found.holders)}


def written(installed: Optional[Installed]) -> set:
    """Ids of the argument objects and containers whose attributes or items a call
    writes back (its holders), for the front door's check of objects that existed
    before the call."""
    if installed is None:
        return set()
    return {id(c) for c, _ in installed.found.holders}


_MISSING = object()
_COUNTED = (int, float, complex, str, bytes)


def write_back(found: Found, writes) -> None:
    """Apply a call's ``writes`` (the graph's values) to that call's holders."""
    objects = [c for c, _ in found.holders]
    for j, kind, state in writes:
        put_items(objects[j], kind, resolve_arguments(state, objects, {}))
