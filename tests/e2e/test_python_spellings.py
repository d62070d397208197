"""Common Python spellings around tensor code, each compared with eager (values, types,
printed output, what the call leaves in Python state) in default and strict mode, over
calls with different inputs: ``any()``/``all()`` of a generator of tensor tests."""
import warnings

import pytest
import torch

from e2e_helpers import assert_same
from fidelity_checks import converts, falls_back
from transpiler import ConversionError, FallbackWarning, to_graph


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
