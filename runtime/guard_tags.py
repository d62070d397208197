"""Fingerprints re-taken only when something they looked into may have changed.

A guard compares ``python_state.fingerprint`` of the Python values a trace read (a model's
config, a global holding a dict of settings) before every run of the cached graph. A
fingerprint walks the values to a depth, thousands of nodes for a transformers model: a
millisecond walk per call, repeated to find, almost always, that nothing changed.

``TaggedPrint`` keeps, beside the fingerprint, what its walk looked into (``Seen``): the
dicts (an object's ``__dict__``, a plain dict, a user class's attributes), compared by
CPython's dict version tag (PEP 509; bumped on every change, exposed by torch as
``dict_version``), the objects (their class and ``__dict__`` by identity: ``__class__``
or ``__dict__`` assigned), the lists (their length and items by identity), the sets and
bytearrays (by their contents: ``==`` where the items are numbers and text). While all
of those are as recorded, the walk would find what it found: the fingerprint holds. Only when one moved is the fingerprint taken again
and compared -- a change that leaves it equal (a value replaced by an equal one) keeps the
graph, with the new tags -- so a guard is exactly as strict as the fingerprint itself.
A walk that looks into state no tag follows (an iterator's position, a numpy array's
bytes, ``__slots__``: ``builtin_state``) is *opaque*: its fingerprint is taken every time.

``Tags(prints)`` checks many at once: one C-level pass over all their dicts' tags, then
the per-print check only when something moved. ``STATS`` counts the two paths (tests).
"""
from __future__ import annotations

import collections
import gc
import itertools
import operator
from typing import Any, Iterable, List, Optional

from .c_guards import CellRefs, DictVersions
from .python_state import InputSlots, _key, fingerprint, guard_print

try:                                    # CPython's dict version tag, as torch reads it
    from torch._C._dynamo.guards import dict_version as _dict_version
except ImportError:                     # pragma: no cover - another torch / Python
    _dict_version = None

_is = operator.is_
_eq = operator.eq
_attribute = object.__getattribute__      # (not a class's own __getattribute__ in Python:
_DICT = itertools.repeat("__dict__")       # a transformers config has one)
_chain = itertools.chain.from_iterable
_IMMUTABLE = (tuple, frozenset)
_EXACT = (list, dict, set, tuple, frozenset, bytearray)
_HEAP_TYPE = 1 << 9         # Py_TPFLAGS_HEAPTYPE: a class whose instances' can be assigned


class _Stats:
    __slots__ = ("fast", "slow")

    def __init__(self):
        self.fast = 0       # checks answered by the tags alone
        self.slow = 0       # fingerprints taken again (a tag moved, or an opaque walk)


STATS = _Stats()


class Seen:
    """What one fingerprint's walk looked into (``python_state._Walk.seen``); once
    ``freeze``-d, ``records`` say how it was then, ``unchanged()`` whether it still is."""
    __slots__ = ("dicts", "objects", "lists", "sets", "bytes", "opaque", "records",
                 "columns")

    def __init__(self):
        self.dicts: dict = {}       # id -> dict (an object's __dict__, a class's, a dict)
        self.objects: dict = {}     # id -> (object, its class, its __dict__)
        self.lists: dict = {}       # id -> list
        self.sets: dict = {}        # id -> set
        self.bytes: dict = {}       # id -> bytearray
        self.opaque = _dict_version is None
        self.records: Optional[tuple] = None
        self.columns: Optional[tuple] = None

    # -- told by the walk
    def walked(self, v, cls) -> None:
        if cls in _EXACT:
            if cls is dict:
                self.dicts[id(v)] = v
            elif cls is list:
                self.lists[id(v)] = v
            elif cls is set:
                self.sets[id(v)] = v
            elif cls is bytearray:
                self.bytes[id(v)] = v
            return
        base = next((b for b in _EXACT if isinstance(v, b)), None)
        if base is not None:
            if any(getattr(cls, name, None) is not getattr(base, name, None)
                   for name in _READ_BY_WALK) or isinstance(v, collections.OrderedDict):
                self.opaque = True          # contents read through the subclass's code
                return
            {dict: self.dicts, list: self.lists, set: self.sets,
             bytearray: self.bytes}.get(base, {})[id(v)] = v
        attrs = getattr(v, "__dict__", None)
        if isinstance(attrs, dict):
            self.dicts[id(attrs)] = attrs
        else:
            attrs = None
        if base not in _IMMUTABLE and (attrs is not None or cls.__flags__ & _HEAP_TYPE):
            self.objects[id(v)] = (v, cls, attrs)       # (a static type's instances keep
                                                        # their class)

    def walked_class(self, c) -> None:
        """A user class whose attributes the walk read (``type.__dict__`` is a proxy of
        the class's own dict, which holds the tag)."""
        inner = [d for d in gc.get_referents(c.__dict__) if isinstance(d, dict)]
        if len(inner) == 1:
            self.dicts[id(inner[0])] = inner[0]
        else:                                   # pragma: no cover - another CPython
            self.opaque = True

    # -- the record and its check
    def freeze(self) -> "Seen":
        """Record how everything looked into is now."""
        if not self.opaque:
            self.records = ({k: (d, _dict_version(d)) for k, d in self.dicts.items()},
                            dict(self.objects),
                            {k: (x, tuple(x)) for k, x in self.lists.items()},
                            {k: (x, _set_record(x)) for k, x in self.sets.items()},
                            {k: (x, bytes(x)) for k, x in self.bytes.items()})
            self.columns = _columns(self.records)
        return self

    def unchanged(self) -> bool:
        """Whether everything looked into is as when frozen (False if opaque)."""
        return self.columns is not None and _unchanged(self.columns)


_READ_BY_WALK = ("items", "keys", "values", "__iter__", "__len__")


def _columns(records) -> tuple:
    dicts, objects, lists, sets, arrays = (list(r.values()) for r in records)
    held = [(o, a) for o, _, a in objects if a is not None]     # (their __dict__)
    return (DictVersions([d for d, _ in dicts], [v for _, v in dicts]), None,
            tuple(o for o, _, _ in objects), tuple(c for _, c, _ in objects),
            tuple(o for o, _ in held), tuple(a for _, a in held),
            tuple(x for x, _ in lists), tuple(len(c) for _, c in lists),
            tuple(_chain(c for _, c in lists)),
            tuple(x for x, k in sets if type(k) is not _Plain),
            tuple(k for _, k in sets if type(k) is not _Plain),
            tuple(x for x, k in sets if type(k) is _Plain),
            tuple(k for _, k in sets if type(k) is _Plain),
            tuple(x for x, _ in arrays), tuple(b for _, b in arrays))


def _unchanged(columns) -> bool:
    (dicts, _, objects, classes, holders, attrs, lists, lengths, items,
     sets, keys, plain_sets, contents, arrays, data) = columns
    try:
        return (dicts.unchanged() and
                tuple(map(type, objects)) == classes and
                all(map(_is, map(_attribute, holders, _DICT), attrs)) and
                tuple(map(len, lists)) == lengths and
                all(map(_is, _chain(lists), items)) and
                (not sets or tuple(map(_set_keys, sets)) == keys) and
                (not plain_sets or all(map(_eq, plain_sets, contents))) and
                (not arrays or tuple(map(bytes, arrays)) == data))
    except Exception:       # noqa: BLE001 -- a __dict__ that went away: walk again
        return False


def _set_keys(s) -> frozenset:
    return frozenset(map(_key, s))


class _Plain(frozenset):
    """A set's items where each counts by value (numbers, text): the set compares to
    them by ``==``, without a copy of its keys per check."""
    __slots__ = ()


def _set_record(s) -> frozenset:
    keys = _set_keys(s)
    return _Plain(keys) if all(map(_is, map(_key, s), s)) else keys


class TaggedPrint:
    """``fingerprint(value)`` (of ``make()`` where given: a view of ``value`` built anew
    each time) and what its walk looked into. ``deep``: the objects the walk did not look
    into for depth (``guard_print``), when asked for; ``modules``: a list to receive the
    ``nn.Module``s met, which then count by identity (``guard_print``)."""
    __slots__ = ("value", "make", "print", "seen", "deep", "how")

    def __init__(self, value, make=None, deep: bool = False, names=None, modules=None,
                 inputs: bool = False):
        self.value, self.make = value, make
        self.seen = Seen()
        target = value if make is None else make()
        self.how = (names, modules is not None, inputs) if deep else None  # for holds_for
        if deep:
            self.print, self.deep = guard_print(target, seen=self.seen, names=names,
                                                modules=modules, inputs=_slots(inputs))
        else:
            self.print, self.deep = fingerprint(target, seen=self.seen), None
        if make is not None:
            _made_from(self.seen, value)
        self.seen.freeze()

    def holds(self) -> bool:
        """Whether ``fingerprint`` of the value is as recorded: the tags first, the
        fingerprint again only when one moved (and then the tags are taken anew)."""
        if self.seen.unchanged():
            STATS.fast += 1
            return True
        return self.holds_for(self.value)

    def holds_for(self, value) -> bool:
        """Whether ``value`` (this call's argument) has the recorded fingerprint; if it
        has, it is the one whose tags are kept from now on."""
        if value is self.value and self.seen.unchanged():
            STATS.fast += 1
            return True
        STATS.slow += 1
        seen = Seen()
        target = value if self.make is None else self.make()
        if self.how is None:
            now = fingerprint(target, seen=seen)
        else:                           # as recorded: a module by identity, no deeper
            now, deep = guard_print(target, seen=seen, names=self.how[0],
                                    modules=[] if self.how[1] else None,
                                    inputs=_slots(self.how[2]))
            if deep:
                return False
        if now != self.print:
            return False
        if self.make is not None:
            _made_from(seen, value)
        self.value, self.seen = value, seen.freeze()
        return True


def _made_from(seen: Seen, value) -> None:
    """Note in ``seen`` what a view ``make()`` read of ``value``: its ``__dict__``, its
    items (a dict's or a list's). The walk saw only the view, a new object each time: a
    dict left out kept its tags unchanged however its other keys moved (a dict the graph
    writes one key of, ``st["last"] = loss.item()``, kept ``st["epoch"]`` at its trace
    value: silently)."""
    if type(value) is dict:
        seen.dicts[id(value)] = value
    elif type(value) is list:
        seen.lists[id(value)] = value
    elif isinstance(getattr(value, "__dict__", None), dict):
        seen.dicts[id(vars(value))] = vars(value)


def _slots(inputs: bool):
    """Tensors in an argument object's lists, dicts and attributes print as graph inputs
    (``runtime.argument_objects``), not by identity."""
    return InputSlots(record=False) if inputs else None


class Bindings:
    """Whether each name of a namespace (a module's globals) and each cell still holds
    the recorded object: by the namespaces' tags while none moved, else by identity."""
    __slots__ = ("names", "cells", "values", "spaces", "versions", "refs")

    def __init__(self, names, cells):
        """``names``: (namespace, name, value); ``cells``: (cell, value or ``empty``)."""
        self.names = list({(id(ns), name): (ns, name, value)
                           for ns, name, value in names}.values())
        cells = list({id(cell): (cell, value) for cell, value in cells}.values())
        self.cells = tuple(cell for cell, _ in cells)       # (each once: the functions a
        self.values = tuple(value for _, value in cells)    # trace called repeat theirs)
        self.spaces = tuple({id(ns): ns for ns, _, _ in self.names}.values())
        self.versions = DictVersions(self.spaces) if _dict_version else None
        self.refs = CellRefs(self.cells, self.values, EMPTY)     # (the cells, read from C)

    def __call__(self) -> bool:
        if self.cells and not self.refs.unchanged():    # (None: C cannot tell; False: which)
            try:
                if not all(map(_is, map(_contents, self.cells), self.values)):
                    return False
            except ValueError:              # an empty cell (recorded as such, or now)
                if not all(_cell(c) is v for c, v in zip(self.cells, self.values)):
                    return False
        if self.versions is not None and self.versions.unchanged():
            return True
        for ns, name, value in self.names:
            if ns.get(name, EMPTY) is not value:
                return False
        if self.versions is not None:
            self.versions = self.versions.now()
        return True


EMPTY = object()        # an empty cell's value, a missing name's
_contents = operator.attrgetter("cell_contents")


def _cell(cell):
    try:
        return cell.cell_contents
    except ValueError:
        return EMPTY


class Tags:
    """The check of many ``TaggedPrint``s: whether each still holds, as one pass over
    all their tags while none moved."""
    __slots__ = ("prints", "merged", "opaque")

    def __init__(self, prints: Iterable[TaggedPrint]):
        self.prints: List[Any] = list(prints)    # or ShallowStates
        self._merge()

    def _merge(self) -> None:
        """One record of all the prints' (the first print's where two looked into the
        same object: they were frozen at the same state, or the later one's check would
        have found a tag moved and taken its own again)."""
        self.opaque = [p for p in self.prints if p.seen.records is None]
        merged: tuple = ({}, {}, {}, {}, {})
        for p in self.prints:
            if p.seen.records is not None:
                for into, part in zip(merged, p.seen.records):
                    for k, v in part.items():
                        into.setdefault(k, v)
        self.merged = _columns(merged)

    def __bool__(self) -> bool:
        return bool(self.prints)

    def __call__(self) -> bool:
        if _unchanged(self.merged):
            for p in self.opaque:
                if not p.holds():
                    return False
            STATS.fast += 1
            return True
        for p in self.prints:
            if not p.holds():
                return False
        self._merge()
        return True


class ShallowState:
    """``state(value) == recorded`` for a function ``state`` of ``value`` one level deep
    (the identities a list, a dict or an object's ``__dict__`` holds; ``also``: names of
    attributes holding a dict it reads too, a module's ``_buffers``), by their tags while
    none moved. A set (no tag; its items by value would be looser) is compared each time."""
    __slots__ = ("value", "state", "recorded", "also", "seen")

    def __init__(self, value, state, recorded, also=()):
        self.value, self.state, self.recorded, self.also = value, state, recorded, also
        self.seen = self._seen() if state(value) == recorded else Seen()

    def _seen(self) -> Seen:
        seen = Seen()
        if isinstance(self.value, (set, frozenset)):
            return seen                     # (opaque: never frozen)
        seen.walked(self.value, type(self.value))
        for name in self.also:
            inner = getattr(self.value, name, None)
            if type(inner) is dict:
                seen.dicts[id(inner)] = inner
        return seen.freeze()

    def holds(self) -> bool:
        if self.seen.unchanged():
            STATS.fast += 1
            return True
        STATS.slow += 1
        if self.state(self.value) != self.recorded:
            return False
        self.seen = self._seen()
        return True
