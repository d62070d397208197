"""A list passed as an argument that the function appends numbers to, and reads:

    def train_step(model, x, y, losses):
        ...
        losses.append(loss.item())
        if len(losses) % 10 == 0:
            print(sum(losses[-10:]) / 10)

A list argument is a pytree container: its items are part of the call's key (a growing
list would be a new signature on every call) and a trace's appends to the rebuilt copy
are a side effect the graph would not repeat. When the first trace grew such a list by
numbers only (``appended``), its position is kept here (``AppendedArguments``) and the
function traces again with the list as one opaque leaf:

- the call's key holds ``MARKER`` in its place (``replace``): not its items, not its
  identity, so every list is the same signature;
- each call puts its own list in the position's ``Cell`` (per thread) before the guard
  and the graph run; the trace receives ``runtime.appended_lists.AppendOnly`` over the
  cell's slot: appends are nodes appending to the call's list when the graph runs, and
  ``len``/items/``sum`` are reads of it then (``runtime.list_reads``);
- anything else done with it falls back as for a closure's list, naming the line.
"""
from __future__ import annotations

import threading
from typing import Dict, FrozenSet

from runtime.appended_lists import AppendOnly
from runtime.carried_numbers import Slot
from runtime.introspection import NUMBER_KINDS, kind_of


class _Marker:
    """What the key holds in place of an appended list argument."""
    __slots__ = ()

    def __repr__(self) -> str:
        return "<appended list>"

    def __reduce__(self):
        return "MARKER"


MARKER = _Marker()


class Cell:
    """The list of the call running on this thread at one argument position (a
    ``carried_numbers.Slot`` of kind "cell" reads and sets ``cell_contents``)."""

    def __init__(self):
        self._local = threading.local()

    @property
    def cell_contents(self):
        return getattr(self._local, "value", None)

    @cell_contents.setter
    def cell_contents(self, value) -> None:
        self._local.value = value


def _positioned(args, kwargs):
    yield from enumerate(args)
    yield from kwargs.items()


def appended(args, kwargs, sargs, skwargs, positions) -> FrozenSet:
    """The positions among ``positions`` (list arguments the trace changed) where the
    list the trace received (``sargs``/``skwargs``) is the caller's plus numbers only."""
    given = dict(_positioned(args, kwargs))
    out = set()
    for p, now in _positioned(sargs, skwargs):
        was = given.get(p)
        if p not in positions or type(was) is not list or type(now) is not list:
            continue
        n = len(was)
        if len(now) > n and all(type(v) in NUMBER_KINDS.values() for v in was) and \
                all(a is b for a, b in zip(now[:n], was)) and \
                all(kind_of(v) in NUMBER_KINDS for v in now[n:]):
            out.add(p)
    return frozenset(out)


class AppendedArguments:
    """A converted function's appended list arguments: position -> ``Cell``."""

    def __init__(self):
        self.cells: Dict[object, Cell] = {}
        self.at: Dict[int, object] = {}     # flat index -> position (the last signature's)

    def __bool__(self) -> bool:
        return bool(self.cells)

    def add(self, positions) -> None:
        for p in positions:
            self.cells.setdefault(p, Cell())

    def replace(self, args, kwargs, flat) -> list:
        """``flat`` with each appended list argument of this call (a list there now) as
        ``MARKER``; each position's cell holds this call's list from now on."""
        if not self.cells:
            return flat
        lists = {}
        for p, v in _positioned(args, kwargs):
            if p in self.cells and type(v) is list:
                lists[id(v)] = p
                self.cells[p].cell_contents = v
        out, self.at = list(flat), {}
        for i, v in enumerate(out):
            if id(v) in lists:
                self.at[i] = lists[id(v)]
                out[i] = MARKER
        return out

    def stand_in(self, index: int, name: str) -> AppendOnly:
        """What the trace receives for the flat leaf ``index`` (a ``MARKER``)."""
        label = f"argument {name!r}"
        return AppendOnly(Slot("cell", self.cells[self.at[index]], None, label))
