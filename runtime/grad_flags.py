"""Whether a traced value requires grad, as eager would answer ``t.requires_grad``.

A symbolic tensor is a stand-in made once per trace, so its own ``requires_grad`` flag
says nothing about the value it stands for. Each node records the answer instead, under
``node.attrs["requires_grad"]``, following autograd's rule at the point of the op: off
when grad mode is off (the trace applies ``no_grad``/``enable_grad`` switches for real,
so ``torch.is_grad_enabled()`` is the traced mode), off for non-float results, ``detach``
and the ``*_like``/``new_*`` factories, otherwise on when any tensor input requires grad.
A value that is one branch's or another's (a ``cond`` output whose branches disagree, a
loop variable the body changes) requires grad or not depending on the path taken at run
time: its flag is ``None``, and reading ``t.requires_grad`` then records a graph op that
reads the real flag on every run (a 0-d bool tensor standing for the Python bool).
"""
from __future__ import annotations

from typing import Iterable, Optional

import torch

KEY = "requires_grad"
_NO_GRAD_OPS = frozenset({
    "detach", "detach_", "zeros_like", "ones_like", "empty_like", "full_like", "rand_like",
    "randn_like", "randint_like", "new_zeros", "new_ones", "new_empty", "new_full",
    "new_tensor", "dim_size", "numel", "requires_grad_of"})


def grad_of(value) -> Optional[bool]:
    """True/False as eager would say for ``value``; None when only the run knows."""
    if not isinstance(value, torch.Tensor):
        return False
    node = getattr(value, "_node", None)
    if node is not None and KEY in node.attrs:
        return node.attrs[KEY]
    with torch._C.DisableTorchFunction():
        return bool(value.requires_grad)


def merge(flags: Iterable[Optional[bool]]) -> Optional[bool]:
    """The flag of a value that is one of several (paths of a ``cond``)."""
    flags = set(flags)
    return flags.pop() if len(flags) == 1 else None


def result_grad(name: str, tensors: list, kwargs: dict, dtype, inplace_target=None
                ) -> Optional[bool]:
    """The flag of an op's result, from its name, its tensor inputs and result dtype."""
    if name == "requires_grad_":
        return bool(kwargs.get("requires_grad", tensors[1] if len(tensors) > 1 else True)) \
            if not isinstance(kwargs.get("requires_grad", True), torch.Tensor) else None
    if name in ("detach", "detach_"):
        return False
    if not torch.is_grad_enabled():
        return grad_of(inplace_target) if inplace_target is not None else False
    if dtype is not None and not (dtype.is_floating_point or dtype.is_complex):
        return False
    if kwargs.get("requires_grad") is True:
        return True
    if name in _NO_GRAD_OPS:
        return False
    flags = [grad_of(t) for t in tensors if isinstance(t, torch.Tensor)]
    return True if True in flags else None if None in flags else False
