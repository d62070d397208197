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
function traces again with the list as one opaque leaf; so for a dict of lists
(``history = {"loss": [], "acc": []}``, ``history["loss"].append(...)``):

- the call's key holds ``MARKER`` in its place (``replace``; a dict: ``_dict_marker``,
  its keys): not its items, not its identity, so every list is the same signature;
- each call puts its own list(s) in the position's ``Cell``s (per thread) before the
  guard and the graph run; the trace receives ``runtime.appended_lists.AppendOnly`` over
  each cell's slot (a dict: a ``Logs`` of them, refusing changes to the dict itself):
  appends are nodes appending to the call's list when the graph runs, and
  ``len``/items/``sum``/``max``/``min`` are reads of it then (``runtime.list_reads``);
- returned, it is the caller's own list or dict (an argument path of the output);
- anything else done with it falls back as for a closure's list, naming the line.
"""
from __future__ import annotations

import threading
from typing import Dict

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


def _grown(was, now):
    """True where the list ``now`` is the caller's number list ``was`` plus numbers, False
    where it is ``was`` as it was, None otherwise."""
    if type(was) is not list or type(now) is not list or \
            not all(type(v) in _NUMBERS for v in was):
        return None
    n = len(was)
    if len(now) < n or any(a is not b for a, b in zip(now[:n], was)) or \
            not all(kind_of(v) in NUMBER_KINDS for v in now[n:]):
        return None
    return len(now) > n


_NUMBERS = tuple(NUMBER_KINDS.values())


def _logs(v) -> bool:
    """A dict of lists by str keys (``history = {"loss": [], "acc": []}``)."""
    return type(v) is dict and bool(v) and all(type(k) is str and type(x) is list
                                               for k, x in v.items())


def appended(args, kwargs, sargs, skwargs, positions) -> Dict[object, str]:
    """{position: "list" or "dict"} among ``positions`` (list/dict arguments the trace
    changed) where what the trace received (``sargs``/``skwargs``) is the caller's list
    plus numbers, or the caller's dict of lists with numbers appended to some."""
    given = dict(_positioned(args, kwargs))
    out = {}
    for p, now in _positioned(sargs, skwargs):
        was = given.get(p)
        if p not in positions:
            continue
        if type(was) is list and _grown(was, now):
            out[p] = "list"
        elif _logs(was) and type(now) is dict and list(now) == list(was):
            states = [_grown(was[k], now[k]) for k in was]
            if None not in states and any(states):
                out[p] = "dict"
    return out


def _dict_marker(keys) -> tuple:
    """What the key holds in place of an appended dict of lists: its keys, after a tag
    (a plain tuple of str: the guard compares it by value)."""
    return ("<appended lists>",) + tuple(keys)


class Logs(dict):
    """The dict of ``AppendOnly`` lists a trace receives for a dict argument: its lists
    are served; changing the dict itself (a new key) is refused, naming the line."""

    def _refuse(self, *args, **kwargs):
        from runtime.appended_lists import _refuse
        _refuse("changes a dict of lists passed as an argument that it appends numbers "
                "to (only appends to its lists are graph nodes)")

    __setitem__ = __delitem__ = pop = popitem = clear = update = setdefault = _refuse


class AppendedArguments:
    """A converted function's appended list and dict-of-lists arguments: their kind by
    position, a ``Cell`` per list ((position, None) or (position, key))."""

    def __init__(self):
        self.kinds: Dict[object, str] = {}
        self.cells: Dict[tuple, Cell] = {}
        self.at: Dict[int, object] = {}     # flat index -> position (the last signature's)

    def __bool__(self) -> bool:
        return bool(self.kinds)

    def add(self, kinds) -> None:
        for p, kind in dict(kinds).items():
            self.kinds.setdefault(p, kind)

    def _cell(self, key) -> Cell:
        cell = self.cells.get(key)
        if cell is None:
            cell = self.cells[key] = Cell()
        return cell

    def replace(self, args, kwargs, flat) -> list:
        """``flat`` with each appended argument of this call (a list, or a dict of lists
        as ``_logs``, there now) as a marker; the cells hold this call's lists from now
        on."""
        if not self.kinds:
            return flat
        marks = {}
        for p, v in _positioned(args, kwargs):
            kind = self.kinds.get(p)
            if kind == "list" and type(v) is list:
                marks[id(v)] = (p, MARKER)
                self._cell((p, None)).cell_contents = v
            elif kind == "dict" and _logs(v):
                marks[id(v)] = (p, _dict_marker(v))
                for k, items in v.items():
                    self._cell((p, k)).cell_contents = items
        out, self.at = list(flat), {}
        for i, v in enumerate(out):
            if id(v) in marks:
                self.at[i] = marks[id(v)]
                out[i] = marks[id(v)][1]
        return out

    def serves(self, index: int) -> bool:
        """Whether the flat leaf ``index`` of the last signature is an appended argument."""
        return index in self.at

    def stand_in(self, index: int, name: str):
        """What the trace receives for the flat leaf ``index`` (a marker): an
        ``AppendOnly`` over the cell's slot, or a ``Logs`` of them."""
        p, marker = self.at[index]
        if marker is MARKER:
            return AppendOnly(Slot("cell", self._cell((p, None)), None, f"argument {name!r}"))
        return Logs({k: AppendOnly(Slot("cell", self._cell((p, k)), None,
                                        f"argument {name!r}[{k!r}]")) for k in marker[1:]})


SERVED = (AppendOnly, Logs)     # what the trace receives: an argument path when returned
