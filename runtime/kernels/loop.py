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
The direct calls themselves run in a C loop (``loop_driver``: no ctypes call and no Python
per step) when its library is built, else in a Python loop of ctypes calls.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple

import torch

from . import loop_backward, loop_driver, while_step


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
        if fast is None and torch.is_grad_enabled():    # autograd records: one node
            result = loop_backward.call(self, var, caps)
            if result is not None:
                return result
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
        if loop_driver.available(len(ptrs) + 1):      # the steps in C
            return buffers[loop_driver.counted(loop_driver.address(c), ptrs + [0], rows,
                                               slots, steps, addresses, tail)]
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
        return _inputs(self.roles, var, caps, i)

    def _direct(self, var, caps, steps: range):
        """What the direct calls need, or None where the launcher must serve each step:
        (C function, pointer list, rows (slot, base address, bytes per row), the loop
        variable's slots, trailing size arguments, output shape, output dtype)."""
        kernel = self.kernel
        if not _accepts(kernel, var, caps):
            return None
        plan = _pointers(kernel, self.roles, var, caps, steps)
        if plan is None:
            return None
        ptrs, rows, slots, tail = plan
        return kernel._c, ptrs, rows, slots, tail, tuple(kernel._out_shape), \
            kernel._out_dtypes[0]


class KernelWhile:
    """``while test(*inputs): var = body(*inputs)`` where ``test`` is a kernel with a
    one-element bool result (a loop test, ``FusedKernel.predicate``) and ``body`` one
    kernel computing the loop variable; inputs are the loop variable and captures (roles
    as in ``KernelLoop``, no rows). The test and the body run as direct C calls after one
    round of checks, the body writing into two buffers in turn.

    ``counter``: ``(k, start, step, limit)`` when the loop has a second loop variable at
    position ``k`` that counts the steps (``start + step`` per step; ``limit``: the most
    steps its own test ``i < N`` allows, None without one). The call then takes both
    loop variables' start values before the captures and returns both, the counter as a
    0-d int64 tensor.

    When the test is a whole-tensor amax/amin and the body a flat kernel of the same
    space (Newton's), the steps run as ``while_step``'s fused step instead: the body and
    the test of the value it writes in one pass, split over threads; the same results."""

    def __init__(self, test, test_roles: Sequence[Tuple], body, body_roles: Sequence[Tuple],
                 counter: Optional[Tuple] = None):
        self.test, self.body = test, body
        self.test_roles = [tuple(r) for r in test_roles]
        self.body_roles = [tuple(r) for r in body_roles]
        self.counter = counter
        self._step = False              # not planned yet

    def __call__(self, *values):
        if self.counter is None:
            return self._run(values[0], values[1:], None)[0]
        k, start, step, limit = self.counter
        var, caps = values[1 - k], values[2:]
        var, ran = self._run(var, caps, limit)
        count = torch.tensor(start + ran * step, dtype=torch.int64)
        return (count, var) if k == 0 else (var, count)

    def _run(self, var, caps, limit: Optional[int]):
        """The final loop variable and the number of steps run."""
        test, body = self.test, self.body
        fast = None
        if _accepts(body, var, caps) and test.predicate is not None:
            tplan = _pointers(test, self.test_roles, var, caps, None)
            bplan = _pointers(body, self.body_roles, var, caps, None)
            fast = None if tplan is None or bplan is None else (tplan, bplan)
        ran = 0
        if fast is None:
            predicate = test.predicate or (lambda *xs: bool(test.launcher(*xs)))
            launch = body.launcher
            while (limit is None or ran < limit) and \
                    predicate(*_inputs(self.test_roles, var, caps, None)):
                var = launch(*_inputs(self.body_roles, var, caps, None))
                ran += 1
            return var, ran
        fused = self._fused_step()     # body and next test in one pass, when built
        done = None if fused is None else fused.run(var, caps, limit)
        if done is not None:
            return done
        (tptrs, _, tslots, ttail), (bptrs, _, bslots, btail) = fast
        tc, bc = test._test_c, body._c
        shape, dtype = tuple(body._out_shape), body._out_dtypes[0]
        buffers = (torch.empty(shape, dtype=dtype), torch.empty(shape, dtype=dtype))
        addresses = (buffers[0].data_ptr(), buffers[1].data_ptr())
        if loop_driver.available(max(len(tptrs), len(bptrs) + 1)):     # the steps in C
            last, ran = loop_driver.while_(loop_driver.address(tc), tptrs, tslots, ttail,
                                           loop_driver.address(bc), bptrs + [0], bslots,
                                           btail, addresses, limit)
            return (var if last is None else buffers[last]), ran
        turn = 0
        while (limit is None or ran < limit) and tc(*tptrs, *ttail):
            bc(*bptrs, addresses[turn], *btail)
            for k in tslots:
                tptrs[k] = addresses[turn]
            for k in bslots:
                bptrs[k] = addresses[turn]
            var = buffers[turn]
            turn ^= 1
            ran += 1
        return var, ran

    def _fused_step(self):
        """``while_step``'s fused step for these kernels (planned once), or None."""
        if self._step is False:
            self._step = while_step.plan(self.test, self.test_roles, self.body,
                                         self.body_roles)
        return self._step


def _inputs(roles, var, caps, i):
    return [var if r[0] == "var" else caps[r[1]] if r[0] == "capture" else caps[r[1]][i]
            for r in roles]


def _accepts(kernel, var, caps, autograd: bool = False) -> bool:
    """Whether direct calls of ``kernel`` may compute the loop variable ``var``: compiled
    for static shapes, one output of ``var``'s shape and dtype, ``var`` contiguous on the
    CPU, autograd recording nothing (``autograd``: recording allowed, for the caller's
    own autograd node)."""
    if not kernel._launchable() or not kernel._single or kernel._row_outputs[0]:
        return False
    tensors = [var] + list(caps)
    if any(not isinstance(t, torch.Tensor) for t in tensors):
        return False
    if not autograd and torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return False
    return tuple(var.shape) == tuple(kernel._out_shape) and \
        var.dtype == kernel._out_dtypes[0] and var.is_cpu and var.is_contiguous()


def _pointers(kernel, roles, var, caps, steps: Optional[range]):
    """(pointers, rows, loop-variable slots, trailing size arguments) for direct calls of
    ``kernel`` on the inputs ``roles`` name, or None when one is not as it was built for."""
    first = _inputs(roles, var, caps, steps[0] if steps else None)
    ptrs, rows, slots = [], [], []
    for k, (role, x, want) in enumerate(zip(roles, first, kernel._in_shapes)):
        if not isinstance(x, torch.Tensor) or tuple(x.shape) != want or not x.is_cpu or \
                not x.is_contiguous():
            return None
        if role[0] == "row":
            whole = caps[role[1]]
            if not whole.is_contiguous() or steps[0] < 0 or steps[-1] >= whole.shape[0]:
                return None
            rows.append((k, whole.data_ptr(), whole.stride(0) * whole.element_size()))
        elif role[0] == "var":
            slots.append(k)
        ptrs.append(x.data_ptr())
    shape = kernel._out_shape
    outer = math.prod(shape[:kernel._split])
    inner = math.prod(shape[kernel._split:])
    return ptrs, rows, slots, (outer, inner, torch.get_num_threads(), kernel._parallel_min)
