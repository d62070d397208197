"""print/assert on every run, gradients, fallbacks, clear errors, to_code, retracing."""
import os
import re
import warnings

import pytest
import torch

from e2e_helpers import assert_same, check, op_counts
from transpiler import ConversionError, FallbackWarning, RetracingWarning, to_code, to_graph

T = torch.tensor
THIS = os.path.basename(__file__)
POS = T([1.0, 2.0, 3.0])
NEG = T([-1.0, -2.0, 0.5])


def _names_this_file_and_line(text):
    return re.search(re.escape(THIS) + r":\d+", text) is not None


# ---------------------------------------------------------------- print / assert
def prints_tensor(x):
    y = x * 2
    print("value:", y.sum())
    return y


def prints_in_branch(x):
    if x.sum() > 0:
        print("positive")
        y = x
    else:
        print("negative")
        y = -x
    return y


def prints_in_loop(n):
    i = T(0)
    while i < n:
        print("step", i)
        i = i + 1
    return i


def test_print_every_call(capsys):
    g = to_graph(prints_tensor, strict=True)
    g(POS)
    capsys.readouterr()
    for x, s in ((POS, "12"), (NEG, "-5"), (POS * 2, "24")):
        g(x)
        out = capsys.readouterr().out
        assert out.count("value:") == 1 and s in out, out


def test_print_in_branch_only_taken_path(capsys):
    g = to_graph(prints_in_branch, strict=True)
    g(POS)
    capsys.readouterr()
    g(NEG)
    assert capsys.readouterr().out.split() == ["negative"]
    g(POS)
    assert capsys.readouterr().out.split() == ["positive"]


def test_print_in_tensor_loop_each_iteration(capsys):
    g = to_graph(prints_in_loop, strict=True)
    g(T(1))
    capsys.readouterr()
    g(T(3))
    assert capsys.readouterr().out.count("step") == 3
    g(T(0))
    assert capsys.readouterr().out.count("step") == 0


def asserts_positive(x):
    assert x.min() > 0, "needs positive input"
    return x.log()


def asserts_in_loop(x):
    for row in x:
        assert row.sum() < 10
    return x * 2


def test_assert_fails_at_run_time():
    g = to_graph(asserts_positive, strict=True)
    assert_same(g(POS), POS.log())
    with pytest.raises(AssertionError) as info:
        g(NEG)
    assert "needs positive input" in str(info.value)
    assert_same(g(POS * 2), (POS * 2).log())


ASSERT_DROPPED = "BUG: assert inside a tensor loop/branch body never fires at run time " \
    "(node lost from the subgraph)"


def test_assert_in_tensor_loop():
    g = to_graph(asserts_in_loop, strict=True)
    ok = T([[1.0, 2.0], [3.0, 4.0]])
    assert_same(g(ok), ok * 2)
    with pytest.raises(AssertionError):
        g(T([[1.0, 2.0], [30.0, 4.0]]))


def asserts_in_branch(x):
    if x.sum() > 0:
        assert x.max() < 10, "too big"
    return x


def test_assert_in_tensor_branch():
    g = to_graph(asserts_in_branch, strict=True)
    assert_same(g(POS), POS)
    with pytest.raises(AssertionError, match="too big"):
        g(POS * 20)


def test_assert_python_value_checked_at_trace():
    def f(x, n):
        assert n > 0, "n must be positive"
        return x * n
    g = to_graph(f, strict=True)
    assert_same(g(POS, 2), POS * 2)
    with pytest.raises(AssertionError, match="n must be positive"):
        g(POS, -1)


# ---------------------------------------------------------------- gradients
def grad_branch(x):
    if x.sum() > 0:
        y = x * x
    else:
        y = torch.sin(x) * 3
    return y.sum()


def grad_while(x):
    i = 0
    while x.norm() < 10:
        x = x * 1.5 + 0.1
        i += 1
    return x.sum()


def grad_for_rows(w, m):
    s = torch.zeros(2)
    for row in m:
        if row.sum() > 0:
            s = s + row * w
        else:
            s = s - torch.exp(w) * row
    return s.sum()


def grad_break(x):
    acc = x
    for i in range(6):
        acc = acc * x
        if acc.abs().sum() > 20:
            break
    return acc.sum()


def grad_early_return(x):
    if x.max() > 2:
        return (x ** 3).sum()
    y = torch.tanh(x)
    return y.sum()


def grad_append_stack(x, n):
    out = []
    i = 0
    while i < n:
        out.append(x * (i + 1.0))
        i += 1
    return torch.stack(out).pow(2).sum()


GRAD_CASES = [
    (grad_branch, [(POS,), (NEG,)]),
    (grad_while, [(T([0.5, 1.0]),), (T([20.0, 1.0]),), (T([3.0, 3.0]),)]),
    (grad_for_rows, [(T([1.0, 2.0]), T([[1.0, 2.0], [-3.0, 1.0], [0.5, 0.5]])),
                     (T([0.1, -0.2]), T([[-1.0, -2.0], [3.0, 1.0], [-0.5, 0.5]]))]),
    (grad_break, [(T([1.0, 1.5]),), (T([0.5, 0.5]),), (T([3.0, 1.0]),)]),
    (grad_early_return, [(POS,), (NEG,)]),
    (grad_append_stack, [(T([1.0, 2.0]), T(3)), (T([1.0, 2.0]), T(1))]),
]


@pytest.mark.parametrize("fn,inputs", GRAD_CASES, ids=[c[0].__name__ for c in GRAD_CASES])
def test_gradients_match_eager(fn, inputs):
    g = to_graph(fn, strict=True)
    for args in inputs:
        ea = [a.clone().requires_grad_() if a.is_floating_point() else a for a in args]
        ga = [a.clone().requires_grad_() if a.is_floating_point() else a for a in args]
        exp, got = fn(*ea), g(*ga)
        assert_same(got, exp)
        we = [a for a in ea if a.requires_grad]
        wg = [a for a in ga if a.requires_grad]
        for a, b in zip(torch.autograd.grad(got, wg), torch.autograd.grad(exp, we)):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- fallbacks
def generator_user(x):
    def gen(v):
        for row in v:
            yield row * 2
    s = torch.zeros(2)
    for r in gen(x):
        if r.sum() > 0:
            s = s + r
    return s


def try_except_user(x):
    try:
        if x.sum() > 0:
            y = x * 2
        else:
            y = x
    except RuntimeError:
        y = x * 0
    return y


COUNTER = {"n": 0}
CALLS = 0


def global_in_tensor_loop(x):
    global CALLS
    for row in x:
        if row.sum() > 0:
            CALLS += 1
    return x * 2


def dict_global_in_tensor_loop(x):
    for row in x:
        if row.sum() > 0:
            COUNTER["n"] += 1
    return x + 1


def make_nonlocal_counter():
    count = 0

    def nonlocal_in_tensor_loop(x):
        nonlocal count
        for row in x:
            if row.sum() > 0:
                count += 1
        return x - 1

    def get():
        return count
    return nonlocal_in_tensor_loop, get


def mutates_callers_list(x, log):
    for row in x:
        if row.sum() > 0:
            log.append(1)
    return x * 3


_ns = {"torch": torch}
exec("def from_exec(x):\n    if x.sum() > 0:\n        return x * 2\n    return x\n", _ns)
from_exec = _ns["from_exec"]

M = T([[1.0, 2.0], [-3.0, 1.0], [0.5, 0.5]])
M2 = T([[-1.0, -2.0], [3.0, 1.0], [-0.5, 0.5]])


def _run_default(fn, *args):
    """Call a default-mode graph function; return (result, FallbackWarnings)."""
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        out = fn(*args)
    return out, [w for w in rec if issubclass(w.category, FallbackWarning)]


def _accept_fallback_or_graph(fn, inputs, side_effect=None, names_file=True):
    g = to_graph(fn)
    for i, args in enumerate(inputs):
        before = side_effect() if side_effect else None
        exp = fn(*args)
        eager_delta = side_effect() - before if side_effect else None
        before = side_effect() if side_effect else None
        got, fallbacks = _run_default(g, *args)
        assert_same(got, exp)
        if side_effect:
            assert side_effect() - before == eager_delta, "side effect not repeated as eager"
        if i == 0:
            assert len(fallbacks) <= 1
            if fallbacks and names_file:
                msg = str(fallbacks[0].message)
                assert _names_this_file_and_line(msg), msg
        else:
            assert not fallbacks, "FallbackWarning emitted again"
    return g


def test_fallback_generator():
    _accept_fallback_or_graph(generator_user, [(M,), (M2,)])


def test_fallback_try_except():
    _accept_fallback_or_graph(try_except_user, [(POS,), (NEG,)])


def test_fallback_global_counter():
    _accept_fallback_or_graph(global_in_tensor_loop, [(M,), (M2,), (M,)],
                              side_effect=lambda: CALLS)


def test_fallback_global_dict_counter():
    _accept_fallback_or_graph(dict_global_in_tensor_loop, [(M,), (M2,), (M,)],
                              side_effect=lambda: COUNTER["n"])


def test_fallback_nonlocal_counter():
    fn, get = make_nonlocal_counter()
    _accept_fallback_or_graph(fn, [(M,), (M2,), (M,)], side_effect=get)


def test_fallback_callers_list():
    log = []
    g = to_graph(mutates_callers_list)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        for x, n in ((M, 2), (M2, 1), (M, 2)):
            before = len(log)
            out = g(x, log)
            assert_same(out, x * 3)
            assert len(log) - before == n


def test_fallback_no_source():
    g = to_graph(from_exec)
    out, fallbacks = _run_default(g, POS)
    assert_same(out, POS * 2)
    assert len(fallbacks) <= 1
    out, fallbacks = _run_default(g, NEG)
    assert_same(out, NEG)


@pytest.mark.parametrize("fn", [generator_user,
                                from_exec],      # (counters convert: runtime/region_numbers.py)
                         ids=lambda f: f.__name__)
def test_strict_raises_conversion_error(fn):
    g = to_graph(fn, strict=True)
    with pytest.raises(ConversionError) as info:
        g(M if fn is not from_exec else POS)
    if fn is not from_exec:
        assert _names_this_file_and_line(str(info.value)), str(info.value)


def test_strict_converts_a_try_around_tensor_code():
    """(A call whose graph raised inside it would run eagerly: runtime/try_replays.py;
    strict mode would raise ConversionError on that call only.)"""
    g = to_graph(try_except_user, strict=True)
    for x in (POS, NEG, POS):
        assert_same(g(x), try_except_user(x))


def test_strict_nonlocal_and_callers_list():
    fn, get = make_nonlocal_counter()       # (a number: carried, runtime/region_numbers.py)
    g = to_graph(fn, strict=True)
    for x, count in ((M, 2), (M2, 3), (M, 5)):
        assert_same(g(x), x - 1)
        assert type(get()) is int and get() == count
    with pytest.raises(ConversionError):
        to_graph(mutates_callers_list, strict=True)(M, [])


def test_strict_global_counter_in_tensor_loop():
    global CALLS
    g = to_graph(global_in_tensor_loop, strict=True)
    CALLS = 0
    for x, calls in ((M, 2), (M2, 3), (M, 5)):
        assert_same(g(x), x * 2)
        assert type(CALLS) is int and CALLS == calls


def test_global_side_effect_not_baked_in():
    global CALLS
    g = to_graph(global_in_tensor_loop)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        CALLS = 0
        g(M)
        g(M)
        g(M2)
    assert CALLS == 2 + 2 + 1


# ---------------------------------------------------------------- clear errors
def one_branch_var(x):
    if x.sum() > 0:
        only_here = x * 2
    return only_here


def dtype_mismatch(x):
    if x.sum() > 0:
        r = x.int()
    else:
        r = x.float()
    return r


def loop_var_not_provable(x, n):
    for i in range(n):
        inner_only = x * i
    return inner_only


@pytest.mark.parametrize("fn,args,word", [
    (one_branch_var, (POS,), "only_here"),
    (dtype_mismatch, (POS,), "r"),
    (loop_var_not_provable, (POS, T(3)), "inner_only"),
], ids=["one_branch", "dtype_mismatch", "loop_not_provable"])
def test_clear_error_names_variable(fn, args, word):
    from runtime.errors import BranchMismatchError
    with pytest.raises((ConversionError, BranchMismatchError)) as info:
        to_graph(fn, strict=True)(*args)
    text = str(info.value)
    assert re.search(r"'%s'|\b%s\b" % (word, word), text), text
    assert _names_this_file_and_line(text), text
    if fn is dtype_mismatch:
        assert "int32" in text or "dtype" in text, text


def test_one_branch_default_mode_falls_back_or_raises_clearly():
    g = to_graph(one_branch_var)
    out, fallbacks = _run_default(g, POS)
    assert_same(out, POS * 2)
    assert len(fallbacks) == 1 and "only_here" in str(fallbacks[0].message)


def grows_then_mul(x, n):
    y = x
    i = 0
    while i < n:
        y = torch.cat([y, x])
        i += 1
    return y * x


def test_runtime_error_names_user_line():
    g = to_graph(grows_then_mul, strict=True)
    assert_same(g(POS, T(0)), grows_then_mul(POS, T(0)))
    with pytest.raises(Exception) as info:
        g(POS, T(1))
    with pytest.raises(type(info.value)) as eager:
        grows_then_mul(POS, T(1))
    assert str(info.value) == str(eager.value)          # eager's text; the line in a note
    text = "".join(info.value.__notes__)
    line = grows_then_mul.__code__.co_firstlineno + 6
    assert f"{THIS}:{line}" in text, text


def data_dependent_shape(x, idx):
    sel = x[idx > 0]
    return sel.reshape(2, 2)


def branch_shape_then_static(x):
    if x.sum() > 0:
        y = x[:2]
    else:
        y = x
    return y + torch.ones(3)


DYN_STATIC = "BUG: a dynamic dim (mask select / branch shapes differ) combined with a static " \
    "size fails at trace time with RuntimeError; even default mode does not fall back"


def test_mask_select_then_reshape_default_mode():
    g = to_graph(data_dependent_shape)
    ok = (torch.arange(8.0), T([1, 1, 1, 1, 0, 0, 0, 0]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        assert_same(g(*ok), data_dependent_shape(*ok))


def test_branch_shapes_then_static_op_default_mode():
    g = to_graph(branch_shape_then_static)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        assert_same(g(NEG), branch_shape_then_static(NEG))


# ---------------------------------------------------------------- to_code, retracing
def code_sample(x, n):
    while x.sum() < n:
        x = x * 2
    if x.max() > 10:
        x = x - 1
    return x


def test_to_code_readable():
    src = to_code(code_sample)
    assert "tg.if_stmt" in src and "tg.while_stmt" in src
    assert "ag__" not in src
    assert "def code_sample" in src
    compile(src, "<to_code>", "exec")


def test_to_code_module_and_lambda():
    from test_e2e_functions import Gated
    assert "tg.if_stmt" in to_code(Gated())
    assert "tg." in to_code(lambda x: x if x.sum() > 0 else -x)


def retrace_me(x, n):
    for i in range(n):
        x = x + i
    return x


def test_retrace_on_new_python_value():
    g = to_graph(retrace_me, strict=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RetracingWarning)
        assert_same(g(POS, 2), retrace_me(POS, 2))
        assert_same(g(POS, 3), retrace_me(POS, 3))
        assert_same(g(POS, 2), retrace_me(POS, 2))
    assert op_counts(g.graph(POS, 2))["add"] == 2
    assert op_counts(g.graph(POS, 3))["add"] == 3


def test_many_retraces_warn():
    g = to_graph(retrace_me, strict=True)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        for n in range(8):
            assert_same(g(POS, n), retrace_me(POS, n))
    msgs = [str(w.message) for w in rec if issubclass(w.category, RetracingWarning)]
    # once per function and reason (tests/serving/test_retracing.py): at the 4th retrace
    # for a Python value, naming it, with the advice for numbers
    assert len(msgs) == 1 and "n: 3 -> 4" in msgs[0] and "as a tensor" in msgs[0], msgs



def test_same_signature_no_retrace():
    g = to_graph(retrace_me, strict=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(10):
            g(torch.randn(3), 2)


def test_retrace_on_shape_dtype_change():
    g = check(retrace_me, (POS, 1), (torch.ones(5), 1), (T([1, 2]), 1), (T([1.0, 2.0], dtype=torch.float64), 1))
    assert g.graph(POS, 1) is not g.graph(torch.ones(5), 1)
