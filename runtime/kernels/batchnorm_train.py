"""A train-mode ``F.batch_norm`` (and the activation after it) under autograd as one node
run by ``batchnorm_bits``' C loops, torch's bits.

``BatchNormTrain(torch_fn, act)`` is the target of a ``batch_norm`` node
(``passes/batchnorm_train.py``), called as ``F.batch_norm``; with ``act`` ("hardswish" or
"relu") it also stands for the activation node the pass removed. Where autograd records,
training is on, and the call is a plain float32 CPU batch norm (NCHW contiguous 4-D input
with more than one value per channel, weight and bias given, contiguous float32 running
statistics, a float momentum) and ``batchnorm_bits.plan`` found loops with torch's bits
at this key, it runs as one ``_BatchNormAct`` node: the forward writes ``act(bn(x))`` and
the running statistics in one pass, saving ``x`` and the per-channel mean and invstd (eager
saves ``x`` for the batch norm and its output for the activation); the backward takes the
activation's derivative from the recomputed pre-activation and the batch norm's gradients
in one C loop. A backward whose output gradient is not contiguous, or whose pre-activation
meets hardswish's position-dependent points (exactly 3, NaN), runs torch's own backward ops
on the same saved values; a recorded backward (``create_graph=True``) replays eager's ops.

Anything else (no autograd, eval mode, other dtypes or layouts, missing affine parameters
or running statistics, tensor subclasses, functorch transforms, forward-mode AD, CPU
autocast; before the loops are built) calls ``torch_fn`` and the activation as eager does.

Only channels of at least ``MIN_VALUES`` values (N * H * W) take the node: below that the
Python node's fixed cost (~25 us forward and backward against eager's C++ nodes) is more
than the loops save. Measured fwd+bwd, 1 thread, CPU time, load ~10 on 2 cores (noisy):
(8,16,32,32)+hardswish 1.37-1.48x eager, (32,72,32,32)+relu 1.23-1.61x,
(32,16,64,64)+hardswish 1.11-1.30x; (8,72,16,16)+relu 0.82-0.92x, (32,96,8,8)+hardswish
0.65-0.69x. So mobilenet_v3_small at batch 8 x 64x64 takes it for its stem only.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch
import torch.nn.functional as F

from . import batchnorm_bits

_grad_enabled = torch.is_grad_enabled
_transforms_active = torch._C._are_functorch_transforms_active
_ACTS = {None: lambda t: t, "hardswish": F.hardswish, "relu": torch.relu}
MIN_VALUES = 8192          # values per channel (N * H * W) from which the node pays


def _forward_ad_level() -> int:
    from torch.autograd import forward_ad
    return forward_ad._current_level


def _torch_backward(grad, x, weight, bias, mean, invstd, eps, act, mask):
    """torch's own backward ops for ``act(batch_norm(x))``, from the saved values."""
    if act is None:
        dz = grad
    else:
        z = torch.native_batch_norm(x, weight, bias, None, None, True, 0.0, eps)[0]
        if act == "hardswish":
            dz = torch.ops.aten.hardswish_backward(grad, z)
        else:
            dz = torch.ops.aten.threshold_backward(grad, torch.relu(z), 0)
    return torch.ops.aten.native_batch_norm_backward(
        dz, x, weight, None, None, mean, invstd, True, eps, mask)


class _BatchNormAct(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, stats, momentum, eps, act, plan):
        running_mean, running_var = stats
        y, mean, invstd = plan.forward(x, weight, bias, running_mean, running_var,
                                       momentum, eps)
        ctx.save_for_backward(x, weight, bias, mean, invstd)
        ctx.params = (momentum, eps, act, plan)
        return y

    @staticmethod
    def backward(ctx, grad):
        x, weight, bias, mean, invstd = ctx.saved_tensors
        momentum, eps, act, plan = ctx.params
        need = list(ctx.needs_input_grad[:3])
        if torch.is_grad_enabled():            # create_graph=True: eager's ops, recorded
            inputs = [t for t, n in zip((x, weight, bias), need) if n]
            with torch.enable_grad():
                out = _ACTS[act](F.batch_norm(x, None, None, weight, bias, True, 0.0, eps))
            found = iter(torch.autograd.grad(out, inputs, grad, create_graph=True,
                                             allow_unused=True))
            grads = [next(found) if n else None for n in need]
            return (*grads, None, None, None, None, None)
        got = None
        if grad.is_contiguous() and grad.dtype == torch.float32 and \
                grad.shape == x.shape:
            got = plan.backward(x, grad, weight, bias, mean, invstd)
        if got is None:
            got = _torch_backward(grad, x, weight, bias, mean, invstd, eps, act, need)
        return (*(g if n else None for g, n in zip(got, need)), None, None, None, None, None)


def _plain(t) -> bool:
    return isinstance(t, torch.Tensor) and t.dtype == torch.float32 and t.is_cpu and \
        t.dim() == 1 and t.is_contiguous()


class BatchNormTrain:
    """The target of a ``batch_norm`` node (and the activation it absorbed): called as
    ``F.batch_norm``."""

    def __init__(self, torch_fn: Callable, act: Optional[str] = None):
        self.torch_fn, self.act = torch_fn, act
        self.__name__ = getattr(torch_fn, "__name__", "batch_norm")

    def __call__(self, input, running_mean, running_var, weight=None, bias=None,
                 training=False, momentum=0.1, eps=1e-5):
        found = self._plan(input, running_mean, running_var, weight, bias, training,
                           momentum, eps)
        if found is None:
            out = self.torch_fn(input, running_mean, running_var, weight, bias, training,
                                momentum, eps)
            return _ACTS[self.act](out)
        return _BatchNormAct.apply(input, weight, bias, (running_mean, running_var),
                                   float(momentum), float(eps), self.act, found)

    def _plan(self, x, running_mean, running_var, weight, bias, training, momentum, eps):
        if training is not True or not _grad_enabled() or type(momentum) is not float or \
                type(eps) not in (int, float) or not isinstance(x, torch.Tensor) or \
                x.dtype != torch.float32 or not x.is_cpu or x.dim() != 4 or \
                not x.is_contiguous() or \
                x.shape[0] * x.shape[2] * x.shape[3] < max(2, MIN_VALUES) or \
                x.shape[1] < 1:
            return None
        tensors = (x, weight, bias, running_mean, running_var)
        if not all(_plain(t) and t.shape[0] == x.shape[1] for t in tensors[1:]) or \
                not (x.requires_grad or weight.requires_grad or bias.requires_grad) or \
                running_mean.requires_grad or running_var.requires_grad or \
                torch.overrides.has_torch_function(tensors) or _transforms_active() or \
                _forward_ad_level() >= 0 or torch.is_autocast_enabled("cpu"):
            return None
        return batchnorm_bits.plan(x, self.act, momentum, float(eps))

    def __repr__(self) -> str:
        return f"BatchNormTrain({self.torch_fn!r}, act={self.act!r})"
