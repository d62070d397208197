"""Threads: the trace lock, and trace state that each thread keeps for itself.

A converted function in a server is called from many threads. Two rules keep that safe:

- ``TRACE_LOCK`` (re-entrant, process-wide) is held around everything that builds a
  graph: conversion, trace, optimization and lowering (``GraphFunction._build``,
  ``Graph.optimize``). Traces run one at a time; a thread making the first call of a
  signature another thread is tracing waits, then finds the entry made (the caller
  checks its cache again once it holds the lock). Running a compiled graph takes no
  lock: cached calls of any number of threads run at once.
- The stacks and logs a trace keeps while it runs (the graph being built, the objects it
  touched, the reads it recorded, the probes and decisions being listened to, ...) are
  ``PerThreadList``s: each thread sees its own. A thread running eager code, a cached
  graph, or a graph built by hand (``runtime.placeholder``) never sees another thread's
  trace, whether or not that thread holds the lock. ``torch``'s own modes
  (``TorchFunctionMode``, grad mode, autocast) are per thread already.

Caches filled once and read many times (shape inference, conversion, operator names,
kernels) stay plain dicts: an insert is atomic in CPython, and two threads filling one
key compute the same value.
"""
from __future__ import annotations

import threading

TRACE_LOCK = threading.RLock()


class PerThreadList(threading.local):
    """A list of which each thread has its own, starting as ``list(initial)``: a
    module-level stack or counter (``[0]``) that a trace pushes to, made per thread by
    changing its definition only (modules that imported it keep the same object)."""

    def __init__(self, initial=()):
        self.items = list(initial)      # (run again in each thread, with these arguments)

    def __len__(self) -> int:
        return len(self.items)

    def __bool__(self) -> bool:
        return bool(self.items)

    def __getitem__(self, index):
        return self.items[index]

    def __setitem__(self, index, value) -> None:
        self.items[index] = value

    def __delitem__(self, index) -> None:
        del self.items[index]

    def __iter__(self):
        return iter(self.items)

    def __reversed__(self):
        return reversed(self.items)

    def __contains__(self, value) -> bool:
        return value in self.items

    def append(self, value) -> None:
        self.items.append(value)

    def extend(self, values) -> None:
        self.items.extend(values)

    def pop(self, index: int = -1):
        return self.items.pop(index)

    def remove(self, value) -> None:
        self.items.remove(value)

    def clear(self) -> None:
        self.items.clear()

    def index(self, value, *bounds) -> int:
        return self.items.index(value, *bounds)

    def copy(self) -> list:
        return list(self.items)

    def __repr__(self) -> str:
        return f"PerThreadList({self.items!r})"
