"""``torch.amp.GradScaler`` inside a traced training step: its calls as effect nodes.

Mixed precision's recipe (``scaler.scale(loss).backward(); scaler.step(opt);
scaler.update()``) keeps its state in the scaler (the scale, the growth tracker, per
optimizer whether grads were unscaled and whether they held an inf) and decides in Python
whether ``opt.step()`` runs. None of it can be decided while tracing, so each call is a
node that calls the scaler's own method when the graph runs, in its place among the other
nodes (as ``autograd_effects`` does for optimizers):

- ``scaler.scale(t)`` (a tensor, or a list/tuple of them): ``scaled``, ``t`` times the
  scale of that run (autograd records the product as eager's does);
- ``scaler.unscale_(opt)``, ``scaler.step(opt)``, ``scaler.update(new_scale)``:
  ``scaler_call`` (the step names the optimizer's parameters it may change);
- ``scaler.get_scale()``: ``scale_value``, a float stand-in read in its place.

Nothing is called on the scaler while tracing (a refused trace leaves it as it was, for
the eager run). Its configuration getters (``is_enabled()``, ``get_growth_factor()``...)
are answered at trace time; a disabled scaler's ``scale(t)`` is ``t``, as eager gives.
Other methods (``state_dict``, ``set_growth_factor``, ...) and ``step(opt, closure)`` are
refused (the call falls back, naming the line).
"""
from __future__ import annotations

from typing import Any

import torch

from .graph_ops import effect

_CONFIG = {"is_enabled", "get_growth_factor", "get_backoff_factor", "get_growth_interval"}


def _impure(fn):
    fn._tograph_impure = True           # (ops.is_impure: never merged, dropped or moved)
    return fn


@_impure
def scaled(owner, t: torch.Tensor) -> torch.Tensor:
    """``owner.obj.scale(t)`` when the graph runs (the scale is a float32 0-d tensor)."""
    if t.is_meta:
        return t * torch.empty((), dtype=torch.float32, device="meta")
    return owner.obj.scale(t)


@effect
def scaler_call(owner, name: str, params, optimizer, kwargs) -> None:
    """``owner.obj.name(optimizer.obj, **kwargs)`` (no optimizer: ``name(**kwargs)``)
    when the graph runs (``params``: the tensors it may change, named for the passes)."""
    method = getattr(owner.obj, name)
    if optimizer is None:
        method(**kwargs)
    else:
        method(optimizer.obj, **kwargs)


_ANCHOR = torch.zeros(())      # (gives scale_value's node a tensor input, as last_lrs's)


@_impure
def scale_value(owner, anchor: torch.Tensor) -> torch.Tensor:
    """``owner.obj.get_scale()`` when the graph runs, as a float64 0-d tensor (the scale
    is made at the first ``scale()``: before it, ``init_scale``, as eager's)."""
    if anchor.is_meta:
        return torch.empty((), dtype=torch.float64, device="meta")
    return torch.tensor(float(owner.obj.get_scale()), dtype=torch.float64)


def is_scaler(owner) -> bool:
    scaler = getattr(getattr(torch, "amp", None), "GradScaler", None)
    return scaler is not None and isinstance(owner, scaler)


def staged(owner, name: str, args, kwargs) -> Any:
    """The result of ``owner.name(*args, **kwargs)`` for a GradScaler ``owner`` in a
    trace (``autograd_effects.NOT_STAGED``: call it now)."""
    from . import autograd_effects as effects
    from .symbolic import dispatch_record
    if name in _CONFIG and effects.torch_own(type(owner), name):
        return effects.NOT_STAGED
    if not effects.torch_own(type(owner), name):
        raise effects.refuse(f"{type(owner).__name__}.{name}() (a GradScaler method "
                             f"that is not torch's own)")
    if name == "scale" and len(args) + len(kwargs) == 1:
        outputs = args[0] if args else kwargs["outputs"]
        if not owner.is_enabled():
            return outputs
        return _scale(owner, outputs)
    if name in ("step", "unscale_") and len(args) + len(kwargs) == 1:
        opt = args[0] if args else kwargs["optimizer"]
        if not isinstance(opt, torch.optim.Optimizer) or \
                not effects.torch_own(type(opt), "step"):
            raise effects.refuse(f"{type(owner).__name__}.{name}() of an optimizer "
                                 f"whose step is not torch.optim's")
        dispatch_record(scaler_call, (effects.Held(owner), name, effects.owner_params(opt),
                                      effects.Held(opt), {}), {})
        effects.note_step(owner, opt)
        return None
    if name == "update" and len(args) + len(kwargs) <= 1:
        new_scale = args[0] if args else kwargs.get("new_scale")
        dispatch_record(scaler_call, (effects.Held(owner), "update", [], None,
                                      {"new_scale": new_scale}), {})
        effects.note_step(owner)
        return None
    if name == "get_scale" and not args and not kwargs:
        return _scale_value(owner)
    raise effects.refuse(f"{type(owner).__name__}.{name}(...) (only scale(), unscale_(), "
                         f"step(optimizer), update() and get_scale() of a GradScaler "
                         f"are staged)")


def _scale(owner, outputs):
    from .autograd_effects import note_owner
    from .symbolic import dispatch_record
    note_owner(owner)
    if isinstance(outputs, torch.Tensor):
        return dispatch_record(scaled, (_held(owner), outputs), {})
    if isinstance(outputs, (list, tuple)):
        items = [_scale(owner, o) for o in outputs]
        return items if isinstance(outputs, list) else type(outputs)(items)
    raise ValueError("outputs must be a Tensor or an iterable of Tensors")


def _scale_value(owner):
    from . import autograd_effects as effects
    from .introspection import mark
    from .symbolic import dispatch_record
    if not owner.is_enabled():
        return 1.0
    out = dispatch_record(scale_value, (_held(owner), _ANCHOR), {})
    effects.note_value(out, owner)
    mark(out, "float")
    return out


def _held(owner):
    from .autograd_effects import Held
    return Held(owner)
