"""Arguments that are one tensor object (``f(x, x)``, ``mha(x, x, x)``, ``f([w, w])``).

    aliases = pattern(flat)         # ((i, j), ...): leaf i is the tensor leaf j before it
    first = earlier(flat)           # {i: j}: the trace gives leaf i leaf j's value
    views = shared(flat)            # ((i, j), ...): distinct leaves i, j share storage

Eager code can tell one tensor passed twice from two equal tensors: ``a is b``, torch's own
``query is key`` (``nn.MultiheadAttention``'s fast path), an in-place write through one
name read through the other. A trace that gave each argument position its own input would
answer ``a is b`` False for ``f(x, x)`` and bake that in, silently. So a repeated tensor
leaf is traced as the same value (one graph input, the repeat's input position unused),
and the pattern is part of the call's signature (``api.signature_of``, the fast key) and
of each entry function's checks (``call_entry``): a call with another pattern traces its
own graph.

Distinct tensors sharing storage (``x`` and ``x[1:]``, ``shared``) stay distinct inputs,
which the graph and its optimizer take as independent: a write to one, read through the
other (``a[0] = 7; return b * 2``), could be reordered or merged away. So which distinct
tensors share storage is part of the signature too (its cost, a storage query per tensor,
only on the ordinary path and in the entry functions of graphs that write an argument in
place, which get no flat fast key), and a trace whose graph writes an argument in place
while another shares its storage falls back (``refuse_shared_writes``), naming the write's
line.
"""
from __future__ import annotations

from typing import Dict, Optional, Sequence, Tuple

import torch

from runtime.errors import GraphError

_TENSOR = torch.Tensor


def pattern(leaves: Sequence) -> Optional[Tuple[Tuple[int, int], ...]]:
    """``(i, j)`` for each tensor leaf ``i`` that is the same object as the earlier leaf
    ``j`` (the first of them), in order; None when no tensor leaf repeats."""
    first = {}
    repeats = None
    for i, v in enumerate(leaves):
        if isinstance(v, _TENSOR):
            j = first.setdefault(id(v), i)
            if j != i:
                repeats = (repeats or ()) + ((i, j),)
    return repeats


def shared(leaves: Sequence) -> Optional[Tuple[Tuple[int, int], ...]]:
    """``(i, j)`` for each tensor leaf ``i`` (not a repeat of an earlier object) whose
    storage is the earlier leaf ``j``'s (a view of it, or both views of one tensor); None
    when no two distinct tensor leaves share storage."""
    objects: Dict[int, int] = {}
    for i, v in enumerate(leaves):
        if isinstance(v, _TENSOR):
            objects.setdefault(id(v), i)
    if len(objects) < 2:                        # (the storage query costs ~1 us a tensor)
        return None
    storages: Dict[tuple, int] = {}
    out = None
    for i in sorted(objects.values()):
        v = leaves[i]
        try:
            ptr = v.untyped_storage().data_ptr()
        except Exception:  # noqa: BLE001 - a tensor without storage (sparse, nested)
            continue
        if ptr:                                 # (0: an empty or meta storage)
            j = storages.setdefault((v.device, ptr), i)
            if j != i:
                out = (out or ()) + ((i, j),)
    return out


def key(leaves: Sequence) -> tuple:
    """The signature item of ``pattern(leaves)`` and ``shared(leaves)`` (one, always:
    ``retracing`` compares signatures item by item)."""
    return (("aliases", pattern(leaves), shared(leaves)),)


def is_key(item) -> bool:
    """Whether a signature item is ``key``'s."""
    return isinstance(item, tuple) and len(item) == 3 and type(item[0]) is str and \
        item[0] == "aliases"


def text(item, names: Sequence[str]) -> str:
    """``key``'s item in words: which arguments are one tensor object or share storage."""
    def name(i):
        return names[i] if i < len(names) else f"argument #{i}"
    parts = [f"{name(i)} is {name(j)}" for i, j in item[1] or ()] + \
        [f"{name(i)} shares {name(j)}'s storage" for i, j in item[2] or ()]
    return ", ".join(parts) or "distinct tensors"


def refuse_shared_writes(graph, leaves: Sequence, names: Sequence[str]) -> None:
    """Raises ``GraphError`` (at the write's line) when ``graph`` writes a tensor argument
    in place (``graph.mutated_inputs``) and two distinct tensor arguments share storage:
    the graph takes them as independent, so a write through one read through the other
    might not be seen."""
    writes = getattr(graph, "mutated_inputs", None)
    pairs = shared(leaves) if writes else None
    if pairs:
        i, j = pairs[0]
        name, location = writes[0]
        error = GraphError(f"the function writes argument {name!r} in place while arguments "
                           f"{names[j]!r} and {names[i]!r} share storage (views of one "
                           f"tensor): the graph takes them as independent, so a write through "
                           f"one read through the other might be missed")
        error.location = location
        raise error


def earlier(leaves: Sequence) -> Dict[int, int]:
    """{i: j}: tensor leaf ``i`` is the earlier leaf ``j`` (the trace gives it ``j``'s value,
    so ``a is b`` holds in the trace as in the call, and no graph input of its own)."""
    return dict(pattern(leaves) or ())

