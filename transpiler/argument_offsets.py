"""Storage offsets of tensor arguments: in a call's key only once a trace asked one.

    key += signature(flat)          # (("offsets", ((i, offset), ...)),): leaf i's offset
    is_key(item); text(old, new)    # retracing's words for a change of them

A view passed as an argument (word_language_model's ``get_batch``: ``source[i:i + bptt]``,
``x[i]`` rows, ``chunk`` pieces) has a new storage offset on every call. Nothing a graph
does depends on it: its ops run on the caller's real tensors (a view's ``data_ptr`` holds
its offset; an in-place write lands in the caller's storage), and the layout answers a
trace gives from an argument's example, strides and contiguity, are the same at any
offset. Only ``storage_offset()`` itself (of the argument, or of ``x[1:]``: it follows
the argument's) tells offsets apart. So a call's key (``api.signature_of``, the fast key,
``call_entry``'s checks) holds each tensor's strides, not its offset; a trace that answers
``storage_offset()`` (``runtime.tensor_state.reads_offsets``) puts this function's
arguments' offsets in its keys from then on, as ``argument_grads`` does for ``.grad``:
each offset its own graph, as before. Arguments that share storage are in the key as a
pattern (``argument_aliases``), never by address.
"""
from __future__ import annotations

from typing import Sequence

import torch

_TENSOR = torch.Tensor


def signature(values: Sequence) -> tuple:
    """The key item of the storage offsets of the tensors among ``values`` (by position;
    None for a layout without strides)."""
    offsets = []
    for i, v in enumerate(values):
        if isinstance(v, _TENSOR):
            try:
                offsets.append((i, v.storage_offset()))
            except RuntimeError:        # sparse and other layouts without strides
                offsets.append((i, None))
    return (("offsets", tuple(offsets)),)


def is_key(item) -> bool:
    """Whether a signature item is ``signature``'s."""
    return isinstance(item, tuple) and len(item) == 2 and type(item[0]) is str and \
        item[0] == "offsets"


def text(old, new, names: Sequence[str]) -> str:
    """A change of ``signature``'s item in words."""
    def name(i):
        return names[i] if i < len(names) else f"argument #{i}"
    before = dict(old[1])
    changed = [f"{name(i)} {before.get(i)} -> {o}" for i, o in new[1] if before.get(i) != o]
    return "storage offset " + (", ".join(changed) or f"{old[1]} -> {new[1]}") + \
        " (a trace read storage_offset(): each offset is its own graph)"
