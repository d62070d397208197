"""Factories record the dtype they made at trace time.

``torch.zeros(3)``, ``torch.arange(3.0)``, ``torch.tensor([1.5])``, ``torch.rand(2)``
... without ``dtype=`` read the default dtype (``torch.set_default_dtype``) when they run.
A graph node that left it out would read it when the graph runs (or when constant
folding evaluates it), while every other node's dtype was fixed when it was traced: a
graph traced under float32 and run, or folded, under float64 would hand float64 data to
kernels generated for float32. So a factory node whose result is floating point or
complex gets ``dtype=`` the dtype shape inference found for it, under the default dtype
of its trace (integer and bool results do not depend on it and stay as written).
"""
from __future__ import annotations

import torch

from .graph_ops import full_of_tensor
from .meta import TensorMeta

# the callables that read the default dtype for a floating result and take ``dtype=``
FACTORIES = frozenset({
    torch.zeros, torch.ones, torch.full, torch.empty, torch.arange, torch.linspace,
    torch.logspace, torch.eye, torch.tensor, torch.as_tensor, torch.scalar_tensor,
    torch.rand, torch.randn, full_of_tensor,
})


def pinned(func, kwargs: dict, meta) -> dict:
    """``kwargs`` of a ``func`` node, with the dtype of its result ``meta`` written in
    when ``func`` is a factory that read the default dtype for it."""
    if func not in FACTORIES or kwargs.get("dtype") is not None or \
            kwargs.get("out") is not None or not isinstance(meta, TensorMeta):
        return kwargs
    if not (meta.dtype.is_floating_point or meta.dtype.is_complex):
        return kwargs
    return {**kwargs, "dtype": meta.dtype}
