"""``F.max_unpool1d/2d/3d`` given ``output_size`` entries that are sizes known only when
the graph runs.

In a dynamic-shape graph a size (``x.shape[-2:]``) is a 0-d int64 tensor when the graph
runs (``graph_ops.dim_size``). torch's ``max_unpool`` checks ``output_size`` in Python
(``_unpool_output_size``: ``output_size[d] < min_size``, then ``torch._check_value``), which
takes a tensor comparison for a condition and raises ``TypeError: cond must be a bool``.
The graph's node calls these instead: each 0-d integer tensor of ``output_size`` becomes
the Python int it stands for, as eager's ``x.shape`` gives, and torch's function runs on
that (its own checks and errors). Meta tensors (shape inference) are passed as they are:
inference then runs on the sizes' example values (``shape_inference._infer_sized``).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .graph_ops import register


def _python_sizes(output_size):
    if not isinstance(output_size, (tuple, list)):
        return output_size
    return type(output_size)(
        int(s) if isinstance(s, torch.Tensor) and not s.is_meta and s.dim() == 0 and
        not s.dtype.is_floating_point and not s.dtype.is_complex else s
        for s in output_size)


@register
def max_unpool1d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    return F.max_unpool1d(input, indices, kernel_size, stride, padding,
                          _python_sizes(output_size))


@register
def max_unpool2d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    return F.max_unpool2d(input, indices, kernel_size, stride, padding,
                          _python_sizes(output_size))


@register
def max_unpool3d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    return F.max_unpool3d(input, indices, kernel_size, stride, padding,
                          _python_sizes(output_size))


# torch's function -> the graph's target
SUBSTITUTES = {F.max_unpool1d: max_unpool1d, F.max_unpool2d: max_unpool2d,
               F.max_unpool3d: max_unpool3d}
