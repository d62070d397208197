"""Rotary position embedding, ``x * cos + rotate_half(x) * sin``, as one C loop.

``Rotary(torch_fn)`` is the target of a ``rotary`` node (``passes.rotary``): called on
``(x, cos, sin)`` it returns eager's values in eager's layout. The C function reads ``x``,
``cos`` and ``sin`` through their strides (the usual ``x`` is a transposed view of a
projection, which a fused elementwise kernel would have to copy or leave to torch) and
writes each element as ``rotated * sin + x * cos`` in that order of operations (float32,
no contraction into FMA: what the graph's ``addcmul`` computes). The result's strides are
the ones eager's ops give for these input strides (found once per stride pattern on meta
tensors). float64 runs the same loop in double.

Under autograd (grad mode on, ``x`` requiring grad) the call is one autograd node
(``_RotaryGrad``) saving ``cos`` and ``sin`` only (eager's two products save the same): its
backward is the rotation transposed, ``dx[j] = dy[j]*cos[j] + dy[j+h]*sin[j+h]`` (first
half) and ``dy[j]*cos[j] - dy[j-h]*sin[j-h]`` (second half), one C loop whose two
products and one sum round as eager's accumulated gradient does. ``cos``/``sin`` that
require grad, and a backward that is itself recorded (``create_graph=True``), run torch
ops. Without the C library (no compiler, or while its source compiles in the background on
a cold cache: ``built_once``, so a first call does not wait for the compiler) the call runs
eager's own ops (``eager_ops``: the C loop's values bit for bit, in its layout). Anything
else (another dtype or device, a last dimension that is not contiguous) runs the original
ops (``torch_fn``).
"""
from __future__ import annotations

import ctypes
from typing import Callable, Dict

import torch

from .built_once import built_once

SOURCE = r"""
#include <stdint.h>
#define STRIDES int64_t B, int64_t H, int64_t L, int64_t D, \
    int64_t xb, int64_t xh, int64_t xl, int64_t cb, int64_t ch, int64_t cl, \
    int64_t sb, int64_t sh, int64_t sl, int64_t ob, int64_t oh, int64_t ol
#define ROWS(BODY) \
  const int64_t h = D / 2; \
  for (int64_t b = 0; b < B; b++) \
    for (int64_t i = 0; i < H; i++) \
      for (int64_t l = 0; l < L; l++) { \
        const T *xr = x + b * xb + i * xh + l * xl; \
        const T *cr = c + b * cb + i * ch + l * cl; \
        const T *sr = s + b * sb + i * sh + l * sl; \
        T *orow = o + b * ob + i * oh + l * ol; \
        BODY \
      }
/* forward: o = rotate_half(x) * sin + x * cos */
#define FORWARD \
  for (int64_t j = 0; j < h; j++) { T m = (-xr[j + h]) * sr[j]; orow[j] = m + xr[j] * cr[j]; } \
  for (int64_t j = h; j < D; j++) { T m = xr[j - h] * sr[j]; orow[j] = m + xr[j] * cr[j]; }
/* backward (x holds dy): dx = dy * cos + rotate_half^T(dy * sin) */
#define BACKWARD \
  for (int64_t j = 0; j < h; j++) { T a = xr[j] * cr[j]; T m = xr[j + h] * sr[j + h]; \
                                    orow[j] = a + m; } \
  for (int64_t j = h; j < D; j++) { T a = xr[j] * cr[j]; T m = xr[j - h] * sr[j - h]; \
                                    orow[j] = a - m; }
#define T float
void tg_rotary_f32(const T *x, const T *c, const T *s, T *o, STRIDES) { ROWS(FORWARD) }
void tg_rotary_bwd_f32(const T *x, const T *c, const T *s, T *o, STRIDES) { ROWS(BACKWARD) }
#undef T
#define T double
void tg_rotary_f64(const T *x, const T *c, const T *s, T *o, STRIDES) { ROWS(FORWARD) }
void tg_rotary_bwd_f64(const T *x, const T *c, const T *s, T *o, STRIDES) { ROWS(BACKWARD) }
#undef T
/* the forward with its 16 sizes and strides in one array (a cached call's one argument) */
#define DIMS d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8], d[9], d[10], d[11], \
    d[12], d[13], d[14], d[15]
void tg_rotary_dims_f32(const float *x, const float *c, const float *s, float *o,
                        const int64_t *d) { tg_rotary_f32(x, c, s, o, DIMS); }
void tg_rotary_dims_f64(const double *x, const double *c, const double *s, double *o,
                        const int64_t *d) { tg_rotary_f64(x, c, s, o, DIMS); }
"""

_grad_enabled = torch.is_grad_enabled
_empty_strided = torch.empty_strided
_SUFFIX = {torch.float32: "f32", torch.float64: "f64"}


def _bind(lib) -> Dict[tuple, Callable]:
    fns = {}
    for dtype, suffix in _SUFFIX.items():
        for backward in (False, True):
            fn = getattr(lib, f"tg_rotary{'_bwd' if backward else ''}_{suffix}")
            fn.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int64] * 16
            fn.restype = None
            fns[dtype, backward] = fn
        fn = getattr(lib, f"tg_rotary_dims_{suffix}")
        fn.argtypes = [ctypes.c_void_p] * 5
        fn.restype = None
        fns[dtype, "dims"] = fn
    return fns


# {(dtype, backward or "dims"): C function}, or None (torch ops), built on first use: in
# the background (a cold first call runs the torch ops, the same values, while it compiles)
_functions = built_once("tg_rotary", lambda: SOURCE, _bind, background=True)


def _strides4(t: torch.Tensor):
    """The three leading strides of ``t`` read as 4-D (missing or size-1 dims: 0)."""
    pad = 4 - t.dim()
    sizes, strides = (1,) * pad + tuple(t.shape), (0,) * pad + t.stride()
    return tuple(0 if n == 1 else st for n, st in zip(sizes[:3], strides[:3]))


def _run(fn: Callable, x, c, s, strides) -> torch.Tensor:
    """``fn`` over ``x``, ``cos``, ``sin`` into a new tensor of ``strides``."""
    out = torch.empty_strided(x.shape, strides, dtype=x.dtype)
    B, H, L, D = x.shape
    fn(x.data_ptr(), c.data_ptr(), s.data_ptr(), out.data_ptr(), B, H, L, D,
       *_strides4(x), *_strides4(c), *_strides4(s), *strides[:3])
    return out


def rotate_back(dy, c, s) -> torch.Tensor:
    """The gradient of ``x`` in torch ops: ``dy * cos + rotate_half^T(dy * sin)``."""
    h = dy.shape[-1] // 2
    u = dy * s
    return dy * c + torch.cat((u[..., h:], -u[..., :h]), dim=-1)


def eager_ops(x, c, s, strides) -> torch.Tensor:
    """``x * cos + rotate_half(x) * sin`` in eager's own ops (its values bit for bit, which
    the C loop's equal; its gradients under autograd), in the C loop's layout ``strides``.
    (``torch_fn``, the graph's ``addcmul``, may round the sum differently.)"""
    h = x.shape[-1] // 2
    value = x * c + torch.cat((-x[..., h:], x[..., :h]), dim=-1) * s
    if value.stride() == tuple(strides):
        return value
    return torch.empty_strided(x.shape, strides, dtype=x.dtype).copy_(value)


class _RotaryGrad(torch.autograd.Function):
    """One autograd node for a rotary call whose ``x`` requires grad (not cos/sin)."""

    @staticmethod
    def forward(ctx, x, c, s, fn, strides):
        ctx.save_for_backward(c, s)
        return _run(fn, x, c, s, strides)

    @staticmethod
    def backward(ctx, dy):
        c, s = ctx.saved_tensors
        fns = _functions()
        if torch.is_grad_enabled() or dy.dtype != c.dtype or not dy.is_cpu:
            return rotate_back(dy, c, s), None, None, None, None   # (create_graph: recorded)
        if dy.stride(-1) != 1:
            dy = dy.contiguous()
        D = dy.shape[-1]
        dense = (dy.shape[1] * dy.shape[2] * D, dy.shape[2] * D, D, 1)
        return _run(fns[dy.dtype, True], dy, c, s, dense), None, None, None, None


class Rotary:
    """Callable on (x, cos, sin); see the module docstring."""

    def __init__(self, torch_fn: Callable):
        self.torch_fn = torch_fn
        self._layouts: Dict[tuple, tuple] = {}     # input strides -> eager's result strides
        # everything the checks below read of (x, cos, sin) -> a call that passed them and
        # took the C loop without autograd: (C function, result shape and strides, dtype,
        # the address of its 16 sizes and strides, the array holding them)
        self._plans: Dict[tuple, tuple] = {}

    def __call__(self, x, c, s):
        # a cached call's path (~5 us where the checks and 20 ctypes arguments took ~18):
        # the same tensor properties as a call that took the C loop, nothing recording
        if not (_grad_enabled() and (x.requires_grad or c.requires_grad or s.requires_grad)):
            plan = self._plans.get((x.shape, x.stride(), x.dtype, x.is_cpu, c.shape,
                                    c.stride(), c.dtype, c.is_cpu, s.shape, s.stride(),
                                    s.dtype, s.is_cpu))
            if plan is not None:
                fn, shape, strides, dtype, dims, _ = plan
                out = _empty_strided(shape, strides, dtype=dtype)
                fn(x.data_ptr(), c.data_ptr(), s.data_ptr(), out.data_ptr(), dims)
                return out
        return self._call(x, c, s)

    def _call(self, x, c, s):
        fns = _functions()
        dtype = x.dtype
        if dtype not in _SUFFIX or c.dtype != dtype or s.dtype != dtype or \
                not (x.is_cpu and c.is_cpu and s.is_cpu) or \
                x.dim() != 4 or c.shape[-1] != x.shape[-1] or s.shape[-1] != x.shape[-1] or \
                x.shape[-1] % 2 or \
                x.stride(-1) != 1 or c.stride(-1) != 1 or s.stride(-1) != 1:
            return self.torch_fn(x, c, s)
        recording = torch.is_grad_enabled() and (x.requires_grad or c.requires_grad or
                                                 s.requires_grad)
        if recording and (c.requires_grad or s.requires_grad):
            return self.torch_fn(x, c, s)
        key = (x.stride(), c.shape, c.stride(), s.shape, s.stride())
        strides = self._layouts.get(key)
        if strides is None:
            strides = self._layouts[key] = tuple(self.torch_fn(
                *(torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
                  for t in (x, c, s))).stride())
        if strides[-1] != 1:
            return self.torch_fn(x, c, s)
        if fns is None:     # no compiler, or the library still building: eager's own ops
            return eager_ops(x, c, s, strides)
        if recording:
            return _RotaryGrad.apply(x, c, s, fns[dtype, False], strides)
        self._remember(fns[dtype, "dims"], x, c, s, strides)
        return _run(fns[dtype, False], x, c, s, strides)

    def _remember(self, fn, x, c, s, strides) -> None:
        """Keep this call's checks passed, for the next call on the same layouts."""
        dims = (ctypes.c_int64 * 16)(*x.shape, *_strides4(x), *_strides4(c), *_strides4(s),
                                     *strides[:3])
        key = (x.shape, x.stride(), x.dtype, x.is_cpu, c.shape, c.stride(), c.dtype, c.is_cpu,
               s.shape, s.stride(), s.dtype, s.is_cpu)
        self._plans[key] = (fn, tuple(x.shape), strides, x.dtype, ctypes.addressof(dims),
                            dims)

    def __repr__(self) -> str:
        return "<rotary: x * cos + rotate_half(x) * sin>"
