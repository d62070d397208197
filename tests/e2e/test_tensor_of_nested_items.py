"""``torch.tensor`` of nested lists of traced 0-d values, rows of one length
(``runtime/tensor_of_items.py``): eager's values, dtype and shape, detached; ragged rows
fall back as before (torch would refuse them too)."""
import pytest
import torch

from transpiler import to_graph


def nested(x):
    return (torch.tensor([[x.sum()]]), torch.tensor([[x[0], x[1]], [x[1], x[0]]]),
            torch.tensor([[x.argmax().item(), 2 * x.argmin().item()]]),
            torch.tensor([[[x.max()], [x.min()]]], dtype=torch.float64))


def ragged(x):
    return torch.tensor([[x[0], x[1]], [x[0]]])


@pytest.mark.parametrize("x", [torch.randn(3), torch.randn(4, dtype=torch.float64),
                               torch.randn(2, requires_grad=True)], ids=["f32", "f64", "grad"])
def test_nested_lists_as_eager(x):
    want, got = nested(x), to_graph(nested, strict=True)(x)
    for w, g in zip(want, got):
        assert (g.dtype, g.shape, g.requires_grad) == (w.dtype, w.shape, w.requires_grad)
        assert torch.equal(g, w)


def test_ragged_rows_raise_as_eager():
    x = torch.randn(3)
    with pytest.raises(ValueError) as eager:
        ragged(x)
    with pytest.raises(ValueError) as converted:
        to_graph(ragged)(x)
    assert str(converted.value) == str(eager.value)
