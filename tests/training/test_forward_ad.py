"""Forward-mode AD (``torch.autograd.forward_ad``) around a converted call.

The fused C kernels read the primal values of dual tensors, so a graph would drop the
tangents silently; a call under an open ``dual_level`` therefore falls back (one
FallbackWarning; strict: ConversionError) and the same function's graph serves calls
outside the level again."""
import warnings

import pytest
import torch
import torch.autograd.forward_ad as fwAD

from transpiler import ConversionError, FallbackWarning, to_graph


def chain(x):
    y = torch.tanh(x) * 2 + x.sin()
    if y.sum() > 0:
        y = y * 3
    return y


def _jvp(fn, x, t):
    with fwAD.dual_level():
        out = fn(fwAD.make_dual(x, t))
        primal, tangent = fwAD.unpack_dual(out)
        return primal, tangent


@pytest.mark.parametrize("grad", [True, False])
def test_tangents_equal_eager(grad):
    g = to_graph(chain)
    x, t = torch.randn(64, 64), torch.randn(64, 64)
    with torch.set_grad_enabled(grad):
        g(x)                                     # a graph (with fused kernels) exists
        with pytest.warns(FallbackWarning, match="forward-mode AD"):
            got = _jvp(g, x, t)
        want = _jvp(chain, x, t)
    assert want[1] is not None
    torch.testing.assert_close(got[0], want[0], rtol=0, atol=0)
    torch.testing.assert_close(got[1], want[1], rtol=0, atol=0)


def test_strict_refuses_and_graph_used_after():
    g = to_graph(chain, strict=True)
    x, t = torch.randn(8, 8), torch.randn(8, 8)
    with pytest.raises(ConversionError, match="forward-mode AD"):
        _jvp(g, x, t)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.testing.assert_close(g(x), chain(x))
        torch.testing.assert_close(g(-x), chain(-x))
    assert g.cache_info().traces == 1
