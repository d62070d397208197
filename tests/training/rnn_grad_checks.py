"""RNN loop forms and the gradient check shared by the RNN training tests
(``test_loop_backward.py``, ``test_rnn_train_sizes.py``): each converted loop's output and
every input's gradient against eager's, relative to the gradient's scale."""
from __future__ import annotations

import torch

from transpiler import to_graph


def rnn_relu(xs, h, w_ih, w_hh, bias, c):
    for xt in xs:
        h = torch.relu(xt @ w_ih + h @ w_hh + bias + c)
    return h


def rnn_sigmoid(xs, h, w_ih, w_hh, bias, c):
    for xt in xs:
        h = torch.sigmoid(bias + (h @ w_hh + xt @ w_ih))
    return h


def rnn_linear(xs, h, w_ih, w_hh, bias, c):
    for xt in xs:
        h = h @ w_hh + xt @ w_ih + c + bias
    return h


def inputs(steps, batch, hidden, seed, dtype=torch.float32, needs=(True,) * 6):
    """xs, h0, w_ih, w_hh, bias, c: scaled so the states stay in tanh's working range."""
    g = torch.Generator().manual_seed(seed)
    shapes = [(steps, batch, hidden), (batch, hidden), (hidden, hidden), (hidden, hidden),
              (hidden,), (batch, hidden)]
    scale = [1, 1, hidden ** -0.5, hidden ** -0.5, 0.1, 0.1]
    return [(torch.randn(s, generator=g, dtype=dtype) * k).requires_grad_(n)
            for s, k, n in zip(shapes, scale, needs)]


def loss(out):
    return (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view(out.shape)).sum()


def grads(fn, args):
    out = fn(*args)
    wanted = [x for x in args if x.requires_grad]
    return out.detach(), torch.autograd.grad(loss(out), wanted, allow_unused=True)


def close(got, want, tol=1e-5):
    scale = want.abs().max().clamp_min(1e-30)
    assert float((got - want).abs().max() / scale) <= tol


def check(fn, args_list, strict=True):
    """``to_graph(fn)`` equals eager on each argument list (two calls, other values:
    nothing baked at trace time): output and every gradient within 1e-5 of its scale."""
    converted = to_graph(fn, strict=strict)
    for args in args_list:
        want, got = grads(fn, args), grads(converted, args)
        close(got[0], want[0])
        assert len(got[1]) == len(want[1])
        for a, b in zip(got[1], want[1]):
            assert (a is None) == (b is None)
            if b is not None:
                close(a, b)
