"""Hypothesis: random nested if/while/for/break/continue/return programs over ints give the
same result converted (through fake_tg) as run directly."""
import itertools
import linecache

from hypothesis import given, settings, HealthCheck
from hypothesis import strategies as st

from fake_tg import convert

VARS = ('a', 'b', 'c')
_ids = itertools.count()

exprs = st.sampled_from(['a + 1', 'b - c', 'a * 2 % 7', 'c + b', '-a', 'a - 3', 'b * c % 11', '7'])
conds = st.sampled_from(['a > b', 'a % 2 == 0', 'b < 3 and c > 1', 'not a > 2', 'c < a < b',
                         'a or b > 4', 'b == c'])


@st.composite
def block(draw, depth, in_loop, counter):
    stmts = []
    for _ in range(draw(st.integers(1, 3))):
        kinds = ['assign', 'assign']
        if depth < 3:
            kinds += ['if', 'for', 'while']
        if in_loop:
            kinds += ['break', 'continue']
        kinds.append('return')
        kind = draw(st.sampled_from(kinds))
        if kind == 'assign':
            stmts.append([f'{draw(st.sampled_from(VARS))} = {draw(exprs)}'])
        elif kind == 'augassign':
            stmts.append([f'{draw(st.sampled_from(VARS))} += 1'])
        elif kind == 'if':
            lines = [f'if {draw(conds)}:'] + _indent(draw(block(depth + 1, in_loop, counter)))
            if draw(st.booleans()):
                lines += ['else:'] + _indent(draw(block(depth + 1, in_loop, counter)))
            stmts.append(lines)
        elif kind == 'for':
            lines = [f'for i{depth} in range({draw(st.integers(0, 4))}):']
            lines += _indent([f'a = a + i{depth}'] + draw(block(depth + 1, True, counter)))
            if draw(st.booleans()):
                lines += ['else:', '    b = b + 100']
            stmts.append(lines)
        elif kind == 'while':
            w = f'w{next(counter)}'
            lines = [f'{w} = 0', f'while {w} < {draw(st.integers(0, 4))} and ({draw(conds)}):']
            lines += _indent([f'{w} += 1'] + draw(block(depth + 1, True, counter)))
            stmts.append(lines)
        elif kind == 'return':
            stmts.append([f'return {draw(st.sampled_from(["a", "(a, b)", "c - a", ""]))}'])
        else:
            stmts.append([kind])
    return [line for s in stmts for line in s]


def _indent(lines):
    return ['    ' + line for line in lines]


@st.composite
def programs(draw):
    body = draw(block(0, False, itertools.count()))
    return '\n'.join(['def f(a, b, c):'] + _indent(body + ['return (a, b, c)'])) + '\n'


def _define(source):
    filename = f'<random program {next(_ids)}>'
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {}
    exec(compile(source, filename, 'exec'), namespace)
    return namespace['f']


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.lists(st.tuples(*[st.integers(-5, 8)] * 3), min_size=1, max_size=4))
def test_converted_equals_original(source, inputs):
    f = _define(source)
    g = convert(f)
    for args in inputs:
        assert g(*args) == f(*args), source
