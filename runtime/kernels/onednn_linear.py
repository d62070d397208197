"""Linear layers under autograd through oneDNN's matmul, where MKL runs without AVX-512.

``OneDNNLinear(torch_fn, kn)`` is the target of an ``addmm(bias, x, w)`` node (``kn``:
``w`` is ``[in, out]``, as transformers' ``Conv1D`` holds it) or a ``linear(x, w, bias)``
node (``w`` is ``[out, in]``) whose result requires grad (``passes/onednn_linear.py``).
Where autograd records and the call is a plain float32 CPU product (``x`` contiguous,
``w`` 2-D and contiguous or its transpose contiguous, ``bias`` None or ``[out]``), it runs
as one ``_Linear`` node: the forward is one ``mkldnn._linear_pointwise`` call (oneDNN's
brgemm inner product), the backward two more (``dx = g @ w``, ``dw = g^T @ x`` laid out as
the weight is) and ``g.sum(0)`` for the bias, what ``AddmmBackward0`` computes with MKL's
``mm``. It saves ``x`` and ``w``, as eager does.

Why: torch's float32 ``mm``/``addmm`` call MKL, and MKL takes its AVX2 code on CPUs that
are not Intel's, AVX-512 or not; oneDNN picks its kernels by ISA (``avx512_core`` on an
AMD Zen 4/5). On the AMD EPYC (Zen 5) of this project's benchmark machine, 1 thread: MKL
reaches ~90 GFLOP/s at 1024^3 against oneDNN's ~200; a 128x128x512 product forward +
backward 700 -> 410 us, 128x64x256 230 -> 185 us. Values: oneDNN sums each dot product in
its own blocking, so results differ from MKL's by rounding (0 at inner sizes <= 128 in
our measurements, ~1e-7 relative above): not eager's bits, within the 1e-5 check's reach
(GPT-2's 20 training steps stay within ~1e-6 of eager).

``available()`` decides once per process: the option ``options.onednn_linear`` ("off", the
default: a CNN whose 20 training steps must equal eager's per tensor within 1e-5 drifts from
these rounding differences -- mobilenet_v3_small's classifier, 2.4 relative by step 7;
"auto": torch's CPU capability is AVX512 and the CPU is not Intel's; "on"). Anything else
(no autograd, other dtypes or devices, layouts, broadcast biases, tensor subclasses,
functorch transforms, forward-mode AD, CPU autocast, ``torch.backends.mkldnn`` switched
off) calls ``torch_fn`` unchanged. A
recorded backward (``create_graph=True``) computes the gradients with torch's ops, recorded.
"""
from __future__ import annotations

import functools
from typing import Callable, Optional

import torch

from ..options import options
from . import compiler

_grad_enabled = torch.is_grad_enabled
_transforms_active = torch._C._are_functorch_transforms_active
_has_torch_function = torch.overrides.has_torch_function
_autocast = torch.is_autocast_enabled
_mkldnn_enabled = torch._C._get_mkldnn_enabled
_f32 = torch.float32


def _pointwise():
    """``torch.ops.mkldnn._linear_pointwise.default``, or None when this torch lacks it."""
    try:
        return torch.ops.mkldnn._linear_pointwise.default
    except (AttributeError, RuntimeError):
        return None


_lp = _pointwise()


def _cpu_vendor() -> str:
    return compiler.cpu_fields().get("vendor_id", "")


@functools.lru_cache(maxsize=None)
def _auto() -> bool:
    """MKL would run its AVX2 code where oneDNN runs AVX-512: an AVX-512 CPU not Intel's."""
    return torch.backends.cpu.get_cpu_capability() == "AVX512" and \
        _cpu_vendor() not in ("", "GenuineIntel")


def available() -> bool:
    """Whether linear layers under autograd take oneDNN here (``options.onednn_linear``)."""
    mode = options.onednn_linear
    if mode == "off" or _lp is None or not torch.backends.mkldnn.is_available():
        return False
    return mode == "on" or _auto()


def _forward_ad_level() -> int:
    from torch.autograd import forward_ad
    return forward_ad._current_level


def _product(src: torch.Tensor, weight: torch.Tensor,
             bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``src @ weight.T (+ bias)`` by oneDNN (``weight``: ``[out, in]``, any 2-D layout)."""
    return _lp(src, weight, bias, "none", [], "")


class _Linear(torch.autograd.Function):
    """``x @ W^T + b`` with ``W`` given as ``w`` (``[out, in]``) or, ``kn``, as ``w^T``."""

    @staticmethod
    def forward(ctx, x, w, bias, kn):
        ctx.kn = kn
        ctx.save_for_backward(x, w)
        return _product(x, w.t() if kn else w, bias)

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        kn = ctx.kn
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        n_out = g.shape[-1]
        g2 = g.reshape(-1, n_out)
        x2 = x.reshape(-1, x.shape[-1])
        if torch.is_grad_enabled() or g2.dtype != _f32:   # create_graph=True: recorded
            w_nk = w.t() if kn else w
            dx = g.matmul(w_nk) if need_x else None
            dw = (x2.t().mm(g2) if kn else g2.t().mm(x2)) if need_w else None
            return dx, dw, g2.sum(0) if need_b else None, None
        dx = dw = None
        if need_x:           # [M, in] = g @ W: oneDNN's weight [in, out] is W^T
            dx = _product(g2, w if kn else w.t()).reshape(x.shape)
        if need_w:
            # kn: w^T's gradient [in, out] = x^T g; else [out, in] = g^T x
            dw = _product(x2.t(), g2.t()) if kn else _product(g2.t(), x2.t())
        return dx, dw, g2.sum(0) if need_b else None, None


_apply = _Linear.apply


class OneDNNLinear:
    """The target of an ``addmm`` (``kn=True``) or ``linear`` node; called as that op."""

    def __init__(self, torch_fn: Callable, kn: bool):
        self.torch_fn = torch_fn
        self.kn = kn
        self.__name__ = getattr(torch_fn, "__name__", "linear")

    def __call__(self, *args, **kwargs):
        if kwargs or not _grad_enabled():
            return self.torch_fn(*args, **kwargs)
        if self.kn:
            if len(args) != 3:
                return self.torch_fn(*args)
            bias, x, w = args
        else:
            if not 2 <= len(args) <= 3:
                return self.torch_fn(*args)
            x, w = args[0], args[1]
            bias = args[2] if len(args) == 3 else None
        if self._plain(x, w, bias):
            return _apply(x, w, bias, self.kn)
        return self.torch_fn(*args)

    def _plain(self, x, w, bias) -> bool:
        """A float32 CPU product that autograd records and oneDNN's call takes as is."""
        if not isinstance(x, torch.Tensor) or not isinstance(w, torch.Tensor) or \
                (bias is not None and not isinstance(bias, torch.Tensor)):
            return False
        if not (x.requires_grad or w.requires_grad or
                (bias is not None and bias.requires_grad)):
            return False
        if x.dtype != _f32 or w.dtype != _f32 or not x.is_cpu or not w.is_cpu or \
                w.dim() != 2 or x.dim() < 2 or (self.kn and x.dim() != 2) or \
                x.shape[-1] != w.shape[0 if self.kn else 1] or not x.is_contiguous() or \
                x.numel() == 0 or w.numel() == 0 or \
                not (w.is_contiguous() or w.t().is_contiguous()):
            return False
        if bias is not None and (bias.dtype != _f32 or not bias.is_cpu or bias.dim() != 1 or
                                 bias.shape[0] != w.shape[1 if self.kn else 0]):
            return False
        tensors = (x, w) if bias is None else (x, w, bias)
        return _mkldnn_enabled() and not (_has_torch_function(tensors) or
                                          _transforms_active() or _forward_ad_level() >= 0 or
                                          _autocast("cpu"))

    def __repr__(self) -> str:
        return f"OneDNNLinear({self.torch_fn!r})"
