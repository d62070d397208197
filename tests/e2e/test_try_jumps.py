"""``return``/``break``/``continue`` around ``try`` as Python runs them, once lowered to
flags (``transpiler/converters/jumps.py``): a ``return`` whose value raises is no return (a
handler catching it goes on to the code after), a ``try``'s ``else`` is skipped when its
body jumped, and its ``finally`` runs whole with a jump pending, a jump there replacing the
pending one. Each program runs eagerly and converted, on Python numbers and on tensors
(with tensor conditions), and is compared with eager: value, type, printed text."""
import pytest
import torch

from transpiler import to_graph


def _fails():
    raise ValueError("no value")


def return_in_finally_after_if(x):
    try:
        return 2
    finally:
        if x > 0:
            return 1
        return 0


def finally_may_return(x):
    try:
        return x + 10
    finally:
        if x > 0:
            return x - 10


def return_value_raises(x):
    try:
        return _fails()
    except ValueError:
        pass
    return x + 1


def return_value_raises_after_branch(x):
    if x > 5:
        return x * 2
    try:
        return _fails()
    except ValueError:
        x = x + 3
    return x


def else_skipped_after_return(x, log):
    try:
        if x > 0:
            return x
    except ValueError:
        log.append("handler")
    else:
        log.append("else")
    log.append("after")
    return -x


def finally_runs_with_return_pending(x, log):
    try:
        if x > 0:
            return x * 3
        log.append("body")
    finally:
        log.append("finally")
    return x


def break_in_try_with_finally(x, log):
    total = x * 0
    for i in range(4):
        try:
            if i == 2:
                break
            total = total + i
        finally:
            log.append(i)
    return total


def continue_in_try_with_else(x, log):
    total = x * 0
    for i in range(4):
        try:
            if i % 2 == 0:
                continue
        except ValueError:
            pass
        else:
            log.append(i)
        total = total + i
    return total


def return_in_handler_replaced_by_finally(x):
    try:
        _fails()
    except ValueError:
        return 1
    finally:
        if x < 0:
            return -1
    return 0


PROGRAMS = [return_in_finally_after_if, finally_may_return, return_value_raises,
            return_value_raises_after_branch, else_skipped_after_return,
            finally_runs_with_return_pending, break_in_try_with_finally,
            continue_in_try_with_else, return_in_handler_replaced_by_finally]
INPUTS = [3, -2, 0, 7, torch.tensor(3), torch.tensor(-2.0), torch.tensor(0), torch.tensor(7.0)]


def _run(fn, x, arity):
    log = []
    return fn(*((x, log) if arity == 2 else (x,))), log


def _same(got, want):
    assert type(got) is type(want), (got, want)
    if isinstance(want, torch.Tensor):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    else:
        assert got == want


@pytest.mark.parametrize("fn", PROGRAMS, ids=lambda f: f.__name__)
def test_as_eager(fn):
    converted = to_graph(fn)
    for x in INPUTS:
        arity = fn.__code__.co_argcount
        (want, want_log), (got, got_log) = _run(fn, x, arity), _run(converted, x, arity)
        _same(got, want)
        assert got_log == want_log, (x, got_log, want_log)


def else_prints_only_without_return(x):
    try:
        if x > 0:
            return x
    except ValueError:
        print("handler")
    else:
        print("else")
    print("after")
    return -x


def finally_prints_with_return_pending(x):
    try:
        if x > 0:
            return x * 3
        print("body")
    finally:
        print("finally")
    return x


@pytest.mark.parametrize("fn", [else_prints_only_without_return,
                                finally_prints_with_return_pending], ids=lambda f: f.__name__)
def test_printed_as_eager(fn, capsys):
    converted = to_graph(fn)       # (the else one falls back on tensors: print in try)
    for x in INPUTS:
        want = fn(x)
        want_out = capsys.readouterr().out
        got = converted(x)
        assert capsys.readouterr().out == want_out, x
        _same(got, want)


def return_inside_with_under_tensor_if(x):
    import contextlib
    with contextlib.nullcontext():
        if x > 0:
            return 1
        return 0


def suppressed_raise_falls_through(x):
    import contextlib
    with contextlib.suppress(ValueError):
        if x > 0:
            return x * 2
        raise ValueError("negative")


@pytest.mark.parametrize("fn", [return_inside_with_under_tensor_if,
                                suppressed_raise_falls_through], ids=lambda f: f.__name__)
def test_returns_inside_with(fn):
    converted = to_graph(fn)
    for x in INPUTS:
        _same(converted(x), fn(x))
    if fn is return_inside_with_under_tensor_if:     # (converts: every path returns an int)
        strict = to_graph(fn, strict=True)
        assert strict(torch.tensor(2)) == 1 and strict(torch.tensor(-2)) == 0


def int_returned_from_tensor_while(x):
    k = 0
    while x.sum() > 0:
        x = x - 1
        k += 1
        if k >= 2:
            return k
    return -k


def tuple_returned_from_tensor_while(a):
    x = a.clone()
    it = 0
    while (x * x - a).abs().max() > 1e-3:
        x = 0.5 * (x + a / x)
        it += 1
        if it >= 4:
            return x, it, False
    return x, it, True


@pytest.mark.parametrize("fn", [int_returned_from_tensor_while,
                                tuple_returned_from_tensor_while], ids=lambda f: f.__name__)
def test_a_number_returned_from_a_tensor_loop_stays_a_number(fn):
    converted = to_graph(fn, strict=True)
    for x in [torch.tensor([3.0, 2.0]), torch.tensor([0.5]), torch.tensor([-1.0]),
              torch.tensor([100.0]), torch.tensor([2.0])]:
        want, got = fn(x), converted(x)
        if isinstance(want, tuple):
            torch.testing.assert_close(got[0], want[0])
            assert got[1:] == want[1:] and [type(g) for g in got] == [type(w) for w in want]
        else:
            assert got == want and type(got) is type(want)
