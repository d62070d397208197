"""while/for over tensors and Python values; break/continue/return; loop-carried state."""
import types

import pytest
import torch

from e2e_helpers import check, check_structure, case_collector

T = torch.tensor
CASES, case = case_collector(cond=False, loop=None)


M = T([[1.0, 2.0], [3.0, -4.0], [0.5, 0.5], [-2.0, 1.0]])
M2 = T([[-1.0, -2.0], [3.0, 4.0], [5.0, 0.5], [2.0, 1.0]])
M3 = T([[9.0, 9.0], [-3.0, -4.0], [0.5, -0.5], [1.0, 1.0]])


# ---------------------------------------------------------------- while
@case((T([1.0, 2.0]),), (T([30.0, 40.0]),), (T([0.1, 0.1]),), loop=True)
def while_tensor_cond(x):
    while x.sum() < 100:
        x = x * 2
    return x


@case((T(0),), (T(4),), (T(7),), loop=True)
def while_counter_to_tensor(n):
    i = 0
    s = 0
    while i < n:
        s = s + i
        i += 1
    return s, i


@case((T([1.0, 1.0]), T(3)), (T([5.0, 1.0]), T(10)), (T([50.0, 1.0]), T(10)),
      cond=True, loop=True)
def while_and_condition(x, n):
    i = 0
    while i < n and x.sum() < 20:
        x = x + 1
        i += 1
    return x, i


@case((T([1.0, 2.0]),), (T([40.0, 1.0]),), cond=True, loop=True)
def while_true_tensor_break(x):
    i = 0
    while True:
        x = x * 2
        i += 1
        if x.sum() > 50:
            break
    return x, i


@case((T(10),), (T(3),), (T(0),), cond=True, loop=True)
def while_continue(n):
    i = T(0)
    s = T(0)
    while i < n:
        i = i + 1
        if i % 3 == 0:
            continue
        s = s + i
    return s


@case((T([1.0, 2.0]), 3), (T([1.0, 2.0]), 0), loop=False)
def while_python_cond(x, n):
    i = 0
    while i < n:
        x = x + 1
        i += 1
    return x


@case((T(1), T(1), T(5)), (T(0), T(1), T(10)), (T(2), T(3), T(0)), loop=True)
def fibonacci_tuple_carried(a, b, n):
    i = 0
    while i < n:
        a, b = b, a + b
        i += 1
    return a, b


@case((T([1.0]), T([2.0])), (T([3.0]), T([0.5])), loop=True)
def list_carried(x, y):
    state = [x, y]
    while state[0].sum() + state[1].sum() < 30:
        state = [state[1], state[0] + state[1]]
    return state


@case((T([1.0, 2.0]),), (T([10.0, 20.0]),), loop=True)
def dict_carried(x):
    d = {"v": x, "n": T(0)}
    while d["v"].sum() < 50:
        d = {"v": d["v"] * 1.5, "n": d["n"] + 1}
    return d


@case((T([1.0, 1.0]),), (T([30.0, 1.0]),), loop=True)
def while_shape_grows(x):
    while x.sum() < 16:
        x = torch.cat([x, x])
    return x.sum(), x.shape[0]


# ---------------------------------------------------------------- for over tensors
@case((T([1.0, 2.0]), T(3)), (T([1.0, 2.0]), T(0)), (T([-1.0, 2.0]), T(5)), loop=True)
def for_range_tensor(x, n):
    s = torch.zeros(2)
    for i in range(n):
        s = s + x * i
    return s


@case((T(1), T(7)), (T(5), T(3)), (T(0), T(10)), loop=True)
def for_range_start_stop_step(a, b):
    s = T(0)
    for i in range(a, b, 2):
        s = s + i
    return s


@case((M,), (M2,), loop=True)
def for_over_tensor_rows(x):
    s = torch.zeros(2)
    for row in x:
        s = s + row
    return s


@case((M,), (M2,), loop=True)
def enumerate_tensor(x):
    s = torch.zeros(2)
    for i, row in enumerate(x):
        s = s + row * i
    return s


@case((M, M2), (M2, M3), loop=True)
def zip_tensors(x, y):
    s = torch.zeros(2)
    for a, b in zip(x, y):
        s = s + a * b
    return s


@case((M, T(2)), (M2, T(3)), (M3, T(0)), loop=True)
def for_range_tensor_index(x, n):
    s = torch.zeros(2)
    for i in range(n):
        s = s + x[i]
    return s


@case((M,), (M2,), (M3,), cond=True, loop=True)
def for_break(x):
    s = torch.zeros(2)
    for row in x:
        if row.sum() > 2:
            break
        s = s + row
    return s


@case((M,), (M2,), (M3,), cond=True, loop=True)
def for_continue(x):
    s = torch.zeros(2)
    for row in x:
        if row.sum() < 0:
            continue
        s = s + row
    return s


@case((M, T(4.0)), (M2, T(4.0)), (M3, T(100.0)), cond=True, loop=True)
def for_return_inside(x, thr):
    for row in x:
        if row.sum() > thr:
            return row
    return torch.zeros(2)


@case((M,), (M2,), (M3,), cond=True, loop=True)
def break_at_depth_two(x):
    s = torch.zeros(())
    for row in x:
        for v in row:
            if v > 2:
                break
            s = s + v
    return s


@case((M,), (M2,), (M3,), cond=True, loop=True)
def return_at_depth_two(x):
    for row in x:
        for v in row:
            if v > 4:
                return v
    return x.sum()


@case((M,), (M2,), (M3,), cond=True, loop=True)
def continue_and_break(x):
    s = torch.zeros(())
    n = 0
    for row in x:
        if row[0] < 0:
            continue
        if row[1] > 3:
            break
        s = s + row.sum()
        n += 1
    return s, n


@case((M,), (M2,), loop=True)
def var_created_in_loop(x):
    for row in x:
        last = row * 2
    return last


@case((M,), (M2,), (M3,), cond=True, loop=True)
def python_counter_in_tensor_loop(x):
    count = 0
    for row in x:
        if row.sum() > 0:
            count += 1
    return count


@case((M,), (M2,), loop=True)
def python_total_becomes_tensor(x):
    total = 0
    for row in x:
        total = total + row[0]
    return total


@case((T(3), T(2)), (T(1), T(4)), (T(0), T(3)), loop=True)
def nested_tensor_loops(n, m):
    s = T(0)
    for i in range(n):
        for j in range(m):
            s = s + i * j + 1
    return s


@case((M,), (M2,), (M3,), cond=True, loop=True)
def two_vars_in_loop_branch(x):
    pos = torch.zeros(2)
    neg = torch.zeros(2)
    for row in x:
        if row.sum() > 0:
            pos = pos + row
        else:
            neg = neg + row
    return pos, neg


@case((T(5),), (T(2),), loop=True)
def setitem_in_loop(n):
    y = torch.zeros(6)
    for i in range(n):
        y[i] = i * 2.0
    return y


@case((M,), (M2,), cond=True, loop=True)
def attr_in_loop(x):
    o = types.SimpleNamespace(total=torch.zeros(2))
    for row in x:
        if row.sum() > 0:
            o.total = o.total + row
    return o.total


@case((T([1.0, 2.0]),), (T([40.0, 1.0]),), cond=True, loop=True)
def range_int_with_tensor_break(x):
    for i in range(10):
        if x.sum() > 20:
            break
        x = x * 2
    return x


@case((M,), (M2,), (M3,), cond=True, loop=True)
def for_else(x):
    for row in x:
        if row.sum() > 5:
            found = row
            break
    else:
        found = torch.zeros(2)
    return found


# ---------------------------------------------------------------- append in a tensor loop
@case((M,), (M2,), loop=True)
def append_then_stack(x):
    out = []
    for row in x:
        out.append(row * 2)
    return torch.stack(out)


@case((T(3), T([1.0, 2.0])), (T(5), T([1.0, 2.0])), (T(1), T([0.0, 1.0])), loop=True)
def append_runtime_length(n, x):
    out = []
    i = 0
    while i < n:
        out.append(x * i)
        i += 1
    return torch.stack(out).sum(0), len(out)


@case((M,), (M2,), (M3,), cond=True, loop=True)
def append_under_tensor_if(x):
    out = [torch.zeros(2)]
    for row in x:
        if row.sum() > 0:
            out.append(row)
    return torch.stack(out)


# ---------------------------------------------------------------- Python loops
@case((T([1.0, 2.0]),), loop=False)
def for_range_int(x):
    for i in range(3):
        x = x + i
    return x


@case((T([1.0, 2.0]), T([3.0, 4.0]), T([5.0, 6.0])), loop=False)
def for_python_list_of_tensors(a, b, c):
    s = torch.zeros(2)
    for t in [a, b, c]:
        s = s + t
    return s


@case((T([1.0, 2.0]), T([3.0, 4.0])), loop=False)
def for_python_tuple_zip_enumerate(a, b):
    s = torch.zeros(2)
    for i, (p, q) in enumerate(zip((a, b), (b, a))):
        s = s + i * p - q
    return s


@case((M,), loop=False)
def for_range_len(x):
    s = torch.zeros(2)
    for i in range(len(x)):
        s = s + x[i] * i
    for d in x.shape:
        s = s + d
    return s


@case((T([1.0, -2.0]),), (T([-1.0, 2.0]),), cond=True, loop=False)
def python_loop_with_tensor_if(x):
    for i in range(3):
        if x.sum() > 0:
            x = x - 1
        else:
            x = x + 2
    return x


@case((T([1.0, 2.0]), T([1.0, 2.0, 3.0])), loop=False)
def enumerate_tuple_different_shapes(a, b):
    s = T(0.0)
    for i, t in enumerate((a, b)):
        s = s + i * t.sum()
    return s


@case((T([1.0, 2.0]), [1.0, 2.0, 3.0]), loop=False)
def for_python_floats(x, ws):
    for w in ws:
        x = x * w
    return x


# ---------------------------------------------------------------- more mixes
@case((T([1.0, 2.0]),), (T([40.0, 1.0]),), (T([0.01, 0.01]),), cond=True, loop=True)
def return_inside_while_true(x):
    i = 0
    while True:
        if x.sum() > 20:
            return x, i
        x = x * 3
        i += 1


@case((M,), (M2,), (M3,), cond=True, loop=True)
def ternary_in_loop(x):
    s = torch.zeros(2)
    for row in x:
        s = s + (row if row.sum() > 0 else -row)
    return s


@case((M,), (M2,), (M3,), cond=True, loop=True)
def dict_carried_over_rows(x):
    stats = {"pos": T(0), "neg": T(0), "sum": torch.zeros(2)}
    for row in x:
        if row.sum() > 0:
            stats["pos"] = stats["pos"] + 1
        else:
            stats["neg"] = stats["neg"] + 1
        stats["sum"] = stats["sum"] + row
    return stats


@case((T(12),), (T(5),), (T(1),), cond=True, loop=True)
def collatz_steps(n):
    steps = 0
    while n != 1:
        if n % 2 == 0:
            n = n // 2
        else:
            n = 3 * n + 1
        steps += 1
    return steps


@case((M,), (M2,), (M3,), cond=True, loop=True)
def while_over_index_with_break_and_continue(x):
    i = T(0)
    s = torch.zeros(())
    while i < x.shape[0]:
        row = x[i]
        i = i + 1
        if row[0] < 0:
            continue
        if row[1] < 0:
            break
        s = s + row.sum()
    return s, i


@case((M, T(2)), (M2, T(0)), cond=True, loop=True)
def nested_loop_tensor_if_python_inner(x, k):
    s = torch.zeros(2)
    for i in range(k):
        for j in range(2):
            if x[j].sum() > 0:
                s = s + x[j] * (j + 1)
    return s


@pytest.mark.parametrize("fn,inputs,cond,loop", CASES)
def test_program(fn, inputs, cond, loop):
    g = check(fn, *inputs)
    check_structure(g, inputs[0], cond, loop)
