"""Variables bound on every path that reaches their reads, once jumps are lowered to flags:
set before a ``break`` and in the loop's ``else:``, or after a tensor ``if`` that returns
inside ``try``/``finally`` (``transpiler.analysis.definite_assignment``). Each converts in
both modes and equals eager on inputs taking every path (a loop that breaks, one that runs
out, one that never runs). A variable read where Python may not have bound it still falls
back, naming it."""
import pytest
import torch

from e2e_helpers import assert_same
from fidelity_checks import converts, falls_back, same_gradients
from transpiler import to_code, to_graph

T = torch.tensor
BREAKS = T([[1.0, 2.0], [5.5, 0.5], [9.0, 9.0]])      # row 1 breaks
RUNS_OUT = T([[1.0, 2.0], [3.0, -4.0]])                # no row breaks: the else clause
FIRST = T([[9.0, 9.0], [-3.0, -4.0]])                  # row 0 breaks
ROWS = ((BREAKS,), (RUNS_OUT,), (FIRST,))


# ------------------------------------------------------------- set before break and in else
def for_else_tensor(x):
    for row in x:
        if row.sum() > 5:
            found = row * 2
            break
    else:
        found = x.sum(0) - 1
    return found


def for_else_python_number(x):
    for row in x:
        if row.sum() > 5:
            where = 1
            break
    else:
        where = -1
    return where, x.sum()


def for_else_tuple(x):
    for row in x:
        if row.sum() > 5:
            pair = (row, row.max())
            break
    else:
        pair = (torch.zeros(2), T(-1.0))
    return pair


def for_else_unpacked(x):
    for row in x:
        if row.sum() > 5:
            a, b = row.sum(), row
            break
    else:
        a, b = T(0.0), -x[0]
    return a * b


def while_else(x):
    s = x
    while s.sum() < 100:
        s = s * 2
        if s.min() > 20:
            hit = s - 1
            break
    else:
        hit = s + 1
    return hit


def nested_for_else(x, w):
    total = torch.zeros(2)
    for r in x:
        for c in w:
            if (r * c).sum() > 3:
                pick = r * c
                break
        else:
            pick = -r
        total = total + pick
    return total


@pytest.mark.parametrize("fn", [for_else_tensor, for_else_python_number, for_else_tuple,
                                for_else_unpacked], ids=lambda f: f.__name__)
def test_set_before_break_and_in_else(fn):
    converts(fn, *ROWS)


def test_while_else_breaks_runs_out_and_never_runs():
    # [1, 2] breaks; [1, 40] runs out after iterations; [60, 50] never runs its body
    converts(while_else, (T([1.0, 2.0]),), (T([1.0, 40.0]),), (T([60.0, 50.0]),))


def test_for_else_over_no_rows():
    converts(for_else_tensor, (T([[1.0, 2.0]]),), (torch.zeros(0, 2),))


def test_nested_for_else():
    w = T([[1.0, 1.0], [2.0, -1.0]])
    converts(nested_for_else, (BREAKS, w), (RUNS_OUT, w), (-BREAKS, w))


def test_for_else_gradients():
    same_gradients(for_else_tensor, (BREAKS,), (RUNS_OUT,))


def test_the_loop_is_one_while_node_and_the_placeholder_is_unassigned():
    assert "found = tg.Unassigned('found')" in to_code(for_else_tensor)
    ops = [n.op for n in to_graph(for_else_tensor).graph(BREAKS).nodes]
    assert ops.count("while") == 1 and ops.count("cond") == 1, ops


# ------------------------------------------------------------- read where it may be unbound
def break_only(x):
    for row in x:
        if row.sum() > 5:
            found = row
            break
    if x.sum() > 10:            # implies the break, which no analysis can know
        return found
    return x[0]


def test_set_before_break_only_falls_back_naming_it():
    assert "found = tg.Undefined('found')" in to_code(break_only)
    falls_back(break_only, (BREAKS,), (RUNS_OUT,), match="'found'")


def break_only_unbound(x):
    for row in x:
        if row.sum() > 5:
            found = row
            break
    return found


def test_unbound_after_the_loop_raises_as_eager():
    with pytest.raises(UnboundLocalError):
        break_only_unbound(RUNS_OUT)
    with pytest.warns(UserWarning), pytest.raises(UnboundLocalError):
        to_graph(break_only_unbound)(RUNS_OUT)
    assert_same(to_graph(break_only_unbound)(BREAKS), break_only_unbound(BREAKS))


# ------------------------------------------------------------- after a return inside try
POS, NEG = T([1.0, 2.0]), T([-1.0, -3.0])
SIGNS = ((POS,), (NEG,))


def try_except(x):
    try:
        if x.sum() > 0:
            return x * 2
        y = x - 1
    except KeyError:
        y = x
    return y


def nested_try(x):
    try:
        try:
            if x.sum() > 0:
                return x * 2
            y = x - 1
        finally:
            pass
        z = y * 3
    finally:
        pass
    return z


def with_in_try(x):
    try:
        with torch.no_grad():
            if x.sum() > 0:
                return x * 2
            y = x - 1
    finally:
        pass
    return y


def loop_in_try(x):
    try:
        for row in x:
            if row.sum() > 5:
                return row
        y = x.sum(0)
    finally:
        pass
    return y


def finally_assigns(x):
    try:
        if x.sum() > 0:
            return x * 2
        y = x - 1
    finally:
        z = x + 1
    return y + z


@pytest.mark.parametrize("fn", [try_except, nested_try, with_in_try, finally_assigns],
                         ids=lambda f: f.__name__)    # (plain try/finally: fresh_eyes)
def test_return_under_tensor_if_in_try(fn):
    converts(fn, *SIGNS)


def test_loop_returning_in_try():
    converts(loop_in_try, *ROWS)


def test_return_in_try_gradients():
    same_gradients(finally_assigns, *SIGNS)
