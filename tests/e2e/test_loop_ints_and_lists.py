"""Python ints carried through tensor loops past int64 (``runtime/int_overflow.py``), and
lists grown in tensor loops, compared with eager.

A Python int a tensor loop or branch changes is a 0-d int64 graph value; Python's int
does not wrap. Arithmetic that can leave int64 is checked when the graph runs: an
effect-free graph's call then runs eagerly with a ``FallbackWarning`` naming the line
(strict: ``ConversionError``); a graph with effects raises ``OverflowError``. Ints whose
bounds are known (Python ints, sizes, a ``range`` index) pay no check.
"""
from __future__ import annotations

import warnings

import pytest
import torch

from runtime.int_overflow import IntOverflow, checked_int
from transpiler import ConversionError, FallbackWarning, to_graph

THIS = __file__.rsplit("/", 1)[-1]


def _same(got, exp):
    if isinstance(exp, tuple):
        assert isinstance(got, tuple) and len(got) == len(exp)
        for g, e in zip(got, exp):
            _same(g, e)
        return
    if isinstance(exp, torch.Tensor):
        assert isinstance(got, torch.Tensor) and got.dtype == exp.dtype
        torch.testing.assert_close(got, exp, equal_nan=True)
        return
    assert type(got) is type(exp) and got == exp


def _run(fn, *args):
    """(graph's result, FallbackWarnings) after checking it against eager's."""
    exp = fn(*(a.clone() if isinstance(a, torch.Tensor) else a for a in args))
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        got = to_graph(fn)(*args)
    _same(got, exp)
    return got, [str(w.message) for w in rec if issubclass(w.category, FallbackWarning)]


def _checks(fn, *args) -> int:
    return sum(n.target is checked_int for n in to_graph(fn).graph(*args).walk())


# ----------------------------------------------------------------------------- ints
def mul_while(x):
    k = 1
    while x.sum() > 0:
        k = k * 1000                            # MUL_LINE
        x = x - 1
    return k


def add_while(x):
    k = 2 ** 62
    while x.sum() > 0:
        k = k + 2 ** 61
        x = x - 1
    return k


def shift_while(x):
    k = 1
    while x.sum() > 0:
        k = k << 10
        x = x - 1
    return k


def pow_while(x):
    k = 3
    while x.sum() > 0:
        k = k ** 2
        x = x - 1
    return k


def negative_mul(x):
    k = -7
    while x.sum() > 0:
        k *= 1000
        x = x - 1
    return k


def hash_for_if(tokens):
    h = 0
    for t in tokens:
        if t != 0:
            h = h * 31 + 7
    return h % 1000003


def factorial_float(x):
    fact, k = 1, 0
    total = torch.zeros_like(x)
    while total.sum() < 40 and k < 30:
        k += 1
        fact *= k
        total = total + x ** k / float(fact)
    return total, k


@pytest.mark.parametrize("fn, small, big", [
    (mul_while, 2.0, 10.0), (add_while, 0.0, 2.0), (shift_while, 3.0, 7.0),
    (pow_while, 2.0, 7.0), (negative_mul, 2.0, 9.0), (factorial_float, 5.0, 1.0)])
def test_int_past_int64_runs_eagerly(fn, small, big):
    got, warned = _run(fn, torch.tensor([small]))
    assert not warned
    got, warned = _run(fn, torch.tensor([big]))
    assert isinstance(got, int) or isinstance(got, tuple)    # eager's own Python int
    assert len(warned) == 1 and f"{THIS}:" in warned[0] and "left int64" in warned[0]


def test_int_past_int64_names_the_line_and_strict_raises():
    line = mul_while.__code__.co_firstlineno + 3
    _, warned = _run(mul_while, torch.tensor([10.0]))
    assert warned[0].startswith(f"{__file__}:{line}:")
    with pytest.raises(ConversionError, match="left int64"):
        to_graph(mul_while, strict=True)(torch.tensor([10.0]))
    assert to_graph(mul_while, strict=True)(torch.tensor([3.0])).item() == 10 ** 9


def test_int_under_tensor_if_in_tensor_for():
    _, warned = _run(hash_for_if, torch.tensor([5, 0, 3, 9, 9, 2, 7, 1, 4, 4, 8, 6, 3, 2, 5]))
    assert len(warned) == 1
    _, warned = _run(hash_for_if, torch.tensor([1, 0, 2]))
    assert not warned


def test_graph_with_effects_raises_overflow_error(capsys):
    def printing(x):
        k = 1
        while x.sum() > 0:
            k = k * 1000
            print("k", k)
            x = x - 1
        return k
    g = to_graph(printing)
    assert g(torch.tensor([2.0])).item() == 10 ** 6
    with pytest.raises(OverflowError, match="left int64") as info:
        g(torch.tensor([9.0]))
    assert isinstance(info.value, IntOverflow) and not info.value.rerun


def test_one_graph_serves_both():
    g = to_graph(mul_while)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        assert g(torch.tensor([10.0])) == 10 ** 30
        assert g(torch.tensor([3.0])).item() == 10 ** 9        # the graph again
        assert g(torch.tensor([12.0])) == 10 ** 36
    assert len(rec) == 2


def small_range_index(x):
    k = 0
    for i in range(10):
        if x.sum() > 100:
            break
        k = i * 3 + 1
        x = x + 1
    return k


def small_size(x):
    n = 0
    while x.sum() > 0:
        n = x.shape[0] * 4 + 1
        x = x - 1
    return n


def test_small_ints_pay_no_check():
    for fn, x in ((small_range_index, torch.tensor([1.0])),
                  (small_range_index, torch.tensor([95.0])), (small_size, torch.ones(3))):
        _, warned = _run(fn, x)
        assert not warned
        assert _checks(fn, x) == 0
    assert _checks(mul_while, torch.tensor([1.0])) == 1


def test_counter_is_checked_and_exact():
    def count(x):
        k = 0
        while x.sum() > 0:
            k += 1
            x = x - 1
        return k
    got, warned = _run(count, torch.tensor([5.0]))
    assert got.item() == 5 and not warned


# ----------------------------------------------------------------------------- short circuit
def _or_draw(x, s):
    g = torch.Generator().manual_seed(s)
    for _ in range(3):
        if x.sum() < 0 or torch.rand((), generator=g) < 0.5:
            x = x + 1
    return x + torch.rand((), generator=g)


def _and_draws(x, s):
    g = torch.Generator().manual_seed(s)
    for _ in range(4):
        if x.sum() > -5 and torch.rand((), generator=g) < 0.7 and \
                torch.rand((), generator=g) < 0.7:
            x = x - 1
    return x, torch.rand((), generator=g)


@pytest.mark.parametrize("fn", [_or_draw, _and_draws])
@pytest.mark.parametrize("seed", [0, 3, 11])
def test_seeded_draw_in_short_circuit_operand(fn, seed):
    _, warned = _run(fn, torch.zeros(2), seed)
    assert not warned
    _run(fn, torch.full((2,), -4.0), seed)
