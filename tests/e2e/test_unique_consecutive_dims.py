"""``unique_consecutive`` with a negative ``dim`` in a graph: rank, shape and values as
eager's (torch's fake kernel, used for its data-dependent size, took ``dim=-1`` of a 1-D
tensor as a second dim; ``runtime/shape_inference._nonnegative_dim``)."""
from __future__ import annotations

import pytest
import torch

from transpiler import to_graph


def _call(kind, x, dim):
    if kind == "function":
        return torch.unique_consecutive(x, return_counts=True, dim=dim)
    return x.unique_consecutive(return_counts=True, dim=dim)


# (Positional flags are left out: torch's own ``boolean_dispatch`` reads return_inverse and
# return_counts at swapped positions for a plain tensor, and right for a tensor with
# ``__torch_function__``, so eager itself differs between the two.)
@pytest.mark.parametrize("kind", ["function", "method"])
@pytest.mark.parametrize("shape,dim", [((7,), -1), ((7,), 0), ((3, 6), -1), ((3, 6), -2),
                                       ((6, 3), 0), ((2, 5, 3), -2)])
def test_unique_consecutive_negative_dims_match_eager(kind, shape, dim):
    def f(x):
        u, counts = _call(kind, x, dim)
        rows = [r.sum() for r in u]          # iteration follows the rank
        return u.dim(), tuple(u.shape), u, counts, torch.stack(rows)

    g = to_graph(f, strict=True)
    gen = torch.Generator().manual_seed(len(shape) * 10 + dim)
    for _ in range(2):
        x = torch.randint(0, 2, shape, generator=gen)
        got, exp = g(x), f(x)
        assert got[:2] == exp[:2]
        for a, b in zip(got[2:], exp[2:]):
            assert a.dtype == b.dtype and torch.equal(a, b)
