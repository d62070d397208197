"""What the front door logs (``runtime.logs``' topics): why a call traced,
the graphs traced, the guards built and which check failed, fallbacks.

Each function is called by ``api.GraphFunction`` on a path that converts or traces (never
on a cached call) and builds its text only when its topic is enabled.
"""
from __future__ import annotations

from logging import DEBUG, INFO

from runtime import logs


def _name(function) -> str:
    """``Class.method``, ``f``; a nested function without its enclosing ``<locals>``."""
    name = getattr(function, "__qualname__", None) or getattr(function, "__name__", None)
    return str(name or "function").rpartition("<locals>.")[2]


def _dims(function, dynamic) -> str:
    """``{flat leaf index: dims}`` in words: ``x dims [0]`` (by the trace's leaf names)."""
    names = getattr(function, "_leaf_names", None) or []
    return ", ".join(f"{names[i] if i < len(names) else f'input #{i}'} dims {sorted(dims)}"
                     for i, dims in sorted(dynamic.items()))


def tracing(function, key, history, cached, flat, dynamic=None) -> None:
    """``tograph.retrace`` and ``tograph.cache``: a call is about to trace, and why (first
    call; a new signature, what differs from the closest one traced; a cached graph's
    guard failed, which check; a new size, traced dynamic). ``history``: the signatures
    traced before; ``cached``: ``key``'s entry (a guard failed) or None; ``flat``: the
    call's flattened arguments; ``dynamic``: the dims traced dynamic ({flat leaf index:
    dims}, ``tograph.dynamic``)."""
    if dynamic and logs.dynamic.isEnabledFor(INFO):
        logs.dynamic.info("tracing %s with dynamic dimensions %s", _name(function),
                          _dims(function, dynamic))
    if not (logs.retrace.isEnabledFor(INFO) or logs.cache.isEnabledFor(INFO)):
        return
    from .retracing import _closest, describe_change
    names = getattr(function, "_param_names", [])
    if cached is not None:
        explain = getattr(cached, "explain_guard", None)
        why = "a guard failed: " + ((explain(flat) if explain is not None else "") or
                                    describe_change(names, key, key))
    elif not history:
        why = "first call"
    elif dynamic:
        why = "a new size"
    elif key in history:
        why = "traced before, and its graph was dropped for the cache limit"
    else:
        why = "new input signature: " + describe_change(names, _closest(history, key), key)
    if dynamic:
        why += ": tracing dimensions " + _dims(function, dynamic) + " as dynamic"
    logs.retrace.info("tracing %s (trace #%d): %s", _name(function), len(history) + 1, why)
    logs.cache.info("%s: cache miss (%s); %d signature(s) cached", _name(function),
                    "guard failed" if cached is not None else "new signature",
                    len(getattr(function, "_entries", ())))


def dynamic_refused(function, error) -> None:
    """``tograph.dynamic``: a trace with dynamic dimensions failed; the call traces static."""
    logs.dynamic.info("%s: the trace with dynamic dimensions failed (%s: %s); tracing the "
                      "sizes as they are", _name(function), type(error).__name__, error)


def evicted(function, count: int, cache) -> None:
    """``tograph.cache``: entries dropped for the signature cache's limit (least recently
    used first)."""
    logs.cache.info("%s: evicted %d least recently used signature(s) for the limit of %d "
                    "(%d evictions so far)", _name(function), count, cache.limit,
                    cache.evictions)


def traced_graph(target, graph) -> None:
    """``tograph.graph``: a trace's graph, printed at DEBUG as soon as it is traced (before
    the optimizer and the executor, which may still fail on it)."""
    if logs.graph.isEnabledFor(DEBUG):
        logs.graph.debug("graph of %s:\n%s", _name(target), graph)


def traced(function, entry) -> None:
    """``tograph.graph``: a compiled entry's node counts at INFO, its optimized graph
    printed at DEBUG."""
    if not logs.graph.isEnabledFor(INFO):
        return
    name = _name(function)
    logs.graph.info("traced %s: %d nodes, %d after optimization", name,
                    sum(1 for _ in entry.graph.walk()), sum(1 for _ in entry.optimized.walk()))
    logs.graph.debug("optimized graph of %s:\n%s", name, entry.optimized)


def guard_built(target, guard) -> None:
    """``tograph.guards``: what the guard of a new graph checks (DEBUG)."""
    if logs.guards.isEnabledFor(DEBUG):
        logs.guards.debug("guard of %s checks: %s", _name(target), guard.summary())


def guard_failed(function, entry, flat) -> None:
    """``tograph.guards``: a cached graph's guard failed, and which check."""
    if logs.guards.isEnabledFor(INFO):
        explain = getattr(entry, "explain_guard", None)
        why = (explain(flat) if explain is not None else "") or "a recorded check failed"
        logs.guards.info("guard failed for %s: %s; tracing again", _name(function), why)


def fell_back(function, reason: str, file, line, strict: bool) -> None:
    """``tograph.fallback``: a signature runs eagerly (or strict mode raises), why, where."""
    if logs.fallback.isEnabledFor(INFO):
        then = "strict mode raises ConversionError" if strict else "running it eagerly"
        logs.fallback.info("%s:%s: %s could not be converted: %s -- %s", file, line,
                           _name(function), reason, then)
