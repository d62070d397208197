"""Python-number semantics of ``.item()`` stand-ins and Python constants in the graph,
eager vs ``to_graph`` (default and strict) over several calls: values with their type,
the sign of zero, tensor dtypes, and raised exceptions (type and text).

Covers ``runtime/number_checks.py`` (Python's ZeroDivisionError/OverflowError/ValueError
and float ``%``/``divmod`` signs, ``int()`` of a float past int64), ``runtime/constant_keys``
(``-0.0`` vs ``0.0`` constants on two paths, in loops and lists), bool stand-ins counting
as ints, ``simplify``'s ``x ** 2 -> x * x`` keeping eager's dtype, and
``int_overflow``'s eager rerun reaching the caller as eager's value.
"""
from __future__ import annotations

import math
import re
import warnings

import pytest
import torch

from runtime.number_checks import checked_int_of, checked_number
from transpiler import ConversionError, FallbackWarning, to_graph

THIS_FILE = __file__.rsplit("/", 1)[-1]


def _norm(v):
    """A comparable picture of a result: types, float bits (``repr``: -0.0, nan), dtypes."""
    if isinstance(v, float):
        return ("float", repr(v), math.copysign(1.0, v))
    if isinstance(v, (tuple, list)):
        return (type(v).__name__,) + tuple(_norm(x) for x in v)
    if isinstance(v, torch.Tensor):
        return ("tensor", v.dtype, tuple(v.shape), repr(v.tolist()))
    return (type(v).__name__, repr(v))


def _call(fn, args):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = ("ok", _norm(fn(*args)))
        except Exception as e:      # noqa: BLE001 - compared with eager's
            out = ("raise", type(e), str(e))
    fallbacks = [str(w.message) for w in caught if issubclass(w.category, FallbackWarning)]
    return out, fallbacks


def check(fn, calls, falls_back=(), line=None, refused=False):
    """Eager vs default and strict ``to_graph(fn)`` on each argument tuple of ``calls``.
    ``falls_back``: the indices of calls that run eagerly with a FallbackWarning naming
    ``line`` (a text on the named line of this file); strict raises ConversionError there
    (``refused``: the trace is refused, so strict raises it on every call)."""
    default, strict = to_graph(fn), to_graph(fn, strict=True)
    strict_raises = range(len(calls)) if refused else falls_back
    for n, args in enumerate(calls):
        exp, _ = _call(fn, args)
        got, warned = _call(default, args)
        assert got == exp, f"call {n}: {got} != eager {exp}"
        if n in falls_back:
            assert warned, f"call {n}: expected a FallbackWarning"
            for message in warned:
                _names_line(message, line)
        else:
            assert not warned, f"call {n}: {warned[0]}"
        got, _ = _call(strict, args)
        if n in strict_raises:
            assert got[0] == "raise" and got[1] is ConversionError, f"call {n} strict: {got}"
            _names_line(got[2], line)
        else:
            assert got == exp, f"call {n} strict: {got} != eager {exp}"


def _names_line(message, text):
    m = re.search(re.escape(THIS_FILE) + r":(\d+)", message)
    assert m, f"names no line of this file: {message}"
    with open(__file__) as f:
        src = f.read().splitlines()[int(m.group(1)) - 1]
    assert text in src, f"named line {src.strip()!r}, not one holding {text!r}"


def f64(*values):
    return tuple(torch.tensor(v, dtype=torch.float64) for v in values)


def ints(*values):
    return tuple(torch.tensor(v) for v in values)


# ============================================================== 1. -0.0 and 0.0 constants
def branch_signed_zero(x):
    if x > 0:
        tag = -0.0
    else:
        tag = 0.0
    return tag, math.copysign(1.0, tag), x * tag


def loop_signed_zero(x):
    tag = 0.0
    while x.sum() > 0:
        tag = -0.0
        x = x - 1
    return tag, 1.0 / (tag + 0.0 * x.sum().item()) if tag else math.copysign(2.0, tag)


def range_loop_signed_zero(x):
    tag = -0.0
    for i in range(3):
        if x[i] > 0:
            tag = 0.0
    return tag


def list_signed_zero(x):
    out = [1.0]
    if x.sum() > 0:
        out[0] = -0.0
    else:
        out[0] = 0.0
    return out


def nan_and_zero_constants(x):
    a = x + 0.0
    b = x + -0.0
    c = x * float("nan")
    d = x * float("nan")
    return a, b, c, d


@pytest.mark.parametrize("fn, calls", [
    (branch_signed_zero, [(torch.tensor(-1.0),), (torch.tensor(1.0),), (torch.tensor(-2.0),)]),
    (loop_signed_zero, [(torch.ones(2),), (-torch.ones(2),), (torch.ones(2) * 2,)]),
    (range_loop_signed_zero, [(torch.tensor([1.0, -1, 1]),), (-torch.ones(3),)]),
    (list_signed_zero, [(torch.ones(2),), (-torch.ones(2),)]),
    (nan_and_zero_constants, [(torch.tensor([-0.0, 0.0, 1.0]),)]),
], ids=lambda v: getattr(v, "__name__", ""))
def test_signed_zero_constants(fn, calls):
    check(fn, calls)


# ================================================== 2. float %, //, divmod: Python's signs
def float_divmod(x, d):
    q, r = divmod(x.item(), d)
    return q, r, x.item() % d, x.item() // d, math.copysign(1.0, r)


def float_divmod_items(x, d):
    q, r = divmod(x.item(), d.item())
    return q, r, x.item() % d.item(), x.item() // d.item(), d.item() % x.item()


def reflected_mod(x):
    v = x.item()
    return 2.5 % v, -2.5 % v, 1.0 // v, divmod(-1.0, v)


def mod_in_branch_and_loop(x, d):
    v = x.item()
    if x > 0:
        r = v % d.item()
    else:
        r = -v % d.item()
    i = torch.tensor(0)
    acc = v
    while i < 2:
        acc = acc % d.item() - 0.0
        i += 1
    return r, acc


@pytest.mark.parametrize("fn, calls", [
    (float_divmod, [(torch.tensor(1.0), -0.5), (torch.tensor(-7.5), 2.0), (torch.tensor(-0.0), 2.0),
                    (torch.tensor(0.0), -2.0), (torch.tensor(7.5), -2.0)]),
    (float_divmod_items, [f64(1.0, -0.5), f64(-7.5, 2.0), f64(-0.0, 3.0), f64(0.0, -3.0),
                          f64(float("inf"), 2.0), f64(2.0, float("inf")), f64(-2.0, float("inf"))]),
    (reflected_mod, [f64(-0.5), f64(0.5), f64(-2.0)]),
    (mod_in_branch_and_loop, [f64(1.0, -0.5), f64(-3.0, 2.0), f64(2.0, -1.0)]),
], ids=lambda v: getattr(v, "__name__", ""))
def test_float_mod_signs(fn, calls):
    check(fn, calls)


# ======================================= 3. dtype promotion of small int and bool tensors
def promotions(x, s):
    return x * s, x + s, x // s, x % s, x ** 2, x ** 3, x ** s, 2 ** x, x * x, x / 2


def square_and_units(x):
    return x ** 2, x ** 2.0, x ** 1, x ** 0, x + 0, x * 1, x - 0


def bool_minus(x, s):
    return x - s


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int8, torch.int32, torch.int64])
@pytest.mark.parametrize("scalar", [2, 1.5, True])
def test_tensor_promotion_with_python_scalars(dtype, scalar):
    x = torch.tensor([1, 0], dtype=dtype)
    if dtype is torch.bool and scalar is True:
        check(bool_minus, [(x, scalar)])        # (eager's RuntimeError)
        return
    check(promotions, [(x, scalar)])


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int8, torch.int32,
                                   torch.float16, torch.float32])
def test_square_keeps_eager_dtype(dtype):
    check(square_and_units, [(torch.tensor([1, 0], dtype=dtype),), (torch.tensor([1, 1], dtype=dtype),)])


# ============================================== 4. bool stand-ins count as Python ints
def bool_items(a, b):
    p, q = a.item(), b.item()
    return p + q, p - q, p * q, p * 2.5, p / 2, -p, ~p, abs(p), +p, p ** 2, p + True, \
        p - True, p * True, p & q, p | q, p ^ q, p == 1, type(p + q).__name__


def bool_count_loop(x):
    c = 0
    for v in x:
        c += (v > 0).item()
    flags = x > 0
    both = flags[0].item() + flags[1].item()
    return c, both, type(both).__name__


def bool_in_branch(x):
    b = (x > 0).all().item()
    if x.sum() > 1:
        r = b + b
    else:
        r = b * 3
    return r, 1 - 2 * b


def bool_floor_ops(a, b):
    return a.item() // b.item(), a.item() % b.item(), divmod(a.item(), b.item())


@pytest.mark.parametrize("fn, calls", [
    (bool_items, [ints(True, True), ints(True, False), ints(False, False)]),
    (bool_count_loop, [(torch.tensor([1.0, 2.0, -3.0]),), (torch.tensor([-1.0, 2.0, 3.0]),)]),
    (bool_in_branch, [(torch.tensor([1.0, 2.0]),), (torch.tensor([0.5, 0.2]),), (torch.tensor([-1.0, 2.0]),)]),
    (bool_floor_ops, [ints(True, True), ints(False, True), ints(True, False)]),
], ids=lambda v: getattr(v, "__name__", ""))
def test_bool_stand_ins(fn, calls):
    check(fn, calls)


# ================================ 5. Python's errors: ZeroDivisionError, OverflowError
def true_div(n, d):
    return n.item() / d.item()


def floor_div_and_mod(n, d):
    return n.item() // d.item(), n.item() % d.item()


def divmod_items(n, d):
    return divmod(n.item(), d.item())


def reflected_zero(d):
    return 7 // d.item(), 7 % d.item(), 1.5 / d.item()


def float_pow(x, p):
    return x.item() ** p


def float_pow_items(x, p):
    return x.item() ** p.item()


def int_negative_pow(n):
    return n.item() ** -1


def div_in_branch(x, d):
    v = x.sum().item()
    if x.sum() > 0:
        r = v / d.item()
    else:
        r = v // d.item()
    return r


def div_in_loop(x):
    acc = 100.0
    i = torch.tensor(0)
    while i < x.shape[0]:
        acc = acc / x[i].item()
        i += 1
    return acc


def div_by_loop_index(x):
    total = 0.0
    for i in range(x.shape[0]):
        total += x[i].item() / (2 - i)
    return total


def division_with_print(n, d):
    print("dividing", n)
    return n.item() / d.item()


@pytest.mark.parametrize("fn, calls", [
    (true_div, [f64(1.0, 2.0), f64(1.0, 0.0), f64(0.0, -0.0), ints(3, 0), ints(7, 2), ints(-7, 0)]),
    (floor_div_and_mod, [ints(7, 2), ints(7, 0), f64(7.0, 0.0), f64(-7.5, 2.0), ints(-7, 2)]),
    (divmod_items, [ints(7, 2), ints(7, 0), f64(2.5, 0.0), f64(2.5, -0.0), f64(-2.5, 0.5)]),
    (reflected_zero, [ints(2), ints(0), f64(0.0), f64(-0.0), f64(-4.0)]),
    (float_pow, [(torch.tensor(1e308, dtype=torch.float64), 2), (torch.tensor(2.0, dtype=torch.float64), 2),
                 (torch.tensor(0.0, dtype=torch.float64), -1), (torch.tensor(10.0, dtype=torch.float64), 400.0),
                 (torch.tensor(4.0, dtype=torch.float64), 0.5)]),
    (float_pow_items, [f64(2.0, 3.0), f64(1e200, 2.0), f64(0.0, -2.0), f64(2.0, 1e5)]),
    (int_negative_pow, [ints(2), ints(0), ints(-4)]),
    (div_in_branch, [(torch.tensor([1.0, 2.0]), torch.tensor(2.0)), (torch.tensor([1.0, 2.0]), torch.tensor(0.0)),
                     (torch.tensor([-1.0, -2.0]), torch.tensor(0.0)), (torch.tensor([-1.0, -2.0]), torch.tensor(4.0))]),
    (div_in_loop, [(torch.tensor([2.0, 5.0]),), (torch.tensor([2.0, 0.0]),), (torch.tensor([-0.0, 1.0]),)]),
    (div_by_loop_index, [(torch.tensor([1.0, 2.0]),), (torch.tensor([1.0, 2.0, 3.0]),)]),
    (division_with_print, [f64(1.0, 4.0), f64(1.0, 0.0)]),
], ids=lambda v: getattr(v, "__name__", ""))
def test_python_errors_raised_as_eager(fn, calls):
    check(fn, calls)


def test_size_divisor_and_tensor_division_pay_no_check():
    """Only Python-number ops that may fault are checked: tensor arithmetic, a division
    by a non-zero constant or by a run-time size, float ``*``/``+``/``//``, int ``%`` of a
    constant keep torch's op (a float ``%`` is checked: the sign of its zero)."""
    def f(x, y):
        n = x.shape[0]
        v = x.sum().item()
        return x / y, x // y, x % 2.0, n // 2, v / 2.0, v * 1e300, v + 1.0, v // 3.0, \
            x.sum() / n, y.long().sum().item() % 3, y.long().sum().item() // 2
    g = to_graph(f).graph(torch.ones(4), torch.ones(4))
    assert not [n for n in g.walk() if n.target in (checked_number, checked_int_of)]
    check(f, [(torch.ones(4), torch.full((4,), 2.0)), (torch.ones(4), torch.zeros(4))])


def complex_power(x):
    return x.item() ** 0.5


def test_complex_power_runs_eagerly():
    """``(-4.0) ** 0.5`` is a complex in Python: the graph's float cannot hold it, so
    the call runs eagerly (a FallbackWarning naming the line), never nan."""
    check(complex_power, [f64(4.0), f64(-4.0), f64(9.0)], falls_back={1},
          line="return x.item() ** 0.5")


def caught_zero_division(tp, fp):
    a, b = tp.sum().item(), fp.sum().item()
    try:
        precision = a / (a + b)
    except ZeroDivisionError:
        precision = 0.0
    return precision


def caught_overflow(x):
    v = x.item()
    try:
        p = v ** 2
    except OverflowError:
        p = math.inf
    return p


def caught_by_caller_of_helper(x, d):
    try:
        return _ratio(x, d)
    except ArithmeticError:
        return -1.0


def _ratio(x, d):
    return x.item() / d.item()


@pytest.mark.parametrize("fn, calls, raising", [
    (caught_zero_division, [ints([1, 1], [1, 0]), ints([0, 0], [0, 0]), ints([2, 0], [1, 1])],
     {1}),
    (caught_overflow, [f64(1e308), f64(3.0), f64(1e200)], {0, 2}),
    (caught_by_caller_of_helper, [f64(1.0, 0.0), f64(1.0, 2.0), f64(3.0, 0.0)], {0, 2}),
], ids=lambda v: getattr(v, "__name__", ""))
def test_try_catching_python_errors_replays_the_raising_calls(fn, calls, raising):
    """A ``try`` whose handler catches what the checked op raises cannot be decided when
    tracing: the graph follows the body, and a call whose graph raises runs eagerly with a
    FallbackWarning naming the ``try`` line (strict: ConversionError on that call only;
    ``runtime/try_replays``). The other calls convert."""
    check(fn, calls, falls_back=raising, line="try:")


# ================================== 6. int() of floats, round(), math.floor past int64
def int_of_float(x, scale):
    return int(x.item() * scale)


def round_and_floor(x):
    return round(x.item()), math.floor(x.item()), math.ceil(-x.item())


def int_of_tensor_sum(x):
    return int(x.sum())


@pytest.mark.parametrize("fn, calls, falls_back, line", [
    (int_of_float, [(torch.tensor(3.0, dtype=torch.float64), 1e20), (torch.tensor(1e-9, dtype=torch.float64), 1e20),
                    (torch.tensor(-2.7, dtype=torch.float64), 1.0)], {0}, "return int(x.item() * scale)"),
    (int_of_float, [(torch.tensor(2.5, dtype=torch.float64), 2.0), (torch.tensor(-3e20, dtype=torch.float64), 1.0)],
     {1}, "return int(x.item() * scale)"),
    (round_and_floor, [f64(2.5), f64(1e20), f64(-3.5)], {1}, "return round(x.item()), math.floor"),
    (int_of_tensor_sum, [(torch.tensor([1.5, 2.0]),), (torch.tensor([1e30, 1.0]),)], {1}, "return int(x.sum())"),
], ids=lambda v: getattr(v, "__name__", ""))
def test_int_of_float_past_int64_runs_eagerly(fn, calls, falls_back, line):
    check(fn, calls, falls_back=falls_back, line=line)


@pytest.mark.parametrize("fn, calls", [
    (int_of_float, [(torch.tensor(math.inf, dtype=torch.float64), 1.0), (torch.tensor(1.5, dtype=torch.float64), 1.0),
                    (torch.tensor(math.nan, dtype=torch.float64), 1.0)]),
    (round_and_floor, [f64(1.5), f64(math.inf), f64(math.nan)]),
], ids=lambda v: getattr(v, "__name__", ""))
def test_int_of_inf_and_nan_raise_as_eager(fn, calls):
    check(fn, calls)


def math_range_error(x):
    return math.exp(x.item())


def math_range_error_caught(x):
    try:
        return math.exp(x.item())
    except OverflowError:
        return -1.0


def test_math_errors():
    check(math_range_error, [f64(1.0), f64(1000.0), f64(-1.0)])
    check(math_range_error_caught, [f64(1000.0), f64(1.0), f64(2000.0)], falls_back={0, 2},
          line="try:")      # (the calls whose graph raises run eagerly: try_replays)


# ===================================== 7. an int past int64 in a loop of run-time length
def fibonacci(n):
    pa, pb = 0, 1
    for _ in range(n.item()):
        pa, pb = pb, pa + pb
    return pa


def power_beside_tensor_counter(n):
    steps = torch.zeros((), dtype=torch.int64)
    k = 1
    for _ in range(n.item()):
        steps += 1                  # (an in-place write to a tensor the call made)
        k = k * 3
    return steps, k


def test_overflow_in_loop_runs_eagerly():
    """The int64 check fires in a loop on a later call (a cached graph, memory planning's
    ``out=`` buffers in it): the call runs eagerly with a FallbackWarning, every time."""
    check(fibonacci, [ints(5), ints(90), ints(92), ints(93), ints(10), ints(100)],
          falls_back={2, 3, 5}, line="pa, pb = pb, pa + pb")


def test_overflow_beside_in_place_counter_runs_eagerly():
    """An in-place write into a tensor the graph made is no effect the caller sees: the
    call may still run eagerly when an int leaves int64."""
    check(power_beside_tensor_counter, [ints(5), ints(39), ints(40), ints(41), ints(3)],
          falls_back={2, 3}, line="k = k * 3")


def grows_argument(x, n):
    k = 1
    for _ in range(n.item()):
        x += 1                      # (the caller's tensor, written in place)
        k = k * 3
    return k


def test_overflow_after_visible_write_raises():
    """A graph that wrote the caller's tensor cannot run the call again: it raises
    OverflowError (never a wrapped number)."""
    g = to_graph(grows_argument)
    x = torch.zeros(1)
    assert g(x, torch.tensor(3)) == 27 and x.item() == 3.0
    with pytest.raises(OverflowError, match="left int64"):
        g(x, torch.tensor(45))
