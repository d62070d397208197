"""Automatic dynamic shapes and ``to_graph(fn, dynamic=...)`` (issue 14, item 2).

Each program runs eagerly and converted (default and strict mode) over a sweep of sizes;
results must equal eager's at every size, and the sweep must reuse one dynamic graph
(``_traces`` counts the graphs traced). Sizes 0 and 1 get their own (static) graphs.
"""
import warnings

import pytest
import torch
import torch.nn.functional as F

from transpiler import ConversionError, FallbackWarning, to_graph
from transpiler.dynamic_shapes import DynamicShapes

from tests.e2e.e2e_helpers import assert_same

SWEEP = [3, 5, 7, 1, 0, 2, 9, 6, 12, 4]


def _traces(g) -> int:
    """Graphs traced by ``g`` (static and dynamic entries; fallbacks not counted)."""
    g = getattr(g, "graph_function", g)
    return sum(1 for e in g._entries.values() if hasattr(e, "optimized"))


def _dynamic_entries(g) -> int:
    g = getattr(g, "graph_function", g)
    return sum(1 for k in g._entries if isinstance(k, tuple) and k and
               isinstance(k[-1], tuple) and k[-1][:1] == ("dynamic",))


def _clone(v):
    if isinstance(v, torch.Tensor):
        return v.detach().clone().requires_grad_(v.requires_grad)
    if isinstance(v, (list, tuple)):
        return type(v)(_clone(x) for x in v)
    return v


def sweep(fn, make, sizes=SWEEP, strict=False, g=None, **options):
    """Call ``fn`` eagerly and converted on ``make(n)`` for each size; return the
    converted function. No fallback allowed; retracing warnings are the point here."""
    g = g if g is not None else to_graph(fn, strict=strict, **options)
    for n in sizes:
        args = make(n)
        exp = fn(*_clone(args))
        with warnings.catch_warnings():
            warnings.simplefilter("error", FallbackWarning)
            warnings.filterwarnings("ignore", message=".*traced")
            got = g(*_clone(args))
        assert_same(got, exp, f"size {n}")
    return g


# ------------------------------------------------------------------ control flow, sizes
def branchy(x, y):
    z = x * 2 + y
    if z.sum() > 0:
        z = z.relu() * 3
    n = x.shape[0]
    w = z.view(-1, 4) * n
    return w.mean(0), z.sum(1) / n, x.reshape(n, 2, 2)


def looping(x):
    total = torch.zeros(x.shape[1])
    i = 0
    while total.sum() < 10 and i < x.shape[0]:
        total = total + x[i].abs()
        i += 1
    for row in x:
        total = total + row * 0.5
    return total, i


def size_arithmetic(x):
    n = x.shape[0]
    half = (n + 1) // 2
    y = torch.arange(n, dtype=x.dtype) * 2 + x.sum(1)
    return y[:half] * n, x.size(0) * x.size(1), x.numel(), n / 2


def python_size_branch(x):
    if x.shape[0] > 4:          # a size: a graph value, this if a cond
        return x.sum(0)
    return x.mean(0) + x.shape[0]


def reductions_views(x):
    a = x.flatten(0, 1).softmax(-1)
    b = x.reshape(-1, x.shape[-1]).logsumexp(0)
    c = x.transpose(0, 1).contiguous().view(x.shape[1], -1)
    return a.sum(0), b, c.cumsum(1), x.unsqueeze(0).expand(2, -1, -1, -1).sum()


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("fn, make", [
    (branchy, lambda n: (torch.randn(n, 4), torch.randn(n, 4))),
    (looping, lambda n: (torch.randn(n, 3),)),
    (size_arithmetic, lambda n: (torch.randn(n, 3),)),
    (python_size_branch, lambda n: (torch.randn(n, 3),)),
    (reductions_views, lambda n: (torch.randn(n, 2, 3),)),
], ids=["branchy", "looping", "size_arithmetic", "python_size_branch", "reductions_views"])
def test_sweep_equals_eager_and_reuses_one_graph(fn, make, strict):
    # (size 0: x[i] in a tensor loop's body has no shape at size 0, a static limit)
    sizes = [n for n in SWEEP if n or fn is not looping]
    g = sweep(fn, make, sizes, strict=strict)
    # sizes 3 (static), then 5: dynamic from then on; 0, 1 static each; 2..12 reuse
    assert _dynamic_entries(g) == 1
    assert _traces(g) == 4 - (fn is looping), _traces(g)
