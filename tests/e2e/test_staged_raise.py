"""``raise`` under a tensor ``if`` becomes a check the graph makes on every run.

Each converted function is compared with eager on passing and failing inputs, alternating
(the same result, or the same error type and message), and must convert: strict mode,
no fallback, the graph holding the check."""
import warnings

import pytest
import torch

from e2e_helpers import assert_same
from transpiler import ConversionError, FallbackWarning, to_code, to_graph


class LabelError(ValueError):
    pass


class ShoutingError(Exception):
    def __str__(self):
        return super().__str__().upper()


class CountingError(Exception):
    made = 0

    def __init__(self, message):
        super().__init__(message)
        CountingError.made += 1


def _outcome(fn, args):
    try:
        return "ok", fn(*args)
    except Exception as e:  # noqa: BLE001  (the point: the same error as eager)
        return type(e), str(e)


def _same_runs(fn, *calls, module=None):
    """``to_graph(fn)`` (strict) agrees with eager on every call, in order; returns it."""
    g = to_graph(module if module is not None else fn, strict=True)
    failed = 0
    for args in calls:
        exp, got = _outcome(fn, args), _outcome(g, args)
        assert got[0] is exp[0], (got, exp)
        if exp[0] == "ok":
            assert_same(got[1], exp[1])
        else:
            assert got[1] == exp[1]
            failed += 1
    assert failed and failed < len(calls), "the calls must both pass and fail"
    info = g.cache_info()
    assert info.fallbacks == 0 and info.traces >= 1, info
    return g


def _checks(g, *args):
    return sum(n.op == "assert_true" for n in g.graph(*args).walk())


OK, BAD = torch.tensor([1, 2, 3]), torch.tensor([1, 9, 3])
X = torch.tensor([0.5, -1.0, 2.0])


def label_check(x, labels, vocab: int):
    if labels.max() >= vocab:
        raise ValueError(f"Label values must be <= vocab_size: {vocab}")
    return x * 2


def test_label_check_alternates():
    g = _same_runs(label_check, (X, OK, 5), (X, BAD, 5), (X, OK, 5), (X, BAD, 5))
    assert _checks(g, X, OK, 5) == 1
    assert "tg.raise_if" in to_code(label_check)


def test_error_names_the_raise_line():
    g = to_graph(label_check, strict=True)
    g(X, OK, 5)
    with pytest.raises(ValueError) as info:
        g(X, BAD, 5)
    line = label_check.__code__.co_firstlineno + 2      # the ``raise``
    assert any(f"test_staged_raise.py:{line}:" in note for note in info.value.__notes__)


def message_of_value(x, labels, vocab: int):
    top = labels.max()
    if top >= vocab:
        bad = labels[labels >= vocab]
        raise LabelError(f"labels {bad} out of range; max {top} >= {vocab}")
    return x.sum() + top


def test_message_formats_traced_values_on_each_run():
    _same_runs(message_of_value, (X, OK, 5), (X, BAD, 5), (X, torch.tensor([7, 8]), 5),
               (X, OK, 5))


def elif_chain(x, labels):
    if torch.isnan(x).any():
        raise RuntimeError("x holds NaN")
    elif (labels < 0).any():
        raise IndexError(f"negative label {labels.min()}")
    elif labels.max() > 5:
        y = x + 1
    else:
        y = x - 1
    return y * 2


def test_elif_chain():
    nan = torch.tensor([1.0, float("nan"), 0.0])
    neg = torch.tensor([1, -2, 3])
    g = _same_runs(elif_chain, (X, OK), (nan, OK), (X, neg), (X, BAD), (nan, neg), (X, OK))
    assert _checks(g, X, OK) == 2


def raises_in_else(x):
    if x.min() > -5:
        y = x.exp()
    else:
        raise ValueError("too small")
    return y


def raises_in_middle_branch(x):
    if x.sum() > 100:
        y = x / 100
    elif x.sum() < -100:
        raise ValueError(f"sum {x.sum():.2f} too negative")
    else:
        y = x
    return y + 1


def test_raise_in_else_and_in_a_cond_branch():
    _same_runs(raises_in_else, (X,), (X - 10,), (X,))
    g = _same_runs(raises_in_middle_branch, (X,), (X - 100,), (X + 100,), (X - 100,))
    assert _checks(g, X) == 1


def first_negative_row(x):
    total = torch.zeros(x.shape[1])
    for row in x:
        if row.min() < 0:
            raise ValueError(f"negative entry in row {row}")
        total = total + row
    return total


def sum_until(x, limit):
    i = torch.tensor(0)
    s = torch.zeros(())
    while i < x.shape[0]:
        s = s + x[i]
        if s > limit:
            raise OverflowError(f"running sum {s.item()} passed {limit} at step {i}")
        i = i + 1
    return s


def test_raise_on_iteration_k_of_tensor_loops():
    rows = torch.rand(4, 3)
    bad = rows.clone()
    bad[2, 1] = -1.0
    _same_runs(first_negative_row, (rows,), (bad,), (rows,))
    _same_runs(sum_until, (torch.ones(5), 10.0), (torch.ones(5), 2.5), (torch.ones(5), 10.0))


def class_check(x):
    if x.max() > 3:
        raise ShoutingError("too big")
    return x


def test_custom_error_classes():
    _same_runs(class_check, (X,), (X * 10,), (X,))


def test_bare_class_and_a_class_made_in_a_function():
    class Local(RuntimeError):
        pass

    def bare(x):
        if x.sum() > 0:
            raise Local
        if x.sum() < -10:
            raise KeyError("key")
        return x + 1
    _same_runs(bare, (-X.abs(),), (X.abs(),), (-X.abs() * 10,), (-X.abs(),))


def custom_constructor(x):
    if x.max() > 3:
        raise CountingError("too big")
    return x


def test_error_class_with_its_own_constructor_is_called_when_the_graph_raises():
    """Its constructor runs when the graph raises, as eager's does: once per raising call,
    never while tracing (operators.staged_raises.raise_made)."""
    g = to_graph(custom_constructor, strict=True)
    made = CountingError.made
    assert_same(g(X), X)
    assert CountingError.made == made
    for n in (1, 2):
        with pytest.raises(CountingError, match="too big"):
            g(X * 10)
        assert CountingError.made == made + n
    assert_same(g(X), X)
    assert CountingError.made == made + 2     # (its class's changed ``made``: a retrace)


class Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(3, 4)

    def forward(self, x, labels=None):
        logits = self.proj(x)
        if labels is not None:
            if labels.max() >= logits.shape[-1]:
                raise ValueError(f"Label values must be < {logits.shape[-1]}")
            return torch.nn.functional.cross_entropy(logits, labels), logits
        return logits


def test_module_method_and_gradients_through_the_passing_path():
    torch.manual_seed(0)
    head = Head()
    x = torch.randn(3, 3, requires_grad=True)
    bad = torch.tensor([0, 4, 1])
    g = _same_runs(head, (x, OK - 1), (x, bad), (x, OK - 1), module=head)
    loss, _ = head(x, OK - 1)
    exp = torch.autograd.grad(loss, [x, head.proj.weight])
    loss, _ = g(x, OK - 1)
    got = torch.autograd.grad(loss, [x, head.proj.weight])
    for a, b in zip(got, exp):
        assert_same(a, b)


def raise_under_try(x):
    try:
        if x.max() > 3:
            raise ValueError("too big")
        y = x * 2
    except ValueError:
        y = x
    return y


def check_helper(x, limit):
    if x.max() > limit:
        raise LabelError(f"above {limit}")
    return x * 2


def caller_catches(x):
    try:
        return check_helper(x, 3)
    except LabelError:      # (not a run-time error of the graph's own ops: the staged one)
        return x - 1


def test_under_try_replays_the_raising_calls_and_matches_eager():
    """A call whose staged raise fires runs eagerly so the handler catches it
    (runtime/try_replays.py); the other calls run the graph (strict: ConversionError on
    the raising call only)."""
    g = to_graph(raise_under_try)   # (a raise under a try in the same function is not
    with pytest.warns(FallbackWarning):         # staged: the function falls back)
        assert_same(g(X * 10), raise_under_try(X * 10))
    assert_same(g(X), raise_under_try(X))
    with pytest.raises(ConversionError):
        to_graph(raise_under_try, strict=True)(X)
    for fn in (caller_catches,):
        g, strict = to_graph(fn), to_graph(fn, strict=True)
        with pytest.warns(FallbackWarning, match="inside a try"):
            assert_same(g(X * 10), fn(X * 10))
        with warnings.catch_warnings():
            warnings.simplefilter("error", FallbackWarning)
            assert_same(g(X), fn(X))
            assert_same(strict(X), fn(X))
        with pytest.raises(ConversionError):
            strict(X * 10)


def raise_in_no_grad(x):
    with torch.no_grad():
        if x.max() > 3:
            raise ValueError("too big")
        y = x * 2
    return y + x


def test_under_no_grad_converts_and_grad_mode_survives():
    x = X.clone().requires_grad_()
    _same_runs(raise_in_no_grad, (x,), (x * 10,), (x,))
    assert torch.is_grad_enabled()


class Suppressing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return True


def raise_in_suppressing_with(x):
    y = x
    with Suppressing():
        if x.max() > 3:
            raise ValueError("too big")
        y = x * 2
    return y


def test_under_other_with_keeps_the_fallback():
    g = to_graph(raise_in_suppressing_with)
    with pytest.warns(FallbackWarning):
        assert_same(g(X * 10), X * 10)
    assert "raise_if" not in to_code(raise_in_suppressing_with)


def raise_from(x):
    if x.max() > 3:
        raise ValueError("too big") from None
    return x


def raise_instance(x):
    err = ValueError("too big")
    if x.max() > 3:
        raise err
    return x


def raise_with_effect(x):
    if x.max() > 3:
        print("about to fail")
        raise ValueError("too big")
    return x


@pytest.mark.parametrize("fn", [raise_from, raise_instance, raise_with_effect])
def test_unstaged_raises_keep_the_fallback(fn):
    g = to_graph(fn)
    with pytest.warns(FallbackWarning):
        assert_same(g(X), X)
    with pytest.raises(ValueError, match="too big"):
        g(X * 10)


def python_test(x, n: int):
    if n < 0:
        raise ValueError("n must be >= 0")
    return x * n


def test_python_test_raises_as_python():
    g = to_graph(python_test, strict=True)
    assert_same(g(X, 2), X * 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        with pytest.raises(ValueError, match="n must be >= 0"):
            to_graph(python_test)(X, -1)


def test_strict_mode_raises_eagers_error_not_conversion_error():
    g = to_graph(label_check, strict=True)
    with pytest.raises(ValueError) as info:
        g(X, BAD, 5)
    assert str(info.value) == "Label values must be <= vocab_size: 5"
    assert type(info.value) is ValueError


def check_before_indexing(table, labels):
    if labels.max() >= table.shape[0]:
        raise IndexError(f"label {labels.max()} out of range")
    return table[labels]


def test_check_runs_before_the_code_it_guards():
    table = torch.rand(5, 2)
    _same_runs(check_before_indexing, (table, OK), (table, BAD), (table, OK))

