"""Differential tests: converted code run through fake_tg equals the original on Python values."""
import pytest

import fake_tg
from fake_tg import convert

COUNTER = 0


def branches(x):
    if x > 0:
        y = x * 2
    elif x < -5:
        y = -x
    else:
        y = 0
    return y


def while_break_continue(n):
    s, i = 0, 0
    while i < n:
        i += 1
        if i % 3 == 0:
            continue
        if s > 20:
            break
        s += i
    else:
        s = -s
    return s, i


def for_else(xs):
    total = 0
    for i, v in enumerate(xs):
        if v < 0:
            break
        total += i * v
    else:
        total += 1000
    return total


def nested_return(n):
    for i in range(n):
        j = 0
        while j < i:
            if i * j > 6:
                return i, j
            j += 1
    if n > 2:
        return None
    return -1


def no_value_return(xs):
    for x in xs:
        if x == 3:
            return
    xs.append(0)
    return xs


def falls_through(x, out):
    if x > 1:
        return x
    out.append(x)


def logic(a, b, c):
    return (a and b or c, not a, a < b < c, a if b else c, [a, b] and c or None)


def chained_call_compare(xs):
    return 0 < len(xs) <= 3


def mutation(d, xs):
    for k in range(3):
        if k % 2:
            d['odd'] = d.get('odd', 0) + k
        else:
            xs[0] = xs[0] + k
    return d, xs


class Acc:
    def __init__(self):
        self.h = 0

    def step(self, n):
        while self.h < n:
            self.h += 2
        return self.h


def uses_global(n):
    global COUNTER
    for _ in range(n):
        if n > 1:
            COUNTER += 1
    return COUNTER


def make_closure(k):
    def inner(x):
        nonlocal k
        if x > k:
            k = x
        return k
    return inner


def nested_def(n):
    def helper(m):
        if m > 2:
            return m * 10
        return m
    return [helper(i) for i in range(n)]


def with_defaults(a, b=2, *args, c=3, **kw):
    if a > b:
        return a + c + len(args) + len(kw)
    return b


def try_block(x):
    try:
        if x > 0:
            y = 1 / x
        else:
            raise ValueError('neg')
    except ValueError:
        y = -1
    return y


def asserting(x):
    assert x > 0, f'bad {x}'
    return x


def loop_var_after(n):
    for i in range(n):
        pass
    return i


def walrus_test(xs):
    # the binding in the test is evaluated before the loop, after each iteration and
    # before each continue, never after a break (converters/walrus_tests.py)
    seen, i = [], 0
    while (v := xs[i] if i < len(xs) else -1) >= 0:
        i += 1
        if v % 2:
            continue
        if v > 8:
            break
        seen.append(v)
    else:
        seen.append('else')
    return seen, v, i


def walrus_not_first(xs):
    i = 0
    while i < len(xs) and (v := xs[i]) > 0:    # conditional binding: left in the test
        i += 1
    return i


def walrus_behind_and_or(xs):
    m, k = -1, -2      # (if/elif tests: the later operands become statements)
    if len(xs) > 1 and (m := xs[1]) > 0 and (k := m * 2) < 10:
        return m, k
    elif len(xs) == 0 or (k := xs[0]) > 3:
        return k, 0
    return m, k


CASES = [
    (walrus_test, [([],), ([2, 3, 4, -1],), ([1, 10, 2],), ([3, 5],)]),
    (walrus_not_first, [([],), ([1, 2, 0, 3],), ([1, 2],)]),
    (walrus_behind_and_or, [([],), ([1, 2],), ([1, 7],), ([5, -1],), ([1, -1],), ([9],)]),
    (branches, [(3,), (-7,), (-1,)]),
    (while_break_continue, [(0,), (5,), (30,)]),
    (for_else, [([1, 2, 3],), ([1, -1, 3],), ([],)]),
    (nested_return, [(0,), (2,), (3,), (6,)]),
    (no_value_return, [([1, 3],), ([1, 2],)]),
    (logic, [(0, 1, 2), (1, 0, 2), (1, 2, 3), (3, 2, 1), ('', 'x', 'y')]),
    (chained_call_compare, [([],), ([1],), ([1, 2, 3, 4],)]),
    (nested_def, [(5,)]),
    (with_defaults, [(1,), (5,), (5, 1, 7, 8)]),
    (try_block, [(2,), (-2,)]),
    (asserting, [(3,)]),
    (loop_var_after, [(3,)]),
]


@pytest.mark.parametrize('fn,argsets', CASES, ids=[c[0].__name__ for c in CASES])
def test_same_results(fn, argsets):
    converted = convert(fn)
    for args in argsets:
        assert converted(*args) == fn(*args)


def test_with_defaults_kwargs():
    converted = convert(with_defaults)
    assert converted(5, 1, 7, 8, c=0, z=1) == with_defaults(5, 1, 7, 8, c=0, z=1) == 8
    assert converted.__defaults__ == (2,) and converted.__kwdefaults__ == {'c': 3}


def test_operators_are_used():
    fake_tg.calls.clear()
    convert(while_break_continue)(10)
    assert fake_tg.calls['while_stmt'] == 1 and fake_tg.calls['if_stmt'] > 5


def test_falls_through_returns_none():
    out = []
    assert convert(falls_through)(0, out) is None and out == [0]
    assert convert(falls_through)(5, out) == 5


def test_mutation_of_containers():
    assert convert(mutation)({}, [0]) == mutation({}, [0])


def test_method_and_self_attribute():
    a, b = Acc(), Acc()
    assert convert(a.step)(7) == b.step(7) == 8
    assert a.h == 8


def test_global_mutation_reaches_module():
    global COUNTER
    COUNTER = 0
    assert convert(uses_global)(3) == 3 and COUNTER == 3


def test_closure_nonlocal_shares_cells():
    original = make_closure(1)
    converted = convert(original)
    assert converted(5) == 5
    assert original(2) == 5   # the converted function wrote the user's own cell


def test_lambda():
    f = lambda x, y=1: x + y if x > 0 else -x  # noqa: E731
    assert convert(f)(3) == 4 and convert(f)(-3) == 3


def test_assert_message():
    with pytest.raises(AssertionError, match='bad -1'):
        convert(asserting)(-1)


def test_try_except_is_guarded():
    fake_tg.calls.clear()
    assert convert(try_block)(-2) == -1
    assert fake_tg.calls['try_guard'] == 1


def try_finally_returns(x, log):
    try:
        if x > 0:
            return x
        log.append('body')
    finally:
        log.append('finally')
    return -x


def test_try_finally_is_plain_python_and_runs_finally_on_every_path():
    fake_tg.calls.clear()
    for x in (3, -3):
        want_log, got_log = [], []
        assert convert(try_finally_returns)(x, got_log) == try_finally_returns(x, want_log)
        assert got_log == want_log
    assert fake_tg.calls['try_guard'] == 0 and fake_tg.calls['eager_only'] == 0
