"""In-place writes to argument tensors convert: the graph writes the caller's tensors exactly
as eager does (they are not a Python side effect), in straight-line code, tensor branches and
loops; a Python object argument that the function mutates still falls back."""
import pytest
import torch

from fidelity_checks import converts, falls_back


def setitem_straight(a, b, M):
    M[1] = a
    return a + b


def inplace_in_branch(a, b, M):
    t = a + b
    if t.sum() > 0:
        M.mul_(0.9)
        a.add_(0.25)
    else:
        M[0] = b
    return t


def setitem_in_loop_with_break(a, b, M):
    t = a + b
    for j in range(3):
        M[j % 2] = t * j
        if (t + a).sum() >= 0.5:
            break
        t = t - 1.0
    return t, M.sum()


def inplace_in_while(a, b, M):
    i = 0
    while i < 3 and a.sum() < 4.0:
        a.add_(1.0)
        M[1] += a
        i += 1
    return a * b


def _inputs():
    return [(torch.ones(3) * s, torch.linspace(-1, 1, 3), torch.arange(6.).view(2, 3))
            for s in (1.0, -1.0, 0.2)]


@pytest.mark.parametrize("fn", [setitem_straight, inplace_in_branch,
                                setitem_in_loop_with_break, inplace_in_while])
def test_inplace_writes_to_argument_tensors_convert(fn):
    converts(fn, *_inputs())


class Box:
    pass


def mutates_object_argument(a, box):
    box.v = a * 2
    return a + 1


def test_a_mutated_object_argument_still_falls_back():
    box = Box()
    falls_back(mutates_object_argument, (torch.ones(3), box), (torch.zeros(3), box))
