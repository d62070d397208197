"""A hypothesis strategy for random tensor programs ``def f(a, b, c): ...``.

The tensor counterpart of ``tests/transpiler/test_random_programs.py``: the programs branch and
loop on tensor values (``if``/``elif``/``else``, counter-bounded ``while``, ``for`` over
``range(3)``, over a tensor's rows and over ``range(int_tensor)``, ``break``, ``continue``,
``return`` at any depth), so that ``to_graph`` turns them into ``cond``/``while`` nodes.

Every loop terminates in eager and graph mode alike: a ``while`` is bounded by an int counter
incremented first thing in its body, and ``for`` loops have at most 3 iterations. Values stay
bounded (``tanh``/``clamp``/``* 0.5``), so float differences stay tiny.

``programs()`` draws a ``Program``: its source, and whether a tensor-dependent construct is
reached at the top level (then the graph must hold a top-level ``cond`` or ``while`` node).
"""
import itertools
import linecache
from dataclasses import dataclass

import torch
from hypothesis import strategies as st

VARS = ('a', 'b', 'c')
_ids = itertools.count()

# Shape-preserving updates of one of a, b, c (reductions broadcast back).
ASSIGNS = [
    'a = a * 0.5 + b',
    'c = torch.tanh(c) + a.mean()',
    'b = b - 1.0',
    'a = torch.clamp(a + c, -3.0, 3.0)',
    'b = torch.tanh(b * 1.5 - c)',
    'c = c * 0.9 + 0.1',
    'a = a - b.max() * 0.5',
    'b = torch.where(a > 0, b, -b)',
    'c = torch.sin(c) + b.sum() * 0.1',
    'a = torch.tanh(a + 0.3)',
    'b = b * 0.5 + c.min()',
    'c = torch.clamp(c - a, -2.0, 2.0)',
]

# Values of fresh variables (shaped like the arguments).
TEMPS = ['a * b', 'torch.tanh(a - c)', 'b + c.mean()', 'torch.clamp(c * 2.0, -1.0, 1.0)']

# Tensor-valued conditions (0-d bool tensors, combined with and/or/not).
CONDS = [
    'a.sum() > b.sum()',
    '(c > 0).any()',
    'a.mean() < 0.5 and b.max() > 0',
    'not (a.sum() > 0)',
    'c.min() < -0.2 or a.max() > 0.7',
    '(a > b).all()',
    'b.sum() < 0',
    'a.sum() > 0 and (b < 0).any() or c.mean() > 0.1',
    'not (c.max() > 1.0 or b.min() < -1.0)',
    'a.max() - c.min() > 0.5',
]

# What `return` returns: always a 3-tuple of tensors shaped like the arguments, so that every
# path through a tensor branch returns the same structure.
RETURNS = ['(a, b, c)', '(c, b, a)', '(a + b, b, c * 2.0)', '(torch.tanh(a), b - c, c)']


@dataclass
class Program:
    source: str
    tensor_top: bool   # a tensor-dependent construct runs at the top level


def _indent(lines):
    return ['    ' + line for line in lines]


class _Names:
    def __init__(self):
        self._n = itertools.count()

    def new(self, prefix):
        return f'{prefix}{next(self._n)}'


@st.composite
def block(draw, depth, loop, names, top=None):
    """A list of source lines. ``loop``: None outside loops, else ``(kind, name)`` of the
    innermost loop's variable: ``('index', i)`` for an int (a Python int, or an int tensor in a
    tensor loop), ``('row', row)`` for a tensor row, ``(None, None)`` for none; statements in a
    loop may ``break``/``continue`` and use its variable. ``top`` (top level only) collects
    whether a tensor-dependent construct runs there."""
    stmts = []
    for _ in range(draw(st.integers(1, 3))):
        kinds = ['assign'] * 3
        if depth < 3:
            kinds += ['if', 'if', 'if_define', 'while', 'for_range', 'for_rows',
                      'for_tensor_range']
        if loop is not None:
            kinds += ['if_break', 'if_continue', 'break', 'continue']
        kinds += ['temp', 'if_return', 'return']
        kind = draw(st.sampled_from(kinds))
        tensor_construct = kind in ('if', 'if_define', 'for_rows', 'for_tensor_range',
                                    'if_return')
        if kind == 'assign':
            lines = [draw(st.sampled_from(ASSIGNS))]
            if loop is not None and loop[0] == 'index':
                lines = draw(st.sampled_from([lines, [f'a = a + {loop[1]} * 0.1']]))
            elif loop is not None and loop[0] == 'row':
                lines = draw(st.sampled_from([lines, [f'b = torch.tanh(b - {loop[1]})']]))
        elif kind == 'temp':   # a fresh variable, used at once
            t = names.new('t')
            lines = [f'{t} = {draw(st.sampled_from(TEMPS))}',
                     f'{draw(st.sampled_from(VARS))} = torch.tanh({t}) * 0.5']
        elif kind == 'if':
            lines = _if(draw, depth, loop, names)
        elif kind == 'if_define':   # a fresh variable defined on every path, used after
            t = names.new('t')
            lines = _if(draw, depth, loop, names, define=t)
            lines += [f'c = torch.clamp(c + {t}, -2.0, 2.0)']
        elif kind in ('if_break', 'if_continue'):
            lines = [f'if {_cond(draw, loop)}:', '    ' + kind[3:]]
        elif kind == 'if_return':
            lines = [f'if {_cond(draw, loop)}:',
                     f'    return {draw(st.sampled_from(RETURNS))}']
        elif kind == 'while':
            lines, tensor_construct = _while(draw, depth, names)
        elif kind == 'for_range':
            i = names.new('i')
            lines = [f'for {i} in range({draw(st.integers(0, 3))}):']
            lines += _indent(draw(block(depth + 1, ('index', i), names)))
            lines += _else(draw)
        elif kind == 'for_rows':
            row = names.new('row')
            stacked = draw(st.sampled_from(['[a, b]', '[a, b, c]', '[c]']))
            lines = [f'for {row} in torch.stack({stacked}):', f'    a = torch.tanh(a + {row})']
            lines += _indent(draw(block(depth + 1, ('row', row), names)))
            lines += _else(draw)
        elif kind == 'for_tensor_range':
            n, i = names.new('n'), names.new('i')
            lines = [f'{n} = torch.clamp(a.abs().sum() * 2, 0, 3).long()',
                     f'for {i} in range({n}):']
            lines += _indent(draw(block(depth + 1, ('index', i), names)))
            lines += _else(draw)
        elif kind == 'return':
            lines = [f'return {draw(st.sampled_from(RETURNS))}']
        else:   # unconditional break / continue
            lines = [kind]
        stmts.append(lines)
        if top is not None:
            # A Python loop (`for i in range(3)`, `while True`) may return unconditionally,
            # leaving what follows it dead: only constructs before one count.
            if tensor_construct and 'python loop' not in top:
                top.append('tensor')
            if kind == 'for_range' or (kind == 'while' and not tensor_construct):
                top.append('python loop')
        if kind == 'return':
            break   # what follows would be dead code
    return [line for s in stmts for line in s]


def _cond(draw, loop):
    """A tensor condition, or in a loop sometimes one on the loop's variable."""
    conds = list(CONDS)
    if loop is not None and loop[0] == 'index':
        conds += [f'{loop[1]} % 2 == 0', f'{loop[1]} > 0 and a.sum() > 0']
    elif loop is not None and loop[0] == 'row':
        conds += [f'{loop[1]}.sum() > 0', f'({loop[1]} < b).any()']
    return draw(st.sampled_from(conds))


def _if(draw, depth, loop, names, define=None):
    """if/elif/else; with ``define``, every branch (an else included) first assigns it."""
    def body():
        first = [f'{define} = {draw(st.sampled_from(TEMPS))}'] if define else []
        return _indent(first + draw(block(depth + 1, loop, names)))
    bodies = [body() for _ in range(1 + draw(st.integers(0, 2)))]
    orelse = body() if define or draw(st.booleans()) else None
    lines = []
    for i, b in enumerate(bodies):
        lines += [f'{"elif" if i else "if"} {_cond(draw, loop)}:'] + b
    if orelse is not None:
        lines += ['else:'] + orelse
    return lines


def _while(draw, depth, names):
    """Lines of a counter-bounded while loop, and whether its condition is tensor-valued."""
    k = names.new('k')
    bound = draw(st.integers(0, 3))
    form = draw(st.sampled_from(['cond', 'cond', 'true']))
    if form == 'cond':   # counter and tensor condition
        lines = [f'{k} = 0', f'while {k} < {bound} and ({draw(st.sampled_from(CONDS))}):',
                 f'    {k} += 1']
    else:                # `while True` with a counter break, tensor work in the body
        lines = [f'{k} = 0', 'while True:', f'    {k} += 1',
                 f'    if {k} > {bound}:', '        break']
    lines += _indent(draw(block(depth + 1, ('index', k), names)))
    if form == 'cond':
        lines += _else(draw)
    # `k < 0 and ...` short-circuits in Python: the loop never runs and leaves no node
    return lines, form == 'cond' and bound > 0


def _else(draw):
    return ['else:', '    b = b + 0.25'] if draw(st.integers(0, 4)) == 0 else []


@st.composite
def programs(draw):
    top = []
    body = draw(block(0, None, _Names(), top))
    if not body[-1].startswith('return'):
        body.append('return (a, b, c)')
    source = '\n'.join(['def f(a, b, c):'] + _indent(body)) + '\n'
    return Program(source, 'tensor' in top)


def define(source):
    """Compile ``source`` (defining ``f``) under a unique fake file name registered in
    ``linecache``, where ``inspect.getsource`` (and so ``to_graph``) finds it."""
    filename = f'<random tensor program {next(_ids)}>'
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {'torch': torch}
    exec(compile(source, filename, 'exec'), namespace)
    return namespace['f']


def _values(n):
    return st.lists(st.integers(-20, 20).map(lambda v: v / 10), min_size=n, max_size=n)


@st.composite
def inputs(draw, shape):
    """3-5 argument triples of float32 tensors of ``shape``, with different values."""
    n = 1 if shape == () else shape[0]
    triples = draw(st.lists(st.tuples(_values(n), _values(n), _values(n)),
                            min_size=3, max_size=5))
    return [tuple(torch.tensor(v, dtype=torch.float32).reshape(shape) for v in t)
            for t in triples]
