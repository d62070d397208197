"""Programs a demanding user would export, with inputs taking each of their paths.

Each entry of ``PROGRAMS`` is a ``Program``: the function (or an ``nn.Module`` factory), its
paths as {label: make(n) -> Call}, where ``n`` is the batch size (the exporter's dynamic
dimension 0), and whether the ONNX artifact is checked too. Arguments that are not batched
(weights, Python numbers) keep their shape and value at every ``n``: Python values are
specialized at export time. The programs live in this module so their source is available
to ``to_graph``. The functions after ``PROGRAMS`` are the ones the export gets wrong or
refuses (see the xfail and error tests).
"""
from typing import Callable, Dict, NamedTuple, Tuple

import torch
from torch import nn


class Call(NamedTuple):
    args: Tuple
    kwargs: Dict


class Program(NamedTuple):
    fn: Callable
    paths: Dict[str, Callable[[int], Call]]
    onnx: bool = True
    atol: float = 1e-5


def call(*args, **kwargs) -> Call:
    return Call(args, kwargs)


def rows(n, value, cols=4, dtype=torch.float32):
    """``n`` rows of ``value`` plus a small ramp (0.01 per element): distinct entries."""
    ramp = 0.01 * torch.arange(n * cols, dtype=torch.float64).reshape(n, cols)
    return (torch.full((n, cols), float(value), dtype=torch.float64) + ramp).to(dtype)


# ----------------------------------------------------------------------------- loops
def nested_if_in_while(x):
    i = 0
    while x.sum() < 10 and i < 20:
        if x.mean() > 0:
            x = x + 1
        elif x.mean() < -2:
            x = x * 0.5
        else:
            x = x * -1 + 0.5
        i += 1
    return x, i                                   # i: a Python int carried by a tensor loop


def while_break_continue(x):
    i = torch.zeros((), dtype=torch.int64)
    acc = torch.zeros(x.shape[1])
    while i < x.shape[0]:
        row = x[i]
        i = i + 1
        if row.sum() < 0:
            continue
        if row.sum() > 5:
            break
        acc = acc + row
    return acc, i


def _continue_and_break(n):
    x = rows(n, 0.3)
    x[0] = -1.0                                   # skipped by `continue`
    x[-1] = 3.0                                   # stops the loop (when n > 1)
    return call(x)


def enumerate_and_zip(x, y):
    weighted = torch.zeros(x.shape[1])
    for i, row in enumerate(x):
        weighted = weighted + row * i
    paired = torch.zeros(x.shape[1])
    for a, b in zip(x, y):                        # stops at the shorter of the two
        paired = paired + a * b if (a * b).sum() > 0 else paired - a
    return weighted, paired


def nested_loops(x):
    total = torch.zeros(())
    k = 0
    while k < x.shape[0]:
        r = x[k]
        m = 0
        while r.sum() < 20 and m < 4:
            if r.mean() > 0:
                r = r * 2
            else:
                r = r - 1
            m += 1
        total = total + r.sum()
        k += 1
    return total, k


def elif_chain_and_ternary(x):
    s = x.sum()
    if s > 10:
        y = x * 2
    elif s > 0:
        y = x + 1
    elif s > -10:
        y = x - 1
    else:
        y = x * 0
    acc = torch.zeros(x.shape[1])
    for row in y:
        acc = acc + (row if row.sum() > 0 else -row * 0.5)
    return y, acc


def counter_and_for_else(x):
    n = 0
    acc = torch.zeros(x.shape[1])
    for r in x:
        if r.sum() > 0:
            n += 2
        else:
            n -= 1
        if r.sum() > 10:
            break
        acc = acc + r
    else:
        acc = acc * 100
    return n, acc                                  # n: an int returned as a 0-d tensor


def range_loops(x):
    backwards = torch.zeros(x.shape[1])
    for i in range(x.shape[0] - 1, -1, -1):
        backwards = backwards * 0.5 + x[i]
    evens = torch.zeros(x.shape[1])
    for i in range(0, x.shape[0], 2):
        evens = evens + x[i]
    steps = torch.zeros(x.shape[1])
    for i in range(x.shape[0] - 1):
        steps = steps + (x[i + 1] - x[i - 1]).abs()   # x[-1] on the first step
    return backwards, evens, steps


def loop_counter_indexing_2d(x):
    cols = torch.zeros_like(x[:, 0])
    for i in range(x.shape[1]):
        if x[:, i].sum() > 0:
            cols = cols + x[:, i]
    weighted = torch.zeros(())
    for i in range(x.shape[0]):
        for j in range(2):                         # a Python loop: unrolled in the tensor loop
            if x[i, j] > 0:
                weighted = weighted + x[i, j] * (i + 1)
    return cols, weighted


def accumulators(x):
    best = torch.zeros((), dtype=torch.int64)
    half = 0.0
    for r in x:
        best = torch.maximum(best, r.argmax())
        half = half + r.sum() * 0.5
    return best, half


def python_bool_while(x):
    go = True
    while go:                                      # a Python bool that becomes a tensor
        x = x * 2
        go = x.sum() < 100
    return x


# ----------------------------------------------------------------------------- arguments
def two_batches(x, y):
    if x.sum() > y.sum():
        return x.sum(0) + y.mean(0)
    return x.mean(0) - y.sum(0)


def weights_argument(x, w):
    h = x @ w
    while h.abs().max() > 1:
        h = h / 2
    return h


def keywords_and_scalars(x, k, flag, *, scale, shift):
    if flag:                                       # Python values: specialized
        x = x + k
    if scale.sum() > 0:
        return x * scale + shift
    return x * k - scale * shift


def int_and_bool(x, mask):
    if mask.any():
        y = x + mask.long()
    else:
        y = x * 2
    return y, y > 3, y.sum() > 0, y // 3


def float64_program(x):
    n = 0
    while x.abs().max() > 1e-3:
        x = x * 0.5
        n += 1
    return torch.where(x > 0, x, x * 3), n


class Network(nn.Module):
    """Submodules (Sequential, LayerNorm, Conv1d, BatchNorm) and a data-dependent forward."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.seq = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 4))
        self.norm = nn.LayerNorm(4)
        self.conv = nn.Conv1d(1, 2, 3, padding=1)
        self.bn = nn.BatchNorm1d(4)
        self.lin = nn.Linear(4, 4)
        with torch.no_grad():
            self.bn.running_mean.fill_(0.3)
            self.bn.running_var.fill_(2.0)
        self.eval()

    def forward(self, x):
        h = self.seq(x)
        if x.sum() > 0:
            h = self.conv(self.norm(h).unsqueeze(1)).mean(1)
        else:
            h = self.bn(h)
        k = 0
        while h.abs().max() > 0.5 and k < 10:
            h = torch.tanh(self.lin(h)) * 0.6
            k += 1
        return h, k


# ----------------------------------------------------------------------------- values
def inplace_in_branches(x):
    y = x.clone()
    y[:, 1:] += 1
    if x.sum() > 0:
        y += 1
        y[0] = x[1]
        y[1, 2] = 0                                # a Python number stored in a branch
    else:
        torch.relu_(y)
        y.mul_(3)
    for i in range(x.shape[0]):
        y[i] = y[i] * (i + 1)                      # a write indexed by a loop counter
    return y


def keepdim_and_where(x):
    m = x.mean(dim=1, keepdim=True)
    if m.max() > 0:
        y = torch.where(x > m, x, m)
    else:
        y = torch.where(x < -1.05, -x, x).amax(dim=0, keepdim=True)
    return y, x.sum(1, keepdim=True)


def returns_inputs_unchanged(x, y):
    if x.sum() > 0:
        z = x
    else:
        z = x
    return z, y


def loop_in_branch_returning_views(x):
    y = x
    if x.sum() > 0:
        s = x.mean()
        while y.sum() < 100:                       # captures s, made in the branch
            y = y + s
        z = x.t()                                  # a view of an input leaves the branch
    else:
        z = x.t() * 2
    return y, z


def branches_of_different_shapes(x):
    if x.sum() > 0:
        y = x[:1] * 2
    else:
        y = x * 1
    return y


def batch_size_arithmetic(x):
    n = x.shape[0]
    y = x * n + n
    if x.shape[0] > 3:
        y = y / n
    if x.shape[0] % 2 == 0:
        y = y - max(n, 3)
    return y, x.sum() / x.shape[0], x.size(0) * x.numel()


_W = torch.tensor([[0.5, -0.2, 0.1, 0.0], [0.3, 0.4, -0.1, 0.2],
                   [-0.6, 0.1, 0.5, 0.3], [0.2, 0.2, 0.2, -0.4]])


def captured_constant(x):
    if x.sum() > 0:
        y = x @ _W
    else:
        y = x
    while y.abs().sum() > 10:
        y = y @ _W * 1.5
    return y


def _mask(n, p):
    return torch.arange(n * 4).reshape(n, 4) % 3 == (0 if p else 5)


PROGRAMS = {
    "nested_if_in_while": Program(nested_if_in_while, {
        "skip": lambda n: call(rows(n, 20)), "grow": lambda n: call(rows(n, 1)),
        "flip": lambda n: call(rows(n, -1)), "halve": lambda n: call(rows(n, -5))}),
    "while_break_continue": Program(while_break_continue, {
        "all_rows": lambda n: call(rows(n, 0.3)), "continue_and_break": _continue_and_break,
        "break_first": lambda n: call(rows(n, 2))}),
    "enumerate_and_zip": Program(enumerate_and_zip, {
        "longer_y": lambda n: call(rows(n, 1), rows(n + 2, 1)),
        "shorter_y": lambda n: call(rows(n, 1), rows(n - 1, -1))}),
    "nested_loops": Program(nested_loops, {
        "double": lambda n: call(rows(n, 0.5)), "minus": lambda n: call(rows(n, -1)),
        "skip_inner": lambda n: call(rows(n, 20))}),
    "elif_chain_and_ternary": Program(elif_chain_and_ternary, {
        "if": lambda n: call(rows(n, 5)), "elif1": lambda n: call(rows(n, 0.2)),
        "elif2": lambda n: call(rows(n, -0.5)), "else": lambda n: call(rows(n, -9))},
        onnx=False),
    "counter_and_for_else": Program(counter_and_for_else, {
        "no_break": lambda n: call(rows(n, 0.1) - 0.3 * (torch.arange(n) % 2).unsqueeze(1)),
        "break": lambda n: call(rows(n, 3))}, onnx=False),
    "range_loops": Program(range_loops, {"rows": lambda n: call(rows(n, 1) ** 2)},
                           onnx=False),
    "loop_counter_indexing_2d": Program(loop_counter_indexing_2d, {
        "mixed": lambda n: call(rows(n, 0.1) - torch.tensor([0.0, 0.3, 0.1, 0.5])),
        "negative": lambda n: call(rows(n, -1))}, onnx=False),
    "accumulators": Program(accumulators, {"rows": lambda n: call(rows(n, 1).flip(1))},
                            onnx=False),
    "python_bool_while": Program(python_bool_while, {
        "once": lambda n: call(rows(n, 30)), "many": lambda n: call(rows(n, 1))}, onnx=False),
    "two_batches": Program(two_batches, {
        "then": lambda n: call(rows(n, 2), rows(n + 3, 0.1)),
        "else": lambda n: call(rows(n, -2), rows(n + 3, 0.1))}, onnx=False),
    "weights_argument": Program(weights_argument, {
        "shrinks": lambda n: call(rows(n, 1), torch.eye(4) * 3),
        "small": lambda n: call(rows(n, 0.01), torch.eye(4) * 3)}),
    "keywords_and_scalars": Program(keywords_and_scalars, {
        "positive": lambda n: call(rows(n, 1), 2.5, True, shift=rows(n, 2), scale=torch.ones(4)),
        "negative": lambda n: call(rows(n, 1), 2.5, True, shift=rows(n, 2),
                                   scale=-torch.ones(4))}),
    "int_and_bool": Program(int_and_bool, {
        "any": lambda n: call(torch.arange(n * 4).reshape(n, 4) - 3, _mask(n, True)),
        "none": lambda n: call(torch.arange(n * 4).reshape(n, 4) - 3, _mask(n, False))}),
    "float64_program": Program(float64_program, {
        "large": lambda n: call(rows(n, 100, dtype=torch.float64)),
        "negative": lambda n: call(rows(n, -0.0001, dtype=torch.float64))}, atol=1e-12),
    "network_module": Program(Network, {
        "conv": lambda n: call(rows(n, 1)), "batchnorm": lambda n: call(rows(n, -1))},
        atol=1e-4),
    "inplace_in_branches": Program(inplace_in_branches, {
        "then": lambda n: call(rows(n, 1)), "else": lambda n: call(rows(n, -1.5))}),
    "loop_in_branch_returning_views": Program(loop_in_branch_returning_views, {
        "then": lambda n: call(rows(n, 1)), "else": lambda n: call(rows(n, -1))}, onnx=False),
    "keepdim_and_where": Program(keepdim_and_where, {
        "then": lambda n: call(rows(n, 1)), "else": lambda n: call(rows(n, -1))}, onnx=False),
    "returns_inputs_unchanged": Program(returns_inputs_unchanged, {
        "then": lambda n: call(rows(n, 1), rows(n, 2)),
        "else": lambda n: call(rows(n, -1), rows(n, 2))}, onnx=False),
    "branches_of_different_shapes": Program(branches_of_different_shapes, {
        "first_row": lambda n: call(rows(n, 1)), "all_rows": lambda n: call(rows(n, -1))},
        onnx=False),
    "batch_size_arithmetic": Program(batch_size_arithmetic, {
        "positive": lambda n: call(rows(n, 1)), "negative": lambda n: call(rows(n, -1))}),
    "captured_constant": Program(captured_constant, {
        "matmul": lambda n: call(rows(n, 4)), "identity": lambda n: call(rows(n, -4))}),
}
EXAMPLE_BATCH = 3
BATCHES = (2, 5)          # run-time batch sizes, both different from the example's


# ----------------------------------------------------------------------------- bugs, errors
def chained_setitem(x):
    y = x.clone()
    y[0][1] = 5.0                                  # a write through the view y[0]
    return y


def inplace_on_view(x):
    y = x.clone()
    y[0].zero_()
    return y


def augmented_view(x):
    y = x.clone()
    v = y[:, 1]
    v *= 2                                         # v is a view: y changes too
    return y


def nested_for(x, w):
    acc = torch.zeros(4)
    for r in x:
        for c in w:
            if (r * c).sum() > 0:
                acc = acc + r * c
    return acc


def keep_last_positive(x):
    last = torch.zeros(4)
    for r in x:
        if r.sum() > 0:
            last = r * 1
    return last


def early_return_in_loop(x):
    for row in x:
        if row.sum() > 3:
            return row * 10
    return x.sum(0)


def early_return(x):
    if x.sum() > 0:
        return x * 3
    return x.abs() + 1


def batch_over_three(x):
    return x * (x.shape[0] / 3)


def view_written_and_used(x):
    y = x.clone()
    v = y[0]
    v.zero_()
    return y, v


def branch_dtype_mismatch(x):
    if x.sum() > 0:
        y = x.long()
    else:
        y = x
    return y
