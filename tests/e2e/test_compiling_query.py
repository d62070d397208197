"""``torch.compiler.is_compiling()`` answers True inside converted code while it traces.

Libraries branch on it to take the path written to be a graph (transformers' attention
masks skip a data-dependent ``return None``; torch's transformer layers skip their fast-path
checks); the two paths compute the same values. Outside a trace, and when a call falls back
to eager, it answers False as usual.
"""
import warnings

import pytest
import torch

from transpiler import FallbackWarning, to_graph


def _mask_or_none(m):
    # transformers' masking_utils: a data-dependent None, skipped when compiling
    if not torch.compiler.is_compiling() and bool((m == 1).all()):
        return None
    return m.bool()


def with_mask(x, m):
    mask = _mask_or_none(m)
    if mask is None:
        return x * 2
    return torch.where(mask, x * 2, torch.zeros_like(x))


@pytest.mark.parametrize("strict", [False, True])
def test_library_compile_path_converts_and_matches(strict):
    g = to_graph(with_mask, strict=strict)
    x = torch.randn(3, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        for m in (torch.ones(3, 4, dtype=torch.long), torch.randint(0, 2, (3, 4))):
            torch.testing.assert_close(g(x, m), with_mask(x, m))


def test_answer_is_true_only_while_tracing():
    def f(x):
        return x + 1 if torch.compiler.is_compiling() else x - 1

    g = to_graph(f, strict=True)
    torch.testing.assert_close(g(torch.ones(2)), torch.full((2,), 2.0))   # traced: True
    assert not torch.compiler.is_compiling()    # the flag torch keeps was never touched
    torch.testing.assert_close(g(torch.zeros(2)), torch.ones(2))          # the cached graph
    torch.testing.assert_close(f(torch.ones(2)), torch.zeros(2))          # eager: False


def test_eager_fallback_sees_false():
    seen = []

    def f(x):
        seen.append(torch.compiler.is_compiling())
        if len(seen) == 1:
            return x.tolist()                   # not a graph: falls back on the trace
        return x

    g = to_graph(f)
    with pytest.warns(FallbackWarning):
        g(torch.ones(2))
    assert seen[-1] is False
