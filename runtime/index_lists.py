"""A list index that holds number stand-ins, recorded as the integer tensor it stands for.

``x[[n - 1, 0]]`` with ``n`` a run-time size (or a staged loop's index) is advanced
indexing eagerly: the list is an int64 index tensor. Traced, ``n - 1`` is a 0-d graph value,
and torch reads a list holding a tensor as a tuple: ``x[n - 1, 0]``, one element (a trace
with dynamic sizes served 5 rows with x[4, 0]: silently wrong). Such a list of ints and int
stand-ins is passed on as the int64 tensor eager builds from it.

Requires: ``introspection.kind_of`` (which graph values stand for ints).
Provides: ``as_index_tensor(index)``, ``INDEXING`` (the ops whose second argument is an index).
"""
from __future__ import annotations

import torch

from . import graph_ops
from .introspection import kind_of

INDEXING = frozenset({torch.Tensor.__getitem__, torch.Tensor.__setitem__, graph_ops.setitem})


def as_index_tensor(index):
    """``index`` itself, or, for a list of ints with some int stand-ins among them, the 1-d
    int64 tensor eager indexes with."""
    if type(index) is not list or not index or \
            not any(isinstance(e, torch.Tensor) for e in index):
        return index
    if any(kind_of(e) != "int" for e in index):
        return index                # (bools, floats, tensors: torch's own reading)
    return torch.stack([e.to(torch.int64) if isinstance(e, torch.Tensor)
                        else torch.tensor(e, dtype=torch.int64) for e in index])
