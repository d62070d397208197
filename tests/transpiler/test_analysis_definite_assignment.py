"""Definite assignment (analysis.definite_assignment) on small functions: which locals are
read only where Python has certainly bound them."""
import textwrap

import gast
import pytest

from transpiler.analysis import definite_assignment
from transpiler.pyct import anno


def _bound(source):
    fn = gast.parse(textwrap.dedent(source)).body[0]
    definite_assignment.analyze(fn)
    return set(anno.getanno(fn, anno.Key.READ_WHEN_BOUND))


CASES = [
    ("for_else", '''
        def f(x):
            for r in x:
                if r:
                    v = r
                    break
            else:
                v = 0
            return v
     ''', {'v', 'r'}),
    ("break_only", '''
        def f(x):
            for r in x:
                if r:
                    v = r
                    break
            return v
     ''', {'r'}),
    ("while_true_break", '''
        def f(x):
            while True:
                v = x
                if v:
                    break
            return v
     ''', {'v'}),
    ("while_test_no_else", '''
        def f(x):
            while x:
                v = x
                break
            return v
     ''', set()),
    ("while_else_never_runs", '''
        def f(x):
            while x:
                x = x - 1
                if x > 3:
                    v = 1
                    break
            else:
                v = 2
            return v
     ''', {'v', 'x'}),
    ("continue_then_read", '''
        def f(x):
            for r in x:
                if r:
                    continue
                v = r
                w = v
            return x
     ''', {'r', 'v', 'w'}),
    ("read_in_next_iteration", '''
        def f(x):
            for r in x:
                if r:
                    s = v
                v = r
            return x
     ''', {'r', 's'}),      # (s: never read)
    ("return_in_try_finally", '''
        def f(x):
            try:
                if x:
                    return 1
                y = 2
            finally:
                pass
            return y
     ''', {'y'}),
    ("except_may_skip", '''
        def f(x):
            try:
                y = g(x)
            except KeyError:
                pass
            return y
     ''', set()),
    ("except_binds", '''
        def f(x):
            try:
                y = g(x)
            except KeyError as e:
                y = e
            return y
     ''', {'y', 'e'}),
    ("handler_name_deleted", '''
        def f(x):
            try:
                y = g(x)
            except KeyError as e:
                y = 1
            return e
     ''', {'y'}),
    ("finally_read_of_body_name", '''
        def f(x):
            try:
                y = g(x)
            finally:
                z = y
            return z
     ''', {'z'}),
    ("return_in_finally", '''
        def f(x):
            try:
                pass
            finally:
                return x
            return y
     ''', set()),
    ("deleted", '''
        def f(x):
            y = x
            del y
            if x:
                y = 1
            return y
     ''', set()),
    ("lambda_reads_later", '''
        def f(x):
            y = 1
            g = lambda: y
            return g
     ''', {'g'}),
    ("generator_reads_later", '''
        def f(x):
            y = 1
            g = (y for _ in x)
            return g
     ''', {'g'}),
    ("list_comprehension_reads_now", '''
        def f(x):
            y = 1
            return [y for _ in x]
     ''', {'y'}),
    ("walrus", '''
        def f(x):
            if (n := len(x)) > 1:
                pass
            return n
     ''', set()),
    ("with_body", '''
        def f(x):
            with x as c:
                y = c
            return y, c
     ''', {'y', 'c'}),
    ("match", '''
        def f(x):
            match x:
                case [a, b] if a:
                    z = a + b
                case _:
                    z = 0
            return z
     ''', {'a', 'b', 'z'}),
    ("match_may_fall_through", '''
        def f(x):
            match x:
                case [a]:
                    z = a
            return z
     ''', {'a'}),
    ("global_declared", '''
        def f(x):
            global y
            y = 1
            return y
     ''', set()),
]


@pytest.mark.parametrize("source,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_read_when_bound(source, expected):
    assert _bound(source) == expected


def test_nested_functions_are_analysed_on_their_own():
    fn = gast.parse(textwrap.dedent('''
        def f(x):
            def g(y):
                if y:
                    z = 1
                else:
                    z = 2
                return z
            return g
    ''')).body[0]
    definite_assignment.analyze(fn)
    inner = fn.body[0]
    assert set(anno.getanno(fn, anno.Key.READ_WHEN_BOUND)) == {'g'}
    assert set(anno.getanno(inner, anno.Key.READ_WHEN_BOUND)) == {'z'}
