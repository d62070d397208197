"""A counted loop whose body is one compiled kernel, driven without per-step Python checks.

``KernelLoop(kernel, roles, steps)(var, *captures)`` runs ``var = kernel(*inputs)`` for each
counter value ``i`` in ``steps`` (a ``range``), where each kernel input has a role:
``("var",)`` the loop variable, ``("capture", c)`` the loop's ``c``-th capture (the same
every step) or ``("row", c)`` its row ``captures[c][i]``. This is the body of an RNN step
(``h = tanh(XW[i] + h @ U + b)``) after ``passes.counted_loops`` and elementwise fusion.

The checks the launcher makes per call (shapes, layouts, devices, autograd) are made once,
before the loop; then each step is one call of the C function on precomputed addresses
(a row's address is its tensor's plus ``i`` rows), writing into one of two buffers in turn
(the step reads the other): no tensor is made per step. The result is the last buffer
written, which nothing else holds (as the launcher's fresh output). When a check fails
(autograd records, a layout or shape the kernel was not built for, no compiled kernel) the
steps run through the launcher, one call each, exactly as the generated Python loop would.
"""
from __future__ import annotations

import math
from typing import Sequence, Tuple

import torch


class KernelLoop:
    def __init__(self, kernel, roles: Sequence[Tuple], steps: range):
        self.kernel = kernel
        self.roles = [tuple(r) for r in roles]
        self.steps = steps

    def __call__(self, var, *caps):
        steps = self.steps
        if not steps:
            return var
        call = self.kernel.launcher
        fast = self._direct(var, caps, steps)
        if fast is None:            # (a first step by the launcher gives a var it accepts)
            var = call(*self._inputs(var, caps, steps[0]))
            steps = steps[1:]
            fast = self._direct(var, caps, steps) if steps else None
        if fast is None:
            for i in steps:
                var = call(*self._inputs(var, caps, i))
            return var
        c, ptrs, rows, slots, tail, shape, dtype = fast
        buffers = (torch.empty(shape, dtype=dtype), torch.empty(shape, dtype=dtype))
        addresses = (buffers[0].data_ptr(), buffers[1].data_ptr())
        turn = 0
        for i in steps:
            for k, base, stride in rows:
                ptrs[k] = base + i * stride
            c(*ptrs, addresses[turn], *tail)
            for k in slots:
                ptrs[k] = addresses[turn]
            turn ^= 1
        return buffers[turn ^ 1]

    def _inputs(self, var, caps, i):
        return [var if r[0] == "var" else caps[r[1]] if r[0] == "capture" else caps[r[1]][i]
                for r in self.roles]

    def _direct(self, var, caps, steps: range):
        """What the direct calls need, or None where the launcher must serve each step:
        (C function, pointer list, rows (slot, base address, bytes per row), the loop
        variable's slots, trailing size arguments, output shape, output dtype)."""
        kernel = self.kernel
        if not kernel._launchable() or kernel._row_outputs[0]:
            return None
        tensors = [var] + list(caps)
        if any(not isinstance(t, torch.Tensor) for t in tensors):
            return None
        if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
            return None
        shape, dtype = tuple(kernel._out_shape), kernel._out_dtypes[0]
        if tuple(var.shape) != shape or var.dtype != dtype or not var.is_cpu or \
                not var.is_contiguous():
            return None
        first = self._inputs(var, caps, steps[0])
        ptrs, rows, slots = [], [], []
        for k, (role, x, want) in enumerate(zip(self.roles, first, kernel._in_shapes)):
            if tuple(x.shape) != want or not x.is_cpu or not x.is_contiguous():
                return None
            if role[0] == "row":
                whole = caps[role[1]]
                if not whole.is_contiguous() or steps[0] < 0 or steps[-1] >= whole.shape[0]:
                    return None
                rows.append((k, whole.data_ptr(), whole.stride(0) * whole.element_size()))
            elif role[0] == "var":
                slots.append(k)
            ptrs.append(x.data_ptr())
        outer = math.prod(shape[:kernel._split])
        inner = math.prod(shape[kernel._split:])
        tail = (outer, inner, torch.get_num_threads(), kernel._parallel_min)
        return kernel._c, ptrs, rows, slots, tail, shape, dtype
