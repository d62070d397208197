"""Lists a converted function appends Python numbers to, kept across calls: the most
common line of a training script, ``losses.append(loss.item())`` (``history.append(
float(loss))``, ``self.log.append(...)``), the list held by a closure cell, a global, the
method's object, a plain object, a dict or an ``nn.Module`` they hold.

A graph repeats tensor work, not Python work, so a trace that appended to such a list used
to fall back. Here the append is a deferred Python effect, as ``runtime.carried_numbers``
carries a counter: when the first trace grew such a list by numbers only (an int, float
or bool, or a graph value standing for one), the front door traces again with the list's
*slot* (``carried_numbers.Slot``) holding an ``AppendOnly`` stand-in:

- its ``append(v)`` records an ``append_number`` node that appends the number of that run
  (``loss.item()``'s float, eager's element type) to the list the slot holds when the graph
  runs, in its place among the step's other effects (an ``lr_lambda`` run by a staged
  ``sched.step()`` after it sees it), once per call, in eager's order;
- ``len(losses)``, ``losses[-1]``, ``losses[0]``, ``sum(losses[-10:])``, ``min(losses)``
  in converted code are reads when the graph runs (``runtime.list_reads``), never the
  trace's values;
- anything else asked of it (iterating, ``sorted(losses)``, ``if losses:``) raises
  GraphError: the trace would bake in what the list held then, so the call falls back as
  before (naming the line), never a stale value;
- an append of a value a graph can repeat (``repeatable``: text, None, or a tuple of such
  values and numbers, as a hook's ``log.append((name, tuple(o.shape), round(v, 3)))`` or
  ``names.append(type(mod).__name__)``) is an ``append_value`` node, which builds the tuple
  of that run's numbers; a list holding one is read by no ``runtime.list_reads`` read;
- an append in a tensor branch or loop body, or of anything else (a tensor, a dict, a
  list), raises GraphError as well;
- the guard compares neither the list's contents nor (for a closure cell or a global) its
  binding, only that the slot still holds a list (``carried_numbers.check``): a new
  ``losses = []`` per epoch is neither a retrace nor stale.
"""
from __future__ import annotations

from typing import List, Optional

import torch.utils._pytree as pytree

from . import list_reads
from .errors import GraphError
from .graph_ops import effect
from .introspection import NUMBER_KINDS, kind_of
from .source_info import format_location, user_location


class Before:
    """A list as a slot held it before a trace: its object and the ids of its items."""

    __slots__ = ("items", "ids")

    def __init__(self, items: list):
        self.items, self.ids = items, [id(v) for v in items]

    def grew(self) -> bool:
        """Whether the list now is what it was plus numbers (or stand-ins for them) or
        other values a graph can append again (``repeatable``)."""
        now, n = self.items, len(self.ids)
        return len(now) > n and [id(v) for v in now[:n]] == self.ids and \
            all(repeatable(v) for v in now[n:])


_ATOMS = (str, bytes, type(None))
_TUPLE_ITEMS = 16


def repeatable(value, depth: int = 0) -> bool:
    """A value an ``append`` node can append on every run: a number (or its stand-in),
    text, None, or a (short, shallow) tuple of such values."""
    if kind_of(value) in NUMBER_KINDS or type(value) in _ATOMS:
        return True
    return type(value) is tuple and depth < 3 and len(value) <= _TUPLE_ITEMS and \
        all(repeatable(v, depth + 1) for v in value)


def held(value, label: str, slot_type) -> list:
    """(slot, Before) for the lists ``value`` holds (a dict's str keys, a plain object's or
    an ``nn.Module``'s public attributes, and the str keys of the dicts those attributes
    hold: a LightningModule's ``self.logged["train_loss"].append(float(loss))``)."""
    from .carried_numbers import plain
    if type(value) is dict:
        return [(slot_type("item", value, k, f"{label}[{k!r}]"), Before(v))
                for k, v in value.items() if type(k) is str and type(v) is list]
    if not (plain(value) or _module(value)):
        return []
    found = []
    for k, v in vars(value).items():
        if k.startswith("_"):
            continue
        if type(v) is list:
            found.append((slot_type("attr", value, k, f"{label}.{k}"), Before(v)))
        elif type(v) is dict:
            found += held(v, f"{label}.{k}", slot_type)
    return found


def _module(value) -> bool:
    import torch
    return isinstance(value, torch.nn.Module)


def candidates(cells, globals_, owner, slot_type) -> list:
    """(slot, Before) for the lists a trace may append to: held by the closure cells
    ``[(name, cell, value)]``, the globals ``[(namespace, name, value)]``, what they hold
    (one level) and the method's object ``owner`` (and its submodules)."""
    found = []
    for name, cell, value in cells:
        found += [(slot_type("cell", cell, None, f"closure variable {name!r}"),
                   Before(value))] if type(value) is list else held(value, name, slot_type)
    for ns, name, value in globals_:
        found += [(slot_type("global", ns, name, f"global {name!r}"), Before(value))] \
            if type(value) is list else held(value, name, slot_type)
    if owner is not None:
        found += held(owner, "self", slot_type)
        if _module(owner):
            for path, m in list(owner.named_modules())[1:64]:
                found += held(m, f"self.{path}", slot_type)
    return found


class AppendOnly:
    """What a carried list's slot holds while the graph is traced: ``append`` of a number
    is a node; anything else asked of it is refused (the module docstring)."""

    __slots__ = ("_slot", "_appended")

    def __init__(self, slot):
        object.__setattr__(self, "_slot", slot)
        object.__setattr__(self, "_appended", [])    # (value, kind) this trace appended

    def append(self, value) -> None:
        from .symbolic import current_graph, dispatch_record
        slot = object.__getattribute__(self, "_slot")
        kind = kind_of(value)
        graph = current_graph()
        if kind not in NUMBER_KINDS and not repeatable(value):
            _refuse(f"appends a {type(value).__name__} to {slot.label}, a list the graph "
                    f"appends numbers to when it runs (numbers, text, None and tuples of "
                    f"them only)")
        if kind in NUMBER_KINDS:
            dispatch_record(append_number, (slot, kind, value), {})
        else:
            leaves, spec = pytree.tree_flatten(value)
            dispatch_record(append_value, (slot, spec, tuple(kind_of(v) for v in leaves))
                            + tuple(leaves), {})
            kind = "a " + type(value).__name__   # (no number: list_reads refuses a read)
        if graph is not None and graph.parent is None:   # (what a later lst[-1] reads)
            object.__getattribute__(self, "_appended").append((value, kind))

    def extend(self, values) -> None:
        """``losses.extend([a, b])`` and ``stats["clipfracs"] += [t.item()]`` (CleanRL):
        an append per item of a list or tuple written in the code; any other iterable
        (a tensor, a generator) would be iterated by the trace, so it is refused."""
        if type(values) not in (list, tuple):
            _refuse(f"extends {object.__getattribute__(self, '_slot').label} by a "
                    f"{type(values).__name__}, a list the graph appends numbers to when it "
                    f"runs (a list or tuple of numbers only)")
        for value in values:
            self.append(value)

    def __iadd__(self, values):
        self.extend(values)
        return self

    def __getitem__(self, index):
        return list_reads.item(self, index)     # (a read when the graph runs)

    # what runtime.list_reads asks of it
    def appended(self) -> list:
        return [v for v, _ in object.__getattribute__(self, "_appended")]

    def appended_kinds(self) -> list:
        return [k for _, k in object.__getattribute__(self, "_appended")]

    def slot(self):
        return object.__getattribute__(self, "_slot")

    def before(self) -> list:
        """The list the slot held at the call: the served slot's own value, or what an
        argument's cell holds (``transpiler.appended_arguments``: never served)."""
        from .carried_numbers import SERVED
        for served in reversed(SERVED):
            for entry in served:
                if entry[2] is self:
                    return entry[1]
        return self.slot().get()

    def refuse(self, what: str, detail: str):
        _refuse(f"{what} {object.__getattribute__(self, '_slot').label}{detail}, a list it "
                f"appends to: a graph reads such a list when it runs only by len(), sum(), "
                f"max(), min() or an item, of it or of a slice")

    def __getattr__(self, name):
        if name.startswith("_"):        # (what the machinery asks of any object)
            raise AttributeError(name)
        _refuse(f"uses {object.__getattribute__(self, '_slot').label} (.{name}), a list it "
                f"appends to: the graph appends when it runs, a trace would keep what the "
                f"list held then")

    def _read(self, *args):
        _refuse(f"reads {object.__getattribute__(self, '_slot').label}, a list it appends "
                f"to: the graph appends when it runs, a trace would keep what the list "
                f"held then")

    __len__ = __iter__ = __setitem__ = __contains__ = __bool__ = _read
    __eq__ = __add__ = __reversed__ = __setattr__ = _read
    __hash__ = None


class ReadError(GraphError):
    """What the trace did with a carried list beyond appending numbers: the call's
    reason (the front door says it, not the first trace's "mutates")."""


def _refuse(what: str):
    location = user_location()
    error = ReadError(f"{format_location(location)}: the function {what}")
    error.location = location
    raise error


@effect
def append_number(slot, kind: str, value) -> None:
    """``slot``'s list ``.append(value)`` when the graph runs: the Python ``kind`` number
    (a 0-d tensor standing for it, or the trace's Python number)."""
    import torch
    slot.get().append(NUMBER_KINDS[kind](value.item()) if isinstance(value, torch.Tensor)
                      else value)


@effect
def append_value(slot, spec, kinds: tuple, *leaves) -> None:
    """``slot``'s list ``.append(value)`` when the graph runs, for a ``repeatable`` value
    that is no number: rebuilt from its pytree ``spec`` and ``leaves``, each 0-d tensor
    standing for a number as the Python number of its kind (``kinds``)."""
    import torch
    values = [NUMBER_KINDS[k](v.item()) if isinstance(v, torch.Tensor) and k in NUMBER_KINDS
              else v for v, k in zip(leaves, kinds)]
    slot.get().append(pytree.tree_unflatten(values, spec))


def form(value) -> Optional[str]:
    """"list" for a list (what a carried list's slot must hold at each call), else None."""
    return "list" if type(value) is list else None


def grown(before: List[tuple]) -> list:
    """The slots among ``before`` ((slot, Before)) whose list the trace grew by numbers."""
    return [slot for slot, b in before if b.grew()]
