"""Rotary position embedding, ``x * cos + rotate_half(x) * sin``, as one C loop.

``Rotary(torch_fn)`` is the target of a ``rotary`` node (``passes.rotary``): called on
``(x, cos, sin)`` it returns eager's values in eager's layout. The C function reads ``x``,
``cos`` and ``sin`` through their strides (the usual ``x`` is a transposed view of a
projection, which a fused elementwise kernel would have to copy or leave to torch) and
writes each element as ``rotated * sin + x * cos`` in that order of operations (float32,
no contraction into FMA: what the graph's ``addcmul`` computes). The result's strides are
the ones eager's ops give for these input strides (found once per stride pattern on meta
tensors). Anything else (another dtype or device, autograd recording, a last dimension
that is not contiguous, no compiler) runs the original ops (``torch_fn``).
"""
from __future__ import annotations

import ctypes
import threading
from typing import Callable, Dict, Optional

import torch

SOURCE = r"""
#include <stdint.h>
void tg_rotary_f32(const float *x, const float *c, const float *s, float *o,
                   int64_t B, int64_t H, int64_t L, int64_t D,
                   int64_t xb, int64_t xh, int64_t xl, int64_t cb, int64_t ch, int64_t cl,
                   int64_t sb, int64_t sh, int64_t sl, int64_t ob, int64_t oh, int64_t ol) {
  const int64_t h = D / 2;
  for (int64_t b = 0; b < B; b++)
    for (int64_t i = 0; i < H; i++)
      for (int64_t l = 0; l < L; l++) {
        const float *xr = x + b * xb + i * xh + l * xl;
        const float *cr = c + b * cb + i * ch + l * cl;
        const float *sr = s + b * sb + i * sh + l * sl;
        float *orow = o + b * ob + i * oh + l * ol;
        for (int64_t j = 0; j < h; j++) {
          float m = (-xr[j + h]) * sr[j];
          orow[j] = m + xr[j] * cr[j];
        }
        for (int64_t j = h; j < D; j++) {
          float m = xr[j - h] * sr[j];
          orow[j] = m + xr[j] * cr[j];
        }
      }
}
"""

_LIB: list = []             # [function or None], built on first use
_BUILD_LOCK = threading.Lock()


def _function() -> Optional[Callable]:
    if not _LIB:
        with _BUILD_LOCK:
            if not _LIB:
                fn = None
                try:
                    from .compiler import build, compiler_available
                    if compiler_available():
                        fn = build(SOURCE, name="tg_rotary").tg_rotary_f32
                        fn.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int64] * 16
                        fn.restype = None
                except Exception:           # no compiler, a failed build: torch ops
                    fn = None
                _LIB.append(fn)
    return _LIB[0]


def _strides4(t: torch.Tensor):
    """The three leading strides of ``t`` read as 4-D (missing or size-1 dims: 0)."""
    pad = 4 - t.dim()
    sizes, strides = (1,) * pad + tuple(t.shape), (0,) * pad + t.stride()
    return tuple(0 if n == 1 else st for n, st in zip(sizes[:3], strides[:3]))


class Rotary:
    """Callable on (x, cos, sin); see the module docstring."""

    def __init__(self, torch_fn: Callable):
        self.torch_fn = torch_fn
        self._layouts: Dict[tuple, tuple] = {}     # input strides -> eager's result strides

    def __call__(self, x, c, s):
        fn = _function()
        if fn is None or x.dtype != torch.float32 or c.dtype != torch.float32 or \
                s.dtype != torch.float32 or not (x.is_cpu and c.is_cpu and s.is_cpu) or \
                x.dim() != 4 or c.shape[-1] != x.shape[-1] or s.shape[-1] != x.shape[-1] or \
                x.stride(-1) != 1 or c.stride(-1) != 1 or s.stride(-1) != 1 or \
                (torch.is_grad_enabled() and (x.requires_grad or c.requires_grad or
                                              s.requires_grad)):
            return self.torch_fn(x, c, s)
        key = (x.stride(), c.shape, c.stride(), s.shape, s.stride())
        strides = self._layouts.get(key)
        if strides is None:
            strides = self._layouts[key] = tuple(self.torch_fn(
                *(torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
                  for t in (x, c, s))).stride())
        if strides[-1] != 1:
            return self.torch_fn(x, c, s)
        out = torch.empty_strided(x.shape, strides, dtype=torch.float32)
        B, H, L, D = x.shape
        fn(x.data_ptr(), c.data_ptr(), s.data_ptr(), out.data_ptr(), B, H, L, D,
           *_strides4(x), *_strides4(c), *_strides4(s), *strides[:3])
        return out

    def __repr__(self) -> str:
        return "<rotary: x * cos + rotate_half(x) * sin>"
