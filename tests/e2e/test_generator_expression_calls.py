"""Calls inside a generator expression are converted like any other call: the expression
stays lazy, but ``print`` in it acts on every call (it printed once, while tracing, and
then never again: silently), and a user function it calls is converted (its tensor ``if``
is a ``cond``). Each program against eager, default and strict, on several calls."""
import contextlib
import io

import pytest
import torch

from transpiler import to_graph


def _printing_sum(x):
    return sum(print("step", t) or x * t for t in (1, 2, 3))


def _printing_tuple_of_tensors(x):
    return tuple(print("row", r.sum()) or r * 2 for r in x)


def _helper(x, t):
    if x.sum() > t:
        return x - t
    return x + t


def _calls_a_user_function(x):
    return sum(_helper(x, t) for t in range(3))


def _lazy_filter(x):
    return sum(v for v in (x.sum(), x.mean(), x.amax()) if print("seen") is None)


def _generator_returned(x):
    total = 0
    for v in (print("item", i) or x * i for i in range(2)):
        total = total + v
    return total


PROGRAMS = [_printing_sum, _printing_tuple_of_tensors, _calls_a_user_function, _lazy_filter,
            _generator_returned]


def _run(fn, x):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        result = fn(x)
    return result, out.getvalue()


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("fn", PROGRAMS, ids=lambda f: f.__name__)
def test_generator_expression_calls_act_on_every_call(fn, strict):
    g = to_graph(fn, strict=strict)
    for x in (torch.ones(2, 3), -torch.arange(6.0).reshape(2, 3), torch.full((2, 3), 0.25)):
        exp, exp_text = _run(fn, x)
        got, text = _run(g, x)
        assert text == exp_text
        if isinstance(exp, tuple):
            assert type(got) is tuple and len(got) == len(exp)
            pairs = zip(got, exp)
        else:
            pairs = [(got, exp)]
        for a, b in pairs:
            assert torch.equal(torch.as_tensor(a), torch.as_tensor(b))


def test_a_user_function_in_a_generator_expression_is_converted():
    g = to_graph(_calls_a_user_function, strict=True)
    x = torch.ones(2)
    g(x)
    ops = [n.op for n in g.get_concrete(x).graph.nodes]
    assert "cond" in ops
