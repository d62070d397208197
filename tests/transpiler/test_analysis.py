"""Analysis unit tests: activity, liveness, state, reaching definitions on small functions."""
import textwrap

import gast

from transpiler.analysis import activity, liveness, reaching_defs, state
from transpiler.pyct import anno


def _analyzed(source):
    fn = gast.parse(textwrap.dedent(source)).body[0]
    activity.analyze(fn)
    liveness.analyze(fn)
    state.analyze(fn)
    reaching_defs.analyze(fn)
    return fn


def _get(node, key):
    return anno.getanno(node, key)


def test_activity_reads_modified_composites():
    fn = _analyzed('''
        def f(self, x, d):
            global g
            self.h = x + g
            d['k'] = lambda: z
            y, *w = x
            g += 1
    ''')
    attr, sub, unpack, aug = fn.body[1:]
    assert _get(attr, anno.Key.READ) == {'self', 'x', 'g'}
    assert _get(attr, anno.Key.MODIFIED) == {'self'}
    assert _get(attr, anno.Key.COMPOSITES) == {'self.h'}
    assert _get(sub, anno.Key.READ) == {'d', 'z'}
    assert _get(sub, anno.Key.COMPOSITES) == {"d['k']"}
    assert _get(unpack, anno.Key.MODIFIED) == {'y', 'w'}
    assert _get(aug, anno.Key.READ) == {'g'} and _get(aug, anno.Key.MODIFIED) == {'g'}
    scope = _get(fn, anno.Key.SCOPE)
    assert scope.params == {'self', 'x', 'd'} and scope.globals == {'g'}
    assert scope.locals == {'self', 'x', 'd', 'y', 'w'}


def test_liveness_and_state_of_if():
    fn = _analyzed('''
        def f(x):
            a = 1
            if x:
                a = 2
                b = 3
                t = 4
            return a + b
    ''')
    if_stmt = fn.body[1]
    assert _get(if_stmt, anno.Key.LIVE_OUT) == {'a', 'b'}
    assert _get(if_stmt, anno.Key.LIVE_IN) == {'x', 'a', 'b'}
    assert _get(if_stmt, anno.Key.STATE) == ('a', 'b')           # t is dead after
    assert _get(if_stmt, anno.Key.DEFINED_IN) == {'x', 'a'}      # b may be undefined


def test_loop_state_includes_read_before_write_and_excludes_temporaries():
    fn = _analyzed('''
        def f(n):
            s = 0
            i = 0
            while i < n:
                tmp = i * 2
                s = s + tmp
                i += 1
            for j in range(n):
                k = j
            return s
    ''')
    while_stmt, for_stmt = fn.body[2], fn.body[3]
    assert _get(while_stmt, anno.Key.STATE) == ('i', 's')
    assert _get(for_stmt, anno.Key.STATE) == ()
    assert _get(for_stmt, anno.Key.LIVE_OUT) == {'s'}


def test_reaching_defs_after_converted_statement():
    fn = _analyzed('''
        def f(c, d):
            if c:
                y = 0
            if d:
                y = 1
            return y
    ''')
    first, second = fn.body[0], fn.body[1]
    assert 'y' not in _get(first, anno.Key.DEFINED_IN)
    # the first if binds its state, so the second must not reset y to Undefined
    assert 'y' in _get(second, anno.Key.DEFINED_IN)


def test_declared_names_are_never_state():
    fn = _analyzed('''
        def f(n):
            nonlocal k
            for i in range(n):
                k = k + i
            return k
    ''')
    assert _get(fn.body[1], anno.Key.STATE) == ()
