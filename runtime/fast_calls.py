"""The cheapest spelling of a graph node's call, for the executor's generated code.

Some torch functions a trace records are Python wrappers around one C function (or take
a tuple the C parser unpacks more slowly than separate arguments); at batch 1 the wrapper
is a visible share of the op (1 thread, CPU time, GPT-2's shapes):

    Tensor.split(x, 64, dim=2)          7.3 us  ->  torch._VF.split(x, 64, 2)    3.6 us
    F.embedding(ids, w, padding_idx=None, ...) 8.6  ->  torch.embedding(w, ids)  4.1 us
    Tensor.view(x, (1, 16, 192))        2.5 us  ->  Tensor.view(x, 1, 16, 192)   1.5 us

Each rule calls the same ATen function with the same arguments as the wrapper would
(so values, autograd and errors are the wrapper's), and applies only to the argument
forms the wrapper itself sends straight there: Python ints for sizes, no ``max_norm``
(which renormalizes the weight in place first).
"""
from __future__ import annotations

from typing import Any, Optional, Tuple

import torch
import torch.nn.functional as F

_VF = torch._C._VariableFunctions
_SHAPE_METHODS = (torch.Tensor.view, torch.Tensor.reshape)
_EMBEDDING = ("input", "weight", "padding_idx", "max_norm", "norm_type",
              "scale_grad_by_freq", "sparse")
_EMBEDDING_DEFAULTS = {"padding_idx": None, "max_norm": None, "norm_type": 2.0,
                       "scale_grad_by_freq": False, "sparse": False}


def _ints(value) -> bool:
    return type(value) in (tuple, list, torch.Size) and len(value) > 0 and \
        all(type(v) is int for v in value)


def spelling(target, args: tuple, kwargs: dict) -> Optional[Tuple[Any, tuple, dict]]:
    """``(target, args, kwargs)`` calling the same ATen op more cheaply, or None."""
    if target is _SHAPE_METHODS[0] or target is _SHAPE_METHODS[1]:   # view((a, b)) -> view(a, b)
        if len(args) == 2 and not kwargs and _ints(args[1]):
            return target, (args[0], *args[1]), {}
        return None
    if target is torch.Tensor.split:         # Tensor.split's own int branch
        dim = kwargs.get("dim", args[2] if len(args) > 2 else 0)
        if 2 <= len(args) <= 3 and set(kwargs) <= {"dim"} and type(args[1]) is int and \
                type(dim) is int and not (len(args) == 3 and kwargs):
            return _VF.split, (args[0], args[1], dim), {}
        return None
    if target is F.embedding:                # F.embedding without renormalizing
        if len(args) > len(_EMBEDDING) or any(k not in _EMBEDDING for k in kwargs):
            return None
        bound = dict(_EMBEDDING_DEFAULTS)
        bound.update(zip(_EMBEDDING, args))
        if any(k in bound and k in kwargs for k in _EMBEDDING[:len(args)]):
            return None                      # (the call's own TypeError)
        bound.update(kwargs)
        if "input" not in bound or "weight" not in bound or bound["max_norm"] is not None \
                or bound["padding_idx"] is not None or \
                type(bound["scale_grad_by_freq"]) is not bool or \
                type(bound["sparse"]) is not bool:
            return None
        return torch.embedding, (bound["weight"], bound["input"], -1,
                                 bound["scale_grad_by_freq"], bound["sparse"]), {}
    return None
