"""if/elif/else, nested ifs, ternary, and/or/not, early return: on tensors and Python values."""
import types

import pytest
import torch

from e2e_helpers import check, check_structure, case_collector

T = torch.tensor
CASES, case = case_collector(cond=None, loop=False)


POS = T([1.0, 2.0, 3.0])
NEG = T([-1.0, -2.0, 0.5])
MIX = T([3.0, -4.0, 0.25])


# ---------------------------------------------------------------- tensor if
@case((POS,), (NEG,), cond=True)
def if_else(x):
    if x.sum() > 0:
        y = x * 2
    else:
        y = x - 1
    return y


@case((POS,), (NEG,), cond=True)
def if_without_else(x):
    y = x
    if x.mean() > 0:
        y = y * 3
    return y


@case((T([5.0, 1.0]),), (T([-5.0, 1.0]),), (T([0.1, 0.2]),), cond=True)
def if_elif_else(x):
    s = x.sum()
    if s > 1:
        y = x * 10
    elif s < -1:
        y = x * -10
    else:
        y = x
    return y


@case((T([5.0]),), (T([2.5]),), (T([1.5]),), (T([0.0]),), cond=True)
def elif_chain_four(x):
    if x[0] > 4:
        r = x + 400
    elif x[0] > 2:
        r = x + 200
    elif x[0] > 1:
        r = x + 100
    else:
        r = x
    return r


@case((POS, POS), (POS, NEG), (NEG, POS), (NEG, NEG), cond=True)
def nested_ifs(a, b):
    if a.sum() > 0:
        if b.sum() > 0:
            r = a + b
        else:
            r = a - b
    else:
        if b.sum() > 0:
            r = b * 2
        else:
            r = a * b
    return r


@case((POS,), (NEG,), cond=True)
def if_assigns_two_vars(x):
    if x.sum() > 0:
        a = x + 1
        b = x.max()
    else:
        a = x - 1
        b = x.min()
    return a, b


@case((T([2.0, 1.0]),), (T([1.0, 2.0]),), cond=True)
def if_on_elements(x):
    if x[0] > x[1]:
        return x[0] - x[1]
    return x[1] - x[0]


@case((POS,), (NEG,), cond=True)
def ternary(x):
    y = x * 2 if x.sum() > 0 else x * 3
    return y


@case((T([5.0]),), (T([0.5]),), (T([-3.0]),), cond=True)
def nested_ternary(x):
    return x * 1 if x.sum() > 1 else (x * 2 if x.sum() > 0 else x * 3)


@case((POS,), (NEG,), cond=True)
def ternary_python_floats(x):
    return 1.0 if x.sum() > 0 else -1.0


@case((T([True, False]),), (T([False, False]),), cond=True)
def if_any(m):
    if m.any():
        r = m.float().sum()
    else:
        r = torch.tensor(-1.0)
    return r


@case((T([1, 2, 3]),), (T([1, 0, 3]),), cond=True)
def if_all_int(x):
    if (x > 0).all():
        r = x * 2
    else:
        r = x - 1
    return r


@case((T([1.0, 2.0]),), (T([3.0, 4.0]),), (T([-1.0, 0.0]),), cond=True)
def chained_comparison(x):
    if 0 < x.sum() < 5:
        return x + 1
    return x - 1


# ---------------------------------------------------------------- and / or / not
@case((T([1.0, 2.0]),), (T([1.0, 9.0]),), (T([-1.0, 0.0]),), cond=True)
def and_in_if(x):
    if x.sum() > 0 and x.max() < 5:
        return x * 2
    return x


@case((T([1.0, 2.0]),), (T([-1.0, 9.0]),), (T([-1.0, 0.0]),), cond=True)
def or_in_if(x):
    if x.min() > 0 or x.max() > 5:
        return x * 2
    return x


@case((POS,), (NEG,), cond=False)
def not_in_if(x):
    # `not` alone is a logical_not; the if still depends on a tensor (asserted separately)
    return not_value(x)


def not_value(x):
    return torch.logical_not(x.sum() > 0)


@case((POS,), (NEG,), cond=True)
def not_tensor_if(x):
    if not x.sum() > 0:
        return x - 100
    return x + 100


@case((T([1.0, 2.0]),), (T([1.0, 9.0]),), (T([-1.0, 0.0]),), cond=True)
def and_value(x):
    return (x.sum() > 0) and (x.max() < 5)


@case((T([1.0, 2.0]),), (T([-1.0, 9.0]),), (T([-1.0, 0.0]),), cond=True)
def or_value(x):
    return (x.min() > 0) or (x.max() > 5)


@case((T([1.0, 2.0]),), (T([-1.0, 0.0]),), cond=True)
def and_returns_operand(x):
    return x.sum() and x.mean()


@case((T([0.0, 0.0]),), (T([1.0, -1.0]),), (T([1.0, 2.0]),), cond=True)
def or_returns_operand(x):
    return x.sum() or x.max()


@case((T(0),), (T(2),), (T(20),), cond=True)
def and_short_circuits_int_div(k):
    # 10 // 0 raises in eager torch; Python never evaluates it when k == 0
    if (k != 0) and (10 // k > 2):
        return k * 2
    return k


@case((T(0),), (T(3),), (T(30),), cond=True)
def or_short_circuits_int_div(k):
    if (k == 0) or (100 // k > 5):
        return k + 1
    return k - 1


@case((torch.zeros(2, 2),), (torch.eye(2) * 2,), (-torch.eye(2),), cond=True)
def and_short_circuits_inverse(m):
    # inv of a singular matrix raises; must not run when the left side is false
    if (m.abs().sum() > 0) and (torch.linalg.inv(m).sum() > 0):
        return m + 1
    return m - 1


@case((T([1.0, 2.0, 3.0]), T(1.0)), (T([1.0, 2.0, 3.0]), T(0.0)), cond=True)
def ternary_short_circuit(x, d):
    # the untaken branch would raise (inverse of a singular matrix)
    return torch.linalg.inv(torch.diag(x * d)).sum() if d != 0 else x.sum()


@case((POS, 3), (NEG, 3), (POS, 1), cond=True)
def tensor_and_python(x, n):
    if x.sum() > 0 and n > 2:
        return x * n
    return x


@case((POS, 3), (NEG, 3), cond=True)
def python_and_tensor(x, n):
    if n > 2 and x.sum() > 0:
        return x * n
    return x


# ---------------------------------------------------------------- early return
@case((POS,), (NEG,), cond=True)
def early_return(x):
    if x.sum() > 0:
        return x * 2
    return x - 1


@case((POS, POS), (POS, NEG), (NEG, POS), cond=True)
def early_return_nested(a, b):
    if a.sum() > 0:
        if b.sum() > 0:
            return a + b
        a = a * 10
    return a - b


@case((POS,), (NEG,), cond=True)
def early_return_tuple(x):
    if x.sum() > 0:
        return x, x.sum()
    y = x * 2
    return y, y.sum()


@case((POS,), (NEG,), cond=True)
def return_in_both_branches(x):
    if x.sum() > 0:
        return x.max()
    else:
        return x.min()


# ---------------------------------------------------------------- state under a tensor if
@case((POS,), (NEG,), cond=True)
def python_counter_under_tensor_if(x):
    c = 0
    if x.sum() > 0:
        c = 1
    return x * c, c


@case((POS,), (NEG,), cond=True)
def python_float_then_tensor(x):
    y = 0.0
    if x.sum() > 0:
        y = x.sum()
    else:
        y = x.mean()
    return y


@case((POS,), (NEG,), cond=True)
def attr_on_local_object(x):
    o = types.SimpleNamespace(v=x, w=1)
    if x.sum() > 0:
        o.v = x * 2
    else:
        o.v = x * 3
    return o.v


@case((POS,), (NEG,), cond=True)
def setitem_under_if(x):
    y = x.clone()
    if y[0] > 0:
        y[1] = 5.0
    else:
        y[2] = -5.0
    return y


@case((POS,), (NEG,), cond=True)
def dict_under_if(x):
    d = {"a": x, "b": x.sum()}
    if x.sum() > 0:
        d["a"] = x + 1
    else:
        d["b"] = d["b"] * 2
    return d


@case((POS,), (NEG,), cond=True)
def list_under_if(x):
    lst = [x, x * 2]
    if x.sum() > 0:
        lst = [lst[1], lst[0]]
    return lst


@case((POS,), (NEG,), cond=True)
def var_created_in_both_branches(x):
    if x.sum() > 0:
        z = x.max() * 2
    else:
        z = x.min() * 2
    w = z + 1
    return w


@case((T([1, 2]),), (T([-1, -2]),), cond=True)
def int_tensor_branches(x):
    if x.sum() > 0:
        r = x * 3
    else:
        r = x // 2
    return r


@case((POS,), (NEG,), cond=True)
def shapes_differ_between_branches(x):
    if x.sum() > 0:
        r = x[:2]
    else:
        r = x
    return r.sum()


# ---------------------------------------------------------------- Python-valued control flow
@case((POS, 3), (POS, -1), (NEG, 0), cond=False)
def python_if(x, n):
    if n > 0:
        y = x * n
    else:
        y = x
    return y


@case((POS, 5), (POS, 1), (POS, -4), cond=False)
def python_elif(x, n):
    if n > 3:
        return x + 3
    elif n > 0:
        return x + 1
    else:
        return x - 1


@case((POS, True), (POS, False), cond=False)
def python_ternary(x, flag):
    return x * 2 if flag else x * 3


@case((POS, 0), (POS, 2), (POS, 20), cond=False)
def python_and_short_circuit(x, n):
    if n != 0 and 10 // n > 2:
        return x * n
    return x


@case((POS, 0), (POS, 4), cond=False)
def python_or_short_circuit(x, n):
    if n == 0 or 10 // n > 2:
        return x + 1
    return x


@case((POS, False), (POS, True), cond=False)
def python_not(x, flag):
    if not flag:
        return x
    return -x


@case((POS,), (torch.ones(5),), cond=False)
def shape_is_python(x):
    if x.shape[0] > 3:
        return x * 2
    return x


@case((POS,), (torch.ones(2, 3),), cond=False)
def len_and_dim_are_python(x):
    if len(x) > 2 and x.dim() == 1:
        return x + 1
    return x - 1


@case((POS, None), (POS, T([1.0, 1.0, 1.0])), cond=False)
def none_check(x, bias=None):
    if bias is not None:
        x = x + bias
    if isinstance(x, torch.Tensor):
        x = x * 2
    return x


@case((POS, "add"), (POS, "mul"), cond=False)
def string_dispatch(x, mode):
    if mode == "add":
        return x + x
    return x * x


@case((POS, 3), (NEG, 3), (POS, 0), cond=True)
def python_and_tensor_mixed_nesting(x, n):
    if n > 0:
        if x.sum() > 0:
            return x * n
        return x - n
    return x


@pytest.mark.parametrize("fn,inputs,cond,loop", CASES)
def test_program(fn, inputs, cond, loop):
    g = check(fn, *inputs)
    check_structure(g, inputs[0], cond, loop)
