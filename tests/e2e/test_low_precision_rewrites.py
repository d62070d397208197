"""The optimizer's fused rewrites (addmm, linear with its bias, addcmul, silu, mish, rsqrt,
conv with its bias: runtime/passes/patterns.py) round once where eager rounds each op's
result; they apply to float32/float64 only, so bfloat16/float16 graphs equal eager bit for
bit. (In bf16, `A + A @ A` became one addmm 0.25 off near 100, and Muon's Newton-Schulz
iteration ended 45% off eager: h99, session 10.)"""
import math

import pytest
import torch
import torch.nn.functional as F

from transpiler import to_graph

pytestmark = pytest.mark.filterwarnings("error::transpiler.FallbackWarning")


def _g(seed):
    return torch.Generator().manual_seed(seed)


def _r(*shape, seed=0, scale=3.0):
    return torch.randn(*shape, generator=_g(seed)) * scale


def square_plus(A):
    return A + A @ A


def affine(x, w, b):
    return x @ w + b


def linear_t(x, w, b):
    return x @ w.t() + b


def linear_bias(x, w, b):
    return F.linear(x, w) + b


def mul_add(a, b, c):
    return torch.tanh(a * b + c) * 3 - a / (b.abs() + 1)


def silu_written(x):
    return x * torch.sigmoid(x)


def mish_written(x):
    return x * torch.tanh(F.softplus(x))


def rsqrt_written(x):
    return 1 / torch.sqrt(x.abs() + 1)


def conv_bias(x, w, b):
    return F.relu(F.conv2d(x, w) + b.view(1, -1, 1, 1))


def newton_schulz(G, steps=5):
    """KellerJordan/Muon's zeropower_via_newtonschulz5 (bf16 iteration)."""
    a, b, c = (3.4445, -4.7750, 2.0315)
    X = G.bfloat16()
    X = X / (X.norm() + 1e-7)
    for _ in range(steps):
        A = X @ X.mT
        B = b * A + c * A @ A
        X = a * X + B @ X
    return X


CASES = {
    "square_plus": (square_plus, lambda: [_r(4, 4, seed=1)]),
    "affine": (affine, lambda: [_r(8, 16, seed=1), _r(16, 8, seed=2), _r(8, seed=3, scale=10)]),
    "linear_t": (linear_t, lambda: [_r(8, 16, seed=1), _r(4, 16, seed=2), _r(4, seed=3)]),
    "linear_bias": (linear_bias, lambda: [_r(8, 16, seed=1), _r(4, 16, seed=2), _r(4, seed=3)]),
    "mul_add": (mul_add, lambda: [_r(32, 32, seed=i) for i in range(3)]),
    "silu": (silu_written, lambda: [_r(16, 16, seed=4)]),
    "mish": (mish_written, lambda: [_r(16, 16, seed=5)]),
    "rsqrt": (rsqrt_written, lambda: [_r(16, 16, seed=6)]),
    "conv_bias": (conv_bias, lambda: [_r(2, 3, 8, 8, seed=7), _r(4, 3, 3, 3, seed=8), _r(4, seed=9)]),
}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_low_precision_graphs_equal_eager_bit_for_bit(name, dtype):
    fn, make = CASES[name]
    g, s = to_graph(fn), to_graph(fn, strict=True)
    for k in range(2):
        args = [a.to(dtype) * (1 + k) for a in make()]
        want = fn(*args)
        for got in (g(*args), s(*args)):
            assert got.dtype == want.dtype and torch.equal(got, want), \
                (got.float() - want.float()).abs().max()


@pytest.mark.parametrize("name,op", [("square_plus", "addmm"), ("affine", "addmm"),
                                     ("linear_t", "linear")])
def test_float32_still_fuses(name, op):
    fn, make = CASES[name]
    args = make()
    g = to_graph(fn)
    torch.testing.assert_close(g(*args), fn(*args), rtol=1e-5, atol=1e-5)
    ops = [n.op for n in g.get_concrete(*args).optimized.nodes]
    assert op in ops, ops
    bf = [a.bfloat16() for a in args]
    g(*bf)
    assert op not in [n.op for n in g.get_concrete(*bf).optimized.nodes]


def test_newton_schulz_iteration_equals_eager():
    G = _r(4, 6, seed=171)
    got = to_graph(newton_schulz)(G)
    assert torch.equal(got, newton_schulz(G))
