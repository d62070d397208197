"""``tg.getitem(obj, index)``: ``obj[index]``, where a list or tuple of Python numbers may be
indexed by a number the graph knows only when it runs.

Eagerly ``bptrs[best_id]`` (BiLSTM-CRF's Viterbi back-tracking, ``best_id`` an ``.item()``)
is the list's item at that int. In a trace the int is a stand-in (a 0-d graph value) and
``list.__getitem__`` asks for its value. When every item is a Python number or a number's
stand-in of one kind (int, float or bool), the read is the item of their stack at the
index when the graph runs, marked with that kind: the same number eager reads (an index
out of range raises eager's ``IndexError``, "list index out of range", when the graph
runs: a staged check, ``staged_raises.raise_if``). Items of mixed kinds (whose type
would depend on the index), tensors (a copy would lose their identity: a write through
the item would miss the list's tensor) and anything else are read as ``obj[index]``,
which needs the int as before (a fallback naming the line).
"""
from __future__ import annotations

import torch

from ..introspection import kind_of, mark
from ..symbolic import is_symbolic
from .staged_raises import raise_if

_DTYPES = {"int": torch.int64, "float": torch.float64, "bool": torch.bool}


def getitem(obj, index):
    if (type(obj) is list or type(obj) is tuple) and is_symbolic(index):
        item = _number_item(obj, index)
        if item is not None:
            return item
    return obj[index]


def _number_item(items, index):
    meta = index._node.meta
    if kind_of(index) not in ("int", "bool", None) or meta is None or meta.shape != () or \
            meta.dtype.is_floating_point or meta.dtype.is_complex or not items:
        return None
    kinds = {kind_of(v) for v in items}
    if len(kinds) != 1 or not kinds <= _DTYPES.keys():
        return None
    (kind,) = kinds
    dtype = _DTYPES[kind]
    try:
        values = [v.reshape(()).to(dtype) if isinstance(v, torch.Tensor) else
                  torch.tensor(v, dtype=dtype) for v in items]
    except (OverflowError, RuntimeError):   # (an int past int64: read as eager would)
        return None
    at = index.reshape(()).to(torch.int64)
    n = len(values)
    raise_if((at >= n) | (at < -n), lambda: (IndexError, (f"{type(items).__name__} index out "
                                                          f"of range",)))
    item = torch.stack(values)[at]
    mark(item, kind)
    return item
