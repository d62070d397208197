"""Why a converted function traced again, in words, and the warnings that say so.

A signature (``api.signature_of`` plus ``GraphFunction._signature``'s modes) is
``(TreeSpec, leaf keys..., [train/eval flags], call modes, grad mode)``. ``changes``
compares two, item by item, as (kind, text) pairs; the kinds:

    shapes     a tensor's shape              -> the ``dynamic=`` option
    tensors    dtype, device, requires_grad, layout, class of a tensor
    values     a Python number, string or other hashable value -> pass it as a tensor
    objects    an object or module argument that is another object
    structure  the arguments' structure (count, keywords, containers)
    state      the same signature again: Python state the trace read changed (a guard)
    modes      train/eval, grad mode, autocast or default dtype: expected, one trace each
    evicted    the signature was traced before and dropped for the cache limit

``Retraces.note`` (one per ``GraphFunction``) keeps the bounded history of traced
signatures and warns ``RetracingWarning`` once per function and kind, when that kind has
caused ``WARN_AFTER`` retraces, at the caller's line (the first frame outside tograph and
torch). Modes and evictions never warn (the latter has ``CacheLimitWarning``, once).
"""
from __future__ import annotations

import os
import sys
import warnings
from typing import Any, Dict, List, Optional, Tuple

from . import argument_aliases, argument_offsets

WARN_AFTER = 4          # retraces of one kind before its warning
HISTORY = 256           # signatures kept for the messages (``f.explain``)


class RetracingWarning(UserWarning):
    """A converted function was traced again and again, for one reason (said in the text)."""


class CacheLimitWarning(RetracingWarning):
    """A converted function traced more input signatures than its cache keeps: the least
    recently used are dropped (and traced again if they come back)."""


# --------------------------------------------------------------------------- where
_HERE = os.path.dirname(os.path.abspath(__file__))
_INTERNAL = (_HERE + os.sep, os.path.join(os.path.dirname(_HERE), "runtime") + os.sep)
_TORCH: List[str] = []


def _internal(filename: str) -> bool:
    if not _TORCH:
        import torch
        _TORCH.append(os.path.dirname(os.path.abspath(torch.__file__)) + os.sep)
    return filename.startswith(_INTERNAL) or filename.startswith(_TORCH[0]) or \
        filename.startswith("<tograph")


def warn_at_caller(warning: Warning) -> None:
    """``warnings.warn(warning)`` attributed to the first frame outside tograph and torch
    (a ``to_graph(module)`` called through ``nn.Module.__call__`` or a container: the user's
    line that made the call)."""
    frame, level = sys._getframe(1), 2
    while frame is not None and _internal(frame.f_code.co_filename):
        frame, level = frame.f_back, level + 1
    if frame is None:
        level = 2
    warnings.warn(warning, stacklevel=level)


# --------------------------------------------------------------------------- what changed
_GRAD_MODE = {True: ("grad mode on",), False: ("grad mode off",)}     # a signature's last item
_TENSOR_PARTS = ("shape", "dtype", "requires_grad", "device", "strides", "class",
                 "Python attributes")
STATE_CHANGED = ("Python state the last trace read changed (a global, a closure variable, a "
                 "class or module attribute, a module's submodules, parameters, buffers or "
                 "hooks, or a question asked of a real tensor)")


def _mode(flags) -> str:
    """A Module's train/eval flags (its own and its submodules') in words."""
    return "train" if all(flags) else "eval" if not any(flags) else "mixed train/eval"


def _is_call_modes(item) -> bool:
    """Whether a signature item is ``tensor_state.call_modes()``: (CPU autocast's dtype or False,
    default dtype, forward-AD level, inference mode)."""
    import torch
    return isinstance(item, tuple) and len(item) == 4 and isinstance(item[1], torch.dtype)


def dynamic_mark(key):
    """(``key`` without the mark of a dynamic trace's key, the mark or None): a dynamic
    trace's key (``dynamic_shapes``) has its dynamic sizes None, their layouts
    "contiguous" and a last item ("dynamic", which of those sizes were equal), for a
    shifted trace also their offsets from the least."""
    last = key[-1] if key else None
    if isinstance(last, tuple) and len(last) in (2, 3) and last[0] == "dynamic":
        return key[:-1], last
    return key, None


def _contiguous_layout(shape, layout) -> bool:
    """Whether a static key's strides are the contiguous ones of ``shape``."""
    if not isinstance(layout, tuple) or len(layout) != len(shape):
        return False
    stride = 1
    for size, step in reversed(list(zip(shape, layout))):
        if size != 1 and step != stride:
            return False
        stride *= size
    return True


def _same_layout(a, b) -> bool:
    """A dynamic key's "contiguous" and a static key's contiguous strides are one layout."""
    return a[5] == b[5] or ("contiguous" in (a[5], b[5]) and all(
        leaf[5] == "contiguous" or _contiguous_layout(leaf[1], leaf[5]) for leaf in (a, b)))


def _shape_text(shape) -> str:
    sizes = ["*" if s is None else str(s) for s in shape]
    return "(" + ", ".join(sizes) + ("," if len(sizes) == 1 else "") + ")"


def serves(traced, key) -> bool:
    """Whether the graph traced for signature ``traced`` serves calls of ``key``: the
    same signature, or a dynamic trace's key whose dynamic sizes ``key`` fills in (with
    the same sizes equal)."""
    if traced == key:
        return True
    pattern, mark = dynamic_mark(traced)
    if mark is None or len(pattern) != len(key) or pattern[0] != key[0]:
        return False
    sizes: List[int] = []
    for a, b in zip(pattern[1:], key[1:]):
        if a == b:
            continue
        if not (isinstance(a, tuple) and isinstance(b, tuple) and a[:1] == b[:1] == ("T",)
                and len(a) == len(b) and len(a[1]) == len(b[1]) and a[2:5] == b[2:5]
                and a[6:] == b[6:] and _same_layout(a, b)
                and all(x is None or x == y for x, y in zip(a[1], b[1]))):
            return False
        sizes += [y for x, y in zip(a[1], b[1]) if x is None]
    if not sizes:
        return True
    if len(mark) == 3 and tuple(s - min(sizes) for s in sizes) != mark[2]:
        return False
    first: Dict[int, int] = {}
    return tuple(first.setdefault(s, len(first)) for s in sizes) == mark[1]


def changes(names: List[str], old, new) -> List[Tuple[str, str]]:
    """(kind, text) for each item of signature ``new`` that differs from ``old``; a
    dynamic trace's key (``dynamic_mark``) says which dims it traced dynamic."""
    same = old == new           # (a guard failed: describe_change says so)
    old, _ = dynamic_mark(old)
    new, mark = dynamic_mark(new)
    out = _changes(names, old, new)
    if mark is not None and not same:
        dims = [f"{names[i] if i < len(names) else f'argument #{i}'}{[d]}"
                for i, leaf in enumerate(new[1:new[0].num_leaves + 1])
                if isinstance(leaf, tuple) and leaf[:1] == ("T",)
                for d, size in enumerate(leaf[1]) if size is None]
        out.append(("shapes", f"traced with dynamic dims {', '.join(dims)} (one graph for "
                              f"their sizes)"))
    return out


def _changes(names: List[str], old, new) -> List[Tuple[str, str]]:
    if old[0] != new[0]:
        return [("structure", "the structure of the arguments changed")]
    out = []
    leaves = old[0].num_leaves
    for i, (a, b) in enumerate(zip(old[1:], new[1:])):
        if a == b:
            continue
        if a in _GRAD_MODE.values():
            out.append(("modes", f"{a[0]} -> {b[0]}"))
        elif _is_call_modes(a):
            out.append(("modes", f"CPU autocast, default dtype, forward-AD level, inference "
                         f"mode: {a} -> {b}"))
        elif argument_offsets.is_key(a) and argument_offsets.is_key(b):
            out.append(("tensors", argument_offsets.text(a, b, names)))
        elif argument_aliases.is_key(a):
            out.append(("aliases", f"one tensor object passed as several arguments: "
                        f"{argument_aliases.text(a, names)} -> "
                        f"{argument_aliases.text(b, names)}"))
        elif i >= leaves:           # a Module's (and submodules') train/eval flags
            out.append(("modes", f"training mode: {_mode(a)} -> {_mode(b)}"))
        else:
            name = names[i] if i < len(names) else f"argument #{i}"
            if a[0] == "T" and b[0] == "T":
                what = [f"shape {_shape_text(x)} -> {_shape_text(y)}" if label == "shape"
                        else f"{label} {x} -> {y}" for label, x, y in
                        zip(_TENSOR_PARTS, a[1:], b[1:]) if x != y and not (
                            label == "strides" and _same_layout(a, b))]
                if not what:
                    continue
                kind = "shapes" if a[1] != b[1] else "tensors"
                out.append((kind, f"{name}: " + ", ".join(what)))
            elif _is_value(a) and _is_value(b):
                out.append(("values", f"{name}: {a[-1]!r} -> {b[-1]!r}"))
            elif a[0] in ("M", "O") and a[0] == b[0] or a[0] is b[0]:
                # a module, an unhashable object (by identity), a hashable one (by equality)
                kind = f"{type(b[-1]).__name__} object" if a[0] not in ("M", "O") else \
                    "module" if a[0] == "M" else "object"

                out.append(("objects", f"{name}: another {kind}"))
            else:
                out.append(("objects", f"{name}: {_what(a)} -> {_what(b)}"))
    return out


_VALUES = (bool, int, float, complex, str, bytes, type(None))


def _is_value(leaf) -> bool:
    """A leaf key of a Python number, string, bytes or None (``api._leaf_key``)."""
    return leaf[0] in _VALUES


def _what(leaf) -> str:
    if leaf[0] == "T":
        return "a tensor"
    if leaf[0] in ("M", "O"):
        return "a module" if leaf[0] == "M" else "an object"
    return repr(leaf[-1]) if _is_value(leaf) else f"a {type(leaf[-1]).__name__}"


def describe_change(names: List[str], old, new) -> str:
    """What differs between two signatures, in words (the same one: a guard failed)."""
    return "; ".join(text for _, text in changes(names, old, new)) or STATE_CHANGED


_ORDER = ("values", "shapes", "objects", "tensors", "aliases", "structure", "modes")


def _kind(found: List[Tuple[str, str]]) -> str:
    kinds = {k for k, _ in found}
    return next((k for k in _ORDER if k in kinds), "state")


def _closest(history, key):
    """The traced signature most like ``key``: same structure, fewest differing items."""
    same = [old for old in history if old[0] == key[0] and len(old) == len(key)]
    if not same:
        return history[-1]
    return min(reversed(same), key=lambda old: sum(a != b for a, b in zip(old, key)))


def _shape_advice(names, old, new) -> str:
    dims: Dict[str, List[int]] = {}
    leaves = old[0].num_leaves
    for i, (a, b) in enumerate(zip(old[1:leaves + 1], new[1:leaves + 1])):
        if a != b and a[0] == "T" and b[0] == "T" and len(a[1]) == len(b[1]):
            name = names[i] if i < len(names) else i
            dims[name] = [d for d, (x, y) in enumerate(zip(a[1], b[1])) if x != y]
    example = "{" + ", ".join(f"{n!r}: {d}" for n, d in dims.items()) + "}" if dims else "True"
    return (f"Each size of a dimension the graph treats as fixed is its own trace. Automatic "
            f"dynamic shapes (the default) trace a dimension seen with a second size as "
            f"dynamic, so a shape retrace should be rare: these sizes could not share a "
            f"graph (a size of 0 or 1, the code using a size as a Python number, or "
            f"dynamic=False). To trace once for all sizes, pass "
            f"to_graph(..., dynamic={example})")


_ADVICE = {
    "values": "Python numbers, strings and None are constants of the graph: each new "
              "value is a new trace. Pass a number that changes from call to call as a tensor "
              "(torch.tensor(n)) to reuse one graph",
    "objects": "Object arguments are part of the signature (by identity, or by equality "
               "when hashable): pass the same object each call, and its changing numbers "
               "and tensors as arguments",
    "tensors": "Each dtype, device, requires_grad setting and memory layout is its own graph: "
               "pass inputs alike (one dtype, .contiguous())",
    "aliases": "Which arguments are one tensor object is part of the signature (eager can "
               "tell: `a is b`, a write through one read through the other): pass them "
               "alike each call (f(x, x) or f(x, y), not both)",
    "structure": "The number of arguments, their keywords and the lengths and types of "
                 "containers are part of the trace: keep them fixed (a list of varying "
                 "length as one stacked tensor)",
    "state": "A graph holds the globals, closure variables and attributes its trace read; "
             "when one changes it traces again: pass a value that changes between calls as "
             "an argument (numbers as tensors)",

}


def _compare(names, history, key):
    """(kind, change, advice: for shapes, or a list of numbers) for a trace of ``key`` that
    no cached guard refused."""
    if key in history:
        return "evicted", "its graph was dropped for the cache limit", None
    old = _closest(history, key)
    found = changes(names, old, key)
    kind = _kind(found)
    return (kind, "; ".join(t for _, t in found) or STATE_CHANGED,
            _shape_advice(names, old, key) if kind == "shapes" else
            _list_advice(names, old, key) if kind == "values" else None)


def _list_advice(names, old, new) -> Optional[str]:
    """For numbers that changed inside one list or tuple argument (``lengths`` for
    ``pack_padded_sequence``, leaves ``lengths_0``, ``lengths_1``...): pass it as one tensor."""
    leaves = old[0].num_leaves
    lists = {names[i].rpartition("_")[0] for i, (a, b) in enumerate(zip(old[1:leaves + 1],
                                                                          new[1:leaves + 1]))
             if a != b and _is_value(a) and _is_value(b) and i < len(names) and
             names[i].rpartition("_")[2].isdigit()}
    lists.discard("")
    if not lists:
        return None
    example = sorted(lists)[0]
    return (f"The numbers in a list or tuple argument ({', '.join(sorted(lists))}) are "
            f"constants of the graph too, one per item: a list that changes from call to "
            f"call is a new trace each time. Pass it as one tensor "
            f"(torch.tensor({example}); pack_padded_sequence takes CPU int64 lengths) to "
            f"reuse one graph")


class Retraces:
    """One function's traced signatures and the retracing warnings it has given."""

    def __init__(self):
        self.history: List[Any] = []            # traced signatures, the last HISTORY
        self.traces = 0
        self.counts: Dict[str, int] = {}         # kind -> retraces for it
        self.warned: set = set()

    def note(self, function, names, key, cached=None, flat=None, dynamic=None) -> str:
        """A trace of ``key`` is starting (``cached``: the key's entry whose guard failed;
        ``dynamic``: a trace with dynamic dims, the automatic policy's own retrace, not
        counted). Warns when due; returns the kind."""
        history, advice = self.history, None
        if not history:
            kind, change = "first", ""
        elif cached is not None:
            explain = getattr(cached, "explain_guard", None)
            detail = explain(flat) if explain is not None and flat is not None else ""
            kind, change = "state", (f"Python state the last trace read changed: {detail}"
                                     if detail else STATE_CHANGED)
        else:
            try:        # keys hold hashable arguments: their __eq__ is the user's
                kind, change, advice = _compare(names, history, key)
            except Exception:  # noqa: BLE001 (a dataclass comparing tensors raises)
                kind, change = "state", STATE_CHANGED
        self.traces += 1
        history.append(key)
        if len(history) > HISTORY:
            del history[0]
        if kind in ("first", "modes", "evicted") or dynamic:
            return kind
        count = self.counts[kind] = self.counts.get(kind, 0) + 1
        if count >= WARN_AFTER and kind not in self.warned:
            self.warned.add(kind)
            name = getattr(function, "__name__", "function")
            text = advice if advice is not None else _ADVICE[kind]
            warn_at_caller(RetracingWarning(
                f"{name} was traced {self.traces} times, {count} of them for the same "
                f"reason; this time because {change}. {text}. (Said once per function "
                f"and reason; train/eval and grad-mode changes are expected: one trace "
                f"each.)"))
        return kind


def warn_cache_limit(function, limit: int) -> None:
    """``CacheLimitWarning``, the first time ``function``'s cache evicts."""
    name = getattr(function, "__name__", "function")
    warn_at_caller(CacheLimitWarning(
        f"{name} has traced more input signatures than its cache keeps ({limit}): the "
        f"least recently used graph is dropped for each new one, and traced again if its "
        f"signature comes back. Raise the limit with to_graph(..., cache_limit=N) or the "
        f"TOGRAPH_CACHE_LIMIT environment variable; or make calls share graphs (numbers "
        f"that change as tensors, dynamic= for sizes). f.cache_info() counts traces and "
        f"evictions. (Said once per function.)"))
