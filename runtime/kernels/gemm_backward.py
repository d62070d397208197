"""A fused kernel that begins with a small matrix product (``passes/gemm_epilogue.py``)
under autograd: one node, the product and its epilogue still fused in the forward.

The kernel's inputs are the epilogue group's (the product's slot holding ``A``), then
``B``, then ``C`` for an ``addmm``. The backward:

1. recomputes the product ``P`` with eager's own op (``mm``/``matmul``/``addmm``, recorded
   on detached copies of ``A``, ``B``, ``C``), so ``P`` is eager's value exactly;
2. runs the epilogue's generated backward kernel (``pointwise_backward.plan`` of the group
   with ``P`` as a plain input; ``autograd_node``'s elementwise backward) for the gradients
   of the epilogue's inputs and of ``P``;
3. passes ``dP`` back through the recorded product (``torch.autograd.grad``): eager's
   ``mm``/``addmm`` backward, the same BLAS calls, bias gradients reduced as eager's.

Saved: ``A``, ``B``, ``C`` (eager's product saves ``A`` and ``B``; ``C`` is a bias or an
input the program holds) and the epilogue inputs its backward reads; never ``P`` (one more
small product in the backward instead: the products fused here are those small enough for
a kernel prologue, ``M*N*K <= 2**17``, or ``2**19`` in a loop body). ``recipe`` is None
when the epilogue's backward cannot be written (the group keeps its torch ops).
"""
from __future__ import annotations

from typing import List, Optional

import torch

from .codegen import KernelSpec
from .pointwise_backward import plan as backward_plan


def recipe(kernel, needs):
    """The ``autograd_node.Recipe`` of gemm kernel ``kernel`` for inputs needing a
    gradient where ``needs``, or None."""
    from .autograd_node import Recipe, _Built, _ElementwiseBackward
    spec, fn = kernel.spec, kernel.torch_fn
    slot, n_args, c_index = spec.gemm[0], spec.gemm[1], spec.gemm[2]
    if getattr(fn, "product_fn", None) is None or fn.slot != slot or fn.n_args != n_args:
        return None
    product = (slot, n_args) + ((c_index,) if c_index >= 0 else ())
    epilogue = KernelSpec(
        dtype=spec.dtype, steps=spec.steps, outputs=spec.outputs,
        inputs=tuple((spec.dtype, "full") if i == slot else spec.inputs[i]
                     for i in range(n_args)))
    epilogue_needs = tuple(any(needs[j] for j in product) if i == slot else needs[i]
                           for i in range(n_args))
    plan = backward_plan(epilogue, epilogue_needs)
    if plan is None:
        return None
    if plan.kernel is not None:
        _Built.want(plan.kernel)
    saved = tuple(sorted(set(plan.saved) | set(product)))
    backward = _GemmBackward(fn, product, _ElementwiseBackward(kernel, plan), n_args)
    return Recipe(kernel.__call__, saved, plan.differentiable, backward, fn)


class _GemmBackward:
    def __init__(self, product_then, product, epilogue, n_args: int):
        self.product_fn = product_then.product_fn
        self.product, self.epilogue, self.n_args = product, epilogue, n_args

    def __call__(self, saved) -> Optional[List[Optional[torch.Tensor]]]:
        from .autograd_node import Saved
        slot = self.product[0]
        with torch.enable_grad():
            leaves = [saved.inputs[j].detach().requires_grad_(saved.needs[j])
                      for j in self.product]
            a, b = leaves[0], leaves[1]
            p = self.product_fn(leaves[2], a, b) if len(leaves) == 3 else self.product_fn(a, b)
        n = self.n_args
        inputs = list(saved.inputs[:n])
        inputs[slot] = p.detach()
        shapes, dtypes = list(saved.shapes[:n]), list(saved.dtypes[:n])
        shapes[slot], dtypes[slot] = p.shape, p.dtype
        needs = tuple(any(saved.needs[j] for j in self.product) if i == slot
                      else saved.needs[i] for i in range(n))
        grads = self.epilogue(Saved(inputs, shapes, dtypes, saved.grads, needs))
        if grads is None:
            return None                          # (its kernel did not build: replay)
        result: List[Optional[torch.Tensor]] = list(grads) + [None] * (len(saved.inputs) - n)
        result[slot] = None
        dp = grads[slot]
        wanted = [(j, leaf) for j, leaf in zip(self.product, leaves) if leaf.requires_grad]
        if dp is not None and wanted:
            got = torch.autograd.grad(p, [leaf for _, leaf in wanted], dp)
            for (j, _), g in zip(wanted, got):
                result[j] = g if result[j] is None else result[j] + g
        return result
