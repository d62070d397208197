"""Adversarial round 4 (issue 12): container identity through tensor control flow.

Programs written as users write them: a list or dict (the caller's argument, one it holds,
a local, a global, an object's attribute) returned or assigned on the paths of a tensor
``if`` / ``while`` / ``for``, mutated in a branch, returned twice or inside tuples, dicts,
namedtuples and dataclasses, copied on one path. Each scenario builds fresh state, wraps its
function (eager, to_graph, to_graph strict), calls it on two or more inputs (a cached graph
runs the later ones) and returns what a user can observe: results, ``is`` checks, and the
caller's containers after the call. Default mode must equal eager (a FallbackWarning runs
eager); strict mode must equal eager or raise ConversionError -- never anything else.
"""
import collections
import dataclasses

import pytest
import torch

from test_fidelity_adversarial3 import differential


def T(*v):
    return torch.tensor(v, dtype=torch.float32)


POS, NEG = T(1.0, 2.0), T(-3.0, 1.0)
Pair = collections.namedtuple("Pair", "items total")


@dataclasses.dataclass
class Box:
    items: list
    total: object = None


class Holder:
    def __init__(self, items):
        self.items = items


# ---------------------------------------------------------------- the same object on both paths
def s_arg_early_return_both_paths(wrap):
    def f(x, lst):
        if x.sum() > 0:
            return lst
        else:
            return lst
    g = wrap(f)
    r = []
    for x in (POS, NEG, POS):
        lst = [x * 1, 3]
        out = g(x, lst)
        r.append((out is lst, out))
    return r


def s_arg_assigned_both_then_appended(wrap):
    def f(x, lst):
        if x.sum() > 0:
            r = lst
        else:
            r = lst
        r.append(x + 1)
        return r
    g = wrap(f)
    res = []
    for x in (POS, NEG):
        lst = [x]
        out = g(x, lst)
        res.append((out is lst, lst, len(lst)))
    return res


def s_elif_chain_two_lists(wrap):
    def f(x, a, b):
        s = x.sum()
        if s > 2:
            r = a
        elif s > 0:
            r = b
        else:
            r = a
        return r
    g = wrap(f)
    res = []
    for x in (T(3.0), T(1.0), T(-1.0), T(0.5)):
        a, b = [1], [2]
        out = g(x, a, b)
        res.append((out is a, out is b, out))
    return res


def s_ternary_same_list(wrap):
    def f(x, lst):
        r = lst if x.max() > 1 else lst
        r.append(int(len(r)))
        return r
    g = wrap(f)
    res = []
    for x in (POS, NEG):
        lst = [7]
        out = g(x, lst)
        res.append((out is lst, lst))
    return res


def s_ternary_two_lists(wrap):
    def f(x, a, b):
        return a if x.sum() > 0 else b
    g = wrap(f)
    res = []
    for x in (POS, NEG, POS):
        a, b = [x], [x * 2]
        out = g(x, a, b)
        res.append((out is a, out is b))
    return res


def s_nested_ifs_same_dict(wrap):
    def f(x, d):
        if x[0] > 0:
            if x[1] > 1:
                out = d
            else:
                out = d
        else:
            out = d
        out["seen"] = x.sum()
        return out, x * 2
    g = wrap(f)
    res = []
    for x in (T(1.0, 2.0), T(1.0, 0.0), T(-1.0, 5.0)):
        d = {"a": 1}
        out = g(x, d)
        res.append((out[0] is d, d))
    return res


def s_attr_of_object_both_paths(wrap):
    def f(x, h):
        if x.sum() > 0:
            items = h.items
        else:
            items = h.items
        items.append(x.sum())
        return items
    g = wrap(f)
    res = []
    for x in (POS, NEG):
        h = Holder([])
        out = g(x, h)
        res.append((out is h.items, h.items))
    return res


G_LOG = []


def s_global_list_both_paths(wrap):
    def f(x):
        if x.sum() > 0:
            r = G_LOG
        else:
            r = G_LOG
        r.append(x * 3)
        return r
    g = wrap(f)
    res = []
    for x in (POS, NEG):
        G_LOG.clear()
        out = g(x)
        res.append((out is G_LOG, list(G_LOG)))
    G_LOG.clear()
    return res


def s_local_returned_twice(wrap):
    def f(x):
        lst = [x]
        if x.sum() > 0:
            return lst, lst
        return lst, lst
    g = wrap(f)
    res = []
    for x in (POS, NEG):
        a, b = g(x)
        a.append(0)
        res.append((a is b, b))
    return res


def s_arg_in_tuple_dict_namedtuple_dataclass(wrap):
    def f(x, lst):
        if x.sum() > 0:
            t = x * 2
        else:
            t = x - 1
        return (lst, {"k": lst}, Pair(lst, t), Box(lst, t))
    g = wrap(f)
    res = []
    for x in (POS, NEG):
        lst = [1]
        tup, d, p, b = g(x, lst)
        res.append((tup is lst, d["k"] is lst, p.items is lst, b.items is lst, p.total, b.total))
    return res


def s_early_returns_in_containers(wrap):
    def f(x, lst):
        if x.sum() > 0:
            return Pair(lst, x.sum())
        return Pair(lst, -x.sum())
    g = wrap(f)
    res = []
    for x in (POS, NEG):
        lst = [x]
        p = g(x, lst)
        res.append((type(p).__name__, p.items is lst, p.total))
    return res


def s_dataclass_early_returns(wrap):
    def f(x, lst):
        if x.sum() > 0:
            return Box(lst, x * 2)
        return Box(lst, x)
    g = wrap(f)
    res = []
    for x in (POS, NEG):
        lst = []
        b = g(x, lst)
        b.items.append(1)
        res.append((b.items is lst, lst, b.total))
    return res


# ---------------------------------------------------------------- different objects per path
def s_early_return_two_lists_then_mutated(wrap):
    def f(x, a, b):
        if x.sum() > 0:
            return a
        return b
    g = wrap(f)
    res = []
    for x in (POS, NEG, NEG, POS):
        a, b = [1], [2]
        out = g(x, a, b)
        out.append(9)
        res.append((a, b))
    return res


def s_swap_in_branch(wrap):
    def f(x, a, b):
        if x.sum() > 0:
            a, b = b, a
        return a, b
    g = wrap(f)
    res = []
    for x in (POS, NEG):
        a, b = [1], [2]
        p, q = g(x, a, b)
        res.append((p is a, p is b, q is a, q is b))
    return res


def s_swap_in_while(wrap):
    def f(x, a, b):
        while x.sum() < 10:
            x = x * 2
            a, b = b, a
        return a, b, x
    g = wrap(f)
    res = []
    for x in (T(1.0), T(3.0), T(0.5)):
        a, b = [1], [2]
        p, q, y = g(x, a, b)
        res.append((p is a, q is b, y))
    return res


def s_new_list_on_one_path(wrap):
    def f(x, lst):
        if x.sum() > 0:
            r = [x]
        else:
            r = lst
        r.append(x * 2)
        return r
    g = wrap(f)
    res = []
    for x in (POS, NEG):
        lst = [x]
        out = g(x, lst)
        res.append((out is lst, len(lst), len(out)))
    return res


def s_copy_on_one_path(wrap):
    def f(x, lst):
        if x.sum() > 0:
            r = list(lst)
        else:
            r = lst
        r.append(x)
        return r
    g = wrap(f)
    res = []
    for x in (POS, NEG, POS):
        lst = [1]
        out = g(x, lst)
        res.append((out is lst, lst, out))
    return res


def s_slice_copy_on_one_path(wrap):
    def f(x, lst):
        r = lst[:] if x.sum() > 0 else lst
        r += [x.sum()]
        return r
    g = wrap(f)
    res = []
    for x in (POS, NEG):
        lst = [0.5]
        out = g(x, lst)
        res.append((out is lst, lst, out))
    return res


def s_dict_copy_on_one_path(wrap):
    def f(x, d):
        if x.sum() < 0:
            d = dict(d)
        d["s"] = x.sum()
        return d
    g = wrap(f)
    res = []
    for x in (POS, NEG):
        d = {"a": 1}
        out = g(x, d)
        res.append((out is d, d, out))
    return res


def s_attr_replaced_on_one_path(wrap):
    def f(x, h):
        old = h.items
        if x.sum() > 0:
            h.items = [x]
        return h.items, old
    g = wrap(f)
    res = []
    for x in (POS, NEG):
        h = Holder([1])
        first = h.items
        new, old = g(x, h)
        res.append((new is h.items, old is first, h.items is first, h.items))
    return res


def s_inner_list_replaced_on_one_path(wrap):
    def f(x, outer):
        if x.sum() > 0:
            outer["inner"] = []
        outer["inner"].append(x)
        return outer["inner"]
    g = wrap(f)
    res = []
    for x in (POS, NEG):
        inner = [0]
        outer = {"inner": inner}
        out = g(x, outer)
        res.append((out is inner, out is outer["inner"], inner, outer))
    return res


# ---------------------------------------------------------------- mutation inside branches
def s_append_on_one_path_return_both(wrap):
    def f(x, lst):
        if x.sum() > 0:
            lst.append(x * 2)
            return lst
        return lst
    g = wrap(f)
    res = []
    for x in (POS, NEG, POS):
        lst = []
        out = g(x, lst)
        res.append((out is lst, lst))
    return res


def s_append_both_paths_return_one(wrap):
    def f(x, lst):
        if x.sum() > 0:
            lst.append(x)
            return lst
        lst.append(-x)
        return x
    g = wrap(f)
    res = []
    for x in (POS, NEG):
        lst = []
        out = g(x, lst)
        res.append((out is lst, lst))
    return res


def s_mutate_return_neither(wrap):
    def f(x, lst, d):
        if x.sum() > 0:
            lst.clear()
            d["p"] = x
        else:
            del d["a"]
        return x + 1
    g = wrap(f)
    res = []
    for x in (POS, NEG):
        lst, d = [1, 2], {"a": 1}
        out = g(x, lst, d)
        res.append((out, lst, d))
    return res


def s_setitem_then_return_dict(wrap):
    def f(x, d):
        if x.max() > 1:
            d["big"] = x.max()
            return d
        d["small"] = x.min()
        return d
    g = wrap(f)
    res = []
    for x in (POS, NEG):
        d = {}
        out = g(x, d)
        res.append((out is d, list(d), d))
    return res


def s_iadd_list_in_branch(wrap):
    def f(x, lst):
        if x.sum() > 0:
            lst += [x, x * 2]
        else:
            lst += [1]
        return lst
    g = wrap(f)
    res = []
    for x in (POS, NEG):
        lst = [0]
        out = g(x, lst)
        res.append((out is lst, lst))
    return res


def s_python_values_list(wrap):
    def f(x, lst):
        if x.sum() > 0:
            lst.append(1)
        else:
            lst.append(2)
        lst.append(len(lst))
        return lst
    g = wrap(f)
    res = []
    for x in (POS, NEG):
        lst = [0]
        out = g(x, lst)
        res.append((out is lst, lst))
    return res


def s_pop_in_branch(wrap):
    def f(x, lst):
        if x.sum() > 0:
            v = lst.pop()
        else:
            v = lst[0]
        return v, lst
    g = wrap(f)
    res = []
    for x in (POS, NEG):
        lst = [x, x * 3]
        v, out = g(x, lst)
        res.append((v, out is lst, lst))
    return res


def s_nested_inner_mutated(wrap):
    def f(x, outer):
        inner = outer["inner"]
        if x.sum() > 0:
            inner.append(x)
            return inner
        return outer["inner"]
    g = wrap(f)
    res = []
    for x in (POS, NEG):
        inner = []
        outer = {"inner": inner}
        out = g(x, outer)
        res.append((out is inner, inner))
    return res


def s_list_of_lists_inner_returned(wrap):
    def f(x, rows):
        if x.sum() > 0:
            r = rows[0]
        else:
            r = rows[1]
        r.append(x)
        return r
    g = wrap(f)
    res = []
    for x in (POS, NEG):
        rows = [[], []]
        out = g(x, rows)
        res.append((out is rows[0], out is rows[1], [len(r) for r in rows]))
    return res


def s_module_cache_attribute(wrap):
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.cache = []

        def forward(self, x):
            if x.sum() > 0:
                self.cache.append(x * 2)
                return self.cache
            return self.cache
    m = M()
    g = wrap(m)
    res = []
    for x in (POS, NEG):
        out = g(x)
        res.append((out is m.cache, len(m.cache)))
    return res


# ---------------------------------------------------------------- helpers and aliases
def _push(lst, v):
    lst.append(v)
    return lst


def s_helper_returns_arg(wrap):
    def f(x, lst):
        if x.sum() > 0:
            r = _push(lst, x)
        else:
            r = _push(lst, -x)
        return r
    g = wrap(f)
    res = []
    for x in (POS, NEG):
        lst = []
        out = g(x, lst)
        res.append((out is lst, lst))
    return res


def s_two_names_one_list(wrap):
    def f(x, lst):
        alias = lst
        if x.sum() > 0:
            r = lst
        else:
            r = alias
        lst.append(x)
        return r, alias
    g = wrap(f)
    res = []
    for x in (POS, NEG):
        lst = []
        r, alias = g(x, lst)
        res.append((r is lst, alias is lst, len(r)))
    return res


def s_aliased_arguments_then_distinct(wrap):
    def f(x, a, b):
        if x.sum() > 0:
            a.append(x)
        return b
    g = wrap(f)
    res = []
    shared = []
    out = g(POS, shared, shared)
    res.append((out is shared, len(shared)))
    a, b = [], []
    out = g(POS, a, b)
    res.append((out is b, len(a), len(b)))
    return res


def s_new_argument_each_call(wrap):
    def f(x, lst):
        if x.sum() > 0:
            r = lst
        else:
            r = lst
        return r
    g = wrap(f)
    l1, l2 = [1], [2]
    o1 = g(POS, l1)
    o2 = g(POS, l2)
    o3 = g(NEG, l1)
    return o1 is l1, o2 is l2, o3 is l1


def s_default_mutable_argument(wrap):
    def f(x, acc=[]):  # noqa: B006 - the classic shared default
        if x.sum() > 0:
            acc.append(1)
        return acc
    g = wrap(f)
    o1 = g(POS)
    o2 = g(NEG)
    o3 = g(POS)
    return o1 is o2, o2 is o3, list(o3)


# ---------------------------------------------------------------- loops
def s_while_assigns_same_list(wrap):
    def f(x, lst):
        r = None
        while x.sum() < 10:
            x = x * 2
            r = lst
        return r, x
    g = wrap(f)
    res = []
    for x in (T(1.0), T(20.0)):
        lst = [1]
        r, y = g(x, lst)
        res.append((r is lst, r is None, y))
    return res


def s_while_appends_returns_arg(wrap):
    def f(x, lst):
        while x.sum() < 10:
            x = x * 2
            lst.append(x)
        return lst
    g = wrap(f)
    res = []
    for x in (T(1.0), T(4.0)):
        lst = []
        out = g(x, lst)
        res.append((out is lst, lst))
    return res


def s_while_two_state_vars_one_list(wrap):
    def f(x, lst):
        a = lst
        b = lst
        while x.sum() < 10:
            x = x * 2
            a.append(1)
        return a is b, b, x
    g = wrap(f)
    res = []
    for x in (T(1.0), T(6.0)):
        lst = []
        same, b, y = g(x, lst)
        res.append((same, b is lst, lst, y))
    return res


def s_while_counter_in_dict(wrap):
    def f(x, stats):
        while x.sum() < 10:
            x = x * 2
            stats["n"] = stats.get("n", 0) + 1
        return stats
    g = wrap(f)
    res = []
    for x in (T(1.0), T(3.0)):
        stats = {}
        out = g(x, stats)
        res.append((out is stats, stats))
    return res


def s_for_break_picks_list(wrap):
    def f(x, a, b):
        r = b
        for v in x:
            if v > 0:
                r = a
                break
        return r
    g = wrap(f)
    res = []
    for x in (T(-1.0, 2.0), T(-1.0, -2.0)):
        a, b = [1], [2]
        out = g(x, a, b)
        res.append((out is a, out is b))
    return res


def s_for_range_break_returns_list(wrap):
    def f(x, lst):
        for i in range(4):
            if x[i] > 0:
                lst.append(i)
                break
        return lst
    g = wrap(f)
    res = []
    for x in (T(-1.0, 2.0, 0.0, 1.0), T(-1.0, -2.0, -3.0, -4.0)):
        lst = []
        out = g(x, lst)
        res.append((out is lst, lst))
    return res


def s_loop_rebinds_to_new_list(wrap):
    def f(x, lst):
        r = lst
        while x.sum() < 10:
            x = x * 2
            r = r + [1]
        return r
    g = wrap(f)
    res = []
    for x in (T(1.0), T(20.0)):
        lst = [0]
        out = g(x, lst)
        res.append((out is lst, out, lst))
    return res


def s_gradient_through_kept_list(wrap):
    def f(x, lst):
        if x.sum() > 0:
            lst.append(x * 2)
            r = lst
        else:
            lst.append(x * 3)
            r = lst
        return torch.stack(r).sum(), r is lst
    g = wrap(f)
    res = []
    for x in (POS, NEG):
        w = x.clone().requires_grad_()
        lst = [w]
        s, same = g(w, lst)
        s.backward()
        res.append((s.detach(), same, w.grad, len(lst)))
    return res


# ---------------------------------------------------------------- one existing list per path
def s_chosen_compared_with_is(wrap):
    def f(x, a, b):
        r = a if x.sum() > 0 else b
        return x * 2, r is a, r is not b
    g = wrap(f)
    res = []
    for x in (POS, NEG, POS):
        a, b = [x], [x * 2]
        res.append(g(x, a, b))
    return res


def s_fresh_or_argument(wrap):
    def f(x, lst):
        r = [x * 3] if x.sum() > 0 else lst
        return r
    g = wrap(f)
    res = []
    for x in (POS, NEG, POS, NEG):
        lst = [x]
        out = g(x, lst)
        res.append((out is lst, out))
    return res


def s_chosen_dict_in_tuple(wrap):
    def f(x, d1, d2):
        if x.sum() > 0:
            d = d1
        else:
            d = d2
        return d, x.sum()
    g = wrap(f)
    res = []
    for x in (NEG, POS):
        d1, d2 = {"k": x}, {"k": -x}
        d, s = g(x, d1, d2)
        res.append((d is d1, d is d2, s))
    return res


def s_global_or_argument(wrap):
    def f(x, lst):
        r = G_LOG if x.sum() > 0 else lst
        return [r, x]
    g = wrap(f)
    res = []
    for x in (POS, NEG):
        lst = [1]
        out = g(x, lst)
        res.append((out[0] is G_LOG, out[0] is lst))
    return res


def s_chosen_in_while(wrap):
    def f(x, a, b):
        r = b
        while x.sum() < 10:
            x = x * 2
            r = a if x.sum() > 5 else b
        return r, x
    g = wrap(f)
    res = []
    for x in (T(1.0), T(20.0), T(0.7)):
        a, b = [1], [2]
        r, y = g(x, a, b)
        res.append((r is a, r is b, y))
    return res


def s_chosen_returned_twice(wrap):
    def f(x, a, b):
        r = a if x.mean() > 0 else b
        return r, r, x
    g = wrap(f)
    res = []
    for x in (POS, NEG):
        a, b = [x], [x]
        p, q, _ = g(x, a, b)
        res.append((p is q, p is a, q is b))
    return res


def s_chosen_in_dataclass(wrap):
    def f(x, a, b):
        r = a if x.sum() > 0 else b
        return Box(r, x + 1)
    g = wrap(f)
    res = []
    for x in (POS, NEG):
        a, b = [1], [2]
        box = g(x, a, b)
        res.append((box.items is a, box.items is b, box.total))
    return res


def s_chosen_read_and_returned(wrap):
    def f(x, a, b):
        r = a if x.sum() > 0 else b
        return {"sum": torch.stack(r).sum(), "r": r}
    g = wrap(f)
    res = []
    for x in (POS, NEG):
        a, b = [x, x], [x * 5]
        out = g(x, a, b)
        res.append((out["sum"], out["r"] is a, out["r"] is b))
    return res


def s_chosen_then_caller_appends(wrap):
    def f(x, a, b):
        if x.sum() > 0:
            return a
        return b
    g = wrap(f)
    res = []
    for x in (NEG, POS, NEG):
        a, b = [], []
        g(x, a, b).append(x)
        res.append((len(a), len(b)))
    return res


def s_chosen_nested_in_caller_dict(wrap):
    def f(x, cfg):
        r = cfg["train"] if x.sum() > 0 else cfg["eval"]
        return r
    g = wrap(f)
    res = []
    for x in (POS, NEG):
        cfg = {"train": [1], "eval": [2]}
        out = g(x, cfg)
        res.append((out is cfg["train"], out is cfg["eval"]))
    return res


def s_global_and_argument_returned(wrap):
    def f(x, lst):
        if x.sum() > 0:
            y = x * 2
        else:
            y = x
        return G_LOG, lst, {"log": G_LOG, "y": y}
    g = wrap(f)
    res = []
    for x in (POS, NEG):
        lst = [x]
        log, l2, d = g(x, lst)
        res.append((log is G_LOG, l2 is lst, d["log"] is G_LOG, d["y"]))
    return res


def _same_list(v):
    return v


def s_chosen_through_helper(wrap):
    def f(x, a, b):
        r = a if x.sum() > 0 else b
        return _same_list(r), x * 2
    g = wrap(f)
    res = []
    for x in (POS, NEG):
        a, b = [x], [-x]
        out, y = g(x, a, b)
        res.append((out is a, out is b, y))
    return res


def s_chosen_then_chosen_again(wrap):
    def f(x, a, b):
        r = a if x.sum() > 0 else b
        if x[0] > 0:
            return r
        return a
    g = wrap(f)
    res = []
    for x in (T(1.0, 2.0), T(-1.0, -2.0), T(-1.0, 5.0), T(2.0, -5.0)):
        a, b = [1], [2]
        out = g(x, a, b)
        res.append((out is a, out is b))
    return res


def s_chosen_ordered_dicts(wrap):
    def f(x, d1, d2):
        d = d1 if x.sum() > 0 else d2
        return d
    g = wrap(f)
    res = []
    for x in (POS, NEG):
        d1 = collections.OrderedDict(k=x)
        d2 = collections.OrderedDict(k=-x)
        out = g(x, d1, d2)
        res.append((out is d1, out is d2, type(out).__name__))
    return res


def s_chosen_from_tuple_argument(wrap):
    def f(x, pair):
        return pair[0] if x.sum() > 0 else pair[1]
    g = wrap(f)
    res = []
    for x in (POS, NEG):
        pair = ([x], [x + 1])
        out = g(x, pair)
        res.append((out is pair[0], out is pair[1]))
    return res


def s_chosen_keyword_arguments(wrap):
    def f(x, *, first, second):
        if x.sum() > 0:
            chosen = first
        else:
            chosen = second
        return {"chosen": chosen, "y": x * 2}
    g = wrap(f)
    res = []
    for x in (NEG, POS):
        a, b = [x], [x * 3]
        out = g(x, first=a, second=b)
        res.append((out["chosen"] is a, out["chosen"] is b, out["y"]))
    return res


def s_chosen_same_list_twice_then_two(wrap):
    def f(x, a, b):
        return a if x.sum() > 0 else b
    g = wrap(f)
    shared = [1]
    r = [g(NEG, shared, shared) is shared]
    a, b = [1], [2]
    out = g(NEG, a, b)
    r.append((out is a, out is b))
    out = g(POS, a, b)
    r.append((out is a, out is b))
    return r


def s_argument_or_its_copy(wrap):
    def f(x, lst):
        r = lst if x.sum() > 0 else lst[:]
        return r
    g = wrap(f)
    res = []
    for x in (POS, NEG, POS):
        lst = [x, 1]
        out = g(x, lst)
        res.append((out is lst, out))
    return res


def s_argument_or_empty(wrap):
    def f(x, lst):
        r = lst if x.sum() > 0 else []
        return r, x
    g = wrap(f)
    res = []
    for x in (POS, NEG, POS):
        lst = [x * 2]
        out, _ = g(x, lst)
        res.append((out is lst, out))
    return res


def s_argument_dict_or_new_keys(wrap):
    def f(x, d):
        r = d if x.sum() > 0 else {"other": x}
        return r
    g = wrap(f)
    res = []
    for x in (POS, NEG):
        d = {"k": x}
        out = g(x, d)
        res.append((out is d, out))
    return res


def s_chosen_inner_of_argument_list(wrap):
    def f(x, rows):
        i = 0
        r = rows[i] if x.sum() > 0 else rows[i + 1]
        return rows, r
    g = wrap(f)
    res = []
    for x in (POS, NEG):
        rows = [[x], [x * 2]]
        out, r = g(x, rows)
        res.append((out is rows, r is rows[0], r is rows[1]))
    return res


def s_early_return_in_while(wrap):
    def f(x, a, b):
        while x.sum() < 10:
            if x[0] > 3:
                return a
            x = x * 2
        return b
    g = wrap(f)
    res = []
    for x in (T(1.0, 0.5), T(0.1, 4.0), T(20.0, 0.0)):
        a, b = [1], [2]
        out = g(x, a, b)
        res.append((out is a, out is b))
    return res


def s_range_loop_break_chooses(wrap):
    def f(x, a, b):
        r = b
        for i in range(3):
            if x[i] > 0:
                r = a
                break
        return r
    g = wrap(f)
    res = []
    for x in (T(-1.0, 1.0, -1.0), T(-1.0, -1.0, -1.0)):
        a, b = [1], [2]
        out = g(x, a, b)
        res.append((out is a, out is b))
    return res


def s_chosen_stored_in_local_dict(wrap):
    def f(x, a, b):
        d = {"n": 1}
        d["k"] = a if x.sum() > 0 else b
        return d
    g = wrap(f)
    res = []
    for x in (POS, NEG):
        a, b = [x], [x]
        d = g(x, a, b)
        res.append((d["k"] is a, d["k"] is b, d["n"]))
    return res


def s_chosen_appended_to_local_list(wrap):
    def f(x, a, b):
        out = []
        out.append(a if x.sum() > 0 else b)
        out.append(x)
        return out
    g = wrap(f)
    res = []
    for x in (NEG, POS):
        a, b = [1], [2]
        out = g(x, a, b)
        res.append((out[0] is a, out[0] is b))
    return res


def s_chosen_then_caller_changes_inner(wrap):
    def f(x, a, b):
        if x.sum() > 0:
            r = a
        else:
            r = b
        return r
    g = wrap(f)
    res = []
    for x in (POS, NEG):
        a, b = [[1]], [[2]]
        g(x, a, b)[0].append(3)
        res.append((a, b))
    return res


def s_chosen_in_holder_object(wrap):
    def f(x, a, b):
        return Holder(a if x.sum() > 0 else b)
    g = wrap(f)
    res = []
    for x in (POS, NEG):
        a, b = [1], [2]
        h = g(x, a, b)
        res.append((h.items is a, h.items is b))
    return res


def s_early_return_in_tensor_for(wrap):
    def f(x, a, b):
        for v in x:
            if v > 3:
                return a
        return b
    g = wrap(f)
    res = []
    for x in (T(1.0, 5.0), T(1.0, 2.0)):
        a, b = [1], [2]
        out = g(x, a, b)
        res.append((out is a, out is b))
    return res


def s_loop_keeps_chosen_local(wrap):
    def f(x, a, b):
        keep = {"r": b}
        while x.sum() < 10:
            keep["r"] = a if x[0] > 2 else b
            x = x * 2
        return keep, x
    g = wrap(f)
    res = []
    for x in (T(1.0, 1.0), T(3.0, 0.0), T(20.0, 0.0)):
        a, b = [1], [2]
        keep, y = g(x, a, b)
        res.append((keep["r"] is a, keep["r"] is b, y))
    return res


def s_chosen_local_returned_beside_it(wrap):
    def f(x, b):
        loc = [x * 2]
        r = loc if x.sum() > 0 else b
        return r, loc, (loc, r)
    g = wrap(f)
    res = []
    for x in (POS, NEG):
        b = [x]
        r, loc, pair = g(x, b)
        res.append((r is loc, r is b, pair[0] is loc, pair[1] is r, loc))
    return res


def s_chosen_local_changed_after(wrap):
    def f(x, b):
        loc = [x]
        r = loc if x.sum() > 0 else b
        loc.append(x * 3)
        return r
    g = wrap(f)
    res = []
    for x in (POS, NEG):
        b = [x]
        out = g(x, b)
        res.append((out is b, len(out)))
    return res


def s_chosen_copy_changed_after(wrap):
    def f(x, a):
        r = a if x.sum() > 0 else [x]
        r.append(x * 2)
        return len(r), x
    g = wrap(f)
    res = []
    for x in (POS, NEG):
        a = [x]
        n, _ = g(x, a)
        res.append((n, len(a)))
    return res


SCENARIOS = {name[2:]: fn for name, fn in list(globals().items()) if name.startswith("s_")}
XFAIL: dict = {}


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=XFAIL[n])) if n in XFAIL else n
    for n in sorted(SCENARIOS)])
def test_adversarial4(name):
    differential(SCENARIOS[name])
