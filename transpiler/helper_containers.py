"""Lists and dicts held by the globals of helper functions a trace meets, and the traced
values a trace leaves in them.

The snapshot of a call watches only the *bindings* of the globals of the helpers the trace
meets (``Snapshot.include_new``: cheap, a trace of GPT-2 meets ~60 of them), not what
their objects hold. So a helper filling a module-level container -- a metric logger's
``METRICS.setdefault(name, []).append(loss.item())``, a mask cache's ``_MASK_CACHE[T] =
torch.triu(...)`` -- left the trace's graph value there: an accepted trace returned a graph
that never logs again, and eager code reading the container later met a traced value
(silently wrong). ``take`` copies each such list or dict (and the lists a dict holds, one
level), ``left`` names the first that holds a value of the trace afterwards (the call falls
back, strict: ``ConversionError``), ``restore`` puts their items back. A helper caching
Python values (a memo of numbers or strings) changes nothing here, as before.
"""
from __future__ import annotations

from typing import List, Tuple

Entry = Tuple[str, object, object, dict]    # (global's name, container, copy, its lists' copies)


def take(name: str, value) -> List[Entry]:
    """A copy of ``value`` when it is a list or a dict (and of the lists a dict holds)."""
    if type(value) is list:
        return [(name, value, list(value), {})]
    if type(value) is dict and len(value) <= 4096:
        return [(name, value, dict(value),
                 {k: list(v) for k, v in value.items() if type(v) is list})]
    return []


def _traced(value) -> bool:
    from runtime.python_state import is_tensor
    return is_tensor(value) and getattr(value, "_node", None) is not None


def _holds_traced(container) -> bool:
    items = container.values() if type(container) is dict else container
    return any(_traced(v) or type(v) is list and any(_traced(i) for i in v) for v in items)


def left(entries: List[Entry]) -> str:
    """What the first container holding a value of the trace is, or ''."""
    for name, container, _, _ in entries:
        if _holds_traced(container):
            return (f"a helper leaves a value of the trace in global {name!r} (a "
                    f"{type(container).__name__} it fills: a metric log, a cache), which "
                    f"the graph would not fill again")
    return ""


def restore(entries: List[Entry]) -> None:
    """Put back the items of the containers holding a value of the trace."""
    for _, container, copy, lists in entries:
        if not _holds_traced(container):
            continue
        for key, items in lists.items():
            if type(container.get(key)) is list:
                container[key][:] = items
        container.clear()
        container.update(copy) if type(container) is dict else container.extend(copy)
