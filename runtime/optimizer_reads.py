"""Which data attributes of an optimizer or lr scheduler the traced code itself read.

The guard refuses a call whose code reads an optimizer's ``state``, ``defaults`` or
``param_groups`` in Python (the graph's own ``opt.step()`` changes them when it runs:
``Snapshot.release``). Matching the names the code uses is not enough: a model's
``self.state`` buffer, a dict's ``"defaults"`` or another object's ``param_groups`` carry the
same names. While a trace runs, each optimizer and scheduler served to it
(``training_attributes.served``) answers through a subclass of its own class that notes the
public attributes read on that very object, except the reads made by its own methods, by
torch's code and by tograph's runtime (a step reading ``self.state`` is not the user's
read). ``Snapshot.release`` refuses only the names noted on the object itself.
"""
from __future__ import annotations

import contextlib
import os
import sys
from typing import Dict, Iterable, Set

import torch

_OWN_DIRS = (os.path.dirname(torch.__file__) + os.sep,
             os.path.dirname(os.path.abspath(__file__)) + os.sep)
_CLASSES: Dict[type, type] = {}


def _methods(cls: type) -> frozenset:
    """The code objects of the functions ``cls`` and its bases define (their own reads)."""
    codes = set()
    for base in cls.__mro__:
        if base is object:
            continue
        for value in vars(base).values():
            fn = getattr(value, "fget", value)
            fn = getattr(fn, "__func__", fn)
            while hasattr(fn, "__wrapped__"):
                codes.add(getattr(fn, "__code__", None))
                fn = fn.__wrapped__
            codes.add(getattr(fn, "__code__", None))
    codes.discard(None)
    return frozenset(codes)


def _recording_class(cls: type) -> type:
    made = _CLASSES.get(cls)
    if made is None:
        own = _methods(cls)
        get = object.__getattribute__

        def __getattribute__(self, name):
            if not name.startswith("_"):
                reads = get(self, "__dict__").get("_tograph_reads")
                if reads is not None:
                    caller = sys._getframe(1).f_code
                    if caller not in own and not caller.co_filename.startswith(_OWN_DIRS):
                        reads.add(name)
            return get(self, name)
        made = _CLASSES[cls] = type(cls.__name__, (cls,), {
            "__getattribute__": __getattribute__, "__module__": cls.__module__,
            "__qualname__": cls.__qualname__})
    return made


@contextlib.contextmanager
def recording(objects: Iterable, noted: Dict[int, Set[str]]):
    """While inside, the public attributes read on each of ``objects`` (optimizers,
    schedulers) by code other than their own and torch's go into ``noted[id(object)]``."""
    undo = []
    try:
        for obj in objects:
            if id(obj) in noted or "_tograph_reads" in vars(obj):
                continue
            cls = type(obj)
            if "__getattribute__" in vars(cls) or "__getattr__" in vars(cls):
                continue                # (answers reads itself: the names decide)
            noted[id(obj)] = reads = set()
            obj.__dict__["_tograph_reads"] = reads
            obj.__class__ = _recording_class(cls)
            undo.append((obj, cls))
        yield noted
    finally:
        for obj, cls in reversed(undo):
            obj.__class__ = cls
            obj.__dict__.pop("_tograph_reads", None)
