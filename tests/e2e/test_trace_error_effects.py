"""A call whose trace finds the user's own error (an op eager surely runs fails on these
shapes) raises that error as eager does, and what eager does before the error happens too:
BatchNorm's ``num_batches_tracked += 1`` before its batch-of-1 ValueError, a list append.
The error is eager's text with the user's line in a note. Against eager, call by call."""
import warnings

import pytest
import torch
import torch.nn as nn

from transpiler import to_graph


def _error(fn, *args):
    with pytest.raises(Exception) as info:
        fn(*args)
    return info.value


@pytest.mark.parametrize("strict", [False, True])
def test_batchnorm_batch_of_one_counts_the_batch(strict):
    eager, conv = nn.BatchNorm1d(5).train(), nn.BatchNorm1d(5).train()
    g = to_graph(conv, strict=strict)
    gen = torch.Generator().manual_seed(0)
    for shape in [(4, 5), (1, 5), (3, 5), (1, 5, 3), (1, 5)]:
        x = torch.randn(shape, generator=gen)
        if shape[0] * (shape[2] if len(shape) == 3 else 1) == 1:
            want, got = _error(eager, x), _error(g, x)
            assert type(got) is type(want) and str(got) == str(want)
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.testing.assert_close(g(x), eager(x))
        for a, b in zip(conv.buffers(), eager.buffers()):
            assert a.dtype == b.dtype and torch.equal(a, b)


LOG = []


def append_then_mismatch(x, w):
    LOG.append(x.shape[0])
    return x @ w


def test_effects_before_a_shape_error_happen_once():
    g = to_graph(append_then_mismatch)
    x, w = torch.randn(2, 3), torch.randn(4, 5)
    LOG.clear()
    want = _error(append_then_mismatch, x, w)
    eager_log = list(LOG)
    LOG.clear()
    got = _error(g, x, w)
    assert LOG == eager_log == [2]
    assert type(got) is type(want) and str(got) == str(want)
    assert __file__ in "".join(got.__notes__)        # the user's line, in a note
    assert torch.equal(g(x, torch.ones(3, 1)), append_then_mismatch(x, torch.ones(3, 1)))
