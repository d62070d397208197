"""Python numbers a converted function keeps across calls: a counter in a closure cell, a
global, a list or an object (``nonlocal step; step += 1``, ``global iter_num``,
``it[0] += 1``, ``self.global_step += 1``).

A graph repeats tensor work, not Python work, so a trace that rebinds such a variable
used to fall back (its new value would be the trace's on every call). Here the variable
becomes graph state, as eager keeps it: the front door traces once as before, and when
the Python changes the trace made include rebinding a slot holding an int or a float to
another number, it traces again with those *slots* served:

- while the retrace runs, each slot holds a stand-in for its number (``read_slot``: the
  value the slot holds when the graph runs, an int or float stand-in as ``loss.item()``),
  so the step's arithmetic on it, branches on it (``if step % 10 == 0:``) and logs of it
  are graph values, never the trace's number;
- at the end of the trace, what the slot holds (a stand-in or a Python number) is set by a
  ``write_slot`` node when the graph runs, after the step's other work, as eager leaves it;
  the slot gets its own value back when the trace ends (the side-effect check sees none);
- the guard does not compare the slot's value (``Snapshot.carry``): a new count is not a
  new trace.

Slots: the traced function's closure cells and globals, the items of lists and the
attributes of plain objects (user classes without their own ``__setattr__``) they hold,
and the attributes of the method's object (a Trainer's ``self.global_step``). Only a
slot whose new value is a number of the same kind is carried (an int that becomes a
float, a number that becomes a tensor or a string fall back as before, naming the line);
so is nothing held by an ``nn.Module`` (its state is guarded as the model's). An int that
becomes a float is carried too (an AverageMeter's ``self.sum = 0``): the guard holds the
kind of each slot (``check``), so the next call, finding a float, traces once more.
"""
from __future__ import annotations

import contextlib
import math
import types
from typing import Any, List, Optional, Tuple

import torch

from . import appended_lists, carried_tensors, grad_flags, module_numbers
from .graph_ops import effect
from .introspection import NUMBER_KINDS, kind_of, mark
from .threads import PerThreadList

_ANCHOR = torch.zeros(())      # (gives read_slot's node a tensor input, as last_lrs's)
_DTYPES = {"int": torch.int64, "float": torch.float64, "bool": torch.bool}


class Slot:
    """Where a number is kept: a closure cell (``kind`` "cell"), a module namespace's name
    ("global"), a list's item ("item": ``it[0]``) or an object's attribute ("attr":
    ``self.step``, set in its ``__dict__`` as a plain class's ``__setattr__`` does)."""

    __slots__ = ("kind", "holder", "key", "label")

    def __init__(self, kind: str, holder, key, label: str):
        self.kind, self.holder, self.key, self.label = kind, holder, key, label

    def get(self):
        if self.kind == "cell":
            return self.holder.cell_contents
        return (vars(self.holder) if self.kind == "attr" else self.holder)[self.key]

    def set(self, value) -> None:
        if self.kind == "cell":
            self.holder.cell_contents = value
        else:
            (vars(self.holder) if self.kind == "attr" else self.holder)[self.key] = value

    def __repr__(self) -> str:
        return f"<{self.label}>"

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self


def attributes(slots: List[Slot]) -> set:
    """(id(object), name) of the attribute, item and global slots among ``slots``: the
    graph sets them when it runs, so a tensor branch may change them
    (``region_state.shared_touched``, ``region_numbers``)."""
    return {(id(s.holder), s.key) for s in slots if s.kind in ("attr", "item", "global")}


def _number(value) -> Optional[str]:
    return {int: "int", float: "float", bool: "bool"}.get(type(value))


def _form(value):
    """What a slot may carry: "int", "float", "bool" (a flag: ``self.stopped = True``),
    or a tensor's or tuple of tensors' form (``carried_tensors``: hidden state kept
    across calls); None otherwise."""
    kind = _number(value)
    if kind is not None or not isinstance(value, (torch.Tensor, tuple)):
        return kind
    if getattr(value, "_node", None) is not None and kind_of(value) is not None:
        return kind_of(value)           # (a graph value standing for a number)
    return carried_tensors.form(value)


_LIMIT = 32         # items or attributes of one holder looked at


_PLAIN_SETATTR = (object.__setattr__, types.SimpleNamespace.__setattr__)


def plain(value) -> bool:
    """An instance of a user class whose ``__dict__`` holds its state (not a module, a
    torch object or a class), or a ``SimpleNamespace``."""
    cls = type(value)
    return isinstance(getattr(value, "__dict__", None), dict) and \
        not isinstance(value, (type, types.ModuleType, types.FunctionType, types.MethodType,
                               torch.nn.Module, torch.Tensor)) and \
        cls.__module__.split(".")[0] not in ("torch", "builtins", "runtime", "transpiler") \
        and cls.__setattr__ in _PLAIN_SETATTR


def _held(value, label: str, depth: int = 1) -> List[Tuple[Slot, Any]]:
    """The numbers a list (its items), a dict (its str keys' items) or a plain object (its
    attributes) holds; and, ``depth`` levels down, those held by the lists, dicts and
    plain objects it holds (``state["stats"]["best"]``)."""
    if type(value) is list and len(value) <= _LIMIT:
        kind, entries = "item", [(i, v, f"{label}[{i}]") for i, v in enumerate(value)]
    elif type(value) is dict and len(value) <= _LIMIT:
        kind, entries = "item", [(k, v, f"{label}[{k!r}]") for k, v in value.items()
                                 if type(k) is str]
    elif plain(value) and len(vars(value)) <= _LIMIT:
        kind, entries = "attr", [(k, v, f"{label}.{k}") for k, v in vars(value).items()]
    else:
        return []
    found = []
    for key, v, name in entries:
        if _form(v) is not None:
            found.append((Slot(kind, value, key, name), v))
        elif depth > 0 and (type(v) in (list, dict) or plain(v)):
            found += _held(v, name, depth - 1)
    return found


def held_numbers(cells, globals_) -> List[Tuple[Slot, Any]]:
    """(slot, value) for the numbers held by the lists, dicts and plain objects that the
    cells ``[(name, cell, value)]`` and globals ``[(namespace, name, value)]`` hold, as
    they are now (``Snapshot.include_new``: a helper's, before it runs); and (slot,
    ``appended_lists.Before``) for the lists they hold (a helper's ``calls["vals"]``)."""
    return [found for name, cell, value in cells for found in _held(value, name)] + \
        [found for ns, name, value in globals_ for found in _held(value, name)] + \
        appended_lists.candidates(cells, globals_, None, Slot)


def candidates(cells, globals_, owner=None) -> List[Tuple[Slot, Any]]:
    """(slot, value) for the numbers a trace may rebind: held by the cells
    ``[(name, cell, value)]`` and globals ``[(namespace, name, value)]``, by the lists and
    plain objects they hold, and by the attributes of the method's object ``owner``."""
    found = []
    for name, cell, value in cells:
        if _form(value) is not None:
            found.append((Slot("cell", cell, None, f"nonlocal variable {name!r}"), value))
        else:
            found += _held(value, name)
    for ns, name, value in globals_:
        if _form(value) is not None:
            found.append((Slot("global", ns, name, f"global {name!r}"), value))
        else:
            found += _held(value, name)
    if owner is not None:
        found += _held(owner, "self")
    return found + appended_lists.candidates(cells, globals_, owner, Slot) + \
        module_numbers.candidates(cells, globals_, owner, Slot)


def _carries(was, now) -> bool:
    """Whether a slot holding a ``was`` number may be set to a ``now`` one: the same kind,
    or an int that becomes a float (an AverageMeter's ``self.sum = 0`` then
    ``self.sum += val * n``: the guard's ``check`` then traces once more for the float)."""
    return was is not None and (now == was or (was, now) == ("int", "float") or
                                carried_tensors.carries(was, now))


def check(slots: List[Slot]):
    """A guard's check ``() -> bool``: each of ``slots`` still holds a number of the kind
    the trace read there (the values themselves are the graph's to read)."""
    kinds = [(slot, _guard_form(slot.get())) for slot in slots]

    def carried_kinds() -> bool:
        for slot, kind in kinds:
            try:
                if _guard_form(slot.get()) != kind:
                    return False
            except (ValueError, KeyError, IndexError):
                return False
        return True
    return carried_kinds


def _guard_form(value):
    return _form(value) or appended_lists.form(value)


def rebound(before) -> List[Slot]:
    """The slots among ``before`` (``candidates``) the trace rebound to a number of the
    same kind (or a graph value standing for one: ``running + loss.item()``)."""
    out, seen = [], set()
    for slot, value in before:
        if (slot.kind, id(slot.holder), slot.key) in seen:
            continue
        seen.add((slot.kind, id(slot.holder), slot.key))
        if isinstance(value, appended_lists.Before):    # (a list appended numbers to)
            if value.grew():
                out.append(slot)
            continue
        try:
            now = slot.get()
        except (ValueError, KeyError):
            continue
        if now is not value and _carries(_form(value), _form(now)):   # (or its stand-in)
            out.append(slot)
    return out


def read_slot(slot: Slot, anchor: torch.Tensor, kind) -> torch.Tensor:
    """The number ``slot`` holds when the graph runs, as a 0-d int64/float64 tensor
    (tensors: ``carried_tensors.read_item``)."""
    if anchor.is_meta:
        return torch.empty((), dtype=_DTYPES[kind], device="meta")
    value = slot.get()
    if _form(value) != kind:
        raise RuntimeError(f"{slot.label} holds {value!r} when the graph runs; the graph "
                           f"was traced with a {kind} there")
    return torch.tensor(value, dtype=_DTYPES[kind])


read_slot._tograph_impure = True      # (ops.is_impure: never merged, dropped or moved)


@effect
def write_slot(slot: Slot, value, kind: Optional[str]) -> None:
    """``slot = value`` when the graph runs (``kind``: the number a graph value stands
    for, or a tensor form: the run's tensors, kept as ``carried_tensors.kept`` says;
    None: a Python number of the trace)."""
    slot.set(carried_tensors.kept(value, kind) if type(kind) is tuple else
             NUMBER_KINDS[kind](value.item()) if kind is not None else value)


_SERVED = PerThreadList()     # per thread: the [(slot, its own value, last set)] served
SERVED = _SERVED


def _runs_python() -> frozenset:
    from . import autograd_effects, scaler_effects
    return frozenset((autograd_effects.run_backward, autograd_effects.call_method,
                      autograd_effects.autograd_grad, scaler_effects.scaler_call))


class _Lazy:
    """``RUNS_PYTHON``: the graph targets that run Python code (hooks, an optimizer's or
    a scheduler's step) when the graph runs; asked only while a slot is served."""

    def __contains__(self, func) -> bool:
        global RUNS_PYTHON
        RUNS_PYTHON = _runs_python()
        return func in RUNS_PYTHON


RUNS_PYTHON = _Lazy()


def _stand_in(slot: Slot, kind):
    from .symbolic import dispatch_record
    if type(kind) is tuple:
        return carried_tensors.stand_in(slot, kind)
    stand_in = dispatch_record(read_slot, (slot, _ANCHOR, kind), {})
    stand_in._node.attrs[grad_flags.KEY] = False       # (a number: no gradient)
    mark(stand_in, kind)
    if kind == "int":
        stand_in._node.attrs["python_int"] = True
    return stand_in


def _flush(served) -> None:
    """Record a ``write_slot`` for each slot the traced code rebound since the last."""
    from .errors import GraphError
    from .symbolic import dispatch_record
    for entry in served:
        slot, value, last = entry
        now = slot.get()
        if now is last:
            continue
        form = _form(now)
        if not _carries(_form(value), form) or (type(form) is tuple and
                                                 not carried_tensors.computed(now)):
            what = "a tensor of that shape and dtype computed by the function" \
                if type(_form(value)) is tuple else "the list it appends to" \
                if type(value) is list else f"a {_number(value)}"
            raise GraphError(f"the function sets {slot.label} to a value that is not "
                             f"{what} (a Python side effect that a graph cannot repeat on "
                             f"every call)")
        dispatch_record(write_slot, (slot, now, form if isinstance(now, (torch.Tensor, tuple))
                                     else None), {})
        entry[2] = now


def serve_attributes(obj, graph) -> None:
    """Serve the number attributes of the plain object ``obj`` from now on in this trace
    (``deferred_calls``: a method the graph runs changes them): read when the graph runs
    after the next node running Python, set back at the end, guarded by kind only."""
    served = _SERVED[-1]
    known = {(id(entry[0].holder), entry[0].key) for entry in served}
    for key, value in vars(obj).items():
        if _number(value) is not None and (id(obj), key) not in known:
            slot = Slot("attr", obj, key, f"{type(obj).__name__}.{key}")
            served.append([slot, value, value])
            graph.root.carried_slots.append(slot)


def around_python(record, kinds=None):
    """``record()`` of a node that runs Python code when the graph runs (a backward's
    hooks, an optimizer's or scheduler's step: an ``lr_lambda`` reading ``iter_num``):
    the served slots are set before it, as eager's code has set them by then, and read
    again after it (it may change them; ``kinds``: {(id(holder), key): kind} a slot
    holds after it, where that is not the kind it had)."""
    from .symbolic import current_graph, dispatch_record
    served = _SERVED[-1] if _SERVED else None
    if not served:
        return record()
    lasts = [entry[2] for entry in served]
    _flush(served)
    result = record()
    if current_graph().parent is not None:
        _unchanged_in_branch(served, dispatch_record)
        for entry, last in zip(served, lasts):      # (the branch's writes run only when
            entry[2] = last                         # it is taken: written again after)
        return result
    for entry in served:
        if type(entry[1]) is list:      # (an AppendOnly: appends are nodes already)
            continue
        kind = (kinds or {}).get((id(entry[0].holder), entry[0].key),
                                 _form(entry[2]) or _form(entry[1]))   # (as it holds now)
        entry[2] = _stand_in(entry[0], kind)
        entry[0].set(entry[2])
    return result


def _unchanged_in_branch(served, dispatch_record) -> None:
    """After a node running Python in a tensor branch or loop body (``opt.step()`` under
    ``if (state.step + 1) % accum == 0:``): a value read there would not outlive the body,
    so the slots keep what the trace set, and a node checks on each run that the Python
    code left each number or tensor as it was (else a run-time error, never a stale
    value)."""
    for slot, value, now in served:
        if type(value) is list:
            continue
        dispatch_record(expect_slot, (slot, now, type(_form(value)) is tuple), {})


@effect
def expect_slot(slot: Slot, value, tensor: bool) -> None:
    """Raise if ``slot`` does not hold ``value`` (a number, a 0-d tensor standing for one,
    or with ``tensor`` a tensor of equal values) when the graph runs."""
    held = slot.get()
    if tensor:
        if not carried_tensors.same(held, value):
            raise RuntimeError(f"{slot.label} was changed by Python code the graph ran in a "
                               f"tensor branch or loop body (a hook, an lr_lambda): the "
                               f"graph does not read it back there")
        return
    expected = value.item() if isinstance(value, torch.Tensor) else value
    if not same_number(held, expected):
        raise RuntimeError(f"{slot.label} was changed by Python code the graph ran in a "
                           f"tensor branch or loop body (a hook, an lr_lambda): the graph "
                           f"does not read it back there; eager would see "
                           f"{slot.get()!r}, not {expected!r}")


def same_number(a, b) -> bool:
    """Whether ``a`` is the number ``b``: equal, with nan the same as nan (``==`` never
    holds for it: a loss that was nan raised 'eager would see nan, not nan') and -0.0 not
    the same as 0.0."""
    if a is b:
        return True
    if type(a) is float and type(b) is float:
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b) or \
            a != a and b != b
    return a == b


@contextlib.contextmanager
def serving(slots: List[Slot]):
    """While a trace runs: each of ``slots`` holds a stand-in read when the graph runs;
    what it holds at the end (and before any node running Python: ``around_python``) is
    set by a node; its own value is put back when the trace ends."""
    served = [[slot, slot.get(), None] for slot in slots]
    _SERVED.append(served)
    try:
        for entry in served:
            entry[2] = appended_lists.AppendOnly(entry[0]) if type(entry[1]) is list \
                else _stand_in(entry[0], _form(entry[1]))
            entry[0].set(entry[2])
        yield
        _flush(served)
    finally:
        _SERVED.pop()
        for slot, value, _ in served:
            slot.set(value)
