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
(float rounding, within 1e-5 relative). ``dz_t`` is eager's own ``tanh_backward`` etc.
on the saved output. This backward (``ThroughTime``) is shared with ``loop_product``'s
node (the same loop with the product done by torch).

Double backward (``create_graph=True``: the backward runs with grad mode on): the loop is
replayed with torch ops under autograd and differentiated (``_replay``: correct, slower,
one ``mm`` per step more). It needs no row of the loop: each replayed step is
``act(z_t + delta_t)`` with ``act(z_t)`` the saved state and ``delta_t`` (value 0) the
step's product and leaves as functions of the inputs; inputs other than ``var`` and
``B`` are reached through zero anchors (one element of storage each) made in the forward
that carry their autograd history, so the node still saves no more than eager.
Any other kernel, layout or input returns None (the caller runs the steps as before).
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import torch

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
    if plan is None or any(loop.roles[j][1] == form[2] for j in form[1]):
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
    if not spec.gemm or not _plain(kernel, roles):
        return None
    a, b, c = spec.gemm[:3]
    if roles[a] != ("var",) or roles[b][0] != "capture" or \
            sum(r == ("var",) for r in roles) != 1:
        return None
    found = read_sum(kernel, roles, a, [c] if c >= 0 else [], exclude=b)
    return None if found is None else (found[0], found[1], roles[b][1])


def _plain(kernel, roles) -> bool:
    """One output of the kernel's float type, every input of that type, a role each."""
    spec = kernel.spec
    return spec.dtype in _FLOATS and len(spec.outputs) == 1 and \
        spec.outputs[0][1] == spec.dtype and not kernel._row_outputs[0] and \
        len(roles) == len(spec.inputs) and all(dt == spec.dtype for dt, _ in spec.inputs)


def product_form(kernel, roles) -> Optional[Tuple[str, List[int]]]:
    """(activation, leaves) when an elementwise ``kernel`` computes ``act(p + leaves)`` with
    ``p`` its one input of role ``("product",)`` (a product computed outside it, of the
    output's shape) and every leaf a capture or a row; else None (``ProductLoop``)."""
    spec = kernel.spec
    if spec.gemm or not _plain(kernel, roles) or roles.count(("product",)) != 1:
        return None
    p = roles.index(("product",))
    if tuple(kernel._in_shapes[p]) != tuple(kernel._out_shape):
        return None
    return read_sum(kernel, roles, p, [])


def read_sum(kernel, roles, a, extra, exclude=-1):
    """(activation, leaves) when the kernel's tree is ``act(x_a + leaves)``: plain ``+``
    steps, each input once (``extra``: inputs the kernel adds outside its steps), input
    ``a`` among them and every other leaf a capture or a row (not ``exclude``)."""
    spec = kernel.spec
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
    leaves += extra
    if leaves.count(a) != 1 or len(set(leaves)) != len(leaves) or exclude in leaves:
        return None
    out = []
    for k in leaves:
        if k == a:
            continue
        if roles[k][0] not in ("capture", "row") or spec.inputs[k][1] in ("gemm", "gemm_b"):
            return None
        out.append(k)
    return act, out


_SLOPES = {    # (dh, y, out): dz = dh * act'(z) from y = act(z), as eager's backward kernels
    "tanh": lambda g, y, o: torch.ops.aten.tanh_backward.grad_input(g, y, grad_input=o),
    "sigmoid": lambda g, y, o: torch.ops.aten.sigmoid_backward.grad_input(g, y, grad_input=o),
    "relu": lambda g, y, o: torch.ops.aten.threshold_backward.grad_input(g, y, 0,
                                                                         grad_input=o),
    "none": None}


class ThroughTime(torch.autograd.Function):
    """The backward shared by the loop nodes (``_LoopNode`` here, ``loop_product``'s): a
    subclass's forward computes the steps and calls ``keep``."""

    @staticmethod
    def keep(ctx, act, leaves, w_index, steps, var, stack, out, caps):
        """Save what the backward needs: the initial state, the states, the output (for
        ``act'``), the weight (eager's saved tensors), and for each other input that needs
        a gradient a zero anchor (``_Anchor``: one element of storage) carrying its
        autograd history, for a double backward."""
        ctx.act, ctx.leaves, ctx.w_index, ctx.steps = act, leaves, w_index, steps
        ctx.cap_meta = [(t.shape, t.dtype) for t in caps]
        ctx.anchors = {}
        if any(t.requires_grad for t in caps):
            with torch.enable_grad():
                ctx.anchors = {cap: _Anchor.apply(caps[cap]) for _, cap, _ in leaves
                               if caps[cap].requires_grad}
        ctx.save_for_backward(var, stack, out if act != "none" else None, caps[w_index])

    @staticmethod
    def backward(ctx, grad):
        var, stack, out, weight = ctx.saved_tensors
        if torch.is_grad_enabled():         # create_graph: a backward autograd records
            return (None, None, None) + _replay(ctx, grad, var, stack, out, weight)
        act, leaves, w_index, steps = ctx.act, ctx.leaves, ctx.w_index, ctx.steps
        needs = ctx.needs_input_grad[3:]
        n = len(steps)
        slope = _SLOPES[act]        # eager's own formulas, from the output
        dz = torch.empty((n,) + tuple(grad.shape), dtype=grad.dtype)
        wt = weight.t()
        dh = grad
        dzs = dz.unbind(0)          # (the views made at once: ~1 us a step less)
        ys = stack.unbind(0) + (out,) if slope is not None else ()
        for t in range(n - 1, -1, -1):
            if slope is None:
                dzs[t].copy_(dh)
            else:
                slope(dh, ys[t], dzs[t])
            if t > 0 or needs[0]:
                dh = torch.mm(dzs[t], wt)
        grads: List[Optional[torch.Tensor]] = [None] * (1 + len(ctx.cap_meta))
        if needs[0]:
            grads[0] = dh
        if needs[1 + w_index]:          # sum over t of h_{t-1}^T dz_t, two products
            k, m = var.shape[-1], dz.shape[-1]
            dw = torch.mm(var.reshape(-1, k).t(), dz[0].reshape(-1, m))
            if n > 1:
                dw = torch.addmm(dw, stack.reshape(-1, k).t(), dz[1:].reshape(-1, m))
            grads[1 + w_index] = dw
        for kind, cap, want in leaves:
            if not needs[1 + cap]:
                continue
            if kind == "capture":
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


class _LoopNode(ThroughTime):
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
        roles, shapes = loop.roles, loop.kernel._in_shapes
        ThroughTime.keep(ctx, act, [(roles[j][0], roles[j][1], tuple(shapes[j])) for j in leaves],
                         weight, steps, var, stack, out, caps)
        return out


# ----------------------------------------------------------------------------- double backward
class _Anchor(torch.autograd.Function):
    """Zeros of ``x``'s shape (one element of storage, expanded) whose gradient flows to
    ``x``: ``x``'s place in the autograd graph without keeping ``x``'s values."""

    @staticmethod
    def forward(ctx, x):
        return x.new_zeros(()).expand(x.shape)

    @staticmethod
    def backward(ctx, g):
        return g


class _ActAt(torch.autograd.Function):
    """``act(z + delta)`` given ``y = act(z)`` and a ``delta`` whose value is 0: the value
    ``y``, the derivative eager's (from the output, as torch's tanh/sigmoid/relu
    backward), itself differentiable (the saved output carries this node), so derivatives
    of every order are eager's."""

    @staticmethod
    def forward(ctx, y, delta, act):
        out = y.clone()
        ctx.act = act
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        out, = ctx.saved_tensors
        if ctx.act == "tanh":
            return None, g * (1 - out * out), None
        if ctx.act == "sigmoid":
            return None, g * ((1 - out) * out), None
        return None, g * (out > 0).to(g.dtype), None


def _replay(ctx, grad, var, stack, out, weight) -> tuple:
    """The gradients of a backward that autograd records (``create_graph=True``): the loop
    replayed from the saved inputs with torch ops under autograd and differentiated. Each
    step is ``act(z_t + delta_t)`` with ``z_t``'s result the saved state and ``delta_t``
    (value 0) the step's product and leaves as functions of the inputs (``var``, the
    weight, the anchors of the others), so no row of the loop needs to be kept."""
    act, leaves, steps = ctx.act, ctx.leaves, ctx.steps
    n = len(steps)
    h = var
    for t, i in enumerate(steps):
        p = torch.mm(h, weight)
        delta = p - p.detach()
        for kind, cap, _ in leaves:
            anchor = ctx.anchors.get(cap)
            if anchor is not None:
                delta = delta + (anchor if kind == "capture" else anchor[i])
        y = stack[t] if t < n - 1 else out.detach() if out is not None else None
        if act == "none":           # (the last state's value is never read)
            h = delta if y is None else y + delta
        else:
            h = _ActAt.apply(y, delta, act)
    needs = ctx.needs_input_grad[3:]
    wanted = {0: var} if needs[0] and var.requires_grad else {}
    if needs[1 + ctx.w_index] and weight.requires_grad:
        wanted[1 + ctx.w_index] = weight
    for cap, anchor in ctx.anchors.items():
        if needs[1 + cap]:
            wanted.setdefault(1 + cap, anchor)
    got = torch.autograd.grad(h, list(wanted.values()), grad, create_graph=True,
                              allow_unused=True) if wanted else ()
    grads: List[Optional[torch.Tensor]] = [None] * (1 + len(ctx.cap_meta))
    for slot, g in zip(wanted, got):
        grads[slot] = g
    return tuple(grads)
