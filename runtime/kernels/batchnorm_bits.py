"""A float32 train-mode BatchNorm (NCHW contiguous) with an activation after it, forward and
backward as C loops with torch's own bits (issue 15: CNN training must be eager's
arithmetic bit for bit).

ATen's CPU kernels (``batch_norm_kernel.cpp``, ``Normalization.cpp``) order the sums as
follows, reproduced here:

- forward statistics: per channel, one double sum over the batch and the positions in
  order (``mean = float(sum / N)``), then one double sum of ``float((x - mean)^2)``; the
  saved ``invstd = float(1 / sqrt(double(var_sum / N) + eps))``; the running statistics
  ``stat * m + running * (1 - m)`` in float, each rounded three times or its last two
  steps one FMA (torch 2.13 on Zen 5: the mean plain, the variance fused), the variance
  unbiased (``var_sum / (N - 1)`` in float); These loops keep each channel's chain and run channels side by
  side (8 chains at a time), which changes no bit;
- the transform ``x * alpha + beta`` (``alpha = invstd * w``, ``beta = b - mean * alpha``),
  each of the two either rounded twice or one FMA (how the compiler built ATen);
- backward: per channel and batch item, ``vec::reduce_all`` of the output gradient and
  ``vec::map2_reduce_all`` of ``(x - mean) * dy``: W lanes (8: AVX2, 16: AVX-512) summed
  over W-position steps, a partial last step on the first lanes (the dot product plain or
  as FMAs in each: torch 2.13 on Zen 5 sums 8 lanes, plain, then fused), then a butterfly ``v[i] + v[i ^ s]`` for s = W/2 .. 1 (spans shorter than W:
  one chain over the lanes); each item's float result added into a double; then
  ``dx = (dy - sum / N - (x - mean) * k) * invstd * w`` (the last subtraction plain or an
  FMA).

The activation after it (``act``: 0 none, 1 hardswish, 2 relu) is applied in the same pass
and its derivative taken from the recomputed pre-activation in the backward, so the node
writes and saves one tensor fewer than eager's two ops. hardswish' at exactly 3 and at
NaN differs between ATen's vector and scalar loops (which depends on the position), so a
backward meeting one answers 2 and the caller runs torch's ops.

Which variant torch uses depends on the CPU and the build: ``plan`` asks once per key
(shape, activation, thread count, CPU capability) by running torch's ops on random data
and keeps the first variant whose every output is bit-equal (None: torch's ops). Built in
the background (``built_once(background=True)``); until then ``plan`` returns None.
"""
from __future__ import annotations

import ctypes
import threading
from typing import Dict, Optional, Tuple

import torch
import torch.nn.functional as F

from .built_once import built_once

ACTS = {None: 0, "hardswish": 1, "relu": 2}

SOURCE = r"""
#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float tg_act(float z, int act) {
    if (act == 1) {
        float t = z + 3.0f;
        t = t < 0.0f ? 0.0f : t;
        t = t > 6.0f ? 6.0f : t;
        return z * t / 6.0f;
    }
    if (act == 2) return z < 0.0f ? 0.0f : z;
    return z;
}

/* x, y: N C HW contiguous; w, b, rm, rv, mean, invstd: C. d = {N, C, HW}. mode bit 1:
   beta as one FMA, bit 2: the transform as one FMA, bits 4 and 8: the running mean's and
   variance's update as one FMA. rm/rv may be NULL. */
void tg_bn_forward(const float *x, const float *w, const float *b, float *rm, float *rv,
                   float *y, float *mean_out, float *invstd_out, const int64_t *d,
                   double momentum, double eps, int act, int mode, int nthreads) {
    const int64_t N = d[0], C = d[1], HW = d[2], M = N * HW;
    const float mf = (float)momentum, keep = (float)(1 - momentum);
    #pragma omp parallel for schedule(static) num_threads(nthreads) if(nthreads > 1)
    for (int64_t cb = 0; cb < C; cb += 8) {
        const int64_t nb = C - cb < 8 ? C - cb : 8;
        double s[8] = {0}, v[8] = {0};
        float mean[8];
        for (int64_t n = 0; n < N; n++)
            for (int64_t i = 0; i < HW; i++)
                for (int64_t j = 0; j < nb; j++) s[j] += x[(n * C + cb + j) * HW + i];
        for (int64_t j = 0; j < nb; j++) mean[j] = (float)(s[j] / (double)M);
        for (int64_t n = 0; n < N; n++)
            for (int64_t i = 0; i < HW; i++)
                for (int64_t j = 0; j < nb; j++) {
                    const float e = x[(n * C + cb + j) * HW + i] - mean[j];
                    v[j] += (double)(e * e);
                }
        for (int64_t j = 0; j < nb; j++) {
            const int64_t c = cb + j;
            const float var_sum = (float)v[j];
            const double var = (double)(var_sum / (float)M);
            const float invstd = (var != 0.0 || eps != 0.0) ? (float)(1.0 / sqrt(var + eps))
                                                           : 0.0f;
            mean_out[c] = mean[j];
            invstd_out[c] = invstd;
            const float unbiased = var_sum / (float)(M - 1);
            if (rm) rm[c] = (mode & 4) ? fmaf(mean[j], mf, rm[c] * keep) : mean[j] * mf + rm[c] * keep;
            if (rv) rv[c] = (mode & 8) ? fmaf(unbiased, mf, rv[c] * keep) : unbiased * mf + rv[c] * keep;
            const float alpha = invstd * w[c];
            const float beta = (mode & 1) ? fmaf(-mean[j], alpha, b[c]) : b[c] - mean[j] * alpha;
            for (int64_t n = 0; n < N; n++) {
                const float *xs = x + (n * C + c) * HW;
                float *ys = y + (n * C + c) * HW;
                if (mode & 2) {
                    #pragma omp simd
                    for (int64_t i = 0; i < HW; i++) ys[i] = tg_act(fmaf(xs[i], alpha, beta), act);
                } else {
                    #pragma omp simd
                    for (int64_t i = 0; i < HW; i++) ys[i] = tg_act(xs[i] * alpha + beta, act);
                }
            }
        }
    }
}

/* ATen's vec::reduce_all (of g) and vec::map2_reduce_all (of (x - mean) * g) over one span,
   with W lanes: the first W positions, full W-position steps, a partial last step on the
   first lanes, then a butterfly v[i] + v[i ^ s] for s = W/2 .. 1; spans shorter than W one
   chain. The dot product fused (FMA) into the lanes in the full steps (fma bit 1) and the
   partial last one (bit 2). */
#define TG_REDUCE(W)                                                                      \
static void tg_reduce##W(const float *restrict g, const float *restrict x, float mean,    \
                         int64_t size, int fma, float *sum, float *dot) {                 \
    if (size < W) {                                                                       \
        float s = g[0], d = (x[0] - mean) * g[0];                                         \
        for (int64_t i = 1; i < size; i++) { s = s + g[i]; d = d + (x[i] - mean) * g[i]; } \
        *sum = s; *dot = d;                                                               \
        return;                                                                           \
    }                                                                                     \
    float ls[W], ld[W];                                                                   \
    for (int j = 0; j < W; j++) { ls[j] = g[j]; ld[j] = (x[j] - mean) * g[j]; }           \
    int64_t k = W;                                                                        \
    const int64_t full = size - size % W;                                                 \
    if (fma & 1)                                                                          \
        for (; k < full; k += W)                                                          \
            for (int j = 0; j < W; j++) {                                                 \
                ls[j] = ls[j] + g[k + j];                                                 \
                ld[j] = fmaf(x[k + j] - mean, g[k + j], ld[j]);                           \
            }                                                                             \
    else                                                                                  \
        for (; k < full; k += W)                                                          \
            for (int j = 0; j < W; j++) {                                                 \
                ls[j] = ls[j] + g[k + j];                                                 \
                ld[j] = ld[j] + (x[k + j] - mean) * g[k + j];                             \
            }                                                                             \
    for (int j = 0; j < size - k; j++) {                                                  \
        ls[j] = ls[j] + g[k + j];                                                         \
        ld[j] = (fma & 2) ? fmaf(x[k + j] - mean, g[k + j], ld[j])                        \
                          : ld[j] + (x[k + j] - mean) * g[k + j];                         \
    }                                                                                     \
    for (int s = W / 2; s >= 1; s /= 2) {                                                 \
        float ts[W], td[W];                                                               \
        for (int j = 0; j < W; j++) { ts[j] = ls[j] + ls[j ^ s]; td[j] = ld[j] + ld[j ^ s]; } \
        for (int j = 0; j < W; j++) { ls[j] = ts[j]; ld[j] = td[j]; }                     \
    }                                                                                     \
    *sum = ls[0]; *dot = ld[0];                                                           \
}
TG_REDUCE(8)
TG_REDUCE(16)

/* dz = act'(z) * g for one span, z recomputed as the forward did (fmode bit 2: FMA).
   Returns 1 when hardswish' met z of exactly 3 or NaN. */
static int tg_act_grad(const float *restrict x, const float *restrict g, float *restrict out,
                       int64_t size, float alpha, float beta, int act, int fmode) {
    int edge = 0;
    if (act == 1) {
        #pragma omp simd reduction(|:edge)
        for (int64_t i = 0; i < size; i++) {
            const float z = (fmode & 2) ? fmaf(x[i], alpha, beta) : x[i] * alpha + beta;
            edge |= (z == 3.0f) | (z != z);
            const float mid = g[i] * ((z / 3.0f) + 0.5f);
            out[i] = z < -3.0f ? 0.0f : (z >= 3.0f ? g[i] : mid);
        }
    } else {
        #pragma omp simd
        for (int64_t i = 0; i < size; i++) {
            const float z = (fmode & 2) ? fmaf(x[i], alpha, beta) : x[i] * alpha + beta;
            out[i] = z <= 0.0f ? 0.0f : g[i];
        }
    }
    return edge;
}

/* x, g, dx: N C HW contiguous; w, b, mean, invstd, dw, db: C. fmode: the forward's mode
   (to recompute the pre-activation); bmode bit 1: the dot product's full steps as FMAs,
   bit 2: dx's last subtraction as an FMA, bit 4: the dot product's partial last step as
   FMAs. W: 8 or 16 lanes. Returns 0, or 2 when hardswish' met a pre-activation of exactly
   3 or NaN. */
int tg_bn_backward(const float *x, const float *g, const float *w, const float *b,
                   const float *mean, const float *invstd, float *dx, float *dw, float *db,
                   const int64_t *d, int act, int fmode, int bmode, int W, int nthreads) {
    const int64_t N = d[0], C = d[1], HW = d[2], M = N * HW;
    const int dot_fma = (bmode & 1) | ((bmode >> 1) & 2);
    int edge = 0;
    #pragma omp parallel for schedule(static) num_threads(nthreads) if(nthreads > 1) reduction(|:edge)
    for (int64_t c = 0; c < C; c++) {
        const float m = mean[c], is = invstd[c], wc = w[c];
        const float alpha = is * wc;
        const float beta = (fmode & 1) ? fmaf(-m, alpha, b[c]) : b[c] - m * alpha;
        double sum = 0, dotp = 0;
        for (int64_t n = 0; n < N; n++) {
            const int64_t at = (n * C + c) * HW;
            const float *gs = g + at;
            if (act) {                  /* dz into dx, read back below */
                edge |= tg_act_grad(x + at, g + at, dx + at, HW, alpha, beta, act, fmode);
                gs = dx + at;
            }
            float s, t;
            if (W == 16) tg_reduce16(gs, x + at, m, HW, dot_fma, &s, &t);
            else tg_reduce8(gs, x + at, m, HW, dot_fma, &s, &t);
            sum += (double)s;
            dotp += (double)t;
        }
        const float k = (float)dotp * is * is / (float)M;
        const float grad_mean = (float)(sum / (double)M);
        for (int64_t n = 0; n < N; n++) {
            const int64_t at = (n * C + c) * HW;
            const float *restrict xs = x + at, *gs = act ? dx + at : g + at;
            float *out = dx + at;
            if (bmode & 2) {
                #pragma omp simd
                for (int64_t i = 0; i < HW; i++)
                    out[i] = fmaf(-(xs[i] - m), k, gs[i] - grad_mean) * is * wc;
            } else {
                #pragma omp simd
                for (int64_t i = 0; i < HW; i++)
                    out[i] = (gs[i] - grad_mean - (xs[i] - m) * k) * is * wc;
            }
        }
        dw[c] = (float)(dotp * (double)is);
        db[c] = (float)sum;
    }
    return edge ? 2 : 0;
}
"""


class _Loops:
    def __init__(self, lib):
        self.forward = lib.tg_bn_forward
        self.forward.argtypes = [ctypes.c_void_p] * 9 + [ctypes.c_double] * 2 + \
            [ctypes.c_int] * 3
        self.forward.restype = None
        self.backward = lib.tg_bn_backward
        self.backward.argtypes = [ctypes.c_void_p] * 10 + [ctypes.c_int] * 5
        self.backward.restype = ctypes.c_int


_function = built_once("tg_batchnorm_bits", lambda: SOURCE, _Loops, background=True)
Key = Tuple
_NULL = None


def _ptr(t: Optional[torch.Tensor]):
    return None if t is None else t.data_ptr()


class Plan:
    """The variant of the loops that gives torch's bits at one key (shape, activation):
    ``fmode`` for the forward, ``bmode`` and ``width`` for the backward; ``ok`` False when
    none does."""

    FORWARD_MODES = (11, 3, 15, 7) + tuple(m for m in range(16) if m not in (11, 3, 15, 7))
    BACKWARD_MODES = tuple((w, m) for w in (8, 16) for m in (2, 6, 0, 4, 3, 7, 1, 5))

    def __init__(self, loops: _Loops, shape: tuple, act: Optional[str], momentum: float,
                 eps: float):
        self.loops, self.shape, self.act = loops, shape, ACTS[act]
        self.momentum, self.eps = momentum, eps
        self.dims = torch.tensor([shape[0], shape[1], shape[2] * shape[3]], dtype=torch.int64)
        self.fmode, self.bmode, self.width = 0, 0, 8
        self.ok = self._search(act)

    def _search(self, act) -> bool:
        g = torch.Generator().manual_seed(4321)
        n, c = self.shape[:2]
        x = torch.randn(self.shape, generator=g) * 2 + 0.5
        w = torch.randn(c, generator=g) * 2
        b = torch.randn(c, generator=g)
        rm, rv = torch.randn(c, generator=g), torch.rand(c, generator=g) + 0.5
        grad = torch.randn(self.shape, generator=g)
        rm_t, rv_t = rm.clone(), rv.clone()
        momentum, eps = self.momentum, self.eps
        z, mean, invstd = torch.native_batch_norm(x, w, b, rm_t, rv_t, True, momentum, eps)
        y = {"hardswish": F.hardswish, "relu": torch.relu, None: lambda t: t}[act](z)
        if act == "hardswish":
            dz = torch.ops.aten.hardswish_backward(grad, z)
        elif act == "relu":
            dz = torch.ops.aten.threshold_backward(grad, y, 0)
        else:
            dz = grad
        want = torch.ops.aten.native_batch_norm_backward(
            dz, x, w, rm_t, rv_t, mean, invstd, True, eps, [True, True, True])
        for fmode in self.FORWARD_MODES:
            self.fmode = fmode
            rm_m, rv_m = rm.clone(), rv.clone()
            got = self.forward(x, w, b, rm_m, rv_m, momentum, eps)
            if all(torch.equal(a, b_) for a, b_ in zip((*got, rm_m, rv_m),
                                                       (y, mean, invstd, rm_t, rv_t))):
                break
        else:
            return False
        for width, bmode in self.BACKWARD_MODES:
            self.width, self.bmode = width, bmode
            got = self.backward(x, grad, w, b, mean, invstd)
            if got is not None and all(torch.equal(a, b_) for a, b_ in zip(got, want)):
                return True
        return False

    def forward(self, x, w, b, rm, rv, momentum: float, eps: float):
        """(y, save_mean, save_invstd); ``rm``/``rv`` (or None) updated in place."""
        c = self.shape[1]
        y = torch.empty_like(x)
        mean, invstd = x.new_empty(c), x.new_empty(c)
        self.loops.forward(x.data_ptr(), w.data_ptr(), b.data_ptr(), _ptr(rm), _ptr(rv),
                           y.data_ptr(), mean.data_ptr(), invstd.data_ptr(),
                           self.dims.data_ptr(), momentum, eps, self.act, self.fmode,
                           torch.get_num_threads())
        return y, mean, invstd

    def backward(self, x, grad, w, b, mean, invstd):
        """(dx, dw, db), or None where the activation's derivative needs torch's ops."""
        dx = torch.empty_like(x)
        dw, db = w.new_empty(w.shape), w.new_empty(w.shape)
        edge = self.loops.backward(x.data_ptr(), grad.data_ptr(), w.data_ptr(), b.data_ptr(),
                                   mean.data_ptr(), invstd.data_ptr(), dx.data_ptr(),
                                   dw.data_ptr(), db.data_ptr(), self.dims.data_ptr(),
                                   self.act, self.fmode, self.bmode, self.width,
                                   torch.get_num_threads())
        return None if edge else (dx, dw, db)


_plans: Dict[Key, Plan] = {}
_lock = threading.Lock()


def plan(x: torch.Tensor, act: Optional[str], momentum: float, eps: float) -> Optional[Plan]:
    """The loops for a train-mode batch norm of ``x`` (float32 CPU, NCHW contiguous, more
    than one value per channel; the caller checked) followed by ``act``; None when they are
    not built yet or give other bits than torch's here (checked once per shape,
    activation, momentum, eps, thread count and CPU capability)."""
    loops = _function()
    if loops is None:
        return None
    key = (tuple(x.shape), act, momentum, eps, torch.get_num_threads(),
           torch.backends.cpu.get_cpu_capability())
    found = _plans.get(key)
    if found is None:
        with _lock:
            found = _plans.get(key)
            if found is None:
                with torch.no_grad():
                    found = _plans[key] = Plan(loops, key[0], act, momentum, eps)
    return found if found.ok else None
