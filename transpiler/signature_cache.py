"""A converted function's traced signatures: a bounded map with least-recently-used
eviction, its fast-path keys, and the counts ``f.cache_info()`` reports.

    cache = SignatureCache(limit=64)
    cache[key] = entry          # put: evicts the least recently used entry when full
    cache.get(key); cache.pop(key); cache.items(); len(cache)
    cache.link_fast(fast, entry)    # a flat fast-path key -> the entry it serves
    cache.fast.get(fast)            # the fast path's lookup (a plain dict)
    cache.add_inline(enter)         # a generated entry function (transpiler.call_entry)
    cache.inline                    # them, most recent first: tried before any key is built

Entries are ``api._Traced`` / ``api._Fallback`` objects (anything taking attributes): each
carries ``used``, the hit count at its last use (the fast path stamps it inline with
``cache.hits``); the least recently used entry is the one with the smallest stamp, the
earliest put among equals. Evicting an entry drops its fast-path keys with it. Fast keys
are a cache of the full lookup (an entry may have several: a dynamic-shape entry has one
per size seen), kept to ``FAST_PER_ENTRY`` times the limit, oldest dropped first. Entry
functions (``inline``, at most ``INLINE``) serve an entry while it is cached and linked: an
entry evicted, replaced or unlinked takes its entry functions with it.

The limit: ``to_graph(fn, cache_limit=N)``, else the environment's ``TOGRAPH_CACHE_LIMIT``
(read when the function is made), else ``DEFAULT_LIMIT``. Counts are plain attributes,
updated without a lock: under threads they may miss a few increments (never an entry).
Changes to the maps (put, link_fast, del, clear) hold the cache's own lock: threads that
link fast keys while another evicts never see a map change under them (the fast path
only reads ``fast``).
"""
from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import MutableMapping
from typing import Any, Dict, Iterator, Optional

DEFAULT_LIMIT = 64
FAST_PER_ENTRY = 4
INLINE = 4
ENVIRONMENT = "TOGRAPH_CACHE_LIMIT"


def default_limit() -> int:
    """``TOGRAPH_CACHE_LIMIT`` when set (a positive integer), else ``DEFAULT_LIMIT``."""
    text = os.environ.get(ENVIRONMENT, "").strip()
    if not text:
        return DEFAULT_LIMIT
    try:
        return check_limit(int(text))
    except ValueError:
        raise ValueError(f"{ENVIRONMENT}={text!r}: expected a positive integer (the number of "
                         f"input signatures each converted function keeps)") from None


def check_limit(limit) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"cache_limit must be a positive integer, got {limit!r}")
    return limit


@dataclasses.dataclass(frozen=True)
class CacheInfo:
    """``f.cache_info()``: ``traces`` graphs traced and compiled; ``hits`` calls served by
    a cached entry (a graph or a recorded fallback); ``misses`` calls that traced (a new
    signature, an evicted one, or a guard that failed); ``evictions`` entries dropped for
    the limit; ``fallbacks`` signatures recorded as running eagerly; ``entries`` cached now;
    ``limit``; ``dynamic_dims`` {argument name: dims traced dynamic}."""
    traces: int
    hits: int
    misses: int
    evictions: int
    fallbacks: int
    entries: int
    limit: int
    dynamic_dims: Dict[str, tuple]


class SignatureCache(MutableMapping):
    """Signature key -> entry, at most ``limit`` of them (see the module docstring)."""

    def __init__(self, limit: Optional[int] = None):
        self.limit = default_limit() if limit is None else check_limit(limit)
        self._entries: Dict[Any, Any] = {}       # key -> entry, in order of put
        self._keys: Dict[int, Any] = {}          # id(entry) -> its key
        self._fast_of: Dict[Any, list] = {}      # key -> the fast keys linked to its entry
        self.fast: Dict[Any, Any] = {}           # fast key -> entry (api's fast path)
        self.inline: tuple = ()                  # entry functions, most recent first
        self.hits = self.misses = self.traces = self.fallbacks = self.evictions = 0
        self.limit_reached = False               # the limit was hit (warned once)
        self._lock = threading.RLock()           # the maps' changes, one thread at a time

    # -- the mapping
    def __getitem__(self, key):
        return self._entries[key]

    def __setitem__(self, key, entry) -> None:
        self.put(key, entry)

    def __delitem__(self, key) -> None:
        with self._lock:
            entry = self._entries.pop(key)
            self._forget(key, entry)

    def __iter__(self) -> Iterator:
        return iter(list(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key) -> bool:
        return key in self._entries

    def get(self, key, default=None):
        return self._entries.get(key, default)

    def put(self, key, entry) -> bool:
        """Cache ``entry`` under ``key`` (replacing the key's old entry and its fast keys);
        when full, evict the least recently used first. True: this put first hit the limit."""
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._forget(key, old)
            first = False
            while len(self._entries) >= self.limit:
                self._evict()
                first, self.limit_reached = not self.limit_reached, True
            entry.used = self.hits
            self._entries[key] = entry
            self._keys[id(entry)] = key
            return first

    def _evict(self) -> None:
        key = min(self._entries, key=lambda k: self._entries[k].used)   # earliest among equals
        entry = self._entries.pop(key)
        self._forget(key, entry)
        self.evictions += 1

    def _forget(self, key, entry) -> None:
        if self._keys.get(id(entry)) == key:
            del self._keys[id(entry)]
        self._drop_inline(entry)
        for fast in self._fast_of.pop(key, ()):
            if self.fast.get(fast) is entry:
                del self.fast[fast]

    # -- uses and the fast path
    def hit(self, entry) -> None:
        """A call served by ``entry`` (the fast path does this inline)."""
        self.hits += 1
        entry.used = self.hits

    def link_fast(self, fast, entry) -> None:
        """``fast`` (a flat key) serves ``entry`` from now on, while ``entry`` is cached."""
        with self._lock:
            key = self._keys.get(id(entry))
            if key is None or self._entries.get(key) is not entry:
                return                                   # not (or no longer) cached
            if self.fast.get(fast) is entry:
                return
            self.fast.pop(fast, None)                    # (a stale entry's key: moved to the end)
            self.fast[fast] = entry
            self._fast_of.setdefault(key, []).append(fast)
            while len(self.fast) > FAST_PER_ENTRY * self.limit:
                oldest = next(iter(self.fast))
                self._unlink(oldest)

    def unlink_entry(self, entry) -> None:
        """Drop the fast keys that serve ``entry``: their next calls take the full path
        (``hot_shapes``: a size due for a static graph of its own)."""
        with self._lock:
            self._drop_inline(entry)
            for fast in self._fast_of.pop(self._keys.get(id(entry)), ()):
                if self.fast.get(fast) is entry:
                    del self.fast[fast]

    def add_inline(self, enter) -> None:
        """``enter`` (``call_entry.build``'s, serving ``enter.entry``) tried first from now
        on, while its entry is cached; the oldest beyond ``INLINE`` dropped."""
        with self._lock:
            entry = enter.entry
            key = self._keys.get(id(entry))
            if key is not None and self._entries.get(key) is entry:
                self.inline = ((enter,) + self.inline)[:INLINE]

    def drop_inline(self) -> None:
        """No entry function from now until the next ``add_inline``."""
        with self._lock:
            self.inline = ()

    def _drop_inline(self, entry) -> None:
        if self.inline:
            self.inline = tuple(e for e in self.inline if e.entry is not entry)

    def _unlink(self, fast) -> None:
        entry = self.fast.pop(fast)
        key = self._keys.get(id(entry))
        keys = self._fast_of.get(key)
        if keys is not None and fast in keys:
            keys.remove(fast)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._keys.clear()
            self._fast_of.clear()
            self.fast.clear()
            self.inline = ()

    # -- what cache_info reports
    def info(self, dynamic_dims: Optional[Dict[str, tuple]] = None) -> CacheInfo:
        """The counts; ``dynamic_dims`` from ``transpiler.dynamic_shapes``."""
        return CacheInfo(traces=self.traces, hits=self.hits, misses=self.misses,
                         evictions=self.evictions, fallbacks=self.fallbacks,
                         entries=len(self._entries), limit=self.limit,
                         dynamic_dims=dict(dynamic_dims or {}))

