"""A depthwise 2-D convolution on channels-last tensors, with its epilogue, as one C loop.

oneDNN spends ~70-130 us per call on the small depthwise convolutions of mobile CNNs at
batch 1 (``[1, 240, 4, 4]`` with a 5x5 kernel: ~0.1 M multiply-adds, a few us of
arithmetic), most of it fixed cost. ``Depthwise(weight)`` holds a folded depthwise weight
(``[C, 1, KH, KW]``, from ``FoldedConv``) re-laid once as ``[KH*KW, C]``; called on a
channels-last input it returns what ``conv2d(x, weight, bias, stride, padding, dilation,
groups=C)`` followed by ``FoldedConv``'s epilogue (``+ other``, then the activation)
gives, channels-last, computed as:

    y[n, oh, ow, c] = act((sum over the kernel taps inside the image of x * w) + bias[c]
                          [+ other[n, oh, ow, c]])

vectorized over the channels (each channel's taps summed in kernel order, one rounding per
product and per sum: no FMA contraction; the sum's order is oneDNN's only up to rounding).
The activations are NaN-preserving as torch's are: ``relu``, ``relu6``, ``hardswish``,
``hardsigmoid`` (torch's formulas, ``x * min(max(x + 3, 0), 6) / 6``), ``silu``
(``x / (1 + exp(-x))``). Large calls split their output rows over torch's thread count.

It takes the C loop only for what it was made for: a float32 CPU input, 4-D, channels-last
dense, with as many channels as the weight, integer stride/padding/dilation pairs, a
residual of the output's shape, dtype and channels-last layout; anything else returns None
and the caller runs torch's convolution. It never runs where autograd records
(``FoldedConv`` takes eager's ops there). The C source is compiled once per process (on
disk once per machine) in the background with the fused kernels (``background``): until it
is built, and where there is no C compiler, torch's convolution runs.
"""
from __future__ import annotations

import ctypes
from typing import Dict, Optional

import torch

from .built_once import built_once
from .conv_params import int_pair as _pair

SOURCE = r"""
#include <stdint.h>
#include <math.h>
#include <omp.h>
#pragma omp declare simd notinbranch
float expf(float);
/* torch's formulas: NaN stays NaN (a comparison with NaN is false) */
#define CLAMP6(t) ((t) < 0 ? 0 : ((t) > 6 ? 6 : (t)))
#define EPILOGUE(ACT) \
  _Pragma("omp simd") \
  for (int64_t c = 0; c < C; c++) { float v = yo[c] + b[c]; if (r) v = v + ro[c]; yo[c] = ACT; }
/* d: N C H W OH OW KH KW SH SW PH PW DH DW act; output rows [first, last) of N*OH */
static void rows(const float *restrict x, const float *restrict w, const float *restrict b,
                 const float *restrict r, float *restrict y, const int64_t *d,
                 int64_t first, int64_t last) {
  const int64_t C = d[1], H = d[2], W = d[3], OH = d[4], OW = d[5], KH = d[6], KW = d[7];
  const int64_t SH = d[8], SW = d[9], PH = d[10], PW = d[11], DH = d[12], DWD = d[13];
  const int64_t act = d[14];
  for (int64_t row = first; row < last; row++) {
    const int64_t n = row / OH, oh = row % OH;
    for (int64_t ow = 0; ow < OW; ow++) {
      const int64_t at = ((n * OH + oh) * OW + ow) * C;
      float *restrict yo = y + at;
      const float *restrict ro = r ? r + at : 0;
      for (int64_t c = 0; c < C; c++) yo[c] = 0;
      for (int64_t kh = 0; kh < KH; kh++) {
        const int64_t ih = oh * SH - PH + kh * DH;
        if (ih < 0 || ih >= H) continue;
        for (int64_t kw = 0; kw < KW; kw++) {
          const int64_t iw = ow * SW - PW + kw * DWD;
          if (iw < 0 || iw >= W) continue;
          const float *restrict xi = x + ((n * H + ih) * W + iw) * C;
          const float *restrict wk = w + (kh * KW + kw) * C;
          #pragma omp simd
          for (int64_t c = 0; c < C; c++) yo[c] += xi[c] * wk[c];
        }
      }
      switch (act) {
        case 1: EPILOGUE(v < 0 ? 0 : v) break;
        case 2: EPILOGUE(CLAMP6(v)) break;
        case 3: EPILOGUE(v * CLAMP6(v + 3) / 6) break;
        case 4: EPILOGUE(CLAMP6(v + 3) / 6) break;
        case 5: EPILOGUE(v / (1 + expf(-v))) break;
        default: EPILOGUE(v)
      }
    }
  }
}
void tg_depthwise_f32(const float *x, const float *w, const float *b, const float *r,
                      float *y, const int64_t *d, int nthreads) {
  const int64_t n_rows = d[0] * d[4];
  const int64_t work = n_rows * d[5] * d[1] * d[6] * d[7];
  if (nthreads > 1 && n_rows > 1 && work >= 262144) {
    #pragma omp parallel num_threads(nthreads)
    {
      const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
      rows(x, w, b, r, y, d, n_rows * t / nt, n_rows * (t + 1) / nt);
    }
  } else {
    rows(x, w, b, r, y, d, 0, n_rows);
  }
}
"""

ACTS = (None, "relu", "relu6", "hardswish", "hardsigmoid", "silu")   # their index: d[14]
_CL = torch.channels_last
_empty = torch.empty
_threads = torch.get_num_threads


def _bind(lib):
    fn = lib.tg_depthwise_f32
    fn.argtypes = [ctypes.c_void_p] * 6 + [ctypes.c_int]
    fn.restype = None
    return fn


# the C function, or None: built in the background on first use (torch's convolution
# runs meanwhile), or none where there is no C compiler
_function = built_once("tg_depthwise", lambda: SOURCE, _bind, background=True)


def is_depthwise(weight: torch.Tensor, groups) -> bool:
    """A ``[C, 1, KH, KW]`` weight convolving each of ``C == groups`` channels alone."""
    return type(groups) is int and groups > 1 and weight.dim() == 4 and \
        weight.shape[0] == groups and weight.shape[1] == 1


class Depthwise:
    """A folded depthwise weight laid out for the C loop; see the module docstring."""

    def __init__(self, weight: torch.Tensor, stride, padding, dilation):
        c, _, kh, kw = weight.shape
        self._w = weight.detach().reshape(c, kh * kw).t().contiguous()
        self._kernel = (c, kh, kw)
        self._params = (stride, padding, dilation)
        # (x's shape, activation) -> (output shape, C function, dims address, dims array)
        self._plans: Dict[tuple, tuple] = {}

    @classmethod
    def make(cls, weight: torch.Tensor, stride, padding, dilation, groups
             ) -> Optional["Depthwise"]:
        """The C loop for this folded weight, or None (torch's convolution runs)."""
        params = [_pair(stride), _pair(padding), _pair(dilation)]
        if None in params or not is_depthwise(weight, groups) or \
                weight.dtype != torch.float32 or weight.device.type != "cpu" or \
                any(p < 0 for p in params[1]) or any(p < 1 for p in params[0] + params[2]):
            return None
        return cls(weight, *params)

    def __call__(self, x: torch.Tensor, bias: torch.Tensor, other, act
                 ) -> Optional[torch.Tensor]:
        """The convolution with its epilogue, channels-last; None where it does not apply
        (or while the C loop is still being built)."""
        key = (x.shape, act)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plan(x, act)
            if plan is None:
                return None
            self._plans[key] = plan
        shape, fn, dims, _ = plan
        if x.dtype != self._w.dtype or not x.is_cpu or \
                not x.is_contiguous(memory_format=_CL) or bias.dtype != x.dtype:
            return None
        if other is not None and (other.shape != shape or other.dtype != x.dtype or
                                  not other.is_contiguous(memory_format=_CL) or
                                  not other.is_cpu):
            return None
        y = _empty(shape, dtype=x.dtype, memory_format=_CL)
        if y.numel():
            fn(x.data_ptr(), self._w.data_ptr(), bias.data_ptr(),
               None if other is None else other.data_ptr(), y.data_ptr(), dims, _threads())
        return y

    def _plan(self, x: torch.Tensor, act) -> Optional[tuple]:
        c, kh, kw = self._kernel
        if x.dim() != 4 or x.shape[1] != c or act not in ACTS:
            return None
        fn = _function()
        if fn is None:
            return None
        (sh, sw), (ph, pw), (dh, dw) = self._params
        n, _, h, w = x.shape
        oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
        ow = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
        if oh < 1 or ow < 1:
            return None         # torch's error (or empty result) is eager's
        array = (ctypes.c_int64 * 15)(n, c, h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw,
                                      ACTS.index(act))
        return (n, c, oh, ow), fn, ctypes.addressof(array), array
