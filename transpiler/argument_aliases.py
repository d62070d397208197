"""Arguments that are one tensor object (``f(x, x)``, ``mha(x, x, x)``, ``f([w, w])``).

    aliases = pattern(flat)         # ((i, j), ...): leaf i is the tensor leaf j before it
    first = earlier(flat)           # {i: j}: the trace gives leaf i leaf j's value

Eager code can tell one tensor passed twice from two equal tensors: ``a is b``, torch's own
``query is key`` (``nn.MultiheadAttention``'s fast path), an in-place write through one
name read through the other. A trace that gave each argument position its own input would
answer ``a is b`` False for ``f(x, x)`` and bake that in, silently. So a repeated tensor
leaf is traced as the same value (one graph input, the repeat's input position unused),
and the pattern is part of the call's signature (``api.signature_of``, the fast key) and
of each entry function's checks (``call_entry``): a call with another pattern traces its
own graph.

Distinct tensors sharing storage (``x`` and ``x[1:]``) stay distinct inputs: the graph's
ops run on the caller's tensors in program order, so a write through one is seen through
the other as in eager.
"""
from __future__ import annotations

from typing import Dict, Optional, Sequence, Tuple

import torch

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


def key(leaves: Sequence) -> tuple:
    """The signature item of ``pattern(leaves)`` (one, always: ``retracing`` compares
    signatures item by item)."""
    return (("aliases", pattern(leaves)),)


def is_key(item) -> bool:
    """Whether a signature item is ``key``'s."""
    return isinstance(item, tuple) and len(item) == 2 and type(item[0]) is str and \
        item[0] == "aliases"


def text(item, names: Sequence[str]) -> str:
    """``key``'s item in words: which arguments are one tensor object."""
    if item[1] is None:
        return "distinct tensors"
    def name(i):
        return names[i] if i < len(names) else f"argument #{i}"
    return ", ".join(f"{name(i)} is {name(j)}" for i, j in item[1])


def earlier(leaves: Sequence) -> Dict[int, int]:
    """{i: j}: tensor leaf ``i`` is the earlier leaf ``j`` (the trace gives it ``j``'s value,
    so ``a is b`` holds in the trace as in the call, and no graph input of its own)."""
    return dict(pattern(leaves) or ())

