"""Python state a tensor branch or loop body changes is carried through the cond/while.

A context manager's counters, a ``nonlocal`` bumped by an inner function, an attribute
counter of a local object bumped by its method: locations the call itself made, carried
as cond outputs (per path) or loop variables, and compared with eager on inputs that take
different paths (two calls: a value baked at trace time shows up). State the caller can
see (arguments, globals) and lists growing in a loop keep falling back.
"""
from __future__ import annotations

import warnings

import pytest
import torch

from transpiler import ConversionError, FallbackWarning, to_graph

from e2e_helpers import _clone, assert_same
from test_fidelity_effects import cm_in_for_rows as effects_cm_in_for_rows
from test_fidelity_effects import cm_in_while as effects_cm_in_while
from test_fidelity_effects import (cm_in_branch, cm_in_else, cm_swallowing,
                                   method_of_local_object, nonlocal_in_loop,
                                   property_with_effect)

POS, NEG = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([-1.0, -2.0, -3.0])
MIXED = torch.tensor([1.0, -2.0, 3.0, -4.0])
BOTH = [(POS,), (NEG,), (MIXED,)]


class CM:
    """Counts entries and exits (numbers only)."""

    def __init__(self):
        self.enters = 0
        self.exits = 0
        self.tag = "new"

    def __enter__(self):
        self.enters += 1
        return self

    def __exit__(self, *exc):
        self.exits += 1
        return False


class LogCM(CM):
    """Also records exits in a list of strings (as the fuzzer's CM)."""

    def __init__(self):
        super().__init__()
        self.log = []

    def __exit__(self, *exc):
        self.exits += 1
        self.log.append("exit")
        return False


class Acc:
    def __init__(self):
        self.n = 0
        self.total = 0.0

    def hit(self, z):
        self.n += 1
        self.total += 0.5
        return z + 1


def _state(v):
    """Results with their objects opened up (the oracle compares attributes)."""
    if isinstance(v, CM):
        return ("CM", type(v).__name__, _state(vars(v)))
    if isinstance(v, Acc):
        return ("Acc", _state(vars(v)))
    if isinstance(v, dict):
        return {k: _state(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return type(v)(_state(x) for x in v)
    return v


def converts(fn, inputs=BOTH):
    """Strict and default: no fallback, results equal eager's on every input."""
    for strict in (True, False):
        g = to_graph(fn, strict=strict)
        for args in inputs:
            exp = fn(*_clone(args))
            with warnings.catch_warnings():
                warnings.simplefilter("error", FallbackWarning)
                got = g(*_clone(args))
            assert_same(_state(got), _state(exp))


def falls_back(fn, inputs=BOTH, match=""):
    g = to_graph(fn)
    for i, args in enumerate(inputs):
        exp = fn(*_clone(args))
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            got = g(*_clone(args))
        warned = [str(x.message) for x in w if issubclass(x.category, FallbackWarning)]
        assert len(warned) == 1 or i > 0, warned   # (a new shape or guard: warned again)
        assert_same(_state(got), _state(exp))
    with pytest.raises(ConversionError, match=match):
        to_graph(fn, strict=True)(*_clone(inputs[0]))


# --------------------------------------------------------------------------- cond
def cm_one_branch(x):
    cm = CM()
    t = x
    if x.sum() > 0:
        with cm:
            t = t * 2
    return t, cm.enters, cm.exits


def cm_both_branches_returned(x):
    cm = CM()
    t = x
    if x.sum() > 0:
        with cm:
            t = t * 2
    else:
        with cm:
            with cm:
                t = t - 1
        cm.tag = "neg"
    return t, cm


def cm_nested_ifs(x):
    cm = CM()
    t = x
    if x[0] > 0:
        with cm:
            if x[1] > 0:
                with cm:
                    t = t + 1
            t = t * 2
    return t, cm


def cm_value_used_after(x):
    cm = CM()
    if x.sum() > 0:
        with cm:
            x = x + 1
    return x * (cm.enters + 1), cm.exits


def nonlocal_bumped_in_branches(x):
    cnt = 0
    scale = 1.0

    def bump(z, by):
        nonlocal cnt, scale
        cnt += by
        scale = scale * 0.5
        return z * 0.75
    t = x
    if x.sum() > 0:
        t = bump(t, 1)
    else:
        t = bump(bump(t, 2), 3)
    return t, cnt, scale


def label_set_by_helper(x):
    label = None

    def mark(z, text):
        nonlocal label
        label = text
        return z
    t = x
    if x.mean() > 0:
        t = mark(t + 1, "pos")
    return t, label


def log_one_branch(x):
    cm = LogCM()
    t = x
    if x.sum() > 0:
        with cm:
            t = t * 2
    return t, cm


def log_both_branches(x):
    cm = LogCM()
    t = x
    if x.sum() > 0:
        with cm:
            t = t * 2
    else:
        cm.log.append("else")
        with cm:
            t = t - 2
    return t, cm.log, cm.exits


def log_alike_on_both_paths(x):
    cm = LogCM()
    log = cm.log
    if x.sum() > 0:
        with cm:
            x = x * 2
    else:
        with cm:
            x = x - 2
    return x, log, log is cm.log


@pytest.mark.parametrize("fn", [cm_one_branch, cm_both_branches_returned, cm_nested_ifs,
                                cm_value_used_after, nonlocal_bumped_in_branches,
                                label_set_by_helper, cm_swallowing, property_with_effect,
                                cm_in_else, log_one_branch, log_both_branches,
                                log_alike_on_both_paths])
def test_state_changed_in_a_tensor_branch_is_carried(fn):
    converts(fn)


def log_aliased(x):
    cm = LogCM()
    log = cm.log                  # another name for the list: it must see the contents
    if x.sum() > 0:
        with cm:
            x = x * 2
    return x, log


def log_read_after(x):
    cm = LogCM()
    if x.sum() > 0:
        with cm:
            x = x * 2
    return x, len(cm.log)         # known only when the graph runs


def log_nested(x):
    cm = LogCM()
    if x[0] > 0:
        if x[1] > 0:
            with cm:
                x = x * 2
        x = x + 1
    return x, cm


@pytest.mark.parametrize("fn", [log_aliased, log_read_after, cm_in_branch])
def test_a_list_a_branch_changes_falls_back_where_its_contents_are_needed(fn):
    falls_back(fn)


# --------------------------------------------------------------------------- loops
def nonlocal_in_for_rows(x):
    cnt = 0

    def bump(z):
        nonlocal cnt
        cnt += 1
        return z * 0.75
    t = x
    for r in x:
        t = bump(t) + r
    return t, cnt


def nonlocal_in_for_with_break(x):
    cnt = 0
    total = 0.0

    def bump(z):
        nonlocal cnt, total
        cnt += 1
        total += 0.25
        return z
    t = torch.zeros(())
    for r in x:
        t = t + bump(r)
        if t < -2.5:
            break
    return t, cnt, total


def nonlocal_in_while(x):
    cnt = 0

    def bump():
        nonlocal cnt
        cnt += 2
    t = x
    while t.sum() < 10:
        bump()
        t = t + 1
    return t, cnt


def cm_in_for_rows(x):
    cm = CM()
    total = torch.zeros(())
    for row in x:
        with cm:
            total = total + row
    return total, cm


def method_counter_in_loop(x):
    a = Acc()
    t = x
    for r in x:
        t = a.hit(t) * r
    return t, a.n, a


def list_appended_and_counted(x):
    cnt = 0
    out = []

    def bump(z):
        nonlocal cnt
        cnt += 1
        return z * 2
    for r in x:
        out.append(bump(r))
    return out, cnt


def cm_in_branch_in_loop(x):
    cm = CM()
    t = torch.zeros(())
    for r in x:
        if r > 0:
            with cm:
                t = t + r
    return t, cm.enters, cm.exits


@pytest.mark.parametrize("fn", [nonlocal_in_for_rows, nonlocal_in_for_with_break,
                                nonlocal_in_while, cm_in_for_rows, method_counter_in_loop,
                                list_appended_and_counted, cm_in_branch_in_loop,
                                nonlocal_in_loop, method_of_local_object])
def test_numbers_changed_in_a_tensor_loop_are_carried(fn):
    converts(fn, BOTH if fn is not method_of_local_object else BOTH[:2])


def test_gradient_flows_through_a_loop_with_a_carried_counter():
    x = torch.tensor([0.5, -1.0, 2.0], requires_grad=True)
    g = to_graph(nonlocal_in_for_rows, strict=True)
    t, cnt = g(x)
    t.sum().backward()
    grad, x.grad = x.grad.clone(), None
    t2, cnt2 = nonlocal_in_for_rows(x)
    t2.sum().backward()
    assert int(cnt) == cnt2 == 3
    assert torch.allclose(grad, x.grad)


# --------------------------------------------------------------------------- refusals
SHARED = CM()


def cm_global(x):
    if x.sum() > 0:
        with SHARED:
            x = x + 1
    return x


def cm_argument(x, cm):
    if x.sum() > 0:
        with cm:
            x = x + 1
    return x, cm.enters


def log_grows_in_loop(x):
    cm = LogCM()
    t = x
    for r in x:
        with cm:
            t = t + r
    return t, cm.log


def label_in_loop(x):
    label = "start"

    def mark(z):
        nonlocal label
        label = label + "+"
        return z
    t = x
    for r in x:
        t = mark(t) + r
    return t, label


def counter_also_a_loop_variable(x):
    cnt = 0

    def bump():
        nonlocal cnt
        cnt += 1
    for r in x:
        bump()
        cnt = cnt + 1             # the converter's loop variable and bump's cell at once
    return cnt


def counter_also_assigned_in_branch(x):
    cnt = 0

    def bump():
        nonlocal cnt
        cnt += 1
    if x.sum() > 0:
        bump()
        cnt = cnt * 10
    return x, cnt


@pytest.mark.parametrize("fn", [counter_also_a_loop_variable, counter_also_assigned_in_branch])
def test_a_cell_that_is_also_a_state_variable_falls_back(fn):
    falls_back(fn, match="changes while tracing")


def test_global_state_counted_in_a_branch_converts():
    """A global context manager's counters changed in a tensor branch are numbers the
    graph carries (``runtime.carried_numbers``: read when it runs, set back after the
    cond), so each call counts as eager does; before, the call fell back."""
    g = to_graph(cm_global, strict=True)
    for x in (POS, NEG, POS, NEG):
        before = (SHARED.enters, SHARED.exits)
        exp = x + 1 if x.sum() > 0 else x
        assert_same(g(x.clone()), exp)
        taken = int(x.sum() > 0)
        assert (SHARED.enters, SHARED.exits) == (before[0] + taken, before[1] + taken)
        assert type(SHARED.enters) is int and SHARED.tag == "new"
    assert g.cache_info().traces == 1


def test_argument_state_keeps_falling_back():
    g = to_graph(cm_argument)
    for x, entered in ((POS, 1), (NEG, 0), (POS, 1)):
        cm = CM()
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            t, n = g(x.clone(), cm)
        assert (int(n), cm.enters, cm.exits) == (entered, entered, entered)
        assert_same(t, x + 1 if entered else x)
    with pytest.raises(ConversionError, match="argument|existed before the call"):
        to_graph(cm_argument, strict=True)(POS.clone(), CM())


@pytest.mark.parametrize("fn", [label_in_loop])
def test_values_growing_in_a_loop_keep_falling_back(fn):
    falls_back(fn, match="changes while tracing the body")


# ----------------------------------------------------- a list a tensor loop grows
# The body appends the same plain items every iteration: after the loop the list is
# ``before + pattern * iterations`` (a loop variable counts them), rebuilt per call.
ROWS = [(POS,), (NEG,), (MIXED,), (torch.ones(0, 3),), (torch.ones(1, 2),)]
COUNTS = [(POS, torch.tensor(0)), (POS, torch.tensor(3)), (NEG, torch.tensor(1))]


def log_while_counter_bound(x, n):
    cm = LogCM()
    i = 0
    t = x
    while i < n:
        with cm:
            t = t * 2
        i += 1
    return t, cm


def log_while_tensor_test(x, n):
    cm = LogCM()
    cm.log.append("start")
    t = x
    while t.sum() < n * 10 + 1:
        with cm as q:
            q.log.append("in")
            t = t + 1
    return t, cm


def log_with_as_in_for_rows(x):
    cm = LogCM()
    t = x.sum() * 0
    for r in x:
        with cm as q:
            q.log.append("in")
            t = t + r
    return t, cm, cm.enters


def log_break_in_tensor_if(x):
    cm = LogCM()
    t = x * 0
    for r in x:
        with cm:
            if r.sum() < 0:
                break
            t = t + r
    return t, cm


def log_continue_in_tensor_if(x):
    cm = LogCM()
    t = x.sum() * 0
    for r in x:
        with cm as q:
            q.log.append(1)
            if r.sum() < 0:
                continue
            t = t + r.sum()
    return t, cm


def log_grown_but_not_returned(x):
    cm = LogCM()
    t = x.sum()
    for r in x:
        with cm:
            t = t + r.sum()
    return t, cm.exits


def test_a_list_a_tensor_loop_grows_is_rebuilt_per_call():
    converts(log_grows_in_loop, ROWS[:3])
    converts(log_with_as_in_for_rows, [(POS.reshape(3, 1),), (torch.ones(0, 2),),
                                        (MIXED.reshape(2, 2),)])
    converts(log_break_in_tensor_if, [(POS.reshape(3, 1),), (NEG.reshape(3, 1),),
                                      (MIXED.reshape(4, 1),), (torch.ones(0, 1),)])
    converts(log_continue_in_tensor_if, [(MIXED,), (NEG,), (torch.ones(0),)])
    converts(log_grown_but_not_returned, [(POS,), (torch.ones(0),)])
    converts(log_while_counter_bound, COUNTS)
    converts(log_while_tensor_test, COUNTS)
    converts(effects_cm_in_while, [(POS,), (torch.zeros(3),), (MIXED,)])
    converts(effects_cm_in_for_rows, [(POS,), (NEG,)])


def test_the_grown_list_is_a_fresh_list_per_call():
    g = to_graph(log_while_counter_bound, strict=True)
    a = g(POS, torch.tensor(2))[1].log
    b = g(POS, torch.tensor(2))[1].log
    assert a == b == ["exit", "exit"] and a is not b
    assert g(POS, torch.tensor(0))[1].log == []


def log_if_inside_body(x):
    cm = LogCM()
    t = x.sum() * 0
    for r in x:
        if r.sum() > 0:           # which iterations append: known only per iteration
            with cm:
                t = t + r.sum()
    return t, cm


def log_len_after_loop(x):
    cm = LogCM()
    for r in x:
        with cm:
            x = x + 1
    return x, len(cm.log)


def log_appended_again_after(x):
    cm = LogCM()
    for r in x:
        with cm:
            x = x + 1
    with cm:
        x = x * 2
    return x, cm


def log_other_name(x):
    cm = LogCM()
    log = cm.log
    for r in x:
        with cm:
            x = x + 1
    return x, log


def log_read_in_next_loop(x):
    cm = LogCM()
    for r in x:
        with cm:
            x = x + 1
    k = 0
    for item in cm.log:
        k += 1
    return x, k


def log_grows_differently(x):
    cm = LogCM()
    for r in x:
        with cm:
            x = x + 1
        cm.log.append(len(cm.log))    # reads the list inside the loop
    return x, cm


@pytest.mark.parametrize("fn", [log_if_inside_body, log_len_after_loop, log_other_name,
                                log_read_in_next_loop, log_grows_differently])
def test_a_grown_list_falls_back_where_its_contents_are_needed(fn):
    falls_back(fn, [(MIXED,), (POS,), (torch.ones(0),)])


def log_of_argument_grows(x, cm):
    for r in x:
        with cm:
            x = x + 1
    return x, cm.exits


def test_a_list_of_an_argument_grown_in_a_loop_keeps_falling_back():
    g = to_graph(log_of_argument_grows)
    for x, n in ((POS, 3), (torch.ones(0), 0), (MIXED, 4)):
        cm = LogCM()
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            t, exits = g(x.clone(), cm)
        assert (int(exits), cm.exits, cm.log) == (n, n, ["exit"] * n)
        assert_same(t, x + n)
    with pytest.raises(ConversionError):
        to_graph(log_of_argument_grows, strict=True)(POS.clone(), LogCM())
