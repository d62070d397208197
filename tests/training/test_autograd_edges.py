"""Autograd edges in converted training code (h70), each checked against eager torch.

* Reductions over size-1 tensors under autograd: a fused group ending in a whole-tensor
  ``mean``/``sum`` of a ``[1, 1]`` value (a regression batch of one) gave its input a 0-d
  gradient that ``sum_to_size`` could not take; sum/mean/amax/var/std/norm over size-1
  dims, keepdim both ways, 0-d results and size-1 broadcast inputs, values and grads.
* ``checkpoint(fn, *args, use_reentrant=True)``: values, grads, ``requires_grad``, the
  grad mode after the call, ``autograd.grad`` through it raising torch's error, no input
  requiring grad, grad mode off at the call, the RNG replay of dropout inside ``fn``.
* Grad mode after a converted call is eager's on every path (a graph switching it, a
  trace that fails after a ``torch.set_grad_enabled(False)`` call, a graph that raises).
* A fallback for backward hooks on a library module's child names the user's line.
* ``p.grad = ...`` / ``p.data = ...`` of real parameters set to graph values, and
  ``autograd.grad(..., allow_unused=True)``: converted, eager's values after every call.

Every case runs eagerly and converted (default and strict) from the same seed and
compares returns (values, dtypes, ``requires_grad``), parameters, their ``.grad``, the grad
mode after the call and Python state.
"""
from __future__ import annotations

import itertools
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transpiler import ConversionError, FallbackWarning, to_graph

pytestmark = pytest.mark.usefixtures("one_thread", "sync_kernel_build")
THIS_FILE = __file__.rsplit("/", 1)[-1]


@pytest.fixture(autouse=True)
def _grad_mode_back():
    yield
    torch.set_grad_enabled(True)


def _converted(fn, strict=False):
    """``to_graph(fn)`` whose calls must not fall back."""
    g = to_graph(fn, strict=strict)

    def run(*args):
        with warnings.catch_warnings():
            warnings.simplefilter("error", FallbackWarning)
            return g(*args)
    return run


def _close(a, b, where=""):
    assert type(a) is type(b), f"{where}: {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape, f"{where}: {a} vs {b}"
        assert a.requires_grad == b.requires_grad, f"{where}: requires_grad differs"
        torch.testing.assert_close(b.detach(), a.detach(), rtol=1e-5, atol=1e-6)
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b), where
        for i, (u, v) in enumerate(zip(a, b)):
            _close(u, v, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} vs {b!r}"


# ----------------------------------------------------------------- size-1 reductions
_REDUCTIONS = {
    "sum": lambda t: t.sum(), "mean": lambda t: t.mean(), "amax": lambda t: t.amax(),
    "amin": lambda t: t.amin(), "max": lambda t: torch.max(t),
    "sum0": lambda t: t.sum(0), "mean0_keep": lambda t: t.mean(0, keepdim=True),
    "mean_last": lambda t: t.mean(-1), "mean_last_keep": lambda t: t.mean(-1, keepdim=True),
    "sum_last_keep": lambda t: t.sum(-1, keepdim=True),
    "amax_last_keep": lambda t: t.amax(-1, keepdim=True),
    "var_last_keep": lambda t: t.var(-1, keepdim=True, unbiased=False),
    "std": lambda t: t.std(unbiased=False), "norm": lambda t: t.norm(),
    "norm_last_keep": lambda t: t.norm(dim=-1, keepdim=True),
}
_SHAPES = [(1,), (1, 1), (1, 3), (2, 1), ()]


def _cases(red):
    for shape in _SHAPES:
        for b_shape in sorted({(1,), (), shape}):
            try:        # (combinations eager refuses: no dim -1 of a 0-d tensor, ...)
                red(torch.ones(shape) - torch.ones(b_shape))
            except (IndexError, RuntimeError):
                continue
            yield shape, b_shape


@pytest.mark.parametrize("name", list(_REDUCTIONS))
def test_size_one_reduction_grads(name):
    """A pointwise chain over ``x`` and a (broadcast) ``b``, reduced: value and both
    gradients equal eager's (the chain fuses with the reduction into one kernel), for
    each size-1 shape of ``x`` and ``b``."""
    red = _REDUCTIONS[name]

    def f(x, b):
        return red((x * 2.0 - b).pow(2) + b.tanh())
    for shape, b_shape in _cases(red):
        gen = torch.Generator().manual_seed(3)
        x0, b0 = torch.randn(shape, generator=gen), torch.randn(b_shape, generator=gen)
        results = []
        for run in (f, _converted(f)):
            for _ in range(2):          # (the second call: the planned fast path)
                x, b = x0.clone().requires_grad_(), b0.clone().requires_grad_()
                y = run(x, b)
                y.sum().backward()
                results.append((y, x.grad, b.grad))
        for got in results[1:]:
            _close(results[0], got, f"{name} {shape} {b_shape}")


def test_batch_of_one_regression_step():
    """d2l's squared loss on the last batch of one sample: loss.backward() in the step."""
    def build():
        torch.manual_seed(0)
        net = nn.Linear(2, 1)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)

        def step(x, y):
            opt.zero_grad()
            loss = (net(x) - y).pow(2).mean()
            loss.backward()
            opt.step()
            return loss.detach()
        return net, step
    batches = [(torch.tensor([[float(i), 1.0]]), torch.tensor([[2.0 * i]])) for i in range(4)]
    net_e, step_e = build()
    eager = [step_e(*b) for b in batches]
    for strict in (False, True):
        net_g, step_g = build()
        run = _converted(step_g, strict=strict)
        _close(eager, [run(*b) for b in batches])
        for pe, pg in zip(net_e.parameters(), net_g.parameters()):
            _close(pe, pg)
            _close(pe.grad, pg.grad)
