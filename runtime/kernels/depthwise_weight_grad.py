"""The weight gradient of a depthwise 2-D convolution with torch's bits, as one C loop.

oneDNN (torch's CPU convolutions) computes a float32 depthwise weight gradient in one of two
orders, both reproduced here exactly:

- ``"gemv"`` (its ``gemm:jit`` backward, chosen for 5x5 kernels among others): per channel,
  per batch item, im2col then ``sgemm("T", "N", taps, 1, OH*OW)``, which its AVX2 gemv
  kernel runs as 8 lanes of FMA chains over 16 spatial positions a step, a horizontal sum
  ``((l0+l1)+(l4+l5)) + ((l2+l3)+(l6+l7))`` added to the tap's gradient, then the
  remaining 8, 4, 2 and 1 positions each summed and added the same way;
- ``"chain"`` (its direct depthwise kernel, 3x3 among others): per channel and tap, one
  FMA chain over the batch and the spatial positions in order.

That call costs oneDNN 0.5-5 ms at mobilenet_v3_small's training shapes (batch 8, 64x64:
~50-60% of a training step on 1 thread) for ~0.1-0.5 M multiply-adds; the loop here takes
a few tens of microseconds. Which order (if either) torch uses depends on the shape, the
thread count, the CPU and oneDNN's version, so ``weight_grad`` asks: the first time it sees
a (shapes, stride, padding, dilation, threads) key it runs torch's backward on random
tensors of that shape and takes the order whose bits equal it, or none (the caller runs
torch's op). Channels are independent, so the loop may split them over threads without
changing a bit.

Built in the background (``built_once(background=True)``); until it is built, and where no
C compiler exists, ``weight_grad`` returns None.
"""
from __future__ import annotations

import ctypes
import threading
from typing import Callable, Dict, Optional, Tuple

import torch

from .built_once import built_once

MODES = {"gemv": 0, "chain": 1}

SOURCE = r"""
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#define CB 16           /* channels side by side: each lane is one channel's own chain */

/* one channel block's gradient of the tap (kh, kw), written to dw.
   xt: N H W C, gt: N OH OW C (channels last); d: N C H W OH OW KH KW SH SW PH PW DH DW */
static void tap(const float *restrict xt, const float *restrict gt, float *restrict dw,
                const int64_t *d, int mode, int64_t c0, int cb, int64_t kh, int64_t kw,
                const float *restrict zeros) {
    const int64_t N = d[0], C = d[1], H = d[2], W = d[3], OH = d[4], OW = d[5];
    const int64_t KH = d[6], KW = d[7], SH = d[8], SW = d[9], PH = d[10], PW = d[11];
    const int64_t DH = d[12], DW = d[13], OS = OH * OW;
    float y[CB] = {0};
    float l[8][CB];
    for (int64_t n = 0; n < N; n++) {
        const float *xn = xt + n * H * W * C + c0, *gn = gt + n * OS * C + c0;
        int64_t start = 0;
        /* gemv order: the 16-position blocks into one set of 8 lanes, then 8, 4, 2, 1;
           each set summed across its lanes and added to y. chain order: one FMA chain */
        for (int part = 0; part < 5; part++) {
            int64_t len;
            if (mode == 1) { if (part) break; len = OS; }
            else if (part == 0) len = OS >= 16 ? OS - OS % 16 : 0;
            else len = (OS - start) & (16 >> part);
            if (!len) continue;
            if (mode == 0)
                for (int i = 0; i < 8; i++)
                    for (int c = 0; c < CB; c++) l[i][c] = 0.0f;
            for (int64_t t = 0; t < len; t++) {
                const int64_t s = start + t, oh = s / OW, ow = s % OW;
                const int64_t ih = oh * SH - PH + kh * DH, iw = ow * SW - PW + kw * DW;
                const float *restrict xv = (ih >= 0 && ih < H && iw >= 0 && iw < W)
                                           ? xn + (ih * W + iw) * C : zeros;
                const float *restrict gv = gn + s * C;
                if (mode == 1) {
                    #pragma omp simd
                    for (int c = 0; c < CB; c++) y[c] = fmaf(xv[c], gv[c], y[c]);
                } else {
                    float *restrict li = l[t & 7];
                    #pragma omp simd
                    for (int c = 0; c < CB; c++) li[c] = fmaf(xv[c], gv[c], li[c]);
                }
            }
            if (mode == 0) {
                #pragma omp simd
                for (int c = 0; c < CB; c++) {
                    const float r = ((l[0][c] + l[1][c]) + (l[4][c] + l[5][c])) +
                                    ((l[2][c] + l[3][c]) + (l[6][c] + l[7][c]));
                    y[c] = fmaf(1.0f, r, y[c]);
                }
            }
            start += len;
        }
    }
    for (int c = 0; c < cb; c++) dw[((c0 + c) * KH + kh) * KW + kw] = y[c];
}

/* x: N C H W, g: N C OH OW (contiguous); dw: C KH KW. mode 0: oneDNN's gemv order, 1: one
   FMA chain. Returns 0, or 1 when out of memory. */
int tg_depthwise_weight_grad(const float *x, const float *g, float *dw, const int64_t *d,
                             int mode, int nthreads) {
    const int64_t N = d[0], C = d[1], H = d[2], W = d[3], OH = d[4], OW = d[5];
    const int64_t KH = d[6], KW = d[7], HW = H * W, OS = OH * OW;
    const int64_t CP = (C + CB - 1) / CB * CB;      /* padded: a block always reads CB */
    float *xt = (float *)calloc((size_t)(N * HW * CP + CB), sizeof(float));
    float *gt = (float *)calloc((size_t)(N * OS * CP + CB), sizeof(float));
    if (!xt || !gt) { free(xt); free(gt); return 1; }
    float *zeros = xt + N * HW * CP;                 /* CB zeros past the end */
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++) {
            const float *xs = x + (n * C + c) * HW, *gs = g + (n * C + c) * OS;
            for (int64_t i = 0; i < HW; i++) xt[(n * HW + i) * CP + c] = xs[i];
            for (int64_t i = 0; i < OS; i++) gt[(n * OS + i) * CP + c] = gs[i];
        }
    int64_t dp[14];
    memcpy(dp, d, sizeof(dp));
    dp[1] = CP;
    const int64_t blocks = CP / CB, work = blocks * KH * KW;
    #pragma omp parallel for schedule(static) num_threads(nthreads) if(nthreads > 1 && work > 1)
    for (int64_t j = 0; j < work; j++) {
        const int64_t b = j / (KH * KW), k = j % (KH * KW);
        const int64_t c0 = b * CB;
        const int cb = (int)(C - c0 < CB ? C - c0 : CB);
        tap(xt, gt, dw, dp, mode, c0, cb, k / KW, k % KW, zeros);
    }
    free(xt);
    free(gt);
    return 0;
}
"""


def _bind(lib) -> Callable:
    fn = lib.tg_depthwise_weight_grad
    fn.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


_function = built_once("tg_depthwise_weight_grad", lambda: SOURCE, _bind, background=True)
Key = Tuple
_modes: Dict[Key, Optional[int]] = {}       # key -> the order torch uses here, or None
_lock = threading.Lock()


def _run(fn, x: torch.Tensor, grad: torch.Tensor, kh: int, kw: int, stride, padding,
         dilation, mode: int) -> Optional[torch.Tensor]:
    N, C, H, W = x.shape
    OH, OW = grad.shape[2], grad.shape[3]
    dw = x.new_empty((C, 1, kh, kw))
    dims = torch.tensor([N, C, H, W, OH, OW, kh, kw, *stride, *padding, *dilation],
                        dtype=torch.int64)
    failed = fn(x.data_ptr(), grad.data_ptr(), dw.data_ptr(), dims.data_ptr(), mode,
                torch.get_num_threads())
    return None if failed else dw


def _torch_weight_grad(x, grad, weight, stride, padding, dilation) -> torch.Tensor:
    return torch.ops.aten.convolution_backward(
        grad, x, weight, None, list(stride), list(padding), list(dilation), False, [0, 0],
        x.shape[1], [False, True, False])[1]


def _probe(fn, key: Key) -> Optional[int]:
    """The order whose bits equal torch's on random tensors of ``key``'s shapes, or None."""
    xs, ws, gs, stride, padding, dilation, _ = key
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(xs, generator=g) * 2 + 0.5
    w = torch.randn(ws, generator=g)
    grad = torch.randn(gs, generator=g)
    want = _torch_weight_grad(x, grad, w, stride, padding, dilation)
    for mode in MODES.values():
        got = _run(fn, x, grad, ws[2], ws[3], stride, padding, dilation, mode)
        if got is not None and got.stride() == want.stride() and torch.equal(got, want):
            return mode
    return None


def weight_grad(x: torch.Tensor, grad: torch.Tensor, weight: torch.Tensor, stride, padding,
                dilation) -> Optional[torch.Tensor]:
    """``convolution_backward``'s weight gradient of ``conv2d(x, weight, None, stride,
    padding, dilation, groups=C)`` for the output gradient ``grad``, with its bits; None
    when the C loop is not built (yet) or does not give torch's bits at this key.

    The caller has checked: float32 CPU, ``x`` and ``grad`` contiguous 4-D, ``weight``
    ``[C, 1, KH, KW]`` contiguous, int pairs."""
    fn = _function()
    if fn is None:
        return None
    key = (tuple(x.shape), tuple(weight.shape), tuple(grad.shape), tuple(stride),
           tuple(padding), tuple(dilation), torch.get_num_threads())
    mode = _modes.get(key, -1)
    if mode == -1:
        with _lock:
            mode = _modes.get(key, -1)
            if mode == -1:
                with torch.no_grad():
                    mode = _modes[key] = _probe(fn, key)
    if mode is None:
        return None
    return _run(fn, x, grad, weight.shape[2], weight.shape[3], stride, padding, dilation,
                mode)
