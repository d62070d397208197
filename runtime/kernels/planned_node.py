"""A fused kernel under autograd with its per-call decisions made once: the fast path of
``autograd_node.elementwise_call`` for a compiled kernel over static shapes.

The general node (``autograd_node._FusedNode``) reads shapes and dtypes on every call,
builds a ``Saved`` record, goes through the kernel's general call forward and through
``_ElementwiseBackward`` backward, and enters by ``Function.apply``'s Python wrapper:
about 100 us of Python per forward+backward, more than the C of a GPT-2-sized group.
When the kernel's shapes are static, everything those steps decide is known the first time
a ``(kernel, needs)`` pair is seen: the output shapes, the backward kernel's sizes, which
gradients are the incoming ones as they are, which are summed to a broadcast input's shape
(``sum_to_size``) and which need a dtype cast. ``Planned`` fixes them, so a forward is a
shape check and one C call, and a backward one C call and what the broadcast inputs need.

Same kernels, same saved tensors (the inputs the backward reads), same gradients as the
general node; a double backward (grad mode on in the backward) and a backward kernel that
failed to build take the general node's replay of the group's torch ops.
"""
from __future__ import annotations

import math
from typing import List, Optional, Sequence, Tuple

import torch

from .launch import DTYPES, FusedKernel

_unwrap_if_dead = torch._C._functorch.unwrap_if_dead


class Planned:
    """``kernel`` under autograd for the inputs needing a gradient that ``recipe`` (the
    general node's, its backward an ``_ElementwiseBackward``) was made for."""

    def __init__(self, kernel: FusedKernel, recipe, xs: Sequence[torch.Tensor]):
        plan = recipe.backward.plan
        self.kernel, self.recipe, self.plan = kernel, recipe, plan
        shape = tuple(kernel._out_shape)
        self.in_shapes = [torch.Size(s) for s in kernel._in_shapes]
        self.in_dtypes = [x.dtype for x in xs]
        self.out_shapes = [kernel._row_shape if row else shape for row in kernel._row_outputs]
        self.out_dtypes = list(kernel._out_dtypes)
        self.single = kernel._single
        self.sizes = (math.prod(shape[:kernel._split]), math.prod(shape[kernel._split:]))
        self.saved = plan.saved
        self.fixed = tuple(k for k, d in enumerate(plan.differentiable) if not d)
        self.needs = tuple(x.requires_grad for x in xs)
        # backward: the kernel's outputs, and per input (source, kernel output or incoming
        # gradient index, shape to sum to or None, dtype to cast to or None)
        back = plan.kernel
        self.grad_shapes = [] if back is None else \
            [kernel._row_shape if row else shape for row in back.output_rows]
        self.back_dtype = DTYPES[kernel.spec.dtype]
        self.back_min = recipe.backward.parallel_min
        self.grads = plan.grads
        self.sources: List[Optional[Tuple[bool, int, Optional[torch.Size],
                                          Optional[torch.dtype]]]] = []
        for i, source in enumerate(plan.sources):
            if source is None:
                self.sources.append(None)
                continue
            from_kernel = source[0] == "k"
            got = self.grad_shapes[source[1]] if from_kernel else \
                self.out_shapes[source[1]]
            got_dtype = self.back_dtype if from_kernel else self.out_dtypes[source[1]]
            self.sources.append((from_kernel, source[1],
                                 None if tuple(got) == tuple(self.in_shapes[i])
                                 else self.in_shapes[i],
                                 None if got_dtype == self.in_dtypes[i] else self.in_dtypes[i]))
        self.fn = None          # the backward kernel, bound at the first backward

    @staticmethod
    def fits(kernel: FusedKernel, recipe) -> bool:
        """Whether a plan can serve ``kernel`` (compiled, static shapes, a generated
        backward)."""
        from .autograd_node import _ElementwiseBackward
        return kernel._launchable() and isinstance(recipe.backward, _ElementwiseBackward)

    def __call__(self, xs: Sequence[torch.Tensor]):
        """The node's outputs, or None when an input's shape is not the planned one (the
        general node then serves the call, as it reports the mismatch)."""
        for x, want in zip(xs, self.in_shapes):
            if x.shape != want:
                return None
        return _apply(self, *[_unwrap_if_dead(x) for x in xs])

    def forward(self, xs):
        outs = [torch.empty(s, dtype=dt) for s, dt in zip(self.out_shapes, self.out_dtypes)]
        self.kernel._c(*[x.data_ptr() for x in xs], *[o.data_ptr() for o in outs],
                       *self.sizes, torch.get_num_threads(), self.kernel._parallel_min)
        return outs

    def backward(self, saved, grads) -> Optional[list]:
        outs: List[torch.Tensor] = []
        if self.plan.kernel is not None:
            fn = self.fn
            if fn is None:
                from .autograd_node import _Built
                fn = self.fn = _Built.function(self.plan.kernel)
                if fn is None:
                    return None
            keep = list(saved)
            for o in self.grads:
                g = grads[o]
                keep.append(g if g.is_contiguous() else g.contiguous())
            outs = [torch.empty(s, dtype=self.back_dtype) for s in self.grad_shapes]
            fn(*[t.data_ptr() for t in keep], *[o.data_ptr() for o in outs], *self.sizes,
               torch.get_num_threads(), self.back_min)
        result = []
        for source in self.sources:
            if source is None:
                result.append(None)
                continue
            from_kernel, k, to_shape, to_dtype = source
            g = outs[k] if from_kernel else grads[k]
            if to_shape is not None:
                g = to_input_shape(g, to_shape)
            if to_dtype is not None:
                g = g.to(to_dtype)
            result.append(g)
        return result

    def replay(self, saved, grads):
        """The general node's torch-op replay (double backward, no backward kernel)."""
        from .autograd_node import Saved, _replay
        inputs: List[Optional[torch.Tensor]] = [None] * len(self.in_shapes)
        for i, x in zip(self.saved, saved):
            inputs[i] = x
        return _replay(self.recipe, Saved(inputs, list(self.in_shapes), list(self.in_dtypes),
                                          list(grads), self.needs))


def to_input_shape(g: torch.Tensor, shape) -> torch.Tensor:
    """A gradient over the kernel's space (or per row) as the gradient of an input of
    ``shape``: summed over the dims the input was broadcast along (``sum_to_size``), or
    reshaped when it has the input's elements already, only fewer or more size-1 dims (a
    ``[1, 1]`` input of a whole-tensor ``mean``, whose row gradient is 0-d)."""
    if g.numel() == math.prod(shape):
        return g.reshape(shape)
    return g.sum_to_size(shape)


class _FusedNode(torch.autograd.Function):
    """The planned node; named as the general one, so ``grad_fn`` reads
    ``_FusedNodeBackward`` either way (``grad_fn._forward_cls`` tells them apart)."""

    @staticmethod
    def forward(ctx, planned: Planned, *xs):
        outs = planned.forward(xs)
        ctx.planned = planned
        ctx.save_for_backward(*[xs[i] for i in planned.saved])
        if planned.fixed:
            ctx.mark_non_differentiable(*[outs[k] for k in planned.fixed])
        return outs[0] if planned.single else tuple(outs)

    @staticmethod
    def backward(ctx, *grads):
        planned: Planned = ctx.planned
        saved = ctx.saved_tensors
        result = None if torch.is_grad_enabled() else planned.backward(saved, grads)
        if result is None:
            result = planned.replay(saved, grads)
        return (None, *result)


# Function.apply without its Python wrapper, whose one check for calls outside torch.func
# transforms (dead wrappers) is kept in ``Planned.__call__``; the caller has made sure no
# transform is active
_apply = torch._C._FunctionBase.__dict__["apply"].__get__(None, _FusedNode)
