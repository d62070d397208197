"""``torch.optim.swa_utils.AveragedModel.update_parameters(model)`` in a traced function:
an effect node that calls the real method when the graph runs.

Torch's method decides on the averaged model's own counter (``if self.n_averaged == 0``:
copy the first time, average after), a tensor ``if`` in torch's code that a trace cannot
see through. Staged, it runs as eager's on every run, in its place among the other nodes
(after ``opt.step()`` the weights it reads are the new ones): the averaged parameters,
buffers and ``n_averaged`` are eager's bit for bit, the ``avg_fn``/``multi_avg_fn`` (EMA,
SWA) and ``use_buffers`` included.

- The node names the tensors it writes or reads (the averaged model's parameters and
  buffers, the source model's), so no pass folds, merges or moves a read of them across
  it, as for ``opt.step()`` (``autograd_effects``).
- The averaged model's state is not guarded (it changes on every run: one trace serves
  every step). A subclass's own ``update_parameters`` is converted as user code (its call
  of torch's through ``super()`` is staged); a source that is not an ``nn.Module`` is
  refused.
"""
from __future__ import annotations

import torch

from .graph_ops import effect

NOT_STAGED = object()


@effect
def update_parameters(owner, model, tensors) -> None:
    """``owner.obj.update_parameters(model.obj)`` when the graph runs (``tensors``: those
    it may write or read, named for the passes)."""
    owner.obj.update_parameters(model.obj)


def _averaged_model_class():
    try:
        from torch.optim.swa_utils import AveragedModel
    except ImportError:         # pragma: no cover - (every torch this project supports has it)
        return None
    return AveragedModel


def staged(f, args, kwargs):
    """``f(*args, **kwargs)`` recorded as an effect node where ``f`` is torch's own
    ``AveragedModel.update_parameters`` bound to an averaged model (also reached by a
    subclass's ``super()``: a subclass's own method is user code, converted); else
    ``NOT_STAGED``."""
    cls = _averaged_model_class()
    owner = getattr(f, "__self__", None)
    if cls is None or not isinstance(owner, cls) or \
            getattr(f, "__func__", None) is not cls.update_parameters:
        return NOT_STAGED
    from . import autograd_effects
    from .symbolic import dispatch_record
    if len(args) + len(kwargs) != 1 or set(kwargs) - {"model"}:
        raise autograd_effects.refuse("AveragedModel.update_parameters(...) with other "
                                      "arguments than the model")
    model = args[0] if args else kwargs["model"]
    if not isinstance(model, torch.nn.Module):
        raise autograd_effects.refuse("AveragedModel.update_parameters of something other "
                                      "than an nn.Module")
    tensors = [t for m in (owner, model) for t in (*m.parameters(), *m.buffers())]
    Held = autograd_effects.Held
    dispatch_record(update_parameters, (Held(owner), Held(model), tensors), {})
    autograd_effects.note_owner(owner)
    return None
