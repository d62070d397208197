"""The ``training`` flags of a module tree, for a call's cache key, read again only when
the tree changed.

A converted module's fast call keys its cache by ``tuple(m.training for m in
model.modules())`` (train/eval changes dropout and batch norm). Right after the previous
call's graph ran, those ~35-100 attribute reads miss the cache one by one: 50-80 µs per call
measured on GPT-2 and T5 tiny (5-8% of the call). ``TrainingFlags`` keeps the tuple with
the version tags of every module's ``__dict__`` (where ``training`` lives) and
``_modules`` (the tree's shape), and returns it while none moved (one C call,
``c_guards``); any write there (``eval()``, ``m.training = ...``, a submodule added or
replaced) reads the flags again from ``modules()``. A tree where some class defines
``training`` itself (a property) is read every call.
"""
from __future__ import annotations

import operator

from .c_guards import DictVersions

_TRAINING = operator.attrgetter("training")


class TrainingFlags:
    """``flags()``: ``tuple(m.training for m in module.modules())``, as now."""
    __slots__ = ("module", "state")

    def __init__(self, module):
        self.module = module
        self.state = None           # (DictVersions, flags): one store, for threads

    def __call__(self) -> tuple:
        state = self.state
        if state is not None and state[0].unchanged():
            return state[1]
        modules = list(self.module.modules())
        dicts = [m.__dict__ for m in modules] + [m.__dict__["_modules"] for m in modules
                                                 if type(m.__dict__.get("_modules")) is dict]
        versions = DictVersions(dicts)      # (tags before the reads: a write meanwhile
        flags = tuple(map(_TRAINING, modules))     # moves them, and the next call reads)
        if not any(hasattr(type(m), "training") for m in modules):
            self.state = (versions, flags)
        return flags
