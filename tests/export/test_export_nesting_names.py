"""Loops over tensors nested two and three deep with a tensor ``if`` inside, exported with
``to_torch_export``: torch.export's tracer names values after the locals of the exported
code, and a ``cond`` receiving values of two nesting levels named alike failed ("duplicate
argument 'x_true_branch'"). Each program is exported once and run against eager on
batches taking both paths."""
import pytest
import torch

from runtime.export import to_torch_export
from transpiler import to_graph

W = torch.tensor([[1.0, 0.0, 0.0, 1.0], [-1.0, -1.0, 0.0, 0.0]])
V = torch.tensor([[1.0, 1.0, 1.0, 1.0], [-1.0, 2.0, 0.0, 1.0]])


def three_deep(x, w, v):
    acc = torch.zeros(4)
    for r in x:
        for c in w:
            for d in v:
                if (r * c * d).sum() > 0:
                    acc = acc + r * c - d
    return acc


def carried_at_two_levels(x, w):
    acc = torch.zeros(4)
    tot = torch.zeros(4)
    for r in x:
        tot = tot + r
        for c in w:
            if (tot * c).sum() > 0:
                acc = acc + tot * c + r
            else:
                acc = acc - r
    return acc, tot


def _batches():
    g = torch.Generator().manual_seed(0)
    return [torch.randn(n, 4, generator=g) for n in (5, 2, 1)] + [torch.ones(3, 4),
                                                                 -torch.ones(4, 4)]


@pytest.mark.parametrize("fn,extra", [(three_deep, (W, V)), (carried_at_two_levels, (W,))],
                         ids=["three_deep", "carried_at_two_levels"])
def test_nested_loops_with_a_tensor_if_export(fn, extra):
    ep = to_torch_export(to_graph(fn, strict=True), (torch.randn(3, 4),) + extra)
    for x in _batches():
        got, want = ep.module()(x, *extra), fn(x, *extra)
        got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
        assert len(got) == len(want)
        for g, e in zip(got, want):
            assert g.dtype == e.dtype and g.shape == e.shape
            torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-5)
