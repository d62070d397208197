"""Containers whose structure differs between the branches of a tensor condition.

    d = {"u": x}
    if x.sum() > 0:
        d["k"] = x * 2           # a key added on one path only
    ...
    if y.sum() > 0:
        return x, (x, y)         # an early return of another structure than the last
    return x, d

A ``cond`` node has one output structure for both paths. Where the two paths leave plain
containers (tuples, lists, dicts) that differ in kind, length, keys or key order, the
container leaves the ``cond`` as a ``PathChoice``: both paths' containers are outputs (each
path fills the other's tensors with zero placeholders, ``Fill``), with an index saying
which path ran. A result holding it is rebuilt on each call (``runtime.outputs``) with the
chosen container, in that path's own key order. Used while tracing -- read, tested with
``in``, measured, iterated, written, passed to code that is not converted -- it raises
``GraphError`` (it is a ``PathValue``): the call falls back. Not chosen this way (the
mismatch stays a ``BranchMismatchError``): containers holding objects that keep their
identity (``ObjectState``: an object's state cannot be two states at once), and code that
compares with ``is`` (``path_values.allowed``).
"""
from __future__ import annotations

import sys

import torch.utils._pytree as pytree

from . import path_values
from .path_values import PathChoice, PathValue, allowed
from .subgraphs import _fill_like, _is_object_state, zip_structures
from .tensor_list import TensorList


def _flatten(choice: PathChoice):
    return [choice.index, choice.options[0], choice.options[1]], None


def _unflatten(values, _context) -> PathChoice:
    return PathChoice(values[0], (values[1], values[2]))


pytree.register_pytree_node(PathChoice, _flatten, _unflatten)


def choose_structures(then_tree, else_tree):
    """The two paths' trees with each pair of differing containers replaced by a
    ``PathChoice`` on both sides (same structure: index, then's container, else's)."""
    if not allowed():
        return then_tree, else_tree

    def split(a, b):
        if not (_container(a) or _container(b)) or _descends(a, b) or \
                pytree.tree_structure(a) == pytree.tree_structure(b):
            return None         # (two leaves: ``_merge_leaf``'s rules)
        if _holds_objects(a) or _holds_objects(b) or _undefined(a) or _undefined(b) or \
                _chosen_value(a) or _chosen_value(b) or _reached_elsewhere((a, b)):
            return None
        path_values.MADE[0] += 1
        return PathChoice(0, (a, _fill_like(b))), PathChoice(1, (_fill_like(a), b))
    return zip_structures(then_tree, else_tree, split)


def _container(v) -> bool:
    return type(v) in (tuple, list, dict, PathChoice, TensorList) or (
        isinstance(v, tuple) and hasattr(v, "_fields"))


def _descends(a, b) -> bool:
    """``zip_structures`` walks into this pair (same kind and length, same keys in order)."""
    if type(a) is not type(b):
        return False
    if type(a) in (tuple, list):
        return len(a) == len(b)
    return type(a) is dict and list(a) == list(b)


def _undefined(v) -> bool:
    """Unassigned on this path (a NameError in Python if used), or not observable."""
    return any(getattr(type(x), flag, False) for x in pytree.tree_leaves(v)
               for flag in ("__tograph_undefined__", "__tograph_unobservable__"))


def _chosen_value(v) -> bool:
    """A Python value chosen per run facing a container (a region's ``cm.log`` made a
    PathValue on one path, while the other path's result holds the list itself, whose
    later changes that PathValue does not follow): not chosen this way."""
    return isinstance(v, PathValue) and type(v) is not PathChoice


def _reached_elsewhere(trees) -> bool:
    """A list or dict of the containers that another name reaches too (``cm.log``
    returned early, a global list) or that they hold twice: as an output it would be a
    copy, blind to later changes of the original and to identity."""
    return bool(reached_elsewhere(trees))


def reached_elsewhere(trees) -> list:
    """The lists and dicts of ``trees`` that another name reaches too, or that they hold
    twice (see ``_reached_elsewhere``)."""
    from .operators.state_aliases import _roots
    from .outputs import reachable
    found, twice = {}, []

    def visit(v):
        if type(v) in (list, dict):
            if id(v) in found:
                twice.append(v)
                return
            found[id(v)] = v
            for x in (dict.values(v) if type(v) is dict else v):
                visit(x)
        elif type(v) in (tuple, PathChoice) or isinstance(v, tuple):
            for x in (v.options if type(v) is PathChoice else v):
                visit(x)
    visit(trees)
    if not found:
        return []
    roots = [v for _, v in _roots()] + _global_containers()
    return twice + [v for v in reachable(roots) if id(v) in found]


def reached_ids(values) -> set:
    """The ids of ``values`` (lists, dicts, dict subclasses) that a name reaches: a local of
    the running converted frames, the traced function's arguments, a global."""
    from .operators.state_aliases import _roots
    from .outputs import reachable
    wanted = {id(v) for v in values}
    roots = [v for _, v in _roots()] + _global_containers()
    return {id(v) for v in reachable(roots) if id(v) in wanted}


def _global_containers() -> list:
    """The lists and dicts among the globals of the converted code running."""
    out, seen = [], set()
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename.startswith("<tograph generated") and \
                id(frame.f_globals) not in seen:
            seen.add(id(frame.f_globals))
            out.extend(v for v in frame.f_globals.values() if type(v) in (list, dict))
        frame = frame.f_back
    return out


def _holds_objects(tree) -> bool:
    return any(_is_object_state(v)
               for v in pytree.tree_leaves(tree, is_leaf=_is_object_state))
