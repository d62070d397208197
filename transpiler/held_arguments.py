"""List and dict arguments the function changes in place are held whole, as argument
objects, instead of being flattened:

    def step(x, items):          # step(x, [a, b, c])
        y = items.pop()
        items.insert(0, x)       # items[1:] = [...], del items[0], items.clear(), d[k] = v
        return y + x

A plain ``list``/``dict``/``OrderedDict`` argument is a pytree container: the trace
receives a rebuilt copy, so a change to it is a side effect on the caller's object that the
graph would not repeat (the trace is refused). When a trace finds such an argument changed
(``changed``), the function remembers its position (``GraphFunction._held``) and traces
again with it as one leaf (``flatten``): ``runtime.argument_objects`` then walks it like a
list or dict an object holds (its tensors graph inputs, its structure guarded) and writes
the call's changes back to the caller's container in place, its identity kept.
"""
from __future__ import annotations

import collections
from typing import FrozenSet, Union

import torch.utils._pytree as pytree

from runtime.errors import GraphError

Position = Union[int, str]          # a positional index or a keyword's name
_HELD_TYPES = (list, dict, collections.OrderedDict)


class Changed(GraphError):
    """A trace changed top-level list/dict arguments (``positions``): trace again with them
    held (``GraphFunction._build_entry``)."""

    def __init__(self, message: str, positions: FrozenSet[Position]):
        super().__init__(message)
        self.positions = positions


def _positioned(args, kwargs):
    yield from enumerate(args)
    yield from kwargs.items()


def flatten(args, kwargs, held: FrozenSet[Position]):
    """``pytree.tree_flatten((args, kwargs))`` with the held arguments (those that are
    plain lists or dicts in this call) as leaves."""
    if not held:
        return pytree.tree_flatten((args, kwargs))
    keep = {id(v) for p, v in _positioned(args, kwargs) if p in held and type(v) in _HELD_TYPES}
    if not keep:
        return pytree.tree_flatten((args, kwargs))
    return pytree.tree_flatten((args, kwargs), is_leaf=lambda v: id(v) in keep)


def leaf_count(value, held_here: bool) -> int:
    """How many flat leaves an argument is (one when held)."""
    return 1 if held_here and type(value) in _HELD_TYPES else len(pytree.tree_leaves(value))


def changed(snapshot, sargs, skwargs, held: FrozenSet[Position]) -> FrozenSet[Position]:
    """The positions of top-level list/dict arguments, not held yet, that the trace changed
    (``snapshot``: taken on the arguments the trace received)."""
    labels = snapshot.changed_labels()
    out = set()
    for p, v in _positioned(sargs, skwargs):
        label = f"argument #{p}" if isinstance(p, int) else f"argument {p!r}"
        if p not in held and type(v) in _HELD_TYPES and label in labels:
            out.add(p)
    return frozenset(out)


def reached(error, sargs, skwargs, held: FrozenSet[Position]) -> FrozenSet[Position]:
    """The positions of top-level list/dict arguments, not held yet, that a tensor region
    changed (``error``: its refusal, ``state_aliases.CallerContainer``)."""
    container = getattr(error, "container", None)
    if container is None:
        return frozenset()
    return frozenset(p for p, v in _positioned(sargs, skwargs)
                     if v is container and p not in held and type(v) in _HELD_TYPES)
