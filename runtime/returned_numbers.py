"""Python numbers a converted call returns come back as Python numbers.

    @to_graph
    def step(x):
        loss = x.sum()
        k = 0
        if loss > 0:            # a tensor `if`: k is a graph value standing for an int
            k = 1
        return loss.item(), k, loss     # eager: (float, int, Tensor)

Inside a trace a Python number that depends on tensors (``loss.item()``, ``float(t)``,
``len`` of a run-time size, a counter a tensor ``if``/loop changes, ``math.*`` of those)
is a 0-d graph value marked with the number it stands for (``introspection.KEY``). The
graph's outputs stay tensors (``.graph()``, export, saved graphs and ``runtime.Session``
hand back the 0-d tensors). Only the outermost call's result, the structure a cached
entry's function builds (``executor``'s ``structure``), turns each output slot whose value
stands for a number into that number: ``output`` decides it once, at trace time, per
slot, so a graph returning only tensors runs exactly as before, and a slot that is a
number costs one ``.item()`` per call. A 0-d tensor eager returns as a tensor is not
marked and stays a tensor.

An int stand-in is an int64 (``.item()`` is the exact int), a float one a float64, a bool
one a bool. A value whose kind depends on the path taken at run time (a Python number on
one path of a tensor ``if``, a tensor on the other: ``introspection.MIXED``) cannot be
told apart when the graph runs: it comes back as the graph's 0-d tensor on every path, a
tensor where eager's is one and a 0-d tensor of the same kind standing for eager's number
on the other path (the contract's stand-in), rather than making the call fall back.
"""
from __future__ import annotations

import torch

from .executor import Unstack
from .introspection import MIXED, NUMBER_KINDS, number_kind
from .outputs import Rebuild
from .tensor_list import ELEMENTS


def output(value, lowered: dict):
    """The output structure for one result slot ``value`` (a traced node, or an ``Unstack``
    of a list grown in tensor control flow; ``lowered``: id of a traced node -> the
    optimized graph's): as the graph gives it when it stands for no Python number, else a
    ``Rebuild`` handing back the number (the list of numbers) on each call."""
    if isinstance(value, Unstack):
        node = value.node
        plain = Unstack(lowered[id(node)])      # (its rows, as tensors)
        kind, make, rank = node.attrs.get(ELEMENTS), torch.Tensor.tolist, 1
    else:
        node = value
        plain = lowered[id(node)]
        kind, make, rank = number_kind(node.attrs), torch.Tensor.item, 0
    if kind is None:
        return plain
    if kind == MIXED:               # (a 0-d tensor standing for the number on its path)
        return plain
    meta = node.meta
    if not isinstance(getattr(meta, "dtype", None), torch.dtype) or meta.shape is None or \
            len(meta.shape) != rank:        # (a number is 0-d, a list of them a stack)
        return plain
    if not _exact(kind, meta.dtype):
        if rank:
            return plain
        make = NUMBER_KINDS[kind]           # (``int(t)``)
    return Rebuild((lowered[id(node)],), make, 0)   # (``item(t)``, ``tolist(t)``: no frame)


def _exact(kind: str, dtype: torch.dtype) -> bool:
    """Whether ``.item()`` of a ``dtype`` tensor is already a Python number of ``kind``."""
    if kind == "bool":
        return dtype == torch.bool
    if kind == "float":
        return dtype.is_floating_point
    return not dtype.is_floating_point and not dtype.is_complex and dtype != torch.bool

