"""Common Python spellings around tensor code, each compared with eager (values, types,
printed output, what the call leaves in Python state) in default and strict mode, over
calls with different inputs: ``any()``/``all()`` of a generator of tensor tests."""
import warnings

import pytest
import torch

from e2e_helpers import assert_same
from fidelity_checks import converts, falls_back
from transpiler import ConversionError, FallbackWarning, to_code, to_graph


def V(*xs):
    return torch.tensor(xs, dtype=torch.float32)


POS, NEG, MIXED = V(1.0, 2.0, 3.0), V(-1.0, -3.0, -0.5), V(-1.0, 0.5, 4.0)
THREE = ((POS,), (NEG,), (MIXED,))


def cond_ops(fn, *args):
    return [n.op for n in to_graph(fn, strict=True).graph(*args).nodes]


# ---------------------------------------------------------------- any / all of a generator
def any_above_thresholds(x):
    if any((x > t).all() for t in (2.0, 0.0, -2.0)):
        return x * 2
    return x - 1


def all_below_thresholds(x):
    if all((x < t).any() for t in [0.0, 2.0]):
        return x + 1
    return -x


def any_with_python_items(x, flags):
    # Python items decide first (eager stops there); else the traced items decide
    return any(f or (x.sum() > 0) for f in flags), all(f and x.max() < 3 for f in flags)


def any_filtered(x):
    return any(x[i] > 1 for i in range(x.shape[0]) if i != 1)


def all_grads_set(x, w):
    y = (x * w).sum()
    return y, all(p is not None for p in (x, w)), any(p.requires_grad for p in (x, w))


@pytest.mark.parametrize("fn", [any_above_thresholds, all_below_thresholds, any_filtered])
def test_generator_of_tensor_tests_converts(fn):
    converts(fn, *THREE)


def test_generator_decided_by_a_tensor_is_a_cond():
    assert "cond" in cond_ops(any_above_thresholds, POS)


def test_python_items_decide_as_python():
    converts(any_with_python_items, (POS, [False, False]), (NEG, [False, True]),
             (MIXED, [True, True]), (NEG, []))


def test_python_values_only():
    converts(all_grads_set, (POS, NEG), (MIXED, POS))


def test_values_and_types_equal_eager():
    g = to_graph(any_with_python_items, strict=True)
    for x, flags in ((POS, [False]), (NEG, [True, False]), (MIXED, [False, False])):
        got, exp = g(x, flags), any_with_python_items(x, flags)
        assert [bool(v) for v in got] == [bool(v) for v in exp]


# ---------------------------------------------------------------- effects: fall back
def make_logging_test():
    log = []

    def check(x, t):
        log.append(t)       # eager appends only up to the first True
        return (x > t).all()

    def f(x):
        return any(check(x, t) for t in (0.0, -5.0, 1.0)), len(log)
    return f, log


def printing_test(x):
    return any(print("item", t) or (x > t).all() for t in (0.0, -5.0))


def walrus_in_generator(x):
    found = any((m := x.max() - t) > 0 for t in (5.0, 2.0, 0.0))
    return found, m


def raising_after(x):
    items = [0.0, "not a number"]
    return any((x > t).all() for t in items)


def test_effect_in_the_rest_falls_back():
    for strict in (False, True):
        f, log = make_logging_test()
        e, elog = make_logging_test()
        g = to_graph(f, strict=strict)
        for x in (POS, NEG):
            exp = e(x)
            if strict:
                with pytest.raises(ConversionError, match="changes while tracing"):
                    g(x)
                continue
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                got = g(x)
            assert any(issubclass(m.category, FallbackWarning) for m in w) == (x is POS)
            assert_same(got, exp)
            assert log == elog


def test_print_in_the_rest_falls_back(capsys):
    falls_back(printing_test, (POS,), (NEG,), match="effect")


def test_walrus_in_generator_falls_back():
    falls_back(walrus_in_generator, (POS,), (V(3.0, 1.0),), match=":=")


def test_error_in_the_rest_falls_back():
    """Eager stops before the failing item when the first one is True (POS), else raises:
    the graph cannot know which while tracing, so it falls back and eager decides."""
    for x in (POS, NEG):
        with pytest.raises(ConversionError, match="raised TypeError"):
            to_graph(raising_after, strict=True)(x)
    with pytest.warns(FallbackWarning, match="raised TypeError"):
        assert to_graph(raising_after)(POS) is raising_after(POS) is True
    with pytest.raises(TypeError), warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        to_graph(raising_after)(NEG)       # eager's own error, after the fallback


# ---------------------------------------------------------------- := in a comprehension filter
def walrus_over_rows(x):
    ms = [m for r in x if (m := r * 2) > 0]     # a tensor filter: run-time length
    return ms, m


def walrus_over_python_list(x, scales):
    kept = [y for s in scales if (y := x.sum() * s) is not None]
    return kept, y


def walrus_tensor_filter_over_list(x):
    ts = [x, -x, x * 3]
    return [m for t in ts if (m := t.max()) > 0], m


def walrus_keeps_outer_names(x):
    r, m = 10, x                                # the comprehension's r stays its own
    ms = [m * r for r in (1, 2, 3) if (m := x.sum() + r) > 2]
    return ms, m, r


def walrus_two_filters(x, n):
    out = [v for i in range(n) if i % 2 == 0 if (v := x[i] + i) > 1]
    return out, v


def walrus_then_print(x):
    vals = [w for t in (1.0, 2.0) if (w := (x * t).max()) > 3]
    print("w =", w, "kept", len(vals))
    return vals


@pytest.mark.parametrize("fn,inputs", [
    (walrus_over_rows, ((V(1.0, 3.0),), (V(-1.0, 2.0),), (V(4.0, -5.0),))),
    (walrus_over_python_list, ((POS, [1.0, 2.0]), (NEG, [3.0]), (MIXED, [0.5, -1.0, 2.0]))),
    (walrus_tensor_filter_over_list, THREE),
    (walrus_keeps_outer_names, THREE),
    (walrus_two_filters, ((POS, 3), (NEG, 3), (MIXED, 2))),
], ids=lambda v: getattr(v, "__name__", ""))
def test_walrus_in_comprehension_filter_converts(fn, inputs):
    converts(fn, *inputs)


def test_walrus_filter_is_a_loop_of_the_function():
    """A tensor filter over tensor rows: a while node, no fallback, no local function."""
    assert "while" in cond_ops(walrus_over_rows, POS)
    assert "def listcomp" not in to_code(walrus_over_rows)


def test_walrus_printed_output_equals_eager(capsys):
    for strict in (True, False):
        g = to_graph(walrus_then_print, strict=strict)
        for x in (POS, NEG, MIXED):
            exp = walrus_then_print(x)
            eager = capsys.readouterr().out
            got = g(x)
            assert capsys.readouterr().out == eager
            assert_same(got, exp)


def walrus_not_first(x):
    return [y for r in x if r > 0 and (y := r * 2) > 1]


def test_walrus_not_evaluated_first_stays_python():
    """The ``:=`` runs only when ``r > 0``: it is not written out (a fallback, as before)."""
    assert "items.append" not in to_code(walrus_not_first)
    falls_back(walrus_not_first, (V(1.0, 3.0),))


def walrus_zero_items(x, scales):
    y = x
    kept = [y for s in scales if (y := x.sum() * s) > 0]
    return kept, y


def test_walrus_with_no_items_keeps_the_value_before():
    converts(walrus_zero_items, (POS, []), (POS, [1.0]), (NEG, [-1.0, 2.0]))


def test_walrus_never_bound_raises_eagers_error():
    """No item: ``y`` is never bound, eager's ``return kept, y`` raises UnboundLocalError."""
    with pytest.raises(ConversionError, match="'y'"):
        to_graph(walrus_over_python_list, strict=True)(POS, [])
    with pytest.raises(UnboundLocalError), warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        to_graph(walrus_over_python_list)(POS, [])


# ---------------------------------------------------------------- match on Python values
import enum     # noqa: E402


class Mode(enum.Enum):
    TRAIN = "train"
    EVAL = "eval"


def match_mode_string(x, mode):
    match mode:
        case "relu":
            y = torch.relu(x)
        case "tanh" | "sigmoid":
            y = torch.tanh(x) if mode == "tanh" else torch.sigmoid(x)
        case _:
            y = x
    if y.sum() > 0:             # a tensor if after the match
        y = y * 2
    return y


def match_enum_and_tensor_if(x, mode):
    match mode:
        case Mode.TRAIN:
            if x.sum() > 0:     # tensor code inside a case: a cond
                out = x - 1
            else:
                out = x + 1
        case Mode.EVAL:
            out = x * 3
    return out


def match_sequence_and_guard(x, spec):
    match spec:
        case (a, b) if a > b:
            return x * a + b
        case (a, b):
            return x * b - a
        case [n]:
            return x ** n
        case {"scale": s, **rest}:
            return x * s + len(rest)
        case int(k) as whole:
            return x + k + whole
        case other:
            return other


def match_tensor_guard(x, n):
    match n:
        case 1 if x.sum() > 0:          # a tensor guard: a tensor if
            r = x * 10
        case 1:
            r = x * -10
        case _:
            r = x
    return r


def match_class_pattern(x, v):
    match v:
        case torch.Tensor():
            return x + v
        case float() | int():
            return x * v
    return None


def match_in_loop(x, ops):
    acc = x
    for op in ops:
        match op:
            case "skip":
                continue
            case "stop":
                break
            case ("add", k):
                acc = acc + k
                print("add", k, acc)
            case "double":
                acc = acc * 2
    return acc


def match_unmatched(x, k):
    y = x
    match k:
        case 1:
            y = x + 1
        case 2:
            y = x + 2
    return y


@pytest.mark.parametrize("fn,inputs", [
    (match_mode_string, ((POS, "relu"), (NEG, "tanh"), (MIXED, "sigmoid"), (NEG, "id"))),
    (match_enum_and_tensor_if, ((POS, Mode.TRAIN), (NEG, Mode.TRAIN), (MIXED, Mode.EVAL))),
    (match_sequence_and_guard, ((POS, (3, 1)), (NEG, (1, 3)), (MIXED, [2]),
                                (POS, {"scale": 2.0, "a": 1}), (NEG, 4), (POS, "z"))),
    (match_tensor_guard, ((POS, 1), (NEG, 1), (MIXED, 2))),
    (match_class_pattern, ((POS, NEG), (NEG, 2.5), (MIXED, "s"))),
    (match_unmatched, ((POS, 1), (NEG, 2), (MIXED, 3))),
], ids=lambda v: getattr(v, "__name__", ""))
def test_match_on_python_subject_converts(fn, inputs):
    converts(fn, *inputs)


def test_match_leaves_no_node_for_the_python_subject():
    ops = cond_ops(match_enum_and_tensor_if, POS, Mode.TRAIN)
    assert ops.count("cond") == 1, ops
    assert "cond" not in cond_ops(match_enum_and_tensor_if, POS, Mode.EVAL)
    assert "cond" in cond_ops(match_tensor_guard, POS, 1)


def test_match_in_loop_printed_output_equals_eager(capsys):
    for strict in (True, False):
        g = to_graph(match_in_loop, strict=strict)
        for x, ops in ((POS, ["double", ("add", 2), "skip", "stop", "double"]),
                       (NEG, [("add", 1), "double"]), (MIXED, ["stop"])):
            exp = match_in_loop(x, ops)
            eager = capsys.readouterr().out
            with warnings.catch_warnings():
                warnings.simplefilter("error", FallbackWarning)
                got = g(x, ops)
            assert capsys.readouterr().out == eager
            assert_same(got, exp)


def match_on_tensor(x):
    match x.sum():
        case 0:
            return x
        case _:
            return x * 2


def test_match_comparing_a_tensor_falls_back_naming_the_line():
    line = match_on_tensor.__code__.co_firstlineno + 2     # case 0:
    falls_back(match_on_tensor, (POS,), (NEG,), match=f"{__file__}:{line}:")
    falls_back(match_on_tensor, (POS,), match="match on a traced value")
