"""Containers held by the globals of helper functions a trace meets: the traced values a
trace leaves in them, and the changes it makes to them.

The snapshot of a call watches only the *bindings* of the globals of the helpers the trace
meets (``Snapshot.include_new``: cheap, a trace of GPT-2 meets ~60 of them), not what
their objects hold. So a helper filling a module-level container -- a metric logger's
``METRICS.setdefault(name, []).append(loss.item())``, a mask cache's ``_MASK_CACHE[T] =
torch.triu(...)``, the DQN tutorial's ``STATE['steps_done'] += 1`` -- left the trace's
graph value there or changed it once: an accepted trace returned a graph that never logs
or counts again, and eager code reading the container later met a traced value (silently
wrong). ``take`` copies each such list, dict (``OrderedDict``, ``defaultdict`` too), deque
or set (and the lists and deques a dict holds, one level), and fingerprints a plain object
(``STATS.totals['n'] += 1``: to ``python_state``'s depth); ``left`` names the first that
holds a value of the trace afterwards, or that the trace changed at all: the call falls
back (strict: ``ConversionError``), naming the helper's line; ``restore`` puts their items
back. A memo a helper fills (``if n not in MEMO: MEMO[n] = ...``) falls back once, as
``function_state``'s do: the eager run fills it, and the next trace, changing nothing,
converts (a counter changes it on every trace: it always falls back).
"""
from __future__ import annotations

import collections
import types
from typing import List, Tuple

from runtime.plain_containers import (dict_copy, dict_items, dict_values, elements, list_copy,
                                      put_back, size)

# (global's name, container, copy, its lists' copies, the helper whose code names it)
Entry = Tuple[str, object, object, dict, object]

_SEQUENCES = (list, collections.deque)


def take(name: str, value, owner=None) -> List[Entry]:
    """A copy of ``value`` when it is a list, deque, dict or set (and of the lists and
    deques a dict holds)."""
    if isinstance(value, _SEQUENCES):       # (read as stored: a subclass's own methods
        return [(name, value, list_copy(value), {}, owner)]     # are not run)
    if isinstance(value, dict) and size(value) <= 4096:
        return [(name, value, dict_copy(value), {k: list_copy(v) for k, v in dict_items(value)
                                                 if isinstance(v, _SEQUENCES)}, owner)]
    if isinstance(value, set) and size(value) <= 4096:
        return [(name, value, set(elements(value)), {}, owner)]
    if _plain_object(value):
        from runtime.python_state import fingerprint
        containers: list = []
        return [(name, value, _Deep(fingerprint(value, containers=containers), containers),
                 {}, owner)]
    return []


class _Deep:
    """A plain object's fingerprint and the containers it recorded (to put back)."""
    __slots__ = ("print", "containers")

    def __init__(self, print_, containers):
        self.print, self.containers = print_, containers


def _plain_object(value) -> bool:
    """An instance of a user class holding state in its ``__dict__`` (not code, a class, a
    module or an ``nn.Module``, whose state other guards watch, nor a library's)."""
    from runtime.python_state import user_classes
    attrs = getattr(value, "__dict__", None)
    return isinstance(attrs, dict) and "_modules" not in attrs and \
        not isinstance(value, (type, types.ModuleType, types.FunctionType, types.MethodType)) \
        and bool(user_classes(type(value)))


def _traced(value) -> bool:
    from runtime.python_state import is_tensor
    return is_tensor(value) and getattr(value, "_node", None) is not None


def _items(container) -> list:
    return list(dict_values(container) if isinstance(container, dict) else elements(container))


def _holds_traced(container) -> bool:
    if _plain_object(container):
        return False        # (its fingerprint tells any change)
    return any(_traced(v) or isinstance(v, (_SEQUENCES, tuple)) and
               any(_traced(i) for i in elements(v))
               for v in _items(container))


def _same(now, before) -> bool:
    return len(now) == len(before) and all(a is b for a, b in zip(now, before))


def _changed(container, copy, lists) -> str:
    """What the trace changed in ``container`` (its key, or '' for none)."""
    if isinstance(copy, _Deep):
        from runtime.python_state import difference, fingerprint
        now = fingerprint(container)
        return "" if now == copy.print else \
            f"its {difference(copy.print, now).lstrip('.') or 'attributes'}"
    if isinstance(container, _SEQUENCES):
        return "" if _same(list_copy(container), copy) else "its items"
    if isinstance(container, set):
        return "" if copy == set(elements(container)) else "its items"
    now = dict_copy(container)
    if now.keys() != copy.keys():
        return f"its keys {list(now)}"
    for key, value in copy.items():
        if now[key] is not value:
            return f"its [{key!r}]"
    for key, items in lists.items():
        if not _same(list_copy(now[key]), items):
            return f"its [{key!r}]"
    return ""


def left(entries: List[Entry]) -> Tuple[str, object]:
    """What the first container holding a value of the trace, or changed by it, is
    (with the helper whose code names it), or ('', None)."""
    for name, container, copy, lists, owner in entries:
        if _holds_traced(container):
            return (f"a helper leaves a value of the trace in global {name!r} (a "
                    f"{type(container).__name__} it fills: a metric log, a cache), which "
                    f"the graph would not fill again"), None
        where = _changed(container, copy, lists)
        if where:
            return (f"a helper changes global {name!r} ({where}: a "
                    f"{type(container).__name__} it updates, a counter or a log), which the "
                    f"graph would not change again"), owner
    return "", None


def restore(entries: List[Entry]) -> None:
    """Put back the items of the containers the trace changed or left a value in."""
    for _, container, copy, lists, _ in entries:
        if not _holds_traced(container) and not _changed(container, copy, lists):
            continue
        if isinstance(copy, _Deep):
            from runtime.python_state import restore as restore_containers
            restore_containers(copy.containers)
            continue
        for key, items in lists.items():
            held = dict.get(container, key)
            if isinstance(held, _SEQUENCES):
                put_back(held, items)
        put_back(container, copy)
