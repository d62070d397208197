"""Functions that graph nodes call for operations torch has no single function for.

They are ordinary targets: the executor calls them like torch functions, and shape
inference runs them on meta tensors.
"""
from __future__ import annotations

import torch


def dim_size(x: torch.Tensor, dim: int) -> torch.Tensor:
    """The run-time size of dimension ``dim`` of ``x``, as a 0-d int64 tensor."""
    return torch.tensor(x.shape[dim], dtype=torch.int64)


def numel(x: torch.Tensor) -> torch.Tensor:
    """The run-time number of elements of ``x``, as a 0-d int64 tensor."""
    return torch.tensor(x.numel(), dtype=torch.int64)
