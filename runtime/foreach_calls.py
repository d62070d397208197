"""``torch._foreach_X_(tensors, ...)`` traced as the loop it stands for.

timm's ModelEmaV3 updates its average with one call::

    torch._foreach_lerp_(ema_params, model_params, 1.0 - decay)

and hand-written fused optimizer steps use ``_foreach_mul_``/``_foreach_add_``/
``_foreach_addcmul_``. When an argument is traced (``decay`` computed from a carried
counter is a graph value) torch's list kernel cannot be shaped on meta tensors (it reads
a scalar weight with ``.item()``). Eager's meaning is the per-tensor loop, which traces
as ever: ``tensors[i].X_(...)`` with the i-th item of every list argument and the other
arguments shared (a 0-d tensor weight, a number, ``alpha=``). The in-place family only,
where ``torch.Tensor`` has the method ``X_``; lists of unequal length are left to torch
(its error).
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import torch

from .ops import op_name

_VALUE_AT = {"_foreach_addcmul_": 3, "_foreach_addcdiv_": 3}   # scalars: ``value=`` per item


def per_item(func, args, kwargs) -> Optional[List[Tuple[object, tuple, dict]]]:
    """``[(method, args, kwargs)]``, one call per item, for an in-place ``_foreach_`` op;
    None for any other call or a form the loop does not mean."""
    name = op_name(func)
    if not (name.startswith("_foreach_") and name.endswith("_")) or not args or \
            not isinstance(args[0], (list, tuple)):
        return None
    method = getattr(torch.Tensor, name[len("_foreach_"):], None)
    if method is None:
        return None
    count = len(args[0])
    lists = [a for a in list(args) + list(kwargs.values()) if isinstance(a, (list, tuple))]
    if any(len(a) != count for a in lists):
        return None
    value_at = _VALUE_AT.get(name)
    if value_at is not None and (len(args) > value_at and isinstance(args[value_at],
                                                                      torch.Tensor)
                                 or "scalars" in kwargs):
        return None          # (a tensor of one scalar per item: left to torch)
    calls = []
    for i in range(count):
        item = [a[i] if isinstance(a, (list, tuple)) else a for a in args]
        options = {k: v[i] if isinstance(v, (list, tuple)) else v for k, v in kwargs.items()}
        if value_at is not None and len(item) > value_at:
            options["value"] = item.pop(value_at)       # addcmul_(t1, t2, *, value)
        calls.append((method, tuple(item), options))
    return calls
