"""0-d results of ops of Python numbers only (no tensor argument) have a value known while
tracing (``runtime/known_values._factory_value``): torch wraps the numbers, and the graph makes the
same value on every run. Longformer/LED chunk a sequence with ``hidden.view(b,
torch.div(hidden.size(1), 2 * w, rounding_mode="trunc"), 2 * w, d)``; the size was "known
only when the graph runs" and the model fell back. Differential: eager vs ``to_graph``
(strict), values, shapes, dtypes, several sizes; random and uninitialized factories stay
unknown."""
from __future__ import annotations

import pytest
import torch

from transpiler import to_graph


def _chunk(h, w):
    """modeling_longformer.py ``_chunk`` (non-overlapping chunks of size 2w)."""
    return h.view(h.size(0), torch.div(h.size(1), (w * 2), rounding_mode="trunc"), w * 2,
                  h.size(2))


def _floor_sizes(h):
    n = torch.floor_divide(h.shape[1], 4)
    return h.reshape(h.shape[0], int(n), -1).sum(-1), n


def _full_count(h):
    k = torch.full((), h.shape[-1] // 2, dtype=torch.long)
    return h.narrow(-1, 0, int(k)) * k


CASES = [
    (_chunk, lambda n: (torch.randn(2, 8 * n, 3), 2)),
    (_floor_sizes, lambda n: (torch.randn(3, 4 * n),)),
    (_full_count, lambda n: (torch.randn(2, 2 * n + 2),)),
]


def _same(got, exp):
    if isinstance(exp, tuple):
        assert isinstance(got, tuple) and len(got) == len(exp)
        for a, b in zip(got, exp):
            _same(a, b)
        return
    assert got.dtype == exp.dtype and got.shape == exp.shape
    assert torch.equal(got, exp) if not exp.is_floating_point() else \
        torch.allclose(got, exp, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("fn,make", CASES, ids=[c[0].__name__ for c in CASES])
def test_python_number_ops_give_known_sizes(fn, make):
    g = to_graph(fn, strict=True)
    for n in (1, 2, 3, 2):
        args = make(n)
        _same(g(*args), fn(*args))


def test_random_ops_of_python_numbers_stay_random():
    def f(h):
        k = torch.randint(1, 4, ())
        return h * k, k
    g = to_graph(f)
    h = torch.ones(3)
    torch.manual_seed(0)
    exp = [f(h)[1].item() for _ in range(12)]
    torch.manual_seed(0)
    got = [g(h)[1].item() for _ in range(12)]
    assert got == exp and len(set(got)) > 1


def test_longformer_chunk_count_converts():
    transformers = pytest.importorskip("transformers")
    from benchmarks.torchvision_cpu import import_torchvision
    import_torchvision()
    attn = transformers.models.longformer.modeling_longformer.LongformerSelfAttention
    h = torch.randn(2, 16, 8)
    g = to_graph(attn._chunk, strict=True)
    torch.testing.assert_close(g(h, 4), attn._chunk(h, 4), rtol=0, atol=0)
