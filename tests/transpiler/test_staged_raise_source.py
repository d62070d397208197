"""``if test: raise E(msg)`` -> ``tg.raise_if`` (converters/staged_raises): the generated
source exactly, where it must stay an ``if``, and Python semantics through a fake ``tg``."""
import textwrap

import pytest

import fake_tg
from transpiler import conversion


def _golden(fn, expected):
    assert conversion.to_source(fn) == textwrap.dedent(expected).lstrip('\n')


def raise_if(test, parts):      # the Python semantics of runtime's ``tg.raise_if``
    if test:
        error, args = parts()
        raise error if args is None else error(*args)


class _Tg(fake_tg._Module):
    raise_if = staticmethod(raise_if)


def _converted(fn):
    return conversion.convert(fn, {'tg': _Tg()}).fn


def checked(x, vocab):
    if x.max() >= vocab:
        top = x.max()
        raise ValueError(f'max {top} >= {vocab}')
    return x


def test_check_with_assignments():
    _golden(checked, '''
        def checked(x, vocab):
            raise_test = (tg.call(x.max) >= vocab)
            def raise_parts():
                top = tg.call(x.max)
                return (ValueError, (tg.fstring('max ', (top, '', ''), ' >= ', (vocab, '', '')),))
            tg.raise_if(raise_test, raise_parts)
            return x
    ''')


def chain(x):
    y = x
    if x < 0:
        raise ValueError
    elif x > 10:
        y = 10
    elif x == 5:
        raise KeyError('five')
    else:
        y = y + 1
    return y


def test_elif_chain_and_raise_in_else():
    _golden(chain, '''
        def chain(x):
            y = x
            raise_test_1 = (x < 0)
            def raise_parts_1():
                return (ValueError, None)
            tg.raise_if(raise_test_1, raise_parts_1)
            def if_body(y):
                y = 10
                return (y,)
            def else_body(y):
                raise_test = (x == 5)
                def raise_parts():
                    return (KeyError, ('five',))
                tg.raise_if(raise_test, raise_parts)
                y = (y + 1)
                return (y,)
            (y,) = tg.if_stmt((x > 10), if_body, else_body, (y,), ('y',))
            return y
    ''')


def in_else(x):
    if x > 0:
        y = x * 2
    else:
        raise RuntimeError('non-positive')
    return y


def test_raise_in_else_checks_the_negated_test():
    _golden(in_else, '''
        def in_else(x):
            raise_test = tg.not_((x > 0))
            def raise_parts():
                return (RuntimeError, ('non-positive',))
            tg.raise_if(raise_test, raise_parts)
            y = (x * 2)
            return y
    ''')


def under_try(x):
    try:
        if x > 0:
            raise ValueError('big')
    except ValueError:
        x = 0
    return x


def under_custom_with(x, cm):
    with cm:
        if x > 0:
            raise ValueError('big')
    return x


def raise_from(x):
    if x > 0:
        raise ValueError('big') from None
    return x


def with_keywords(x):
    if x > 0:
        raise ImportError('missing', name='m')
    return x


def effect_first(x, log):
    if x > 0:
        log.append(x)
        raise ValueError('big')
    return x


def read_before_bound(x, m):
    if x > 0:
        m = m + 1
        raise ValueError(f'{m}')
    return x


def global_write(x):
    global COUNT
    if x > 0:
        COUNT = 1
        raise ValueError('big')
    return x


@pytest.mark.parametrize('fn', [under_try, under_custom_with, raise_from, with_keywords,
                                effect_first, read_before_bound, global_write])
def test_stays_an_if(fn):
    assert 'raise_if' not in conversion.to_source(fn)


def under_no_grad(x, torch):
    with torch.no_grad():
        if x > 0:
            raise ValueError('big')
    return x


def in_nested_def_under_try(x):
    def check(v):
        if v > 0:
            raise ValueError('big')
        return v
    try:
        y = check(x)
    except ValueError:
        y = 0
    return y


def test_converted_under_no_grad_and_in_a_def_a_try_calls():
    # (a try around the call is the runtime's: effects.try_guard refuses a staged check
    # whose error a handler catches)
    assert 'raise_if' in conversion.to_source(under_no_grad)
    assert 'raise_if' in conversion.to_source(in_nested_def_under_try)


def test_locations_and_reads_make_no_cells():
    source = conversion.to_source(loop_check)
    assert 'nonlocal' not in source and 'raise_if' in source


def loop_check(xs):
    total = 0
    for v in xs:
        step = v * 2
        if step > 5:
            raise ValueError(f'step {step} after {total}')
        total = total + step
    return total


@pytest.mark.parametrize('fn, cases', [
    (checked, [([1, 2], 5), ([1, 7], 5)]),
    (chain, [(-1,), (11,), (5,), (3,)]),
    (in_else, [(2,), (-2,)]),
    (loop_check, [([1, 2],), ([1, 2, 3, 1],)]),
])
def test_python_semantics(fn, cases):
    class Seq(list):
        def max(self):
            return max(self)
    converted = _converted(fn)
    for args in cases:
        args = tuple(Seq(a) if isinstance(a, list) else a for a in args)
        try:
            expected = ('ok', fn(*args))
        except Exception as e:  # noqa: BLE001 - the same error is the point
            expected = (type(e), str(e))
        try:
            got = ('ok', converted(*args))
        except Exception as e:  # noqa: BLE001
            got = (type(e), str(e))
        assert got == expected


def test_test_on_the_if_line_check_on_the_raise_line():
    converted = conversion.convert(checked, {'tg': _Tg()})
    first = checked.__code__.co_firstlineno
    lines = converted.source.splitlines()
    where = {text.strip().split(' ')[0]: converted.line_map[i + 1][1]
             for i, text in enumerate(lines) if i + 1 in converted.line_map}
    assert where['raise_test'] == first + 1 and where['tg.raise_if(raise_test,'] == first + 3
