"""Golden tests: the generated source of small functions, exactly."""
import textwrap

import pytest

from transpiler import conversion
from transpiler.errors import ConversionError


def _golden(fn, expected):
    assert conversion.to_source(fn) == textwrap.dedent(expected).lstrip('\n')


def if_else(x, n):
    if x.sum() > 0:
        y = x * 2
    else:
        y = -x
    return y


def test_if_else():
    _golden(if_else, '''
        def if_else(x, n):
            def if_body(y):
                y = (x * 2)
                return (y,)
            def else_body(y):
                y = (- x)
                return (y,)
            y = tg.Unassigned('y')
            (y,) = tg.if_stmt((tg.call(x.sum) > 0), if_body, else_body, (y,), ('y',))
            return y
    ''')


def while_loop(n):
    i = 0
    while i < n:
        i += 1
    return i


def test_while():
    _golden(while_loop, '''
        def while_loop(n):
            i = 0
            def loop_test(i):
                return (i < n)
            def loop_body(i):
                i += 1
                return (i,)
            (i,) = tg.while_stmt(loop_test, loop_body, (i,), ('i',))
            return i
    ''')


def for_break(xs):
    s = 0
    for x in xs:
        if x < 0:
            break
        s += x
    return s


def test_for_break():
    _golden(for_break, '''
        def for_break(xs):
            s = 0
            brk = False
            def loop_body(x, brk, s):
                def if_body(brk):
                    brk = True
                    return (brk,)
                def else_body(brk):
                    return (brk,)
                (brk,) = tg.if_stmt((x < 0), if_body, else_body, (brk,), ('brk',))
                def if_body_1(s):
                    s += x
                    return (s,)
                def else_body_1(s):
                    return (s,)
                (s,) = tg.if_stmt(tg.not_(brk), if_body_1, else_body_1, (s,), ('s',))
                return (brk, s)
            (brk, s) = tg.for_stmt(xs, (lambda brk, s: tg.not_(brk)), loop_body, (brk, s), ('brk', 's'))
            return s
    ''')


def for_continue(xs):
    s = 0
    for x in xs:
        if x < 0:
            continue
        s += x
    return s


def test_for_continue():
    _golden(for_continue, '''
        def for_continue(xs):
            s = 0
            def loop_body(x, s):
                cont = False
                def if_body(cont):
                    cont = True
                    return (cont,)
                def else_body(cont):
                    return (cont,)
                (cont,) = tg.if_stmt((x < 0), if_body, else_body, (cont,), ('cont',))
                def if_body_1(s):
                    s += x
                    return (s,)
                def else_body_1(s):
                    return (s,)
                (s,) = tg.if_stmt(tg.not_(cont), if_body_1, else_body_1, (s,), ('s',))
                return (s,)
            (s,) = tg.for_stmt(xs, None, loop_body, (s,), ('s',))
            return s
    ''')


def early_return(x):
    if x > 0:
        return 1
    return 2


def test_return():
    _golden(early_return, '''
        def early_return(x):
            do_return = False
            retval = tg.UndefinedReturn()
            def if_body(do_return, retval):
                retval = 1
                do_return = True
                return (do_return, retval)
            def else_body(do_return, retval):
                return (do_return, retval)
            (do_return, retval) = tg.if_stmt((x > 0), if_body, else_body, (do_return, retval), ('do_return', 'retval'))
            def if_body_1(retval):
                retval = 2
                do_return = True
                return (retval,)
            def else_body_1(retval):
                return (retval,)
            (retval,) = tg.if_stmt(tg.not_(do_return), if_body_1, else_body_1, (retval,), ('retval',))
            return retval
    ''')


def logic(a, b, c):
    return (a and b or not c, a < b < c, a if b else c)


def test_logical_and_ternary():
    _golden(logic, '''
        def logic(a, b, c):
            return (tg.ifexp(a, (lambda : tg.or_(b, (lambda : tg.not_(c)))), (lambda : tg.not_(c))), tg.and_((a < b), (lambda : (b < c))), tg.ifexp(b, (lambda : a), (lambda : c)))
    ''')


def assert_and_try(x):
    """Docstrings are dropped from the generated code."""
    assert x, 'msg'
    try:
        print(x)
    except ValueError:
        pass


def test_assert_try_call():
    _golden(assert_and_try, '''
        def assert_and_try(x):
            tg.assert_stmt(x, (lambda : 'msg'))
            with tg.try_guard((lambda : (ValueError,))):
                try:
                    with tg.try_body(False):
                        tg.call(print, x)
                except ValueError:
                    pass
    ''')


def plain_return(x):
    y = x + 1
    return y


def test_no_flags_for_final_return():
    assert 'do_return' not in conversion.to_source(plain_return)


def gen(x):
    yield x


def deletes(x):
    y = 0
    if x:
        del y
    return y


def uses_tg(x):
    tg = x
    return tg


def exception_groups(x):
    try:
        y = x
    except* ValueError:     # (converting it crashed inside the try converter: refused now)
        y = 0
    return y


@pytest.mark.parametrize('fn,reason', [(gen, 'yield'), (deletes, 'del y'), (uses_tg, "'tg'"),
                                       (exception_groups, 'try')])
def test_errors_point_at_user_line(fn, reason):
    with pytest.raises(ConversionError) as info:
        conversion.to_source(fn)
    err = info.value
    assert reason in err.reason and err.filename == __file__
    with open(__file__) as f:
        assert reason.strip("'").split()[0] in f.readlines()[err.lineno - 1]
    assert str(err) == f'{err.filename}:{err.lineno}: {err.reason}'


def test_exception_groups_are_refused_by_name():
    with pytest.raises(ConversionError, match=r'try/except\* \(exception groups\)'):
        conversion.to_source(exception_groups)


def test_source_unavailable():
    namespace = {}
    exec('def f(x):\n    return x\n', namespace)
    with pytest.raises(ConversionError, match='source code'):
        conversion.to_source(namespace['f'])


def test_line_map_covers_generated_lines():
    converted = conversion.convert(for_break, {'tg': None})
    lines = converted.source.splitlines()
    assert set(converted.line_map) == set(range(1, len(lines) + 1))
    first = for_break.__code__.co_firstlineno
    assert {line for _, line in converted.line_map.values()} <= set(range(first, first + 7))
    # the `break` becomes `brk = True`: it maps back to the user's break line
    brk_line = next(i for i, l in enumerate(lines, 1) if l.strip() == 'brk = True')
    assert converted.line_map[brk_line] == (__file__, first + 4)
    import linecache
    assert linecache.getline(converted.filename, 1).startswith('def for_break')


def test_lambda_selection():
    f, g = (lambda x: x + 1), (lambda y: y if y else 0)  # noqa: E731
    assert conversion.to_source(f).endswith('return (x + 1)\n')
    assert 'tg.ifexp' in conversion.to_source(g)
    h, k = (lambda x: x), (lambda x: -x)  # noqa: E731
    with pytest.raises(ConversionError, match='several lambdas'):
        conversion.to_source(h)
