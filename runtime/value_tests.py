"""``torch.equal`` and ``torch.allclose`` of traced tensors: Python bools eager computes
from the values, here bool stand-ins the graph computes when it runs (a tensor ``if``
on them stages a ``cond``, a loop's ``break`` on them a ``while``)::

    for _ in range(n):                  # Bellman-Ford: stop when nothing relaxes
        new = torch.minimum(dist, (dist[:, None] + w).min(0).values)
        if torch.equal(new, dist):
            break
        dist = new

Recorded as ``tensor_equal``/``tensor_allclose``: when the graph runs, torch's own
``equal``/``allclose`` of the real tensors (shapes, dtype promotion, NaN: eager's answer,
also for sizes known only then) as a 0-d bool marked as a Python bool. ``allclose`` of
operands of two dtypes keeps the old refusal (eager raises).
"""
from __future__ import annotations

import torch

from .graph_ops import register
from .introspection import mark


def _traced(*values) -> bool:
    return any(getattr(v, "_node", None) is not None for v in values)


@register
def tensor_equal(a, b) -> torch.Tensor:
    """``torch.equal(a, b)`` as a 0-d bool tensor."""
    if a.is_meta or b.is_meta:
        return torch.empty((), dtype=torch.bool, device="meta")
    return torch.tensor(torch.equal(a, b))


@register
def tensor_allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False) -> torch.Tensor:
    """``torch.allclose(a, b, ...)`` as a 0-d bool tensor."""
    if a.is_meta or b.is_meta:
        return torch.empty((), dtype=torch.bool, device="meta")
    return torch.tensor(torch.allclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan))


def _recorded(op, args, kwargs):
    from .symbolic import dispatch_record
    out = dispatch_record(op, args, kwargs)
    mark(out, "bool")
    return out


def equal(a, b):
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or not _traced(a, b):
        return None
    return _recorded(tensor_equal, (a, b), {})


def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or \
            not _traced(a, b) or a.dtype != b.dtype:
        return None
    return _recorded(tensor_allclose, (a, b),
                     {"rtol": rtol, "atol": atol, "equal_nan": equal_nan})


CALLS = {torch.equal: equal, torch.Tensor.equal: equal,
         torch.allclose: allclose, torch.Tensor.allclose: allclose}
