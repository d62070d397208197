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

from e2e_helpers import assert_same
from runtime.int_overflow import IntOverflow, checked_int
from transpiler import ConversionError, FallbackWarning, to_graph

THIS = __file__.rsplit("/", 1)[-1]


def _run(fn, *args):
    """(graph's result, FallbackWarnings) after checking it against eager's."""
    exp = fn(*(a.clone() if isinstance(a, torch.Tensor) else a for a in args))
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        got = to_graph(fn)(*args)
    assert_same(got, exp)
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
    assert to_graph(mul_while, strict=True)(torch.tensor([3.0])) == 10 ** 9


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
    assert g(torch.tensor([2.0])) == 10 ** 6
    with pytest.raises(OverflowError, match="left int64") as info:
        g(torch.tensor([9.0]))
    assert isinstance(info.value, IntOverflow) and not info.value.rerun


def test_one_graph_serves_both():
    g = to_graph(mul_while)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        assert g(torch.tensor([10.0])) == 10 ** 30
        assert g(torch.tensor([3.0])) == 10 ** 9        # the graph again
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
    assert got == 5 and not warned


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


# ----------------------------------------------------------------------------- lists
def _grown(x):
    out = []
    while x.sum() > 0:
        out.append(x.clone())
        x = x - 1
    return out, x


def list_truth_ifexp(x):
    out, x = _grown(x)
    return torch.stack(out) if out else x[:0]


def list_truth_if_not(x):
    out, x = _grown(x)
    if not out:
        return x * 0
    return torch.stack(out).sum(0)


def list_truth_if(x):
    out, x = _grown(x)
    total = x
    if out:
        total = total + torch.stack(out).sum(0)
    return total


def list_len_compare(x):
    a, b = [], []
    for i in range(5):
        a.append(x * i)
        if x.sum() > 3:
            break
        b.append(x + i)
        x = x + 1
    if len(b) >= len(a):
        b = b[:len(a) - 1]
    return torch.stack(a), (torch.stack(b) if len(b) > 0 else x), len(a) > 2


def list_reversed_slice(x):
    out, _ = _grown(x)
    return torch.stack(out[::-1])


def list_every_other_back(x):
    out, _ = _grown(x)
    return torch.stack(out[::-2])


def list_reversed_call(x):
    out, _ = _grown(x)
    return torch.stack(list(reversed(out)))


def list_copy_appended(x):
    out, _ = _grown(x)
    copy = list(out)
    copy.append(x * 10)             # the copy grows, the list does not
    return torch.stack(copy), torch.stack(out)


def body_local_list_in_genexp(y):
    t = torch.tensor(0.0)
    w = [0.5, 0.25]
    while t < 1.0:
        ks = [y, 2 * y]
        y = y + sum(a * k for a, k in zip(w, ks))
        t = t + 0.3
    return y


def body_local_list_in_listcomp(y):
    t = torch.tensor(0.0)
    while t < 1.0:
        ks = [y, y * 3]
        y = torch.stack([k * 0.5 for k in ks]).sum(0)
        t = t + 0.4
    return y


@pytest.mark.parametrize("fn", [list_truth_ifexp, list_truth_if_not, list_truth_if,
                                list_reversed_slice, list_every_other_back,
                                list_reversed_call, list_copy_appended])
@pytest.mark.parametrize("start", [0.0, 1.0, 4.0])
def test_list_grown_in_tensor_loop(fn, start):
    if start == 0.0 and fn in (list_reversed_slice, list_every_other_back,
                               list_reversed_call, list_copy_appended):
        pytest.skip("torch.stack of no tensors: eager's error")
    _, warned = _run(fn, torch.tensor([start, start + 0.5]))
    assert not warned


@pytest.mark.parametrize("start", [0.0, 2.0, 5.0])
def test_len_comparisons_after_a_tensor_break(start):
    _, warned = _run(list_len_compare, torch.tensor([start]))
    assert not warned


@pytest.mark.parametrize("fn", [body_local_list_in_genexp, body_local_list_in_listcomp])
def test_body_local_list_read_by_a_comprehension(fn):
    for y in (torch.tensor([1.0, -2.0]), torch.tensor([0.0])):
        _, warned = _run(fn, y)
        assert not warned


def genexp_kept_after_the_loop(y):
    gen = None
    while y.sum() < 3:
        ks = [y, y]
        gen = (k * 2 for k in ks[:1] if ks)       # reads ks when it runs, after the loop
        y = y + 1
    return sum(gen) if gen is not None else y


def test_generator_reading_a_body_local_later_still_refused():
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        got = to_graph(genexp_kept_after_the_loop)(torch.tensor([1.0]))
    assert torch.equal(got, genexp_kept_after_the_loop(torch.tensor([1.0])))
    assert any("'ks'" in str(w.message) for w in rec)


# ----------------------------------------------------------------------------- value tests
def sort_until_equal(x):
    n = x.shape[0]
    for phase in range(n):
        start = phase % 2
        a, b = x[start:n - 1:2], x[start + 1:n:2]
        new = x.clone()
        new[start:n - 1:2] = torch.minimum(a, b)
        new[start + 1:n:2] = torch.maximum(a, b)
        if torch.equal(new, x) and phase > 0:
            break
        x = new
    return x, phase


def relax_until_close(d, w):
    for it in range(10):
        new = torch.minimum(d, (d[:, None] + w).min(0).values)
        if torch.allclose(new, d):
            break
        d = new
    return d, it


def relax_until_isclose(d, w):
    it = 0
    while it < 10:
        new = torch.minimum(d, (d[:, None] + w).min(0).values)
        if torch.isclose(new, d).all():
            break
        d = new
        it += 1
    return d, it


def equal_as_python(a, b):
    same = torch.equal(a, b)
    shapes = torch.equal(a, b[:1])
    if a.sum() > 0:
        a = a * 2
    return a, same, shapes, same or shapes


@pytest.mark.parametrize("x", [torch.tensor([4.0, 3.0, 2.0, 1.0, 0.0]),
                               torch.tensor([1.0, 2.0, 3.0]), torch.tensor([2.0, 1.0])])
def test_torch_equal_in_a_loop(x):
    _, warned = _run(sort_until_equal, x)
    assert not warned


@pytest.mark.parametrize("fn", [relax_until_close, relax_until_isclose])
def test_allclose_and_isclose_all_in_a_loop(fn):
    w = torch.tensor([[0.0, 4.0, 1.0], [4.0, 0.0, 1.0], [1.0, 1.0, 0.0]])
    for d in (torch.tensor([0.0, 9.0, 9.0]), torch.tensor([0.0, 1.0, 1.0])):
        _, warned = _run(fn, d, w)
        assert not warned


def test_equal_answers_python_bools():
    for b in (torch.tensor([1.0, 2.0]), torch.tensor([1.0, 3.0])):
        got, warned = _run(equal_as_python, torch.tensor([1.0, 2.0]), b)
        assert not warned and got[1] is (b[1].item() == 2.0)


# ----------------------------------------------------------------------------- sorted
def sorted_ints(x):
    nums = []
    k = 0
    while x.sum() > 0:
        nums.append(k * 7 % 5)
        k += 1
        x = x - 1
    return sorted(nums), sorted(nums, reverse=True), len(nums)


def sorted_floats(x):
    nums = []
    while x.sum() > 0:
        nums.append(float(x.sum()) * 0.5)
        x = x - 1
    return sorted(nums)


@pytest.mark.parametrize("start", [0.0, 1.0, 6.0])
def test_sorted_python_ints(start):
    got, warned = _run(sorted_ints, torch.tensor([start]))
    assert not warned and all(type(v) is int for v in got[0])


def test_sorted_python_floats_fall_back_naming_the_line():
    _, warned = _run(sorted_floats, torch.tensor([3.0]))
    line = sorted_floats.__code__.co_firstlineno + 5
    assert len(warned) == 1 and warned[0].startswith(f"{__file__}:{line}:")
