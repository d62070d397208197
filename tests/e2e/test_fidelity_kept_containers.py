"""A list or dict that both paths of a tensor ``if`` leave in place is that very object.

``return x * 2, lst`` on one path and ``return x - 1, lst`` on the other: eager's result
holds ``lst`` itself whichever path runs, so the converted result must too (``out[1] is
lst``), and a later change through one name shows through the other. The ``cond`` rebuilds
its result containers, so where both paths hand back the same object (or a branch's
unchanged copy of an operand container) the original is put back; where the paths hand
back different containers, or a branch changed its copy, the result stays a new container
and a name reaching the old one makes the call fall back (never silently wrong).
"""
import warnings

import pytest
import torch

from transpiler import FallbackWarning, to_graph
from e2e_helpers import assert_same


def early_returns_of_an_argument(x, pair):
    lst = pair[1]
    if x.sum() > 0:
        return x * 2, lst
    return x - 1, lst


def early_returns_of_a_nested_dict(x, opts):
    inner = opts["inner"]
    if x.sum() > 0:
        return x * inner["k"], inner
    return x, inner


def both_paths_assign_the_same_list(x, acc):
    if x.mean() > 0:
        out = acc
        y = x + 1
    else:
        out = acc
        y = x - 1
    out.append(y * 2)              # after the if: acc sees it in eager
    return y, out


def same_local_list_then_grown(x):
    log = [1, 2]
    view = log
    if x.sum() > 0:
        r = log
    else:
        r = log
    r.append(3)
    return x, view, r is view


def branch_appends_then_returns(x, acc):
    out = acc
    if x.sum() > 0:
        out = acc
        out.append(x * 2)
    return x, out


def different_lists_per_path(x, acc):
    if x.sum() > 0:
        out = acc
    else:
        out = list(acc)
    out.append(0)
    return x, acc


CASES = [
    (early_returns_of_an_argument, lambda: ((torch.ones(1), [3, 4]),), True),
    (early_returns_of_a_nested_dict, lambda: ({"inner": {"k": 3.0}},), True),
    (both_paths_assign_the_same_list, lambda: ([torch.zeros(1)],), False),  # (argument grown)
    (same_local_list_then_grown, lambda: (), True),
    (branch_appends_then_returns, lambda: ([torch.zeros(2)],), False),
    (different_lists_per_path, lambda: ([1, 2],), False),
]


def _run(fn, make, strict, x):
    g = to_graph(fn, strict=strict)
    args, exp_args = make(), make()
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        got = g(x, *args)
    exp = fn(x, *exp_args)
    return got, exp, args, exp_args


@pytest.mark.parametrize("fn,make,converts", CASES, ids=[c[0].__name__ for c in CASES])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_matches_eager_with_identity(fn, make, converts, sign):
    x = sign * torch.ones(2)
    g = to_graph(fn)
    for _ in range(2):                              # the trace, then the cached graph
        args, exp_args = make(), make()
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            got = g(x, *args)
        exp = fn(x, *exp_args)
        fell_back = any(issubclass(w.category, FallbackWarning) for w in seen)
        assert fell_back or converts or g._entries, "expected a fallback or a graph"
        assert_same(got, exp)
        assert_same(args, exp_args)                 # the caller's containers changed alike
        # identity: what eager returns as the caller's container is the caller's here
        for r, e, a, ea in ((got, exp, args, exp_args),):
            flat_e = [id(v) for v in _walk(e)]
            flat_ea = {id(v): k for k, v in enumerate(_walk(ea))}
            flat_a = list(_walk(a))
            for v, ve in zip(_walk(r), _walk(e)):
                if id(ve) in flat_ea:
                    assert v is flat_a[flat_ea[id(ve)]], "a caller's container came back as a copy"
        del flat_e


@pytest.mark.parametrize("fn,make,converts", [c for c in CASES if c[2]],
                         ids=[c[0].__name__ for c in CASES if c[2]])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_strict_converts(fn, make, converts, sign):
    got, exp, args, exp_args = _run(fn, make, True, sign * torch.ones(2))
    assert_same(got, exp)
    assert_same(args, exp_args)


def _walk(v):
    yield v
    if type(v) in (list, tuple):
        for x in v:
            yield from _walk(x)
    elif type(v) is dict:
        for x in v.values():
            yield from _walk(x)
