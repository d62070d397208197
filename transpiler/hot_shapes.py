"""A size that a shape-generic graph serves often gets a static graph of its own (issue 13).

    hot = HotShapes()
    hot.watch(entry, dims, cache)   # a dynamic graph just traced ({flat leaf index: dims})
    hot.due(entry, flat)            # True once per size: trace this call's signature static

A dynamic graph (``dynamic_shapes``) keeps its sizes as graph values, so the optimizer cannot
plan what needs concrete sizes (a loop's compiled driver, fused row kernels, the product loop
of an RNN): an RNN trained at one hidden size and then called at another ran at 0.26x eager
against 4.8x for a fresh ``to_graph`` at that size. Ski rental decides when a size is worth a
static trace: each call of the dynamic graph is timed (wall clock) per concrete size of its
dynamic dims; once the calls at one size have spent as long as tracing the dynamic graph took
(``entry.build_s``), that size is due: the entry's fast-path keys are unlinked, so its next
call reaches ``GraphFunction._call``, which traces the signature static (not counted as a
retrace, nothing cached and the dynamic graph kept if that trace fails). Any mix of sizes thus
costs at most about twice what it would with the best choice made in advance, and a size seen
a handful of times is never traced (30 new batch sizes stay 2 traces). Static entries are
ordinary cache entries: bounded by the cache limit, least recently used evicted.
"""
from __future__ import annotations

import os
import time
import weakref
from typing import Dict, Tuple

#: a size is due once its calls spent BUDGET times the dynamic graph's build time (tests: 0;
#: ``TOGRAPH_HOT_BUDGET=0`` makes every size due at once: a stress test of the promotion)
BUDGET = float(os.environ.get("TOGRAPH_HOT_BUDGET", "1"))
#: static graphs made this way per converted function, at most (and a quarter of its cache
#: limit): many hot sizes never evict the dynamic graph nor warn of the cache limit
PROMOTED = 16
#: sizes tracked per dynamic graph before the counts start over (bounds the memory)
TRACKED = 256


class HotShapes:
    """Per dynamic entry, the time its calls spent at each concrete size."""

    def __init__(self):
        self.promoted = 0           # sizes found due (traced static, or tried)
        self.cap = PROMOTED         # promotions allowed (lowered to the cache limit // 4)

    def watch(self, entry, dims: Dict[int, Tuple[int, ...]], cache) -> None:
        """Time ``entry``'s calls per size of ``dims``; when one is due, unlink the entry's
        fast-path keys in ``cache`` (``SignatureCache``) so the next call asks ``due``."""
        if getattr(entry, "hot_sizes", None) is not None or not dims:
            return
        budget = getattr(entry, "build_s", None)
        if budget is None:
            return
        budget *= BUDGET
        picks = tuple((i, tuple(ds)) for i, ds in sorted(dims.items()))
        spent: Dict[tuple, float] = {}
        done, waiting = set(), set()
        entry.hot_sizes, entry.hot_due, entry.hot_done = spent, waiting, done
        entry.hot_picks = picks
        run, clock = entry.fn, time.perf_counter
        held, owner = weakref.ref(entry), weakref.ref(cache)    # (no cycle through fn)
        hot = self

        def timed(*args):
            start = clock()
            try:
                return run(*args)
            finally:
                if hot.promoted >= hot.cap:         # no promotion left: stop timing
                    this = held()
                    if this is not None and this.fn is timed:
                        this.fn = run
                else:
                    _count(_sizes(args, picks), clock() - start)

        def _count(sizes, elapsed):
            if sizes is None or sizes in done:
                return
            total = spent.get(sizes, 0.0) + elapsed
            if total >= budget:
                done.add(sizes)
                waiting.add(sizes)
                spent.pop(sizes, None)
                this, table = held(), owner()
                if this is not None and table is not None:
                    table.unlink_entry(this)
            else:
                if len(spent) >= TRACKED and sizes not in spent:
                    spent.clear()
                spent[sizes] = total

        entry.fn = timed

    def due(self, entry, flat, limit: int) -> bool:
        """Whether this call's size became hot on ``entry`` (True once per size, and at
        most ``PROMOTED`` or ``limit // 4`` times: ``limit`` the cache's)."""
        waiting = getattr(entry, "hot_due", None)
        self.cap = min(PROMOTED, limit // 4)
        if not waiting or self.promoted >= self.cap:
            return False
        sizes = _sizes(flat, entry.hot_picks)
        try:
            waiting.remove(sizes)
        except KeyError:
            return False
        self.promoted += 1
        return True


def _sizes(args, picks):
    """The sizes of the picked (leaf, dims), or None when the arguments do not have them."""
    try:
        return tuple(args[i].shape[d] for i, ds in picks for d in ds)
    except (IndexError, AttributeError, TypeError):
        return None
