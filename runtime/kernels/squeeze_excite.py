"""A squeeze-and-excitation block as one C loop.

``SqueezeExcite(act, gate, torch_fn)`` is the target of a ``squeeze_excite`` node
(``passes/squeeze_excite.py``): called on ``(x, w1, b1, w2, b2)`` it returns what eager's
six ops give::

    p = adaptive_avg_pool2d(x, 1)           # or x.mean((2, 3), keepdim=True)
    z = act(conv2d(p, w1, b1))              # 1x1: [N, R, 1, 1]; act relu, silu or none
    s = gate(conv2d(z, w2, b2))             # 1x1: [N, C, 1, 1]; gate hardsigmoid or sigmoid
    return s * x

per image: the channel means, the two small products (each a sum over its input channels
plus the bias, then the activation, in torch's formulas: ``min(max(v + 3, 0), 6) / 6``,
``1 / (1 + exp(-v))``, ``v / (1 + exp(-v))``; NaN stays NaN), the channel scale, written in
``x``'s layout (channels-last or contiguous, as eager's ``mul`` lays its result). The sums
run in another order than torch's (float rounding only). At batch 1 the six calls cost
~45-80 us on small maps, the loop a few.

The C loop runs where autograd records nothing, on float32 CPU tensors,
``x`` 4-D contiguous or channels-last dense with at least one pixel, weights ``[R, C, 1,
1]`` / ``[C, R, 1, 1]`` contiguous, biases ``[R]`` / ``[C]`` or None. Anything else (and
no C compiler, or while its C source is compiled in the background, ``built_once``) runs
``torch_fn``: the block's own ops as the graph held them.
"""
from __future__ import annotations

import ctypes
from typing import Callable, Dict, Optional

import torch

from .built_once import built_once

SOURCE = r"""
#include <stdint.h>
#include <math.h>
#include <omp.h>
#pragma omp declare simd notinbranch
float expf(float);
/* torch's formulas: NaN stays NaN (a comparison with NaN is false) */
#define CLAMP6(t) ((t) < 0 ? 0 : ((t) > 6 ? 6 : (t)))
#define MAP(A, K, F) _Pragma("omp simd") for (int64_t i = 0; i < K; i++) { float v = A[i]; A[i] = F; }
/* d: N C HW R channels_last act(0 none, 1 relu, 2 silu) gate(0 hardsigmoid, 1 sigmoid) */
static void image(const float *restrict xn, const float *restrict w1, const float *restrict b1,
                  const float *restrict w2, const float *restrict b2, float *restrict yn,
                  const int64_t *d) {
  const int64_t C = d[1], HW = d[2], R = d[3], cl = d[4], act = d[5], gate = d[6];
  float p[C], z[R], s[C];
  if (cl) {
    for (int64_t c = 0; c < C; c++) p[c] = 0;
    for (int64_t i = 0; i < HW; i++) {
      const float *restrict xi = xn + i * C;
      #pragma omp simd
      for (int64_t c = 0; c < C; c++) p[c] += xi[c];
    }
  } else {
    for (int64_t c = 0; c < C; c++) {
      const float *restrict xc = xn + c * HW; float acc = 0;
      #pragma omp simd reduction(+:acc)
      for (int64_t i = 0; i < HW; i++) acc += xc[i];
      p[c] = acc;
    }
  }
  for (int64_t c = 0; c < C; c++) p[c] = p[c] / (float)HW;
  for (int64_t r = 0; r < R; r++) {
    const float *restrict wr = w1 + r * C; float acc = 0;
    #pragma omp simd reduction(+:acc)
    for (int64_t c = 0; c < C; c++) acc += wr[c] * p[c];
    z[r] = b1 ? acc + b1[r] : acc;
  }
  if (act == 1) { MAP(z, R, v < 0 ? 0 : v) }
  else if (act == 2) { MAP(z, R, v / (1 + expf(-v))) }
  for (int64_t c = 0; c < C; c++) {
    const float *restrict wc = w2 + c * R; float acc = 0;
    #pragma omp simd reduction(+:acc)
    for (int64_t r = 0; r < R; r++) acc += wc[r] * z[r];
    s[c] = b2 ? acc + b2[c] : acc;
  }
  if (gate == 1) { MAP(s, C, 1 / (1 + expf(-v))) }
  else { MAP(s, C, CLAMP6(v + 3) / 6) }
  if (cl) {
    for (int64_t i = 0; i < HW; i++) {
      const float *restrict xi = xn + i * C; float *restrict yi = yn + i * C;
      #pragma omp simd
      for (int64_t c = 0; c < C; c++) yi[c] = s[c] * xi[c];
    }
  } else {
    for (int64_t c = 0; c < C; c++) {
      const float *restrict xc = xn + c * HW; float *restrict yc = yn + c * HW;
      const float sc = s[c];
      #pragma omp simd
      for (int64_t i = 0; i < HW; i++) yc[i] = sc * xc[i];
    }
  }
}
void tg_squeeze_excite_f32(const float *x, const float *w1, const float *b1, const float *w2,
                           const float *b2, float *y, const int64_t *d, int nthreads) {
  const int64_t N = d[0], step = d[1] * d[2];
  if (nthreads > 1 && N > 1 && N * step >= 65536) {
    #pragma omp parallel for schedule(static) num_threads(nthreads)
    for (int64_t n = 0; n < N; n++) image(x + n * step, w1, b1, w2, b2, y + n * step, d);
  } else {
    for (int64_t n = 0; n < N; n++) image(x + n * step, w1, b1, w2, b2, y + n * step, d);
  }
}
"""

ACTS = (None, "relu", "silu")          # their index: d[5]
GATES = ("hardsigmoid", "sigmoid")      # their index: d[6]
_CL = torch.channels_last
_grad_enabled = torch.is_grad_enabled
_empty_strided = torch.empty_strided
_threads = torch.get_num_threads


def _bind(lib):
    fn = lib.tg_squeeze_excite_f32
    fn.argtypes = [ctypes.c_void_p] * 7 + [ctypes.c_int]
    fn.restype = None
    return fn


# the C function, or None: built in the background on first use (the block's torch ops
# run meanwhile), or none where there is no C compiler
_function = built_once("tg_squeeze_excite", lambda: SOURCE, _bind, background=True)


def _ptr(t: Optional[torch.Tensor]):
    return None if t is None else t.data_ptr()


class SqueezeExcite:
    """Callable on ``(x, w1, b1, w2, b2)``; see the module docstring."""

    def __init__(self, act: Optional[str], gate: str, torch_fn: Callable):
        if act not in ACTS or gate not in GATES:
            raise ValueError(f"squeeze_excite: unknown activation {act!r} or gate {gate!r}")
        self.act, self.gate = act, gate
        self.torch_fn = torch_fn
        self.__name__ = f"squeeze_excite_{act or 'none'}_{gate}"
        # (x's shape, strides, dtype; weight and bias shapes) -> (C function, dims
        # address, dims array), for calls whose every check passed
        self._plans: Dict[tuple, tuple] = {}

    def __repr__(self) -> str:
        return f"SqueezeExcite({self.act!r}, {self.gate!r})"

    def __call__(self, x, w1, b1, w2, b2):
        tensors = (x, w1, w2) + tuple(t for t in (b1, b2) if t is not None)
        if _grad_enabled() and any(t.requires_grad for t in tensors):
            return self.torch_fn(x, w1, b1, w2, b2)
        dtype = x.dtype
        if not all(t.dtype == dtype and t.is_cpu and t.is_contiguous() for t in tensors[1:]):
            return self.torch_fn(x, w1, b1, w2, b2)
        key = (x.shape, x.stride(), dtype, x.is_cpu, w1.shape, w2.shape,
               None if b1 is None else b1.shape, None if b2 is None else b2.shape)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plan(x, w1, b1, w2, b2)
            if plan is None:
                return self.torch_fn(x, w1, b1, w2, b2)
            self._plans[key] = plan
        fn, dims, _ = plan
        y = _empty_strided(x.shape, x.stride(), dtype=dtype)
        fn(x.data_ptr(), w1.data_ptr(), _ptr(b1), w2.data_ptr(), _ptr(b2), y.data_ptr(),
           dims, _threads())
        return y

    def _plan(self, x, w1, b1, w2, b2) -> Optional[tuple]:
        if x.dtype != torch.float32 or not x.is_cpu or x.dim() != 4:
            return None
        n, c, h, w = x.shape
        if h * w == 0 or w1.dim() != 4 or w2.dim() != 4:
            return None
        r = w1.shape[0]
        if tuple(w1.shape) != (r, c, 1, 1) or tuple(w2.shape) != (c, r, 1, 1) or \
                (b1 is not None and tuple(b1.shape) != (r,)) or \
                (b2 is not None and tuple(b2.shape) != (c,)):
            return None
        if x.is_contiguous():
            cl = 0
        elif x.is_contiguous(memory_format=_CL):
            cl = 1
        else:
            return None
        fn = _function()
        if fn is None:
            return None
        array = (ctypes.c_int64 * 7)(n, c, h * w, r, cl, ACTS.index(self.act),
                                     GATES.index(self.gate))
        return fn, ctypes.addressof(array), array
