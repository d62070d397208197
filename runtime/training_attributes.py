"""Python reads and writes of an optimizer's ``param_groups`` and a scheduler's
``last_epoch`` inside a traced training step: graph values read and set when it runs.

Training loops read and write these in Python: nanoGPT's warmup
``for g in opt.param_groups: g["lr"] = lr``, ``lr = opt.param_groups[0]["lr"]`` for a
log, ``if sched.last_epoch % 10 == 0:``. The graph's own steps (``opt.step()``,
``sched.step()``, run as effect nodes: ``autograd_effects``) change them on every run, so
the value seen while tracing must not be kept, and a changed lr must not mean a new trace.
While the call is traced, every torch.optim optimizer and lr scheduler it can reach (its
arguments, globals, closure values, and the objects they hold one level down) answers
through stand-ins:

- ``opt.param_groups`` is a list of ``_Group`` views of the real groups: reading a number
  (``g["lr"]``, ``g["momentum"]``, a tuple of them such as ``g["betas"]``) is a
  ``read_value`` node, the value the group holds at that point of each run (an int or
  float stand-in, as ``loss.item()``); ``g["params"]`` is the real list; writing a key
  the group has (a number, a number's stand-in, or a tuple of numbers) is a ``set_value``
  node that sets it on the real group when the graph runs, in its place among the
  optimizer's and scheduler's calls, as eager sets it. Nothing is changed while tracing.
- ``sched.last_epoch`` reads a ``read_value`` node (an int stand-in).

Refused (the call falls back naming the line; strict: ``ConversionError``): reading a key
whose value is not a number (``g["nesterov"]``, ``g["foreach"]``; a staged step's value is
not the caller's to guard), writing a new key or a value that is not a number, deleting
keys, changing the list of groups, setting ``last_epoch``.
"""
from __future__ import annotations

import collections.abc
import contextlib
from typing import Any, Dict, Iterable, List, Optional

import torch

from . import batchnorm_average, optimizer_reads
from .errors import GraphError
from .graph_ops import effect
from .introspection import NUMBER_KINDS, kind_of, mark
from .plain_containers import dict_values, list_copy

_NUMBERS = (int, float)


def _impure(fn):
    fn._tograph_impure = True           # (ops.is_impure: never merged, dropped or moved)
    return fn


def _lookup(obj, path):
    value = obj
    for step in path:
        value = getattr(value, step) if isinstance(step, str) and not isinstance(
            value, (dict, list, tuple)) else value[step]
    return value


@_impure
def read_value(owner, anchor: torch.Tensor, path: tuple, kind: str) -> torch.Tensor:
    """``owner.obj`` followed along ``path`` (``("param_groups", 0, "lr")``) when the
    graph runs, as a 0-d float64 (``kind`` "float") or int64 tensor standing for it
    (``anchor``: a parameter of the optimizer, giving the node a tensor input)."""
    dtype = torch.float64 if kind == "float" else torch.int64
    if anchor.is_meta:
        return torch.empty((), dtype=dtype, device="meta")
    value = _lookup(owner.obj, path)
    if type(value) is not NUMBER_KINDS[kind]:
        raise RuntimeError(f"{type(owner.obj).__name__}.{_text(path)} holds {value!r} "
                           f"when the graph runs; the graph was traced with a {kind} there")
    return torch.tensor(value, dtype=dtype)


@effect
def set_value(owner, params, path: tuple, value, kind: Optional[str]) -> None:
    """``owner.obj.param_groups[i][key] = value`` when the graph runs (``value``: a
    Python value, or a graph value standing for a number of ``kind``; ``params``: the
    optimizer's parameters, named so that no read of its state moves across it)."""
    if kind == "tuple":         # ((value, its kind or None for a Python number), ...)
        value = tuple(NUMBER_KINDS[k](v.item()) if k is not None else v for v, k in value)
    elif kind is not None:
        value = NUMBER_KINDS[kind](value.item())
    container = _lookup(owner.obj, path[:-1])
    container[path[-1]] = value


def _text(path) -> str:
    return "".join(f".{p}" if isinstance(p, str) and i == 0 else f"[{p!r}]"
                   for i, p in enumerate(path))


# ------------------------------------------------------------------------- trace stand-ins
def _refuse(what: str) -> GraphError:
    from .autograd_effects import _refuse as refuse     # (autograd_effects imports late)
    return refuse(what)


def _anchor(optimizer) -> torch.Tensor:
    for group in optimizer.param_groups:
        for p in group["params"]:
            return p
    raise _refuse(f"a Python read or write of {type(optimizer).__name__}'s param_groups "
                  f"(an optimizer without parameters)")


def _read(owner, optimizer, path: tuple, value):
    """The stand-in for ``value``, read along ``path`` from ``owner`` when the graph runs."""
    from .autograd_effects import Held, note_value
    from .symbolic import dispatch_record
    kind = "float" if type(value) is float else "int"
    out = dispatch_record(read_value, (Held(owner), _anchor(optimizer), path, kind), {})
    note_value(out, owner)
    mark(out, kind)
    if kind == "int":       # (a Python int: ``(e + 1) / 3`` divides as Python's, in double)
        out._node.attrs["python_int"] = True
    return out


class _Group(collections.abc.MutableMapping):
    """One of ``param_groups`` while a trace runs (see the module's docstring)."""

    def __init__(self, optimizer, index: int, group: dict):
        self._optimizer, self._index, self._group = optimizer, index, group
        self._written: dict = {}    # key -> the value this trace set there (its kind)

    def __getitem__(self, key):
        value = self._written.get(key, self._group[key])     # (as the run will hold it)
        if key == "params":
            return value
        path = ("param_groups", self._index, key)
        if type(value) in _NUMBERS:
            return _read(self._optimizer, self._optimizer, path, value)
        if isinstance(value, tuple) and value and all(type(v) in _NUMBERS for v in value):
            return tuple(_read(self._optimizer, self._optimizer, path + (i,), v)
                         for i, v in enumerate(value))
        raise _refuse(f"a Python read of {type(self._optimizer).__name__}.param_groups"
                      f"[{self._index}][{key!r}] (not a number: the graph's staged steps "
                      f"would not see it change)")

    def __setitem__(self, key, value) -> None:
        from .autograd_effects import Held, note_owner, owner_params
        from .symbolic import contains_symbolic, dispatch_record
        name = f"{type(self._optimizer).__name__}.param_groups[{self._index}][{key!r}]"
        if key not in self._group or key == "params":
            raise _refuse(f"setting {name} (only the numbers a group holds are staged)")
        kind = kind_of(value)
        if isinstance(value, tuple):
            kinds = [kind_of(v) for v in value]
            if any(k not in NUMBER_KINDS for k in kinds):
                raise _refuse(f"setting {name} to a tuple that is not of numbers")
            if contains_symbolic(value):
                value, kind = tuple(zip(value, [k if isinstance(v, torch.Tensor) else None
                                                for v, k in zip(value, kinds)])), "tuple"
            else:
                kind = None
        elif kind not in NUMBER_KINDS:
            raise _refuse(f"setting {name} to a value that is not a number")
        elif not isinstance(value, torch.Tensor):
            kind = None                 # (a Python number: a constant of the trace)
        path = ("param_groups", self._index, key)
        dispatch_record(set_value, (Held(self._optimizer), owner_params(self._optimizer),
                                    path, value, kind), {})
        self._written[key] = NUMBER_KINDS[kind_of(value)](0) if kind not in (None, "tuple") \
            else value if kind is None else tuple(v if k is None else NUMBER_KINDS[k](0)
                                                  for v, k in value)
        note_owner(self._optimizer)

    def __delitem__(self, key) -> None:
        raise _refuse(f"deleting a key of {type(self._optimizer).__name__}.param_groups"
                      f"[{self._index}]")

    def __iter__(self):
        return iter(self._group)

    def __len__(self) -> int:
        return len(self._group)

    def __contains__(self, key) -> bool:
        return key in self._group

    def __repr__(self) -> str:
        return f"<param group {self._index} of {type(self._optimizer).__name__}>"


class _Groups(list):
    """``param_groups`` while a trace runs: its groups, a list that cannot change."""

    def _refused(self, *args, **kwargs):
        raise _refuse("changing an optimizer's list of param_groups")

    append = extend = insert = pop = remove = clear = sort = reverse = _refused
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refused


_CLASSES: Dict[type, type] = {}


def _epoch_class(cls: type) -> type:
    """``cls`` with ``last_epoch`` read as a graph value (made once per class)."""
    made = _CLASSES.get(cls)
    if made is None:
        def get(self):
            value = self.__dict__["last_epoch"]
            if type(value) is not int:
                raise _refuse(f"a Python read of {cls.__name__}.last_epoch (not an int)")
            return _read(self, self.optimizer, ("last_epoch",), value)

        def set_(self, value):
            raise _refuse(f"setting {cls.__name__}.last_epoch")
        made = _CLASSES[cls] = type(cls.__name__, (cls,), {
            "last_epoch": property(get, set_), "__module__": cls.__module__,
            "__qualname__": cls.__qualname__})
    return made


def _found(roots: Iterable[Any]) -> List[Any]:
    """The optimizers and lr schedulers among ``roots`` and what they hold one level down
    (attributes of plain objects, items of lists, tuples and dicts)."""
    from .autograd_effects import _is_scheduler
    found, seen = [], set()

    def visit(value, depth: int) -> None:
        if id(value) in seen or isinstance(value, (torch.Tensor, type)) or value is None:
            return
        seen.add(id(value))
        if isinstance(value, torch.optim.Optimizer) or _is_scheduler(value):
            found.append(value)
            if _is_scheduler(value):
                visit(value.optimizer, depth)
            return
        if depth == 0 or isinstance(value, (torch.nn.Module, str, bytes, int, float)):
            return
        if isinstance(value, (list, tuple)):        # (not the subclass's own methods)
            items = list_copy(value)[:64]
        elif isinstance(value, dict):
            items = list(dict_values(value))[:64]
        elif isinstance(getattr(value, "__dict__", None), dict) and \
                not isinstance(value, (type(contextlib), type(_found))):
            items = list(vars(value).values())[:64]
        else:
            return
        for item in items:
            visit(item, depth - 1)
    for root in roots:
        visit(root, 1)
    return found


@contextlib.contextmanager
def served(graph, roots):
    """While the trace of ``graph`` runs, the optimizers and schedulers reachable from
    ``roots`` answer through graph values; ``graph.served_attributes`` names what they
    served ({id(object): attribute names}) and ``graph.read_attributes`` what the code
    read on each (``optimizer_reads``), for the guard (``Snapshot.release``)."""
    from .autograd_effects import _is_scheduler
    undo, names = [], {}
    found = _found(roots)
    try:
        for obj in found:
            if isinstance(obj, torch.optim.Optimizer) and \
                    type(vars(obj).get("param_groups")) is list and \
                    all(type(g) is dict for g in obj.param_groups):
                real = obj.param_groups
                obj.param_groups = _Groups(_Group(obj, i, g) for i, g in enumerate(real))
                undo.append((obj, real))
                names[id(obj)] = {"param_groups"}
            elif _is_scheduler(obj) and type(vars(obj).get("last_epoch")) is int and \
                    "last_epoch" not in type(obj).__dict__:
                cls = type(obj)
                obj.__class__ = _epoch_class(cls)
                undo.append((obj, cls))
                names[id(obj)] = {"last_epoch", "optimizer"}   # (never rebound by a step)
        graph.served_attributes = names
        graph.read_attributes = {}
        with batchnorm_average.swapped(roots), \
                optimizer_reads.recording(found, graph.read_attributes):
            yield
    finally:
        for obj, real in reversed(undo):
            if isinstance(real, type):
                obj.__class__ = real
            else:
                obj.param_groups = real
