"""``F.max_unpool1d/2d/3d`` with ``output_size`` taken from a dynamic input's shape: the
dynamic graph passes the run-time sizes as Python ints (``runtime/unpool_sizes.py``; torch
checks them in Python, where a 0-d tensor raised ``TypeError: cond must be a bool``).
Every call against eager: values, dtype, shape, indices, gradients; the dynamic graph
serves the new sizes (no fallback, no trace per size)."""
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from transpiler import to_graph


def randn(*shape, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def pool_unpool(dims, ceil, spelling):
    pool = [nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d][dims - 1](
        2, ceil_mode=ceil, return_indices=True)
    unpool = [nn.MaxUnpool1d, nn.MaxUnpool2d, nn.MaxUnpool3d][dims - 1](2)

    def f(x):
        y, idx = pool(x)
        size = x.shape[-dims:] if spelling == "size" else \
            list(x.shape[-dims:]) if spelling == "list" else x.size()   # full size
        return unpool(y, idx, output_size=size) * 2, idx
    return f


def check(g, f, x, grad=False):
    x_g = x.clone().requires_grad_(grad)
    x_e = x.clone().requires_grad_(grad)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = g(x_g)
    exp = f(x_e)
    for a, b in zip(got, exp):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(a, b)
    if grad:
        got[0].pow(2).sum().backward()
        exp[0].pow(2).sum().backward()
        assert torch.equal(x_g.grad, x_e.grad)


# odd sizes: a floor pooling's output_size one above the default, a ceil one's one below
_SHAPES = {1: [(2, 3, 8), (2, 3, 10), (2, 3, 7), (2, 3, 12), (2, 3, 9), (2, 3, 8)],
           2: [(2, 3, 4, 6), (2, 3, 6, 8), (2, 3, 5, 7), (2, 3, 10, 9), (2, 3, 4, 6)],
           3: [(2, 3, 4, 6, 8), (2, 3, 6, 8, 10), (2, 3, 5, 7, 9), (2, 3, 8, 6, 12),
               (2, 3, 4, 6, 8)]}


@pytest.mark.parametrize("dims", [1, 2, 3])
@pytest.mark.parametrize("ceil", [False, True])
@pytest.mark.parametrize("spelling", ["size", "list", "full"])
@pytest.mark.parametrize("dynamic", [None, True])
def test_unpool_to_input_size_over_new_sizes(dims, ceil, spelling, dynamic):
    f = pool_unpool(dims, ceil, spelling)
    g = to_graph(f, strict=True, dynamic=dynamic)
    for i, shape in enumerate(_SHAPES[dims]):
        check(g, f, randn(*shape, seed=i))
    info = g.cache_info()
    assert info.fallbacks == 0 and info.traces <= 3, info    # not one per size
    assert info.dynamic_dims, info


def test_gradients_through_the_dynamic_graph():
    f = pool_unpool(2, True, "size")
    g = to_graph(f, strict=True)
    for i, shape in enumerate(_SHAPES[2]):
        check(g, f, randn(*shape, seed=i), grad=True)


def test_an_invalid_output_size_raises_eagers_error():
    """A size eager rejects (too small for the pooled input) raises eager's ValueError,
    at the size where it is wrong, after the dynamic graph served valid ones."""
    def f(x, n):
        y, idx = F.max_pool2d(x, 2, return_indices=True)
        return F.max_unpool2d(y, idx, 2, output_size=(n.shape[0], x.shape[-1]))
    g = to_graph(f, strict=True)
    for i, (h, n) in enumerate([(4, 4), (6, 6), (8, 9)]):
        x, nn_ = randn(1, 1, h, 6, seed=i), torch.zeros(n)
        assert torch.equal(g(x, nn_), f(x, nn_))
    x, bad = randn(1, 1, 8, 6, seed=5), torch.zeros(3)
    with pytest.raises(ValueError) as eager:
        f(x, bad)
    with pytest.raises(ValueError) as got:
        g(x, bad)
    assert str(got.value).splitlines()[0] == str(eager.value).splitlines()[0]
