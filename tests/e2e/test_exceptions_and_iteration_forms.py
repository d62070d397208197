"""Exceptions and iteration forms, eager against ``to_graph`` default and strict over
several calls (values, exception types and messages, printed text, arguments after the
call, FallbackWarnings naming the user's line).

- the user's own error reached while tracing (a ``raise`` or failing ``assert`` under a
  Python-valued condition, a ``match`` falling to ``case _: raise``, a ``KeyError`` of a
  Python key): the call raises eager's error, with no FallbackWarning and no
  ConversionError (``transpiler/user_errors.py``); the call's effects happen once.
- a ``raise`` in a loop's ``else:`` after a tensor ``break``: a staged check
  (``converters/staged_raises.py``).
- ``try``/``except`` whose handler catches one of torch's own errors that graph ops raise
  when the graph runs (``torch.linalg.LinAlgError``): falls back naming the ``try``; a
  ``finally`` block with an effect (print) after ops that may raise when the graph runs
  (a solve, an index by a tensor): falls back naming the block (eager runs it on the
  error, the graph would stop first).
- an object made in the call whose attributes a method updates in a tensor loop
  (the refused first body trace no longer leaves its tensors in the object).
- Python iteration of ``enumerate``/``zip``/``range`` of traced values in a generator
  expression or dict comprehension; ``max(list, default=...)``.
"""
import contextlib
import io
import re
import warnings

import pytest
import torch

from transpiler import ConversionError, FallbackWarning, to_graph

from e2e_helpers import assert_same, op_counts

THIS_FILE = __file__


def _run(fn, args):
    """(result, or (error type, message's first line)), printed text, FallbackWarnings,
    ConversionError, arguments after the call."""
    args = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
    text, err = io.StringIO(), None
    with warnings.catch_warnings(record=True) as rec, contextlib.redirect_stdout(text):
        warnings.simplefilter("always")
        try:
            out = fn(*args)
        except ConversionError as e:
            out, err = None, e
        except Exception as e:  # noqa: BLE001 - compared with eager's
            out = (type(e), str(e).split("\n")[0])
    warned = [str(w.message) for w in rec if issubclass(w.category, FallbackWarning)]
    return out, text.getvalue(), warned, err, args


def _line_of(text: str, fn) -> int:
    import inspect
    lines, first = inspect.getsourcelines(fn)
    hits = [first + i for i, line in enumerate(lines) if text in line]
    assert len(hits) == 1, (text, hits)
    return hits[0]


def _names_line(message: str, line: int) -> None:
    m = re.search(re.escape(THIS_FILE) + r":(\d+)", message)
    assert m and int(m.group(1)) == line, f"expected line {line}: {message}"


def converts(fn, *calls):
    """Default and strict equal eager on every call, with no FallbackWarning."""
    default, strict = to_graph(fn), to_graph(fn, strict=True)
    for n, args in enumerate(calls):
        exp = _run(fn, args)
        for name, g in (("default", default), ("strict", strict)):
            got = _run(g, args)
            assert got[3] is None, f"call {n} {name}: {got[3]}"
            assert not got[2], f"call {n} {name}: {got[2]}"
            assert_same(got[0], exp[0], f"call {n} {name}")
            assert got[1] == exp[1], f"call {n} {name}: printed {got[1]!r}, eager {exp[1]!r}"
            assert_same(got[4], exp[4], f"call {n} {name}: arguments")
    return default


def falls_back(fn, line_text, *calls, reason=None):
    """Default warns (first call) naming the line holding ``line_text``, equal to eager;
    strict raises ConversionError naming it."""
    line = _line_of(line_text, fn)
    default, strict = to_graph(fn), to_graph(fn, strict=True)
    for n, args in enumerate(calls):
        exp = _run(fn, args)
        got = _run(default, args)
        assert got[2] or n > 0, f"call {n}: no FallbackWarning"
        for message in got[2]:
            _names_line(message, line)
            assert reason is None or reason in message, message
            assert "tracing failed" not in message, message
        assert_same(got[0], exp[0], f"call {n}")
        assert got[1] == exp[1], f"call {n}: printed {got[1]!r}, eager {exp[1]!r}"
        assert_same(got[4], exp[4], f"call {n}: arguments")
    with pytest.raises(ConversionError) as info:
        strict(*calls[0])
    _names_line(str(info.value), line)


# ------------------------------------------------------------ the user's own error
def too_wide(x, k):
    if k > x.shape[0]:
        raise ValueError(f"kernel {k} wider than signal {x.shape[0]}")
    return x * k


def assert_python(x, n):
    assert x.dim() == 1, f"expected 1-D, got {x.dim()}-D"
    assert x.shape[0] >= n
    return x[:n].cumsum(0)


def match_name(x, name):
    match name:
        case "relu":
            return torch.relu(x)
        case s if s.startswith("scale_"):
            return x * float(s.split("_")[1])
        case _:
            raise ValueError(f"unknown activation {name!r}")


def printed_then_raised(x, k):
    print("checking", k)
    y = x.sin()
    if k < 0:
        raise RuntimeError("negative k")
    return y * k


class ShapeError(Exception):
    def __init__(self, got, want):
        super().__init__(f"got {got}, want {want}")


def custom_error_with_cause(x, want):
    try:
        {"a": 1}[want]
    except KeyError as e:
        raise ShapeError(x.shape[0], want) from e
    return x + 1


def _check_rows(x, n):
    if x.shape[0] != n:
        raise IndexError(f"{x.shape[0]} rows, not {n}")


def helper_raises(x, n):
    _check_rows(x, n)
    return x.exp()


def key_error(x, table, key):
    return x * table[key]


def writes_argument_then_raises(x, k):
    x.add_(1.0)
    if k > 2:
        raise ValueError("k too large")
    return x * k


@pytest.mark.parametrize("fn, calls", [
    (too_wide, ((torch.ones(4), 2), (torch.ones(2), 5), (torch.ones(3), 1), (torch.ones(2), 5))),
    (assert_python, ((torch.arange(4.0), 2), (torch.arange(2.0), 5), (torch.ones(2, 2), 1),
                     (torch.arange(4.0), 3))),
    (match_name, ((torch.tensor([1.0, -2.0]), "relu"), (torch.tensor([1.0]), "swish"),
                  (torch.tensor([1.0, -2.0]), "scale_3"), (torch.tensor([1.0]), "swish"))),
    (printed_then_raised, ((torch.ones(2), 2), (torch.ones(2), -1), (torch.ones(2), -1))),
    (custom_error_with_cause, ((torch.ones(2), "a"), (torch.ones(3), "b"))),
    (helper_raises, ((torch.ones(2), 2), (torch.ones(3), 2), (torch.ones(3), 3))),
    (key_error, ((torch.ones(2), {"a": 2.0}, "a"), (torch.ones(2), {"a": 2.0}, "b"))),
    (writes_argument_then_raises, ((torch.ones(2), 1), (torch.ones(2), 3), (torch.ones(2), 2))),
], ids=lambda v: getattr(v, "__name__", ""))
def test_the_users_own_error_raised_as_eager_with_no_fallback(fn, calls):
    converts(fn, *calls)


def test_the_users_error_is_eagers_own_object_with_its_cause():
    g = to_graph(custom_error_with_cause)
    with pytest.raises(ShapeError, match="got 3, want b") as info:
        g(torch.ones(3), "b")
    assert isinstance(info.value.__cause__, KeyError)


def test_a_later_good_call_of_the_signature_that_raised_converts():
    g = to_graph(too_wide)
    with pytest.raises(ValueError):
        g(torch.ones(2), 5)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        assert_same(g(torch.ones(2), 2), torch.ones(2) * 2)
    assert g.cache_info().fallbacks == 0


def test_a_trace_error_eager_does_not_raise_falls_back_running_once():
    def f(n, log):
        log.append(1)
        v = n.item()
        return sum(i for i in range(1, v) if v % i == 0)
    log = []
    with pytest.warns(FallbackWarning, match="Python iterates a range"):
        assert to_graph(f)(torch.tensor(6), log) == 6
    assert log == [1]          # (the eager run that gave the result is the only one)
    falls_back(f, "return sum(i for i in range(1, v)", (torch.tensor(6), []),
               (torch.tensor(28), []), reason="Python iterates a range()")


# ------------------------------------------------------------ raise in a loop's else
def for_else_raise(x):
    for i in range(10):
        if x.abs().max() < 1:
            break
        x = x / 2
    else:
        raise RuntimeError("no convergence")
    return x, i


def while_else_raise(a, steps):
    """Newton's square root with an iteration cap: too few steps raise."""
    r, k = a, 0
    while k < steps:
        r = 0.5 * (r + a / r)
        k += 1
        if (r * r - a).abs() < 1e-3:
            break
    else:
        msg = f"sqrt not found in {steps} steps"
        raise ArithmeticError(msg)
    return r, k


def tensor_loop_else_raise(xs, limit):
    total = xs[0] * 0
    for v in xs:
        total = total + v
        if total > limit:
            break
    else:
        raise ValueError("limit never reached")
    return total


def else_without_break(x):
    for _ in range(2):
        x = x + 1
    else:
        raise ValueError("always")
    return x  # noqa - unreachable, as written


@pytest.mark.parametrize("fn, calls", [
    (for_else_raise, ((torch.tensor([8.0]),), (torch.tensor([8.0 ** 20]),), (torch.tensor([0.5]),))),
    (while_else_raise, ((torch.tensor(2.0), 20), (torch.tensor(1e6), 3), (torch.tensor(9.0), 20))),
    (tensor_loop_else_raise, ((torch.tensor([1.0, 2.0, 3.0]), 2.5), (torch.tensor([1.0, 2.0, 3.0]), 10.0),
                              (torch.tensor([5.0, 2.0, 3.0]), 2.5))),
    (else_without_break, ((torch.ones(2),),)),
], ids=lambda v: getattr(v, "__name__", ""))
def test_raise_in_a_loop_else_after_a_tensor_break(fn, calls):
    converts(fn, *calls)


def test_the_loop_else_raise_is_a_check_in_the_graph():
    ops = op_counts(to_graph(while_else_raise, strict=True).graph(torch.tensor(2.0), 20))
    assert ops["while"] == 1 and ops["assert_true"] == 1, ops


# ------------------------------------------------------------ try around graph ops
def solve_or_lstsq(A, b):
    try:
        x = torch.linalg.solve(A, b)
        how = "solve"
    except torch.linalg.LinAlgError:
        x = torch.linalg.lstsq(A, b[:, None]).solution[:, 0]
        how = "lstsq"
    return x, how


def solve_except_runtime_error(A, b):
    try:
        return torch.linalg.solve(A, b)
    except RuntimeError:
        return torch.zeros_like(b)


def solve_bare_except(A, b):
    try:
        return torch.linalg.solve(A, b)
    except:  # noqa: E722
        return torch.zeros_like(b)


def _solve(A, b):
    return torch.linalg.solve(A, b)


def solve_in_a_helper(A, b):
    try:
        return _solve(A, b)
    except torch.linalg.LinAlgError:
        return None


def solve_per_row_in_a_loop(A, b):
    out = []
    for a in A:
        try:
            out.append(torch.linalg.solve(a, b))
        except torch.linalg.LinAlgError:
            out.append(torch.zeros_like(b))
    return out


_GOOD = (torch.tensor([[2.0, 0.0], [0.0, 4.0]]), torch.tensor([1.0, 2.0]))
_SINGULAR = (torch.tensor([[1.0, 2.0], [2.0, 4.0]]), torch.tensor([1.0, 1.0]))


_ROWS_GOOD = (torch.stack([_GOOD[0], _GOOD[0]]), _GOOD[1])
_ROWS_SINGULAR = (torch.stack([_GOOD[0], _SINGULAR[0]]), _GOOD[1])


@pytest.mark.parametrize("fn, calls", [
    (solve_or_lstsq, (_GOOD, _SINGULAR, _GOOD)),
    (solve_except_runtime_error, (_GOOD, _SINGULAR, _GOOD)),
    (solve_bare_except, (_GOOD, _SINGULAR)),
    (solve_in_a_helper, (_GOOD, _SINGULAR, _GOOD)),
    (solve_per_row_in_a_loop, (_ROWS_GOOD, _ROWS_SINGULAR, _ROWS_GOOD)),
], ids=lambda v: getattr(v, "__name__", ""))
def test_a_handler_of_errors_the_graph_raises_when_it_runs_replays_eagerly(fn, calls):
    """The graph follows the try body; a call whose graph raises (a singular matrix) runs
    eagerly with a FallbackWarning naming the try, so the handler does what eager's does
    (``runtime/try_replays``); strict mode raises ConversionError on that call only."""
    line = _line_of("try:", fn)
    default, strict = to_graph(fn), to_graph(fn, strict=True)
    for n, args in enumerate(calls):
        singular = args is _SINGULAR or args is _ROWS_SINGULAR
        exp = _run(fn, args)
        got = _run(default, args)
        assert bool(got[2]) == singular, f"call {n}: {got[2]}"
        for message in got[2]:
            _names_line(message, line)
            assert "inside a try whose handler may catch it" in message, message
        assert_same(got[0], exp[0], f"call {n}")
        assert_same(got[4], exp[4], f"call {n}: arguments")
        if singular:
            with pytest.raises(ConversionError) as info:
                strict(*args)
            _names_line(str(info.value), line)
        else:
            assert_same(_run(strict, args)[0], exp[0], f"call {n} strict")


def solve_then_write(A, b, out):
    try:
        x = torch.linalg.solve(A, b)
    except torch.linalg.LinAlgError:
        x = torch.zeros_like(b)
    out.add_(1)
    return x


def test_a_replaying_try_in_a_function_with_effects_still_falls_back():
    """A failed run could not be replayed when the graph writes an argument in place."""
    falls_back(solve_then_write, "try:", (*_GOOD, torch.zeros(2)), (*_SINGULAR, torch.zeros(2)),
               reason="with effects")


def solve_then_print_in_finally(A, b):
    try:
        x = torch.linalg.solve(A, b)
    finally:
        print("solved", A.shape[0])
    return x


def gather_then_print_in_finally(x, i):
    try:
        y = x[i] * 2
    finally:
        print("done")
    return y


def test_a_finally_with_an_effect_after_ops_that_raise_when_the_graph_runs_falls_back():
    # eager prints before the singular matrix's LinAlgError reaches the caller; a graph
    # would stop at the solve
    falls_back(solve_then_print_in_finally, 'print("solved", A.shape[0])', _GOOD, _SINGULAR,
               reason="a `finally` block with an effect")
    falls_back(gather_then_print_in_finally, 'print("done")',
               (torch.ones(3), torch.tensor([0, 2])), (torch.ones(3), torch.tensor([5])),
               reason="a `finally` block with an effect")


def test_a_finally_with_an_effect_after_ops_that_cannot_raise_converts():
    def f(x):
        try:
            if x.sum() > 0:
                return x * 2
            y = torch.linalg.norm(x) + x[0]
        finally:
            print("cleanup")
        return y
    converts(f, (torch.tensor([1.0, 2.0]),), (torch.tensor([-3.0, 2.0]),))

    def g(A, b, log):
        try:
            x = torch.linalg.solve(A, b)
        finally:
            log.append(1)          # a Python effect: runs while tracing, as eagerly
        return x
    converts(g, (*_GOOD, []))


def test_a_handler_of_python_errors_only_still_converts():
    def f(A, b, table):
        try:
            scale = table["scale"]
        except KeyError:
            scale = 1.0
        return torch.linalg.solve(A, b) * scale
    converts(f, (*_GOOD, {"scale": 2.0}), (*_GOOD, {}))


# ------------------------------------------------------------ objects updated in a loop
class _Meter:
    def __init__(self):
        self.sum = 0
        self.count = 0
        self.avg = 0

    def update(self, val, n=1):
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


def meter_in_a_tensor_loop(losses, sizes):
    m = _Meter()
    for loss, n in zip(losses, sizes):
        m.update(loss.item(), int(n))
    return m.sum, m.count, m.avg


def meter_attribute_written_in_loop(xs):
    m = _Meter()
    for v in xs:
        m.sum += v.item()
    return m.sum


def test_an_object_made_in_the_call_updated_in_a_tensor_loop_converts():
    converts(meter_in_a_tensor_loop, (torch.tensor([0.5, 0.25, 1.0]), torch.tensor([2, 4, 1])),
             (torch.tensor([1.0, 3.0]), torch.tensor([1, 1])))
    converts(meter_attribute_written_in_loop, (torch.tensor([0.5, 1.5]),),
             (torch.tensor([2.0]),))


# ------------------------------------------------------------ iteration forms
def dict_comprehension_over_enumerate(x):
    d = {i: v * 2 for i, v in enumerate(x)}
    return d[0], len(d), sorted(d)


def generator_over_zip(x, y):
    return torch.stack(tuple(a * b for a, b in zip(x, y))), set(i for i, _ in enumerate(x))


def reversed_in_a_generator(x):
    return list(v + 1 for v in reversed(x))


def max_with_default(x):
    dp = [1] * x.shape[0]
    for i in range(x.shape[0]):
        if x[i] > 0:
            dp[i] = 2 + i
    return max(dp, default=0), min(dp, default=-1), max([], default=7)


def max_default_beside_arguments(x):
    return max(1, 2, default=0) + x


@pytest.mark.parametrize("fn, calls", [
    (dict_comprehension_over_enumerate, ((torch.tensor([3.0, 1.0]),), (torch.tensor([1.0, 2.0, 5.0]),))),
    (generator_over_zip, ((torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0])),)),
    (reversed_in_a_generator, ((torch.tensor([1.0, 2.0, 3.0]),),)),
    (max_with_default, ((torch.tensor([3.0, -1.0, 2.0]),), (torch.tensor([-1.0, -2.0]),))),
    (max_default_beside_arguments, ((torch.ones(2),),)),
], ids=lambda v: getattr(v, "__name__", ""))
def test_python_iteration_of_traced_iterables_of_static_length(fn, calls):
    converts(fn, *calls)


def test_python_iteration_of_a_run_time_length_falls_back_with_a_readable_reason():
    def f(n):
        v = n.item()
        return {i: i * i for i in range(v)}
    falls_back(f, "return {i: i * i for i in range(v)}", (torch.tensor(3),), (torch.tensor(5),),
               reason="Python iterates a range() whose length is known only when the graph runs")
