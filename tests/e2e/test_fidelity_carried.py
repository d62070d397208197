"""Effects carried through regions: state a tensor branch or loop leaves, compared with eager.

- An object returned early from inside a tensor loop (``for ...: if c: return t, R``)
  while the loop does not otherwise carry it: the loop's return slot starts as the
  object's state before the loop, not as the copy one body trace made (whose values are
  nodes of a finished trace).
- A list a region left as a list value (``cm.log`` after a tensor ``if`` chose it, or
  after a tensor loop grew it) is appended to afterwards, at top level or in a later
  branch (``with cm:`` logs on exit); a loop or a cond inside a branch leaves it so and
  the outer cond carries it (the loop's count a cond output of its own).

Each case runs strict and default on inputs that take different paths (two calls and
more: a value baked at trace time shows up); what cannot be carried exactly keeps a
clean ConversionError / one FallbackWarning.
"""
from __future__ import annotations

import dataclasses
import warnings

import torch

import pytest

from transpiler import ConversionError, FallbackWarning, to_graph

from e2e_helpers import _clone, assert_same
from fidelity_checks import converts, falls_back, same_gradients

POS, NEG = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([-1.0, -2.0, -3.0])
MIXED = torch.tensor([1.0, -2.0, 3.0])
ROWS = torch.tensor([[1.0, 2.0, 3.0], [-4.0, 5.0, -6.0]])


@dataclasses.dataclass
class Rec:
    t: object = None
    k: int = 0
    tag: str = ""


class Obj:
    pass


def plain(v):
    """Objects as (class name, attributes), recursively: assert_same compares those."""
    if isinstance(v, (list, tuple)):
        return type(v)(plain(x) for x in v)
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    if isinstance(getattr(v, "__dict__", None), dict) and not isinstance(v, torch.Tensor):
        return (type(v).__name__, {k: plain(x) for k, x in vars(v).items()})
    return v


def converts_objects(fn, *inputs):
    """As ``converts``, objects in the result compared by class and attributes."""
    for strict in (True, False):
        g = to_graph(fn, strict=strict)
        for args in inputs:
            eager_args, graph_args = _clone(args), _clone(args)
            exp = fn(*eager_args)
            with warnings.catch_warnings():
                warnings.simplefilter("error", FallbackWarning)
                got = g(*graph_args)
            assert type(got) is type(exp)
            assert_same(plain(got), plain(exp))
            assert_same(graph_args, eager_args, "arguments")


def agrees(fn, *inputs):
    """Never silently wrong: default mode equals eager (converted or fallen back); strict
    mode equals eager or raises ConversionError."""
    for strict in (True, False):
        g = to_graph(fn, strict=strict)
        for args in inputs:
            exp = fn(*_clone(args))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FallbackWarning)
                try:
                    got = g(*_clone(args))
                except ConversionError:
                    assert strict
                    continue
            assert_same(plain(got), plain(exp))


# ---------------------------------------------------------------- early return of an object
def return_rec_from_for(a, b, M):
    t = a + b
    R = Rec(t=a * 0.0, k=0, tag="init")
    for r in M:
        if t.sum() >= t.mean():
            return t, R
        t = t * 0.5 + R.t
    return t, R


def return_obj_from_while(a, b, M):
    t = a + b
    O = Obj()
    O.v = a.clone()
    O.n = 3
    i = torch.tensor(0)
    while i < 3 and t.sum() < 5.0:
        i += 1
        t = t + O.v.abs() + 1.0
        if (t - b).sum() > 2.0:
            return [t, O]
    return [t, O]


def return_rec_nested_cond(a, b):
    t = a + b
    R = Rec(t=a * 0.0, k=0, tag="init")
    if a.sum() > 0.0:
        R.t = R.t + t
    else:
        if (t - b).sum() >= 0.0:
            return t, R, t.requires_grad
    return t, R, t.requires_grad


def return_rec_changed_before(a, b, M):
    R = Rec(t=a * 0.0, k=1, tag="x")
    t = b
    for r in M:
        R.t = R.t + r
        if R.t.sum() > 1.0:
            return t, R
        t = t * 2.0
    return t, R


def test_object_returned_early_from_for():
    converts_objects(return_rec_from_for, (POS, NEG, ROWS), (NEG, NEG, ROWS), (MIXED, POS, ROWS))


def test_object_returned_early_from_while():
    converts_objects(return_obj_from_while, (POS, NEG, ROWS), (NEG, NEG, ROWS), (MIXED, POS, ROWS))


def test_object_returned_early_from_nested_cond():
    converts_objects(return_rec_nested_cond, (POS, NEG), (NEG, NEG), (NEG, POS))


def test_object_changed_then_returned_early():
    converts_objects(return_rec_changed_before, (POS, NEG, ROWS), (NEG, NEG, -ROWS),
             (MIXED, POS, ROWS))


def test_object_returned_early_gradients():
    same_gradients(lambda a, b, M: return_rec_from_for(a, b, M)[0], (POS, NEG, ROWS),
                   (MIXED, POS, ROWS))


# ---------------------------------------------------------------- lists appended to after
class CM:
    """As the fuzzer's: counts entries and exits, logs each exit."""

    def __init__(self):
        self.enters = 0
        self.exits = 0
        self.log = []

    def __enter__(self):
        self.enters += 1
        return self

    def __exit__(self, *exc):
        self.exits += 1
        self.log.append("exit")
        return False


def cm_after_cond(x):
    cm = CM()
    t = x * 1.0
    if x.sum() > 0:
        with cm:
            t = t + 1.0
    with cm:                 # the log is one of two lists here: both get 'exit'
        t = t * 2.0
    cm.log.append("end")
    return t, cm.enters, cm.exits, cm.log


def cm_after_while(x):
    cm = CM()
    t = x * 1.0
    i = torch.tensor(0)
    while i < 3 and t.sum() < 10.0:
        i += 1
        with cm:
            t = t + 2.0
    with cm:                 # before + ['exit'] * n, then a suffix
        t = t - 1.0
    cm.log.extend(["a", "b"])
    return [t, cm.log, cm.exits]


def cm_appended_in_later_cond(x):
    cm = CM()
    t = x * 1.0
    if x[0] > 0:
        with cm:
            t = t + 1.0
    if x.sum() > 0:          # appended on one path: four options
        with cm:
            t = t * 3.0
    else:
        cm.log.append("neg")
    return {"t": t, "log": cm.log, "n": cm.exits}


def cm_loop_then_cond(x, M):
    cm = CM()
    t = x * 1.0
    for r in M:
        with cm:
            t = t + r
    if t.sum() > 0:          # the loop's list, grown on one path
        with cm:
            t = t * 0.5
    return t, cm.log


def test_list_appended_after_cond():
    converts(cm_after_cond, (POS,), (NEG,), (MIXED,))


def test_list_appended_after_while():
    converts(cm_after_while, (POS,), (NEG,), (POS * 10,))


def test_list_appended_in_a_later_cond():
    converts(cm_appended_in_later_cond, (POS,), (NEG,), (MIXED,), (-MIXED,))


def test_loop_list_appended_in_a_later_cond():
    converts(cm_loop_then_cond, (POS, ROWS), (NEG, ROWS), (NEG, ROWS[:1]), (POS, -ROWS))


def test_appended_lists_gradients():
    same_gradients(lambda x: cm_after_cond(x)[0], (POS,), (NEG,))
    same_gradients(lambda x: cm_appended_in_later_cond(x)["t"], (POS,), (MIXED,))


def loop_inside_branch(x, M):
    cm = CM()
    t = x * 1.0
    with cm:
        cm.log.append("in")
        if x.sum() >= 0.5:          # a loop in one branch grows the log: its count leaves
            for r in M:             # the cond as an output of its own
                with cm:
                    cm.log.append("in")
                    t = torch.tanh(t) * 0.5 + r
        else:
            t = t - 1.0
    return t, cm.log, cm.exits


def cond_inside_branch(x):
    cm = CM()
    t = x * 1.0
    if x.sum() > 0:
        with cm:
            if x[0] > 1.5:          # the log chosen inside the branch, then appended to
                with cm:
                    t = t * 2.0
            t = t + 1.0
    else:
        cm.log.append("neg")
    return t, cm.log


def test_list_grown_by_a_loop_in_a_branch():
    converts(loop_inside_branch, (POS, ROWS), (NEG, ROWS), (POS, ROWS[:1]), (MIXED, -ROWS))


def test_list_chosen_inside_a_branch():
    converts(cond_inside_branch, (POS,), (NEG,), (POS - 1.0,), (MIXED,))


def aliased_then_appended(x):
    cm = CM()
    t = x * 1.0
    if x.sum() > 0:
        with cm:
            t = t + 1.0
    log = cm.log             # another name: an append must not leave it stale
    with cm:
        t = t * 2.0
    return t, log, cm.log


def read_after_append(x):
    cm = CM()
    t = x * 1.0
    if x.sum() > 0:
        with cm:
            t = t + 1.0
    with cm:
        t = t * 2.0
    return t * len(cm.log)


def appended_in_loop_after_cond(x, M):
    cm = CM()
    t = x * 1.0
    if x.sum() > 0:
        with cm:
            t = t + 1.0
    for r in M:              # each option grows per iteration: not carried
        with cm:
            t = t + r
    return t, cm.log


def test_aliased_list_value_falls_back():
    falls_back(aliased_then_appended, (POS,), (NEG,), match="chose")


def test_list_value_read_falls_back():
    falls_back(read_after_append, (POS,), (NEG,), match="chose")


def test_list_value_grown_in_loop_falls_back():
    falls_back(appended_in_loop_after_cond, (POS, ROWS), (NEG, ROWS))


def returned_log_then_exit(x, M):
    cm = CM()
    t = x * 1.0
    for r in M:
        with cm:
            t = t + r
    if (x + 1.0).sum() >= -0.5:
        with cm as q:
            q.log.append("in")
            if x.sum() < -0.5:
                return [t, cm.exits, cm.log]    # __exit__ appends to the returned list
    return [t, cm.exits, cm.log]


def returned_plain_log(x):
    cm = CM()
    t = x * 1.0
    if (x + 1.0).sum() >= -0.5:
        with cm as q:
            q.log.append("in")
            if x.sum() < -0.5:
                return [t, cm.exits, cm.log]    # __exit__ appends to the returned list
    return [t, cm.exits, cm.log]


def returned_log_in_branch(x):
    cm = CM()
    t = x * 1.0
    if x[0] > 0:
        with cm:
            t = t + 1.0
    if x.sum() > 0:
        with cm:
            return t, cm.log            # the list the run's path grew, exit included
    return t, cm.log


def test_list_returned_inside_with_is_never_stale():
    agrees(returned_log_then_exit, (POS, ROWS), (NEG, ROWS), (NEG * 0.1, ROWS),
           (MIXED, -ROWS))
    agrees(returned_log_in_branch, (POS,), (NEG,), (MIXED,), (-MIXED,))
    agrees(returned_plain_log, (NEG * 0.1,), (POS,), (NEG,), (NEG * 0.3,))


def test_region_state_lists_appended_again_convert():
    """test_fidelity_region_state's log_nested (a cond inside a branch logs) and
    log_appended_again_after (a with after the loop logs) fell back; now carried."""
    from test_fidelity_region_state import log_appended_again_after, log_nested
    inputs = [(POS,), (NEG,), (MIXED,), (torch.tensor([1.0, -1.0, 1.0]),),
              (torch.tensor([-1.0, 1.0, 1.0]),), (torch.ones(0),)]
    converts_objects(log_nested, *inputs[:5])
    converts_objects(log_appended_again_after, *inputs)
