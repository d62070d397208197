"""``torch.optim.SGD.step()`` as one C loop over every parameter, bit for bit eager's.

A converted training step calls the optimizer's ``step`` when the graph runs
(``autograd_effects.call_method``). For SGD on CPU, eager runs ``_single_tensor_sgd``: per
parameter two to five ATen calls (``buf.mul_(momentum).add_(grad, alpha=1 - dampening)``,
``param.add_(buf, alpha=-lr)``, ...) and ~10 us of Python, ~0.45 ms for GPT-2 tiny's 28
parameters at 2 threads, 10-15% of its training step. ``run(opt)`` does the same update in
one C call per parameter group, rounding every value as ATen does (float32 only):

- ``add(a, b, alpha)`` is ``fma(b, alpha, a)``: ATen's vectorized ``add`` kernel is
  ``vec::fmadd(other, alpha, self)`` and its scalar tail contracts to an FMA as well
  (checked against torch once per process and thread count, below); ``mul`` by a scalar
  rounds once; ``maximize`` negates exactly. Every element goes through the same formula,
  so how the loop is split over threads does not change a bit.
- the scalars are float32 as ATen casts them (``float(momentum)``, ``float(-lr)``, ...).

``run`` returns False, having changed nothing, whenever it would not do exactly what
``opt.step()`` does; the caller then calls ``opt.step()``: an SGD subclass or a ``step``
other than torch's own (an lr scheduler's step counter wrapper is kept: it sets
``opt._opt_called``), step hooks (the optimizer's or global), ``foreach``/``fused``/
``differentiable``, a tensor ``lr`` or hyperparameter, a parameter or gradient that is not
a dense contiguous float32 CPU tensor, sparse gradients, GradScaler's ``grad_scale``/
``found_inf``, a first step (momentum buffers not made yet: eager clones the gradient), an
inference tensor, no C compiler, or a process where the self-check found torch's rounding
different. Version counters move as eager's in-place ops move them (parameters +1, momentum
buffers +2), so autograd still detects a saved parameter changed by the step.
"""
from __future__ import annotations

import ctypes
from typing import List, Optional

import torch

from .built_once import built_once
from .optimizer_steps import (PerThreads, agrees_with_torch, array, dense,
                              increment_version, number, run_in_c, split_loop)

SOURCE = r"""
#include <math.h>
#include <stdint.h>

/* one parameter: hp = {weight_decay, momentum, 1 - dampening, -lr}; flags: 1 weight decay,
   2 momentum, 4 nesterov, 8 maximize */
static void one(float *p, const float *g, float *buf, int64_t n, const float *hp, int flags) {
  const float wd = hp[0], m = hp[1], damp = hp[2], neg_lr = hp[3];
  switch (flags) {
  case 2:                                   /* the common case: momentum only */
    #pragma omp simd
    for (int64_t i = 0; i < n; i++) {
      float b = fmaf(g[i], damp, buf[i] * m);
      buf[i] = b;
      p[i] = fmaf(b, neg_lr, p[i]);
    }
    return;
  case 0:
    #pragma omp simd
    for (int64_t i = 0; i < n; i++) p[i] = fmaf(g[i], neg_lr, p[i]);
    return;
  default:
    for (int64_t i = 0; i < n; i++) {
      float gi = (flags & 8) ? -g[i] : g[i];
      if (flags & 1) gi = fmaf(p[i], wd, gi);
      if (flags & 2) {
        float b = fmaf(gi, damp, buf[i] * m);
        buf[i] = b;
        gi = (flags & 4) ? fmaf(b, m, gi) : b;
      }
      p[i] = fmaf(gi, neg_lr, p[i]);
    }
  }
}

void tg_sgd_f32(int64_t count, float **params, float **grads, float **bufs,
                const int64_t *sizes, const float *hp, int flags, int nthreads) {
  for (int64_t k = 0; k < count; k++) {
    const int64_t n = sizes[k];
    float *buf = bufs ? bufs[k] : 0;""" + split_loop(
    "one(params[k] + lo, grads[k] + lo, buf ? buf + lo : 0, len, hp, flags)") + r"""
  }
}
"""



def _bind(lib):
    fn = lib.tg_sgd_f32
    fn.argtypes = [ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                   ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
    fn.restype = None
    return fn


_function = built_once("tg_sgd_step", lambda: SOURCE, _bind, background=True)

class _Group:
    """One parameter group's C call: pointer arrays, sizes, hyperparameters, flags, and the
    tensors whose version counters the step moves."""

    __slots__ = ("count", "params", "grads", "bufs", "sizes", "hp", "flags", "touched",
                 "buffers")


def _plan(opt) -> Optional[List[_Group]]:
    """Per parameter group, what the C call needs; None where ``run`` must not run."""
    state = opt.state
    groups = []
    for group in opt.param_groups:
        if group.get("foreach") or group.get("fused") or group.get("differentiable"):
            return None
        lr, m, d, wd = group["lr"], group["momentum"], group["dampening"], \
            group["weight_decay"]
        nesterov, maximize = group["nesterov"], group["maximize"]
        if not (number(lr) and number(m) and number(d) and number(wd)) or \
                type(nesterov) is not bool or type(maximize) is not bool:
            return None
        params, grads, bufs, sizes, touched, buffers = [], [], [], [], [], []
        for p in group["params"]:
            g = p.grad
            if g is None:
                continue
            if not dense(p) or not dense(g) or g.shape != p.shape:
                return None
            if m != 0:
                entry = state.get(p)
                buf = entry.get("momentum_buffer") if entry else None
                if buf is None or not dense(buf) or buf.shape != p.shape:
                    return None         # a first step: eager clones the gradient
                bufs.append(buf.data_ptr())
                buffers.append(buf)
            params.append(p.data_ptr())
            grads.append(g.data_ptr())
            sizes.append(p.numel())
            touched.append(p)
        plan = _Group()
        plan.count = len(params)
        plan.params, plan.grads = array(ctypes.c_void_p, params), array(ctypes.c_void_p, grads)
        plan.bufs = array(ctypes.c_void_p, bufs) if bufs else None
        plan.sizes = array(ctypes.c_int64, sizes)
        plan.hp = (ctypes.c_float * 4)(wd, m, 1 - d, -lr)
        plan.flags = (1 if wd != 0 else 0) | (2 if m != 0 else 0) | \
            (4 if nesterov else 0) | (8 if maximize else 0)
        plan.touched, plan.buffers = touched, buffers
        groups.append(plan)
    return groups


def _call(fn, plan: _Group, nthreads: int) -> None:
    if not plan.count:
        return
    fn(plan.count, plan.params, plan.grads, plan.bufs, plan.sizes, plan.hp, plan.flags,
       nthreads)
    increment_version(plan.touched)
    if plan.buffers:
        increment_version(plan.buffers)
        increment_version(plan.buffers)


def run(opt) -> bool:
    """Do ``opt.step()`` in C and return True, or change nothing and return False."""
    return type(opt) is torch.optim.SGD and \
        run_in_c(opt, _function, _matches_torch, _plan,
                 lambda fn, group, _, nthreads: _call(fn, group, nthreads))


def _self_check(fn, nthreads: int) -> bool:
    """Whether the kernel gives torch's SGD bits here: every flag, sizes around the vector
    widths and over the parallel threshold, three steps."""
    sizes = [1, 7, 16, 31, 33, 100, 65536 + 37]
    gen = torch.Generator().manual_seed(0)

    def run(opt) -> bool:
        plan = _plan(opt)
        for group in plan or ():
            _call(fn, group, nthreads)
        return plan is not None

    for wd, m, d, nesterov, maximize in ((0, 0.9, 0, False, False), (0, 0, 0, False, False),
                                         (1e-4, 0.9, 0.1, False, True),
                                         (5e-4, 0.9, 0, True, False),
                                         (1e-2, 0, 0, False, True)):
        kw = dict(lr=0.0123, momentum=m, dampening=d, weight_decay=wd, nesterov=nesterov,
                  maximize=maximize)
        if not agrees_with_torch(torch.optim.SGD, kw, sizes, 3, gen, run):
            return False
    return True


_matches_torch = PerThreads(_self_check)   # whether the kernel gives torch's SGD bits here
