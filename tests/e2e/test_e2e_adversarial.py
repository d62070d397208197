"""Adversarial new-user programs: state shapes, mixed Python/tensor logic, calls, effects."""
import collections
import functools
import os
import random
import re
import time
import types
import warnings

import pytest
import torch

from e2e_helpers import _clone, assert_same, check, op_counts, case_collector
from transpiler import ConversionError, FallbackWarning, to_graph

T = torch.tensor
THIS = os.path.basename(__file__)
CASES, case = case_collector(cond=None, loop=None)


M = T([[1.0, 2.0], [3.0, -4.0], [0.5, 0.5], [-2.0, 1.0]])
M2 = T([[-1.0, -2.0], [3.0, 4.0], [5.0, 0.5], [2.0, 1.0]])
M3 = T([[9.0, 9.0], [-3.0, -4.0], [0.5, -0.5], [1.0, 1.0]])
POS = T([1.0, 2.0, 3.0])
NEG = T([-1.0, -2.0, 0.5])
ZERO = T([0.0, 0.0, 0.0])


# ================================================================ loop-carried state
@case((M,), (M2,), (M3,), cond=True, loop=True)
def dict_updated_in_branch_in_loop(x):
    d = {"pos": torch.zeros(()), "neg": torch.zeros(()), "n": 0}
    for row in x:
        if row.sum() > 0:
            d["pos"] = d["pos"] + row.sum()
            d["n"] += 1
        else:
            d["neg"] = d["neg"] - row.sum()
    return d


@case((T([1.0, 2.0]), T([0.5, 0.5])), (T([20.0, 1.0]), T([1.0, 1.0])), loop=True)
def nested_tuple_state(x, y):
    state = (x, (T(0), y))
    while state[0].sum() < 10:
        a, (n, b) = state
        state = (a * 2, (n + 1, b + a))
    return state


@case((T(10),), (T(1),), (T(100),), loop=True)
def fibonacci_tensor_limit(limit):
    a, b = T(0), T(1)
    while b < limit:
        a, b = b, a + b
    return a, b


@case((T(3),), (T(0),), (T(5),), loop=True)
def setitem_tensor_index_in_while(n):
    x = torch.zeros(5)
    i = T(0)
    while i < n:
        x[i] = i * 2.0
        i += 1
    return x


@case((M,), (M2,), (M3,), cond=False, loop=True)
def setitem_augassign_tensor_index(x):
    hist = torch.zeros(3, dtype=torch.int64)
    for row in x:
        k = (row.sum() > 0).long() + (row.sum() > 3).long()
        hist[k] += 1
    return hist


@case((M,), (M2,), (M3,), cond=True, loop=True)
def attr_augassign_in_loop(x):
    acc = types.SimpleNamespace(total=torch.zeros(2), count=0)
    for row in x:
        if row.sum() > 0:
            acc.total += row
            acc.count += 1
    return acc.total, acc.count


@case((T([1.0, 2.0]),), (T([60.0, 1.0]),), loop=True)
def dict_int_counter_in_while(x):
    d = {"v": x, "steps": 0}
    while d["v"].sum() < 50:
        d["v"] = d["v"] * 2
        d["steps"] += 1
    return d["v"], d["steps"]


@case((T(5),), (T(0),), (T(1),), loop=True)
def list_of_two_swapped_in_loop(n):
    pair = [T(1.0), T(2.0)]
    i = T(0)
    while i < n:
        pair = [pair[1], pair[0] * 3]
        i = i + 1
    return pair


@case((T([1.0, -1.0]),), (T([-3.0, 2.0]),), cond=True, loop=False)
def dict_updated_in_branch(x):
    cfg = {"scale": T(1.0), "shift": T(0.0)}
    if x.sum() > 0:
        cfg["scale"] = x.sum()
    else:
        cfg["shift"] = x.min()
    return x * cfg["scale"] + cfg["shift"], cfg


# ================================================================ branches
@case((T(-5.0),), (T(0.5),), (T(1.5),), (T(3.0),), (T(10.0),), cond=True)
def elif_chain_int64_results(s):
    if s < 0:
        k = T(0)
    elif s < 1:
        k = T(1)
    elif s < 2:
        k = T(2)
    elif s < 5:
        k = T(3)
    else:
        k = T(4)
    return k * 10


@case((POS,), (NEG,), (ZERO,), cond=True)
def ternary_in_ternary_python_float(x):
    s = x.sum()
    return s * 2 if s > 1 else (s - 1 if s < 0 else 3.0)


@case((POS,), (NEG,), (T([0.5, 0.0, 0.0]),), cond=True)
def and_or_operand_values(x):
    s = x.sum()
    r = s > 1 and s * 2 or s - 1
    return r


@case((POS, 1), (NEG, 1), (POS, 0))
def python_and_tensor_in_if(x, n):
    if n > 0 and x.sum() > 0:
        return x * n
    return x - n


@case((POS, 0), (NEG, 0), (POS, 2))
def python_or_tensor_in_if(x, n):
    if n > 1 or x.sum() > 0:
        y = x + n
    else:
        y = -x
    return y


@case((POS,), (NEG,), (T([2.0, 2.0, 0.5]),), cond=True)
def chained_comparison_value(x):
    return 0 < x.sum() < 5


@case((POS, NEG, ZERO), (NEG, ZERO, POS), (ZERO, POS, POS), cond=True)
def chained_three_tensors(a, b, c):
    if a.sum() < b.sum() <= c.sum():
        return a
    elif not (b.sum() < c.sum()):
        return b
    return c


@case((POS,), (NEG,), cond=True)
def not_and_or_mix(x):
    a = x.max() > 2
    b = x.min() < 0
    if not a and not b:
        return x
    if a or not b:
        return x * 2
    return x * 3


@case((T([1, 2, 3]),), (T([-1, 0, 1]),), (T([5, 5, 5]),), cond=True)
def int_and_bool_tensors_in_branches(x):
    flag = x > 0
    if flag.all():
        out = x * 2
        mask = flag
    elif flag.any():
        out = x // 2
        mask = ~flag
    else:
        out = x % 3
        mask = flag
    return out, mask


@case((T([1.0, 2.0], dtype=torch.float64),), (T([-1.0, 2.0], dtype=torch.float64),), cond=True)
def float64_branch(x):
    if x.prod() > 0:
        y = x.sqrt()
    else:
        y = x * 1e-10 + 1.0
    return y, y.dtype == torch.float64


def branch_reassigns_python_then_tensor(x):
    k = 2
    if x.sum() > 0:
        k = x.sum()
    return x * k


@case((POS,), (NEG,), cond=True)
def if_with_no_grad_inside(x):
    if x.sum() > 0:
        with torch.no_grad():
            y = x * 3
    else:
        y = x + 1
    return y


# ================================================================ loops
@case((M,), (M2,), (M3,), loop=True)
def while_inside_for(x):
    total = T(0)
    for row in x:
        j = T(0)
        while j < row.abs().sum():
            j = j + 1
        total = total + j
    return total


@case((M,), (M2,), (M3,), cond=True, loop=True)
def break_inner_only(x):
    s = torch.zeros(())
    outer = 0
    for row in x:
        for v in row:
            if v < 0:
                break
            s = s + v
        outer += 1
    return s, outer


@case((M,), (M2,), (M3,), cond=True, loop=True)
def continue_in_nested(x):
    s = torch.zeros(())
    for row in x:
        if row[0] < 0:
            continue
        for v in row:
            if v < 0:
                continue
            s = s + v
    return s


@case((POS,), (T([0.0, 5.0, 1.0]),), cond=True)
def for_else_python_range_tensor_break(x):
    # the staged index stands for a Python int: torch.tensor(i) warns no more than eager
    found = T(-1)
    for i in range(3):
        if x[i] > 2:
            found = T(i)
            break
    else:
        found = T(99)
    return found


@case((POS,), (T([0.0, 5.0, 1.0]),), cond=True)
def staged_range_index_as_python_int(x):
    # i is a staged index: torch.tensor(i, dtype=...), torch.tensor(i * 3 + 1) and i / 2
    # behave as for an int
    acc = torch.zeros(())
    last = torch.tensor(0)
    for i in range(3):
        if x[i] > 2:
            break
        acc = acc + torch.tensor(i, dtype=torch.float32) * x[i] + (i / 2) * x[0]
        last = torch.tensor(i * 3 + 1)
    return acc, last


@case((M,), (M3,), cond=True, loop=True)
def for_else_tensor_rows(x):
    y = x
    for row in x:
        if row.sum() > 10:
            break
    else:
        y = x * 0
    return y


@case((T([1.0, 2.0]), T(3.0)), (T([10.0, 2.0]), T(3.0)), (T([0.1, 0.1]), T(100.0)),
      loop=True)
def while_cond_python_then_tensor(x, k):
    go = 1
    steps = 0
    while go:
        x = x * 2
        steps += 1
        go = x.sum() < k
    return x, steps


@case((M,), (M2,), (M3,), cond=True, loop=True)
def cat_grows_in_branch(x):
    acc = torch.zeros(0)
    for row in x:
        if row.sum() > 0:
            acc = torch.cat([acc, row])
    return acc


@case((T(1), T(8)), (T(0), T(3)), (T(5), T(5)), loop=True)
def range_tensor_start_stop_step2(a, b):
    s = T(0)
    for i in range(a, b, 2):
        s = s + i * i
    return s


@case((M,), (M2,), loop=True)
def enumerate_start_one(x):
    s = torch.zeros(2)
    for i, row in enumerate(x, start=1):
        s = s + row * i
    return s


@case((M, M2), (M2, M3), cond=True, loop=True)
def zip_two_tensors_break(x, y):
    s = torch.zeros(2)
    for a, b in zip(x, y):
        if (a * b).sum() < -5:
            break
        s = s + a * b
    return s


@case((POS, NEG, ZERO), (NEG, POS, POS), (ZERO, ZERO, POS), cond=True)
def list_of_tensors_tensor_break(a, b, c):
    s = torch.zeros(3)
    n = 0
    for t in [a, b, c]:
        if t.sum() < 0:
            break
        s = s + t
        n += 1
    return s, n


@case((M,), (M2,), cond=True)
def range_len_tensor_if(x):
    s = torch.zeros(())
    for i in range(len(x)):
        if x[i, 0] > x[i, 1]:
            s = s + x[i, 0] * i
    return s


@case((T(1234),), (T(0),), (T(9),), loop=True)
def digit_sum(n):
    s = T(0)
    while n > 0:
        s = s + n % 10
        n = n // 10
    return s


@case((T(48), T(18)), (T(7), T(0)), (T(17), T(5)), loop=True)
def gcd_tensor(a, b):
    while b != 0:
        a, b = b, a % b
    return a


@case((T([3.0, 10.0]),), (T([0.5, 0.5]),), loop=True)
def while_any(x):
    steps = 0
    while (x > 1).any():
        x = x / 2
        steps += 1
    return x, steps


@case((T([3.0, 10.0]),), (T([0.5, 5.0]),), (T([1.5, 0.1]),), loop=True)
def while_not_all(x):
    while not (x < 1).all():
        x = torch.where(x >= 1, x - 1, x)
    return x


@case((T([1.0, 2.0], dtype=torch.float64),), (T([100.0, 1.0], dtype=torch.float64),), loop=True)
def float64_loop(x):
    i = 0
    while x.sum() < 50:
        x = x * 1.1 + 0.5
        i += 1
    return x, i


@case((M, T(1.0)), (M2, T(100.0)), (M3, T(-1.0)), cond=True, loop=True)
def early_return_nested_loops(x, thr):
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            if x[i, j] > thr:
                return x[i, j], i, j
    return T(0.0), -1, -1


@case((M, T(1)), (M2, T(3)), (M3, T(0)), cond=True, loop=True)
def early_return_tensor_loops(x, k):
    i = T(0)
    while i < 4:
        for row in x:
            if row.sum() > 10 + i:
                return row * i
        i = i + k + 1
    return x[0]


@case((T(3),), (T(1),), loop=True)
def return_list_built_in_loop(n):
    out = []
    i = T(0)
    while i < n:
        out.append(i * 2)
        i = i + 1
    return out


@case((M,), (M3,), cond=True, loop=True)
def return_list_filtered_rows(x):
    out = []
    for row in x:
        if row.sum() > 0:
            out.append(row)
    return out


@case((T(4),), (T(1),), loop=True)
def reversed_range_tensor(n):
    s = T(0)
    for i in reversed(range(n)):
        s = s * 10 + i
    return s


@case((T([1.0, 2.0]),), (T([30.0, 1.0]),), loop=True)
def walrus_in_while(x):
    while (s := x.sum()) < 20:
        x = x * 2
    return x, s


@case((T([1.0, 2.0]),), (T([60.0, 1.0]),), cond=True, loop=True)
def walrus_in_while_with_continue_and_break(x):
    # the test's binding is evaluated before each continue and not after a break
    n = 0.0
    while not (s := x.sum()) >= 50:
        x = x + 1
        if x.max() > 4:
            x = x * 1.5
            continue
        if x.min() > 100:
            break
        n += 1
    return x, s, n


@case((T([1.0, 2.0]),), loop=False)
def walrus_in_while_on_python_values(x):
    # a Python test: the loop runs in Python while tracing (no while node)
    i = 0
    while (j := i * 3) < 10:
        x = x + j
        i += 1
    return x, j


@case((T([1.0, 1.0]),), (T([5.0, 3.0]),), loop=True)
def while_shape_in_condition(x):
    while x.shape[0] < 8 and x.sum() < 100:
        x = torch.cat([x, x * 2])
    return x


@case((M,), (M2,), (M3,), loop=True)
def while_else_clause(x):
    i = T(0)
    s = torch.zeros(2)
    while i < x.shape[0]:
        s = s + x[i]
        i = i + 1
    else:
        s = s * 10
    return s


@case((T(5),), (T(0),), loop=True)
def inplace_on_local_in_loop(n):
    acc = torch.zeros(3)
    i = T(0)
    while i < n:
        acc.add_(1.0)
        acc[0].mul_(2.0)
        i = i + 1
    return acc


@case((T([5, 3, 9, 1]),), (T([1, 2, 3, 4]),), (T([4, 3, 2, 1]),), cond=True, loop=False)
def bubble_sort_clone_swap(x):
    x = x.clone()
    n = x.shape[0]
    for i in range(n):
        for j in range(n - 1 - i):
            if x[j] > x[j + 1]:
                a = x[j].clone()
                x[j] = x[j + 1]
                x[j + 1] = a
    return x


@case((T([5, 3, 9, 1]),), (T([1, 2, 3, 4]),), cond=True, loop=False)
def swap_with_views_eager_quirk(x):
    # views alias: eager turns a "swap" into a duplication; the graph must agree
    x = x.clone()
    for j in range(3):
        if x[j] > x[j + 1]:
            x[j], x[j + 1] = x[j + 1], x[j]
    return x


# ================================================================ returns
Pair = collections.namedtuple("Pair", ["lo", "hi"])


@case((POS, False), (NEG, False), (POS, True), cond=None)
def return_none_python_path(x, skip):
    if skip:
        return None
    if x.sum() > 0:
        return x
    return -x


@case((POS,), (NEG,), cond=True)
def return_dict_from_branches(x):
    if x.sum() > 0:
        return {"y": x * 2, "sign": T(1)}
    return {"y": -x, "sign": T(-1)}


@case((POS,), (NEG,), cond=True)
def return_namedtuple(x):
    if x.min() < 0:
        return Pair(x.min(), x.max())
    return Pair(x.max() * 0, x.max())


@case((POS,), (NEG,), cond=True)
def return_python_int_or_tensor_int(x):
    if x.sum() > 0:
        return 1
    return x.sum().long()


@case((POS,), (NEG,), cond=True)
def return_python_bool_or_tensor_bool(x):
    if x.max() > 2:
        return True
    return x.min() > -1.5


# ================================================================ calls
def level3(v):
    while v.abs().sum() > 4:
        v = v / 2
    return v


def level2(v):
    if v.sum() > 0:
        return level3(v * 3)
    return level3(v) - 1


def level1(v, w):
    return level2(v) + level2(w)


@case((POS, NEG), (NEG, NEG * 3), (ZERO, POS), cond=True, loop=True)
def three_level_calls(a, b):
    return level1(a, b)


class Normalizer:
    def __init__(self, eps):
        self.eps = eps
        self.calls = 0

    def norm(self, v):
        n = v.norm()
        if n < self.eps:
            return v
        return v / n

    def apply_rows(self, x):
        out = torch.zeros_like(x)
        for i in range(x.shape[0]):
            out[i] = self.norm(x[i])
        return out


@case((M,), (M * 0.01,), cond=True)
def helper_class_methods(x):
    return Normalizer(0.1).apply_rows(x)


def scaled_clip(x, lo, hi, scale=1.0):
    y = x * scale
    if y.max() > hi:
        y = y - (y.max() - hi)
    if y.min() < lo:
        y = y + (lo - y.min())
    return y


@case((POS,), (NEG * 4,), cond=True)
def partial_with_kwargs(x):
    f = functools.partial(scaled_clip, lo=-2.0, scale=2.0)
    return f(x, hi=3.0)


def rec_halve(x, depth):
    if depth == 0:
        return x
    if x.sum() > 1:
        x = x / 2
    return rec_halve(x, depth - 1) + depth


@case((POS, 3), (NEG, 2), (POS * 10, 0), cond=None)
def recursion_python_int_tensor_if(x, d):
    return rec_halve(x, d)


def is_even(n, x):
    return x if n == 0 else is_odd(n - 1, x * 2 if x.sum() > 0 else x + 1)


def is_odd(n, x):
    return -x if n == 0 else is_even(n - 1, x)


@case((POS, 3), (NEG, 2), (POS, 1), cond=True)
def mutual_recursion(x, n):
    return is_even(n, x)


def my_decorator(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs) * 2
    return wrapper


@my_decorator
def decorated_helper(x):
    if x.sum() > 0:
        return x
    return -x


@case((POS,), (NEG,), cond=True,
      )
def calls_wrapped_function(x):
    return decorated_helper(x) + 1


class StaticHolder:
    @staticmethod
    def pick(x):
        return x if x.sum() > 0 else x * 0

    @classmethod
    def twice(cls, x):
        return cls.pick(cls.pick(x) - 1)


@case((POS,), (NEG,), (T([1.0, 0.5, 0.0]),), cond=True)
def static_and_class_methods(x):
    return StaticHolder.twice(x)


def takes_star(a, b, c):
    if a.sum() > b.sum():
        return a * c
    return b * c


@case((POS, NEG), (NEG, POS), cond=True)
def star_unpack_call(x, y):
    args = (x, y)
    return takes_star(*args, c=2.0)


@case((M,), (M2,), cond=True)
def lambdas_in_list(x):
    fs = [lambda v, k=k: v * k if v.sum() > 0 else v - k for k in range(3)]
    return [f(x[i]) for i, f in enumerate(fs)]


# ================================================================ builtins
@case((POS, NEG), (NEG, POS), (ZERO, NEG), cond=None)
def builtin_max_two_sums(x, y):
    return max(x.sum(), y.sum())


@case((POS,), (NEG,), (ZERO,), cond=None)
def builtin_min_with_python(x):
    return min(x.sum(), 3.0), max(-1.0, x.max())


def builtin_max_python_int_vs_float_tensor(x):
    return max(1, x.max())


@case((POS,), (NEG,), cond=None)
def builtin_abs_of_sum(x):
    return abs(x.sum()) + abs(-2)


@case((M,), (M[:2],), loop=False)
def builtin_len_static(x):
    n = len(x)
    return x * n + n ** 2


@case((T([1.0, 2.0]),), (T([0.2, 0.3]),), (T([2.6, 0.0]),), loop=None)
def builtin_int_in_python_arith(x):
    k = int(x.sum())
    y = x
    for _ in range(k):
        y = y + 1
    return y, k * 2 + 1


@case((POS,), (NEG,), cond=None)
def builtin_float_then_branch(x):
    f = float(x.max())
    if f > 2.5:
        return x * f
    return x - f


@case((POS, 2.0), (POS, POS), (NEG, NEG))
def builtin_isinstance_dispatch(x, s):
    if isinstance(s, torch.Tensor):
        return x * s if s.sum() > 0 else x - s
    return x * s


def item_in_branch(x):
    v = x.sum().item()
    if v > 0:
        return x * v
    return x


@case((POS,), (NEG,), cond=None)
def bool_of_comparison_stored(x):
    pos = bool(x.sum() > 0)
    if pos:
        return x, pos
    return -x, pos


def list_comprehension_tensor_ternary(x):
    return torch.stack([r if r.sum() > 0 else -r for r in x])


def sum_generator_over_rows(x):
    return sum(r.max() for r in x)


@case((POS,), (NEG,), (ZERO,), cond=None)
def round_and_divmod_python(x):
    q, r = divmod(7, 3)
    return x * q + r, round(2.6)


def builtin_any_over_rows(x):
    if any(r.sum() > 5 for r in x):
        return x * 2
    return x


# ================================================================ nn modules
class LayerGated(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.layers = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(3)])
        self.head = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh(),
                                        torch.nn.Linear(4, 2))
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            h = layer(x)
            if h.mean() > 0:
                x = torch.relu(h) + x
            else:
                x = x - 0.1 * i
        x = self.drop(x)
        steps = 0
        while x.abs().max() > 2.0:
            x = x * 0.5
            steps += 1
        return self.head(x), steps


MX = [torch.randn(2, 4, generator=torch.Generator().manual_seed(s)) * (s + 1) for s in range(3)]


def _grads(module, out):
    y = out[0] if isinstance(out, tuple) else out
    return torch.autograd.grad(y.sum(), list(module.parameters()), allow_unused=True)


@pytest.mark.parametrize("x", MX)
def test_module_list_sequential_eval_exact_with_grads(x):
    m = LayerGated().eval()
    g = to_graph(m, strict=True)
    exp, got = m(x), g(x)
    assert_same(got, exp)
    for a, b in zip(_grads(m, got), _grads(m, exp)):
        if b is None:
            assert a is None or torch.all(a == 0)
        else:
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    c = op_counts(g.graph(x))
    assert c["cond"] == 3 and c["while"] == 1, c


def test_module_train_mode_dropout_random():
    m = LayerGated().train()
    g = to_graph(m, strict=True)
    x = MX[2]
    outs = [g(x)[0] for _ in range(4)]
    assert all(o.shape == (2, 2) for o in outs)
    assert any(not torch.equal(outs[0], o) for o in outs[1:]), "dropout mask baked in"
    # same seed, same RNG stream as eager
    torch.manual_seed(123)
    exp = m(x)
    torch.manual_seed(123)
    got = g(x)
    assert_same(got, exp)


def test_module_eval_train_switch():
    m = LayerGated()
    g = to_graph(m, strict=True)
    x = MX[1]
    m.eval()
    assert_same(g(x), m(x))
    m.train()
    torch.manual_seed(5)
    exp = m(x)
    torch.manual_seed(5)
    assert_same(g(x), exp)
    m.eval()
    assert_same(g(x), m(x))


class Counting(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.counter = 0
        self.w = torch.nn.Parameter(T([1.0, -1.0, 0.5]))

    def forward(self, x):
        self.counter += 1
        if (x * self.w).sum() > 0:
            return x * self.w
        return x - self.w


def test_module_counter_attribute_every_call():
    m_e, m_g = Counting(), Counting()
    g = to_graph(m_g)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        for x in (POS, NEG, POS, POS):
            assert_same(g(x), m_e(x))
    assert m_g.counter == m_e.counter == 4


def test_grad_through_while_on_params():
    torch.manual_seed(0)
    lin = torch.nn.Linear(3, 3)

    def f(x):
        h = lin(x)
        n = 0
        while h.norm() < 20 and n < 10:
            h = lin(h) * 1.5 + x
            n += 1
        return h.sum()
    g = to_graph(f, strict=True)
    for x in (POS, NEG, ZERO):
        exp, got = f(x), g(x)
        assert_same(got, exp)
        ge = torch.autograd.grad(exp, list(lin.parameters()))
        gg = torch.autograd.grad(got, list(lin.parameters()))
        for a, b in zip(gg, ge):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    assert op_counts(g.graph(POS))["while"] == 1


# ================================================================ aliasing / in-place
def inplace_on_input_in_loop(x):
    while x.sum() < 10:
        x.mul_(2)
    return x


def alias_augassign_in_branch(x):
    y = x
    if x.sum() > 0:
        y += 1
    return x


def inplace_input_under_if_returns_none(x):
    if x.sum() > 0:
        x.add_(1)


def view_zero_in_branch(x):
    v = x[0]
    if x.sum() > 0:
        v.zero_()
    return x * 1


INPLACE = [
    pytest.param(inplace_on_input_in_loop, [T([1.0, 2.0]), T([20.0, 1.0])],
                 id="inplace_on_input_in_loop"),
    pytest.param(alias_augassign_in_branch, [POS, NEG], id="alias_augassign_in_branch"),
    pytest.param(inplace_input_under_if_returns_none, [POS, NEG],
                 id="inplace_input_under_if_returns_none"),
    pytest.param(view_zero_in_branch, [POS, NEG], id="view_zero_in_branch"),
]


@pytest.mark.parametrize("fn,xs", INPLACE)
def test_inplace_visible_to_caller(fn, xs):
    """Eager mutates the caller's tensor; the graph (or its fallback) must do the same."""
    g = to_graph(fn)
    for x in xs:
        xe, xg = x.clone(), x.clone()
        exp = fn(xe)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FallbackWarning)
            got = g(xg)
        assert_same(got, exp)
        assert_same(xg, xe, "caller's tensor")


# ================================================================ side effects
LOG = []


def appends_global_in_branch(x):
    for row in x:
        if row.sum() > 0:
            LOG.append(row.sum())
    return x * 2


def test_global_list_append_in_tensor_branch():
    g = to_graph(appends_global_in_branch)
    for x in (M, M2, M3, M):
        LOG.clear()
        exp = appends_global_in_branch(x)
        n_e = [float(v) for v in LOG]
        LOG.clear()
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            got = g(x)
        assert_same(got, exp)
        assert [float(v) for v in LOG] == n_e
        fb = [w for w in rec if issubclass(w.category, FallbackWarning)]
        assert len(fb) <= 1
        if fb:
            assert re.search(re.escape(THIS) + r":\d+", str(fb[0].message)), fb[0].message
    with pytest.raises(ConversionError):
        to_graph(appends_global_in_branch, strict=True)(M)


def uses_python_random(x):
    if x.sum() > 0:
        return x * random.random()
    return x


def uses_torch_rand(x):
    if x.sum() > 0:
        return x * torch.rand(3)
    return x + torch.randn(3)


def uses_rand_in_loop(n):
    s = torch.zeros(())
    i = T(0)
    while i < n:
        s = s + torch.rand(())
        i = i + 1
    return s


@pytest.mark.parametrize("fn,x", [(uses_python_random, POS), (uses_torch_rand, POS),
                                  (uses_torch_rand, NEG), (uses_rand_in_loop, T(3))],
                         ids=["python_random", "torch_rand_then", "torch_rand_else",
                              "rand_in_loop"])
def test_randomness_fresh_each_call(fn, x):
    g = to_graph(fn)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        a, b, c = g(x), g(x), g(x)
    assert not (torch.equal(a, b) and torch.equal(b, c)), "random draw baked into the graph"


@pytest.mark.parametrize("fn,x", [(uses_torch_rand, POS), (uses_torch_rand, NEG),
                                  (uses_rand_in_loop, T(4))],
                         ids=["then", "else", "loop"])
def test_torch_rand_same_stream_as_eager(fn, x):
    g = to_graph(fn, strict=True)
    g(x)
    torch.manual_seed(7)
    exp = fn(x)
    torch.manual_seed(7)
    got = g(x)
    assert_same(got, exp)


def prints_nested(x):
    for row in x:
        j = T(0)
        while j < 2:
            if row[j] > 0:
                print("pos", j)
            else:
                print("neg")
            j = j + 1
    return x


def test_print_nested_tensor_loops(capsys):
    g = to_graph(prints_nested, strict=True)
    g(M)
    capsys.readouterr()
    for x in (M, M2, M3):
        prints_nested(x)
        exp = capsys.readouterr().out
        g(x)
        got = capsys.readouterr().out
        assert got.split() == exp.split(), (got, exp)


def uses_time(x):
    t = time.time()
    return x * 0 + t


def test_time_dependent_code():
    """Documented: time.time() runs when the graph runs (or the function falls back)."""
    g = to_graph(uses_time)
    x = T([0.0], dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        a = g(x)
        time.sleep(0.05)
        b = g(x)
    assert float(b) - float(a) >= 0.04, "time.time() was baked in at trace time"


# ================================================================ fallbacks / consistency
def inconsistent_return_structure(x):
    if x.sum() > 0:
        return x
    return x, x


def bool_or_int_operand(x, n):
    return x.sum() > 0 or n


def list_comprehension_filter(x):
    return [r * 2 for r in x if r.sum() > 0]


def tolist_in_branch(x):
    vals = x.tolist()
    if x.sum() > 0:
        return vals
    return [v * 2 for v in vals]


def string_state_in_branch(x):
    mode = "keep"
    if x.sum() > 0:
        mode = "double"
    return x * (2 if mode == "double" else 3)


def none_in_branch(x):
    y = x if x.sum() > 0 else None
    if y is None:
        return x - 1
    return y


def raises_in_branch(x):
    if x.sum() < -100:
        raise ValueError("very negative")
    return x + 1


def sorted_by_tensor_key(a, b, c):
    return torch.stack(sorted([a, b, c], key=lambda t: t.sum()))


DEFAULT_MODE = [
    (inconsistent_return_structure, [(POS,), (NEG,), (POS,)]),
    (bool_or_int_operand, [(POS, 5), (NEG, 5), (ZERO, 5)]),
    (list_comprehension_filter, [(M,), (M2,), (M3,)]),
    (tolist_in_branch, [(POS,), (NEG,)]),
    (item_in_branch, [(POS,), (NEG,)]),
    (list_comprehension_tensor_ternary, [(M,), (M2,)]),
    (sum_generator_over_rows, [(M,), (M2,)]),
    (builtin_any_over_rows, [(M,), (M3,)]),
    (and_or_operand_values, [(POS,), (NEG,), (T([0.5, 0.0, 0.0]),)]),
    (reversed_range_tensor, [(T(4),), (T(1),)]),
    (walrus_in_while, [(T([1.0, 2.0]),), (T([30.0, 1.0]),)]),
    (lambdas_in_list, [(M,), (M2,)]),
    (string_state_in_branch, [(POS,), (NEG,)]),
    (none_in_branch, [(POS,), (NEG,)]),
    (raises_in_branch, [(POS,), (NEG,)]),
    (sorted_by_tensor_key, [(POS, NEG, ZERO), (ZERO, POS, NEG)]),
]


@pytest.mark.parametrize("fn,inputs", DEFAULT_MODE, ids=[c[0].__name__ for c in DEFAULT_MODE])
def test_default_mode_faithful(fn, inputs):
    """Whatever cannot be a faithful graph must fall back (once, naming file:line)."""
    g = to_graph(fn)
    for i, args in enumerate(inputs):
        exp = fn(*_clone(args))
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            got = g(*_clone(args))
        assert_same(got, exp)
        fb = [w for w in rec if issubclass(w.category, FallbackWarning)]
        if i == 0:
            assert len(fb) <= 1
            if fb:
                assert re.search(re.escape(THIS) + r":\d+", str(fb[0].message)), fb[0].message
        else:
            assert not fb, "FallbackWarning emitted again: " + str(fb[0].message)


def test_raise_in_tensor_branch_at_run_time():
    g = to_graph(raises_in_branch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        assert_same(g(POS), POS + 1)
        with pytest.raises(ValueError, match="very negative"):
            g(NEG * 100)
        assert_same(g(NEG), NEG + 1)


def test_strict_inconsistent_return_converts():
    # each path's return structure is rebuilt per call (runtime.path_structures)
    g = to_graph(inconsistent_return_structure, strict=True)
    for x in (POS, NEG, POS):
        assert_same(g(x.clone()), inconsistent_return_structure(x.clone()))


# ================================================================ error quality
def elif_missing_var(x):
    s = x.sum()
    if s > 3:
        res = x * 3
    elif s > 1:
        res = x * 2
    elif s > 0:
        pass
    else:
        res = -x
    return res


def del_in_one_branch(x):
    tmp = x * 2
    if x.sum() > 0:
        del tmp
        out = x
    else:
        out = x + 1
    return out, tmp


@pytest.mark.parametrize("fn,word", [(elif_missing_var, "res"), (del_in_one_branch, "tmp")],
                         ids=["elif_missing", "del_in_branch"])
def test_error_names_variable_and_line(fn, word):
    from runtime.errors import BranchMismatchError
    with pytest.raises((ConversionError, BranchMismatchError)) as info:
        to_graph(fn, strict=True)(POS)
    text = str(info.value)
    assert re.search(r"'%s'|\b%s\b" % (word, word), text), text
    assert re.search(re.escape(THIS) + r":\d+", text), text


def matmul_after_growth(x, w):
    h = x
    for row in w:
        if row.sum() > 0:
            h = torch.cat([h, row])
    return h @ w


def test_runtime_shape_error_in_loop_names_line():
    g = to_graph(matmul_after_growth, strict=True)
    x, w = T([1.0, 2.0]), T([[-1.0, -2.0], [-3.0, 1.0]])
    assert_same(g(x, w), matmul_after_growth(x, w))
    with pytest.raises(Exception) as info:
        g(x, T([[1.0, 2.0], [-3.0, 1.0]]))
    line = matmul_after_growth.__code__.co_firstlineno + 5
    where = "".join(info.value.__notes__)    # (the text is eager's; the line in a note)
    assert f"{THIS}:{line}" in where, where


def bad_index_in_loop(x, n):
    i = T(0)
    s = torch.zeros(())
    while i < n:
        s = s + x[i]
        i = i + 1
    return s


def test_runtime_index_error_in_while_names_line():
    g = to_graph(bad_index_in_loop, strict=True)
    assert_same(g(POS, T(2)), bad_index_in_loop(POS, T(2)))
    with pytest.raises(Exception) as info:
        g(POS, T(5))
    line = bad_index_in_loop.__code__.co_firstlineno + 4
    where = "".join(info.value.__notes__)    # (the text is eager's; the line in a note)
    assert f"{THIS}:{line}" in where, where


# ================================================================ batch 2: more programs
def python_int_accumulator_becomes_float(x, n):
    s = 0
    i = T(0)
    while i < n:
        s = s + x
        i = i + 1
    return s


def best_row_is_none_tracking(x):
    best = None
    for row in x:
        if best is None or row.sum() > best.sum():
            best = row
    return best


@case((M,), (M2,), (M3,), cond=True)
def argmax_tracking_python_index(x):
    best_i = 0
    best = x[0].sum()
    for i in range(1, len(x)):
        if x[i].sum() > best:
            best = x[i].sum()
            best_i = i
    return best_i, best


@case((M,), (torch.zeros(0, 2),), (M2,), cond=True, loop=True)
def for_over_rows_maybe_empty(x):
    s = torch.zeros(2)
    for row in x:
        if row.sum() > 0:
            s = s + row
    return s


@case((T(3),), (T(0),), (T(6),), loop=True)
def while_int_truthiness(n):
    s = T(0)
    while n:
        s = s + n
        n = n - 1
    return s


@case((POS,), (ZERO,), (NEG,), cond=True)
def if_float_truthiness(x):
    if x.sum():
        return x / x.sum()
    return x


@case((POS,), (NEG,), cond=True)
def if_compare_eq_true(x):
    if (x.sum() > 0) == True:  # noqa: E712
        return x
    return x * 0


def test_to_graph_on_wraps_decorated_function():
    check(decorated_helper, (POS,), (NEG,))


def test_none_initialised_loop_var_clear_error_or_fallback():
    with pytest.raises(ConversionError) as info:
        to_graph(best_row_is_none_tracking, strict=True)(M)
    text = str(info.value)
    assert "'best'" in text and re.search(re.escape(THIS) + r":\d+", text), text
    g = to_graph(best_row_is_none_tracking)
    for i, x in enumerate((M, M2, M3)):
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            got = g(x)
        assert_same(got, best_row_is_none_tracking(x))
        assert len([w for w in rec if issubclass(w.category, FallbackWarning)]) == (i == 0)


@case((POS, NEG, ZERO), (NEG, ZERO, POS), cond=None)
def builtin_max_over_list(a, b, c):
    return max([a.sum(), b.sum(), c.sum()])


@case((POS,), (NEG,), cond=True)
def python_dict_items_loop_tensor_branch(x):
    weights = {"a": 1.0, "b": -2.0, "c": 0.5}
    out = {}
    for k, w in weights.items():
        if (x * w).sum() > 0:
            out[k] = x * w
        else:
            out[k] = x * 0
    return out


@case((M,), (M2,), cond=True, loop=True)
def nested_def_in_tensor_loop(x):
    s = torch.zeros(2)
    for row in x:
        def f(v):
            return v * 2 if v.sum() > 0 else v
        s = s + f(row)
    return s


@case((POS,), (NEG,), cond=True)
def return_inside_no_grad_in_branch(x):
    if x.sum() > 0:
        with torch.no_grad():
            return x * 5
    return x


@case((M,), (M2,), (M3,), cond=True, loop=True)
def len_of_grown_tensor(x):
    acc = torch.zeros(0)
    for row in x:
        if row[0] > 0:
            acc = torch.cat([acc, row])
    return acc.shape[0], acc.sum()


@case((T([1.0]),), (T([20.0]),), loop=True)
def range_over_dynamic_size(x):
    while x.sum() < 10:
        x = torch.cat([x, x])
    s = torch.zeros(())
    for i in range(x.shape[0]):
        s = s + x[i] * i
    return s


@case((T([1.0, 2.0]),), (T([50.0, 2.0]),), loop=True)
def two_sequential_whiles(x):
    n = T(0)
    while x.sum() < 40:
        x = x * 2
        n = n + 1
    while x.sum() > 20:
        x = x - 7
        n = n - 1
    return x, n


@case((M,), (M2,), (M3,), cond=True, loop=True)
def python_list_slots_updated_in_tensor_branch(x):
    s = [torch.zeros(2), torch.zeros(2)]
    for row in x:
        if row[0] > 0:
            s[0] = s[0] + row
        else:
            s[1] = s[1] - row
    return s


@case((T(5, dtype=torch.int64),), (T(0, dtype=torch.int64),), loop=True)
def int32_counter_int64_limit(n):
    i = T(0, dtype=torch.int32)
    while i < n:
        i = i + 1
    return i


@case((M,), (M2,), (M3,), cond=True, loop=True)
def bool_flag_carried(x):
    seen = T(False)
    for row in x:
        seen = seen | (row > 3).any()
    if seen:
        return x * 2, seen
    return x, seen


@case((M, T(4)), (M2, T(2)), (M3, T(4)), cond=True, loop=True)
def while_else_with_break(x, n):
    found = T(False)
    i = T(0)
    while i < n:
        if x[i].sum() > 8:
            break
        i = i + 1
    else:
        found = T(True)
    return found, i


@case((T(10),), (T(1),), (T(0),), loop=True)
def fibonacci_python_ints_tensor_limit(limit):
    a, b = 0, 1
    while b < limit:
        a, b = b, a + b
    return a, b


@case((M,), (M2,), (M3,), cond=True, loop=True)
def masked_assign_in_loop(x):
    x = x.clone()
    i = T(0)
    while (x > 2).any() and i < 10:
        x[x > 2] = x[x > 2] - 3
        i = i + 1
    return x, i


@case((M,), (M2,), (M3,), cond=True, loop=True)
def inner_break_depends_on_outer(x):
    total = T(0)
    for row in x:
        j = T(0)
        while True:
            j = j + 1
            if j > row.abs().max():
                break
        total = total + j
    return total


def inner_helper_loop(v):
    out = v
    for k in range(3):
        if out.sum() > 10:
            break
        out = out * 2
    return out


def mid_helper(v):
    i = T(0)
    while v.sum() < 30 and i < 3:
        v = inner_helper_loop(v) + 1
        i = i + 1
    return v, i


@case((POS,), (NEG,), (T([20.0, 0.0, 0.0]),), cond=True, loop=True)
def helper_loops_three_levels(x):
    v, i = mid_helper(x)
    if i > 1:
        return v - i
    return v


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(11)
        self.lin = torch.nn.Linear(3, 3)

    def gate(self, h):
        if h.mean() > 0:
            return torch.relu(h)
        return h * 0.1

    def forward(self, x):
        return self.gate(self.lin(x))


BLOCK = Block()


@case((T([[1.0, 2.0, 3.0]]),), (T([[-1.0, 0.0, 2.0]]),), cond=True, loop=True)
def submodule_in_tensor_while(x):
    i = T(0)
    while x.abs().sum() < 50 and i < 5:
        x = BLOCK(x) * 3 + x
        i = i + 1
    return x, i


@case((POS,), (NEG,), cond=None)
def getattr_dispatch_python(x):
    name = "exp" if x.shape[0] == 3 else "sin"
    y = getattr(torch, name)(x)
    if y.sum() > 5:
        return y
    return -y


@case((M,), (M2,), cond=True, loop=True)
def early_return_python_for_inside_tensor_while(x):
    i = T(0)
    while i < 3:
        for j in range(2):
            if x[i, j] > 2.5:
                return x[i], i, j
        i = i + 1
    return x[3], i, -1


# ================================================================ batch 3: arithmetic corners
XI = [T([-7, -3, -1, 0, 2, 5, 9]), T([7, -8, 3, -4, 1, -1, 100])]
XF = [T([-7.0, -3.5, -1.0, 0.0, 2.0, 5.5, 9.0]), T([7.0, -8.0, 3.0, -4.0, 0.5, -0.5, 1.0])]


@case((XI[0],), (XI[1],), cond=True)
def floor_div_mod_negative_ints(x):
    y = (x // 3) + (x % 3) * 10
    if y.sum() > 0:
        y = y - x // -2 + x % -4
    return y


@case((XF[0],), (XF[1],), cond=True)
def float_mod_floordiv_fmod(x):
    y = (x % 2.5) * 2 + x // 1.5 - torch.fmod(x, 2.0)
    if y.max() > 3:
        return y, y.min()
    return -y, y.max()


@case((XF[0],), (XF[1],), (T([200.0, 300.0, -1.0, 5.0, 0.0, 1.0, 2.0]),), cond=True)
def small_int_wraparound(x):
    y = x.to(torch.int8) * 100 + 50
    z = x.to(torch.uint8) - 10
    if (x > 100).any():
        z = z * 3
    return y, z, (x > 0) + (x < 0)


@case((XF[0],), (XF[1],), cond=True)
def inf_nan_in_branch(x):
    a = x / 0 + 1
    if torch.isnan(a).any():
        b = torch.where(a != a, x, x * 2)
    else:
        b = a * 0
    return a, (x * 0) / 0, b


@case((XF[0],), (XF[1],), cond=True, loop=True)
def int_float_promotion_in_loop(x):
    i = x.long()
    k = T(0)
    acc = i * 0
    while k < 3:
        acc = acc + i // 2
        k = k + 1
    if acc.sum() > 0:
        return acc * 2.5, i ** 2
    return acc / 2, i ** 2


@case((POS,), (NEG,), cond=True)
def list_length_differs_between_branches(x):
    items = [x]
    if x.sum() > 0:
        items.append(x * 2)
    return len(items), items


# ================================================================ the program table
@pytest.mark.parametrize("fn,inputs,cond,loop", CASES)
def test_program(fn, inputs, cond, loop):
    g = check(fn, *inputs)
    counts = op_counts(g.graph(*_clone(inputs[0])))
    if cond is not None:
        assert (counts["cond"] > 0) == cond, f"cond nodes: {counts['cond']} (expected {cond})"
    if loop is not None:
        assert (counts["while"] > 0) == loop, f"while nodes: {counts['while']} (expected {loop})"


# ================================================================ batch 2: stale Python state
SCALE = 2.0
WEIGHT = T([1.0, 2.0, 3.0])


def reads_global_scale(x):
    if x.sum() > 0:
        return x * SCALE
    return x


def reads_global_tensor(x):
    if x.sum() > 0:
        return x * WEIGHT
    return x - WEIGHT


def test_global_python_scalar_changed_after_trace():
    global SCALE
    g = to_graph(reads_global_scale)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        try:
            SCALE = 2.0
            assert_same(g(POS), reads_global_scale(POS))
            SCALE = 5.0
            assert_same(g(POS), reads_global_scale(POS))
        finally:
            SCALE = 2.0


def test_global_tensor_mutated_in_place_after_trace():
    g = to_graph(reads_global_tensor)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        try:
            assert_same(g(POS), reads_global_tensor(POS))
            WEIGHT.mul_(3)
            assert_same(g(NEG), reads_global_tensor(NEG))
            assert_same(g(POS), reads_global_tensor(POS))
        finally:
            WEIGHT.copy_(T([1.0, 2.0, 3.0]))


def test_global_tensor_rebound_after_trace():
    global WEIGHT
    g = to_graph(reads_global_tensor)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        try:
            assert_same(g(POS), reads_global_tensor(POS))
            WEIGHT = T([-1.0, 0.0, 1.0])
            assert_same(g(POS), reads_global_tensor(POS))
        finally:
            WEIGHT = T([1.0, 2.0, 3.0])


class Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = 2.0
        self.use_abs = False

    def forward(self, x):
        if self.use_abs:
            x = x.abs()
        if x.sum() > 0:
            return x * self.scale
        return x


def test_module_python_attribute_changed_after_trace():
    m = Scaled()
    g = to_graph(m)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        assert_same(g(NEG), m(NEG))
        m.scale = 7.0
        m.use_abs = True
        assert_same(g(NEG), m(NEG))


def test_closure_cell_changed_after_trace():
    k = 2.0

    def f(x):
        if x.sum() > 0:
            return x * k
        return x
    g = to_graph(f)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        assert_same(g(POS), f(POS))
        k = 10.0
        assert_same(g(POS), f(POS))


def prints_fstring(n):
    i = T(0)
    while i < n:
        if i % 2 == 0:
            print(f"even i={i}", i * 10, sep=" | ", end=";\n")
        i = i + 1
    return i


def test_print_fstring_of_tensor_in_loop(capsys):
    """An f-string of a tensor is printed with its run-time value, or the function falls back."""
    try:
        to_graph(prints_fstring, strict=True)(T(1))
    except ConversionError as e:
        assert re.search(re.escape(THIS) + r":\d+", str(e)), str(e)
    g = to_graph(prints_fstring)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        g(T(1))
        capsys.readouterr()
        for n in (T(3), T(0), T(5)):
            prints_fstring(n)
            exp = capsys.readouterr().out
            g(n)
            got = capsys.readouterr().out
            assert got == exp, (got, exp)


def grad_setitem_branch(w, x):
    out = torch.zeros(4)
    for i in range(4):
        if x[i] > 0:
            out[i] = w * x[i]
        else:
            out[i] = w.exp()
    return (out * out).sum()


def grad_cat_growing(w, n):
    acc = w.reshape(1)
    i = T(0)
    while i < n:
        acc = torch.cat([acc, acc * w])
        i = i + 1
    return acc.sum()


def grad_return_nested(w, x):
    for i in range(2):
        for j in range(2):
            if x[i, j] * w > 3:
                return (w * x[i, j]) ** 2
    return w * 0.5


@pytest.mark.parametrize("fn,inputs", [
    (grad_setitem_branch, [(T(0.5), T([1.0, -1.0, 2.0, 0.0])), (T(1.5), T([-1.0, -1.0, 2.0, 3.0]))]),
    (grad_cat_growing, [(T(1.5), T(3)), (T(0.5), T(0)), (T(-0.7), T(2))]),
    (grad_return_nested, [(T(1.0), T([[1.0, 2.0], [3.5, 0.0]])), (T(2.0), T([[1.0, 2.0], [0.0, 0.0]])),
                          (T(0.1), T([[1.0, 2.0], [3.0, 0.0]]))]),
], ids=["setitem_branch", "cat_growing", "return_nested"])
def test_gradients_more(fn, inputs):
    g = to_graph(fn, strict=True)
    for w, x in inputs:
        we, wg = w.clone().requires_grad_(), w.clone().requires_grad_()
        exp, got = fn(we, x), g(wg, x)
        assert_same(got, exp)
        (ge,) = torch.autograd.grad(exp, we)
        (gg,) = torch.autograd.grad(got, wg)
        torch.testing.assert_close(gg, ge, rtol=1e-5, atol=1e-5)


def returns_int_or_float(x):
    if x.sum() > 0:
        return 0
    return 0.5


def implicit_none_on_tensor_path(x):
    if x.sum() > 0:
        return x


@pytest.mark.parametrize("fn", [returns_int_or_float, implicit_none_on_tensor_path],
                         ids=lambda f: f.__name__)
def test_default_mode_kind_mismatch(fn):
    g = to_graph(fn)
    for i, x in enumerate((POS, NEG, POS)):
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            got = g(x)
        assert_same(got, fn(x))
        fb = [w for w in rec if issubclass(w.category, FallbackWarning)]
        assert len(fb) <= (1 if i == 0 else 0)


# ================================================================ batch 3: effects outside control flow
NCALLS = 0


def increments_global_every_call(x):
    global NCALLS
    NCALLS += 1
    if x.sum() > 0:
        return x * 2
    return x


def test_global_counter_outside_tensor_control_flow():
    global NCALLS
    g = to_graph(increments_global_every_call)
    NCALLS = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        for x in (POS, NEG, POS):
            assert_same(g(x), POS * 2 if x is POS else NEG)
    assert NCALLS == 3


def mutable_default_cache(x, cache=[]):  # noqa: B006 (on purpose)
    cache.append(1)
    if x.sum() > 0:
        return x * len(cache)
    return x


def test_mutable_default_argument():
    exp = [mutable_default_cache(POS) for _ in range(3)]
    mutable_default_cache.__defaults__[0].clear()
    g = to_graph(mutable_default_cache)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        got = [g(POS) for _ in range(3)]
    assert_same(got, exp)


def counts_on_argument(x, obj):
    obj.calls += 1
    if x.sum() > 0:
        return x * obj.calls
    return x


def test_argument_attribute_mutated_every_call():
    g = to_graph(counts_on_argument)
    oe, og = types.SimpleNamespace(calls=0), types.SimpleNamespace(calls=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        for x in (POS, NEG, POS):
            assert_same(g(x, og), counts_on_argument(x, oe))
    assert og.calls == oe.calls == 3


def keys_differ_between_branches(x):
    d = {}
    if x.sum() > 0:
        d["a"] = x
    else:
        d["b"] = x
    return d


def alias_inplace_in_loop(x):
    y = x
    i = T(0)
    while i < 3:
        x += 1
        i = i + 1
    return y


@pytest.mark.parametrize("fn,xs", [(keys_differ_between_branches, (POS, NEG, POS)),
                                   (alias_inplace_in_loop, (POS, NEG))],
                         ids=["keys_differ", "alias_inplace_loop"])
def test_default_mode_batch3(fn, xs):
    g = to_graph(fn)
    for i, x in enumerate(xs):
        xe, xg = x.clone(), x.clone()
        exp = fn(xe)
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            got = g(xg)
        assert_same(got, exp)
        assert_same(xg, xe, "caller's tensor")
        assert len([w for w in rec if issubclass(w.category, FallbackWarning)]) <= (i == 0)


# A Python number on one path and a tensor of another kind (int vs float) on the other:
# the contract asks for the same dtype on every path, so strict mode gives a clear error
# naming the variable, and default mode runs eagerly (never a silently changed kind).
@pytest.mark.parametrize("fn,args,word", [
    (builtin_max_python_int_vs_float_tensor, (NEG,), None),
    (python_int_accumulator_becomes_float, (T(0.5), T(3)), "s"),
    (branch_reassigns_python_then_tensor, (POS,), "k"),
], ids=["max_int_vs_float", "int_accumulator_float", "branch_int_then_float"])
def test_kind_change_is_a_clear_error(fn, args, word):
    with pytest.raises(ConversionError) as info:
        to_graph(fn, strict=True)(*args)
    text = str(info.value)
    assert THIS in text, text
    if word:
        assert f"'{word}'" in text, text
    g = to_graph(fn)
    for inputs in (args, tuple(-a if a.is_floating_point() else a for a in args)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = g(*inputs)
        assert_same(out, fn(*inputs))
        assert len([w for w in caught if issubclass(w.category, FallbackWarning)]) <= 1
