"""``.grad`` of tensors passed as arguments: d2l's ``sgd(params, lr, batch_size)`` and
``grad_clipping(params, theta)`` converted on their own, ``params`` a list of leaves.

A parameter a closure or a module holds is a graph constant: its ``.grad`` is that very
tensor (``trace_reads`` guards it by identity). An argument is a placeholder, a new tensor
on each call, and whether the caller's tensor has a gradient used not to be part of the
call's signature, so a trace reading it fell back. Here it is:

- ``note(node, value)``: each argument that requires grad carries, in its placeholder's
  attrs (``KEY``), whether it is a leaf and whether its ``.grad`` is None (or a tensor
  with the parameter's shape, dtype and strides, or another);
- a trace that asks ``p.grad`` / ``is_leaf`` / ``grad_fn`` of such a placeholder sets
  ``root.argument_grads``: the front door then puts ``signature(flat)`` (each such
  argument's leafness and gradient metadata) in this function's call keys from then on,
  so a call whose gradients differ (None, then a tensor) has a graph of its own, and a
  graph never answers with another call's state;
- ``p.grad`` is read when the graph runs (``autograd_effects.read_grad``: the tensor the
  caller's ``p.grad`` holds on that call, written in place by ``p.grad.zero_()`` or
  ``p.grad[:] *= c`` as eagerly), or checked None (``expect_no_grad``); after a
  ``loss.backward()`` or ``p.grad = ...`` in the trace, ``autograd_effects`` follows it
  as for a parameter;
- ``p.grad = value`` (None or a tensor of the graph) is ``set_grad`` when the graph runs.

Refused as before: ``.grad`` of an argument that is not a leaf, and a gradient whose
metadata is not the parameter's (another dtype or layout: the graph's example would
differ) or that requires grad itself.
"""
from __future__ import annotations

import torch

from .graph_ops import effect

KEY = "argument_grad"   # placeholder attrs: ("leaf", None / True / False) or ("nonleaf",)


def _grad_part(t: torch.Tensor):
    """What a call's key holds of a tensor that requires grad: False for a non-leaf, None
    for a leaf without gradient, else the gradient's metadata."""
    if not t.is_leaf:
        return False
    g = t._grad
    if g is None:
        return None
    try:
        layout = g.stride(), g.storage_offset()
    except RuntimeError:        # (sparse: no strides)
        layout = g.layout
    return (g.__class__, g.shape, g.dtype, g.device, g.requires_grad, layout)


def signature(values) -> tuple:
    """The key part of a call's tensors (``values``) that require grad (see ``_grad_part``):
    () for a call with none (a plain ``f(x)`` pays one flag test per tensor)."""
    return tuple(_grad_part(v) for v in values
                 if isinstance(v, torch.Tensor) and v.requires_grad)


def note(node, value: torch.Tensor) -> None:
    """An argument's placeholder ``node``: its leafness and ``.grad`` as the call has them."""
    if not value.requires_grad:
        return
    if not value.is_leaf:
        node.attrs[KEY] = ("nonleaf",)
        return
    g = value._grad
    node.attrs[KEY] = ("leaf", None if g is None else _like(value, g))


def _like(value, g) -> bool:
    """Whether the gradient ``g`` has the metadata of its parameter ``value`` (the
    example the graph's read makes: its shape, dtype, strides); else it is refused."""
    same = g.__class__ is torch.Tensor and not g.requires_grad and g.layout == torch.strided \
        and g.shape == value.shape and g.dtype == value.dtype and g.device == value.device \
        and g.stride() == value.stride() and g.storage_offset() == value.storage_offset()
    return same


def _placeholder(t):
    """The placeholder of the argument ``t`` stands for (also after ``p -= ...`` under
    ``no_grad``: still the caller's leaf), when it carries ``KEY``; else None."""
    node = getattr(t, "_fed_as", None) or getattr(t, "_node", None)
    if node is None or node.op != "placeholder" or KEY not in node.attrs:
        return None
    return node


def known(t) -> tuple:
    """The state noted of the argument ``t`` stands for (see ``note``), or () for a
    traced value that is no such argument; marks the trace as depending on it."""
    node = _placeholder(t)
    if node is None:
        return ()
    from .symbolic import current_graph
    graph = current_graph()
    if graph is not None:
        graph.root.argument_grads = True
    return node.attrs[KEY]


def key_node(t):
    """The node keying ``t``'s gradient state in a trace (``autograd_effects``): its
    argument's placeholder, or None."""
    return _placeholder(t)


def value(t):
    """The traced value to read ``.grad`` of, or set it on, for ``t``: its argument's
    placeholder (the caller's tensor, also after an in-place write), else ``t``."""
    node = _placeholder(t)
    if node is None or node is t._node:
        return t
    from .symbolic import wrap_node
    return wrap_node(node)


def depends(graph) -> bool:
    """Whether the trace ``graph`` asked an argument's gradient state (its calls' keys
    must hold ``signature``)."""
    return bool(getattr(graph, "argument_grads", False))


@effect
def set_grad(t: torch.Tensor, value) -> None:
    """``t.grad = value`` when the graph runs (``t``: the caller's argument)."""
    t.grad = value
