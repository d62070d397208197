"""Objects a tensor ``if`` makes anew on each path, merged into one.

    if x.sum() > 0:
        out = Output(x * 2, 1)       # a new object on each path (a model's output, a
    else:                            # state record): eager hands back the one its path made
        out = Output(x, 0)

Each branch's trace makes its own object, so the two paths' results hold two objects of
the same class where a ``cond`` needs one structure. Where neither object is reached by
anything but the branch results (no name, container or object that existed before holds
it: ``gc.get_referrers``, and
no running function's local), which object comes back is not observable, only its class and
state: the else path's object is replaced by the then path's, carrying the else path's
attributes (``unify``), and the ``cond`` sets that object's attributes to the path taken.
Objects of different classes or attribute names, one object paired with two, or one that
something else holds, stay a structure mismatch (the call falls back).
"""
from __future__ import annotations

import gc
import sys

import torch.utils._pytree as pytree

from .subgraphs import zip_structures


def _is_state(v) -> bool:
    return getattr(type(v), "__tograph_object_state__", False)


def unify(then_tree, else_tree, operands):
    """``(then_tree, else_tree)`` with each pair of path-made objects at the same place
    given the then path's object (see the module docstring); ``operands``: the state the
    ``cond`` got (its objects existed before)."""
    pairs = {}                      # id(then object) -> else object, and the reverse

    def find(x, y):
        if _is_state(x) and _is_state(y):
            if x.obj is not y.obj:
                pairs.setdefault(id(x.obj), []).append(y.obj)
                pairs.setdefault(id(y.obj), []).append(x.obj)
            for k in x.attrs.keys() & y.attrs.keys():
                zip_structures(x.attrs[k], y.attrs[k], find)
            return x, y
        return None
    zip_structures(then_tree, else_tree, find)
    if not pairs or not _one_to_one(pairs) or _objects_in(operands) & pairs.keys() or \
            not _unreached(pairs):
        return then_tree, else_tree

    def merge(x, y):
        if _is_state(x) and _is_state(y):
            attrs = dict(y.attrs)
            for k in x.attrs.keys() & y.attrs.keys():
                attrs[k] = zip_structures(x.attrs[k], y.attrs[k], merge)[1]
            obj = x.obj if type(x.obj) is type(y.obj) and set(x.attrs) == set(y.attrs) and \
                (x.items is None) == (y.items is None) else y.obj
            return x, type(y)(obj, attrs, y.items)
        return None
    return zip_structures(then_tree, else_tree, merge)


def _one_to_one(pairs) -> bool:
    return all(len({id(o) for o in objs}) == 1 for objs in pairs.values())


def _objects_in(tree, found=None) -> set:
    """Ids of the objects whose states ``tree`` holds, at any depth."""
    found = set() if found is None else found
    for leaf in pytree.tree_flatten(tree, is_leaf=_is_state)[0]:
        if _is_state(leaf) and id(leaf.obj) not in found:
            found.add(id(leaf.obj))
            _objects_in((leaf.attrs, leaf.items), found)
    return found


def _unreached(pairs) -> bool:
    """Whether the paired objects are held by the branch results' object states only."""
    objects = {id(objs[0]): objs[0] for objs in pairs.values()}
    mine = {id(objects)} | {id(objs) for objs in pairs.values()}
    for o in objects.values():
        if type(o).__module__.split(".")[0] in ("torch", "runtime", "transpiler", "builtins"):
            return False
        for r in gc.get_referrers(o):
            if _is_state(r) or id(r) in mine:
                continue
            return False
    frame = sys._getframe(1)      # a running function's local (frames gc does not see)
    while frame is not None:
        if any(id(v) in objects for v in frame.f_locals.values()):
            return False
        frame = frame.f_back
    return True
