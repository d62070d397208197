"""A Python float (or a big int) carried through a tensor ``if``/loop keeps Python's double
(int64) precision: the graph holds it as a 0-d float64 (int64) standing for the number,
and beside a tensor it acts as a Python scalar, so tensor results keep eager's dtypes.

Each program runs converted (strict and default mode, several calls, both paths) and
eagerly; results must match exactly where they are numbers (the stand-in's value is the
double Python computes), dtypes always.
"""
import math
import warnings

import pytest
import torch

from e2e_helpers import assert_same
from transpiler import ConversionError, FallbackWarning, to_graph

POS = torch.tensor([1.0, 2.0, -0.5])
NEG = torch.tensor([-1.0, -2.0, 0.5])


def same_number(got, exp):
    """``got`` is ``exp`` exactly, of its kind (a converted call hands back the number its
    graph's float64/int64/bool stood for: runtime/returned_numbers.py)."""
    assert type(got) is type(exp) and got == exp, f"{got!r} != {exp!r}"


def same(got, exp):
    if isinstance(exp, (tuple, list)):
        assert type(got) is type(exp) and len(got) == len(exp)
        for a, b in zip(got, exp):
            same(a, b)
    elif isinstance(exp, torch.Tensor):
        assert isinstance(got, torch.Tensor) and got.dtype == exp.dtype, (got, exp)
        assert got.shape == exp.shape
        tol = 1e-2 if exp.dtype in (torch.bfloat16, torch.float16) else 1e-6
        torch.testing.assert_close(got, exp, rtol=tol, atol=tol, equal_nan=True)
    else:
        same_number(got, exp)


def exact(fn, *inputs, calls=2, compare=same):
    """Converted (strict and default, ``calls`` times per input) equals eager."""
    for strict in (True, False):
        g = to_graph(fn, strict=strict)
        for _ in range(calls):
            for x in inputs:
                with warnings.catch_warnings():
                    warnings.simplefilter("error", FallbackWarning)
                    got = g(x.clone())
                compare(got, fn(x.clone()))


# ------------------------------------------------------------- the open finding's program
def float_carried_precision(x):
    s = 0.5
    if x.sum() > 0:
        s = 0.1
    return s + 1e-9 > s, int(s * 1e9)


def test_a_carried_float_computes_in_double():
    exact(float_carried_precision, POS, NEG)


def test_a_carried_float_is_a_float64_in_the_graph():
    g = to_graph(float_carried_precision, strict=True)
    cond = [n for n in g.graph(POS).nodes if n.op == "cond"][0]
    assert [m.dtype for m in cond.meta] == [torch.float64]


def int_beyond_float32(x):
    s = 16777216.0
    if x.sum() > 0:
        s = s + 1.0
    return int(s), s, s - 16777216.0


def test_a_float_beyond_float32s_integers():
    exact(int_beyond_float32, POS, NEG)


# ------------------------------------------------------------------ accumulation in loops
def small_steps_in_a_tensor_loop(x):
    total = 0.0
    i = x.sum() * 0
    while i < 1000:
        total += 1e-10
        i = i + 1
    return total, total == 1000 * 1e-10, total * 1e10


def test_small_floats_accumulate_as_doubles_in_a_tensor_while():
    exact(small_steps_in_a_tensor_loop, POS, calls=1)


def small_steps_over_rows(x):
    total = 0.0
    for r in x:
        if r > 0:
            total += 1e-10
    return total, total + 1.0


def test_small_floats_accumulate_over_tensor_rows():
    exact(small_steps_over_rows, POS, NEG, torch.rand(7))


def tensor_accumulator_from_a_float(x):
    total = 0.0
    for r in x:
        total = total + r       # a float32 tensor from the first row on, as eager's
    return total


def test_a_float_start_accumulating_tensors_stays_float32():
    exact(tensor_accumulator_from_a_float, POS, NEG)


# ------------------------------------------------------------------------------ big ints
def big_ints_through_branches(x):
    k = 2 ** 53
    if x.sum() > 0:
        k = k + 1
    j = 2 ** 31
    if x.sum() > 0:
        j += 5
    return k, j, k * 3, j * j, float(k)


def test_big_ints_through_branches_are_exact():
    exact(big_ints_through_branches, POS, NEG)


def test_a_carried_int_is_an_int64():
    g = to_graph(big_ints_through_branches, strict=True)
    conds = [n for n in g.graph(POS).nodes if n.op == "cond"]
    assert [m.dtype for n in conds for m in n.meta] == [torch.int64, torch.int64]


# ------------------------------------------------------- a stand-in beside a real tensor
def beside_a_tensor(x):
    s = 0.5
    if x.sum() > 0:
        s = 0.1
    return (x * s, s * x, x / s, x + s, s - x, x.abs() ** s, x > s,
            torch.where(x > 0, x, s), x.clamp(max=s))


def beside_a_0d_tensor(x):
    s = 0.5
    if x.sum() > 0:
        s = 0.1
    z = x.sum()
    return z * s, s * z, z + s, z / s, z > s


def beside_an_int_tensor(x):
    s = 0.5
    if x.sum() > 0:
        s = 0.1
    n = (x * 4).long()
    return n * s, s * n, n + s, n.sum() * s


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16,
                                   torch.float16], ids=str)
@pytest.mark.parametrize("fn", [beside_a_tensor, beside_a_0d_tensor, beside_an_int_tensor],
                         ids=lambda f: f.__name__)
def test_a_carried_float_beside_a_tensor_keeps_eagers_dtype(fn, dtype):
    exact(fn, POS.to(dtype), NEG.to(dtype), calls=1)


def branch_mixes_number_and_tensor(x):
    s = 0.0
    if x.sum() > 0:
        s = 1.5                 # a float stand-in (float64) ...
    if x.mean() > 0.5:
        s = x.sum()             # ... merged with a float32 tensor: the tensor's dtype
    return s * 2


def test_a_carried_float_merged_with_a_float32_tensor_is_a_stand_in_when_returned():
    # a number on one path and a tensor on another has one dtype in a graph and which one
    # the run took is not known when it runs: the call converts and returns the 0-d float32
    # tensor on every path (eager's tensor, or a stand-in for eager's float within float32)
    for strict in (False, True):
        g = to_graph(branch_mixes_number_and_tensor, strict=strict)
        for x in (POS, NEG, torch.tensor([0.2, 0.1, 0.3])):
            with warnings.catch_warnings():
                warnings.simplefilter("error", FallbackWarning)
                got = g(x)
            exp = branch_mixes_number_and_tensor(x)
            assert type(got) is torch.Tensor and got.dim() == 0
            if isinstance(exp, torch.Tensor):
                assert got.dtype == exp.dtype and torch.equal(got, exp)
            else:
                assert got.item() == pytest.approx(exp, rel=1e-6)


# ------------------------------------------------------------- as Python sees the number
def read_as_python(x):
    s = 2.5
    if x.sum() > 0:
        s = 3.5 + 1e-12
    return math.floor(s), round(s), round(s, 3), math.ceil(s), int(s), float(s), s / 3


def test_floor_round_and_int_of_a_carried_float_are_pythons():
    exact(read_as_python, POS, NEG)


def printed(x):
    s = 0.5
    if x.sum() > 0:
        s = 0.1 + 0.2           # 0.30000000000000004
    print(s, f"{s}", repr(s), s / 3, [s])
    return x


def test_a_carried_float_prints_all_of_pythons_digits(capsys):
    for strict in (True, False):
        g = to_graph(printed, strict=strict)
        for x in (POS, NEG, POS):
            printed(x)
            eager = capsys.readouterr().out
            with warnings.catch_warnings():
                warnings.simplefilter("error", FallbackWarning)
                g(x)
            assert capsys.readouterr().out == eager
