"""Refusals that should convert, and closures over variables rebound in tensor control flow.

- ``try``/``finally`` converts (the ``finally`` block runs on every traced path: normal
  exit, early ``return``, ``break``); ``try``/``except`` converts when its body is decided
  at trace time as eagerly, else falls back (a refusal the user's handler cannot swallow).
- a name rebound in an ``if`` after a tensor-dependent early ``return`` (UnboundLocalError
  in the generated code before).
- a nested ``def``/``lambda`` reads the value a tensor branch or loop body just gave its
  variable, as eagerly.
- ``to_graph`` of None, builtins, partials, callable objects, static/class methods; a
  wrong argument count raises the plain call's TypeError.
- numpy ufuncs on traced float tensors become graph ops; other numpy uses fall back.
"""
import functools
import math  # noqa: F401  (imported again inside a converted try)
import warnings

import numpy as np
import pytest
import torch

from transpiler import ConversionError, FallbackWarning, to_graph

from e2e_helpers import assert_same, op_counts
from fidelity_checks import converts, falls_back, same_gradients

POS, NEG = torch.tensor([1.0, 2.0, 0.5]), torch.tensor([-1.0, -2.0, 0.5])
SIGNS = ((POS,), (NEG,))


def _ops(fn, *args):
    return op_counts(to_graph(fn, strict=True).graph(*args))


# ------------------------------------------------------------------ try / finally
def test_try_finally_runs_after_an_early_return_in_a_tensor_branch():
    def f(x):
        fin = 0
        try:
            if x.sum() > 0:
                return x * 2, fin
            x = x - 1
        finally:
            fin += 1
        return x, fin
    converts(f, *SIGNS)
    assert _ops(f, POS).get("cond")


def test_try_finally_in_a_tensor_loop_with_break():
    def f(x):
        fin = 0
        while x.sum() < 10:
            try:
                x = x + 1
                if x.sum() > 5:
                    break
                x = x * 1.5
            finally:
                fin = fin + 1
        return x, fin
    converts(f, *SIGNS, (torch.tensor([3.0, 3.0, 3.0]),))


def test_try_finally_with_python_return_and_tensor_math_in_finally():
    def f(x, n):
        out = x
        try:
            if n > 1:
                return out * n
            out = torch.tanh(out)
        finally:
            out = out + 1.0         # eagerly too: runs after the return value was taken
        return out
    converts(f, (POS, 3), (NEG, 1))


def test_try_finally_gradients():
    def f(x):
        try:
            y = x * x if x.sum() > 0 else -x
        finally:
            y = y + 1.0
        return y
    same_gradients(f, *SIGNS)


def test_return_in_finally_converts():
    def f(x):
        try:
            y = x * 2
        finally:
            return x + 1          # noqa: B012  (swallows any exception)
    converts(f, *SIGNS)     # (a call whose graph raised would run eagerly: try_replays)


# ------------------------------------------------------------------ try / except
def test_try_except_with_a_pure_python_body_converts():
    def f(x, d):
        try:
            v = d["k"]
        except KeyError:
            v = x * 0.5            # the handler may trace tensor code
        return x + v
    converts(f, (POS, {}), (NEG, {"k": 2.0}), (POS, {"j": 1.0}))


def test_try_import_converts():
    def f(x):
        try:
            import math
            y = x * math.pi
        except ImportError:
            y = x
        return y
    converts(f, *SIGNS)


def test_try_except_around_tensor_code_that_graphs_cannot_raise_converts():
    def f(x):
        try:
            if x.sum() > 0:
                y = x * 2
            else:
                y = -x
        except (KeyError, ZeroDivisionError):
            y = x * 0.0
        return y
    converts(f, *SIGNS)


def test_try_except_catching_runtime_errors_of_tensor_code_converts():
    def f(x):
        try:
            y = x * 2 if x.sum() > 0 else -x
        except Exception:
            y = x * 0.0
        return y
    converts(f, *SIGNS)     # (a call whose graph raised would run eagerly: try_replays)


def test_a_tensor_value_read_in_a_try_converts():
    def f(x):
        try:
            n = int(x.sum() > 0)           # a tensor's value: known only when the graph runs
        except Exception:                  # would catch the tracing error
            n = 7
        return x * n
    converts(f, *SIGNS)     # (int() of a traced bool is a graph number; a call whose
    # graph raised there would run eagerly: runtime/try_replays)


# ------------------------------------------------------------------ early return, then rebinding
def test_parameter_rebound_in_both_arms_after_a_tensor_early_return():
    def f(x, mask=None):
        if x.sum() > 0:
            return x
        if mask is None:
            mask = x * 0
        else:
            mask = mask * 2
        return x + mask
    converts(f, (POS,), (NEG,), (NEG, POS))


def test_name_bound_in_a_python_if_inside_the_flagged_rest():
    def f(x, mask=None, n=3):
        if x.sum() > 0:
            return x
        if n > 2:
            mask = x * 0
        else:
            mask = x * 2
        return x + mask
    converts(f, (POS,), (NEG,), (NEG, None, 1))


# ------------------------------------------------------------------ closures
def test_closure_sees_a_variable_rebound_in_a_tensor_branch():
    def f(a, b):
        def h(z):
            return z + b
        if a.sum() > 0:
            b = -b
            a = h(a)
        return a, h(a)
    converts(f, (POS, NEG), (NEG, POS))


def test_lambda_sees_a_variable_changed_in_a_tensor_while_loop():
    def f(a, b):
        h = lambda z: z * b  # noqa: E731
        while a.sum() < 10:
            b = b + 1
            a = h(a) + 1
        return a, b
    converts(f, (POS, POS * 0.5), (POS * 2, POS))


def test_closure_reads_the_loop_variable_of_a_loop_over_tensor_rows():
    def f(M):
        def h(z):
            return z * r
        acc = M[0] * 0
        for r in M:
            acc = h(acc + 1.0)
        return acc
    converts(f, (torch.tensor([[1.0, 2.0], [3.0, -1.0]]),), (torch.ones(3, 2),))


def test_closure_inside_nested_tensor_branches_and_gradients():
    def f(a, b):
        scale = 0.5

        def h(z):
            return z * scale + b
        if a.sum() > 0:
            scale = scale + 0.25
            if (a * b).sum() > 0:
                b = b * 2
            a = h(a)
        else:
            a = h(a) - 1
        return a + h(b)
    converts(f, (POS, POS), (POS, NEG), (NEG, POS))
    same_gradients(f, (POS, POS), (NEG, POS))


# ------------------------------------------------------------------ to_graph of odd callables
def _f(x, w, k=1.0):
    if x.sum() > 0:
        return x * w + k
    return x - w


def test_to_graph_of_none_is_a_type_error_and_the_decorator_form_still_works():
    with pytest.raises(TypeError):
        to_graph(None)
    g = to_graph(strict=True)(lambda x: x + 1)
    assert_same(g(POS), POS + 1)


def test_builtin_runs_as_is_with_one_warning_and_strict_refuses():
    g = to_graph(torch.relu)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert_same(g(NEG), torch.relu(NEG))
        assert_same(g(POS), torch.relu(POS))
    messages = [str(x.message) for x in w if issubclass(x.category, FallbackWarning)]
    assert len(messages) == 1 and "built-in" in messages[0] and "None" not in messages[0]
    with pytest.raises(ConversionError, match="no Python source"):
        to_graph(torch.relu, strict=True)(POS)


def test_partial_binds_tensor_arguments_as_inputs():
    w1, w2 = torch.full((3,), 2.0), torch.full((3,), -1.0)
    for w in (w1, w2):
        p = functools.partial(_f, w=w)
        for strict in (True, False):
            g = to_graph(p, strict=strict)
            with warnings.catch_warnings():
                warnings.simplefilter("error", FallbackWarning)
                assert_same(g(POS), p(POS))
                assert_same(g(NEG, k=3.0), p(NEG, k=3.0))


def test_callable_object_static_and_class_methods():
    class C:
        s = 5.0

        def __init__(self):
            self.t = 3.0

        def __call__(self, x):
            return x * self.t if x.sum() > 0 else -x

        @to_graph
        @staticmethod
        def st(x):
            return x + 1 if x.sum() > 0 else x - 1

        @to_graph
        @classmethod
        def cm(cls, x):
            return x * cls.s if x.sum() > 0 else x

    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        for x in (POS, NEG):
            assert_same(to_graph(C(), strict=True)(x), C()(x))
            assert_same(C.st(x), C.st.python_function(x))
            assert_same(C().st(x), C.st.python_function(x))
            assert_same(C.cm(x), x * 5.0 if x.sum() > 0 else x)
            assert_same(C().cm(x), x * 5.0 if x.sum() > 0 else x)


@pytest.mark.parametrize("args", [(POS,), (POS, 1.0, 2.0, 3.0), ()])
@pytest.mark.parametrize("strict", [False, True])
def test_wrong_argument_count_is_the_plain_calls_type_error(args, strict):
    g = to_graph(_f, strict=strict)
    with pytest.raises(TypeError) as eager:
        _f(*args)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        with pytest.raises(TypeError) as converted:
            g(*args)
    assert str(converted.value) == str(eager.value)
    assert not g._entries                                  # no fallback entry cached
    assert_same(g(POS, POS), _f(POS, POS))                 # and it still converts


# ------------------------------------------------------------------ numpy
def test_numpy_ufuncs_on_float_tensors_become_graph_ops():
    def f(x, y):
        a = np.exp(x) + np.maximum(x, 0.5)
        b = np.sqrt(np.abs(y)) * np.tanh(y)
        return np.add(a, b), np.minimum(0.25, y), np.log(np.abs(x) + 1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)     # numpy's __array_wrap__
        converts(f, (POS, NEG), (NEG, POS))
        ops = _ops(f, POS, NEG)
    assert ops.get("exp") and ops.get("maximum") and ops.get("tanh"), ops


@pytest.mark.parametrize("use", ["method", "asarray", "chain", "int_exp"])
def test_numpy_needing_concrete_values_falls_back(use):
    def method(x):
        return torch.from_numpy(x.numpy() * 2)

    def asarray(x):
        return float(np.asarray(x).sum())

    def chain(x):
        return x.detach().cpu().numpy()

    def int_exp(x):
        return np.exp(x.to(torch.int64))        # eagerly float64, torch.exp would give float32
    fn = {"method": method, "asarray": asarray, "chain": chain, "int_exp": int_exp}[use]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        if use == "chain":           # an ndarray result: compare by hand
            g = to_graph(fn)
            with pytest.warns(FallbackWarning, match="numpy needs concrete values"):
                got = g(POS)
            assert isinstance(got, np.ndarray) and np.allclose(got, POS.numpy())
            with pytest.raises(ConversionError, match="numpy needs concrete values"):
                to_graph(fn, strict=True)(POS)
        else:
            falls_back(fn, *SIGNS, match="numpy needs concrete values")


def test_exception_leaving_a_loop_inside_try_except_falls_back():
    def f(x, keys, d):
        total = 0.0
        try:
            for k in keys:
                total = total + d[k]      # KeyError on a missing key: eager keeps the sum so far
        except KeyError:
            total = total + 100.0
        return x * total
    d = {"a": 1.0, "b": 2.0}
    converts(f, (POS, ("a", "b"), d))
    falls_back(f, (POS, ("a", "z", "b"), d), match="try/except")


def test_try_except_inside_tensor_branches_and_loops():
    def f(x, d):
        i = 0
        while x.sum() < 8:
            try:
                v = d["k"]
            except KeyError:
                v = 1.0
            x = x + v
            i += 1
        if x.mean() > 4:
            try:
                x = x * d["k"]
            except KeyError:
                x = x - 1
        return x, i
    converts(f, (POS, {}), (NEG, {"k": 2.0}), (POS * 4, {"k": 0.5}))
