"""BatchNorm with ``momentum=None`` (a cumulative moving average of the statistics) in
training, traced.

torch's ``_BatchNorm.forward`` then computes its factor in Python from a buffer it has just
changed: ``num_batches_tracked.add_(1)``, ``exponential_average_factor = 1.0 /
float(self.num_batches_tracked)``. In a trace that ``float()`` would read the buffer before
the graph's ``add_`` ran (``trace_reads`` refuses it: the call fell back), and a Python
number there would be the trace's count on every run.

While a trace runs (``swapped``, entered by ``training_attributes.served`` over the modules
the call reaches, and those plain objects among them hold), each such module's class is a subclass whose ``forward`` stages the
same steps: the ``add_`` as torch records it, an ``average_factor`` node computing ``1.0 /
float(num_batches_tracked)`` in Python double when the graph runs (eager's bits), and a
``batch_norm_average`` node calling ``F.batch_norm`` with that factor as the Python float
eager passes (its autograd is torch's own). Both nodes are impure: never folded, merged or
moved across the ``add_``. The class is put back when the trace ends; in eval mode, without
running statistics, or off a trace, the subclass runs torch's forward.
"""
from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

_CLASSES: dict = {}      # torch's BatchNorm class -> its staged subclass (made once each)


def average_factor(count: torch.Tensor) -> torch.Tensor:
    """``1.0 / float(count)`` as a float64 0-d tensor (the Python double torch computes)."""
    if count.is_meta:
        return torch.empty((), dtype=torch.float64, device="meta")
    return torch.tensor(1.0 / float(count), dtype=torch.float64)


def batch_norm_average(x, running_mean, running_var, weight, bias, factor, eps):
    """``F.batch_norm`` in training with the momentum ``float(factor)``."""
    momentum = 0.1 if factor.is_meta else float(factor)
    return F.batch_norm(x, running_mean, running_var, weight, bias, True, momentum, eps)


average_factor._tograph_impure = True         # (ops.is_impure: reads a written buffer)
batch_norm_average._tograph_impure = True     # (writes the running statistics)


def _staged_forward(self, input):
    from .symbolic import current_graph, dispatch_record, is_symbolic
    if current_graph() is None or not is_symbolic(input) or not (
            self.training and self.track_running_stats and
            self.num_batches_tracked is not None and self.momentum is None and
            self.running_mean is not None and self.running_var is not None):
        return _BatchNorm.forward(self, input)
    self._check_input_dim(input)
    self.num_batches_tracked.add_(1)
    factor = dispatch_record(average_factor, (self.num_batches_tracked,), {})
    return dispatch_record(batch_norm_average, (input, self.running_mean, self.running_var,
                                                self.weight, self.bias, factor, self.eps), {})


def _staged_class(cls):
    if cls not in _CLASSES:
        _CLASSES[cls] = type(cls.__name__, (cls,), {"forward": _staged_forward,
                                                    "__module__": __name__})
    return _CLASSES[cls]


def _cumulative(m) -> bool:
    """A torch BatchNorm (its own forward, not SyncBatchNorm's) with ``momentum=None``."""
    return isinstance(m, _BatchNorm) and m.momentum is None and \
        type(m).forward is _BatchNorm.forward and type(m).__module__.startswith("torch.nn")


@contextlib.contextmanager
def swapped(roots):
    """While the block runs, the cumulative BatchNorms in the trees of the modules among
    ``roots`` have the staged class."""
    undo, seen = [], set()
    held = [v for r in roots if not isinstance(r, (torch.nn.Module, type)) and
            isinstance(getattr(r, "__dict__", None), dict) for v in vars(r).values()]
    try:
        for root in list(roots) + held:     # (and a trainer's ``self.model``)
            if isinstance(root, torch.nn.Module) and id(root) not in seen:
                seen.add(id(root))
                for m in root.modules():
                    if _cumulative(m):
                        undo.append((m, type(m)))
                        m.__class__ = _staged_class(type(m))
        yield
    finally:
        for m, cls in reversed(undo):
            m.__class__ = cls
