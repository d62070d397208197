"""Calls to user functions, lambdas, closures, nested functions, argument kinds, builtins,
bound methods and nn.Modules with data-dependent forward."""
import functools

import pytest
import torch

from e2e_helpers import assert_same, check, check_structure, op_counts, case_collector
from transpiler import to_graph

T = torch.tensor
CASES, case = case_collector(cond=False, loop=False)


POS = T([1.0, 2.0, 3.0])
NEG = T([-1.0, -2.0, 0.5])
M = T([[1.0, 2.0], [3.0, -4.0], [0.5, 0.5]])
M2 = T([[-1.0, -2.0], [3.0, 4.0], [5.0, 0.5]])


# ---------------------------------------------------------------- helpers the programs call
def clip_sign(v):
    if v.sum() > 0:
        return v
    return -v


def count_positive_rows(x):
    c = T(0)
    for row in x:
        if row.sum() > 0:
            c = c + 1
    return c


def scale_n(x, n):
    for _ in range(n):
        x = x * 2
    return x


# ---------------------------------------------------------------- calls
@case((POS,), (NEG,), cond=True)
def calls_user_function(x):
    return clip_sign(x) + 1


@case((POS, NEG), (NEG, POS), (NEG, NEG), cond=True)
def calls_user_function_twice(a, b):
    return clip_sign(a) * clip_sign(b)


@case((M,), (M2,), cond=True, loop=True)
def calls_function_with_loop(x):
    return count_positive_rows(x) * 10


@case((POS,), (NEG,), cond=True)
def user_function_under_tensor_if(x):
    if x.mean() > 0:
        y = scale_n(x, 2)
    else:
        y = clip_sign(x)
    return y


@case((POS, 3), (POS, 0), cond=False)
def python_recursion(x, n):
    return x if n == 0 else python_recursion(x * 2, n - 1) + 1


# ---------------------------------------------------------------- lambdas, closures, nested
TG_RESERVED = "BUG: a nested def/lambda with control flow inside a converted function -> " \
    "ConversionError 'the name tg is reserved'"


@case((POS,), (NEG,), cond=True)
def local_lambda(x):
    f = lambda v: v * 2 if v.sum() > 0 else v * 3  # noqa: E731
    return f(x) + f(-x)


@case((POS,), (NEG,), cond=False)
def lambda_map(x):
    return list(map(lambda v: v + 1, [x, x * 2]))


@case((POS,), (NEG,), cond=True)
def nested_function(x):
    def inner(v):
        if v.max() > 2:
            return v - 2
        return v + 2
    return inner(x) * inner(x * 2)


@case((POS,), (NEG,), cond=True)
def nested_closure_over_local(x):
    k = x.sum()

    def inner(v):
        if k > 0:
            return v * k
        return v - k
    return inner(x)


def make_scaler(scale, threshold):
    def scaler(x):
        if x.sum() > threshold:
            return x * scale
        return x
    return scaler


closure_program = make_scaler(3.0, 1.0)
closure_program.__name__ = "closure_program"
case((POS,), (NEG,), cond=True)(closure_program)


@case((POS,), (NEG,), cond=True)
def functools_partial(x):
    f = functools.partial(scale_n, n=2)
    return clip_sign(f(x))


# ---------------------------------------------------------------- argument kinds
@case((POS,), (NEG, 3), cond=True)
def default_args(x, k=2):
    if x.sum() > 0:
        return x * k
    return x - k


@case((POS,), cond=True)
def kw_only_defaults(x, *, scale=1.5, flip=False):
    if flip:
        x = -x
    if x.sum() > 0:
        x = x * scale
    return x


@case((POS, NEG), (NEG, NEG, POS), cond=True)
def star_args(*xs):
    s = torch.zeros(3)
    for v in xs:
        if v.sum() > 0:
            s = s + v
    return s


@case((POS,), (NEG,), cond=True)
def calls_with_kwargs(x):
    return kw_only_defaults(x, scale=2.0, flip=True) + default_args(x, k=5)


def kwargs_sink(x, **kw):
    for k in sorted(kw):
        if kw[k].sum() > 0:
            x = x + kw[k]
    return x


@case((POS,), (NEG,), cond=True)
def double_star_kwargs(x):
    return kwargs_sink(x, a=x, b=-x)


# ---------------------------------------------------------------- builtins on tensors
@case((POS,), (NEG,), cond=False)
def builtin_len_abs(x):
    return abs(x) * len(x)


@case((POS, NEG), (NEG, POS), cond=True)
def builtin_max_of_scalars(a, b):
    return max(a.sum(), b.sum())


@case((POS, NEG), (NEG, POS), cond=True)
def builtin_min_of_scalars(a, b):
    return min(a.sum(), b.sum())


@case((POS,), (NEG,))
def builtin_max_over_tensor(x):
    return max(x)


@case((POS,), (NEG,))
def builtin_int_of_tensor(x):
    return int(x.sum())


@case((POS,), (NEG,))
def builtin_float_of_tensor(x):
    return float(x.max())


@case((POS,), (NEG,), cond=True)
def builtin_int_used_in_arith(x):
    n = int(x.sum())
    if n > 0:
        return x * n
    return x


@case((T(3),), (T(0),), cond=True, loop=True)
def builtin_range_len_of_list(n):
    out = []
    for i in range(n):
        out.append(torch.as_tensor(i) * 2)
    return torch.stack(out).sum() if len(out) > 0 else T(-1)


@case((POS,), (T([1, 2, 3]),))
def builtin_isinstance(x):
    if isinstance(x, torch.Tensor) and x.is_floating_point():
        return x * 0.5
    return x * 2


@case((POS,), (NEG,))
def builtin_sum_of_list(x):
    return sum([x, x * 2, x * 3])


# ---------------------------------------------------------------- bound methods
class Thresholder:
    def __init__(self, thr):
        self.thr = thr

    def apply(self, x):
        if x.max() > self.thr:
            return x - self.thr
        return self.helper(x)

    def helper(self, x):
        return x * 2


_thr = Thresholder(2.0)


@case((POS,), (NEG,), cond=True)
def calls_bound_method(x):
    return _thr.apply(x)


def test_bound_method_directly():
    g = check(_thr.apply, (POS,), (NEG,))
    assert op_counts(g.graph(POS))["cond"] >= 1


class Decorated:
    def __init__(self, k):
        self.k = k

    @to_graph
    def run(self, x):
        while x.sum() < self.k:
            x = x * 2
        return x


def test_decorated_method():
    a, b = Decorated(10.0), Decorated(100.0)
    assert_same(a.run(POS), T([2.0, 4.0, 6.0]))
    assert_same(b.run(POS), T([32.0, 64.0, 96.0]))
    assert op_counts(a.run.graph(POS))["while"] == 1


def test_decorator_forms():
    def f(x):
        if x.sum() > 0:
            return x
        return -x
    for g in (to_graph(f), to_graph(f, strict=True), to_graph(strict=True)(f)):
        assert_same(g(NEG), f(NEG))
        assert_same(g(POS), f(POS))


def test_lambda_directly():
    f = lambda x: x * 2 if x.sum() > 0 else x - 1  # noqa: E731
    g = check(f, (POS,), (NEG,))
    assert op_counts(g.graph(POS))["cond"] == 1


# ---------------------------------------------------------------- nn.Module
class Gated(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = torch.nn.Linear(3, 3)
        self.b = torch.nn.Linear(3, 3)

    def forward(self, x):
        h = self.a(x)
        if h.sum() > 0:
            h = torch.relu(h)
        else:
            h = self.b(h)
        steps = 0
        while h.norm() > 1.0 and steps < 5:
            h = h * 0.5
            steps += 1
        return h, steps


class Stack(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.layers = torch.nn.ModuleList([torch.nn.Linear(3, 3) for _ in range(3)])

    def forward(self, x, n):
        for i in range(n):
            layer = self.layers[0]
            x = torch.tanh(layer(x))
        for layer in self.layers:
            if x.mean() > 0:
                x = layer(x)
        return x


MOD_X = [T([[1.0, 2.0, 3.0]]), T([[-1.0, -2.0, 0.5]]), T([[0.1, 0.0, -0.1]])]


def _param_grads(module, out):
    loss = sum(o.float().sum() for o in (out if isinstance(out, tuple) else (out,))
               if isinstance(o, torch.Tensor) and o.requires_grad)
    return torch.autograd.grad(loss, list(module.parameters()), allow_unused=True)


@pytest.mark.parametrize("x", MOD_X)
def test_module_data_dependent_forward(x):
    m = Gated()
    g = to_graph(m, strict=True)
    exp = m(x)
    got = g(x)
    assert_same(got, exp)
    for a, b in zip(_param_grads(m, got), _param_grads(m, exp)):
        if b is None:
            assert a is None or torch.all(a == 0)
        else:
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    counts = op_counts(g.graph(x))
    assert counts["cond"] >= 1 and counts["while"] == 1


@pytest.mark.parametrize("x", MOD_X)
def test_module_loop_over_layers(x):
    m = Stack()
    g = to_graph(m, strict=True)
    exp, got = m(x, 2), g(x, 2)
    assert_same(got, exp)
    for a, b in zip(_param_grads(m, got), _param_grads(m, exp)):
        if b is None:
            assert a is None or torch.all(a == 0)
        else:
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    counts = op_counts(g.graph(x, 2))
    assert counts["cond"] == 3 and counts["while"] == 0


def test_module_parameter_update_seen():
    """Parameters are read at run time, not baked in as constants."""
    m = Gated()
    g = to_graph(m, strict=True)
    x = MOD_X[0]
    assert_same(g(x), m(x))
    with torch.no_grad():
        m.a.weight.mul_(-1.0)
        m.a.bias.add_(0.3)
    assert_same(g(x), m(x))


@pytest.mark.parametrize("fn,inputs,cond,loop", CASES)
def test_program(fn, inputs, cond, loop):
    g = check(fn, *inputs)
    check_structure(g, inputs[0], cond, loop)
