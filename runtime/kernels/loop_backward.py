"""A counted kernel loop under autograd: one autograd node for the whole loop.

``KernelLoop`` (``loop.py``) runs ``var = kernel(*inputs)`` per step as direct C calls
when autograd records nothing. When it records, each step used to go through the
launcher's general path: the kernel of an RNN step (``h = act(h @ W + C[i] + b)``, a gemm
prologue) has no autograd node of its own, so each step replayed addmm, add and act as
torch ops, plus Python per step. ``call(loop, var, caps)`` instead records the loop as one
node (``_LoopNode``) when its kernel has the form

    y = act(A @ B + sum of leaves)     A: the loop variable, B: a capture (the weight),
                                        leaves: the product's ``C``, captures, rows of
                                        captures, literals; act: tanh, sigmoid, relu or none

read off the kernel's spec (a gemm prologue, then a tree of plain ``+`` steps, each input
once, then at most one activation). Forward: the same C kernel per step, each step's
result written into one stack ``S`` (steps 1..T-1) and the last into a fresh output; the
node saves ``var`` (the initial state), ``S``, the output and ``B``: the states eager's
addmm and act save anyway (no more bytes than eager: the rows ``C[i]`` are not kept).
Backward through time, first order: ``dz_t = dh_t * act'(y_t)`` (eager's formulas in terms
of the output: ``1 - y*y``, ``(1 - y) * y``, 0 where ``y <= 0``), ``dh_{t-1} = dz_t @ B^T`` per
step (the only sequential part), then ``dB = H_prev^T dZ`` as one product over the stacked
states and each leaf's gradient as ``dZ`` summed to its shape (rows: per step, scattered
into the rows the loop visited). The sums run in another order than eager's per-step ones
(float rounding, within 1e-5 relative). The node is once-differentiable: a double
backward through it raises (eager's would run); the loop's inputs are not kept to replay.
Any other kernel, layout or input returns None (the caller runs the steps as before).
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import torch
from torch.autograd.function import once_differentiable

_ADD = "({0} + {1})"
_ACTS = {"m_tanh({0})": "tanh", "m_sigmoid({0})": "sigmoid", "m_relu({0})": "relu"}
_FLOATS = ("float32", "float64")


def call(loop, var, caps) -> Optional[torch.Tensor]:
    """The loop's final variable, recorded as one autograd node; None where this node does
    not apply (the caller then runs the steps through the launcher)."""
    from .loop import _accepts, _pointers
    kernel, steps = loop.kernel, loop.steps
    form = _form(kernel, loop.roles)
    if form is None or len(steps) < 1 or not _accepts(kernel, var, caps, autograd=True) or \
            not any(t.requires_grad for t in [var, *caps]):
        return None
    if any(t._fw_grad(level=0) is not None for t in [var, *caps]
           if hasattr(t, "_fw_grad")):
        return None             # (forward-mode AD: this node has no jvp)
    plan = _pointers(kernel, loop.roles, var, caps, steps)
    if plan is None:
        return None
    return _LoopNode.apply(loop, form, plan, var, *caps)


def _form(kernel, roles) -> Optional[Tuple[str, List[Tuple[int, int]], int]]:
    """(activation, leaves as (kernel input, capture index or -1 for a literal), the
    capture holding ``B``) when the kernel is ``act(A @ B + leaves)`` with ``A`` the loop
    variable (read once) and ``B`` a capture; else None. Cached on the kernel."""
    key = ("_loop_backward_form", tuple(roles))
    cached = getattr(kernel, "_loop_backward_forms", None)
    if cached is None:
        cached = kernel._loop_backward_forms = {}
    if key not in cached:
        cached[key] = _read_form(kernel, roles)
    return cached[key]


def _read_form(kernel, roles):
    spec = kernel.spec
    if not spec.gemm or spec.dtype not in _FLOATS or len(spec.outputs) != 1 or \
            spec.outputs[0][1] != spec.dtype or kernel._row_outputs[0] or \
            len(roles) != len(spec.inputs) or \
            any(dt != spec.dtype for dt, _ in spec.inputs):
        return None
    a, b, c = spec.gemm[:3]
    if roles[a] != ("var",) or roles[b][0] != "capture" or \
            sum(r == ("var",) for r in roles) != 1:
        return None
    steps = spec.steps
    top = spec.outputs[0][0]
    act = "none"
    if 0 <= top < len(steps) and steps[top].template in _ACTS:
        only = steps[top].operands
        if len(only) != 1 or only[0].kind != "v" or steps[top].reduce or steps[top].row:
            return None
        act, visited, top = _ACTS[steps[top].template], [top], only[0].value
    else:
        visited = []
    leaves: List[int] = []

    def walk(j) -> bool:
        if not 0 <= j < len(steps) or j in visited:
            return False
        visited.append(j)
        step = steps[j]
        if step.template != _ADD or step.reduce or step.row or len(step.operands) != 2:
            return False
        for o in step.operands:
            if o.kind == "in":
                leaves.append(o.value)
            elif o.kind == "v":
                if not walk(o.value):
                    return False
            elif o.kind != "c":
                return False
        return True
    if not walk(top) or sorted(visited) != list(range(len(steps))):
        return None
    if c >= 0:
        leaves.append(c)
    if leaves.count(a) != 1 or len(set(leaves)) != len(leaves) or b in leaves:
        return None
    out = []
    for k in leaves:
        if k == a:
            continue
        if roles[k][0] not in ("capture", "row") or spec.inputs[k][1] in ("gemm", "gemm_b"):
            return None
        out.append(k)
    return act, out, roles[b][1]


class _LoopNode(torch.autograd.Function):
    @staticmethod
    def forward(ctx, loop, form, plan, var, *caps):
        c, steps = loop.kernel._c, loop.steps
        ptrs, rows, slots, tail = plan
        ptrs = list(ptrs)
        shape, dtype = tuple(loop.kernel._out_shape), loop.kernel._out_dtypes[0]
        n = len(steps)
        stack = torch.empty((n - 1,) + shape, dtype=dtype)
        out = torch.empty(shape, dtype=dtype)
        size = stack[0].numel() * stack.element_size() if n > 1 else 0
        base = stack.data_ptr() if n > 1 else 0
        for s, i in enumerate(steps):
            for k, start, stride in rows:
                ptrs[k] = start + i * stride
            address = base + s * size if s < n - 1 else out.data_ptr()
            c(*ptrs, address, *tail)
            for k in slots:
                ptrs[k] = address
        act, leaves, weight = form
        ctx.loop, ctx.form = loop, form
        ctx.cap_meta = [(t.shape, t.dtype) for t in caps]
        ctx.save_for_backward(var, stack, out if act != "none" else None, caps[weight])
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        var, stack, out, weight = ctx.saved_tensors
        loop, (act, leaves, w_index) = ctx.loop, ctx.form
        kernel, roles, steps = loop.kernel, loop.roles, loop.steps
        needs = ctx.needs_input_grad[3:]
        n = len(steps)
        ys = None if act == "none" else \
            torch.cat([stack, out.unsqueeze(0)]) if n > 1 else out.unsqueeze(0)
        if act == "tanh":
            slope = 1 - ys * ys
        elif act == "sigmoid":
            slope = (1 - ys) * ys
        elif act == "relu":
            slope = ys <= 0         # (where eager's threshold_backward gives 0)
        else:
            slope = None
        dz = torch.empty((n,) + tuple(grad.shape), dtype=grad.dtype)
        wt = weight.t()
        dh = grad
        for t in range(n - 1, -1, -1):
            if slope is None or act == "relu":
                dz[t] = dh
                if slope is not None:
                    dz[t].masked_fill_(slope[t], 0)
            else:
                torch.mul(dh, slope[t], out=dz[t])
            if t > 0 or needs[0]:
                dh = torch.mm(dz[t], wt)
        grads: List[Optional[torch.Tensor]] = [None] * (1 + len(ctx.cap_meta))
        if needs[0]:
            grads[0] = dh
        if needs[1 + w_index]:
            prev = torch.cat([var.unsqueeze(0), stack]) if n > 1 else var.unsqueeze(0)
            k = prev.shape[-1]
            grads[1 + w_index] = torch.mm(prev.reshape(-1, k).t(), dz.reshape(-1, dz.shape[-1]))
        for j in leaves:
            role = roles[j]
            cap = role[1]
            if not needs[1 + cap]:
                continue
            want = tuple(kernel._in_shapes[j])
            if role[0] == "capture":
                part = dz.sum(0).sum_to_size(want)
            else:
                pad = (1,) * (dz.dim() - 1 - len(want))
                part = dz.sum_to_size((n,) + pad + want).reshape((n,) + want)
                whole_shape, dtype = ctx.cap_meta[cap]
                if not (steps.start == 0 and steps.step == 1 and
                        len(steps) == whole_shape[0]):
                    full = torch.zeros(whole_shape, dtype=dtype)
                    full[steps.start:steps.stop:steps.step] = part
                    part = full
            grads[1 + cap] = part if grads[1 + cap] is None else grads[1 + cap] + part
        return (None, None, None) + tuple(grads)
