"""``a in t`` / ``a not in t`` of a traced tensor (``runtime/operators/membership.py``): the
bool eager's ``Tensor.__contains__`` gives, known when the graph runs, so ``if x in t:``
converts; Python containers keep Python's ``in``; an element ``Tensor.__contains__`` refuses
raises eager's error."""
import pytest
import torch

from transpiler import to_graph


def branch_on_membership(a, b):
    if a in b:
        return b * 2
    return b - 1


def flags(a, b):
    return a in b, a not in b, 3 in [1, 2, 3], "x" not in {"y": 1}


def not_a_scalar(b):
    return "a" in b


CALLS = [(torch.tensor(2), torch.tensor([1, 2])), (5, torch.tensor([1, 2])),
         (2.0, torch.tensor([1.0, 3.0])), (torch.tensor([1, 9]), torch.tensor([1, 2]))]


@pytest.mark.parametrize("fn", [branch_on_membership, flags], ids=lambda f: f.__name__)
def test_as_eager(fn):
    converted = to_graph(fn, strict=True)
    for a, b in CALLS:
        want, got = fn(a, b), converted(a, b)
        if isinstance(want, tuple):
            assert got == want and [type(g) for g in got] == [type(w) for w in want]
        else:
            torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_an_element_torch_refuses_raises_eagers_error():
    with pytest.raises(RuntimeError, match="only supports Tensor or scalar"):
        not_a_scalar(torch.ones(2))
    with pytest.raises(RuntimeError, match="only supports Tensor or scalar"):
        to_graph(not_a_scalar)(torch.ones(2))
