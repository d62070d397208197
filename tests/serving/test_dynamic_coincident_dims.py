"""``to_graph(fn, dynamic=True)`` when a changing size coincides with a dim that never
changes (batch 2 = heads 2): once some dim has changed, a new trace leaves the unchanged
dims static (out of the equal-sizes relation) and the first call's all-dynamic graph still
serves the calls its pattern fits. The relation among dims that do change is kept: a graph
traced with two sizes equal never serves a call where they differ.
"""
import pytest
import torch

from transpiler import to_graph

from tests.e2e.e2e_helpers import assert_same

pytestmark = pytest.mark.filterwarnings("ignore::transpiler.RetracingWarning")


def repeat_kv(h, n_rep):
    batch, heads, slen, head_dim = h.shape
    h = h[:, :, None, :, :].expand(batch, heads, n_rep, slen, head_dim)
    return h.reshape(batch, heads * n_rep, slen, head_dim)


def _sweep(fn, g, shapes, *extra):
    for shape in shapes:
        x = torch.randn(*shape, requires_grad=True)
        xe = x.detach().clone().requires_grad_(True)
        got, exp = g(x, *extra), fn(xe, *extra)
        assert_same(got, exp)
        got.sum().backward()
        exp.sum().backward()
        assert_same(x.grad, xe.grad)


@pytest.mark.parametrize("strict", [False, True])
def test_coinciding_sizes_do_not_retrace_every_call(strict):
    g = to_graph(repeat_kv, dynamic=True, strict=strict)
    _sweep(repeat_kv, g, [(2, 2, 4, 4), (3, 2, 4, 4), (2, 2, 6, 4), (5, 2, 9, 4),
                          (7, 2, 5, 4), (3, 2, 11, 4)], 3)
    assert g.cache_info().traces <= 3


def test_first_all_dynamic_graph_still_serves():
    g = to_graph(repeat_kv, dynamic=True)
    _sweep(repeat_kv, g, [(3, 2, 5, 4), (7, 2, 5, 4), (3, 2, 9, 4), (6, 2, 11, 4)], 2)
    assert g.cache_info().traces == 1


def transpose_add(x, y):
    return x + y.transpose(0, 1)


@pytest.mark.parametrize("strict", [False, True])
def test_relation_kept_for_changing_dims(strict):
    g = to_graph(transpose_add, dynamic=True, strict=strict)
    for a, b in [(2, 2), (3, 2), (3, 3), (4, 2), (5, 5), (2, 6)]:
        x, y = torch.randn(a, b), torch.randn(b, a)
        assert_same(g(x, y), transpose_add(x, y))
    for a, b in [(3, 3), (4, 4)]:          # sizes that do not fit: eager's error
        x, y = torch.randn(a, b), torch.randn(a + 1, b)
        with pytest.raises(RuntimeError):
            transpose_add(x, y)
        with pytest.raises(RuntimeError):
            g(x, y)
