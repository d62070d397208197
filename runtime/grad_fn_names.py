"""The autograd node name a printed tensor shows, as eager's.

``print(y)`` of a tensor that requires grad shows its node: ``tensor([3., 5.],
grad_fn=<AddBackward0>)``. In a graph the value may come from a fused kernel or another
rewrite (``grad_fn=<_FusedNodeBackward>``), so the text would differ from eager's. While
tracing, ``names`` asks torch which node the value's own op makes (the op run once on meta
tensors, with grad where its inputs require it); when the graph runs, ``shown`` makes the
printed tensors show that name.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch

from .graph import Node, map_structure


def names(values) -> Optional[Tuple[Optional[str], ...]]:
    """For the values a print op takes, the grad_fn name eager's tensor would show (None
    where unknown or not a tensor that requires grad); None when there is none at all."""
    found = tuple(_eager_name(getattr(v, "_node", None)) if isinstance(v, torch.Tensor)
                  else None for v in values)
    return found if any(found) else None


def _eager_name(node: Optional[Node]) -> Optional[str]:
    if node is None or node.target is None or not node.attrs.get("requires_grad"):
        return None

    def meta(n: Node):
        example = n.attrs.get("_example")
        if not isinstance(example, torch.Tensor):
            raise LookupError(n.name)
        t = torch.empty_strided(example.shape, example.stride(), dtype=example.dtype,
                                device="meta")
        if n.attrs.get("requires_grad") and (t.is_floating_point() or t.is_complex()):
            t.requires_grad_()
        return t

    try:
        with torch._C.DisableTorchFunction(), torch.enable_grad():
            args = map_structure(node.args, lambda v: isinstance(v, Node), meta)
            kwargs = map_structure(node.kwargs, lambda v: isinstance(v, Node), meta)
            out = node.target(*args, **kwargs)
    except Exception:       # noqa: BLE001 - not known: the text is left as the run makes it
        return None
    grad_fn = getattr(out, "grad_fn", None) if isinstance(out, torch.Tensor) else None
    return type(grad_fn).__name__ if grad_fn is not None else None


class _Shown:
    """A tensor printed with eager's grad_fn name."""

    __slots__ = ("tensor", "name")

    def __init__(self, tensor: torch.Tensor, name: str):
        self.tensor, self.name = tensor, name

    def _fix(self, text: str) -> str:
        return text.replace(f"grad_fn=<{type(self.tensor.grad_fn).__name__}>",
                            f"grad_fn=<{self.name}>", 1)

    def __str__(self):
        return self._fix(str(self.tensor))

    def __repr__(self):
        return self._fix(repr(self.tensor))

    def __format__(self, spec):
        return self._fix(format(self.tensor, spec)) if spec else str(self)


def shown(values, grad_fns):
    """``values`` with the tensors whose node is named otherwise than eager's wrapped."""
    if grad_fns is None:
        return values
    out = list(values)
    for i, (v, name) in enumerate(zip(values, grad_fns)):
        if name and isinstance(v, torch.Tensor) and v.grad_fn is not None and \
                type(v.grad_fn).__name__ != name:
            out[i] = _Shown(v, name)
    return type(values)(out) if isinstance(values, tuple) else out
