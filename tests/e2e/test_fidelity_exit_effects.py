"""A returned value holding a mutable object that code running after the return
expression changes (a ``with``'s ``__exit__``, a ``finally``, nested ``with``s).

    with cm:
        if t.sum() > 0:
            return t, cm.log     # eager: the SAME list; __exit__ appends "exit" after
    return t, cm.log

Eager's caller sees the list with the exit's items. The graph must equal that or fall
back: a list a tensor condition chose (``cm.log`` after ``with cm:`` in a tensor branch:
a PathValue) that a cond passed on into the early return's value, then appended to by
``__exit__``/``finally``, is refused (``region_state._aliased`` sees the option lists in
the other value); a plain list or dict a branch returns and the code changes afterwards
is refused by ``control_flow.copies_changed``. Objects returned whole (``return t, cm``)
and counters (``cm.exits``) are rebuilt with their final state and convert.
"""
from __future__ import annotations

import torch

from fidelity_checks import converts, falls_back, same_gradients

POS, NEG = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([-1.0, -2.0, -3.0])
MIXED = torch.tensor([3.0, -2.0, 1.0])
INPUTS = [(POS,), (NEG,), (MIXED,), (POS,)]


class CM:
    """Counts entries and exits and logs exits in a list (as the fuzzer's CM)."""

    def __init__(self):
        self.enters = 0
        self.exits = 0
        self.log = []
        self.stats = {}

    def __enter__(self):
        self.enters += 1
        return self

    def __exit__(self, *exc):
        self.exits += 1
        self.log.append("exit")
        return False


class DictCM(CM):
    """Records its exits in a dict instead."""

    def __exit__(self, *exc):
        self.exits += 1
        self.stats["exit"] = self.exits
        return False


# ------------------------------------------------- a list a tensor condition chose
def chosen_log_returned_in_with(x):
    """The fuzzer's program 176, small: cm.log differs per path of the first cond."""
    cm = CM()
    if x[1] > 0:
        with cm:
            x = x * 2
    with cm:
        if x.sum() > 0:
            return x, cm.log
    return x, cm.log


def chosen_log_with_counters(x):
    cm = CM()
    if x[1] > 0:
        with cm:
            x = x * 2
    with cm:
        if x.sum() > 0:
            return x + 1, cm.enters, cm.exits, cm.log
    return x - 1, cm.enters, cm.exits, cm.log


def chosen_log_nested_withs(x):
    cm = CM()
    if x[1] > 0:
        with cm:
            x = x * 2
    with cm:
        with cm:
            if x.sum() > 0:
                return x, cm.log
    return x, cm.log


def chosen_log_with_in_tensor_branch(x):
    cm = CM()
    if x[1] > 0:
        with cm:
            x = x * 2
    if x[0] > -100:
        with cm:
            if x.sum() > 0:
                return x, cm.log
    return x, cm.log


def chosen_log_finally(x):
    cm = CM()
    if x[1] > 0:
        with cm:
            x = x * 2
    try:
        if x.sum() > 0:
            return x, cm.log
    finally:
        cm.log.append("fin")
    return x, cm.log


def loop_grown_log_returned_in_with(x):
    """cm.log grown by a tensor while (a RepeatValue), then returned inside with."""
    cm = CM()
    i = 0
    while x.sum() > i:
        with cm:
            x = x - 1
        i += 1
    with cm:
        if x.sum() > 0:
            return x, cm.log
    return x, cm.log


# ------------------------------------------------- a plain list or dict
def plain_log_returned_in_with(x):
    cm = CM()
    with cm:
        if x.sum() > 0:
            return x * 2, cm.log
    return x - 1, cm.log


def plain_log_same_structure(x):
    """Both returns give a list of one string: only the copy check can tell."""
    cm = CM()
    with cm:
        if x.sum() > 0:
            return x * 2, cm.log
    return x - 1, ["exit"]


def plain_dict_same_structure(x):
    cm = DictCM()
    with cm:
        if x.sum() > 0:
            return x * 2, cm.stats
    return x - 1, {"exit": 1}


def plain_log_nested_withs(x):
    cm = CM()
    with cm:
        with cm:
            if x.sum() > 0:
                return x * 2, cm.log
    return x - 1, cm.log


def with_inside_tensor_branch(x):
    cm = CM()
    if x.sum() > 0:
        with cm:
            return x, cm.log
    return x, cm.log


def finally_appends(x):
    log = []
    try:
        if x.sum() > 0:
            return x * 2, log
    finally:
        log.append("fin")
    return x - 1, ["fin"]


def return_in_with_in_tensor_while(x):
    cm = CM()
    i = 0
    while x.sum() > i:
        with cm:
            x = x - 1
            if x[0] > 2:
                return x, cm.log
        i += 1
    return x, cm.log


def test_chosen_log_returned_in_with_falls_back():
    falls_back(chosen_log_returned_in_with, *INPUTS, match="appended to while another")


def test_chosen_log_with_counters_falls_back():
    falls_back(chosen_log_with_counters, *INPUTS, match="appended to while another")


def test_chosen_log_nested_withs_falls_back():
    falls_back(chosen_log_nested_withs, *INPUTS, match="appended to while another")


def test_chosen_log_with_in_tensor_branch_falls_back():
    falls_back(chosen_log_with_in_tensor_branch, *INPUTS, match="appended to while another")


def test_chosen_log_finally_falls_back():
    falls_back(chosen_log_finally, *INPUTS, match="appended to while another")


def test_loop_grown_log_returned_in_with_falls_back():
    falls_back(loop_grown_log_returned_in_with, *INPUTS, match="appended to while another")


def test_plain_containers_changed_after_return_fall_back():
    for fn in (plain_log_same_structure, plain_dict_same_structure,
               with_inside_tensor_branch, finally_appends, return_in_with_in_tensor_while):
        falls_back(fn, *INPUTS)


def test_plain_log_both_paths_return_converts():
    # both paths return cm.log itself: the cond hands back that very list, so __exit__'s
    # append after the return shows in the result, as in eager
    for fn in (plain_log_returned_in_with, plain_log_nested_withs):
        converts(fn, *INPUTS)


# ------------------------------------------------- what converts, equal to eager
def no_tensor_control_flow(x):
    cm = CM()
    with cm:
        return x * 2, cm.log, cm.exits


def no_tensor_control_flow_dict(x):
    cm = DictCM()
    with cm:
        return x * 2, cm.stats


def no_tensor_control_flow_finally(x):
    log = []
    try:
        return x * 2, log
    finally:
        log.append("fin")


def object_returned_whole(x):
    """``return t, cm``: the object is rebuilt with its attributes after __exit__."""
    cm = CM()
    with cm:
        if x.sum() > 0:
            return x * 2, cm
    return x - 1, cm


def object_returned_whole_chosen_log(x):
    cm = CM()
    if x[1] > 0:
        with cm:
            x = x * 2
    with cm:
        if x.sum() > 0:
            return x, cm
    return x, cm


def counters_returned_in_with(x):
    """Numbers are copied by the return (eager too): __exit__'s bump is not seen."""
    cm = CM()
    if x[1] > 0:
        with cm:
            x = x * 2
    with cm:
        if x.sum() > 0:
            return x, cm.exits, cm.enters
    return x, cm.exits, cm.enters


def chosen_log_held_only_inside_branch(x):
    """A value holding cm.log that does not outlive its branch is no alias."""
    cm = CM()
    if x[1] > 0:
        with cm:
            x = x * 2
    with cm:
        if x.sum() > 0:
            r = (x, cm.log)
            x = x + r[0]
    return x, cm.log


def test_no_tensor_control_flow_converts():
    converts(no_tensor_control_flow, *INPUTS)
    converts(no_tensor_control_flow_dict, *INPUTS)
    converts(no_tensor_control_flow_finally, *INPUTS)


def test_no_tensor_control_flow_sees_the_exit():
    from transpiler import to_graph
    for strict in (True, False):
        g = to_graph(no_tensor_control_flow, strict=strict)
        for x in (POS, NEG):
            _, log, exits = g(x.clone())
            assert log == ["exit"] and int(exits) == 0
        _, stats = to_graph(no_tensor_control_flow_dict, strict=strict)(POS.clone())
        assert stats == {"exit": 1}
        _, log = to_graph(no_tensor_control_flow_finally, strict=strict)(POS.clone())
        assert log == ["fin"]


def test_object_returned_whole_converts():
    for fn in (object_returned_whole, object_returned_whole_chosen_log):
        from transpiler import to_graph
        for strict in (True, False):
            g = to_graph(fn, strict=strict)
            for (x,) in INPUTS:
                exp, got = fn(x.clone()), g(x.clone())
                assert type(got[1]) is CM
                assert (got[1].enters, got[1].exits, got[1].log) == \
                    (exp[1].enters, exp[1].exits, exp[1].log)
                torch.testing.assert_close(got[0], exp[0])


def test_counters_and_branch_local_alias_convert():
    converts(counters_returned_in_with, *INPUTS)
    converts(chosen_log_held_only_inside_branch, *INPUTS)


def exit_counted_tensor(x):
    cm = CM()
    with cm:
        if x.sum() > 0:
            return x * x, cm.exits
    return x * 3, cm.exits


def exit_counted_first(x):
    out, exits = exit_counted_tensor(x)
    return out * (exits + 1)


def test_return_in_with_converts_with_gradients():
    converts(exit_counted_tensor, *INPUTS)
    same_gradients(exit_counted_first, (POS,), (NEG,), (MIXED,))
