"""Reads of a list the graph appends numbers to (``runtime.appended_lists``), as eager
makes them on *every* call: ``len(losses)``, ``losses[-1]``, ``losses[0]``,
``sum(losses)``, ``sum(losses[-10:]) / 10``, ``if len(history) % 10 == 0: print(...)``.

A trace sees the list once; a growing list would make any answer it took then stale on
the next call (a retrace per call is no answer either). So each read is a node that reads
the list the slot holds *when the graph runs*, after the appends recorded before it (they
are effects in their place), as a Python number's stand-in (``loss.item()``'s kind):

- ``len(lst)`` / ``len(lst[a:b])``: ``list_length``, an int, no guard (any list has one);
- ``lst[-k]`` where the trace appended k or more numbers before: that appended value
  itself (what the graph appends is what eager reads back);
- any other ``lst[i]``: ``list_item``; ``sum(lst)``, ``sum(lst[a:b])``: ``list_sum``;
  ``max(lst)``, ``min(lst[-k:])`` (the best loss so far): ``list_pick``.
  Their Python kind (int, float, bool) must be known: the trace reads the kinds of the
  items the list held at the call (``ItemKinds``), and the guard asks them again before
  each call (``trace_reads``: an incremental scan of the items added since it last
  looked, so a growing list costs what it grew by); the kinds the trace appended join
  them. Refused (the call falls back naming the line): an item read of a list holding
  numbers of several kinds, a window sum that may be empty while its kind is not int
  (Python's ``sum([])`` is the int 0), anything else asked of a window.

``len``, ``sum``, ``max`` and ``min`` reach here from converted code (``operators.calls``);
Python's own ``len(lst)`` in unconverted code still refuses (``AppendOnly.__len__``).
"""
from __future__ import annotations

import builtins

import torch

from .introspection import NUMBER_KINDS, mark

NOT_READ = object()
_DTYPES = {"int": torch.int64, "float": torch.float64, "bool": torch.bool}
_ANCHOR = torch.zeros(())       # (gives a read's node a tensor input)


def _impure(fn):
    fn._tograph_impure = True       # (ops.is_impure: never merged, dropped or moved)
    return fn


def _window(items: list, start, stop) -> list:
    return items if start is None and stop is None else items[start:stop]


def _meta(kind: str) -> torch.Tensor:
    return torch.empty((), dtype=_DTYPES[kind], device="meta")


@_impure
def list_length(slot, anchor, start, stop) -> torch.Tensor:
    """``len(lst[start:stop])`` of the list ``slot`` holds when the graph runs."""
    if anchor.is_meta:
        return _meta("int")
    return torch.tensor(len(_window(slot.get(), start, stop)), dtype=torch.int64)


@_impure
def list_item(slot, anchor, index: int, kind: str) -> torch.Tensor:
    """``lst[index]`` when the graph runs: a ``kind`` number (its guard holds the kinds)."""
    if anchor.is_meta:
        return _meta(kind)
    return _checked(slot.get()[index], kind, slot, f"[{index}]")


@_impure
def list_sum(slot, anchor, start, stop, kind: str) -> torch.Tensor:
    """``sum(lst[start:stop])`` when the graph runs: Python's own sum, a ``kind``."""
    if anchor.is_meta:
        return _meta(kind)
    return _checked(builtins.sum(_window(slot.get(), start, stop)), kind, slot, " summed")


@_impure
def list_pick(slot, anchor, start, stop, kind: str, largest: bool) -> torch.Tensor:
    """``max``/``min`` of ``lst[start:stop]`` when the graph runs (Python's own: the first
    of equal items, its ValueError for none)."""
    if anchor.is_meta:
        return _meta(kind)
    pick = builtins.max if largest else builtins.min
    return _checked(pick(_window(slot.get(), start, stop)), kind, slot,
                    " max" if largest else " min")


def _checked(value, kind: str, slot, what: str) -> torch.Tensor:
    if type(value) is not NUMBER_KINDS[kind]:       # (an item replaced since its guard)
        raise RuntimeError(f"{slot.label}{what} is {value!r} when the graph runs; its "
                           f"trace read a {kind} there")
    return torch.tensor(value, dtype=_DTYPES[kind])


def _stand_in(fn, args, kind: str):
    from . import grad_flags
    from .symbolic import dispatch_record
    value = dispatch_record(fn, args, {})
    value._node.attrs[grad_flags.KEY] = False       # (a number: no gradient)
    mark(value, kind)
    if kind == "int":
        value._node.attrs["python_int"] = True
    return value


# ------------------------------------------------------------------ the kinds' guard
class ItemKinds:
    """The set of Python number kinds a slot's list holds, kept up to date by scanning
    only the items added since the last look (the same list grown), else all of them."""

    __slots__ = ("items", "seen", "kinds")

    def __init__(self):
        self.items, self.seen, self.kinds = None, 0, frozenset()

    def of(self, items) -> frozenset:
        if type(items) is not list:
            return frozenset({"not a list"})
        if items is not self.items or len(items) < self.seen:
            self.items, self.seen, self.kinds = items, 0, frozenset()
        if len(items) > self.seen:
            self.kinds = self.kinds | {_kind(v) for v in items[self.seen:]}
            self.seen = len(items)
        return self.kinds

    def __repr__(self) -> str:
        return f"<item kinds {sorted(self.kinds)}>"


def _kind(v) -> str:
    for name, cls in NUMBER_KINDS.items():
        if type(v) is cls:
            return name
    return type(v).__name__


def _decide(items, tracker: ItemKinds, how: str, appended: frozenset, start, stop):
    """The kind of a read (``how``: "item" or "sum") of ``lst[start:stop]`` when the list
    held ``items`` at the call and the trace appended numbers of the kinds ``appended``
    before it: None where it is not one kind known now (refused)."""
    kinds = tracker.of(items) | appended
    if not kinds <= NUMBER_KINDS.keys():     # (text or tuples among them: appended_lists)
        return None
    if how == "item" and not kinds:     # (an empty list: the read raises IndexError
        return "float"                  # when it runs, whatever its kind, as eager's)
    if how == "item":           # (also max/min: which item, only the run knows)
        return next(iter(kinds)) if len(kinds) == 1 else None
    window = start is not None or stop is not None
    if window and len(kinds) > 1:
        return None
    kind = "float" if "float" in kinds else "int"
    if window and kind == "float" and not (
            stop is None and (start is None or start < 0) and (items or appended)):
        return None     # (may be empty: Python's sum of none is the int 0)
    return kind


def read_kind(slot, tracker: ItemKinds, how: str, appended: frozenset, start, stop):
    """The guard's question, asked before each call: ``_decide`` for the list ``slot``
    holds then (a growing list of floats keeps the answer: one trace)."""
    return _decide(slot.get(), tracker, how, appended, start, stop)


def _kind_of_read(view, how: str, start=None, stop=None) -> str:
    """The kind of a read by the trace (its answer guarded from now on), or refused."""
    from .symbolic import current_graph
    tracker, appended = ItemKinds(), frozenset(view.appended_kinds())
    kind = _decide(view.before(), tracker, how, appended, start, stop)
    reads = getattr(current_graph().root, "tensor_reads", None)    # (the front door's
    if kind is None or reads is None:                               # record of questions:
        kinds = sorted(tracker.kinds | appended)                    # its guard asks again)
        view.refuse("reads an item of" if how == "item" else "sums a slice of",
                    f" holding {', '.join(kinds) or 'nothing'}" +
                    (" (it may be empty: Python's sum of none is the int 0)"
                     if how == "sum" and len(kinds) == 1 else ""))
    reads.note(read_kind, (view.slot(), tracker, how, appended, start, stop), {}, kind)
    return kind


# ------------------------------------------------------------------ reads
def item(view, index):
    """``lst[index]`` of the carried list ``view`` (an ``AppendOnly``)."""
    appended = view.appended()
    if type(index) is slice:
        if index.step is not None or not all(b is None or type(b) is int
                                             for b in (index.start, index.stop)):
            view.refuse("slices", " with a step or computed bounds")
        return Window(view, index.start, index.stop)
    if type(index) is not int:
        view.refuse("indexes", " with a computed index")
    if index < 0 and -index <= len(appended):
        return appended[index]                  # (what the graph appended this call)
    kind = _kind_of_read(view, "item")
    return _stand_in(list_item, (view.slot(), _ANCHOR, index, kind), kind)


def length(view, start=None, stop=None):
    return _stand_in(list_length, (view.slot(), _ANCHOR, start, stop), "int")


def total(view, start=None, stop=None):
    kind = _kind_of_read(view, "sum", start, stop)
    return _stand_in(list_sum, (view.slot(), _ANCHOR, start, stop, kind), kind)


def pick(view, start=None, stop=None, largest=True):
    kind = _kind_of_read(view, "item")
    return _stand_in(list_pick, (view.slot(), _ANCHOR, start, stop, kind, largest), kind)


_READS = {builtins.len: length, builtins.sum: total, builtins.max: pick,
          builtins.min: lambda view, start, stop: pick(view, start, stop, largest=False)}


class Window:
    """``lst[a:b]`` of a carried list: ``len``, ``sum``, ``max``, ``min`` of it are
    reads; anything else is refused."""

    __slots__ = ("_view", "_start", "_stop")

    def __init__(self, view, start, stop):
        object.__setattr__(self, "_view", view)
        object.__setattr__(self, "_start", start)
        object.__setattr__(self, "_stop", stop)

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        object.__getattribute__(self, "_view").refuse(f"uses a slice (.{name}) of", "")

    def _refuse(self, *args):
        object.__getattribute__(self, "_view").refuse("uses a slice of", " otherwise than "
                                                      "by len(), sum(), max() or min()")

    __len__ = __iter__ = __getitem__ = __contains__ = __bool__ = __setattr__ = _refuse
    __eq__ = __add__ = __reversed__ = _refuse
    __hash__ = None


def builtin_read(f, args, kwargs):
    """``len``/``sum``/``max``/``min`` of a carried list or a window of it, else
    ``NOT_READ``."""
    from .appended_lists import AppendOnly
    try:
        read = _READS.get(f)
    except TypeError:           # (an unhashable callable)
        return NOT_READ
    if kwargs or len(args) != 1 or read is None:
        return NOT_READ
    target = args[0]
    if type(target) is AppendOnly:
        view, start, stop = target, None, None
    elif type(target) is Window:
        view = object.__getattribute__(target, "_view")
        start = object.__getattribute__(target, "_start")
        stop = object.__getattribute__(target, "_stop")
    else:
        return NOT_READ
    return read(view, start, stop)
