"""``int(t)``/``float(t)``/``bool(t)`` of a traced tensor read its one element (a 1-d
one-element tensor too, as eagerly); a tensor of another element count raises eager's
error, where it came back as the whole tensor, silently."""
import pytest
import torch

from transpiler import to_graph


def as_int(x):
    return int(x)


def as_float(x):
    return float(x)


def as_bool(x):
    return bool(x)


def pick(x):
    k = torch.tensor([1]) + x.argmax()
    return [3, 5, 7][int(k) % 3], float(x[:1]), bool(x[:1] > 0)


CASES = [(as_int, [torch.tensor([3, 4]), torch.tensor(3), torch.tensor([True, False]),
                   torch.tensor([[7]])]),
         (as_float, [torch.ones(2), torch.ones(1), torch.tensor(2.5)]),
         (as_bool, [torch.ones(2), torch.ones(()), torch.zeros(1, 1)]),
         (pick, [torch.randn(3), torch.randn(5)])]


def _outcome(fn, x):
    try:
        return fn(x), None
    except (ValueError, RuntimeError) as e:
        return None, (type(e), str(e))


@pytest.mark.parametrize("fn, inputs", CASES, ids=[f.__name__ for f, _ in CASES])
def test_as_eager(fn, inputs):
    converted = to_graph(fn, strict=True)
    for x in inputs:
        want, got = _outcome(fn, x), _outcome(converted, x)
        assert got == want and type(got[0]) is type(want[0])
