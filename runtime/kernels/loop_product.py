"""A counted loop whose step is a torch matrix product and one elementwise kernel reading it.

When an RNN step's product is too large to be a kernel's prologue (``passes/gemm_epilogue``:
``LOOP_MAX_WORK``; b64 h128 and up), its body stays two nodes:

    p = addmm(C[i], h, W)   (or ``mm(h, W)``)     h: the loop variable, W: a capture
    h = kernel(p, leaves...)                      an elementwise fused kernel

and each step used to run both through the executor, and under autograd through the
elementwise autograd node (330 us a step against eager's 180 at 64x128: 0.5x eager's
training step). ``ProductLoop(var, *caps)`` runs the steps itself: the product by torch into
one preallocated buffer (``out=``: the library GEMM, fastest at these sizes), then the
kernel's C function on it, no tensor made and no check per step. When autograd records and
the kernel is ``act(p + leaves)`` (``loop_backward.product_form``) the loop is one autograd
node (``_ProductNode``): the states go into one stack and the backward is
``loop_backward.ThroughTime``'s (``dW`` as one product over the stacked states, the rows'
gradients as ``dZ``); it saves what eager saves (the states, ``W``). Any other case runs
each step as the generated code would (the product, then the kernel's launcher).
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

import torch

from . import loop_backward
from .loop import _pointers


class ProductLoop:
    """``roles``: per kernel input ``("product",)``, ``("capture", c)`` or ``("row", c)``;
    ``product``: ``(C's role or None, W's capture index)`` for ``addmm(C, var, W)`` or
    ``mm(var, W)``."""

    def __init__(self, kernel, roles: Sequence[Tuple], steps: range,
                 product: Tuple[Optional[Tuple], int]):
        self.kernel = kernel
        self.roles = [tuple(r) for r in roles]
        self.steps = steps
        self.product = (None if product[0] is None else tuple(product[0]), product[1])

    def __call__(self, var, *caps):
        steps = self.steps
        if not steps:
            return var
        plan = self._plan(var, caps)
        if plan is not None:
            if torch.is_grad_enabled() and any(t.requires_grad for t in [var, *caps]):
                form = self._form()
                if form is not None and not _forward_ad(var, caps):
                    return _ProductNode.apply(self, form, plan, var, *caps)
            else:
                return self._run(plan, var, caps, None)
        for i in steps:
            var = self.kernel.launcher(*self._inputs(self._product(var, caps, i), caps, i))
        return var

    # -- pieces
    def _product(self, var, caps, i, out=None):
        c_role, w = self.product
        if c_role is None:
            return torch.mm(var, caps[w], out=out)
        c = caps[c_role[1]] if c_role[0] == "capture" else caps[c_role[1]][i]
        return torch.addmm(c, var, caps[w], out=out)

    def _inputs(self, p, caps, i):
        return [p if r[0] == "product" else caps[r[1]] if r[0] == "capture" else
                caps[r[1]][i] for r in self.roles]

    def _form(self):
        """(activation, leaves as (role kind, capture, shape), W's capture) for the
        autograd node, or None; cached."""
        if not hasattr(self, "_cached_form"):
            self._cached_form = None
            found = loop_backward.product_form(self.kernel, self.roles)
            c_role, w = self.product
            if found is not None:
                act, leaves = found
                shapes = self.kernel._in_shapes
                info = [(self.roles[j][0], self.roles[j][1], tuple(shapes[j])) for j in leaves]
                if c_role is not None:
                    info.append((c_role[0], c_role[1], None))
                if all(cap != w for _, cap, _ in info):
                    self._cached_form = (act, info, w)
        return self._cached_form

    def _plan(self, var, caps):
        """(C function, pointers, rows, product slots, trailing sizes, P buffer) for direct
        calls, or None when an input is not as the kernel and the product need."""
        kernel = self.kernel
        if not kernel._launchable() or not kernel._single or kernel._row_outputs[0]:
            return None
        shape, dtype = tuple(kernel._out_shape), kernel._out_dtypes[0]
        c_role, w = self.product
        weight = caps[w]
        tensors = [var, weight] + ([caps[c_role[1]]] if c_role is not None else [])
        if any(not isinstance(t, torch.Tensor) or t.dtype != dtype or not t.is_cpu
               for t in tensors):
            return None
        if tuple(var.shape) != shape or not var.is_contiguous() or weight.dim() != 2 or \
                tuple(weight.shape) != (shape[-1], shape[-1]) or len(shape) != 2:
            return None
        if c_role is not None and c_role[0] == "row":
            whole = caps[c_role[1]]
            if whole.dim() < 1 or self.steps[0] < 0 or self.steps[-1] >= whole.shape[0]:
                return None
        buffer = torch.empty(shape, dtype=dtype)
        roles = [("var",) if r[0] == "product" else r for r in self.roles]
        found = _pointers(kernel, roles, buffer, caps, self.steps)
        if found is None:
            return None
        ptrs, rows, _, tail = found
        return kernel._c, ptrs, rows, tail, buffer

    def _run(self, plan, var, caps, stack):
        """The steps by direct calls: the product into the plan's buffer, the kernel from it
        into ``stack[s]`` (all but the last step, when given) or the result; returns the
        last state (a fresh tensor)."""
        fn, ptrs, rows, tail, buffer = plan
        ptrs = list(ptrs)
        steps = self.steps
        n = len(steps)
        out = torch.empty_like(buffer)
        targets = (stack.unbind(0) if stack is not None else (out,) * (n - 1)) + (out,)
        c_role, w = self.product
        weight = caps[w]
        c = None if c_role is None else caps[c_role[1]]
        c_rows = c.unbind(0) if c is not None and c_role[0] == "row" else None
        h = var
        for s, i in enumerate(steps):
            for k, base, stride in rows:
                ptrs[k] = base + i * stride
            if c is None:
                torch.mm(h, weight, out=buffer)
            else:
                torch.addmm(c if c_rows is None else c_rows[i], h, weight, out=buffer)
            # (the kernel reads the buffer, not h: it may write over h)
            target = targets[s]
            fn(*ptrs, target.data_ptr(), *tail)
            h = target
        return out


def _forward_ad(var, caps) -> bool:
    return any(getattr(t, "_fw_grad", None) is not None and t._fw_grad(level=0) is not None
               for t in [var, *caps])


class _ProductNode(loop_backward.ThroughTime):
    @staticmethod
    def forward(ctx, loop, form, plan, var, *caps):
        n = len(loop.steps)
        buffer = plan[-1]
        stack = torch.empty((n - 1,) + tuple(buffer.shape), dtype=buffer.dtype)
        out = loop._run(plan, var, caps, stack)
        act, leaves, w = form
        leaves = [(kind, cap, tuple(caps[cap].shape[kind == "row":]) if shape is None
                   else shape) for kind, cap, shape in leaves]
        loop_backward.ThroughTime.keep(ctx, act, leaves, w, loop.steps, var, stack, out, caps)
        return out
