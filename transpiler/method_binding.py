"""Where ``@to_graph`` on a method in a class body keeps each object's bound method.

An object's bound ``GraphFunction`` holds the object (its bound Python method, the
guards of its traces, a module's submodules), so it cannot live in a table keyed weakly
by the object: the value keeps the key alive and no object that called its converted
method was ever freed. It lives in the object itself instead, in ``_tograph_methods``
of its ``__dict__`` (converted method -> bound one): the object and its graphs are one
cycle, freed by ``gc`` once the user drops the object. Guards skip ``_tograph*``
attributes (``side_effects``, ``python_state``). The table is not carried to copies:
``copy.deepcopy`` makes it empty, ``pickle`` stores an empty plain ``dict`` (loadable
without tograph), and a shallow ``copy.copy`` that shares it is told apart by its owner.

Objects without a ``__dict__`` (``__slots__``) use ``weak``, the converted method's
table keyed weakly by the object (such an object stays alive, as before); one that
cannot be weakly referenced either gets a new bound method on each access (each call
traces; correct, slow). A classmethod binds to its class through ``weak`` too.
"""
from __future__ import annotations

import threading
import weakref
from typing import Any, Callable

NAME = "_tograph_methods"
_LOCK = threading.Lock()      # (two threads binding a new object's first method)


class _Methods(dict):
    """One object's converted methods: descriptor -> the method bound to ``owner``."""

    __slots__ = ("owner", "__weakref__")

    def __init__(self, owner):
        super().__init__()
        self.owner = owner

    def __reduce__(self):               # pickle: an empty plain dict
        return dict, ()

    def __deepcopy__(self, memo):       # a deep copy binds its own
        return {}


def bound(descriptor, obj, weak: weakref.WeakKeyDictionary, make: Callable[[], Any]):
    """``descriptor`` (a converted method) bound to ``obj``: made once per object by
    ``make`` and kept for as long as the object lives (not longer)."""
    try:                                # the usual case, on each access: ~0.4 us
        table = obj.__dict__[NAME]
        if table.owner is obj:
            method = table.get(descriptor)
            if method is not None:
                return method
    except (AttributeError, KeyError, TypeError):
        pass
    attrs = None if isinstance(obj, type) else getattr(obj, "__dict__", None)
    if type(attrs) is dict:
        table = attrs.get(NAME)
        if type(table) is not _Methods or table.owner is not obj:
            with _LOCK:
                table = attrs.get(NAME)
                if type(table) is not _Methods or table.owner is not obj:   # (copy.copy)
                    table = attrs[NAME] = _Methods(obj)
        method = table.get(descriptor)
        if method is None:
            method = table.setdefault(descriptor, make())     # (one per object: threads)
        return method
    try:
        method = weak.get(obj)
    except TypeError:                   # neither a __dict__ nor weak references
        return make()
    if method is None:
        method = weak.setdefault(obj, make())
    return method
