"""``torch.optim.Adam.step()`` and ``AdamW.step()`` as one C loop per parameter group, bit
for bit eager's.

A converted training step calls the optimizer's ``step`` when the graph runs
(``autograd_effects.call_method``). For Adam/AdamW on CPU eager runs ``_single_tensor_adam``:
per parameter 8 to 11 ATen calls (``step_t += 1``, ``exp_avg.lerp_``, ``exp_avg_sq.mul_
.addcmul_``, ``sqrt``, ``/``, ``add_(eps)``, ``param.addcdiv_``, ...) and their Python:
GPT-2 tiny's 28 parameters, 1 thread, 1.2 ms (Adam) / 1.9 ms (AdamW) against 0.5 / 0.6 ms
here, on a loaded 2-core machine; with 2 threads eager's ``sqrt`` opens an OpenMP region
from 2048 elements on, which a loaded machine makes 10-150 ms. ``run(opt)`` does the same
update in one C call per parameter group (and equal step count), each element rounded as
ATen rounds it (float32 only; the experiments are in ``tests/training/
test_adam_step_kernel.py``'s docstring):

- ``lerp_(g, w)`` is ATen's vectorized ``lerp``: ``fma(w, g - m, m)`` for ``|w| < 0.5``,
  else ``fma(w - 1, g - m, g)`` (the scalar tail contracts its formula to the same FMA);
  ``addcmul_(g, g, value=c)`` is ``fma(c * g, g, v)``; ``grad.add(param, alpha=wd)`` is
  ``fma(param, wd, grad)``; ``mul``, ``/``, ``+ eps`` and ``addcdiv`` (``p + (c * m) / d``)
  round once per op; ``maximize`` negates exactly; ``torch.maximum`` propagates NaN.
- ``sqrt`` is *not* correctly rounded in torch on an MKL build: ATen calls MKL's
  ``vmsSqrt`` (one element in six is 1 ulp off IEEE's sqrt here). MKL's result depends on
  the element alone (checked: calls of any length and alignment give the same bits), so
  the loop calls the very same ``vmsSqrt_64`` of ``libtorch_cpu`` on blocks of 1024; on a
  build without it, ``sqrtf``. Which of the two gives torch's bits is decided by the check
  below, once per process and thread count.
- the Python-double scalars are computed in Python as torch computes them (``1 - beta1 **
  step``, ``lr / bias_correction1``, ``bias_correction2 ** 0.5``, ``1 - lr * weight_decay``)
  from the incremented float32 step, then cast to float32 as ATen casts a Scalar.

Every element goes through the same formula, so how a large parameter is split over threads
does not change a bit. ``run`` returns False, having changed nothing, whenever it would not
do exactly what ``opt.step()`` does; the caller then calls ``opt.step()``: a subclass or a
``step`` other than torch's own (an lr scheduler's wrapper is kept), step hooks,
``foreach``/``fused``/``capturable``/``differentiable``, a tensor ``lr`` or beta,
GradScaler's ``grad_scale``/``found_inf``, a parameter, gradient or state tensor that is not
a dense contiguous float32 CPU tensor, a ``step`` that is not a float32 0-dim CPU tensor or
is shared, a first step (state not made yet), no C compiler, or a process where the
self-check found torch's rounding different. ``state["step"]`` is incremented in place as
``step_t += 1`` does, and version counters move as eager's in-place ops move them
(parameters +1, +2 with AdamW's decay; ``exp_avg`` +1, ``exp_avg_sq`` +2,
``max_exp_avg_sq`` +1, ``step`` +1).
"""
from __future__ import annotations

import ctypes
import os
from typing import List, Optional

import torch

from .built_once import built_once
from .optimizer_steps import (PerThreads, agrees_with_torch, array, dense,
                              increment_version, number, run_in_c, split_loop)

SOURCE = r"""
#include <math.h>
#include <stdint.h>

/* MKL's vmsSqrt_64(n, a, r, mode): torch's sqrt on an MKL build; NULL: sqrtf */
typedef void (*root_fn)(int64_t, const float *, float *, long long);
#define BLOCK 1024
#define MKL_MODE 0x140102LL             /* VML_HA | VML_FTZDAZ_OFF | VML_ERRMODE_IGNORE */

/* hp = {wd, decay, w (1 - beta1), beta2, 1 - beta2, bias_correction2_sqrt, eps,
   -step_size}; flags: 1 L2 weight decay, 2 decoupled decay, 4 amsgrad, 8 maximize */
static inline __attribute__((always_inline)) void
one_(float *p, const float *gr, float *m, float *v, float *mx, int64_t n, const float *hp,
     const int flags, root_fn root) {
  const float wd = hp[0], decay = hp[1], w = hp[2], b2 = hp[3], c2 = hp[4], bc2 = hp[5],
              eps = hp[6], neg_step = hp[7];
  const int small = fabsf(w) < 0.5f;
  const float coeff = small ? w : w - 1.0f;
  float s[BLOCK];
  for (int64_t lo = 0; lo < n; lo += BLOCK) {
    const int64_t len = n - lo < BLOCK ? n - lo : BLOCK;
    float *pb = p + lo, *mb = m + lo, *vb = v + lo, *xb = mx ? mx + lo : 0;
    const float *gb = gr + lo;
    #pragma omp simd
    for (int64_t i = 0; i < len; i++) {
      float g = (flags & 8) ? -gb[i] : gb[i];
      if (flags & 1) g = fmaf(pb[i], wd, g);
      const float mi = mb[i];
      mb[i] = fmaf(coeff, g - mi, small ? mi : g);
      float vi = vb[i] * b2;
      vi = fmaf(c2 * g, g, vi);
      vb[i] = vi;
      if (flags & 4) {
        const float xi = xb[i];
        vi = (xi != xi || vi != vi) ? xi + vi : (xi > vi ? xi : vi);
        xb[i] = vi;
      }
      s[i] = vi;
    }
    if (root) root(len, s, s, MKL_MODE);
    else {
      #pragma omp simd
      for (int64_t i = 0; i < len; i++) s[i] = sqrtf(s[i]);
    }
    #pragma omp simd
    for (int64_t i = 0; i < len; i++) {
      const float d = s[i] / bc2 + eps;
      float pi = pb[i];
      if (flags & 2) pi = pi * decay;
      pb[i] = pi + (neg_step * mb[i]) / d;
    }
  }
}

#define CASE(f) case f: one_(p, g, m, v, mx, n, hp, f, root); return;
static void one(float *p, const float *g, float *m, float *v, float *mx, int64_t n,
                const float *hp, int flags, root_fn root) {
  switch (flags) {
  CASE(0) CASE(1) CASE(2) CASE(3) CASE(4) CASE(5) CASE(6) CASE(7)
  CASE(8) CASE(9) CASE(10) CASE(11) CASE(12) CASE(13) CASE(14) CASE(15)
  }
}

void tg_adam_f32(int64_t count, float **params, float **grads, float **ms, float **vs,
                 float **mxs, float **steps, const int64_t *sizes, const float *hp,
                 int flags, void *root, int nthreads) {
  for (int64_t k = 0; k < count; k++) {
    const int64_t n = sizes[k];
    float *mx = mxs ? mxs[k] : 0;
    *steps[k] += 1.0f;                                  /* step_t += 1 */""" + split_loop(
    "one(params[k] + lo, grads[k] + lo, ms[k] + lo, vs[k] + lo, mx ? mx + lo : 0, len, hp, "
    "flags, (root_fn)root)") + r"""
  }
}
"""


def _bind(lib):
    fn = lib.tg_adam_f32
    fn.argtypes = [ctypes.c_int64] + [ctypes.c_void_p] * 8 + [ctypes.c_int, ctypes.c_void_p,
                                                              ctypes.c_int]
    fn.restype = None
    return fn


_function = built_once("tg_adam_step", lambda: SOURCE, _bind, background=True)

_ADAMS = (torch.optim.Adam, torch.optim.AdamW)
_STEP_DTYPE = torch.float32


def _mkl_sqrt() -> Optional[int]:
    """Address of MKL's ``vmsSqrt_64`` in ``libtorch_cpu`` (what ATen's ``sqrt`` calls on an
    MKL build), or None."""
    try:
        lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib",
                                       "libtorch_cpu.so"))
        return ctypes.cast(lib.vmsSqrt_64, ctypes.c_void_p).value
    except (OSError, AttributeError):
        return None


def _f32(x: float) -> float:
    return ctypes.c_float(x).value


class _Call:
    """One C call: the parameters of one group whose step counts are equal, with their
    pointer arrays, hyperparameters and the tensors whose version counters move."""

    __slots__ = ("count", "ptrs", "sizes", "hp", "flags", "once", "again")


def _step_tensor(t) -> bool:
    return type(t) is torch.Tensor and t.dtype is _STEP_DTYPE and t.dim() == 0 and \
        t.is_cpu and not t.requires_grad and not t.is_inference()


def _scalars(group, step: float) -> List[float]:
    """The C call's ``hp`` for this step count, as ``_single_tensor_adam`` computes it."""
    lr, (beta1, beta2), eps, wd = group["lr"], group["betas"], group["eps"], \
        group["weight_decay"]
    bias_correction1 = 1 - beta1 ** step
    bias_correction2 = 1 - beta2 ** step
    step_size = lr / bias_correction1
    bias_correction2_sqrt = bias_correction2 ** 0.5
    decay = 1 - lr * wd if wd != 0 and group["decoupled_weight_decay"] else 1
    return [wd, decay, 1 - beta1, beta2, 1 - beta2, bias_correction2_sqrt, eps, -step_size]


def _group_ok(group) -> bool:
    if group.get("foreach") or group.get("fused") or group.get("capturable") or \
            group.get("differentiable"):
        return False
    betas = group["betas"]
    return number(group["lr"]) and number(group["eps"]) and number(group["weight_decay"]) \
        and type(betas) in (tuple, list) and len(betas) == 2 and number(betas[0]) and \
        number(betas[1]) and type(group["amsgrad"]) is bool and \
        type(group["maximize"]) is bool and type(group["decoupled_weight_decay"]) is bool


def _plan(opt) -> Optional[List[_Call]]:
    """The C calls ``opt.step()`` amounts to; None where ``run`` must not run."""
    state = opt.state
    calls, seen_steps = [], set()
    for group in opt.param_groups:
        if not _group_ok(group):
            return None
        amsgrad = group["amsgrad"]
        names = ("exp_avg", "exp_avg_sq", "max_exp_avg_sq") if amsgrad else \
            ("exp_avg", "exp_avg_sq")
        by_step: dict = {}              # step count before the step -> [(p, g, state..)]
        for p in group["params"]:
            g = p.grad
            if g is None:
                continue
            if not dense(p) or not dense(g) or g.shape != p.shape:
                return None
            entry = state.get(p)
            if not entry:
                return None             # a first step: eager makes the state
            step_t = entry.get("step")
            if not _step_tensor(step_t) or id(step_t) in seen_steps:
                return None
            seen_steps.add(id(step_t))
            buffers = [entry.get(name) for name in names]
            for b in buffers:
                if b is None or not dense(b) or b.shape != p.shape:
                    return None
            by_step.setdefault(step_t.item(), []).append((p, g, buffers, step_t))
        wd = group["weight_decay"]
        flags = (0 if wd == 0 else 2 if group["decoupled_weight_decay"] else 1) | \
            (4 if amsgrad else 0) | (8 if group["maximize"] else 0)
        for before, members in by_step.items():
            call = _Call()
            call.count = len(members)
            columns = [[p.data_ptr() for p, _, _, _ in members],
                       [g.data_ptr() for _, g, _, _ in members]]
            for i in range(len(names)):
                columns.append([b[i].data_ptr() for _, _, b, _ in members])
            if not amsgrad:
                columns.append(None)
            columns.append([s.data_ptr() for _, _, _, s in members])
            call.ptrs = [array(ctypes.c_void_p, c) if c is not None else None
                         for c in columns]
            call.sizes = array(ctypes.c_int64, [p.numel() for p, _, _, _ in members])
            call.hp = array(ctypes.c_float, _scalars(group, _f32(before + 1)))  # step_t += 1
            call.flags = flags
            params = [p for p, _, _, _ in members]
            # eager's in-place ops: params addcdiv_ (and AdamW's mul_), exp_avg lerp_,
            # exp_avg_sq mul_ and addcmul_, max_exp_avg_sq maximum(out=), step_t += 1
            squares = [b[1] for _, _, b, _ in members]
            call.once = params + squares + [b[0] for _, _, b, _ in members] + \
                [s for _, _, _, s in members] + \
                ([b[2] for _, _, b, _ in members] if amsgrad else [])
            call.again = squares + (params if flags & 2 else [])
            calls.append(call)
    return calls


def _call(fn, call: _Call, root: Optional[int], nthreads: int) -> None:
    fn(call.count, *call.ptrs, call.sizes, call.hp, call.flags, root, nthreads)
    increment_version(call.once)
    increment_version(call.again)


def run(opt) -> bool:
    """Do ``opt.step()`` in C and return True, or change nothing and return False."""
    return type(opt) in _ADAMS and run_in_c(opt, _function, _matches_torch, _plan, _call)


def _sqrt_matching_torch(fn, nthreads: int):
    """The sqrt (MKL's address, or None for ``sqrtf``) with which the kernel gives torch's
    Adam/AdamW bits here, or False."""
    for root in (_mkl_sqrt(), None):
        if _self_check(fn, root, nthreads):
            return root
    return False


_matches_torch = PerThreads(_sqrt_matching_torch)


CHECKS = ((torch.optim.Adam, dict()),
          (torch.optim.Adam, dict(betas=(0.3, 0.99), eps=1e-6, weight_decay=1e-2,
                                  maximize=True)),
          (torch.optim.Adam, dict(lr=0.1, betas=(0.5, 0.9), amsgrad=True, weight_decay=3e-4)),
          (torch.optim.AdamW, dict()),
          (torch.optim.AdamW, dict(lr=3e-3, betas=(0.8, 0.95), eps=1e-5, weight_decay=0.1,
                                   amsgrad=True, maximize=True)))


def _self_check(fn, root: Optional[int], nthreads: int) -> bool:
    """Whether the kernel with ``root`` gives torch's bits: every flag, both lerp branches,
    sizes around the vector widths and over the parallel threshold, four steps (gradients
    from 1e-2 to 10 times the unit)."""
    sizes = [1, 7, 16, 17, 31, 33, 100, 1025, 65536 + 37]
    gen = torch.Generator().manual_seed(0)

    def run(opt) -> bool:
        plan = _plan(opt)
        for call in plan or ():
            _call(fn, call, root, nthreads)
        return plan is not None

    return all(agrees_with_torch(cls, kw, sizes, 4, gen, run, lambda step: 10 ** (step - 2))
               for cls, kw in CHECKS)
