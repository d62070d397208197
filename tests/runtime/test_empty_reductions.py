"""A max/min over no elements raises in eager (no identity value); a fused C reduction
would give -inf/inf. Every spelling must raise eager's error type, on the static path
(the first call's shape) and on later shapes; sums, means and softmax over empty rows
keep eager's values."""
import pytest
import torch

from tests.runtime.loop_programs import newton
from transpiler import to_graph


def whole_max(x):
    return torch.max(torch.abs(x) * 2)


def whole_min(x):
    return (x + 1).min()


def row_amax(x):
    return (x * 2).amax(-1)


def row_amin(x):
    return torch.amin(x.exp() - 1, dim=-1)


def sum_mean_softmax(x):
    return (x * 2).sum(-1), (x + 1).mean(-1), torch.softmax(x * 3, -1)


def _eager(fn, x):
    try:
        return fn(x), None
    except Exception as e:      # noqa: BLE001
        return None, type(e)


EMPTY = [(0,), (0, 3), (3, 0), (2, 0, 4)]


@pytest.mark.parametrize("fn", [whole_max, whole_min, row_amax, row_amin, newton],
                         ids=lambda f: f.__name__)
@pytest.mark.parametrize("first", [(4, 5), None], ids=["after_a_full_call", "first_call"])
def test_max_min_over_nothing_raises_as_eager(fn, first):
    g = to_graph(fn)
    if first is not None:
        x = torch.rand(first) + 0.5
        torch.testing.assert_close(g(x), fn(x))
    for shape in EMPTY:
        x = torch.rand(shape) + 0.5
        want, error = _eager(fn, x)
        if error is None:
            torch.testing.assert_close(g(x), want)
        else:
            with pytest.raises(error):
                g(x)


def test_a_static_empty_shape_takes_torch_path():
    """Traced at an empty shape (the C kernel specialized to it) and called again."""
    g = to_graph(row_amax)
    for _ in range(3):
        with pytest.raises(IndexError):
            g(torch.rand(3, 0))


@pytest.mark.parametrize("shape", [(3, 0), (0, 4), (0,)])
def test_sums_and_softmax_over_empty_rows_keep_eager_values(shape):
    g = to_graph(sum_mean_softmax)
    for s in [(2, 5), shape]:
        x = torch.rand(s)
        for got, want in zip(g(x), sum_mean_softmax(x)):
            assert got.shape == want.shape and got.dtype == want.dtype
            torch.testing.assert_close(got, want, equal_nan=True)
