"""The items of the user's lists, tuples, sets, deques and dicts as Python stores them, read
without running their class's code.

tograph inspects the containers a function can reach (guards, fingerprints, snapshots for a
fallback's restore, argument walking). ``v.items()``, ``dict(v)``, ``list(v)``, ``len(v)``
or ``for x in v`` run what a subclass overrides -- transformers' ``ACT2FN`` (an
``OrderedDict`` whose ``__getitem__`` builds a module) built every activation of its table
that way, one of which makes an ``nn.Parameter`` -- code eager never runs. The base
classes' own C methods read the storage itself: ``dict.items(v)``,
``OrderedDict.items(v)`` (its order: ``move_to_end``), ``list.__iter__(v)``,
``tuple.__len__(v)``. They call no ``__getitem__``, ``__iter__``, ``keys``, ``__len__``
or ``__missing__`` (a ``defaultdict`` read here never inserts). Torch-free.
"""
from __future__ import annotations

import collections


def dict_items(d):
    """The (key, value) pairs ``d`` (a dict, of any subclass) stores, in its order."""
    return (collections.OrderedDict if isinstance(d, collections.OrderedDict)
            else dict).items(d)


def dict_values(d):
    """The values ``d`` (a dict, of any subclass) stores, in its order."""
    return (collections.OrderedDict if isinstance(d, collections.OrderedDict)
            else dict).values(d)


def dict_copy(d) -> dict:
    """A plain dict of what ``d`` stores, in its order."""
    return dict(dict_items(d))


_BASES = (list, tuple, dict, set, frozenset, collections.deque)


def _base(v) -> type:
    """The built-in container class ``v`` is an instance of (``v``'s own class where none)."""
    return next((base for base in _BASES if isinstance(v, base)), type(v))


def elements(seq):
    """An iterator over what ``seq`` (a list, tuple, deque or set, of any subclass)
    stores; a dict's keys."""
    return _base(seq).__iter__(seq)


def list_copy(seq) -> list:
    """A plain list of what ``seq`` (a list, tuple, deque or set, of any subclass) stores."""
    return list(elements(seq))


def size(v) -> int:
    """The number of items ``v`` (a list, tuple, dict, set, deque) stores."""
    return _base(v).__len__(v)


def put_back(obj, copy) -> None:
    """Make ``obj`` (a list, deque, dict or set, of any subclass) hold ``copy`` again (a fallback's
    restore), through the base class's methods (an ``OrderedDict``'s own: its order)."""
    if isinstance(obj, list):
        list.__setitem__(obj, slice(None), copy)
    elif isinstance(obj, collections.deque):
        collections.deque.clear(obj)
        collections.deque.extend(obj, copy)
    elif isinstance(obj, collections.OrderedDict):
        collections.OrderedDict.clear(obj)
        for k, v in dict_items(copy):
            collections.OrderedDict.__setitem__(obj, k, v)
    elif isinstance(obj, dict):
        dict.clear(obj)
        dict.update(obj, copy)
    else:
        set.clear(obj)
        set.update(obj, copy)
