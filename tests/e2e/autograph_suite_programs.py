"""TensorFlow AutoGraph's own test programs, re-expressed in PyTorch.

Each function below is one program of TF's integration tests
(``tensorflow/python/autograph/tests/*_test.py``) or of its converter tests
(``tensorflow/python/autograph/converters/*_test.py``), written again for eager PyTorch:
``tf.constant`` -> ``torch.tensor``, ``tf.range`` -> ``torch.arange``, ``tf.TensorArray`` ->
a Python list, ``tf.print`` -> ``print(..., file=sys.stderr)`` (tf.print writes to stderr),
``tf.Variable`` -> a tensor written in place, ``tf.name_scope('')`` -> a no-op context
manager. TF's values are immutable: where ``x -= 1`` on a tensor would make eager PyTorch
write a list element or a dict value in place (an alias TF cannot have), the program says
``x = x - 1``; the aliasing forms are kept as programs of their own. The comment above each
block names the TF file; a program's docstring says what it
pins down where that is not plain from its name.

``@program(TF_FILE, calls)`` registers a program with the argument tuples it is called with:
Python values (as TF's tests call them), then tensors (0-d of several dtypes, and shapes
where the program is elementwise), including values that take each branch, zero-trip loops
and early ``break``/``return``. ``tests/e2e/test_autograph_suite.py`` runs every call eagerly
and under ``to_graph`` (default, then strict) and holds the verdicts.
"""
from __future__ import annotations

import collections
import contextlib
import sys
import unittest.mock
import warnings

import torch
import torch.nn.functional as F

Program = collections.namedtuple(
    "Program", "name fn tf calls reset observe")
PROGRAMS: dict[str, Program] = {}

T_IFEXP = "tests/basic_ifexp_test.py"
T_BUILTIN = "tests/call_to_builtin_function_test.py"
T_LAMBDA = "tests/call_to_lambda_function_test.py"
T_NAMEDTUPLE = "tests/call_to_named_tuple_test.py"
T_PRINT = "tests/call_to_print_function_test.py"
T_USERFN = "tests/call_to_user_function_test.py"
T_COMPOSITE = "tests/composite_names_in_control_flow_test.py"
T_COND = "tests/cond_basic_test.py"
T_EARLY = "tests/early_return_test.py"
T_EXTSLICE = "tests/ext_slice_test.py"
T_GEN = "tests/generator_test.py"
T_LOGICAL = "tests/logical_expression_test.py"
T_LOOP = "tests/loop_basic_test.py"
T_LOOPCF = "tests/loop_control_flow_test.py"
T_LOOPCF_ILL = "tests/loop_control_flow_illegal_cases_test.py"
T_CREATED = "tests/loop_created_variables_test.py"
T_SCOPING = "tests/loop_scoping_test.py"
T_LOOPCALL = "tests/loop_with_function_call_test.py"
T_VARTYPE = "tests/loop_with_variable_type_test.py"
T_VARTYPE_ILL = "tests/loop_with_variable_type_illegal_cases_test.py"
T_NESTED = "tests/nested_control_flow_test.py"
T_ANNOT = "tests/type_annotations_test.py"
T_LIST = "tests/basic_list_test.py"
T_ASSERT = "tests/assertion_test.py"
C_BREAK = "converters/break_statements_test.py"
C_CONTINUE = "converters/continue_statements_test.py"
C_CONDEXP = "converters/conditional_expressions_test.py"
C_CF = "converters/control_flow_test.py"
C_LOOPINT = "converters/loop_integration_test.py"
C_RETURN = "converters/return_statements_test.py"
C_LOGICAL = "converters/logical_expressions_test.py"
C_LISTS = "converters/lists_test.py"
C_LISTCOMP = "converters/list_comprehensions_test.py"
C_CALLTREES = "converters/call_trees_test.py"
C_FUNCTIONS = "converters/functions_test.py"
C_ARGDEF = "converters/arg_defaults_test.py"
C_ASSERTS = "converters/asserts_test.py"
C_VARIABLES = "converters/variables_test.py"
C_BUILTIN = "converters/builtin_functions_test.py"
C_SIDEFX = "converters/side_effect_guards_test.py"
C_DECOR = "converters/decorators_test.py"


def program(tf, calls, reset=None, observe=None):
    """Register ``fn`` with the argument tuples ``calls``; ``reset()`` runs before each call
    and ``observe()`` returns Python state to compare after it (globals a program writes)."""
    def deco(fn):
        assert fn.__name__ not in PROGRAMS, fn.__name__
        PROGRAMS[fn.__name__] = Program(fn.__name__, fn, tf, list(calls), reset, observe)
        return fn
    return deco


# ---- argument builders ----------------------------------------------------------------

def I(v):                       # noqa: E743 - int64 tensor
    return torch.tensor(v)


def I32(v):
    return torch.tensor(v, dtype=torch.int32)


def Fl(v):
    return torch.tensor(v, dtype=torch.float32)


def FG(v):
    """A float32 leaf that requires grad (the checks compare gradients)."""
    return torch.tensor(v, dtype=torch.float32, requires_grad=True)


def F64(v):
    return torch.tensor(v, dtype=torch.float64)


def B(v):
    return torch.tensor(v, dtype=torch.bool)


def LT(values):
    """A Python list of 0-d int32 tensors (TF's ``_list_of_int_tensor``)."""
    return [I32(v) for v in values]


def each(*values):
    return [(v,) for v in values]


def scalars(*values, grad=True, i32=True):
    """Python ints, int64 and (optionally) int32 0-d tensors, and float32 tensors that
    require grad (``grad``), of each value."""
    calls = each(*values) + each(*(I(v) for v in values))
    if i32:
        calls += each(*(I32(v) for v in values))
    if grad:
        calls += each(*(FG(float(v)) for v in values))
    return calls


def lists(*values, i32=True):
    """Python lists, 1-d int64 and (optionally) int32 tensors, and lists of 0-d tensors."""
    calls = each(*(list(v) for v in values)) + each(*(torch.tensor(v, dtype=torch.int64)
                                                      for v in values))
    if i32:
        calls += each(*(torch.tensor(v, dtype=torch.int32) for v in values))
    return calls


def products(*axes):
    """Every combination of the given per-argument values (as call tuples)."""
    out = [()]
    for axis in axes:
        out = [c + (v,) for c in out for v in axis]
    return out


class _Scope:
    """Stands for ``tf.name_scope('')``: a context manager with no effect on values."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


scope = _Scope


# ==== tests/basic_ifexp_test.py ===========================================================

@program(T_IFEXP, scalars(-1, 1, 5, 7) + each(Fl([-1.0, 2.0])))
def consecutive_conds(x):
    if x > 0:
        x = -x if x < 5 else x
    else:
        x = -2 * x if x < 5 else 1
    if x > 0:
        x = -x if x < 5 else x
    else:
        x = (3 * x) if x < 5 else x
    return x


@program(T_IFEXP, scalars(-1, 1, 5, 7))
def cond_with_multiple_values(x):
    if x > 0:
        x = -x if x < 5 else x
        y = 2 * x if x < 5 else x
        z = -y if y < 5 else y
    else:
        x = 2 * x if x < 5 else x
        y = -x if x < 5 else x
        z = -y if y < 5 else y
    return x, y, z


@program(T_IFEXP, each([1.0, 2.0], [], Fl([1.0, 2.0]), Fl([-1.0, -2.0])))
def ifexp_imbalanced_structure_printed(x):
    """TF raises 'must return the same nested structure in both branches': a tensor
    conditional expression whose arms are lists of different lengths, used afterwards."""
    traced_args = list(x) if sum(x) > 0 else []
    print("traced", *traced_args)
    return [v * 2 + 1 for v in x]


@program(T_IFEXP, each(Fl([1.0, 2.0]), Fl([-1.0, -2.0]), FG([3.0, -4.0])))
def ifexp_imbalanced_structure_unused(x):
    """The same conditional expression whose value only feeds ``len`` (an int per path)."""
    traced_args = list(x.unbind()) if x.sum() > 0 else []
    n = len(traced_args)
    return x * 2 + n


# ==== tests/call_to_builtin_function_test.py =============================================

@program(T_BUILTIN, each(1, I(1), FG(1.5), Fl([1.0, 2.0])))
def dict_call(x):
    return dict(foo=x)


@program(T_BUILTIN, each(1, I(1), FG(1.5)))
def dict_call_aliased(x):
    def fake_dict(x):
        return x

    dict = fake_dict  # noqa: A001
    return dict(x)


@program(T_BUILTIN, each(1, I(1), FG(1.5)))
def dict_call_dynamic(x):
    def gen_dict():
        return dict

    d = gen_dict()
    return d(foo=x)


@program(T_BUILTIN, each([1, 2], I([1, 2]), Fl([[1.0], [2.0], [3.0]]), I([], )))
def len_call(x):
    return len(x)


@program(T_BUILTIN, each([], [1, 2, 3], I([]), I([1, 2, 3]), Fl([[1.0, 2.0]])))
def nested_call(x):
    return list(range(len(x)))


@program(T_BUILTIN, each(2, 2.7, -2.7, I(3), Fl(2.7), Fl(-2.7), F64(1e10), B(True)))
def nested_cast(x):
    return float(int(x))


@program(T_BUILTIN, each([1, 2], I([1, 2]), FG([1.0, 2.0])))
def len_call_aliased(x):
    def fake_len(x):
        return x

    len = fake_len  # noqa: A001
    return len(x)


@program(T_BUILTIN, each([1, 2], I([1, 2]), Fl([[1.0, 2.0]])))
def len_call_dynamic(x):
    def gen_len():
        return len

    ln = gen_len()
    return ln(x)


@program(T_BUILTIN, [()])
def len_call_on_mock():
    x = unittest.mock.MagicMock()
    return len(x)


@program(T_BUILTIN, each(I([3, 1, 2]), Fl([0.5, 1.5])))
def len_call_on_mock_with_tensor(x):
    """``len`` of a mock next to tensor work (the mock's ``__len__`` is 0)."""
    m = unittest.mock.MagicMock()
    return x * 2 + len(m)


# ==== tests/call_to_lambda_function_test.py ==============================================

@program(T_LAMBDA, scalars(1, -2, 0) + each(Fl([1.0, -2.0])))
def inline_lambda(x):
    fn = lambda x: x * x if x > 0 else -x  # noqa: E731
    return fn(x)


_is_zero = lambda x: x == 0  # noqa: E731
_square = lambda x: x * x  # noqa: E731
_abs_or_neg = lambda x: x if x > 0 else -x  # noqa: E731


@program(T_LAMBDA, [(1, _is_zero), (0, _is_zero), (I(1), _is_zero), (I(0), _is_zero),
                    (FG(2.0), _square), (Fl([0.0, 1.0]), _is_zero), (I(-3), _abs_or_neg),
                    (FG(2.0), _abs_or_neg)])
def external_lambda(x, fn):
    return fn(x)


_same_line_lambdas = (lambda x: x == 0, lambda x: x + 1)


@program(T_LAMBDA, [(I(1), _same_line_lambdas[0]), (I(2), _same_line_lambdas[1])])
def external_lambda_one_of_two_on_a_line(x, fn):
    """An argument lambda written on a line that holds another lambda of the same
    signature (TF's test writes its lambdas inline in the argument list)."""
    return fn(x)


# ==== tests/call_to_named_tuple_test.py ==================================================

@program(T_NAMEDTUPLE, each(1, I(1), FG(2.0)))
def inline_namedtuple(x):
    nt = collections.namedtuple("TestNamedTuple", ("a", "b"))
    n = nt(a=1, b=x)
    return n


ExternalNT = collections.namedtuple("TestNamedTuple", ("a", "b"))


@program(T_NAMEDTUPLE, [(1, ExternalNT), (I(1), ExternalNT), (FG(2.0), ExternalNT)])
def external_namedtuple(x, nt):
    return nt(a=1, b=x)


class NamedTupleSubclass(collections.namedtuple("TestNamedTuple", ("a",))):

    def foo(self):
        return self.a + 1


@program(T_NAMEDTUPLE, each(1, I(1), FG(2.0), Fl([1.0, 2.0])))
def namedtuple_subclass(x):
    nt = NamedTupleSubclass(x)
    return nt.foo()


# ==== tests/call_to_print_function_test.py ===============================================

@program(T_PRINT, each(1, I([1, 2, 3]), FG(1.5), Fl([[1.0, 2.0]])))
def lone_print(x):
    print(x)


@program(T_PRINT, each(1, I([1, 2, 3]), FG(1.5)))
def print_multiple_values(x):
    print("x is", x)


@program(T_PRINT, [(1, 2), (I([1, 2, 3]), 4), (I(1), Fl(2.5))])
def multiple_prints(x, y):
    print("x is", x, file=sys.stderr)
    print("y is", y, file=sys.stderr)


@program(T_PRINT, each(1, I([1, 2, 3])))
def print_with_nontf_values(x):
    print("x is", x, {"foo": "bar"})


@program(T_PRINT, scalars(0, 1, grad=False) + each(Fl(0.0), Fl(2.0)))
def print_in_cond(x):
    if x == 0:
        print(x)


@program(T_PRINT, each(0, I(0), Fl([1.0, 2.0])))
def tf_print(x):
    """``tf.print`` writes to stderr."""
    print(x, file=sys.stderr)


# ==== tests/call_to_user_function_test.py ================================================

def function_1(x):
    return x * x * x


def function_2(x):
    return -1 * x + 11


def factory(n):
    if n == 1:
        return function_1
    return function_2


@program(T_USERFN, scalars(1, 3) + each(Fl([1.0, 2.0])))
def static_fn(x):
    a = function_1(x)
    b = function_2(x)
    return a + b


@program(T_USERFN, scalars(1, 3))
def factory_dynamic_fn(x):
    f = factory(1)
    a = f(x)
    f = factory(2)
    b = f(x)
    return a + b


@program(T_USERFN, [(function_1, 1), (function_1, I(2)), (function_2, FG(2.0)),
                    (function_1, Fl([1.0, 2.0]))])
def param_dynamic_fn(f, x):
    return f(x)


@program(T_USERFN, scalars(1, 3))
def variable_dynamic_fn(x):
    f = function_1
    a = f(x)
    f = function_2
    b = f(x)
    return a + b


@program(T_USERFN, scalars(1, grad=False) + each(FG([1.0, 2.0])))
def variable_dynamic_whitelisted_fn(x):
    """``f = tf.identity``: a library function held in a variable (``torch.as_tensor``
    turns a Python number into a tensor as tf.identity does)."""
    f = torch.as_tensor
    return f(x)


@program(T_USERFN, [(function_1, 1), (function_1, I(2)), (function_2, FG(2.0))])
def dynamic_fn_with_kwargs(f, x):
    return f(x=x)


# ==== tests/composite_names_in_control_flow_test.py ======================================

@program(T_COMPOSITE, each(False, True, 0, 1, I(0), I(1), B(True), B(False), FG(-1.0)))
def if_basic_dict(a):
    x = {"a": a}
    if x["a"] > 0:
        x["b"] = 1
    else:
        x["b"] = -1
    return x


@program(T_COMPOSITE, each(False, True, I(0), I(1), B(True), FG(2.0)))
def if_basic_list(a):
    x = [a, 0]
    if x[0] > 0:
        x[1] = 1
    else:
        x[1] = -1
    return x


@program(T_COMPOSITE, each(0, 1, I(0), I(1), FG(2.0)))
def if_imbalanced(a):
    """TF: "'x['b']' must also be initialized in the else branch" for a tensor."""
    x = {"a": a}
    if x["a"] > 0:
        x["b"] = 1
    return x


@program(T_COMPOSITE, each(0, 1, I(0), I(1)))
def else_imbalanced(a):
    x = {"a": a}
    if x["a"] > 0:
        pass
    else:
        x["b"] = 1
    return x


@program(T_COMPOSITE, each(0, 1, I(0), I(1)))
def if_imbalanced_nested(a):
    x = {"a": {"a": a}}
    if x["a"]["a"] > 0:
        x["a"]["b"] = 1
    return x


@program(T_COMPOSITE, each(0, 1, I(0), I(1)))
def else_imbalanced_nested(a):
    x = {"a": {"a": a}}
    if x["a"]["a"] > 0:
        pass
    else:
        x["a"]["b"] = 1
    return x


@program(T_COMPOSITE, each(1, I(1), I(0)))
def if_buggy(a):
    """Incorrect code: both branches raise KeyError 'b'."""
    x = {"a": {"a": a}}
    if x["a"]["a"] > 0:
        x["b"]["a"] = 1
    else:
        x["b"]["a"] = -1
    return x


@program(T_COMPOSITE, each(1, 0, I(1), I(0)))
def if_imbalanced_buggy(a):
    """Incorrect code on one path: KeyError 'b' only when the branch runs."""
    x = {"a": {"a": a}}
    if x["a"]["a"] > 0:
        x["b"]["a"] = 1
    return x


@program(T_COMPOSITE, products((0, 1, 2, True, I(0), I(2)), (3, 7), (0,))
         + [(I(2), FG(3.0), 0)])
def while_basic_dict(x, a, b):
    y = {"a": a, "b": b}
    while x > 0:
        x -= 1
        y["a"] += 1
    return y


@program(T_COMPOSITE, products((0, 1, 2, True, I(0), I(2)), (3, 7), (0,)))
def while_basic_list(x, a, b):
    y = [a, b]
    while x > 0:
        x -= 1
        y[0] += 1
    return y


@program(T_COMPOSITE, products((0,), (3, 6, True, I(3), I(6), I(11))))
def while_state_only_dict(a, b):
    y = {"a": a, "b": b}
    while y["b"] <= 10:
        y["a"] += 1
        y["b"] *= 2
    return y


@program(T_COMPOSITE, products((0,), (3, 6, True, I(3), I(6), I(11))))
def while_state_only_list(a, b):
    y = [a, b]
    while y[1] <= 10:
        y[0] += 1
        y[1] *= 2
    return y


@program(T_COMPOSITE, each(5, 10, 11, I(5), I(10), I(11)))
def while_imbalanced(b):
    """TF: "loop must iterate at least once to initialize y['a']" for tensor 11."""
    y = {"b": b}
    while y["b"] <= 10:
        y["a"] = y["b"] + 1
        y["b"] *= 2
    return y


@program(T_COMPOSITE, products((0, 1, 2, True, I(0), I(2)), (1,), (1,), (1,)))
def for_basic_dict(n, x, a, b):
    y = {"a": a, "b": b}
    for i in range(n):
        x -= 1
        y["a"] += i
    return y


@program(T_COMPOSITE, products((0, 1, 2, True, I(0), I(2)), (1,), (1,), (1,)))
def for_basic_list(n, x, a, b):
    y = [a, b]
    for i in range(n):
        x -= 1
        y[0] += i
    return y


@program(T_COMPOSITE, products((0, 2, I(0), I(2)), (1,), (1,)))
def for_state_only_dict(n, a, b):
    y = {"a": a, "b": b}
    for _ in range(n):
        y["a"] += 1
    return y


@program(T_COMPOSITE, products((0, 2, I(0), I(2)), (1,), (1,)))
def for_state_only_list(n, a, b):
    y = [a, b]
    for _ in range(n):
        y[0] += 1
    return y


@program(T_COMPOSITE, products((0, 1, 2, I(1), I(2), I(0)), (0,)))
def for_imbalanced(n, x):
    """TF: "loop must iterate at least once to initialize y['a']" for tensor 0."""
    y = {}
    for i in range(n):
        x -= i
        y["a"] = x
    return y


# ==== tests/cond_basic_test.py ===========================================================

@program(T_COND, products((True, False, B(True), B(False)), (I(5),)))
def if_no_vars(c, v):
    """``v`` stands for a tf.Variable: a tensor argument written in place."""
    v.zero_()
    if c:
        v.add_(1)
    return v.clone()


@program(T_COND, products((True, False, B(True), B(False)), (I(5),)))
def if_else_no_vars(c, v):
    v.zero_()
    if c:
        v.add_(1)
    else:
        v.add_(2)
    return v.clone()


@program(T_COND, scalars(0, 1))
def if_one_var(n):
    i = 0
    if i < n:
        i += 1
    return i


@program(T_COND, scalars(0, 1))
def if_else_one_var(n):
    i = 0
    if i < n:
        i += 1
    else:
        i += 2
    return i


@program(T_COND, scalars(0, 1))
def if_two_vars(n):
    i = 0
    j = 1
    if i < n:
        i += 1
        j *= 10
    return i, j


@program(T_COND, scalars(0, 1))
def if_else_two_vars(n):
    i = 0
    j = 1
    if i < n:
        i += 1
        j *= 10
    else:
        i += 2
        j *= 20
    return i, j


@program(T_COND, each(True, False, B(True), B(False), I(1)))
def if_creates_var(c):
    """TF: "'i' must also be initialized in the else branch" for any tensor ``c``; eager
    gives 1 for True and UnboundLocalError for False."""
    if c:
        i = 1
    return i  # noqa: F821


@program(T_COND, each(True, False, B(True), B(False)))
def if_else_creates_var(c):
    if c:
        i = 1
    else:
        i = 2
    return i


@program(T_COND, each(True, False, B(True), B(False)))
def else_creates_var(c):
    if c:
        pass
    else:
        i = 2
    return i  # noqa: F821


@program(T_COND, each(True, False, B(True), B(False)))
def if_destroys_var(c):
    i = 1
    if c:
        del i
    return i  # noqa: F821


@program(T_COND, each(True, False, B(True), B(False)))
def if_else_destroys_var(c):
    i = 1
    if c:
        del i
    else:
        del i
    return i  # noqa: F821


@program(T_COND, each(True, False, B(True), B(False)))
def else_destroys_var(c):
    i = 2
    if c:
        pass
    else:
        del i
    return i  # noqa: F821


@program(T_COND, each(True, False, B(True), B(False)))
def if_returns_none(c):
    """TF: "'i' is None" for a tensor ``c``: None on one path, 0 on the other."""
    i = 0
    j = 1
    if c:
        i = None
        j = 2
    return i, j


@program(T_COND, each(True, False, B(True), B(False)))
def if_else_returns_none(c):
    if c:
        i = None
        j = 1
    else:
        i = None
        j = 2
    return i, j


@program(T_COND, each(True, False, B(True), B(False)))
def else_returns_none(c):
    i = 1
    j = 1
    if c:
        pass
    else:
        i = None
        j = 2
    return i, j


@program(T_COND, each(True, False, B(True), B(False), I(3)))
def if_local_var(c):
    i = 0
    if c:
        j = 1
        i = j + 1
    return i


@program(T_COND, each(True, False, B(True), B(False)))
def if_else_local_var(c):
    i = 0
    if c:
        j = 1  # noqa: F841
    else:
        j = 2
        i = j + 1
    return i


@program(T_COND, each(True, False, B(True), B(False)))
def if_locally_modified_var(c):
    i = 0
    j = 2
    if c:
        j = j + 1
        i = j + 1
    return i


_N12 = products((0, 1, I(0), I(1)), (0, 1, I(0), I(1)))


@program(T_COND, _N12)
def successive_ifs(n1, n2):
    s = 0
    i = 0
    if i < n1:
        s = s * 10 + i
        i += 1
    i = 0
    if i < n2:
        s = s * 10 + i
        i += 1
    return s


@program(T_COND, _N12)
def successive_if_elses(n1, n2):
    s = 0
    i = 0
    if i < n1:
        s = s * 10 + i
        i += 1
    else:
        s = s * 11 + i
        i += 2
    i = 0
    if i < n2:
        s = s * 10 + i
        i += 1
    else:
        s = s * 11 + i
        i += 2
    return s


@program(T_COND, _N12)
def cond_nested_ifs(n1, n2):
    i = 0
    l = 0  # noqa: E741
    if i < n1:
        j = 0
        s = 0
        if j < n2:
            s = s * 10 + i * j
            j += 1
        l = l * 1000 + s  # noqa: E741
        i += 1
    return l


@program(T_COND, products((True, False, B(True), B(False)), (True, False, B(True), B(False))))
def nested_if_temporarily_undefined_return(c1, c2):
    """TF: 'must also have a return' for tensors."""
    if c1:
        if c2:
            return 1
    return 2


@program(T_COND, _N12)
def nested_if_elses(n1, n2):
    i = 0
    l = 0  # noqa: E741
    if i < n1:
        j = 0
        s = 0
        if j < n2:
            s = s * 10 + i * j
            j += 1
        else:
            s = s * 11 + i * j
            j += 2
        l = l * 1000 + s  # noqa: E741
        i += 1
    else:
        j = 0
        s = 0
        if j < n2:
            s = s * 12 + i * j
            j += 3
        else:
            s = s * 13 + i * j
            j += 4
        l = l * 2000 + s  # noqa: E741
        i += 1
    return l


# ==== tests/early_return_test.py =========================================================

@program(T_EARLY, scalars(0, 1))
def return_with_default(x):
    if x > 0:
        print("x", x, file=sys.stderr)
        return x
    return x * x


@program(T_EARLY, each(True, False, 1, 0, B(True), B(False)))
def return_dependent_on_local(c):
    t = torch.tensor(1)
    if c:
        return t
    t = torch.stack([t, t])
    return t.sum()


@program(T_EARLY, scalars(0, 3, 5))
def return_possibly_undefined(x):
    """TF: 'else branch must also have a return' for a tensor; eager returns None for 5."""
    if x > 0:
        if x < 5:
            return x
    else:
        return x * x * x


@program(T_EARLY, scalars(-1, 3, 6))
def early_nested_ifs(x):
    if x > 0:
        if x < 5:
            return x
        else:
            return x * x
    else:
        return x * x * x


@program(T_EARLY, products((True, False, B(True), B(False)), (True, False), (0, 2, I(0), I(2))))
def possible_return_before_loop(c1, c2, n):
    if c1:
        if c2:
            return 1
    for _ in range(n):
        pass
    return 2


@program(T_EARLY, scalars(0, 3, 5))
def nested_ifs_and_context_managers(x):
    with scope():
        if x > 0:
            if x < 5:
                with scope():
                    return x
            else:
                return x * x
        else:
            return x * x * x


@program(T_EARLY, each(FG(0.0), FG(3.0), FG(5.0), 3))
def nested_ifs_and_no_grad(x):
    """The same with ``torch.no_grad()`` as the context manager (grad flags differ per
    path: ``x`` keeps requires_grad, ``x * x`` made under no_grad does not)."""
    with torch.no_grad():
        if x > 0:
            if x < 5:
                return x
            else:
                return x * x
        else:
            return x * x * x


@program(T_EARLY, scalars(0, 3, 5))
def unreachable_return(x):
    with scope():
        if x > 0:
            if x < 5:
                with scope():
                    return x
            else:
                return x * x
        else:
            return x * x * x
    return x * x * x * x


@program(T_EARLY, scalars(0, 1))
def return_with_default_in_contexmanager(x):
    with scope():
        if x > 0:
            return 1
        return 0


@program(T_EARLY, scalars(0, 1))
def return_in_try_with_finally(x):
    try:
        if x > 0:
            return 1
        else:
            return 0
    finally:
        x = x + 1


@program(T_EARLY, scalars(0, 1))
def return_with_default_in_try_with_finally(x):
    try:
        if x > 0:
            return 1
        return 0
    finally:
        x = x + 1


@program(T_EARLY, scalars(0, 1))
def return_in_finally(x):
    try:
        return 2
    finally:
        if x > 0:
            return 1  # noqa: B012
        else:
            return 0  # noqa: B012


@program(T_EARLY, scalars(0, 1))
def return_with_default_in_finally(x):
    try:
        return 2
    finally:
        if x > 0:
            return 1  # noqa: B012
        return 0  # noqa: B012


@program(T_EARLY, scalars(0, 1))
def return_in_finally_default_in_try(x):
    try:
        if x > 0:
            return 0
    finally:
        return 1  # noqa: B012


def _raising_helper():
    raise ValueError()


@program(T_EARLY, [()])
def raise_during_return_caught():
    try:
        return _raising_helper()
    except ValueError:
        pass
    return 1


@program(T_EARLY, each(True, False, B(True), B(False)))
def raise_during_return_caught_in_tail_branch(c):
    if c:
        return 2
    try:
        return _raising_helper()
    except ValueError:
        pass
    return 1


# ==== tests/ext_slice_test.py ============================================================

@program(T_EXTSLICE, each(torch.eye(3), torch.arange(12).reshape(3, 4), FG([[1.0, 2.0], [3.0, 4.0]])))
def basic_ext_slice(n):
    return n[:, :], n[0, :], n[:, 0]


@program(T_EXTSLICE, each(torch.eye(3), torch.arange(4), FG([1.0, 2.0, 4.0])))
def basic_expand_dims(n):
    return n[:, None] - n[None, :]


@program(T_EXTSLICE, [(lambda x: x, torch.eye(3)), (torch.exp, FG([0.0, 1.0]))])
def slice_of_application(n, x):
    return n(x)[:, None] - n(x)[None, :]


# ==== tests/generator_test.py ============================================================

@program(T_GEN, [()])
def basic_generator():
    yield 1


@program(T_GEN, each(0, 3, I(3)))
def generator_in_for(n):
    for i in range(n):
        yield i


@program(T_GEN, each(0, 3, I(3)))
def generator_in_while(n):
    i = 0
    while i < n:
        i += 1
        yield i


# ==== tests/logical_expression_test.py ===================================================

_BOOL3 = [(False, True, False), (False, False, False), (True, True, True), (True, False, True),
          (False, True, True), (False, False, True)]
_BOOL3_T = [tuple(B(v) for v in c) for c in _BOOL3]


@program(T_LOGICAL, _BOOL3 + _BOOL3_T + [(I(0), I(0), I(5)), (Fl(0.0), FG(2.0), FG(3.0))])
def composite_ors_with_callable(x, y, z):
    z1 = lambda: z  # noqa: E731
    return x or y or z1()


@program(T_LOGICAL, _BOOL3 + _BOOL3_T + [(I(0), I(3), I(5)), (0, I(0), I(2))])
def composite_ors(x, y, z):
    return x or y or z


@program(T_LOGICAL, _BOOL3 + _BOOL3_T + [(I(1), I(3), I(5)), (I(1), 0, I(2))])
def composite_ands(x, y, z):
    return x and y and z


@program(T_LOGICAL, _BOOL3 + _BOOL3_T)
def composite_mixed(x, y, z):
    return x or y or z and y and z


_PAIRS = [(1, 1), (1, 2), (I(1), I(1)), (I(1), I(2)), (I(1), 2), (Fl(1.0), I(1)),
          (Fl([1.0, 2.0]), Fl([1.0, 3.0]))]


@program(T_LOGICAL, _PAIRS)
def equality(x, y):
    return x == y


@program(T_LOGICAL, _PAIRS)
def inequality(x, y):
    return x != y


@program(T_LOGICAL, [(1, 1, 2), (1, 1, 1), (I(1), I(1), I(2)), (I(1), I(1), I(1)),
                     (I(1), I(2), I(2))])
def multiple_equality(x, y, z):
    return x == y == z


_PERMS = [(1, 2, 3), (2, 1, 3), (3, 2, 1), (3, 1, 2), (1, 3, 2), (2, 3, 1)]


@program(T_LOGICAL, _PERMS + [tuple(I(v) for v in c) for c in _PERMS] + [(Fl(1.0), 2, I(3))])
def comparison(x, y, z):
    return x < y and y < z


# ==== tests/loop_basic_test.py ===========================================================

@program(T_LOOP, products((0, 1, 2, I(0), I(2), I32(2)), (I(7),)))
def while_no_vars(n, v):
    """``v`` stands for a tf.Variable: read and written in place in the loop test/body."""
    v.zero_()
    while v < n:
        v.add_(1)
    return v.clone()


@program(T_LOOP, products(([], [1], [1, 2], I([]), I([1]), I([1, 2])), (I(7),)))
def for_no_vars(l, v):  # noqa: E741
    v.zero_()
    for _ in l:
        v.add_(1)
    return v.clone()


@program(T_LOOP, scalars(0, 1, 2, 200, grad=False))
def while_one_var(n):
    i = 0
    while i < n:
        i = i * 10 + 1
    return i


@program(T_LOOP, lists([], [1], [1, 2]) + each(Fl([0.5, 1.5])))
def for_one_var(l):  # noqa: E741
    i = 0
    for i in l:
        pass
    return i


@program(T_LOOP, scalars(0, 1, 2, grad=False))
def while_two_vars(n):
    s = 0
    i = 0
    while i < n:
        s = s * 10 + i
        i += 1
    return s


@program(T_LOOP, lists([], [1], [1, 2]) + each(FG([1.0, 2.0])))
def for_two_vars(l):  # noqa: E741
    s = 0
    for i in l:
        s = s * 10 + i
    return s


@program(T_LOOP, products((0, 2, 4, I(0), I(2), I(4)), (0, 2)) + [(I(4), I(1))])
def while_else(x, y):
    """TF: NotImplementedError 'while/else'."""
    s = 0
    while x > 0:
        x -= 1
        if x > y:
            break
        s += x
    else:
        s = -100
    return s


@program(T_LOOP, products(([], [1, 2], [3]), ([], [1, 2]))
         + products((I([]), I([1, 2]), I([3, 4])), (I([]), I([1, 2]))))
def for_else(l1, l2):
    """TF: NotImplementedError 'for/else'."""
    s = 0
    for c in l1:
        if c in l2:
            break
        s = s * 10 + c
    else:
        s = -1000
    return s


@program(T_LOOP, scalars(0, 1, 2, grad=False))
def while_creates_var(n):
    """TF: 'loop must iterate at least once' for tensor 0 (eager: UnboundLocalError)."""
    i = 0
    while i < n:
        i = n + 1
        j = i + 1
    return i, j  # noqa: F821


@program(T_LOOP, lists([], [1], [1, 2]))
def for_creates_var(l):  # noqa: E741
    for i in l:
        pass
    return i  # noqa: F821


@program(T_LOOP, products((0, 1, 2, I(0), I(2)), (0, 2, I(0), I(2))))
def successive_while_loops(n1, n2):
    s = 0
    i = 0
    while i < n1:
        s = s * 10 + i
        i += 1
    i = 0
    while i < n2:
        s = s * 10 + i
        i += 1
    return s


@program(T_LOOP, products(([], [1, 2]), ([], [1]))
         + products((I([]), I([1, 2])), (I([]), I([1]))))
def successive_for_loops(l1, l2):
    s = 0
    for i in l1:
        s = s * 10 + i
    for i in l2:
        s = s * 10 + i
    return s


@program(T_LOOP, products((0, 1, 2, I(0), I(2)), (0, 2, I(0), I(2))))
def nested_while_loops(n1, n2):
    """``tf.TensorArray`` -> a Python list grown by the outer loop."""
    i = 0
    l = []  # noqa: E741
    while i < n1:
        j = 0
        s = 0
        while j < n2:
            s = s * 10 + i * j
            j += 1
        l.append(s)
        i += 1
    return l


@program(T_LOOP, each([[]], [[], []], [[1]], [[1], [2]], [[1, 2], [3, 4]],
                      [[], [1], [1, 2]], [[], I([]), [1], I([1]), [1, 2]],
                      I([[1, 2], [3, 4]]), I([[1], [2]]), torch.zeros(1, 0, dtype=torch.int64),
                      I32([[1, 2]])))
def nested_for_loops(m):
    l = []  # noqa: E741
    for i in m:
        s = 0
        for j in i:
            s = s * 10 + j
        l.append(s)
    return l


# ==== tests/loop_control_flow_test.py ====================================================

_L5 = ([], [1], [1, 2], [1, 2, 3], [1, 2, 3, 4])
_LCF_LISTS = (each(*(list(v) for v in _L5)) + each(*(I32(v) for v in _L5))
              + each(*(LT(v) for v in _L5[1:3])))


@program(T_LOOPCF, _LCF_LISTS)
def continue_in_single_for(l):  # noqa: E741
    s = 0
    for c in l:
        if c % 2 > 0:
            continue
        s += c
    return s


_N5 = [(v,) for v in (0, 1, 2, 3, 4)] + [(I32(v),) for v in (0, 1, 4)] + [(I(3),)]


@program(T_LOOPCF, _N5)
def continue_in_single_while(x):
    s = 0
    while x > 0:
        x -= 1
        if x % 2 > 0:
            continue
        s += x
    return s


_M = ([[], []], [[1], [2]], [[1, 2], [3, 4]], [[1, 2, 3], [4, 5, 6]])
_NESTED_LISTS = (each(*(list(v) for v in _M)) + each(*(I32(v) for v in _M[1:]))
                 + each(*([LT(r) for r in v] for v in _M[1:3])))


@program(T_LOOPCF, _NESTED_LISTS)
def continue_in_inner_for(m):
    s = 0
    for l in m:  # noqa: E741
        for c in l:
            if c % 2 > 0:
                continue
            s += c
    return s


_XY = products((0, 1, 3), (0, 2, 4)) + products((I32(0), I32(3)), (I32(0), I32(4))) + [(3, I32(4))]


@program(T_LOOPCF, _XY)
def continue_in_inner_while(x, y):
    s = 0
    while x > 0:
        x -= 1
        while y > 0:
            y -= 1
            if (x + y) % 2 > 0:
                continue
            s += x + y
    return s


@program(T_LOOPCF, _LCF_LISTS)
def break_in_single_for(l):  # noqa: E741
    s = 0
    for c in l:
        if c % 2 > 0:
            break
        s += c
    return s


@program(T_LOOPCF, _LCF_LISTS)
def unconditional_return_in_single_for(l):  # noqa: E741
    """TF: 'must iterate at least once to initialize' for an empty tensor."""
    s = 0
    for c in l:
        s += c
        return s
    return s


@program(T_LOOPCF, _LCF_LISTS)
def effectively_unconditional_return_in_single_for(l):  # noqa: E741
    s = 0
    for c in l:
        s += c
        if c % 2 > 0:
            return s
        else:
            return -s
    return s


@program(T_LOOPCF, _N5)
def unconditional_return_in_single_while(x):
    s = 0
    while x > 0:
        x -= 1
        s += x
        return s
    return s


@program(T_LOOPCF, _N5)
def effectively_unconditional_return_in_single_while(x):
    s = 0
    while x > 0:
        x -= 1
        s += x
        if x % 2 > 0:
            return s
        else:
            return -s
    return s


@program(T_LOOPCF, _N5)
def break_in_single_while(x):
    s = 0
    while x > 0:
        x -= 1
        if x % 2 > 0:
            break
        s += x
    return s


@program(T_LOOPCF, _NESTED_LISTS)
def break_in_inner_for(m):
    s = 0
    for l in m:  # noqa: E741
        for c in l:
            if c % 2 > 0:
                break
            s += c
    return s


@program(T_LOOPCF, _XY)
def break_in_inner_while(x, y):
    s = 0
    while x > 0:
        x -= 1
        while y > 0:
            y -= 1
            if ((x + y) % 2) == 0:
                break
            s += x + y
    return s


@program(T_LOOPCF, _NESTED_LISTS)
def break_continue_in_inner_for(m):
    s = 0
    for l in m:  # noqa: E741
        for c in l:
            if c % 2 > 0:
                break
            else:
                continue
            s += c  # noqa: F841 - unreachable, as in TF's program
    return s


@program(T_LOOPCF, _XY)
def break_continue_in_inner_while(x, y):
    s = 0
    while x > 0:
        x -= 1
        while y > 0:
            y -= 1
            if (x + y) % 2 > 0:
                break
            else:
                continue
            s += x + y
    return s


@program(T_LOOPCF, products((0, 3, I(0), I(3), FG(3.0)), (1, 4, I(4))))
def break_followed_by_cond_in_single_for(x, y):
    for i in range(y):
        if i == 2:
            break
        if x > 0:
            x = x - 1
    return x


@program(T_LOOPCF, _N5)
def break_followed_by_cond_in_single_while(x):
    while x > 0:
        if x == 2:
            break
        if x > 0:
            x -= 1
    return x


@program(T_LOOPCF, _N5)
def multiple_breaks_in_single_while(n):
    s = 1
    i = 0
    while i < n:
        i += 1
        if i > 10 * n:
            break
        if i == n:
            break
        s = s * 10 + i
    return i, s


# ==== tests/loop_control_flow_illegal_cases_test.py ======================================
# TF raises "not supported in Python for" / "condition of while loop started as non-Tensor,
# then changed to Tensor": a tensor break/return inside a loop over Python values.

@program(T_LOOPCF_ILL, each([1], [1, 2], [2, 4, 5], [2, 4]))
def tf_break_in_py_for(l):  # noqa: E741
    s = 0
    for c in l:
        if torch.gt(torch.tensor(c % 2), 0):
            break
        s += c
    return s


@program(T_LOOPCF_ILL, each([1], [1, 2], [2, 3]))
def tf_return_in_py_for(l):  # noqa: E741
    s = 0
    for c in l:
        if torch.gt(torch.tensor(c % 2), 0):
            return s
        else:
            return s
        s += c  # noqa: F841 - unreachable, as in TF's program
    return s


@program(T_LOOPCF_ILL, each(1, 2, 3, 6))
def tf_break_in_py_while(x):
    s = 0
    while x > 0:
        x -= 1
        if torch.gt(torch.tensor(x % 2), 0):
            break
        s += x
    return s


@program(T_LOOPCF_ILL, each(1, 2, 3))
def tf_return_in_py_while(x):
    s = 0
    while x > 0:
        x -= 1
        if torch.gt(torch.tensor(x % 2), 0):
            return s
        else:
            return s
        s += x  # noqa: F841 - unreachable, as in TF's program
    return s


@program(T_LOOPCF_ILL, each(Fl([1.0, 2.0, 3.0]), Fl([2.0, 4.0, 5.0]), Fl([2.0, 4.0])))
def tensor_break_in_py_for_over_unbind(x):
    """The same over a tensor's rows made a Python list (``x.unbind()``)."""
    s = 0.0
    for c in x.unbind():
        if c % 2 > 0:
            break
        s += c
    return s


# ==== tests/loop_created_variables_test.py ===============================================

@program(T_CREATED, scalars(1, 2, 0, grad=False))
def while_creates_var_static_shape(n):
    i = 0
    while i < n:
        v = torch.zeros([1, 2, 3])
        i += 1
    return v  # noqa: F821


@program(T_CREATED, scalars(1, 2, 0, grad=False))
def while_creates_var_dynamic_shape(n):
    i = 0
    while i < n:
        v = torch.zeros([1, int(torch.randint(i, i + 1, ())), 2])
        i += 1
    return v  # noqa: F821


@program(T_CREATED, scalars(1, 2, 0, grad=False))
def while_var_dynamic_shape_defined_before_loop(n):
    """``while_creates_var_dynamic_shape`` with ``v`` defined before the loop: only the
    size read from a tensor (``int(torch.randint(...))``) is left."""
    i = 0
    v = torch.zeros([1, 0, 2])
    while i < n:
        v = torch.zeros([1, int(torch.randint(i, i + 1, ())), 2])
        i += 1
    return v


@program(T_CREATED, scalars(1, 2, 0, grad=False))
def while_creates_var_dynamic_rank(n):
    i = 0
    while i < n:
        v = torch.zeros(list(range(int(torch.randint(i, i + 1, ())))))
        i += 1
    return v  # noqa: F821


@program(T_CREATED, scalars(1, 2, 0, grad=False))
def while_creates_var_dynamic_shape_py_init_var(n):
    i = 0
    while i < n:
        v = torch.arange(i)
        i += 1
    return v  # noqa: F821


@program(T_CREATED, scalars(1, 2, 0, grad=False))
def while_creates_nested_var_static_shape(n):
    i = 0
    while i < n:
        v = {"a": torch.zeros([1, 2, 3]), "b": torch.ones([1, 2, 3])}
        i += 1
    return v["a"], v["b"]  # noqa: F821


@program(T_CREATED, scalars(1, 2, 0, grad=False))
def while_creates_nested_var_dynamic_shape(n):
    i = 0
    while i < n:
        v = {
            "a": torch.zeros([1, int(torch.randint(i, i + 1, ()))]),
            "b": torch.ones([int(torch.randint(i, i + 1, ())), 2]),
        }
        i += 1
    return v["a"], v["b"]  # noqa: F821


@program(T_CREATED, scalars(1, 2, 0, grad=False))
def while_creates_nested_var_dynamic_rank(n):
    i = 0
    while i < n:
        v = {
            "a": torch.ones(list(range(int(torch.randint(i, i + 1, ()))))),
            "b": torch.ones([1, 2, 3]),
        }
        i += 1
    return v["a"], v["b"]  # noqa: F821


# ==== tests/loop_scoping_test.py =========================================================

@program(T_SCOPING, lists([], [1], [1, 2]) + each(range(0), range(2), torch.arange(0),
                                                  torch.arange(2), FG([1.0, 2.0])))
def for_with_local_var(l):  # noqa: E741
    s = 0
    for i in l:
        x = i + 2
        s = s * 10 + x
    return s


@program(T_SCOPING, scalars(0, 1, 2, grad=False))
def while_with_local_var(x):
    s = 0
    while x > 0:
        y = x + 2
        s = s * 10 + y
        x -= 1
    return s


@program(T_SCOPING, each([1], [1, 2], I([1, 2]), FG([1.0, 2.0])))
def for_with_lambda_iter(l):  # noqa: E741
    """Late binding: every lambda sees the last ``i``."""
    fns = []
    results = []
    for i in l:
        fns.append(lambda: i + i)
    for f in fns:
        results.append(f())
    return results


@program(T_SCOPING, each([1], [1, 2], I([1, 2]), FG([1.0, 2.0])))
def for_with_lambda_iter_local_var(l):  # noqa: E741
    fns = []
    results = []
    for i in l:
        fns.append(lambda i=i: i + i)
    for f in fns:
        results.append(f())
    return results


@program(T_SCOPING, lists([], [1], [1, 2], [3, 3]))
def for_initializes_local_var(l):  # noqa: E741
    s = 0
    for i in l:
        if i == l[0]:
            x = 0
        else:
            x += 1  # noqa: F821
        s = s * 10 + x
    return s


@program(T_SCOPING, scalars(0, 1, 2, grad=False))
def while_initializes_local_var(x):
    s = 0
    while x > 0:
        if x > 0:
            y = 0
        else:
            y += 1  # noqa: F821
        s = s * 10 + y
        x -= 1
    return s


@program(T_SCOPING, lists([1], [1, 2], []))
def for_defines_var(l):  # noqa: E741
    for i in l:
        x = i + 2
    return x  # noqa: F821


@program(T_SCOPING, scalars(1, 2, 0, grad=False))
def while_defines_var(x):
    while x > 0:
        y = x + 2
        x -= 1
    return y  # noqa: F821


@program(T_SCOPING, products((1, 2, 0, I(2), I(0)), (range, torch.arange)))
def for_defines_iterate(n, fn):
    """TF deviates from Python for ``tf.range(0)`` (returns (0, 0)); eager raises."""
    s = 0
    for i in fn(n):
        s = s * 10 + i
    return i, s  # noqa: F821


@program(T_SCOPING, products(([], [1], [1, 2]), (list, I))
         + products((0, 1, 2, I(0), I(2)), (range, torch.arange)))
def for_reuses_iterate(n, fn):
    i = 7
    s = 0
    for i in fn(n):
        s = s * 10 + i
    return i, s


@program(T_SCOPING, products(([], [1], [1, 2]), (list, I))
         + products((0, 1, 2, I(0), I(2)), (range, torch.arange)))
def for_alters_iterate(n, fn):
    i = 7
    s = 0
    for i in fn(n):
        i = 3 * i + 1
        s = s * 10 + i
    return i, s


# ==== tests/loop_with_function_call_test.py ==============================================

def global_fn(x):
    return x * 2


class CallTestClass:
    def method(self, x):
        return x * 4


_FNS = (global_fn, lambda x: x * 1, CallTestClass().method, abs)


@program(T_LOOPCALL, products((0, 2, I(0), I(2)), _FNS))
def while_with_call_in_cond(n, fn):
    i = 0
    s = 0
    while i < fn(n):
        s = s * 10 + i
        i += 1
    return s


@program(T_LOOPCALL, products(([], [1, 2], I([]), I([1, 2])), _FNS[:3] + (torch.abs,))[1:]
         + products((0, 2, I(0), I(2)), (range, torch.arange)))
def for_with_call_in_target(l, fn):  # noqa: E741
    s = 0
    for i in fn(l):
        s = s * 10 + i
    return s


@program(T_LOOPCALL, scalars(0, 1, 2, grad=False))
def while_with_local_call_in_cond(n):
    def local_fn(x):
        return x * 3

    i = 0
    s = 0
    while i < local_fn(n):
        s = s * 10 + i
        i += 1
    return s


@program(T_LOOPCALL, lists([], [1], [1, 2]))
def for_with_local_call_in_target(l):  # noqa: E741
    def local_fn(l):  # noqa: E741
        return l * 1

    s = 0
    for i in local_fn(l):
        s = s * 10 + i
    return s


@program(T_LOOPCALL, products((0, 2, I(0), I(2)), _FNS))
def while_with_call(n, fn):
    i = 0
    s = 0
    while i < n:
        s = s * 10 + fn(i)
        i += 1
    return s


@program(T_LOOPCALL, products(([], [1, 2], I([]), I([1, 2])), _FNS))
def for_with_call(l, fn):  # noqa: E741
    s = 0
    for i in l:
        s = s * 10 + fn(i)
    return s


@program(T_LOOPCALL, scalars(0, 1, 2, grad=False))
def while_with_local_call(n):
    def local_fn(x):
        return x * 3

    i = 0
    s = 0
    while i < n:
        s = s * 10 + local_fn(i)
        i += 1
    return s


@program(T_LOOPCALL, lists([], [1], [1, 2]))
def for_with_local_call(l):  # noqa: E741
    def local_fn(x):
        return x * 3

    s = 0
    for i in l:
        s = s * 10 + local_fn(i)
    return s


@program(T_LOOPCALL, scalars(0, 1, 2, grad=False))
def while_with_closure_call(n):
    """The inner function reads the loop variable ``i`` through its closure cell."""
    i = 0

    def i_via_closure():
        return i + 2

    i = 0
    s = 0
    while i < n:
        s = s * 10 + i_via_closure()
        i += 1
    return s


@program(T_LOOPCALL, lists([], [1], [1, 2]))
def for_with_closure_call(l):  # noqa: E741
    i = 0

    def i_via_closure():
        return i + 2

    s = 0
    for i in l:
        s = s * 10 + i_via_closure()
    return s, i


@program(T_LOOPCALL, scalars(0, 1, 2, grad=False))
def while_with_lambda_closure_call(n):
    i = 0
    s = 0
    i_via_closure = lambda: i + 2  # noqa: E731
    while i < n:
        s = s * 10 + i_via_closure()
        i += 1
    return s


@program(T_LOOPCALL, lists([], [1], [1, 2]))
def for_with_lambda_closure_call(l):  # noqa: E741
    i = 0
    s = 0
    i_via_closure = lambda: i + 2  # noqa: E731
    for i in l:
        s = s * 10 + i_via_closure()
    return s, i


@program(T_LOOPCALL, scalars(0, 1, 2, grad=False))
def while_with_method_closure_call(n):
    i = 0

    class Callable:
        def __call__(self):
            return i

    i_via_closure = Callable()
    i = 0
    s = 0
    while i < n:
        s = s * 10 + i_via_closure()
        i += 1
    return s


@program(T_LOOPCALL, lists([], [1], [1, 2]))
def for_with_method_closure_call(l):  # noqa: E741
    i = 0

    class Callable:
        def __call__(self):
            return i

    i_via_closure = Callable()
    i = 0
    s = 0
    for i in l:
        s = s * 10 + i_via_closure()
    return s, i


# ==== tests/loop_with_variable_type_test.py ==============================================
# (``set_loop_options(shape_invariants=...)`` has no PyTorch counterpart: tograph makes a
# dimension that changes across iterations dynamic by itself.)

@program(T_VARTYPE, scalars(0, 1, 2, grad=False))
def while_with_variable_shape_growing_vector(n):
    v = torch.tensor([0, 0])
    i = 0
    while i < n:
        v = torch.cat((v, torch.tensor([i])), 0)
        i += 1
    return v


@program(T_VARTYPE, each(range(0), range(2), torch.arange(0), torch.arange(2), [3, 4]))
def for_with_variable_shape_growing_vector(l):  # noqa: E741
    v = torch.tensor([0, 0])
    for i in l:
        v = torch.cat((v, torch.tensor([i])), 0)
    return v


@program(T_VARTYPE, scalars(0, 1, 2, grad=False))
def while_with_variable_shape_growing_matrix_rows(n):
    m = torch.tensor([[0]])
    i = 0
    while i < n:
        m = torch.cat((m, torch.tensor([[i]])), 0)
        i += 1
    return m


@program(T_VARTYPE, each(range(0), range(2), torch.arange(0), torch.arange(2)))
def for_with_variable_shape_growing_matrix_rows(l):  # noqa: E741
    m = torch.tensor([[0]])
    for i in l:
        m = torch.cat((m, torch.tensor([[i]])), 0)
    return m


@program(T_VARTYPE, scalars(0, 1, 2, grad=False))
def while_with_variable_shape_growing_matrix_cols(n):
    m = torch.tensor([[0, 0]])
    i = 0
    while i < n:
        m = torch.cat((m, torch.tensor([[i]])), 1)
        i += 1
    return m


@program(T_VARTYPE, each(range(0), range(2), torch.arange(0), torch.arange(2)))
def for_with_variable_shape_growing_matrix_cols(l):  # noqa: E741
    m = torch.tensor([[0, 0]])
    for i in l:
        m = torch.cat((m, torch.tensor([[i]])), 1)
    return m


@program(T_VARTYPE, scalars(0, 1, 2, grad=False))
def while_with_variable_shape_growing_matrix(n):
    m = torch.tensor([[0, 0], [0, 0]])
    i = 0
    while i < n:
        m = F.pad(m, (1, 1, 1, 1), value=i)
        i += 1
    return m


@program(T_VARTYPE, each(range(0), range(2), torch.arange(0), torch.arange(2)))
def for_with_variable_shape_growing_matrix(l):  # noqa: E741
    m = torch.tensor([[0, 0], [0, 0]])
    for i in l:
        m = F.pad(m, (1, 1, 1, 1), value=i)
    return m


@program(T_VARTYPE, scalars(0, 1, 2, 3, grad=False))
def while_with_variable_shape_inside_if(n):
    v = torch.tensor([0, 0])
    i = 0
    if n > 1:
        while i < n:
            v = torch.cat((v, torch.tensor([i])), 0)
            i += 1
    else:
        v = torch.tensor([1, 2, 3])
    return v


@program(T_VARTYPE, scalars(0, 1, 2, 3, grad=False))
def for_with_variable_shape_inside_if(n):
    v = torch.tensor([0, 0])
    if n > 1:
        for i in range(n):
            v = torch.cat((v, torch.tensor([i])), 0)
            i += 1
    else:
        v = torch.tensor([1, 2, 3])
    return v


VarNT = collections.namedtuple("Test", ["var"])


@program(T_VARTYPE, scalars(0, 1, 2, 3, grad=False))
def for_with_nested_variable_shape_inside_if(n):
    t = VarNT(var=torch.tensor([0]))
    v = torch.tensor([0, 0])
    if n > 1:
        for i in range(n):
            v = torch.cat((v, torch.tensor([i])), 0)
            t = VarNT(var=t.var + 1)
            i += 1
    else:
        v = torch.tensor([1, 2, 3])
        t = VarNT(var=torch.tensor([3]))
    return v, t


@program(T_VARTYPE, scalars(0, 1, 2, 5, grad=False))
def while_with_variable_shape_and_break(n):
    v = torch.tensor([0, 0])
    i = 0
    if n > 1:
        while i < n:
            v = torch.cat((v, torch.tensor([i])), 0)
            i += 1
            if i > 3:
                break
    else:
        v = torch.tensor([1, 2, 3])
    return v


@program(T_VARTYPE, scalars(0, 1, 2, 5, grad=False))
def for_with_variable_shape_and_break(n):
    v = torch.tensor([0, 0])
    if n > 1:
        for i in range(n):
            v = torch.cat((v, torch.tensor([i])), 0)
            i += 1
            if i > 3:
                break
    else:
        v = torch.tensor([1, 2, 3])
    return v


def _sparse():
    return torch.sparse_coo_tensor([[0, 1], [0, 1]], [1, 2], (3, 3))


with warnings.catch_warnings():   # torch warns once per process about sparse invariant
    warnings.simplefilter("ignore")   # checks; taken here so that no call sees it
    _sparse()


@program(T_VARTYPE, scalars(0, 1, 2, grad=False))
def while_with_composite_tensor_shape_invariant(n):
    """A sparse tensor (TF's SparseTensor) whose rank grows in the loop; returned dense."""
    v = _sparse()
    i = 0
    while i < n:
        v = v.unsqueeze(0)
        i += 1
    return v.to_dense()


@program(T_VARTYPE, each(range(0), range(2), torch.arange(0), torch.arange(2)))
def for_with_composite_tensor_shape_invariant(l):  # noqa: E741
    v = _sparse()
    for _ in l:
        v = v.unsqueeze(0)
    return v.to_dense()


# ==== tests/loop_with_variable_type_illegal_cases_test.py ================================
# TF's programs loop on ``tf.constant(True)`` forever (TF raises before running); here the
# loop test is an argument so that eager ends, keeping what each program pins down.

@program(T_VARTYPE_ILL, each(I(0), I(3), 0, 3))
def while_with_variable_py_type(x):
    """The loop test starts as a Python bool and becomes a tensor (TF: 'condition of while
    loop started as non-Tensor, then changed to Tensor')."""
    n = torch.tensor(0, dtype=torch.int32)
    c = True
    while c:
        n += 1
        c = n < x
    return n


@program(T_VARTYPE_ILL, each(I(0), I(2)))
def while_with_variable_dtype(x):
    """TF: "'n' has dtype int32 before the loop, but dtype float32 after"."""
    n = torch.tensor(0, dtype=torch.int32)
    while x > 0:
        n = torch.tensor(0, dtype=torch.float32)
        x = x - 1
    return n


@program(T_VARTYPE_ILL, each(I(0), I(2)))
def while_with_variable_dtype_and_early_stopping(x):
    n = torch.tensor(0, dtype=torch.int32)
    while x > 0:
        n = torch.tensor(0, dtype=torch.float32)
        break
    return n


@program(T_VARTYPE_ILL, each(I([1, 2, 3]), I([]), torch.arange(3), [1, 2, 3]))
def for_with_variable_dtype(l):  # noqa: E741
    n = torch.tensor(0, dtype=torch.int32)
    for _ in l:
        n = torch.tensor(0, dtype=torch.float32)
    return n


@program(T_VARTYPE_ILL, each(I([1, 2, 3]), I([]), [1, 2, 3]))
def for_with_variable_dtype_and_early_stopping(l):  # noqa: E741
    n = torch.tensor(0, dtype=torch.int32)
    for _ in l:
        n = torch.tensor(0, dtype=torch.float32)
        break
    return n


@program(T_VARTYPE_ILL, each(I(0), I(2), 2))
def while_with_variable_shape(x):
    """TF: "'t' has shape (1,) before the loop, but shape (2,) after"."""
    t = torch.tensor([1])
    while x > 0:
        t = torch.tensor([1, 1])
        x = x - 1
    return t


@program(T_VARTYPE_ILL, each(I([1, 2, 3]), I([]), [1, 2, 3]))
def for_with_variable_shape(l):  # noqa: E741
    t = torch.tensor([1])
    for _ in l:
        t = torch.tensor([1, 1])
    return t


@program(T_VARTYPE_ILL, each(I(0), I(2), 2))
def while_with_shape_erasure(x):
    """TF: "'t' has shape (1,) before the loop, but shape (None,) after"."""
    t = torch.tensor([1])
    while x > 0:
        t = torch.arange(int(torch.randint(2, 3, ())))
        x = x - 1
    return t


@program(T_VARTYPE_ILL, each(I([1, 2, 3]), I([]), [1, 2, 3]))
def for_with_shape_erasure(l):  # noqa: E741
    t = torch.tensor([1])
    for _ in l:
        t = torch.arange(int(torch.randint(2, 3, ())))
    return t


@program(T_VARTYPE_ILL, each(I(0), I(2), 0, 2))
def while_with_variable_structure(x):
    """TF: "'s' does not have the same nested structure" (a dict becomes a tensor)."""
    s = {"a": torch.tensor(0)}
    while x > 0:
        s = torch.tensor(7.0)
        x = x - 1
    return s


@program(T_VARTYPE_ILL, each(I([1, 2, 3]), I([]), torch.arange(3), [1, 2, 3]))
def for_with_variable_structure(l):  # noqa: E741
    """A list that grows by one element per iteration (``s = s + [...]``)."""
    s = [torch.tensor(0)]
    for _ in l:
        s = s + [torch.tensor(0)]
    return s


# ==== tests/nested_control_flow_test.py ==================================================

@program(T_NESTED, products((-1, 1, I32(-1), I32(1)), (-1, 1, I32(-1), I32(1))))
def independent_ifs(x, y):
    z = 0
    if x > 0:
        if y > 0:
            z = x + y
    return z


@program(T_NESTED, scalars(-1, 1))
def dependent_inner_if(x):
    y = 0
    if x > 0:
        y = -2 * x
        if y > 0:
            x = -3 * x
    else:
        y = 4 * x
    return x, y


@program(T_NESTED, scalars(-1, 1, 4))
def dependent_imbalanced_inner_if(x):
    y = 0
    if x > 0:
        if x < 3:
            y = -2 * x
            x = -3 * x
    return x, y


def _hidden_raise():
    raise ValueError("exception used for control flow")


@program(T_NESTED, scalars(-1, 0, 1, 2, grad=False))
def if_with_local_modification_masked_by_exception(x):
    """TF: 'If the input is a Tensor, the behavior is undefined'."""
    y = 0
    if x > 0:
        try:
            if x > 1:
                _hidden_raise()
            y = 1
        except ValueError:
            pass
        if y == 0:
            y = 2
    return y


_test_global = None


def _reset_test_global():
    global _test_global
    _test_global = None


def _observe_test_global():
    return _test_global


@program(T_NESTED, each(1, 0, I(1), I(0)), reset=_reset_test_global, observe=_observe_test_global)
def if_nested_with_modification_of_global(x):
    y = 0
    if x > 0:
        if x > 0:
            global _test_global
            if _test_global is None:
                _test_global = 1
            else:
                _test_global += 1
            y += _test_global
    return y


_AB_RANGES = products((0, 2, torch.arange(0), torch.arange(2)), (1, 2, torch.arange(2)))


def _as_range(v):
    return range(v) if isinstance(v, int) else v


@program(T_NESTED, [(_as_range(a), _as_range(b)) for a, b in _AB_RANGES])
def independent_inner_for(a, b):
    p = 0
    for _ in a:
        tmp = b
        for j in tmp:
            p += j
    return p


@program(T_NESTED, products((0, 2, I32(0), I32(2)), (0, 2, I32(2))))
def independent_inner_while(a, b):
    p = 0
    while a > 0:
        tmp = b
        while tmp > 0:
            p += 1
            tmp -= 1
        a -= 1
    return p


@program(T_NESTED, [(_as_range(a), _as_range(b)) for a, b in _AB_RANGES])
def dependent_inner_for(a, b):
    r = 1
    s = 0
    for _ in a:
        r += s
        tmp = b
        for j in tmp:
            s += j
    return r


@program(T_NESTED, products((0, 1, 4, I32(0), I32(4)), (0, 2, I32(2))))
def dependent_inner_while(a, b):
    r = 1
    while a > 0:
        r += 1
        tmp = b
        while tmp > 0:
            a -= 1
            tmp -= 1
        a -= 1
    return r


@program(T_NESTED, each(range(0), range(3), torch.arange(0), torch.arange(3), I([5, 6, 7])))
def if_in_for(a):
    k = 0
    for i in a:
        if i % 2 > 0:
            j = i // 2
            k += j
    return k


@program(T_NESTED, scalars(0, 4, 10, grad=False))
def while_with_continue_in_context_manager(x):
    z = 0
    while x > 0:
        with scope():
            x = x - 1
            if x < 5:
                continue
            z = z + 1
    return z


@program(T_NESTED, scalars(0, 4, 10, grad=False))
def while_continue_in_try(x):
    z = 0
    while x > 0:
        x = x - 1
        try:
            if x < 5:
                continue
            z = z + 1
        finally:
            z = z + 10
    return z


@program(T_NESTED, scalars(0, 4, 10, grad=False))
def while_break_in_context_manager(x):
    z = 0
    while x > 0:
        with scope():
            x = x - 1
            if x < 5:
                break
            z = z + 1
    return z


@program(T_NESTED, scalars(0, 4, 10, grad=False))
def while_break_in_try(x):
    z = 0
    while x > 0:
        x = x - 1
        try:
            if x < 5:
                break
            z = z + 1
        finally:
            z = z + 10
    return z


@program(T_NESTED, scalars(1, 2, 0, grad=False))
def loop_initializing_invariant_variable(n):
    for i in range(n):
        if i == 0:
            a = 1
        else:
            a = 2
    return a  # noqa: F821


@program(T_NESTED, scalars(1, 2, 0, grad=False))
def loop_initializing_variant_variable(n):
    """TF: 'must be defined before the loop' for every tensor ``n``."""
    for i in range(n):
        if i == 0:
            a = 1
        else:
            a = a + 1  # noqa: F821
    return a  # noqa: F821


# ==== tests/type_annotations_test.py =====================================================

@program(T_ANNOT, [()])
def pure_declaration():
    n: int  # noqa: F842
    return 1


@program(T_ANNOT, each(I(2), FG([1.0, -1.0])))
def annotated_locals_with_tensors(x):
    """Annotated assignments and a pure declaration next to a tensor ``if``."""
    n: int  # noqa: F842
    y: torch.Tensor = x * 2
    if y.sum() > 0:
        y: torch.Tensor = y + 1
    return y


# ==== tests/basic_list_test.py ===========================================================

@program(T_LIST, scalars(0, 3, grad=False))
def list_type_not_annotated(n):
    l = []  # noqa: E741
    for i in range(n):
        l.append(i)
    return l


@program(T_LIST, [()])
def list_element_access():
    l = []  # noqa: E741
    l.append(1)
    l.append(2)
    l.append(3)
    return 2 * l[1]


@program(T_LIST, each(I(7), FG(1.5)))
def list_element_access_tensors(x):
    l = []  # noqa: E741
    l.append(x)
    l.append(x + 1)
    l.append(x + 2)
    return 2 * l[1]


@program(T_LIST, each(I(7), FG(1.5)))
def list_element_update(x):
    l = []  # noqa: E741
    l.append(x)
    l.append(x + 1)
    l.append(x + 2)
    l[1] = x * 5
    return torch.stack(l)


@program(T_LIST, scalars(5, 1, grad=False))
def list_simple_fill(n):
    l = []  # noqa: E741
    for i in range(n):
        l.append(torch.tensor(i))
    return torch.stack(l)


@program(T_LIST, each(0) + products((5, I(5), I(0)), (3, I(3))))
def list_nested_fill(m, n):
    mat = []
    for _ in range(m):
        l = []  # noqa: E741
        for j in range(n):
            l.append(torch.tensor(j))
        mat.append(torch.stack(l))
    return mat


@program(T_LIST, scalars(4, 2, grad=False))
def list_read_write_loop(n):
    l = []  # noqa: E741
    l.append(torch.tensor(1))
    l.append(torch.tensor(1))
    for i in range(2, n):
        l.append(l[i - 1] + l[i - 2])
        l[i - 2] = -l[i - 2]
    return torch.stack(l)


@program(T_LIST, scalars(0, 2, 4, grad=False))
def list_simple_empty(n):
    l = []  # noqa: E741
    l.append(torch.tensor(1))
    l.append(torch.tensor(2))
    l.append(torch.tensor(3))
    l.append(torch.tensor(4))
    s = 0
    for _ in range(n):
        s += l.pop()
    return torch.stack(l), s


@program(T_LIST, scalars(1, 2, 3, grad=False))
def list_pop_past_empty(n):
    """``list_simple_empty`` popping more than the list holds: eager raises IndexError."""
    l = [torch.tensor(1), torch.tensor(2)]  # noqa: E741
    for _ in range(n):
        l.pop()
    return l


@program(T_LIST, [([0] * 10, 10), (torch.zeros(10, dtype=torch.int64), 10),
                  (torch.zeros(5), I(3))])
def list_mutation(t, n):
    for i in range(n):
        t[i] = i
    return t


# ==== tests/assertion_test.py ============================================================

@program(T_ASSERT, scalars(1, 0))
def simple_assertion(x):
    assert x > 0
    return x


# ==== converters/break_statements_test.py ================================================

@program(C_BREAK, scalars(0, 1, 4, grad=False))
def break_while_loop(x):
    v = []
    while x > 0:
        x = x - 1
        if x % 2 == 0:
            break
        v.append(x)
    return v


@program(C_BREAK, lists([5, 4], [], [4, 2]))
def break_for_loop(a):
    v = []
    for x in a:
        x = x - 1
        if x % 2 == 0:
            break
        v.append(x)
    return v


@program(C_BREAK, scalars(0, 3, 11, grad=False))
def break_nested(x):
    v = []
    u = []
    w = []
    while x > 0:
        x = x - 1
        if x % 2 == 0:
            if x % 3 != 0:
                u.append(x)
            else:
                w.append(x)
                break
        v.append(x)
    return v, u, w


@program(C_BREAK, scalars(0, 2, 3, 5, grad=False))
def break_nested_loops(x):
    v = []
    u = []
    while x > 0:
        x = x - 1
        y = x
        while y > 0:
            y = y - 1
            if y % 2 == 0:
                break
            u.append(y)
        if x == 0:
            break
        v.append(x)
    return v, u


@program(C_BREAK, scalars(0, 2, 3, grad=False))
def break_loop_orelse(x):
    v = []
    u = []
    while x > 0:
        x = x - 1
        y = x
        while y > 1:
            break
        else:
            u.append(y)
            break
        v.append(x)
    return v, u


@program(C_BREAK, each(True, False, B(True), B(False)))
def multiple_correlated_breaks_with_side_effects(cond1):
    lst = []
    while True:
        if cond1:
            lst.append(1)
        else:
            break
        if lst[-1] > 0:
            break
    return lst


# ==== converters/continue_statements_test.py =============================================

@program(C_CONTINUE, scalars(0, 1, 3, 4, grad=False))
def continue_basic(x):
    v = []
    while x > 0:
        x = x - 1
        if x % 2 == 0:
            continue
        v.append(x)
    return v


@program(C_CONTINUE, scalars(3, 4, grad=False))
def continue_basic_inplace_alias(x):
    """``continue_basic`` with ``x -= 1``: in eager PyTorch every element appended is the
    argument tensor itself, written in place afterwards (the list shows its final value)."""
    v = []
    while x > 0:
        x -= 1
        if x % 2 == 0:
            continue
        v.append(x)
    return v


@program(C_CONTINUE, scalars(0, 1, 3, 4, grad=False))
def multiple_continues(x):
    v = []
    while x > 0:
        x = x - 1
        if x > 1:
            continue
        if x > 2:
            continue
        v.append(x)
    return v


@program(C_CONTINUE, lists([], [1], [2], [1, 2, 3]))
def multiple_continues_in_nested_scope(a):
    v = []
    for x in a:
        x = x - 1
        if x > 100:
            continue
        try:
            raise ValueError("intentional")
        except ValueError:
            continue
        v.append(x)
    return v


@program(C_CONTINUE, lists([], [1], [2], [1, 2, 3]))
def continue_for_loop(a):
    v = []
    for x in a:
        x = x - 1
        if x % 2 == 0:
            continue
        v.append(x)
    return v


@program(C_CONTINUE, scalars(0, 1, 3, 4, grad=False))
def continue_nested_with(x):
    v = []
    while x > 0:
        x = x - 1
        with scope():
            if x % 2 == 0:
                continue
        v.append(x)
    return v


@program(C_CONTINUE, scalars(0, 1, 3, 4, grad=False))
def continue_nested_multiple_withs(x):
    v = []
    while x > 0:
        x = x - 1
        with scope():
            if x % 2 == 0:
                continue
        with scope():
            v.append(x)
        v.append(x)
    return v


@program(C_CONTINUE, scalars(0, 1, 3, 4, grad=False))
def continue_nested_multiple_withs_and_statements(x):
    v = []
    while x > 0:
        x = x - 1
        with scope():
            if x % 2 == 0:
                continue
            v.append(x)
        v.append(x)
        with scope():
            v.append(x)
        v.append(x)
    return v


@program(C_CONTINUE, scalars(0, 1, 3, 4, grad=False))
def continue_nested_multiple_withs_and_nested_withs(x):
    v = []
    while x > 0:
        x = x - 1
        with scope():
            if x % 2 == 0:
                continue
            with scope():
                v.append(x)
        v.append(x)
        with scope():
            v.append(x)
        v.append(x)
    return v


@program(C_CONTINUE, scalars(0, 1, 3, 4, grad=False))
def continue_nested(x):
    v = []
    u = []
    w = []
    while x > 0:
        x = x - 1
        if x % 2 == 0:
            if x % 3 != 0:
                u.append(x)
            else:
                w.append(x)
                continue
        v.append(x)
    return v, u, w


def _track(y, z):
    y.append(z)
    return z


@program(C_CONTINUE, scalars(3, 2, 0, grad=False))
def multiple_guarded_continues_with_side_effects(x):
    u = []
    v = []
    while x > 0:
        x = x - 1
        if _track(u, x) > 1:
            continue
        if _track(u, x) > 2:
            continue
        v.append(x)
    return u, v


# ==== converters/conditional_expressions_test.py =========================================

@program(C_CONDEXP, scalars(0, 3) + each(B(True), B(False)))
def condexp_basic(x):
    return 1 if x else 0


@program(C_CONDEXP, scalars(-2, 0, 2))
def condexp_nested_orelse(x):
    y = x * x if x > 0 else x if x else 1
    return y


# ==== converters/control_flow_test.py (and loop_integration_test.py) =====================

@program(C_CF, scalars(5, 0, 2, grad=False))
def cf_nested_while(n):
    i = 0
    j = 0
    s = 0
    while i < n:
        while j < i:
            j += 3
        u = i + j
        s += u
        i += 1
        j = 0
    return s, i, j, n


for_mixed_globals_nonglobals = None


def _reset_mixed_global():
    global for_mixed_globals_nonglobals
    for_mixed_globals_nonglobals = None


def _observe_mixed_global():
    return for_mixed_globals_nonglobals


@program(C_CF, scalars(5, 0, grad=False), reset=_reset_mixed_global, observe=_observe_mixed_global)
def cf_mixed_globals_nonglobals(n):
    global for_mixed_globals_nonglobals
    i = 0
    j = 0
    for_mixed_globals_nonglobals = 0
    while i < n:
        while j < i:
            j += 3
        u = i + j
        for_mixed_globals_nonglobals += u
        i += 1
        j = 0
    return for_mixed_globals_nonglobals, i, j, n


class TestClassX:
    def __init__(self, x):
        self.x = x


class TestClassY:
    def __init__(self, y):
        self.y = y


@program(C_CF, scalars(5, 0, 1, grad=False))
def cf_composite_state_complex(n):
    """(``n * 1``: in eager PyTorch ``+=`` on an attribute holding ``n`` itself would write
    ``n`` in place, and the loop would never end.)"""
    tc = TestClassX(TestClassY({"z": TestClassX(n * 1)}))
    if n > 0:
        while n > 0:
            if n < 2:
                tc.x.y["z"].x += 1
            n -= 1
    return n, tc


@program(C_CF, scalars(5, 0, grad=False))
def cf_while_basic(n):
    i = 0
    s = 0
    while i < n:
        s += i
        i += 1
    return s, i, n


@program(C_CF, scalars(5, 0, grad=False) + each(Fl(2.5)))
def cf_while_single_output(n):
    while n > 0:
        n -= 1
    return n


class TestClassAttr:
    def __init__(self):
        self.x = torch.tensor(3)


@program(C_CF, scalars(5, 0, grad=False))
def cf_composite_state_attr(n):
    tc = TestClassAttr()
    while n > 0:
        tc.x += 1
        n -= 1
    return n, tc.x


@program(C_CF, scalars(5, 0, grad=False))
def cf_composite_state_slice(n):
    d = {"a": n * 1}  # a copy: ``d[k] += 1`` would otherwise write ``n`` in place
    k = "a"
    while n > 0:
        d[k] += 1
        n -= 1
    return d[k], n


@program(C_CF, scalars(5, 0, grad=False))
def cf_composite_state_literal_slice(n):
    d = {"a": n * 1}  # a copy: ``d[k] += 1`` would otherwise write ``n`` in place
    while n > 0:
        d["a"] += 1
        n -= 1
    return d["a"], n


class EmptyClass:
    pass


@program(C_CF, [(0, I(10)), (I(0), 0), (I(0), I(10)), (I(6), I(10)), (3, FG(1.5))])
def cf_composite_state_attr_initialized_in_loop(n, x):
    """TF: "'tc.subattr' must be defined before the loop" for a tensor ``n``."""
    tc = EmptyClass()
    while n < 5:
        if n == 0:
            tc.subattr = x
        else:
            tc.subattr = tc.subattr + 1
        n += 1
    return tc.subattr


@program(C_CF, [(0, I(10)), (I(0), 0), (I(0), I(10)), (I(6), I(10))])
def cf_composite_state_slice_initialized_in_loop(n, x):
    d = {}
    k = "subkey"
    while n < 5:
        if n == 0:
            d[k] = x
        else:
            d[k] = d[k] + 1
        n += 1
    return d


@program(C_CF, [(0, I(10)), (I(0), 0), (I(0), I(10)), (I(6), I(10))])
def cf_composite_state_literal_slice_initialized_in_loop(n, x):
    d = {}
    while n < 5:
        if n == 0:
            d["subkey"] = x
        else:
            d["subkey"] = d["subkey"] + 1
        n += 1
    return d


@program(C_CF, [(0, I(10)), (I(0), I(5)), (I(7), I(5))])
def cf_composite_state_slice_aliased_to_local(n, x):
    d = {}
    while n < 5:
        k = "subkey"
        d[k] = x + 1
        n += 1
    return d


@program(C_CF, scalars(5, 0, grad=False))
def cf_local_composite_attr(n):
    while n > 0:
        tc = TestClassAttr()
        tc.x = tc.x
        n -= 1
    return n


@program(C_CF, scalars(5, 0, grad=False))
def cf_local_composite_slice(n):
    while n > 0:
        d = {"x": n}
        k = "x"
        d[k] = d[k]
        n -= 1
    return n


@program(C_CF, scalars(5, 0, grad=False))
def cf_local_composite_literal_slice(n):
    while n > 0:
        d = {"x": n}
        d["x"] = d["x"]
        n -= 1
    return n


class ListHolderNT(collections.namedtuple("ListHolderNT", ("x",))):
    pass


@program(C_CF, scalars(5, 0, grad=False))
def cf_non_tensor_state(n):
    tc = ListHolderNT([torch.tensor(0)])
    while n > 0:
        tc = ListHolderNT([torch.tensor(3)])
        tc.x[0] = tc.x[0] + 1
        n -= 1
    return tc.x[0]


class ListHolder:
    def __init__(self):
        self.x = [torch.tensor(3)]


@program(C_CF, scalars(5, 0, grad=False))
def cf_non_tensor_state_illegal_type(n):
    """TF: 'tc must be defined before the loop' (an object made in the loop, read after)."""
    while n > 0:
        tc = ListHolder()
        tc.x[0] = tc.x[0] + 1
        n -= 1
    return tc.x[0]  # noqa: F821


class TensorIncompatibleNumeric:
    """Works in arithmetic expression, but errors out with tensor ops."""

    def __init__(self, val):
        self.val = val

    def __add__(self, other):
        return TensorIncompatibleNumeric(self.val + other)


@program(C_CF, [(5, 0), (I(5), 0), (5, TensorIncompatibleNumeric(0)),
                (I(5), TensorIncompatibleNumeric(0)), (I(0), TensorIncompatibleNumeric(0))])
def cf_dispatches_by_cond_only(n, s):
    """TF: TypeError when ``n`` is a tensor and ``s`` an object tf.while cannot carry."""
    while n > 0:
        n -= 1
        s += n
    return s


@program(C_CF, scalars(1, -1))
def cf_if_basic(n):
    a = 0
    b = 0
    if n > 0:
        a = -n
    else:
        b = 2 * n
    return a, b


@program(C_CF, [(I([0]), I(1)), (None, I(1)), (I([3]), FG(2.0)), (B([True]), 5), (1, 5)])
def cf_if_sparse_tensor(cond, a):
    """A condition that is None or a one-element tensor (TF's SparseTensor)."""
    if cond:
        a = -a
    return a


class TestClassAB:
    def __init__(self, a, b):
        self.a = a
        self.b = b


@program(C_CF, [(I(1), TestClassAB(0, 0)), (I(-1), TestClassAB(0, 0)), (1, TestClassAB(0, 0))])
def cf_if_complex_outputs(n, obj):
    """Attributes of an argument object written on both paths of a tensor ``if``."""
    obj.a = 0
    obj.b = 0
    if n > 0:
        obj.a = -n
    else:
        obj.b = 2 * n
    return obj


@program(C_CF, scalars(1, -1))
def cf_if_single_output(n):
    if n > 0:
        n = -n
    return n


@program(C_CF, scalars(2, -3))
def cf_if_unbalanced(n):
    """``n`` is the int 3 on one path and a tensor on the other."""
    if n > 0:
        n = 3
    return n


@program(C_CF, scalars(-3, 1))
def cf_if_unbalanced_raising(n):
    if n > 0:
        n = n + 1
        raise ValueError()
    return n


@program(C_CF, scalars(1, -1))
def cf_if_local_var(n):
    if n > 0:
        b = 4
        n = b + 1
    return n


for_test_global_local = None


def _reset_global_local():
    global for_test_global_local
    for_test_global_local = None


def _observe_global_local():
    return for_test_global_local


@program(C_CF, scalars(1, -1, grad=False), reset=_reset_global_local, observe=_observe_global_local)
def cf_if_global_local(n):
    if n > 0:
        global for_test_global_local
        if for_test_global_local is None:
            for_test_global_local = 1
        else:
            for_test_global_local += 1
        n += for_test_global_local
    return n


@program(C_CF, scalars(1, -1))
def cf_if_no_outputs(n):
    if n > 0:
        b = 4  # noqa: F841
    return n


@program(C_CF, scalars(0, 1))
def cf_if_created_outputs(i):
    if i == 0:
        result = i - 1
    else:
        result = i + 1
    return result


@program(C_CF, [(range(5), 10), (torch.arange(5), 10), (torch.arange(5), I(10)), (range(0), 10),
                (torch.arange(0), I(10))])
def cf_if_created_loop_local_outputs(n, x):
    for i in n:
        if i == 0:
            result = i - 1
        else:
            result = i + 1
        if result > 0:
            x += 1
    return x


@program(C_CF, [(range(5), 10), (torch.arange(5), 10), (torch.arange(5), I(10)),
                (torch.arange(1, 5), I(10))])
def cf_if_created_loop_variable(n, x):
    """Reads ``result`` from a previous iteration."""
    for i in n:
        if i == 0:
            result = i - 1
        if i > 0:
            if result < 0:  # noqa: F821
                x += 1
    return x


for_unaffected_global = None


def _reset_unaffected_global():
    global for_unaffected_global
    for_unaffected_global = 3


def _observe_unaffected_global():
    return for_unaffected_global


@program(C_CF, each(1, 0, I(1), I(0)), reset=_reset_unaffected_global,
         observe=_observe_unaffected_global)
def cf_if_unaffected_global(i):
    global for_unaffected_global
    if i == 0:
        for_unaffected_global = i - 1
    return for_unaffected_global


@program(C_CF, scalars(1, 0))
def cf_if_unaffected_nonlocal(i):
    def inner_fn():
        nonlocal n
        if i == 0:
            n = i - 1

    n = 3
    inner_fn()
    return n


@program(C_CF, scalars(1, 0))
def cf_output_defined_in_prior_except(i):
    try:
        raise ValueError()
    except ValueError:
        x = 1
    if i == 0:
        x = i - 1
    return x


class Foo2:
    def __init__(self):
        self.b = 2
        self.c = 3


@program(C_CF, [(Foo2(), B(True)), (Foo2(), B(False)), (Foo2(), True)])
def cf_unbalanced_multiple_composites(x, condition):
    z = 5
    if condition:
        x.b = 7
        x.c = 11
        z = 13
    return x.b, x.c, z


class Foo1:
    def __init__(self):
        self.b = 2


@program(C_CF, [(Foo1(), B(True)), (Foo1(), B(False)), (Foo1(), False)])
def cf_unbalanced_composite(x, condition):
    z = 5
    if condition:
        x.b = 7
        z = 13
    return x.b, z


@program(C_CF, each(I([1, 3]), torch.zeros(0, dtype=torch.int32), [1, 3], FG([1.0, 3.0])))
def cf_for_basic(l):  # noqa: E741
    s1 = 0
    s2 = 0
    for e in l:
        s1 += e
        s2 += e * e
    return s1, s2


@program(C_CF, each(I([1, 3]), torch.zeros(0, dtype=torch.int32), [1, 3]))
def cf_for_single_output(l):  # noqa: E741
    s = 0
    for e in l:
        s += e
    return s


_eval_count = [0]


def _reset_eval_count():
    _eval_count[0] = 0


def _observe_eval_count():
    return _eval_count[0]


def _count_evals(x):
    _eval_count[0] += 1
    return x


@program(C_CF, scalars(5, 0, grad=False), reset=_reset_eval_count, observe=_observe_eval_count)
def cf_for_iterated_expression(n):
    """The iterated expression is evaluated once (a helper counts its calls)."""
    s = 0
    for e in _count_evals(range(n)):
        s += e
    return s


@program(C_CF, [(range(5), I(10)), (torch.arange(5), I(10)), (torch.arange(5), 0),
                (torch.arange(2, 4), I(10))])
def cf_for_composite_state_initialized_in_loop(n, x):
    """TF: "'tc.x' must be defined before the loop" for a tensor ``n``."""
    tc = EmptyClass()
    for i in n:
        if i == 0:
            tc.x = x
        else:
            tc.x = tc.x + i
    return tc.x


@program(C_CF, each([3, 3], [I(3), I(3)], I([3, 3]), FG([1.0, 2.0])))
def cf_for_tuple_unpacking(x_list):
    z = torch.tensor(0)
    for i, x in enumerate(x_list):
        z = z + x + i
    return z


@program(C_CF, [(I([1, 2, 3]), 5), ([1, 2], 3), (I([]), 4)])
def cf_for_with_comprehension_in_body(l, n):  # noqa: E741
    s = torch.tensor(list(range(n)))
    for _ in l:
        s += torch.tensor([a for a in range(n)])
    return s


@program(C_LOOPINT, each(4, 2, 4.0, Fl(4.0), Fl(2.0), F64(9.0), FG(20.0)))
def cf_while_with_else(x):
    while x > 2:
        x /= 2
    else:
        x += 1
    return x


@program(C_LOOPINT, each(True, False, B(True), B(False)))
def cf_while_with_else_and_break(cond1):
    x = 8
    while x > 2:
        x /= 2
        if cond1:
            break
    else:
        x += 1
    return x


@program(C_LOOPINT, lists([], [1, 2]) + each(FG([1.0, 2.0])))
def cf_for_with_else(l):  # noqa: E741
    res = 0
    for x in l:
        res += x
    else:
        res += 1
    return res


@program(C_LOOPINT, each(True, False, B(True), B(False)))
def cf_for_with_else_and_break(flag):
    l = [1, 2, 3]  # noqa: E741
    res = 0
    for x in l:
        res += x
        if flag:
            break
    else:
        res += 1
    return res


# ==== converters/return_statements_test.py ===============================================

@program(C_RETURN, scalars(2, -2) + each(Fl([1.0, 2.0])))
def ret_straightline(x):
    return x * x


@program(C_RETURN, [()])
def ret_superfluous_returns():
    retval = 1
    return retval
    retval = 2  # noqa: F841 - unreachable, as in TF's program
    return retval


@program(C_RETURN, [()])
def ret_superfluous_returns_adjacent():
    return 1
    return 2


@program(C_RETURN, scalars(2, -2))
def ret_conditional(x):
    if x > 0:
        return x
    else:
        return x * x


@program(C_RETURN, scalars(2, -2))
def ret_conditional_missing_else(x):
    """None on one path."""
    if x > 0:
        return x


@program(C_RETURN, scalars(2, -2))
def ret_conditional_missing_else_then_default(x):
    if x > 0:
        return x
    return x * x


@program(C_RETURN, scalars(2, -2, grad=False) + each(FG(2.0), FG(-2.0)))
def ret_conditional_else_only_then_default(x):
    if x < 0:
        x = x * x
    else:
        return x
    return x


@program(C_RETURN, scalars(2, -2, 5))
def ret_conditional_nested(x):
    if x > 0:
        if x < 5:
            return x
        else:
            return x * x
    else:
        return x * x * x


@program(C_RETURN, scalars(2, -2))
def ret_context_manager(x):
    with scope():
        return x * x


@program(C_RETURN, scalars(2, -2))
def ret_context_manager_in_conditional(x):
    if x > 0:
        with scope():
            return x * x
    else:
        return x


@program(C_RETURN, scalars(2, -2))
def ret_conditional_in_context_manager(x):
    with scope():
        if x > 0:
            return x * x
        else:
            return x


@program(C_RETURN, scalars(2, grad=False) + each(Fl([1.0, 3.0]), F64(2.0)))
def ret_no_return(x):
    """``x *= x`` on a tensor argument writes it in place; returns None."""
    x *= x


@program(C_RETURN, scalars(2, -2))
def ret_nested_function(x):
    def inner_fn(y):
        if y > 0:
            return y * y
        else:
            return y

    return inner_fn(x)


@program(C_RETURN, scalars(2, -2, 0))
def ret_nested_function_in_control_flow(x):
    if x:
        def inner_fn(y):
            return y
        inner_fn(x)


@program(C_RETURN, scalars(2, 0, grad=False))
def ret_for_loop(n):
    for _ in range(n):
        return 1


@program(C_RETURN, scalars(0, 2, 4, grad=False))
def ret_while_loop(n):
    i = 0
    s = 0
    while i < n:
        i += 1
        s += i
        if s > 4:
            return s
    return -1


@program(C_RETURN, scalars(4, 5))
def ret_null_return(n):
    if n > 4:
        return
    return


@program(C_RETURN, scalars(0, 1, 3, 4, grad=False))
def ret_nested_multiple_withs(x):
    v = []
    while x > 0:
        x = x - 1
        with scope():
            if x % 2 == 0:
                return v
        with scope():
            v.append(x)
        v.append(x)
    return v


@program(C_RETURN, lists([], [1], [2], [1, 2, 3]))
def ret_multiple_returns_in_nested_scope(a):
    v = []
    for x in a:
        x = x - 1
        if x > 100:
            return v
        try:
            raise ValueError("intentional")
        except ValueError:
            return v
        v.append(x)
    return v


# ==== converters/logical_expressions_test.py =============================================

@program(C_LOGICAL, [(I(1), 1), (I(1), 2), (1, 1), (FG(1.0), 1.0)])
def logical_equals(a, b):
    return a == b


@program(C_LOGICAL, [(B(True), False, False), (B(True), False, True), (True, False, True),
                     (B(False), B(False), True), (I(0), 0, I(0))])
def logical_bool_ops(a, b, c):
    return (a or b) and (a or b or c) and not c


@program(C_LOGICAL, [(I(1), 2, 2, 1), (I(1), 2, 2, 3), (1, 2, 2, 1), (I(3), 2, 2, 1)])
def logical_comparison(a, b, c, d):
    """Chained comparison: only ``a`` a tensor, so ``a < b`` must be evaluated first."""
    return a < b == c > d


@program(C_LOGICAL, [("a", ("a",)), ("b", ("a",)), (I(2), I([1, 2])), (3, I([1, 2])),
                     (2, [1, 2])])
def logical_default_ops(a, b):
    return a in b


# ==== converters/lists_test.py ===========================================================

@program(C_LISTS, [()])
def lists_empty_list():
    return []


@program(C_LISTS, [()])
def lists_initialized_list():
    return [1, 2, 3]


@program(C_LISTS, each(I(1), FG(1.0)))
def lists_list_append(x):
    l = [x]  # noqa: E741
    l.append(x + 1)
    l.append(x + 2)
    return l


@program(C_LISTS, each(I([1, 2, 3]), FG([1.0, 2.0])))
def lists_list_pop(x):
    l = list(x)  # noqa: E741
    s = l.pop()
    return s, l


@program(C_LISTS, each([1, 2, [1, 2, 3]], [I(1), [I(2), I(3)]]))
def lists_double_list_pop(l):  # noqa: E741
    s = l.pop().pop()
    return s


@program(C_LISTS, [()])
def lists_list_stack():
    l = [torch.tensor(1), torch.tensor(2), torch.tensor(3)]  # noqa: E741
    return torch.stack(l)


# ==== converters/list_comprehensions_test.py =============================================

@program(C_LISTCOMP, lists([], [1, 2, 3]) + each(FG([1.0, 2.0])))
def listcomp_basic(l):  # noqa: E741
    s = [e * e for e in l]
    return s


@program(C_LISTCOMP, each([], [[1], [2], [3]], I([[1], [2], [3]]), [I([1, 2]), I([3])]))
def listcomp_multiple_generators(l):  # noqa: E741
    s = [e * e for sublist in l for e in sublist]
    return s


@program(C_LISTCOMP, lists([], [1, 2, 3]) + each(FG([0.5, 2.0, 3.0])))
def listcomp_cond(l):  # noqa: E741
    s = [e * e for e in l if e > 1]
    return s


# ==== converters/call_trees_test.py ======================================================

def _three():
    return 3


def _plus_one(x):
    return x + 1


def _kw(a, c=0, **rest):
    return a * 10 + c + sum(rest.values())


def _star(*args, **kwargs):
    return sum(args) + sum(kwargs.values())


@program(C_CALLTREES, [(_three,), (lambda: torch.tensor(3.0),)])
def calltrees_normal_function(f):
    return f() + 3


@program(C_CALLTREES, [(_plus_one, _three), (_plus_one, lambda: torch.tensor(2))])
def calltrees_expression_in_argument(f, g):
    return f(g() + 7) + 3


@program(C_CALLTREES, [(_plus_one, _three), (torch.abs, lambda: torch.tensor(-2))])
def calltrees_call_in_argument(f, g):
    return f(g()) + 3


@program(C_CALLTREES, [(_kw, 1, 2), (_kw, I(1), I(2)), (_kw, FG(1.0), 2)])
def calltrees_function_with_kwarg(f, a, b):
    return f(a, c=b) + 3


@program(C_CALLTREES, [(_star, 1, 2, 3), (_star, I(1), I(2), FG(3.0))])
def calltrees_kwargs_starargs(f, a, b, c):
    def inner(f, a, *args, **kwargs):
        return f(a, *args, **kwargs) + 5
    return inner(f, a, b, k=c)


@program(C_CALLTREES, each(0, I(4), FG(1.0)))
def calltrees_starargs_only(x):
    args = [1, 2, x]
    return _star(*args) + 11


@program(C_CALLTREES, [(_kw, 1, 2), (_kw, I(1), FG(2.0))])
def calltrees_kwargs_keywords(f, a, b):
    kwargs = {"d": b}
    return f(a, c=b, **kwargs) + 5


class MethodHolder:
    def __init__(self, k):
        self.k = k

    def other_method(self, a):
        return a * self.k

    def test_method(self, a):
        return self.other_method(a) + 1


@program(C_CALLTREES, [(MethodHolder(2).test_method, 1), (MethodHolder(2).test_method, I(3)),
                       (MethodHolder(3).test_method, FG(1.5))])
def calltrees_object_method(m, a):
    return m(a)


@program(C_CALLTREES, [(MethodHolder(2), 1), (MethodHolder(2), I(3))])
def calltrees_class_method(obj, a):
    return MethodHolder.test_method(obj, a)


# ==== converters/functions_test.py =======================================================

@program(C_FUNCTIONS, each(1, I(1), FG(1.5)))
def functions_docstring(l):  # noqa: E741
    """Docstring."""
    a = 1
    l += a
    return l


@program(C_FUNCTIONS, each(1, I(1), FG(1.5)))
def functions_nested_functions(l):  # noqa: E741
    def inner_fn(i):
        return i + 1

    l = l + 1  # noqa: E741
    return l, inner_fn(l)


class StaticHolder:
    @staticmethod
    def f(l):  # noqa: E741
        def inner_fn(i):
            return i + 1

        l = l + 1  # noqa: E741
        return l, inner_fn(l)


@program(C_FUNCTIONS, each(1, I(1), FG(1.5)))
def functions_static_method(x):
    return StaticHolder.f(x)


@program(C_FUNCTIONS, each(1, I(1)))
def functions_lambda_in_return_value(x):
    fn = (lambda y: y + 1)
    return fn, fn(x)


# ==== converters/arg_defaults_test.py ====================================================

@program(C_ARGDEF, [(1,), (1, 5), (I(1),), (I(1), I(5), FG(2.0))])
def argdef_defaults(a, b=1, c=2):
    return a, b, c


@program(C_ARGDEF, [(1,), (1, 5, 6, 7), (I(1), I(2), I(3))])
def argdef_defaults_with_vararg(a, b=1, *c):
    return a, b, c


@program(C_ARGDEF, [(), (I(2),)])
def argdef_inner_lambda(x=None):
    return (lambda x=7: x)(), (lambda y=x: y)()


@program(C_ARGDEF, [(), (I(2),)])
def argdef_inner_function(x=None):
    def inner_fn(a=3):
        return a
    return inner_fn(), inner_fn(x)


@program(C_ARGDEF, [()])
def argdef_inner_function_returned():
    def inner_fn(a=3):
        return a
    return inner_fn


# ==== converters/asserts_test.py =========================================================

@program(C_ASSERTS, each(True, B(True), B(False), I(3), I(0)))
def assert_with_message(a):
    assert a, "testmsg"
    return a


# ==== converters/variables_test.py =======================================================

@program(C_VARIABLES, each(1, I(1)))
def variables_del(l):  # noqa: E741
    del l
    return l  # noqa: F821


@program(C_VARIABLES, each([1, 2], I([1, 2])))
def variables_del_getitem_basic_slice(l):  # noqa: E741
    del l[0]
    return l


@program(C_VARIABLES, each([1, 2], [1, 2, 3]))
def variables_del_getitem_range_slice(l):  # noqa: E741
    del l[0:2]
    return l


class ABHolder:
    def __init__(self):
        self.a = 1
        self.b = 2


@program(C_VARIABLES, [(ABHolder(),)])
def variables_del_getattr(l):  # noqa: E741
    del l.a
    return l, hasattr(l, "a"), l.b


@program(C_VARIABLES, [(1, 2), (I(1), I(2))])
def variables_del_packing_list(a, b):
    del [a, b]
    return a  # noqa: F821


@program(C_VARIABLES, [(1, 2, 3), (I(1), I(2), I(3))])
def variables_del_packing_nested(a, b, c):
    del [a, (b, c)]
    return c  # noqa: F821


@program(C_VARIABLES, [(1, 2, [1, 2]), (I(1), I(2), [I(1), I(2)])])
def variables_del_item_multiple_mixed_used_after(a, b, c):
    del a, b, c[0]
    a = 1
    return a, b, c  # noqa: F821


@program(C_VARIABLES, [(1, 2, [1, 2]), (I(1), I(2), [I(1), I(2)])])
def variables_del_item_multiple_mixed_unused_after(a, b, c):
    del a, b, c[0]
    a = 1
    b = 2  # noqa: F841
    return c


class ReadHolder:
    def __init__(self, v):
        self.v = v

    def __getitem__(self, _):
        return self.v

    def __call__(self):
        return self.v


@program(C_VARIABLES, [(ReadHolder(1),), (ReadHolder(torch.tensor(2)),)])
def variables_attribute_subscript_call(l):  # noqa: E741
    return l.v, l[0], l()


# ==== converters/builtin_functions_test.py ===============================================

@program(C_BUILTIN, each([0, 0, 0], I([0, 0, 0]), Fl([[1.0], [2.0]])))
def builtin_len(a):
    return len(a)


@program(C_BUILTIN, each("a", I(3), FG(1.0)))
def builtin_print(a):
    return print(a)


@program(C_BUILTIN, [("a", 1, [2, 3]), ("a", I(1), [2, 3]), ("a", I(1), [I(2), FG(3.0)])])
def builtin_print_multiple_values(a, b, c):
    return print(a, b, c)


_unhashable_keys = {"a": "b"}.keys


@program(C_BUILTIN, each(I(1), 1))
def builtin_unhashable_callable(x):
    return list(_unhashable_keys()), x


# ==== converters/side_effect_guards_test.py ==============================================
# ``tf.assign(a, ...)`` -> ``a.copy_(...)``; ``tf.Assert`` -> ``torch._assert``.

@program(C_SIDEFX, each(I(2), Fl([2.0, 3.0])))
def sidefx_on_return_only_variable(a):
    a.copy_(a + 1)
    return a


@program(C_SIDEFX, each(I(2), Fl([2.0, 3.0])))
def sidefx_on_used_variable(a):
    a.copy_(a + 1)
    return a + 1


@program(C_SIDEFX, each(I(-1), I(1), FG(2.0)))
def sidefx_on_tensor(a):
    torch._assert(a > 0, "expected in throw")
    return a


@program(C_SIDEFX, each(I(2), Fl([2.0, 3.0])))
def sidefx_multiline_block(a):
    a.add_(1)
    b = a + 1
    a.add_(1)
    b += 1
    return b


@program(C_SIDEFX, each(I(2), Fl([2.0, 3.0])))
def sidefx_multiline_nested_block(a):
    with scope():
        a.copy_(a + 1)
        b = a + 1
    return b


@program(C_SIDEFX, each(I(2), Fl([2.0, 3.0])))
def sidefx_multiline_block_unsafe(a):
    a.copy_(a + 1)
    b = a + 1
    a.add_(1)
    c = b + 1
    return c


# ==== converters/decorators_test.py ======================================================

def simple_decorator(f):
    return lambda a: f(a) + 1


@program(C_DECOR, each(1, I(1), FG(1.5)))
def decorated_inner_function(a):
    @simple_decorator
    def inner_fn(b):
        return b + 11
    return inner_fn(a)
