"""A depthwise ``conv2d`` under autograd run by ``depthwise_bits``' C loops, torch's bits.

``DepthwiseConvTrain(torch_fn)`` is the target of a ``conv2d`` node with ``groups > 1``
(``passes/depthwise_train.py``), called as ``torch.conv2d``. Where autograd records, the
weight needs a gradient and the call is a plain float32 CPU depthwise convolution
(contiguous 4-D input, weight ``[C, 1, KH, KW]`` contiguous, ``groups == C``, no bias, int
stride/padding/dilation), it runs as one ``_DepthwiseConv`` node saving input and weight
(what eager's ``ConvolutionBackward0`` saves). Its forward, input gradient and weight
gradient each run the C loop where ``depthwise_bits.plan`` found it gives torch's bits at
this shape and thread count, and torch's own op (``torch_fn``, ``convolution_backward``
for the gradients it still needs) otherwise: before the loops are built, without a C
compiler, for an output gradient that is not contiguous. A recorded backward
(``create_graph=True``) replays eager's ops under autograd. mobilenet_v3_small at batch 8
(64x64), per training step on 1 thread: ~27 ms of depthwise work in eager, ~5.5 ms here.

Anything else (no autograd, other dtypes, layouts, a bias, grouped but not depthwise,
tensor subclasses, functorch transforms, forward-mode AD: the node has no jvp or vmap
rule; CPU autocast, which would cast the call) calls ``torch_fn`` unchanged.
"""
from __future__ import annotations

from typing import Callable

import torch

from .conv_params import int_pair
from . import depthwise_bits

_grad_enabled = torch.is_grad_enabled
_transforms_active = torch._C._are_functorch_transforms_active


def _forward_ad_level() -> int:
    from torch.autograd import forward_ad
    return forward_ad._current_level


class _DepthwiseConv(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, stride, padding, dilation, torch_fn):
        ctx.save_for_backward(x, weight)
        ctx.params = (stride, padding, dilation)
        ctx.plan = plan = depthwise_bits.plan(x, weight, stride, padding, dilation)
        y = plan.forward(x, weight) if plan is not None else None
        return y if y is not None else \
            torch_fn(x, weight, None, stride, padding, dilation, x.shape[1])

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        stride, padding, dilation = ctx.params
        need_x, need_w = ctx.needs_input_grad[:2]
        groups = x.shape[1]
        if torch.is_grad_enabled():            # create_graph=True: eager's ops, recorded
            inputs = [t for t, n in ((x, need_x), (weight, need_w)) if n]
            with torch.enable_grad():
                out = torch.conv2d(x, weight, None, stride, padding, dilation, groups)
            found = iter(torch.autograd.grad(out, inputs, grad, create_graph=True,
                                             allow_unused=True))
            return (next(found) if need_x else None, next(found) if need_w else None,
                    None, None, None, None)
        plan, dx, dw = ctx.plan, None, None
        if plan is not None and grad.is_contiguous() and grad.dtype == torch.float32 and \
                tuple(grad.shape) == plan.y_shape:
            dx = plan.input_grad(grad, weight) if need_x else None
            dw = plan.weight_grad(x, grad) if need_w else None
        mask = [need_x and dx is None, need_w and dw is None, False]
        if mask[0] or mask[1]:
            dx_torch, dw_torch, _ = torch.ops.aten.convolution_backward(
                grad, x, weight, None, list(stride), list(padding), list(dilation), False,
                [0, 0], groups, mask)
            dx = dx_torch if mask[0] else dx
            dw = dw_torch if mask[1] else dw
        return dx if need_x else None, dw if need_w else None, None, None, None, None


class DepthwiseConvTrain:
    """The target of a grouped ``conv2d`` node: called as ``torch.conv2d``."""

    def __init__(self, torch_fn: Callable):
        self.torch_fn = torch_fn
        self.__name__ = getattr(torch_fn, "__name__", "conv2d")

    def __call__(self, input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
        fn = self.torch_fn
        if bias is not None or type(groups) is not int or groups < 2 or \
                not _grad_enabled() or not isinstance(weight, torch.Tensor) or \
                not weight.requires_grad or not isinstance(input, torch.Tensor):
            return fn(input, weight, bias, stride, padding, dilation, groups)
        pairs = int_pair(stride), int_pair(padding), int_pair(dilation)
        if None in pairs or input.dtype != torch.float32 or weight.dtype != torch.float32 or \
                not input.is_cpu or not weight.is_cpu or input.dim() != 4 or \
                weight.dim() != 4 or input.shape[1] != groups or \
                tuple(weight.shape[:2]) != (groups, 1) or not input.is_contiguous() or \
                not weight.is_contiguous() or torch.overrides.has_torch_function(
                    (input, weight)) or _transforms_active() or _forward_ad_level() >= 0 or \
                torch.is_autocast_enabled("cpu"):
            return fn(input, weight, bias, stride, padding, dilation, groups)
        return _DepthwiseConv.apply(input, weight, *pairs, fn)

    def __repr__(self) -> str:
        return f"DepthwiseConvTrain({self.torch_fn!r})"
