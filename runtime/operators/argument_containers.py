"""Lists and dicts of the call's arguments that ``runtime.argument_objects`` writes back
(its holders: a list or dict argument the function changes in place, one an argument
object holds), carried through a tensor region in place like one an object holds.

    def step(x, items):             # step(x, [a, b])
        if x.sum() > 0:
            items[0] = items[0] * 2     # or items.append(x) on both paths
        return items[0]

A plain list or dict in a region's state comes out of the node as a new container; where
the caller reaches the old one that is refused (``state_aliases``). A container the call
writes back keeps its identity: it travels as a ``HeldContainer`` (``held_containers``),
its items put back into it in place after the node, so the trace ends with the caller's
list holding the node's outputs, and the write-back replays that on each call.
"""
from __future__ import annotations

from ..threads import PerThreadList

_HOLDING = PerThreadList()      # (per thread) one set of container ids per trace


def hold(containers) -> set:
    """While tracing: ``containers`` (the argument objects' lists and dicts) are carried
    in place, until ``release`` of what this returns."""
    ids = {id(c) for c in containers if type(c) in (list, dict)}
    _HOLDING.append(ids)
    return ids


def release(ids: set) -> None:
    for i in range(len(_HOLDING) - 1, -1, -1):
        if _HOLDING[i] is ids:
            del _HOLDING[i]
            return


def held(value) -> bool:
    """Whether ``value`` is a plain list or dict the traced call writes back."""
    return type(value) in (list, dict) and bool(_HOLDING) and id(value) in _HOLDING[-1]
