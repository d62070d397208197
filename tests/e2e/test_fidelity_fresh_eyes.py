"""Fresh-eyes round of Python fidelity: ordinary programs (helpers with mutable defaults,
counters made by factories, function attributes, Python-number powers, failing asserts,
try/finally, zip(strict=True)), each compared with eager: results, what the call leaves in
Python state over several calls, exceptions (type and text), divmod of carried numbers.
Open findings are strict expected failures naming the case."""
import warnings

import pytest
import torch

from e2e_helpers import _clone, assert_same
from fidelity_checks import converts
from transpiler import ConversionError, FallbackWarning, to_graph


def V(*xs):
    return torch.tensor(xs, dtype=torch.float32)


POS, NEG = V(1.0, 2.0), V(-1.0, -3.0)


def same_over_calls(make, inputs, fallback):
    """``make()`` gives a fresh program (fresh helper state): one runs eagerly, one
    converted, on the same sequence of calls; every result equals eager's. ``fallback``:
    whether the first call warns (then the one after it traces again)."""
    eager, converted = make(), to_graph(make())
    for i, x in enumerate(inputs):
        exp = eager(x.clone())
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            got = converted(x.clone())
        warned = [str(m.message) for m in w if issubclass(m.category, FallbackWarning)]
        if i == 0:
            assert bool(warned) == fallback, warned
        assert_same(got, exp, f"call {i}")


def strict_refuses(make, x, match):
    with pytest.raises(ConversionError, match=match):
        to_graph(make(), strict=True)(x)


# ---------------------------------------------------------------- state a helper keeps
def make_default_list():
    def helper(x, seen=[]):         # noqa: B006 - the point: a default shared by all calls
        seen.append(1)
        return x * len(seen)

    def f(x):
        return helper(x) + 1
    return f


def make_kwonly_default():
    def helper(x, *, sizes=[]):     # noqa: B006
        sizes.append(x.shape[0])
        return x * sum(sizes)

    def f(x):
        return helper(x)
    return f


def make_factory_counter():
    def counter():
        calls = []

        def count(t):
            calls.append(1)
            return t * len(calls)
        return count
    step = counter()

    def f(x):
        return step(x) - 1
    return f


def make_own_attribute():
    def f(x):
        f.calls = getattr(f, "calls", 0) + 1
        return x * f.calls
    return f


def make_helper_attribute():
    def helper(x):
        helper.calls = getattr(helper, "calls", 0) + 1
        return x + helper.calls

    def f(x):
        return helper(x) * 2
    return f


def make_object_in_closure():
    class Stats:
        def __init__(self):
            self.seen = 0
    stats = Stats()

    def record(t):
        stats.seen += 1
        return t * stats.seen

    def f(x):
        return record(x)
    return f


@pytest.mark.parametrize("make,match", [
    (make_default_list, "mutable default of parameter 'seen'"),
    (make_kwonly_default, "mutable default of parameter 'sizes'"),
    (make_own_attribute, "attribute of function 'f'"),
    (make_helper_attribute, "attribute of"),
], ids=lambda v: getattr(v, "__name__", None))
def test_state_kept_across_calls_falls_back(make, match):
    """A graph would not change it again: the trace's value would stay (it did: x * 1 on
    every call where eager gives x * 1, x * 2, x * 3)."""
    same_over_calls(make, [POS, NEG, POS * 3, V(4.0, 5.0, 6.0)], fallback=True)
    strict_refuses(make, POS, match)


def test_a_counter_on_an_object_in_a_closure_converts():
    """``stats.seen += 1`` on a plain object a helper's closure holds is carried by the
    graph and written back on every run (``runtime/region_numbers.py``): eager's x * 1,
    x * 2, x * 3, ... with no fallback (it fell back before, which was also exact)."""
    same_over_calls(make_object_in_closure, [POS, NEG, POS * 3, V(4.0, 5.0, 6.0)],
                    fallback=False)


def test_a_list_in_a_factorys_closure_converts():
    """``calls.append(1); t * len(calls)`` on a list a factory's closure holds is carried
    like a closure's numbers (``runtime/carried_numbers.py``, h93): eager's x * 1, x * 2,
    x * 3, ... with no fallback."""
    same_over_calls(make_factory_counter, [POS, NEG, POS * 3, V(4.0, 5.0, 6.0)],
                    fallback=False)


def test_fallback_names_the_helpers_line():
    f = make_default_list()
    with pytest.warns(FallbackWarning) as w:
        to_graph(f)(POS)
    helper = f.__closure__[0].cell_contents
    line = helper.__code__.co_firstlineno + 1   # seen.append(1)
    assert f"{__file__}:{line}:" in str(w[0].message), str(w[0].message)


def test_state_put_back_before_the_eager_run():
    f = make_default_list()
    g = to_graph(f)
    with pytest.warns(FallbackWarning):
        g(POS)
    helper = f.__closure__[0].cell_contents
    assert helper.__defaults__[0] == [1]        # once, by the eager run (not twice)


class Box:
    def __init__(self, t):
        self.t = t


def test_helper_closure_holding_an_argument_converts():
    """A helper whose closure holds an argument object (written back by the graph as an
    argument object) is the argument's business, not state kept across calls."""
    def run(x, bump, box):
        bump(x)
        return box.t * 2

    for strict in (True, False):
        box_e, box_g = Box(V(1.0, 1.0)), Box(V(1.0, 1.0))

        def bumper(box):
            def bump(x):
                box.t = box.t + x
            return bump
        g = to_graph(run, strict=strict)
        for x in (POS, NEG):
            exp = run(x, bumper(box_e), box_e)
            with warnings.catch_warnings():
                warnings.simplefilter("error", FallbackWarning)
                got = g(x, bumper(box_g), box_g)
            assert_same(got, exp)
            assert_same(box_g.t, box_e.t)


def make_memo():
    def scale(n, cache={}):         # noqa: B006 - a memo: filled once per key
        if n not in cache:
            cache[n] = n * 2
        return cache[n]

    def f(x):
        return x * scale(x.shape[0])
    return f


def test_memo_filled_once_converts_after():
    """A memo cache the first trace fills falls back once; the next call finds it filled,
    changes nothing and converts."""
    same_over_calls(make_memo, [POS, NEG, POS * 3], fallback=True)
    f = make_memo()
    g = to_graph(f, strict=True)
    f(POS)                                      # (filled eagerly)
    assert_same(g(NEG), f(NEG))


def make_global_reader():
    def helper(x, scale=2.0, names=("a", "b")):
        return x * scale * len(names)

    def f(x):
        return helper(x)
    return f


def test_immutable_defaults_convert():
    same_over_calls(make_global_reader, [POS, NEG, V(1.0, 2.0, 3.0)], fallback=False)


# ---------------------------------------------------------------- Python-number powers
def int_powers(x):
    k = 3
    if x.sum() > 0:
        k = 2
    return k ** 2, k ** -1, k ** 0.5, 2 ** k, type(k ** -2).__name__, type(k ** 2).__name__


def test_int_stand_in_powers():
    """``k ** -1`` of a carried int is a float, as in Python (the graph raised torch's
    'Integers to negative integer powers are not allowed')."""
    converts(int_powers, (POS,), (NEG,))


def divmod_of_carried_numbers(x):
    k, s = 7, 7.5
    if x.sum() > 0:
        k, s = -7, -2.5
    q, r = divmod(k, 3)
    return divmod(k, -2), divmod(s, 2), divmod(10, k), q * 2, r, type(q).__name__


def test_divmod_of_carried_numbers():
    """``divmod`` of a carried int or float is Python's (floor, sign of the divisor); it
    fell back (TypeError: unsupported operand type(s) for divmod())."""
    converts(divmod_of_carried_numbers, (POS,), (NEG,))


def divmod_of_tensor(x):
    return divmod(x, 3)


def test_divmod_of_a_tensor_raises_as_eager():
    for strict in (True, False):
        with pytest.raises(TypeError, match="unsupported operand type"), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore", FallbackWarning)
            to_graph(divmod_of_tensor, strict=strict)(POS)


# ---------------------------------------------------------------- failing asserts
def assert_plain(x):
    assert x.sum() > 0
    return x * 2


def assert_text(x):
    assert x.sum() > 0, "sum must be positive"
    return x * 2


def assert_number(x):
    assert x.sum() > 0, x.sum().item()
    return x * 2


def assert_tuple(x):
    assert x.sum() > 0, ("bad", 3)
    return x * 2


def assert_in_loop(x):
    for r in x:
        assert r > -2, f"row {r.item()}"
    return x


@pytest.mark.parametrize("fn,text", [(assert_plain, ""), (assert_text, "sum must be positive"),
                                     (assert_number, "-8.0"), (assert_tuple, "('bad', 3)"),
                                     (assert_in_loop, "row -2.0")],
                         ids=lambda v: getattr(v, "__name__", None))
def test_failing_assert_raises_eagers_error(fn, text):
    """Type and text as eager's (the graph's error put the line and node before the text;
    they are in a note now). ``text``: eager's, as Python makes it (pytest rewrites the
    asserts of this module, so eager is not run here)."""
    for strict in (True, False):
        g = to_graph(fn, strict=strict)
        assert_same(g(POS), fn(POS))
        with pytest.raises(AssertionError) as got:
            g(NEG * 2)
        assert type(got.value) is AssertionError and str(got.value) == text
        assert "raised by the graph's 'assert_true'" in "".join(got.value.__notes__)


def shape_error(x):
    return x + torch.ones(3)


def index_error_in_branch(x):
    if x.sum() > 0:
        return x[5]
    return x[0]


def _eager_error(fn, *args):
    try:
        fn(*args)
    except Exception as e:      # noqa: BLE001 - the error eager raises
        return e
    raise AssertionError("eager raised nothing")


def test_shape_error_has_eagers_text():
    """An op that fails while tracing, as it does eagerly: eager's error, its text (it was
    the meta kernel's: 'Attempting to broadcast a dimension of length 3')."""
    want = _eager_error(shape_error, V(1.0, 2.0))
    for strict in (True, False):
        with pytest.raises(RuntimeError) as got:
            to_graph(shape_error, strict=strict)(V(1.0, 2.0))
        assert str(got.value) == str(want) and not isinstance(got.value, ConversionError)
        assert __file__ in "".join(got.value.__notes__)


def test_error_in_a_running_graph_has_eagers_text():
    """An op failing when the graph runs (in a branch the trace could not decide):
    eager's type and text, the line and node in a note."""
    x = V(-1.0, 2.0, 4.0, 5.0)
    want = _eager_error(index_error_in_branch, x)
    g = to_graph(index_error_in_branch, dynamic=True)
    assert_same(g(V(-1.0, -2.0, 0.0)), index_error_in_branch(V(-1.0, -2.0, 0.0)))
    with pytest.raises(IndexError) as got:
        g(x)
    assert str(got.value) == str(want)
    assert "raised by the graph's" in "".join(got.value.__notes__)


# ---------------------------------------------------------------- printing grad tensors
def print_grad_chain(x):
    y = x * 2 + 1
    print(y)
    z = y.relu().exp()
    print(f"z={z} first={z[0]}", repr(z.sum()))
    return z


def print_grad_branch(x):
    y = x * 2
    if y.sum() > 0:
        y = y.sigmoid() * 3
        print("pos", y)
    else:
        y = y - 1
        print("neg", y)
    return y


def print_loss(x):
    loss = torch.nn.functional.mse_loss(x * 2, torch.zeros(x.shape))
    print("loss", loss)
    return loss


@pytest.mark.parametrize("fn", [print_grad_chain, print_grad_branch, print_loss])
def test_printed_grad_fn_is_eagers(capsys, fn):
    """A printed tensor that requires grad shows eager's node (``grad_fn=<AddBackward0>``),
    not the fused kernel's (``<_FusedNodeBackward>``), on every call."""
    for strict in (True, False):
        g = to_graph(fn, strict=strict)
        for x in (V(1.0, 2.0, 3.0), V(-1.0, -2.0, 4.0), V(0.5, -3.0, 1.0)):
            exp = fn(x.clone().requires_grad_())
            eager = capsys.readouterr().out
            got = g(x.clone().requires_grad_())
            assert capsys.readouterr().out == eager
            assert_same(got, exp)
            assert "grad_fn=<" in eager


# ---------------------------------------------------------------- try / finally, zip
def return_in_try_finally(x):
    out = []
    try:
        if x.sum() > 0:
            return x * 2, out
        return x - 1, out
    finally:
        out.append("done")


def test_return_in_tensor_if_inside_try_finally_converts():
    """Every path of the try returns: no implicit ``return None`` after it (it was a cond
    of None against a tensor, a fallback)."""
    converts(return_in_try_finally, (POS,), (NEG,))


def zip_strict(x, n):
    acc = []
    for i, (a, b) in enumerate(zip(x, x[:n] * 2, strict=True), start=5):
        acc.append(a * i + b)
    return acc


def test_zip_strict_converts():
    converts(zip_strict, (V(1.0, 2.0, 3.0), 3), (V(-1.0, 0.5, 2.0), 3))


def test_zip_strict_raises_pythons_error():
    for strict in (True, False):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FallbackWarning)
            with pytest.raises(ValueError, match="zip\\(\\) argument 2 is shorter than "
                                                 "argument 1"):
                to_graph(zip_strict, strict=strict)(V(1.0, 2.0, 3.0), 2)


# ---------------------------------------------------------------- open findings
def match_on_python_value(x, k):
    match k:
        case 1:
            return x + 1
        case (a, b):
            return x * a + b
        case _:
            return x


def any_of_rows(x):
    return any(r > 2 for r in x), all(r > -5 for r in x)


def code_after_try_finally(x):
    try:
        if x.sum() > 0:
            return x * 2
        y = x - 1
    finally:
        pass
    return y


def walrus_in_comprehension(x):
    ys = [y for r in x if (y := r * 2) > 0]
    return ys, y


def float_carried_precision(x):
    s = 0.5
    if x.sum() > 0:
        s = 0.1
    return s + 1e-9 > s, int(s * 1e9)


def _open(fn, inputs, reason):
    return pytest.param(fn, inputs, id=fn.__name__,
                        marks=pytest.mark.xfail(strict=True, reason=reason))


@pytest.mark.parametrize("fn,inputs", [
    pytest.param(match_on_python_value, ((POS, 1), (NEG, (2, 3)), (POS, "z")),
                 id="match_on_python_value"),
    pytest.param(any_of_rows, ((V(1.0, 3.0),), (V(-1.0, 2.0),), (V(-9.0, 0.0),)),
                 id="any_of_rows"),
    pytest.param(code_after_try_finally, ((POS,), (NEG,)), id="code_after_try_finally"),
    pytest.param(walrus_in_comprehension, ((V(1.0, 3.0),), (V(-1.0, 2.0),)),
                 id="walrus_in_comprehension"),
    pytest.param(float_carried_precision, ((POS,), (NEG,)), id="float_carried_precision"),
])
def test_open_finding_converts(fn, inputs):
    converts(fn, *inputs)

