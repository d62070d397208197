"""Which input dimensions a converted function traces as dynamic, and which entry serves
a call whose exact signature has no graph: ``to_graph(fn, dynamic=...)``.

    to_graph(fn)                          # automatic: a dim seen with a second size is dynamic
    to_graph(fn, dynamic=False)           # one trace per shape (every size specialized)
    to_graph(fn, dynamic=True)            # every dim of every tensor argument, from the start
    to_graph(fn, dynamic={"x": [0], 1: [0, 2]})    # by argument name or index (or {"x": 0})

A signature (``api.signature_of``) holds each tensor's shape. Calls whose signatures
differ only in sizes form a *group* (their key with each shape replaced by its rank).
Automatic mode: a dimension that differs from the group's first call is *wanted* dynamic;
the next call then traces once with those dimensions dynamic (``TensorMeta`` size None,
every use of the size a graph value), and later sizes reuse that graph. Lookups: the
exact (static) signature first, then the dynamic entry for the call's *pattern*.

The pattern of a call: its key with the dynamic dimensions' sizes replaced by None and
their tensors' layout by "contiguous", plus which of those dimensions are equal to each
other (the relations the trace saw: ``x + y`` on two batch dims traced equal serves only
calls where they are equal; other calls have another pattern, and another trace).
Sizes 0 and 1 are never dynamic (a size-1 dim broadcasts; a graph traced for size n >= 2
must not serve it): such a call's dim is specialized in its pattern. Only tensors laid out
contiguously take dynamic dims (a trace answers ``stride()`` for a default layout).

A dynamic trace that fails (the code needs a size as a Python number: ``len(x)``, an op
whose shape cannot be proven for other sizes, ``runtime.shape_inference.strict_dims``)
is not a fallback: the call is traced static, and its pattern is remembered as refused
(no retry on every call). When the probe that refused it would have held with every
dynamic size grown by the same amount (``runtime.size_probes``: a mask one longer than a
KV cache, ``S + 1`` against ``S``, where doubling gives ``2S + 2`` against a computed
``2S + 1``), the pattern is traced *shifted* instead: that graph serves only calls whose
dynamic sizes keep the traced offsets from the least of them (its key holds them; at
most ``MAX_SHIFTED`` such graphs per pattern, then static traces). State is per ``GraphFunction``; calls that miss the exact
signature update it, one thread at a time (the object's lock: a thread reading the
groups never sees another change them); two threads racing at most trace one pattern
twice, under the trace lock one after the other.
"""
from __future__ import annotations

import threading
from typing import Any, Dict, FrozenSet, List, NamedTuple, Optional, Set, Tuple

import torch
import torch.utils._pytree as pytree

from runtime import size_probes

# shifted graphs (offsets guarded) per pattern: sizes unrelated to one another give new
# offsets on every call, each a trace; past this many the calls are traced static
MAX_SHIFTED = 4


class Plan(NamedTuple):
    """A dynamic trace for a call: ``key`` (the pattern, an ``_entries`` key) and
    ``dims`` ({flat leaf index: dims}) to leave dynamic."""
    key: tuple
    dims: Dict[int, Tuple[int, ...]]
    reuse: tuple = ()       # wider patterns whose graph, traced before, serves it too
    shifted: bool = False   # probed shifted: serves only the traced offsets (key holds them)


def _contiguous(t: torch.Tensor) -> bool:
    """Laid out as a fresh tensor of its shape is (strides and offset): a dynamic trace's
    placeholder answers layout questions for that layout."""
    if t.layout != torch.strided or t.storage_offset() != 0:
        return False
    expected, stride = [], 1
    for size in reversed(t.shape):
        expected.append(stride)
        stride *= max(int(size), 1)
    return tuple(t.stride()) == tuple(reversed(expected))


def _tensors(flat) -> List[int]:
    return [i for i, v in enumerate(flat) if isinstance(v, torch.Tensor)]


def argument_leaves(params: List[str], args, kwargs) -> List[Tuple[str, List[int]]]:
    """(argument name, its flat leaf indices) per positional then keyword argument."""
    out, start = [], 0
    for i, a in enumerate(args):
        count = len(pytree.tree_leaves(a))
        out.append((params[i] if i < len(params) else f"arg{i}", list(range(start, start + count))))
        start += count
    for k, v in kwargs.items():
        count = len(pytree.tree_leaves(v))
        out.append((k, list(range(start, start + count))))
        start += count
    return out


def normalize(option, arguments: List[Tuple[str, List[int]]], flat
              ) -> Tuple[bool, Dict[int, FrozenSet[int]]]:
    """``dynamic=`` as (automatic, {flat leaf index: dims wanted from the first call}).
    ``arguments``: ``argument_leaves`` of the first call."""
    if option is None:
        return True, {}
    if option is False:
        return False, {}
    tensors = _tensors(flat)
    if option is True:
        return True, {i: frozenset(range(flat[i].dim())) for i in tensors}
    if not isinstance(option, dict):
        raise TypeError(f"dynamic= takes None, True, False or a dict of dims by argument "
                        f"name or position, got {type(option).__name__}")
    wanted: Dict[int, FrozenSet[int]] = {}
    for key, dims in option.items():
        if isinstance(key, str):
            leaves = [ls for name, ls in arguments if name == key]
        elif isinstance(key, int) and not isinstance(key, bool) and 0 <= key < len(arguments):
            leaves = [arguments[key][1]]
        else:
            leaves = []
        leaves = [i for ls in leaves for i in ls if i in tensors]
        if not leaves:
            raise ValueError(f"dynamic: {key!r} is not a tensor argument of this call "
                             f"(arguments: {[name for name, _ in arguments]})")
        dims = (dims,) if isinstance(dims, int) else tuple(dims)
        for i in leaves:
            rank = flat[i].dim()
            bad = [d for d in dims if not -rank <= d < rank]
            if bad:
                raise ValueError(f"dynamic: {key!r} has no dimension {bad[0]} (shape "
                                 f"{tuple(flat[i].shape)})")
            wanted[i] = wanted.get(i, frozenset()) | {d % rank for d in dims}
    return True, wanted


class _Group:
    """Calls whose signatures differ only in sizes."""

    def __init__(self, shapes: Dict[int, tuple]):
        self.first = shapes                          # the group's first call's shapes
        self.wanted: Dict[int, Set[int]] = {}         # dims seen with a second size
        self.refused: Set[tuple] = set()              # patterns whose trace failed
        self.blocked: Set[Tuple[int, int]] = set()    # (leaf, dim) never dynamic again
        self.asked: Set[Tuple[int, int]] = set()      # wanted by dynamic=, not seen to change
        self.shiftable: Dict[tuple, Set[tuple]] = {}  # refused pattern -> its shifted keys


class DynamicShapes:
    """One converted function's dynamic dimensions (see the module docstring)."""

    def __init__(self, option=None):
        self.option = option
        self._groups: Dict[Any, _Group] = {}
        self._lock = threading.RLock()      # plan, refuse, dims: one thread at a time
        self._traced: Dict[int, Set[int]] = {}      # leaf -> dims of dynamic graphs traced

    def plan(self, key: tuple, flat, arguments) -> Optional[Plan]:
        """The dynamic entry that serves a call with no exact entry, or None: trace it
        static. Notes the call's sizes (automatic mode). ``arguments``: a callable giving
        ``argument_leaves`` (needed on the first call only)."""
        return _expected(self._plan(key, flat, arguments))

    def _plan(self, key: tuple, flat, arguments) -> Optional[Plan]:
        with self._lock:
            if self.option is False:
                return None
            tensors = _tensors(flat)
            if not tensors or len(key) < 1 + len(flat):
                return None
            group_key = _erase(key, flat, tensors)
            shapes = {i: tuple(flat[i].shape) for i in tensors}
            group = self._groups.get(group_key)
            if group is None:
                try:
                    start = normalize(self.option, arguments(), flat)[1]
                except (TypeError, ValueError):
                    if not self._groups:
                        raise               # the option does not fit the function's arguments
                    start = {}              # (another structure of arguments: what fits none)
                group = self._groups[group_key] = _Group(shapes)
                for i, dims in start.items():
                    group.wanted[i] = set(dims)
                    group.asked |= {(i, d) for d in dims}
            else:
                for i in tensors:
                    changed = {d for d, (a, b) in enumerate(zip(group.first[i], shapes[i]))
                               if a != b and (i, d) not in group.blocked}
                    if changed:
                        group.wanted.setdefault(i, set()).update(changed)
                        group.asked -= {(i, d) for d in changed}
            dims = {i: tuple(sorted(d for d in ds if shapes[i][d] >= 2))
                    for i, ds in group.wanted.items() if _contiguous(flat[i])}
            dims = {i: ds for i, ds in dims.items() if ds}
            if not dims:
                return None
            pattern = _pattern(key, flat, dims)
            # dims dynamic= asked for but never seen to change (heads, head_dim) may
            # coincide with a changing size (batch 2 = heads 2) on one call and not the
            # next: a new relation, a new pattern each time. Once some dim has changed, a
            # new trace leaves those dims static (they are out of the relation); a graph
            # traced with them dynamic (the first call's) still serves its pattern.
            narrow = {i: tuple(d for d in ds if (i, d) not in group.asked)
                      for i, ds in dims.items()}
            narrow = {i: ds for i, ds in narrow.items() if ds}
            if narrow and narrow != dims:
                reuse = () if pattern in group.refused else (pattern,)
                dims, pattern = narrow, _pattern(key, flat, narrow)
                if pattern in group.refused:
                    return _shifted(group, pattern, flat, dims)
                return Plan(pattern, dims, reuse)
            if pattern in group.refused:
                return _shifted(group, pattern, flat, dims)
            return Plan(pattern, dims)

    def refuse(self, plan: Plan, key: tuple, flat) -> Optional[Plan]:
        """``plan``'s trace failed: calls of its pattern are traced static from now on.
        When a probe refused it that a shift of every dynamic size would have passed (a
        mask one longer than a cache), the shifted plan is returned to try (its graph
        serves the calls whose sizes keep the traced offsets). Else, when it had dims
        besides the first of each tensor (a feature or sequence dim the code needs as
        traced: ``Linear``'s input width), those are never dynamic again in this group,
        and the plan with the first dims alone (the batch) is returned to try."""
        return _expected(self._refuse(plan, key, flat))

    def _refuse(self, plan: Plan, key: tuple, flat) -> Optional[Plan]:
        with self._lock:
            group = self._groups.get(_erase(key, flat, _tensors(flat)))
            if group is None:
                return None
            group.refused.add(plan.key)
            base = _unshifted(plan.key) if plan.shifted else plan.key
            if plan.shifted:
                group.shiftable.pop(base, None)         # no shifted graph for it again
            elif size_probes.failed_by_offset() and len(set(_sizes(flat, plan.dims))) > 1:
                group.shiftable[base] = set()
                shifted = _shifted(group, base, flat, plan.dims)
                if shifted is not None:
                    return shifted
            others = {(i, d) for i, ds in plan.dims.items() for d in ds if d != 0}
            if not others:
                return None
            # dims only dynamic= asked for (dynamic=True: a conv's channels beside its H/W)
            # are not blocked: dropped, they come back as in automatic mode when they change
            untried = others & group.asked
            group.asked -= untried
            for i, d in untried:
                group.wanted.get(i, set()).discard(d)
            others -= untried
            group.blocked |= others
            for i, d in others:
                group.wanted.get(i, set()).discard(d)
            dims = {i: (0,) for i, ds in plan.dims.items() if 0 in ds}
            if not dims:
                return None
            narrower = Plan(_pattern(key, flat, dims), dims)
            return None if narrower.key in group.refused else narrower

    def traced(self, plan: Plan) -> None:
        """``plan``'s graph was traced: its dims are dynamic."""
        with self._lock:
            for i, ds in plan.dims.items():
                self._traced.setdefault(i, set()).update(ds)

    def dims(self) -> Dict[int, List[int]]:
        """What is dynamic, for ``cache_info``: {flat leaf index: dims} of the graphs
        traced with dynamic dims (a leaf's dims in any of them)."""
        with self._lock:
            return {i: sorted(ds) for i, ds in sorted(self._traced.items())}


def _expected(plan: Optional[Plan]) -> Optional[Plan]:
    """``plan``, its probes told to the trace that may follow in this thread."""
    size_probes.expect_shifted(plan is not None and plan.shifted)
    return plan


def _sizes(flat, dims: Dict[int, Tuple[int, ...]]) -> List[int]:
    """The call's sizes of ``dims``, in the order ``_pattern`` lists them."""
    return [flat[i].shape[d] for i, ds in sorted(dims.items()) for d in ds]


def _shifted(group: _Group, pattern: tuple, flat, dims) -> Optional[Plan]:
    """The shifted plan for a call whose ``pattern`` was refused by an offset (its key:
    the pattern's mark ("dynamic", classes) with each dynamic size's offset from the
    least added), or None: trace static."""
    tried = group.shiftable.get(pattern)
    if tried is None:
        return None
    sizes = _sizes(flat, dims)
    shifted = pattern[:-1] + (pattern[-1] + (offsets(sizes),),)
    if shifted in group.refused or shifted not in tried and len(tried) >= MAX_SHIFTED:
        return None
    tried.add(shifted)
    return Plan(shifted, dims, shifted=True)


def offsets(sizes: List[int]) -> Tuple[int, ...]:
    """Each size's offset from the least: what a shifted graph's calls keep."""
    low = min(sizes)
    return tuple(s - low for s in sizes)


def _unshifted(key: tuple) -> tuple:
    return key[:-1] + (key[-1][:2],)


def _erase(key: tuple, flat, tensors: List[int]) -> tuple:
    """The group of a signature: each contiguous tensor's shape replaced by its rank (a
    tensor laid out otherwise keeps its whole entry: its sizes stay specialized)."""
    items = list(key)
    for i in tensors:
        leaf = items[1 + i]
        if _contiguous(flat[i]):
            items[1 + i] = leaf[:1] + (len(leaf[1]),) + leaf[2:5] + ("contiguous",) + leaf[6:]
    return tuple(items)


def _pattern(key: tuple, flat, dims: Dict[int, Tuple[int, ...]]) -> tuple:
    """The key of the dynamic entry for this call: dynamic sizes None, their layouts
    "contiguous", and the partition of the dynamic dims into equal sizes (the relations
    the trace may have assumed)."""
    items = list(key)
    sizes: List[int] = []
    for i, ds in sorted(dims.items()):
        leaf = items[1 + i]
        shape = tuple(None if d in ds else s for d, s in enumerate(leaf[1]))
        items[1 + i] = leaf[:1] + (shape,) + leaf[2:5] + ("contiguous",) + leaf[6:]
        sizes += [flat[i].shape[d] for d in ds]
    first: Dict[int, int] = {}
    classes = tuple(first.setdefault(s, len(first)) for s in sizes)
    return tuple(items) + (("dynamic", classes),)
