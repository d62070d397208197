"""``torch.tensor([a, b])`` of traced 0-d values: a new tensor built from their values.

Eager reads each item's number (``torch.tensor([R])`` with ``R`` a row of a tensor of
returns, in the PyTorch examples' actor-critic; ``torch.tensor([loss.item(), acc])``):
the result is a new leaf, detached, with the items' dtype (a tensor's own dtype when all
items are tensors of one dtype; int64, bool or the default float dtype for stand-ins of
Python numbers of one kind, as for the numbers themselves). The graph stacks the
detached items and casts them; nested lists of such items, rows of one length
(``torch.tensor([[x.sum()]])``), are that stack reshaped. Other mixes (a tensor beside a
number, ragged rows, two dtypes: torch's promotion of those follows other rules) return
None: the op is recorded as before, and refused.

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
    found = _nested(args[0], SymbolicTensor)
    if found is None:
        return None
    shape, items = found
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
    if len(shape) > 1:                          # (nested lists: rows of one length)
        stacked = stacked.reshape(shape)
    extra = {"device": kwargs["device"]} if kwargs.get("device") is not None else {}
    return stacked.to(dtype=dtype, copy=True, **extra)


def _nested(items, symbolic):
    """(shape, the 0-d traced values in order) of a list of them, or of lists of such lists
    of one length each (``torch.tensor([[a, b], [c, d]])``); None for anything else."""
    if not isinstance(items, _SEQUENCES):
        return ((), [items]) if isinstance(items, symbolic) and items.dim() == 0 else None
    if not items:
        return None
    parts = [_nested(v, symbolic) for v in items]
    if any(p is None for p in parts) or len({p[0] for p in parts}) != 1:
        return None
    return (len(parts),) + parts[0][0], [v for _, values in parts for v in values]


#: ``tensor_of_list``'s answer when the call is none of its cases
NOT_MADE = object()

# legacy constructors: their dtype; the tensor is made on the CPU
_LEGACY = {torch.LongTensor: torch.int64, torch.IntTensor: torch.int32,
           torch.FloatTensor: torch.float32, torch.DoubleTensor: torch.float64}


def tensor_of_list(func, args, kwargs):
    """``torch.tensor(keep, dtype=torch.long)`` / ``torch.LongTensor(keep)`` of a list grown
    in a tensor loop (NMS's ``keep.append(order[0].item())``): its stack, detached and cast
    (a new leaf, as eager reads the numbers). Only where eager's dtype does not depend on
    the length (``torch.tensor([])`` is float32: without ``dtype=`` it is refused) and the
    cast is the one eager makes: integer elements to any dtype, floats to floating dtypes,
    bools to bool. NOT_MADE: not such a call."""
    from .tensor_list import TensorList, element_kinds
    if func in _LEGACY and len(args) == 1 and not kwargs and isinstance(args[0], _SEQUENCES):
        return _legacy_of_items(func, args[0])
    if len(args) != 1 or not isinstance(args[0], TensorList) or \
            not (func in _LEGACY or func is torch.tensor or func is torch.as_tensor):
        return NOT_MADE
    allowed = set() if func in _LEGACY else {"dtype", "device"}
    stack = args[0].stack
    if set(kwargs) - allowed or stack.dim() != 1:
        return NOT_MADE
    dtype = _LEGACY.get(func) or kwargs.get("dtype")
    if dtype is None:
        from .errors import TracingError
        from .source_info import format_location, user_location
        raise TracingError(f"{format_location(user_location())}: {func.__name__}() without "
                           f"dtype= of a list built in a tensor loop: eager's dtype follows "
                           f"the elements, or is float32 when the list is empty, which is "
                           f"known only when the graph runs")
    kinds = element_kinds(stack)
    if kinds is None or not _eager_cast(stack.dtype, dtype):
        return NOT_MADE
    device = torch.device("cpu") if func in _LEGACY else \
        kwargs.get("device") or torch.get_default_device()
    return args[0].stacked().detach().to(dtype=dtype, device=device, copy=True)


def _legacy_of_items(func, items):
    """``torch.LongTensor([i])`` of traced 0-d values (the notebook NMS's one box:
    ``keep.append(order.item())``): as ``torch.tensor(items, dtype=...)`` on the CPU, where
    each item's dtype casts as eager reads it."""
    from .symbolic import SymbolicTensor
    dtype = _LEGACY[func]
    if not items or not all(isinstance(v, SymbolicTensor) and v.dim() == 0 and
                            _eager_cast(v.dtype, dtype) for v in items):
        return NOT_MADE
    made = tensor_of((list(items),), {"dtype": dtype, "device": torch.device("cpu")})
    return NOT_MADE if made is None else made


def _eager_cast(have, want) -> bool:
    """Whether eager reads elements of dtype ``have`` into dtype ``want`` as the cast
    does (it refuses float tensors for an integer dtype, and Python floats for a legacy
    integer constructor; Python floats it truncates for ``dtype=torch.long``: refused)."""
    if have == torch.bool:
        return want == torch.bool
    if have.is_floating_point:
        return want.is_floating_point
    return not have.is_complex
