"""``torch.tensor([a, b])`` of traced 0-d values: a new tensor built from their values.

Eager reads each item's number (``torch.tensor([R])`` with ``R`` a row of a tensor of
returns, in the PyTorch examples' actor-critic; ``torch.tensor([loss.item(), acc])``):
the result is a new leaf, detached, with the items' dtype (a tensor's own dtype when all
items are tensors of one dtype; int64, bool or the default float dtype for stand-ins of
Python numbers of one kind, as for the numbers themselves). The graph stacks the
detached items and casts them. Other mixes (a tensor beside a number, nested lists, two
dtypes: torch's promotion of those follows other rules) return None: the op is recorded
as before, and refused.

Requires: ``symbolic`` (imported when called: it calls this module).
"""
from __future__ import annotations

import collections

import torch

from .introspection import kind_of

_NUMBER_DTYPES = {"int": torch.int64, "bool": torch.bool}
# what eager reads item by item (reinforce.py's returns built by ``deque.appendleft``)
_SEQUENCES = (list, tuple, collections.deque)


def tensor_of(args, kwargs):
    """The tensor eager's ``torch.tensor(items, dtype=...)`` makes, or None."""
    from .symbolic import SymbolicTensor, _python_index, _python_int
    if len(args) != 1 or not isinstance(args[0], _SEQUENCES) or not args[0] or \
            set(kwargs) - {"dtype", "device"}:
        return None
    items = list(args[0])
    if not all(isinstance(v, SymbolicTensor) and v.dim() == 0 for v in items):
        return None
    kinds = {"int" if _python_int(v) or _python_index(v) else kind_of(v) for v in items}
    if kinds == {None}:                         # tensors: their one dtype
        dtypes = {v.dtype for v in items}
        if len(dtypes) != 1:
            return None
        dtype = dtypes.pop()
    elif None not in kinds and kinds <= {"int", "float", "bool"}:
        dtype = torch.get_default_dtype() if "float" in kinds else \
            torch.int64 if "int" in kinds else torch.bool
    else:
        return None
    dtype = kwargs.get("dtype") or dtype
    stacked = torch.stack([v.detach() for v in items])
    extra = {"device": kwargs["device"]} if kwargs.get("device") is not None else {}
    return stacked.to(dtype=dtype, copy=True, **extra)
