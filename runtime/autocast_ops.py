"""Ops traced while CPU autocast is on: each one runs under autocast when the graph runs.

``torch.autocast("cpu", dtype=...)`` casts an op's inputs inside torch's dispatcher, by
per-op rules (products to the low dtype, losses and reductions to float32, ``cat`` to the
widest) that also reach the ops a composite function calls. A graph cannot apply those
rules itself, so an op recorded while autocast is on (a ``with torch.autocast`` region in
the traced code, or a call made under autocast) becomes a node whose target is an
``AutocastOp``: the original function called inside ``torch.autocast`` with the trace's
autocast dtype. Its result is eager's bit for bit, gradients included (autograd records
the casts as eager's run does).

- **Dtypes at trace time**: autocast does not act on ``meta`` tensors, so the output's
  shape and dtype come from running the op on fake CPU tensors (``FakeTensorMode``) under
  autocast; results are cached by ``shape_inference`` like other ops.
- **Opaque to the optimizer**: the node's op is ``autocast_<name>``, which no rewrite,
  fusion or memory plan knows, so none changes how it computes (a fused C kernel would
  compute in its own dtype). Constant folding calls the target itself, autocast included.
- **Not wrapped**: views and other ops that may return their input (``views.VIEW_OPS``:
  autocast leaves them alone, and the memory planner must see what they alias), in-place
  ops (autocast has no rules for them), the tracer's own ``graph_ops`` and questions that
  return Python values.

The autocast state is read at each recorded op (the traced ``with`` really switches it,
as ``no_grad`` does), so nested regions, ``enabled=False`` inside a region and
``@torch.autocast`` on a called function follow eager. Only CPU autocast acts on the CPU
tensors a graph holds; its dtype is part of a call's signature (``tensor_state``).
"""
from __future__ import annotations

import threading
from typing import Dict, Tuple

import torch

from . import graph_ops
from .errors import GraphError
from .ops import is_inplace, op_name
from .source_info import format_location
from .views import VIEW_OPS

_WRAPPED: Dict[Tuple, "AutocastOp"] = {}
_LOCAL = threading.local()


class AutocastOp:
    """``func`` run inside ``torch.autocast("cpu", dtype=dtype)``."""

    __slots__ = ("func", "dtype", "__name__", "__qualname__", "__weakref__")

    def __init__(self, func, dtype: torch.dtype):
        self.func = func
        self.dtype = dtype
        self.__name__ = self.__qualname__ = f"autocast_{op_name(func)}"

    def __call__(self, *args, **kwargs):
        if _any_meta((args, kwargs)):
            return self._infer(args, kwargs)
        with torch.autocast("cpu", dtype=self.dtype):
            return self.func(*args, **kwargs)

    def _infer(self, args, kwargs):
        """The op on fake CPU tensors like the meta ones given, under autocast; meta
        tensors back (shape inference's calling convention)."""
        mode = _fake_mode()
        with torch._C.DisableTorchFunction():
            with mode:
                fargs, fkwargs = _map((args, kwargs), _fake_of)
            with mode, torch.autocast("cpu", dtype=self.dtype):
                out = self.func(*fargs, **fkwargs)
            return _map(out, _meta_of)

    def __repr__(self) -> str:
        return f"<autocast({self.dtype}) {op_name(self.func)}>"

    def __reduce__(self):
        return (wrapped, (self.func, self.dtype))


def wrapped(func, dtype: torch.dtype) -> AutocastOp:
    """The one ``AutocastOp`` of ``func`` at ``dtype`` (one object: CSE and the shape
    cache key on it)."""
    key = (func, dtype)
    op = _WRAPPED.get(key)
    if op is None:
        op = _WRAPPED[key] = AutocastOp(func, dtype)
    return op


def active_dtype():
    """CPU autocast's dtype while it is on, else None."""
    if not torch.is_autocast_enabled("cpu"):
        return None
    return torch.get_autocast_dtype("cpu")


def target_for(func, args, kwargs, meta):
    """What a node recorded now should call: ``func`` itself, or its ``AutocastOp`` when
    CPU autocast is on and ``func`` is an op it may change (``meta``: the output's
    metadata without autocast; None for a Python answer)."""
    dtype = active_dtype()
    if dtype is None or meta is None or isinstance(func, AutocastOp) or \
            getattr(func, "__module__", None) == graph_ops.__name__ or \
            op_name(func) in VIEW_OPS or is_inplace(func, kwargs):
        return func
    return wrapped(func, dtype)


def recorded(func, args, kwargs, result, location):
    """(target, inferred result) of a node about to be recorded: ``func`` and ``result``
    as they are, or under autocast its ``AutocastOp`` and the result autocast gives."""
    target = target_for(func, args, kwargs, result.meta)
    if target is func:
        return func, result
    from .shape_inference import infer
    try:
        return target, infer(target, args, kwargs)
    except Exception as e:
        error = GraphError(f"{format_location(location)}: {op_name(func)} under "
                           f"torch.autocast: the result's dtype and shape could not be "
                           f"inferred ({type(e).__name__}: {e})")
        error.location = location
        raise error from e


# ----------------------------------------------------------------------- fake tensors
def _fake_mode():
    mode = getattr(_LOCAL, "mode", None)
    if mode is None:
        from torch._subclasses.fake_tensor import FakeTensorMode
        mode = _LOCAL.mode = FakeTensorMode(allow_non_fake_inputs=False)
    return mode


def _any_meta(value) -> bool:
    if isinstance(value, torch.Tensor):
        return value.is_meta
    if isinstance(value, (tuple, list)):
        return any(_any_meta(v) for v in value)
    if isinstance(value, dict):
        return any(_any_meta(v) for v in value.values())
    return False


def _fake_of(t: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device="cpu")


def _meta_of(t: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype,
                               device="meta")


def _map(value, fn):
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, tuple):
        items = [_map(v, fn) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else \
            (tuple(items) if type(value) is tuple else type(value)(items))
    if isinstance(value, list):
        return [_map(v, fn) for v in value]
    if isinstance(value, dict):
        return {k: _map(v, fn) for k, v in value.items()}
    return value
