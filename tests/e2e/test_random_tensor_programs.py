"""Hypothesis: random tensor programs (nested tensor if/elif/else, counter-bounded while, for over
range, tensor rows and range(int tensor), break/continue/return at any depth) give the same
result through ``to_graph(fn, strict=True)`` as run eagerly, on several inputs of one trace.

The generator is in ``random_programs.py``. 150 programs, each run on 3-5 inputs of shape (3,)
or (): 200 took 55-80 s on a 2-core machine, over the ~60 s budget. Programs with a tensor
construct at the top level must also leave a top-level ``cond``/``while`` node in the graph.
"""
import warnings

import pytest
import torch
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import time_limits
from random_programs import define, inputs, programs
from transpiler import to_graph

PER_PROGRAM_S = 15


class Hang(Exception):
    """A program ran past its time limit (likely a converted loop that never ends)."""


@pytest.fixture(autouse=True)
def _time_limit():
    """Replaces conftest's 20 s limit for a whole test by a limit per program (armed in the
    test body): hypothesis then reports the program that hangs."""
    def on_alarm(signum, frame):
        raise Hang(f'a program ran past {PER_PROGRAM_S} s (CPU time)')
    old = time_limits.install(on_alarm)
    try:
        yield
    finally:
        time_limits.restore(old)


def assert_close_structure(got, exp, path='out'):
    """Same structure, dtypes and shapes; floats within rtol=1e-4, atol=1e-5.
    A 0-d tensor may stand for a Python number."""
    if isinstance(exp, (tuple, list)):
        assert type(got) is type(exp), f'{path}: {type(got).__name__} != {type(exp).__name__}'
        assert len(got) == len(exp), f'{path}: length {len(got)} != {len(exp)}'
        for i, (x, y) in enumerate(zip(got, exp)):
            assert_close_structure(x, y, f'{path}[{i}]')
        return
    if isinstance(exp, (int, float, bool)) and isinstance(got, torch.Tensor):
        assert got.dim() == 0, f'{path}: {got!r} stands for {exp!r}'
        exp = torch.tensor(exp, dtype=got.dtype)
    assert isinstance(got, torch.Tensor), f'{path}: expected a tensor, got {got!r}'
    assert got.dtype == exp.dtype, f'{path}: dtype {got.dtype} != {exp.dtype}'
    assert got.shape == exp.shape, f'{path}: shape {tuple(got.shape)} != {tuple(exp.shape)}'
    torch.testing.assert_close(got, exp, rtol=1e-4, atol=1e-5, msg=lambda m: f'{path}: {m}')


def check_program(source, tensor_top, args_list):
    f = define(source)
    g = to_graph(f, strict=True)
    for args in args_list:
        exp = f(*[x.clone() for x in args])
        with warnings.catch_warnings():
            warnings.simplefilter('error')
            got = g(*[x.clone() for x in args])
        assert_close_structure(got, exp)
    if tensor_top:
        ops = {node.op for node in g.graph(*args_list[0]).nodes}
        assert ops & {'cond', 'while'}, f'no top-level cond/while node: {sorted(ops)}'


@st.composite
def programs_and_inputs(draw):
    program = draw(programs())
    shape = draw(st.sampled_from([(3,), (3,), ()]))
    return program, shape, draw(inputs(shape))


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.filter_too_much])
@given(programs_and_inputs())
def test_graph_equals_eager(case):
    program, shape, args_list = case
    note(program.source)
    time_limits.arm(PER_PROGRAM_S)
    try:
        check_program(program.source, program.tensor_top, args_list)
    finally:
        time_limits.disarm()


def _return_under_counter_cond(a, b):
    k = 0
    while k < 3 and a > 0:
        k += 1
        if k % 2 == 0:          # a condition on the loop's int counter (a tensor here)
            return (a, b)       # a single `return a` works
    return (a, b)


def _return_under_index_cond(a, b):
    for i in range(a.long()):   # range over an int tensor
        if i > 0:
            return (a, b)
    return (a, b)


# Found by the generator: in a tensor loop, `return (x, y)` (a tuple or list; a single tensor
# worked) under an `if` on the loop's int counter or index raised ConversionError "the loop body
# changes the structure of the loop variables: TreeSpec(tuple, None, [*,*,*]) -> TreeSpec(tuple,
# None, [*,*,TreeSpec(tuple, None, [*,*])])" (the return value's placeholder met a real value
# while the loop variables' types were widened).
@pytest.mark.parametrize('fn', [_return_under_counter_cond, _return_under_index_cond])
def test_return_tuple_under_loop_counter_cond(fn):
    for a, b in [(3.0, -1.0), (1.0, 1.0), (-1.0, 2.0)]:
        args = (torch.tensor(a), torch.tensor(b))
        assert_close_structure(to_graph(fn, strict=True)(*args), fn(*args))
