"""What the C optimizer steps (``sgd_step``, ``adam_step``) share: which tensors and
hyperparameters a C loop may take, whether ``opt.step()`` would do more than the class's
own update, the loop that splits a large parameter over threads, and the once-per-thread-
count verdict of a kernel's self-check against torch's own optimizer."""
from __future__ import annotations

import ctypes
import threading
from typing import Callable, Dict

import torch

_F32 = torch.float32
_STRIDED = torch.strided
_PLAIN = (torch.Tensor, torch.nn.Parameter)
increment_version = torch._C._increment_version
threads = torch.get_num_threads

SPLIT_MIN = 65536               # elements: a smaller parameter runs on the calling thread


def split_loop(call: str) -> str:
    """C for one parameter ``k`` of ``n`` elements: ``call`` (a C call naming ``lo`` and
    ``len``: the first element and the count) over the whole tensor, or over ``nthreads``
    static chunks when it is large (every element takes the same formula, so the split
    changes no bit)."""
    return f"""
    if (nthreads > 1 && n >= {SPLIT_MIN}) {{
      const int64_t chunk = (n + nthreads - 1) / nthreads;
      #pragma omp parallel for schedule(static) num_threads(nthreads)
      for (int t = 0; t < nthreads; t++) {{
        const int64_t lo = t * chunk, len = (lo + chunk < n ? lo + chunk : n) - lo;
        if (len > 0) {call};
      }}
    }} else {{
      const int64_t lo = 0, len = n;
      {call};
    }}"""


def dense(t: torch.Tensor) -> bool:
    """A plain dense contiguous float32 CPU tensor (a Parameter or a Tensor)."""
    return type(t) in _PLAIN and t.dtype is _F32 and t.layout is _STRIDED and t.is_cpu and \
        t.is_contiguous() and not t.is_inference()


def number(v) -> bool:
    return type(v) in (float, int)


def array(ctype, values) -> ctypes.Array:
    return (ctype * len(values))(*values)


def _hooks(opt) -> bool:
    from torch.optim import optimizer as module
    return bool(opt._optimizer_step_pre_hooks or opt._optimizer_step_post_hooks or
                module._global_optimizer_pre_hooks or module._global_optimizer_post_hooks)


def plain_step(opt):
    """False where ``opt.step()`` would do more than the class's own update (step hooks,
    ``differentiable``, GradScaler's ``grad_scale``/``found_inf``, a ``step`` wrapper other
    than an lr scheduler's); else that wrapper or None."""
    if _hooks(opt) or opt.defaults.get("differentiable") \
            or getattr(opt, "grad_scale", None) is not None \
            or getattr(opt, "found_inf", None) is not None:
        return False
    wrapper = opt.__dict__.get("step")
    if wrapper is not None and not getattr(wrapper, "_wrapped_by_lr_sched", False):
        return False
    return wrapper


def run_in_c(opt, function: Callable, matches: Callable, plan: Callable,
             call: Callable) -> bool:
    """``opt.step()`` by a C kernel: ``function()`` (the bound kernel or None while it
    builds), ``matches(fn, nthreads)`` (the self-check's verdict: False, or what ``call``
    needs), ``plan(opt)`` (the calls, or None) and ``call(fn, one, verdict, nthreads)``.
    True when done; False, having changed nothing, where ``opt.step()`` must run."""
    wrapper = plain_step(opt)
    if wrapper is False:
        return False
    fn = function()
    if fn is None:
        return False
    nthreads = threads()
    verdict = matches(fn, nthreads)
    if verdict is False:
        return False
    calls = plan(opt)
    if calls is None:
        return False
    if wrapper is not None:
        opt._opt_called = True          # what the lr scheduler's wrapper records
    for one in calls:
        call(fn, one, verdict, nthreads)
    return True


class PerThreads:
    """``verdict(fn, nthreads)``: ``check(fn, nthreads)``, computed once per thread count
    (threads share it)."""

    def __init__(self, check: Callable):
        self.check = check
        self.verdicts: Dict[int, object] = {}
        self.lock = threading.Lock()

    def __call__(self, fn, nthreads: int):
        verdicts = self.verdicts
        if nthreads not in verdicts:
            with self.lock:
                if nthreads not in verdicts:
                    verdicts[nthreads] = self.check(fn, nthreads)
        return verdicts[nthreads]


def agrees_with_torch(cls, kw: dict, sizes, steps: int, gen: torch.Generator,
                      run: Callable, grad_scale: Callable = lambda step: 1.0) -> bool:
    """Whether ``run(opt)`` (the C step; False: it refused) leaves the parameters and every
    state tensor of a ``cls(**kw)`` over parameters of ``sizes`` bit-equal to torch's own
    ``step()``, over ``steps`` steps on the same random gradients (times ``grad_scale(step)``);
    the first step is torch's on both sides (it makes the state, as eager)."""
    with torch.no_grad():
        ours = [torch.randn(n, generator=gen) * 3 for n in sizes]
        theirs = [p.clone() for p in ours]
        a = cls([torch.nn.Parameter(p) for p in ours], **kw)
        b = cls([torch.nn.Parameter(p) for p in theirs], **kw)
        pairs = list(zip(a.param_groups[0]["params"], b.param_groups[0]["params"]))
        for step in range(steps):
            for pa, pb in pairs:
                pa.grad = torch.randn(pa.shape, generator=gen) * grad_scale(step)
                pb.grad = pa.grad.clone()
            b.step()
            if step == 0:
                a.step()
            elif not run(a):
                return False
        for pa, pb in pairs:
            sa, sb = a.state[pa], b.state[pb]
            if not torch.equal(pa, pb) or sa.keys() != sb.keys() or \
                    not all(torch.equal(sa[k], sb[k]) for k in sa):
                return False
    return True
