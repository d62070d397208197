"""Containers whose structure depends on the path a tensor condition takes.

A key added to a dict on one path only, keys added in another order, an early ``return``
of another structure than the fall-through one: the converted function returns, on each
call, the container of the path the run took (its keys in that path's order). Using such
a container while tracing (reading, ``in``, ``len``, iterating, writing, printing) falls
back: its structure is known only when the graph runs. Every check runs two or three
inputs taking different paths, in strict and default mode, against eager.
"""
from __future__ import annotations

import collections
import warnings

import torch

from transpiler import FallbackWarning, to_graph

from e2e_helpers import _clone, assert_same
from fidelity_checks import converts, falls_back

POS, NEG = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([-1.0, -2.0, -3.0])
MIXED = torch.tensor([3.0, -2.0, 1.0])
PATHS = [(POS,), (NEG,), (MIXED,)]
Pair = collections.namedtuple("Pair", "a b")


def same_order(fn, *inputs):
    """Every dict in the result has eager's keys in eager's order (``converts`` compares
    keys as sets)."""
    def orders(v):
        if isinstance(v, dict):
            return [(type(v), list(v))] + [o for x in v.values() for o in orders(x)]
        if isinstance(v, (list, tuple)):
            return [o for x in v for o in orders(x)]
        return []
    for strict in (True, False):
        g = to_graph(fn, strict=strict)
        for args in inputs:
            with warnings.catch_warnings():
                warnings.simplefilter("error", FallbackWarning)
                got = g(*_clone(args))
            assert orders(got) == orders(fn(*_clone(args)))


def check(fn, *inputs):
    converts(fn, *inputs)
    same_order(fn, *inputs)


# --------------------------------------------------------------------------- dict keys
def key_on_one_path(x):
    d = {"u": x * 0.0, "c": 0}
    if x.sum() > 0:
        d["n"] = x * 2
    return x + 1, d


def key_in_else(x):
    d = {"u": x}
    if x.sum() > 0:
        x = x * 3
    else:
        d["neg"] = -x
        d["tag"] = "neg"
    return d, x


def keys_on_both_paths_differ(x):
    d = {}
    if x.sum() > 0:
        d["a"] = x
    else:
        d["b"] = x * 2
    return d


def keys_in_another_order(x):
    d = {}
    if x.sum() > 0:
        d["a"] = x
        d["b"] = 1
    else:
        d["b"] = 2
        d["a"] = x * 3
    return d


def python_value_on_one_path(x):
    d = {"u": x}
    if x.mean() > 0:
        d["label"] = "positive"
    return d


def nested_dict_key(x):
    d = {"inner": {"u": x}}
    if x.sum() > 0:
        d["inner"]["n"] = x + 1
    return d


def key_in_inner_branch(x):
    d = {"u": x}
    if x.sum() > 0:
        d["pos"] = x
        if x[0] > 2:
            d["big"] = x * 10
    return d


def two_conditions_two_keys(x):
    d = {"u": x}
    if x.sum() > 0:
        d["p"] = x
    if x[0] > 0:
        d["q"] = x * 2
    return d


def list_grows_on_one_path(x):
    names = ["a"]
    if x.sum() > 0:
        names.append("b")
    return x, names


def test_dict_key_added_on_one_path():
    check(key_on_one_path, *PATHS)
    check(key_in_else, *PATHS)
    check(python_value_on_one_path, *PATHS)


def test_dict_keys_differ_or_come_in_another_order():
    check(keys_on_both_paths_differ, *PATHS)
    check(keys_in_another_order, *PATHS)


def test_nested_and_inner_branch_keys():
    check(nested_dict_key, *PATHS)
    check(key_in_inner_branch, (torch.tensor([3.0, 1.0]),), (torch.tensor([1.0, 1.0]),),
          (NEG,))


def test_list_of_python_items_grows_on_one_path():
    check(list_grows_on_one_path, *PATHS)


def test_gradients_through_the_chosen_dict():
    g = to_graph(key_on_one_path, strict=True)
    for x in (POS, NEG):
        a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
        _, eager = key_on_one_path(a)
        _, got = g(b)
        assert list(got) == list(eager)
        sum(v.sum() for v in eager.values() if isinstance(v, torch.Tensor)).backward()
        sum(v.sum() for v in got.values() if isinstance(v, torch.Tensor)).backward()
        torch.testing.assert_close(b.grad, a.grad)


# --------------------------------------------------------------------------- early returns
def early_return_of_a_tuple(x):
    t = x + 1
    if x.sum() > 0:
        return t, (x, t)
    return t, x


def early_return_of_a_dict(x):
    if x.sum() > 0:
        return {"pos": x, "n": 1}
    y = x * 2
    return [y, y + 1]


def early_return_in_a_loop_free_chain(x):
    if x[0] > 2:
        return x
    if x.sum() > 0:
        return x, x * 2
    return (x, x, (x,))


def early_return_of_a_namedtuple(x):
    if x.sum() > 0:
        return Pair(x, x * 2)
    return (x, x * 3)


def test_early_return_of_another_structure():
    check(early_return_of_a_tuple, *PATHS)
    check(early_return_of_a_dict, *PATHS)
    check(early_return_in_a_loop_free_chain, *PATHS)
    check(early_return_of_a_namedtuple, *PATHS)


# --------------------------------------------------------------------------- used: fallback
def reads_a_sure_key_later(x):
    d = {"u": x}
    if x.sum() > 0:
        d["n"] = x * 2
    return d["u"] + 1


def reads_the_maybe_key(x):
    d = {"u": x}
    if x.sum() > 0:
        d["n"] = x * 2
    return d.get("n", x)


def checks_membership(x):
    d = {"u": x}
    if x.sum() > 0:
        d["n"] = x * 2
    return "n" in d


def measures_length(x):
    d = {"u": x}
    if x.sum() > 0:
        d["n"] = x * 2
    return len(d)


def iterates_keys(x):
    d = {"u": x}
    if x.sum() > 0:
        d["n"] = x * 2
    out = []
    for k in d:
        out.append(k)
    return out


def writes_after(x):
    d = {"u": x}
    if x.sum() > 0:
        d["n"] = x * 2
    d["w"] = x
    return d


def prints_it(x):
    d = {"u": x}
    if x.sum() > 0:
        d["n"] = 1
    print(d)
    return x


def returned_tuple_indexed(x):
    if x.sum() > 0:
        r = (x, x * 2)
    else:
        r = (x,)
    return r[0]


def compares_with_is(x):
    d = {"u": x}
    if x.sum() > 0:
        d["n"] = x * 2
    return d, d is None


def test_using_the_container_while_tracing_falls_back():
    for fn in (reads_a_sure_key_later, reads_the_maybe_key, checks_membership,
               measures_length, iterates_keys, writes_after,
               returned_tuple_indexed, two_conditions_two_keys):
        falls_back(fn, *PATHS, match="chose")
    falls_back(prints_it, *PATHS)


def returns_a_list_another_name_holds(x):
    log = ["a"]
    holder = {"log": log}
    if x.sum() > 0:
        return x, log
    return x, holder, 1


def test_a_container_reached_otherwise_keeps_the_mismatch():
    # as an output of the cond it would be a copy, blind to changes through the other name
    falls_back(returns_a_list_another_name_holds, *PATHS, match="different structures")


def test_code_comparing_with_is_keeps_the_mismatch():
    falls_back(compares_with_is, *PATHS, match="different structures")


def test_unassigned_on_one_path_keeps_its_error():
    def fn(x):
        if x.sum() > 0:
            r = (x, x)
        return r
    falls_back(fn, (POS,), match="different structures")


# --------------------------------------------------------------------------- loop options
class Rec:
    def __init__(self, t, tag="init"):
        self.t = t
        self.tag = tag


ROWS = [(POS, torch.tensor([[1.0, 1.0, 1.0], [-5.0, 1.0, 0.0], [2.0, 2.0, 2.0]])),
        (NEG, torch.tensor([[1.0, 1.0, 1.0], [-5.0, 1.0, 0.0]])),
        (POS, torch.tensor([[-9.0, -9.0, -9.0], [1.0, 1.0, 1.0]]))]


def attribute_str_set_in_loop(x, m):
    r = Rec(x * 0.0)
    for row in m:
        if (row + x).sum() < 0:
            break
        r.tag = "seen"
        r.t = r.t + row
    return r


def local_str_chosen_in_loop(x, m):
    tag = "init"
    for row in m:
        if row.sum() > 0:
            tag = "pos"
        else:
            tag = None
    return x, tag


def str_set_in_tensor_while(x, m):
    tag = "init"
    i = 0
    while x.sum() > i:
        i += 1
        tag = "ran"
    return x, tag, i


def str_read_in_loop(x, m):
    tag = "init"
    for row in m:
        if row.sum() > 0:
            tag = tag + "!"
    return x, tag


def str_tested_in_loop(x, m):
    tag = "init"
    for row in m:
        if tag == "init":
            x = x + row
        tag = "seen"
    return x, tag


def same_object(fn, *inputs):
    """The result object has eager's class and attributes (``Rec`` has no ``__eq__``)."""
    for strict in (True, False):
        g = to_graph(fn, strict=strict)
        for args in inputs:
            with warnings.catch_warnings():
                warnings.simplefilter("error", FallbackWarning)
                got = g(*_clone(args))
            exp = fn(*_clone(args))
            assert type(got) is type(exp) and list(vars(got)) == list(vars(exp))
            assert_same(vars(got), vars(exp))


def test_python_value_set_in_a_tensor_loop_is_chosen_per_run():
    same_object(attribute_str_set_in_loop, *ROWS)
    check(local_str_chosen_in_loop, *ROWS)
    check(str_set_in_tensor_while, (POS, POS), (NEG, POS), (POS * 3, POS))


def test_python_value_the_loop_reads_falls_back():
    falls_back(str_read_in_loop, *ROWS, match="chose")
    falls_back(str_tested_in_loop, *ROWS, match="chose")
