"""Tensors a converted function keeps across calls in a slot (``carried_numbers.Slot``: a
closure cell, a global, a list's or dict's item, a plain object's attribute), beside the
numbers ``carried_numbers`` carries: the hidden state of truncated backpropagation
through time, as pytorch/examples word_language_model keeps it.

Forms (what the guard compares; the values are the graph's to read):

- ``("tensor", dtype, shape, history)``: a plain CPU tensor. ``history`` False: no
  gradient (``state[0] = h.detach()``), stored as a copy (the executor may reuse the
  memory of a value with no autograd use). ``history`` True: a non-leaf that requires
  grad (``hidden[0] = h`` before ``repackage_hidden``): the graph's own result is stored,
  its autograd history with it, as eager's object is; the next call reads that tensor
  back, so ``h.detach()`` cuts it as eagerly, a forward through it extends it, and a
  backward through it reaches the previous call's autograd graph exactly as eager's does
  (torch's own "Trying to backward through the graph a second time", or a
  ``retain_graph=True`` backward running through every step kept). A leaf that requires
  grad is not carried (a read-back stand-in would answer ``is_leaf`` as an op's result),
  nor is an inference tensor (``inference_ops``: the copy kept would not be one).
- ``("tuple", forms)``: a tuple of such tensors (an LSTM's ``(h, c)``), nested tuples
  included; each item is read by its own node (``read_item``) and stored as above.

A slot whose tensor gains or loses history (zeros at first, then a step's result) or
changes shape or dtype traces once more (the guard holds the form), never a stale graph.
"""
from __future__ import annotations

from typing import Optional

import torch

from . import grad_flags

_ANCHOR = torch.zeros(())       # (gives the read nodes a tensor input)
_MAX_ITEMS = 16


def form(value) -> Optional[tuple]:
    """The form of a tensor or a tuple of tensors a slot may carry; None otherwise."""
    if type(value) is tuple:
        if not value or len(value) > _MAX_ITEMS:
            return None
        forms = tuple(form(v) for v in value)
        return None if None in forms else ("tuple", forms)
    if not isinstance(value, torch.Tensor):
        return None
    if getattr(value, "_node", None) is not None:       # (a graph value of this trace)
        if not getattr(value._node.meta, "is_static", False):
            return None     # (a size known only at run time: its shape is not asked)
        from .inference_ops import flag_of
        from .introspection import kind_of
        from .tensor_state import leaf_of
        shape = tuple(value.shape)
        flag = grad_flags.grad_of(value)
        if kind_of(value) is not None or flag is None or flag_of(value) is not False or \
                not all(type(d) is int for d in shape) or (flag and leaf_of(value) is not False):
            return None     # (an inference tensor: a copy kept would not be one)
        return ("tensor", value.dtype, shape, flag)
    with torch._C.DisableTorchFunction():
        if type(value) is not torch.Tensor or value.device.type != "cpu" or \
                value.layout != torch.strided or value.is_inference() or \
                (value.requires_grad and value.grad_fn is None):
            return None
        return ("tensor", value.dtype, tuple(value.shape), value.requires_grad)


def carries(was, now) -> bool:
    """Whether a slot holding the ``was`` form may be set to a ``now`` one: the same
    structure of tensors of the same shapes and dtypes, with or without history (the
    guard's form then traces once more)."""
    if type(was) is not tuple or type(now) is not tuple or was[0] != now[0]:
        return False
    if was[0] == "tuple":
        return len(was[1]) == len(now[1]) and all(map(carries, was[1], now[1]))
    return was[1:3] == now[1:3]


def computed(value) -> bool:
    """Whether every tensor of ``value`` is a graph value of this trace (the function
    computed it; a real tensor stored would be the trace's own object on every call)."""
    if type(value) is tuple:
        return all(computed(v) for v in value)
    return getattr(value, "_node", None) is not None


def kept(value, kind):
    """What the slot keeps of ``value`` (a run's tensor or tuple of them, of form
    ``kind``): a tensor with history itself, one without a copy."""
    if kind[0] == "tuple":
        return tuple(kept(v, k) for v, k in zip(value, kind[1]))
    return value if kind[3] else value.clone()


def _item(value, path):
    for i in path:
        value = value[i]
    return value


def _kind_at(kind, path):
    for i in path:
        kind = kind[1][i]
    return kind


def read_item(slot, anchor: torch.Tensor, kind, path: tuple) -> torch.Tensor:
    """The tensor at ``path`` in what ``slot`` holds when the graph runs (``kind``: the
    form of the whole, checked)."""
    if anchor.is_meta:
        at = _kind_at(kind, path)
        return torch.empty(at[2], dtype=at[1], device="meta")
    value = slot.get()
    if form(value) != kind:
        raise RuntimeError(f"{slot.label} holds {type(value).__name__} of another form when "
                           f"the graph runs; the graph was traced with {kind} there")
    return _item(value, path)


read_item._tograph_impure = True      # (ops.is_impure: never merged, dropped or moved)


def stand_in(slot, kind, path=()):
    """The trace's stand-in for what ``slot`` holds (of form ``kind``): a tensor (or a
    tuple of them) read when the graph runs, requiring grad where it carries history."""
    from .symbolic import dispatch_record
    at = _kind_at(kind, path)
    if at[0] == "tuple":
        return tuple(stand_in(slot, kind, path + (i,)) for i in range(len(at[1])))
    value = dispatch_record(read_item, (slot, _ANCHOR, kind, path), {})
    value._node.attrs[grad_flags.KEY] = at[3]
    return value


def same(held, value) -> bool:
    """Whether ``held`` (what a slot holds) equals ``value`` (what the trace left), tuples
    item by item."""
    if type(value) is tuple:
        return type(held) is tuple and len(held) == len(value) and \
            all(same(h, v) for h, v in zip(held, value))
    return isinstance(held, torch.Tensor) and held.shape == value.shape and \
        held.dtype == value.dtype and _equal(held.detach(), value.detach())


def _equal(a, b) -> bool:
    """``torch.equal``, with nan equal to nan (a kept loss that was nan is unchanged)."""
    if torch.equal(a, b):
        return True
    return (a.is_floating_point() or a.is_complex()) and \
        bool(torch.isclose(a, b, rtol=0, atol=0, equal_nan=True).all())
