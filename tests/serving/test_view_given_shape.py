"""``x[mask].view(B, E)`` / ``reshape`` to a shape given in full, of a tensor with a run-time
dimension (a boolean-mask selection): the graph takes the given shape and the op checks the
element count when it runs (runtime/shape_inference.py ``_given_view_shape``). On a second
signature it failed shape inference on guessed sizes ("shape '[3, 4]' is invalid for input
of size 16") and fell back (h99, a pointer network's decoder)."""
import pytest
import torch

from transpiler import to_graph

pytestmark = pytest.mark.filterwarnings("error::transpiler.FallbackWarning")


def pick_rows(x, m):
    return x[m].view(x.size(0), x.size(2)) * 2


def pick_rows_reshape(x, m):
    return torch.reshape(x[m], (x.shape[0], 4)).sum(-1)


def _one_per_row(b, l, e, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, l, e, generator=g)
    m = torch.zeros(b, l, dtype=torch.bool)
    m[torch.arange(b), torch.randint(0, l, (b,), generator=g)] = True
    return x, m.unsqueeze(-1).expand(b, l, e)


@pytest.mark.parametrize("fn", [pick_rows, pick_rows_reshape], ids=lambda f: f.__name__)
def test_rows_picked_by_a_mask_over_signatures(fn):
    g = to_graph(fn)
    for i, (b, l) in enumerate([(2, 5), (3, 3), (4, 6), (2, 5), (5, 2)]):
        x, m = _one_per_row(b, l, 4, i)
        got, want = g(x, m), fn(x, m)
        assert got.shape == want.shape and torch.equal(got, want)


def test_a_wrong_count_raises_eagers_error_when_the_graph_runs():
    g = to_graph(pick_rows)
    for i, (b, l) in enumerate([(2, 5), (3, 3)]):
        g(*_one_per_row(b, l, 4, i))
    x, m = _one_per_row(3, 4, 4, 9)
    m = m.clone()
    m[0, :, :] = True                   # row 0 picks every position: 6 rows of 4, not 3
    with pytest.raises(RuntimeError) as eager:
        pick_rows(x, m)
    with pytest.raises(RuntimeError) as converted:
        g(x, m)
    assert "invalid for input of size" in str(eager.value)
    assert "invalid for input of size" in str(converted.value)
