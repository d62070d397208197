"""Neighbours of the second adversarial round's findings (test_fidelity_adversarial2), each
against eager in both modes on two inputs (the branch taken, then not): writes to the
caller's lists and dicts in tensor regions, exceptions leaving a tensor branch caught by
the code, lists a branch result shares with a name the code changes later, a module's own
hooks, function attributes read in the body, lru_cache'd helpers in branches."""
import functools
import warnings

import pytest
import torch
from torch import nn

from transpiler import ConversionError, FallbackWarning, to_graph

from e2e_helpers import _clone, assert_same
from fidelity_checks import converts, falls_back

T = torch.tensor
POS, NEG = (T([1.0, 2.0]),), (T([-3.0, 2.0]),)     # x[0] and x.sum(): > 0, < 0


# --- 1. the caller's list or dict changed in a tensor region: falls back -------------------

def dict_item_set(x, d):
    if x[0] > 0:
        d["k"] = x * 2
    return x + 1


def dict_pop_both_paths(x, d):
    if x[0] > 0:
        v = d.pop("a")
    else:
        v = d.pop("a") * 2
    return v + x


def dict_clear_in_else(x, d):
    if x[0] > 0:
        y = x * 2
    else:
        d.clear()
        y = x
    return y


def list_item_augmented(x, lst):
    if x[0] > 0:
        lst[0] += x
    return x


def list_insert_in_while(x, lst):
    while x.abs().sum() < 10:
        x = x * 2
        lst.insert(0, 1)
    return x


def dict_counter_in_row_loop(x, stats):
    for v in x:
        if v > 0:
            stats["n"] = stats.get("n", 0) + 1
    return x * 2


def nested_list_in_dict_argument(x, d):
    if x[0] > 0:
        d["log"][0] = x
    return x


@pytest.mark.parametrize("fn,extra", [
    (dict_item_set, lambda: {"a": T([0.0])}),
    (dict_clear_in_else, lambda: {"a": 1}),
    (list_insert_in_while, lambda: [0]),
    (dict_counter_in_row_loop, lambda: {"n": 5}),
])
def test_a_callers_container_changed_in_a_region_falls_back(fn, extra):
    falls_back(fn, POS + (extra(),), NEG + (extra(),))


@pytest.mark.parametrize("fn,extra", [
    (dict_pop_both_paths, lambda v: {"a": T([v])}),
    (nested_list_in_dict_argument, lambda v: {"log": [T([v, 0.0])]}),
])
def test_a_callers_container_changed_the_same_way_on_both_paths_converts(fn, extra):
    # the caller's dict goes through the region in place (argument_containers): a pop on
    # both paths, or an item of a list it holds set on one path, is written back as eager
    converts(fn, POS + (extra(3.0),), NEG + (extra(3.0),), POS + (extra(7.0),))


def test_a_callers_list_item_updated_in_place_in_a_branch_converts():
    # lst[0] += x updates the tensor in place: the list itself is left as it was on both
    # paths, so the cond hands back the caller's list and the in-place write is replayed
    converts(list_item_augmented, POS + ([T([0.0, 0.0])],), NEG + ([T([0.0, 0.0])],),
             POS + ([T([5.0, 1.0])],))


def helper_appends(x, log):
    if x[0] > 0:
        log.append(x)
    return x


def test_a_callers_list_read_only_in_a_region_still_converts():
    def f(x, lst):
        if x[0] > 0:
            y = x * lst[0]
        else:
            y = x - lst[1]
        return y
    converts(f, POS + ([T(2.0), T(3.0)],), NEG + ([T(4.0), T(5.0)],))


def test_a_local_list_changed_in_a_region_still_converts():
    def f(x):
        lst = [x]
        if x[0] > 0:
            lst[0] = x * 2
        return lst
    converts(f, POS, NEG)


def test_a_callers_list_given_to_a_converted_helper_falls_back():
    def f(x, log):
        return helper_appends(x, log) + 1
    falls_back(f, POS + ([],), NEG + ([T([0.0])],))


# --- 2. an exception leaving a tensor branch, caught by the code: falls back ---------------

class Swallow:
    def __enter__(self):
        return self

    def __exit__(self, typ, val, tb):
        return typ is not None and issubclass(typ, ArithmeticError)


def raise_in_with(x):
    y = x + 1
    with Swallow():
        if x.sum() < 0:
            raise ZeroDivisionError("neg")
        y = y * 10
    return y


def raise_in_while_in_with(x):
    with Swallow():
        while x.abs().sum() < 20:
            x = x * 2
            if x.sum() > 9:
                raise OverflowError("big")
    return x


def _raises_in_branch(x):
    if x.sum() < 0:
        raise ValueError("neg")
    return x * 3


def raise_in_helper_caught(x):
    try:
        y = _raises_in_branch(x)
    except ValueError:
        y = x
    return y


@pytest.mark.parametrize("fn", [raise_in_with, raise_in_while_in_with])
def test_an_exception_of_a_tensor_branch_caught_falls_back(fn):
    falls_back(fn, POS, NEG)


def test_a_staged_raise_caught_by_a_try_replays_the_raising_calls():
    """The raise is a staged check; a call whose check raises runs eagerly so the handler
    catches it (runtime/try_replays.py): a warning on that call only, eager's values."""
    default, strict = to_graph(raise_in_helper_caught), to_graph(raise_in_helper_caught,
                                                                  strict=True)
    for args, raises in ((POS, False), (NEG, True), (POS, False)):
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            got = default(*_clone(args))
        warned = [w for w in rec if issubclass(w.category, FallbackWarning)]
        assert bool(warned) == raises, [str(w.message) for w in warned]
        assert_same(got, raise_in_helper_caught(*_clone(args)))
        if raises:
            with pytest.raises(ConversionError):
                strict(*_clone(args))
        else:
            assert_same(strict(*_clone(args)), raise_in_helper_caught(*_clone(args)))


def test_an_exception_of_a_tensor_branch_not_caught_is_a_check_the_graph_makes():
    # (h43: a ``raise`` under a tensor ``if`` is staged, as ``assert`` is; it fell back)
    g = to_graph(_raises_in_branch, strict=True)
    assert_same(g(*POS), _raises_in_branch(*POS))
    with pytest.raises(ValueError) as info:
        g(*NEG)
    assert str(info.value) == "neg"
    assert_same(g(*POS), _raises_in_branch(*POS))


def test_a_with_whose_exit_swallows_nothing_raised_still_converts():
    def f(x):
        y = x + 1
        with Swallow():
            if x.sum() < 0:
                y = y - 5
            y = y * 10
        return y
    converts(f, POS, NEG)


# --- 3. a list a branch result shares with a name changed later ----------------------------

def finally_after_early_return(x):
    cleanup = [0]
    try:
        if x.sum() > 0:
            return x * 2, cleanup
        x = x - 1
    finally:
        cleanup[0] += 1
    return x, cleanup


def append_after_branch_result(x):
    log = []
    if x.sum() > 0:
        out = (x, log)
    else:
        out = (x * 2, log)
    log.append(1)
    return out


def dict_changed_after_early_return(x):
    info = {"n": 0}
    try:
        if x.sum() > 0:
            return x, info
    finally:
        info["n"] = 1
    return x * 3, info


@pytest.mark.parametrize("fn", [finally_after_early_return, append_after_branch_result,
                                dict_changed_after_early_return])
def test_a_branch_result_list_changed_afterwards_is_the_original(fn):
    # both paths hand back the very list/dict (an early return's and the last one's), so
    # the cond's result is that object and the later change shows, as in eager (these fell
    # back while the cond handed back a copy)
    converts(fn, POS, NEG)


def test_a_branch_result_list_left_alone_still_converts():
    def f(x):
        log = [1]
        if x.sum() > 0:
            return x * 2, log
        return x, log
    converts(f, POS, NEG)


# --- 6. hooks of the converted module itself -----------------------------------------------

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2, 2)

    def forward(self, x):
        if x.sum() > 0:
            return self.lin(x)
        return x - 1


def _hooked(kind):
    torch.manual_seed(0)
    m = Net()
    if kind == "pre":
        m.register_forward_pre_hook(lambda mod, inp: (inp[0] * 2,))
    elif kind == "post":
        m.register_forward_hook(lambda mod, inp, out: out + 1)
    elif kind == "pre_kwargs":
        m.register_forward_pre_hook(lambda mod, args, kwargs: ((args[0] * 3,), kwargs),
                                    with_kwargs=True)
    return m


@pytest.mark.parametrize("kind", ["pre", "post", "pre_kwargs"])
@pytest.mark.parametrize("strict", [False, True])
def test_a_modules_own_hooks_run_or_fall_back(kind, strict):
    # The module's own forward (pre-)hooks are traced around its forward (module_hooks.
    # hooked_call): both modes convert and equal eager, hook effects included.
    m = _hooked(kind)
    g = to_graph(m, strict=strict)
    for x in (T([[1.0, 2.0]]), T([[-3.0, 1.0]])):
        exp = m(x)
        with warnings.catch_warnings():
            warnings.simplefilter("error", FallbackWarning)
            assert_same(g(x), exp)


def test_a_hook_added_after_conversion_is_seen_and_removing_it_converts_again():
    torch.manual_seed(0)
    m = Net()
    g = to_graph(m)
    x = T([[1.0, 2.0]])
    assert_same(g(x), m(x))
    handle = m.register_forward_pre_hook(lambda mod, inp: (inp[0] * 2,))
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        assert_same(g(x), m(x))     # the new hook is seen (a retrace around it), not stale
    handle.remove()
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        assert_same(g(x), m(x))


def test_a_global_forward_hook_is_run_or_falls_back():
    torch.manual_seed(0)
    m = Net()
    g = to_graph(m)
    x = T([[1.0, 2.0]])
    handle = nn.modules.module.register_module_forward_hook(lambda mod, inp, out: out * 0)
    try:
        exp = m(x)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FallbackWarning)
            assert_same(g(x), exp)
    finally:
        handle.remove()


# --- 5. a function's attributes read in its body --------------------------------------------

def _scaled(x):
    if x.sum() > 0:
        return x * _scaled.factor
    return x - _scaled.offset


_scaled.factor, _scaled.offset = 2.0, 1.0


@pytest.mark.parametrize("strict", [False, True])
def test_a_function_attribute_changed_between_calls_is_seen(strict):
    _scaled.factor, _scaled.offset = 2.0, 1.0
    g = to_graph(_scaled, strict=strict)
    try:
        for factor, offset in ((2.0, 1.0), (-3.0, 1.0), (-3.0, 5.0)):
            _scaled.factor, _scaled.offset = factor, offset
            for args in (POS, NEG):
                assert_same(g(*_clone(args)), _scaled(*_clone(args)))
    finally:
        _scaled.factor, _scaled.offset = 2.0, 1.0


def test_a_helpers_attribute_changed_between_calls_is_seen():
    def helper(x):
        return x * helper.k
    helper.k = 2.0

    def f(x):
        if x.sum() > 0:
            return helper(x)
        return x
    g = to_graph(f, strict=True)
    assert_same(g(*POS), f(*POS))
    helper.k = 7.0
    assert_same(g(*POS), f(*POS))


# --- 4. lru_cache'd helpers in tensor regions -----------------------------------------------

def test_an_lru_cached_helper_in_a_branch_falls_back():
    def f(x):
        @functools.lru_cache(maxsize=None)
        def table(n):
            return torch.arange(n, dtype=torch.float32)
        if x.sum() > 0:
            y = x + table(3).sum()
        else:
            y = x - table(2).sum()
        return y, table.cache_info().currsize
    falls_back(f, POS, NEG, match="__call__")


def test_an_lru_cached_helper_in_a_loop_falls_back():
    def f(x):
        @functools.cache
        def step(n):
            return n + 1
        n = 0
        while x.sum() < 10:
            x = x * 2
            n = step(3)
        return x, step.cache_info().currsize
    falls_back(f, POS, (T([20.0, 1.0]),))


def test_an_lru_cached_helper_outside_regions_still_converts():
    @functools.lru_cache(maxsize=None)
    def table(n):
        return float(n) * 2

    def f(x):
        k = table(3)
        if x.sum() > 0:
            return x * k
        return x
    converts(f, POS, NEG)


# --- 7. ``is`` between tensors whose identity depends on the path ---------------------------

def identity_after_if(x):
    y = x
    if x.sum() > 0:
        y = x * 2
    return y, y is x


def identity_not_after_if_in_else(x):
    y = x
    if x.sum() > 0:
        z = x + 1
    else:
        y = x - 1
        z = x
    return z, y is not x


def identity_through_a_list(x):
    keep = [x]
    if x.sum() > 0:
        x = x * 3
    return x, keep[0] is x


@pytest.mark.parametrize("fn", [identity_after_if, identity_not_after_if_in_else,
                                identity_through_a_list])
def test_identity_that_depends_on_the_path_falls_back(fn):
    falls_back(fn, POS, NEG)


def test_is_none_with_a_tensor_kept_on_one_path_still_converts():
    def f(x, mask=None):
        if x.sum() > 0:
            x = x * 2
        if mask is None:
            return x + 1
        return x * mask
    converts(f, POS, NEG)


def test_identity_the_same_on_both_paths_still_converts():
    def f(x):
        y = x
        if x.sum() > 0:
            z = x * 2
        else:
            z = x - 1
        return z, y is x
    converts(f, POS, NEG)


# --- 8. tensor unpacking along a static first dimension; a 0-d tensor fill value ------------

def unpack_rows(edge_index):
    row, col = edge_index
    return edge_index[:, row != col], row * 10 + col


def unpack_rows_in_branch(x):
    a, b, c = x
    if x.sum() > 0:
        a = a * b
    return a + c


def list_of_rows(x):
    return [r.sum() for r in list(x)], tuple(x)[0]


def full_of_fill_tensors(x):
    n = x.shape[-1]
    lo = torch.full((n, n), torch.tensor(torch.finfo(torch.float32).min))
    ints = torch.full((2,), torch.tensor(7))
    flags = torch.full((n,), torch.tensor(True))
    peak = torch.full((1, n), x.max())
    return lo + x, ints, flags, peak


@pytest.mark.parametrize("fn,inputs", [
    (unpack_rows, [(T([[0, 1, 1, 2], [1, 0, 1, 2]]),), (T([[0, 3, 2], [3, 0, 1]]),)]),
    (unpack_rows_in_branch, [(T([1.0, 2.0, 3.0]),), (T([-4.0, 2.0, -3.0]),)]),
    (list_of_rows, [(T([[1.0, 2.0], [3.0, 4.0]]),), (T([[-1.0, 0.0], [5.0, 6.0]]),)]),
    (full_of_fill_tensors, [(T([[1.0, 2.0], [3.0, 4.0]]),), (T([[-1.0, -5.0], [0.5, 6.0]]),)]),
])
def test_static_rows_and_tensor_fill_values_convert(fn, inputs):
    converts(fn, *inputs)


def test_unpacking_the_wrong_number_of_rows_raises_as_eager():
    def f(x):
        a, b = x
        return a + b
    for strict in (False, True):
        with pytest.raises(ValueError), warnings.catch_warnings():
            warnings.simplefilter("ignore", FallbackWarning)    # (default mode: eager's)
            to_graph(f, strict=strict)(T([1.0, 2.0, 3.0]))


def test_unpacking_a_dynamic_first_dimension_is_refused():
    def f(x):
        n = int((x > 0).sum())
        a, b = x[:n]
        return a + b
    falls_back(f, (T([1.0, 2.0, -1.0]),))


# --- 9. refusal messages in user terms ------------------------------------------------------

def percent_text_in_row_loop(x):
    s = ""
    for v in x:
        s = s + "%d," % int(v)
    return s


def str_of_int_in_while(x):
    s = ""
    while x.sum() < 10:
        x = x * 2
        s = str(int(x.sum()))
    return x, s


def arange_to_a_tensor_value(t):
    return torch.arange(t.max() + 1, out=t.new())


@pytest.mark.parametrize("fn,arg,words", [
    (percent_text_in_row_loop, T([1, 2]), "text made from a tensor's value"),
    (str_of_int_in_while, T([1.0, 2.0]), "text made from a tensor's value"),
    (arange_to_a_tensor_value, T([1, 3]), "depends on a tensor's value"),
])
def test_refusals_name_the_line_and_the_reason_in_user_terms(fn, arg, words):
    with pytest.raises(ConversionError) as info:
        to_graph(fn, strict=True)(arg.clone())
    text = str(info.value)
    assert words in text and "__tograph" not in text and "meta" not in text, text
    assert f"{__file__}:" in text, text
    falls_back(fn, (arg,), match=words)


# ------------------------------------------- a list that is another name's on one path only
def _alias_on_one_path_then_appended(x):
    a = [x]
    b = a if x.sum() > 0 else list(a)
    b.append(x * 2)
    return len(a), len(b)


def _alias_on_one_path_dict_written(x):
    d = {"x": x}
    e = d if x.sum() > 0 else dict(d)
    e["y"] = x + 1
    return sorted(d), sorted(e)


def _alias_on_one_path_read_only(x):
    a = [x, x * 3]
    b = a if x.sum() > 0 else list(a)
    return b[0] + b[1]


def test_alias_on_one_path_changed_falls_back():
    """``b`` is ``a`` itself on one path in eager, a new container in the graph: changing
    it after the condition would grow ``a`` in eager only."""
    falls_back(_alias_on_one_path_then_appended, (torch.ones(2),), (-torch.ones(2),))
    falls_back(_alias_on_one_path_dict_written, (torch.ones(2),), (-torch.ones(2),))


def test_alias_on_one_path_left_alone_converts():
    converts(_alias_on_one_path_read_only, (torch.ones(2),), (-torch.ones(2),))
