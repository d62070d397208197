"""A float32 depthwise 2-D convolution's forward and both gradients with oneDNN's bits,
as C loops (issue 15: CNN training must be eager's arithmetic bit for bit).

oneDNN (torch's CPU convolutions) orders the sums as follows, reproduced here exactly:

- forward and input gradient (its direct ``jit_dw`` kernels): each output one FMA chain
  over the kernel taps inside the image, ``kh`` outer, ``kw`` inner, ascending;
- weight gradient, one of two orders: ``"gemv"`` (its ``gemm:jit`` backward, chosen for 5x5
  kernels among others): per channel, per batch item, im2col then ``sgemm("T", "N", taps,
  1, OH*OW)``, which its AVX2 gemv kernel runs as 8 lanes of FMA chains over 16 spatial
  positions a step, a horizontal sum ``((l0+l1)+(l4+l5)) + ((l2+l3)+(l6+l7))`` added to the
  tap's gradient, then the remaining 8, 4, 2 and 1 positions each summed and added the same
  way; ``"chain"`` (its direct kernel, 3x3 among others): per channel and tap, one FMA
  chain over the batch and the spatial positions in order.

oneDNN spends 1.3-4.4 ms on one 5x5 weight gradient at mobilenet_v3_small's training shapes
(batch 8, 64x64: about half a training step on 1 thread) and 0.2-0.6 ms on each small
forward or input gradient, mostly fixed costs and layout reorders; the loops here take a
fraction of that. Which order torch uses depends on the shape, the thread count, the CPU
and oneDNN's version, so ``plan`` asks: the first time it sees a key (shapes, stride,
padding, dilation, thread count, oneDNN's enabled/deterministic flags and torch's
deterministic mode) it runs torch's forward and ``convolution_backward`` on random tensors
of that shape and keeps each loop whose bits equal torch's (the caller runs torch's op for
the others). Channels are independent, so the loops split them over
threads without changing a bit.

Built in the background (``built_once(background=True)``); until it is built, and where no
C compiler exists, ``plan`` returns None.
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
/* NCHW <-> N, HW, CP (channels last, CP >= C lanes; the extra lanes zero) */
static void to_last(const float *src, float *dst, int64_t N, int64_t C, int64_t HW,
                    int64_t CP) {
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++) {
            const float *s = src + (n * C + c) * HW;
            for (int64_t i = 0; i < HW; i++) dst[(n * HW + i) * CP + c] = s[i];
        }
}

static void from_last(const float *src, float *dst, int64_t N, int64_t C, int64_t HW,
                      int64_t CP) {
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++) {
            float *t = dst + (n * C + c) * HW;
            for (int64_t i = 0; i < HW; i++) t[i] = src[(n * HW + i) * CP + c];
        }
}

/* forward (dir 0: y from x) or input gradient (dir 1: dx from g): each element one FMA
   chain over the taps in (kh, kw) order, the channels side by side. in/out NCHW
   contiguous (x, y / g, dx), w: C KH KW; d as below. Returns 0, or 1 when out of memory */
int tg_depthwise_direct(const float *in, const float *w, float *out, const int64_t *d,
                        int dir, int nthreads) {
    const int64_t N = d[0], C = d[1], H = d[2], W = d[3], OH = d[4], OW = d[5];
    const int64_t KH = d[6], KW = d[7], SH = d[8], SW = d[9], PH = d[10], PW = d[11];
    const int64_t DH = d[12], DW = d[13], T = KH * KW;
    const int64_t CP = (C + 7) / 8 * 8;
    const int64_t IHW = dir == 0 ? H * W : OH * OW, OHW = dir == 0 ? OH * OW : H * W;
    float *src = (float *)calloc((size_t)(N * IHW * CP), sizeof(float));
    float *dst = (float *)calloc((size_t)(N * OHW * CP), sizeof(float));
    float *wt = (float *)calloc((size_t)(T * CP), sizeof(float));
    if (!src || !dst || !wt) { free(src); free(dst); free(wt); return 1; }
    to_last(in, src, N, C, IHW, CP);
    for (int64_t c = 0; c < C; c++)
        for (int64_t t = 0; t < T; t++) wt[t * CP + c] = w[c * T + t];
    const int64_t rows = dir == 0 ? N * OH : N * H;
    #pragma omp parallel for schedule(static) num_threads(nthreads) if(nthreads > 1 && rows > 1)
    for (int64_t r = 0; r < rows; r++) {
        if (dir == 0) {
            const int64_t n = r / OH, oh = r % OH;
            for (int64_t ow = 0; ow < OW; ow++) {
                float *restrict acc = dst + ((n * OH + oh) * OW + ow) * CP;
                for (int64_t kh = 0; kh < KH; kh++) {
                    const int64_t ih = oh * SH - PH + kh * DH;
                    if (ih < 0 || ih >= H) continue;
                    for (int64_t kw = 0; kw < KW; kw++) {
                        const int64_t iw = ow * SW - PW + kw * DW;
                        if (iw < 0 || iw >= W) continue;
                        const float *restrict xv = src + ((n * H + ih) * W + iw) * CP;
                        const float *restrict wv = wt + (kh * KW + kw) * CP;
                        #pragma omp simd
                        for (int64_t c = 0; c < CP; c++) acc[c] = fmaf(xv[c], wv[c], acc[c]);
                    }
                }
            }
        } else {
            const int64_t n = r / H, ih = r % H;
            for (int64_t iw = 0; iw < W; iw++) {
                float *restrict acc = dst + ((n * H + ih) * W + iw) * CP;
                for (int64_t kh = 0; kh < KH; kh++) {
                    const int64_t th = ih + PH - kh * DH;
                    if (th < 0 || th % SH || th / SH >= OH) continue;
                    for (int64_t kw = 0; kw < KW; kw++) {
                        const int64_t tw = iw + PW - kw * DW;
                        if (tw < 0 || tw % SW || tw / SW >= OW) continue;
                        const float *restrict gv = src + ((n * OH + th / SH) * OW + tw / SW) * CP;
                        const float *restrict wv = wt + (kh * KW + kw) * CP;
                        #pragma omp simd
                        for (int64_t c = 0; c < CP; c++) acc[c] = fmaf(gv[c], wv[c], acc[c]);
                    }
                }
            }
        }
    }
    from_last(dst, out, N, C, OHW, CP);
    free(src);
    free(dst);
    free(wt);
    return 0;
}

/* x: N C H W, g: N C OH OW (contiguous); dw: C KH KW. mode 0: oneDNN's gemv order, 1: one
   FMA chain; the channels side by side (each lane its own channel's sums), the taps split
   over threads. Returns 0, or 1 when out of memory. */
int tg_depthwise_weight_grad(const float *x, const float *g, float *dw, const int64_t *d,
                             int mode, int nthreads) {
    const int64_t N = d[0], C = d[1], H = d[2], W = d[3], OH = d[4], OW = d[5];
    const int64_t KH = d[6], KW = d[7], SH = d[8], SW = d[9], PH = d[10], PW = d[11];
    const int64_t DH = d[12], DW = d[13], T = KH * KW, HW = H * W, OS = OH * OW;
    const int64_t CP = (C + 7) / 8 * 8;
    float *xt = (float *)calloc((size_t)(N * HW * CP + CP), sizeof(float));
    float *gt = (float *)calloc((size_t)(N * OS * CP), sizeof(float));
    if (!xt || !gt) { free(xt); free(gt); return 1; }
    const float *zeros = xt + N * HW * CP;          /* CP zeros past the end */
    to_last(x, xt, N, C, HW, CP);
    to_last(g, gt, N, C, OS, CP);
    int failed = 0;
    #pragma omp parallel for schedule(static) num_threads(nthreads) if(nthreads > 1)
    for (int64_t k = 0; k < T; k++) {
        const int64_t kh = k / KW, kw = k % KW;
        float *y = (float *)calloc((size_t)(9 * CP), sizeof(float));
        if (!y) { failed = 1; continue; }
        float *l = y + CP;                           /* 8 lanes of CP */
        for (int64_t n = 0; n < N; n++) {
            const float *xn = xt + n * HW * CP, *gn = gt + n * OS * CP;
            int64_t start = 0;
            /* gemv order: the 16-position blocks into one set of 8 lanes, then 8, 4, 2,
               1; each set summed across its lanes and added to y. chain: one FMA chain */
            for (int part = 0; part < 5; part++) {
                int64_t len;
                if (mode == 1) { if (part) break; len = OS; }
                else if (part == 0) len = OS >= 16 ? OS - OS % 16 : 0;
                else len = (OS - start) & (16 >> part);
                if (!len) continue;
                if (mode == 0) memset(l, 0, sizeof(float) * 8 * CP);
                for (int64_t t = 0; t < len; t++) {
                    const int64_t s = start + t, oh = s / OW, ow = s % OW;
                    const int64_t ih = oh * SH - PH + kh * DH, iw = ow * SW - PW + kw * DW;
                    const float *restrict xv = (ih >= 0 && ih < H && iw >= 0 && iw < W)
                                               ? xn + (ih * W + iw) * CP : zeros;
                    const float *restrict gv = gn + s * CP;
                    float *restrict acc = mode == 1 ? y : l + (t & 7) * CP;
                    #pragma omp simd
                    for (int64_t c = 0; c < CP; c++) acc[c] = fmaf(xv[c], gv[c], acc[c]);
                }
                if (mode == 0) {
                    #pragma omp simd
                    for (int64_t c = 0; c < CP; c++) {
                        const float *q = l + c;
                        const float r = ((q[0] + q[CP]) + (q[4 * CP] + q[5 * CP])) +
                                        ((q[2 * CP] + q[3 * CP]) + (q[6 * CP] + q[7 * CP]));
                        y[c] = fmaf(1.0f, r, y[c]);
                    }
                }
                start += len;
            }
        }
        for (int64_t c = 0; c < C; c++) dw[c * T + k] = y[c];
        free(y);
    }
    free(xt);
    free(gt);
    return failed;
}
"""


class _Loops:
    def __init__(self, lib):
        self.weight = lib.tg_depthwise_weight_grad
        self.direct = lib.tg_depthwise_direct
        for fn in (self.weight, self.direct):
            fn.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int, ctypes.c_int]
            fn.restype = ctypes.c_int


_function = built_once("tg_depthwise_bits", lambda: SOURCE, _Loops, background=True)
Key = Tuple


class Plan:
    """Which loops give torch's bits at one key: ``forward`` and ``input_grad`` (bools)
    and ``weight_mode`` (a ``MODES`` value or None)."""

    def __init__(self, loops: _Loops, key: Key):
        xs, ws, ys, stride, padding, dilation = key
        self.loops, self.dims = loops, torch.tensor(
            [*xs, ys[2], ys[3], ws[2], ws[3], *stride, *padding, *dilation],
            dtype=torch.int64)
        self.x_shape, self.w_shape, self.y_shape = xs, ws, ys
        g = torch.Generator().manual_seed(1234)
        x = torch.randn(xs, generator=g) * 2 + 0.5
        w = torch.randn(ws, generator=g)
        grad = torch.randn(ys, generator=g)
        y = torch.conv2d(x, w, None, stride, padding, dilation, xs[1])
        dx, dw, _ = torch.ops.aten.convolution_backward(
            grad, x, w, None, list(stride), list(padding), list(dilation), False, [0, 0],
            xs[1], [True, True, False])
        self.forward_ok = self.input_grad_ok = True
        self.forward_ok = _same(self.forward(x, w), y)
        self.input_grad_ok = _same(self.input_grad(grad, w), dx)
        self.weight_mode = None
        for mode in MODES.values():
            self.weight_mode = mode
            if _same(self.weight_grad(x, grad), dw):
                break
            self.weight_mode = None

    def forward(self, x, w) -> Optional[torch.Tensor]:
        if not self.forward_ok:
            return None
        y = x.new_empty(self.y_shape)
        failed = self.loops.direct(x.data_ptr(), w.data_ptr(), y.data_ptr(),
                                   self.dims.data_ptr(), 0, torch.get_num_threads())
        return None if failed else y

    def input_grad(self, grad, w) -> Optional[torch.Tensor]:
        if not self.input_grad_ok:
            return None
        dx = grad.new_empty(self.x_shape)
        failed = self.loops.direct(grad.data_ptr(), w.data_ptr(), dx.data_ptr(),
                                   self.dims.data_ptr(), 1, torch.get_num_threads())
        return None if failed else dx

    def weight_grad(self, x, grad) -> Optional[torch.Tensor]:
        if self.weight_mode is None:
            return None
        dw = x.new_empty(self.w_shape)
        failed = self.loops.weight(x.data_ptr(), grad.data_ptr(), dw.data_ptr(),
                                   self.dims.data_ptr(), self.weight_mode,
                                   torch.get_num_threads())
        return None if failed else dw


def _same(got: Optional[torch.Tensor], want: torch.Tensor) -> bool:
    return got is not None and got.stride() == want.stride() and torch.equal(got, want)


_plans: Dict[Key, Plan] = {}
_lock = threading.Lock()


def plan(x: torch.Tensor, weight: torch.Tensor, stride, padding,
         dilation) -> Optional[Plan]:
    """The loops for ``conv2d(x, weight, None, stride, padding, dilation, groups=C)``;
    None when they are not built (yet). The caller has checked: float32 CPU, ``x``
    contiguous 4-D, ``weight`` ``[C, 1, KH, KW]`` contiguous, int pairs; it passes
    contiguous tensors of the same shapes to the plan's methods."""
    loops = _function()
    if loops is None:
        return None
    xs, ws = tuple(x.shape), tuple(weight.shape)
    key = (xs, ws, stride, padding, dilation, torch.get_num_threads(),
           torch._C._get_mkldnn_enabled(), torch._C._get_mkldnn_deterministic(),
           torch.are_deterministic_algorithms_enabled())
    found = _plans.get(key)
    if found is None:
        with _lock:
            found = _plans.get(key)
            if found is None:
                oh = (xs[2] + 2 * padding[0] - dilation[0] * (ws[2] - 1) - 1) // stride[0] + 1
                ow = (xs[3] + 2 * padding[1] - dilation[1] * (ws[3] - 1) - 1) // stride[1] + 1
                with torch.no_grad():
                    found = _plans[key] = Plan(loops, (xs, ws, (xs[0], xs[1], oh, ow),
                                                       stride, padding, dilation))
    return found
