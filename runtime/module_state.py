"""The state of ``nn.Module`` trees that a trace of their code read, checked before each run.

A graph traced from a module's forward bakes in what the trace found in the module tree:
which submodules it called (``self.act``; each layer of ``self.layers`` -- how many there
are), which parameters and buffers it holds as constants, the Python attributes that
steered it (``eps``, ``p``, ``momentum``, ``training``, a user flag), the hooks that ran
around each submodule's forward, and the class attributes of user-defined module classes
(``self.SCALE``). ``ModuleState(roots)`` records all of it for every module in the trees
and ``check()`` gives a function, one generated expression, that says whether it still
holds: identity comparisons of each module's ``__dict__`` values, submodules, parameters
and buffers, the keys of its hook dicts (and torch's global ones), and a fingerprint of
the plain objects its attributes hold (``self.cfg.scale``) and of its user classes.

Identity, not equality: a replaced parameter of equal values is another tensor (the graph
holds the old one), ``2`` is not ``2.0``. The check keeps the objects it compares alive, so
an id can not be reused by a new object.
"""
from __future__ import annotations

import operator
from typing import Any, Dict, List

import torch
from torch.utils.hooks import RemovableHandle

from .c_guards import DictVersions
from .guard_tags import Tags, TaggedPrint
from .module_writes import alike, tree_modules
from .python_state import fingerprint, user_classes

try:                                    # CPython's dict version tag (PEP 509), as torch
    from torch._C._dynamo.guards import dict_version as _dict_version   # reads it
except ImportError:                     # pragma: no cover - another torch / Python
    _dict_version = None

_INTERNAL = frozenset(torch.nn.Module().__dict__)       # what every Module's __dict__ holds
HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
_TENSOR_DICTS = ("_modules", "_parameters", "_buffers")


def global_hooks() -> List[dict]:
    from torch.nn.modules import module as m
    return [m._global_forward_hooks, m._global_forward_pre_hooks, m._global_backward_hooks,
            m._global_backward_pre_hooks]


def _mutable_holder(v) -> bool:
    """A list, dict, set or plain object whose contents can change in place (a config)."""
    if isinstance(v, (list, dict, set)):
        return True
    attrs = getattr(v, "__dict__", None)
    return isinstance(attrs, dict) and not isinstance(v, (torch.nn.Module, torch.Tensor, type)) \
        and not callable(v) and type(v).__module__.split(".")[0] not in ("torch", "runtime",
                                                                           "transpiler")


class ModuleState:
    """What ``check()`` compares: per module, the objects its dicts hold."""

    def __init__(self, roots, written=None):
        self.modules: List[Any] = []
        # {id(module): {name: shaped}} a graph sets or reads when it runs
        # (``runtime.module_writes``): compared by their tensors' meta, not identity
        self.written: Dict[int, dict] = written or {}
        self.modules = tree_modules(roots)

    def __bool__(self) -> bool:
        return bool(self.modules)

    def check(self, prints=None):
        """A function of no arguments: whether every module's state is as now.
        ``prints``: a list to receive the fingerprints of the modules' plain objects and
        user classes, which the caller checks itself (with its own, by one pass over all
        their tags: ``side_effects.Snapshot.compile_check``); else the check holds them.

        Fast path: the version tags of the dicts compared (CPython bumps a dict's tag on
        every change; torch exposes it as ``dict_version``), one C-level ``map`` for the
        whole tree. Only when a tag moved (``model.eval()`` sets ``training`` again, a
        hook was added and removed) is the full identity comparison run; if it still
        holds, the new tags are kept."""
        full, dicts, objects = self._full_check()
        if _dict_version is None:
            return full
        # an empty hook dict gets a hook only through a handle, which takes the next id of
        # torch's global counter: one number stands for all of them
        dicts = [d for d in dicts if d or id(d) not in self._hook_dicts]
        tags = [RemovableHandle.next_id, DictVersions(dicts)]     # (read from C)
        held = [TaggedPrint(o) for o in objects]            # (their own tags)
        if prints is not None:
            prints.extend(held)
            held = []
        tagged = Tags(held) if held else None

        def check() -> bool:
            if tagged is not None and not tagged():
                return False
            if RemovableHandle.next_id == tags[0] and tags[1].unchanged():
                return True
            now = [RemovableHandle.next_id, tags[1].now()]
            if full():
                tags[:] = now
                return True
            return False
        return check

    def _full_check(self):
        """(the identity comparison as one generated expression, the dicts it compares,
        the plain objects and user classes it fingerprints (once each))."""
        env: Dict[str, Any] = {"_is": operator.is_, "_all": all, "_map": map, "_len": len,
                               "_tuple": tuple}
        terms: List[str] = []
        dicts: List[dict] = []
        hook_dicts = self._hook_dicts = set()

        def same(mapping) -> None:      # same length, same objects in order
            k = len(env)
            dicts.append(mapping)
            env[f"d{k}"], env[f"v{k}"] = mapping, tuple(mapping.values())
            terms.append(f"_len(d{k}) == {len(mapping)} and "
                         f"_all(_map(_is, d{k}.values(), v{k}))" if mapping else f"not d{k}")

        def keys(mapping) -> None:
            k = len(env)
            dicts.append(mapping)
            hook_dicts.add(id(mapping))
            env[f"d{k}"], env[f"v{k}"] = mapping, tuple(mapping)
            terms.append(f"_tuple(d{k}) == v{k}" if mapping else f"not d{k}")

        def same_but(mapping, names) -> None:    # the same, ``names`` by their tensors' meta
            k = len(env)
            dicts.append(mapping)
            env[f"f{k}"] = alike(mapping, names)
            terms.append(f"f{k}()")

        objects: Dict[int, Any] = {}        # config objects and user classes, once each
        for m in self.modules:
            attrs = m.__dict__
            written = self.written.get(id(m))
            (same_but(attrs, written) if written else same(attrs))
            for name in _TENSOR_DICTS:
                if isinstance(attrs.get(name), dict):
                    (same_but(attrs[name], written) if written and name == "_buffers"
                     else same(attrs[name]))
            for name in HOOK_DICTS:
                if isinstance(attrs.get(name), dict):
                    keys(attrs[name])
            for name, value in attrs.items():
                if name not in _INTERNAL and _mutable_holder(value):
                    objects.setdefault(id(value), value)
            for cls in user_classes(type(m)):
                objects.setdefault(id(cls), cls)
        for hooks in global_hooks():
            keys(hooks)
        source = "lambda: " + (" and ".join(f"({t})" for t in terms) or "True")
        full = eval(source, env)  # noqa: S307 -- our own text
        if _dict_version is None:
            prints = [(o, fingerprint(o)) for o in objects.values()]
            identity = full

            def full() -> bool:
                return identity() and all(fingerprint(o) == p for o, p in prints)
        return full, dicts, list(objects.values())
