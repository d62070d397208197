"""Fused elementwise kernels under autograd: one node each, forward and backward in C.

Every derivative rule of the pointwise table is checked by ``gradcheck`` in float64 on a
one-step kernel built straight from the table (one compiler run for all of them), and on
points where eager's backward makes a choice (ties, bounds, NaN, Inf) against eager.
Fused groups of 3-8 ops from converted functions (broadcast bias and per-row inputs, 0-d
tensors, Python numbers, shared subexpressions, an output also used inside the group,
several outputs) are compared with eager's gradients in float32 over two calls with
different inputs, in default and strict mode; each checks that the fused node is the one
that ran (its ``grad_fn``), so no test passes on the torch fallback.
"""
import pytest
import torch
import torch.nn.functional as F

from runtime.kernels import autograd_node, compiler, library, pointwise
from runtime.kernels.codegen import KernelSpec, Operand, Step
from runtime.kernels.launch import FusedKernel
from runtime.kernels.pointwise_backward import plan
from tests.e2e.e2e_helpers import assert_same
from transpiler import to_graph

needs_compiler = pytest.mark.skipif(not compiler.compiler_available(), reason="no C compiler")
NODE = "_FusedNodeBackward"


@pytest.fixture(autouse=True)
def _kernels_built_before_the_first_call(monkeypatch):
    """The checks of which node ran need the kernels bound at the first call (not on
    torch ops while a background build runs)."""
    from runtime.options import options
    monkeypatch.setattr(options, "kernel_build", "sync", raising=False)


class X:
    """A tensor operand of a table case."""

    def __init__(self, k):
        self.k = k


# (id, table op, args (X(k): tensor k), kwargs, eager function, domain (lo, hi))
CASES = [
    ("neg", "neg", (X(0),), {}, torch.neg, None),
    ("abs", "abs", (X(0),), {}, torch.abs, None),
    ("exp", "exp", (X(0),), {}, torch.exp, None),
    ("exp2", "exp2", (X(0),), {}, torch.exp2, None),
    ("expm1", "expm1", (X(0),), {}, torch.expm1, None),
    ("log", "log", (X(0),), {}, torch.log, (0.2, 3)),
    ("log2", "log2", (X(0),), {}, torch.log2, (0.2, 3)),
    ("log10", "log10", (X(0),), {}, torch.log10, (0.2, 3)),
    ("log1p", "log1p", (X(0),), {}, torch.log1p, (-0.5, 3)),
    ("sqrt", "sqrt", (X(0),), {}, torch.sqrt, (0.2, 3)),
    ("rsqrt", "rsqrt", (X(0),), {}, torch.rsqrt, (0.2, 3)),
    ("reciprocal", "reciprocal", (X(0),), {}, torch.reciprocal, (0.3, 3)),
    ("square", "square", (X(0),), {}, torch.square, None),
    ("sin", "sin", (X(0),), {}, torch.sin, None),
    ("cos", "cos", (X(0),), {}, torch.cos, None),
    ("tan", "tan", (X(0),), {}, torch.tan, (-1, 1)),
    ("asin", "asin", (X(0),), {}, torch.asin, (-0.9, 0.9)),
    ("acos", "acos", (X(0),), {}, torch.acos, (-0.9, 0.9)),
    ("atan", "atan", (X(0),), {}, torch.atan, None),
    ("sinh", "sinh", (X(0),), {}, torch.sinh, None),
    ("cosh", "cosh", (X(0),), {}, torch.cosh, None),
    ("tanh", "tanh", (X(0),), {}, torch.tanh, None),
    ("erf", "erf", (X(0),), {}, torch.erf, None),
    ("floor", "floor", (X(0),), {}, torch.floor, None),
    ("ceil", "ceil", (X(0),), {}, torch.ceil, None),
    ("trunc", "trunc", (X(0),), {}, torch.trunc, None),
    ("round", "round", (X(0),), {}, torch.round, None),
    ("sigmoid", "sigmoid", (X(0),), {}, torch.sigmoid, None),
    ("relu", "relu", (X(0),), {}, torch.relu, None),
    ("silu", "silu", (X(0),), {}, F.silu, None),
    ("mish", "mish", (X(0),), {}, F.mish, None),
    ("relu6", "relu6", (X(0),), {}, F.relu6, (-3, 9)),
    ("hardsigmoid", "hardsigmoid", (X(0),), {}, F.hardsigmoid, (-5, 5)),
    ("hardswish", "hardswish", (X(0),), {}, F.hardswish, (-5, 5)),
    ("gelu", "gelu", (X(0),), {}, F.gelu, None),
    ("gelu_tanh", "gelu", (X(0),), {"approximate": "tanh"},
     lambda x: F.gelu(x, approximate="tanh"), None),
    ("softplus", "softplus", (X(0), 2.0, 1.0), {}, lambda x: F.softplus(x, 2.0, 1.0), None),
    ("leaky_relu", "leaky_relu", (X(0), 0.2), {}, lambda x: F.leaky_relu(x, 0.2), None),
    ("elu", "elu", (X(0),), {"alpha": 0.7}, lambda x: F.elu(x, 0.7), None),
    ("hardtanh", "hardtanh", (X(0), -0.5, 0.5), {}, lambda x: F.hardtanh(x, -0.5, 0.5), None),
    ("clamp", "clamp", (X(0), -0.5, 0.5), {}, lambda x: x.clamp(-0.5, 0.5), None),
    ("clamp_min", "clamp_min", (X(0), 0.1), {}, lambda x: x.clamp_min(0.1), None),
    ("clamp_max", "clamp_max", (X(0), 0.1), {}, lambda x: x.clamp_max(0.1), None),
    ("pow2", "pow", (X(0), 2), {}, lambda x: x ** 2, None),
    ("pow3", "pow", (X(0), 3), {}, lambda x: x ** 3, None),
    ("pow_half", "pow", (X(0), 0.5), {}, lambda x: x ** 0.5, (0.2, 3)),
    ("pow_m1", "pow", (X(0), -1), {}, lambda x: x ** -1, (0.3, 3)),
    ("pow_m2", "pow", (X(0), -2), {}, lambda x: x ** -2, (0.3, 3)),
    ("pow_1.7", "pow", (X(0), 1.7), {}, lambda x: x ** 1.7, (0.2, 3)),
    ("pow_tensor", "pow", (X(0), X(1)), {}, torch.pow, (0.2, 3)),
    ("rpow", "rpow", (X(0), 2.5), {}, lambda x: 2.5 ** x, None),
    ("add", "add", (X(0), X(1)), {}, torch.add, None),
    ("add_alpha", "add", (X(0), X(1)), {"alpha": 0.3}, lambda a, b: torch.add(a, b, alpha=0.3),
     None),
    ("sub", "sub", (X(0), X(1)), {}, torch.sub, None),
    ("sub_alpha", "sub", (X(0), X(1)), {"alpha": 2}, lambda a, b: torch.sub(a, b, alpha=2),
     None),
    ("rsub", "rsub", (X(0), 1.5), {}, lambda x: 1.5 - x, None),
    ("mul", "mul", (X(0), X(1)), {}, torch.mul, None),
    ("div", "div", (X(0), X(1)), {}, torch.div, (0.3, 3)),
    ("rdiv", "rdiv", (X(0), 2.0), {}, lambda x: 2.0 / x, (0.3, 3)),
    ("maximum", "maximum", (X(0), X(1)), {}, torch.maximum, None),
    ("minimum", "minimum", (X(0), X(1)), {}, torch.minimum, None),
    ("where", "where", (X(2), X(0), X(1)), {}, None, None),
    ("masked_fill", "masked_fill", (X(0), X(2), X(3)), {}, None, None),
    ("clamp_tensor", "clamp", (X(0), X(1), X(3)), {}, torch.clamp, None),
    ("clamp_min_tensor", "clamp", (X(0), X(1)), {}, lambda x, lo: x.clamp(min=lo), None),
    ("clamp_max_tensor", "clamp", (X(0),), {"max": X(1)}, lambda x, hi: x.clamp(max=hi), None),
    ("addcmul", "addcmul", (X(0), X(1), X(3)), {"value": 0.5},
     lambda a, b, c: torch.addcmul(a, b, c, value=0.5), None),
    ("addcdiv", "addcdiv", (X(0), X(1), X(3)), {"value": 0.5},
     lambda a, b, c: torch.addcdiv(a, b, c, value=0.5), (0.3, 3)),
]
SHAPE = (3, 5)


def _tensors(domain, seed, dtype=torch.float64, shape=SHAPE):
    lo, hi = domain or (-2.5, 2.5)
    gen = torch.Generator().manual_seed(seed)
    a = lo + (hi - lo) * torch.rand(shape, generator=gen, dtype=dtype)
    b = lo + (hi - lo) * torch.rand(shape, generator=gen, dtype=dtype)
    mask = torch.rand(shape, generator=gen) > 0.5
    c = lo + (hi - lo) * torch.rand((), generator=gen, dtype=dtype)   # a 0-d tensor
    if domain is not None:
        c = c.clamp_min(lo + 0.05)
    return [a, b, mask, c]


def _case_kernel(case, dtype="float64", shape=SHAPE):
    """A one-step FusedKernel of the table's expression for ``case`` and its tensor order."""
    _, op, args, kwargs, _, _ = case
    expr = pointwise.match(op, args, kwargs)
    assert expr is not None and pointwise.derivative(expr.template) is not None, case[0]
    order, operands = [], []
    for value in expr.operands:
        if isinstance(value, X):
            if value.k not in order:
                order.append(value.k)
            operands.append(Operand("in", order.index(value.k)))
        else:
            operands.append(Operand("c", value))
    tensors = _tensors(case[5], 0, getattr(torch, dtype), shape)
    inputs = tuple(("bool" if k == 2 else dtype, "scalar" if k == 3 else "full")
                   for k in order)
    spec = KernelSpec(dtype, inputs, (Step(expr.template, tuple(operands)),), ((0, dtype),))
    shapes = [tuple(tensors[k].shape) for k in order]
    kernel = FusedKernel(spec, "k", _eager(case, order), shapes, shape, 0, [op])
    return kernel, order


def _eager(case, order):
    """The eager op over the kernel's tensors (in ``order``), as a tuple."""
    name, fn = case[0], case[4]
    if name == "where":
        return lambda *t: (torch.where(t[order.index(2)], t[order.index(0)], t[order.index(1)]),)
    if name == "masked_fill":
        return lambda *t: (t[order.index(0)].masked_fill(t[order.index(2)], t[order.index(3)]),)
    return lambda *t: (fn(*[t[order.index(k)] for k in sorted(order)]),)


@pytest.fixture(scope="module")
def kernels():
    """Every case's kernel, built in one translation unit; their backward kernels too (one
    forward under autograd each makes them wanted, the first backward builds them all)."""
    built = {case[0]: _case_kernel(case) for case in CASES}
    assert library.build_kernels([k for k, _ in built.values()])
    for case in CASES:
        kernel, order = built[case[0]]
        xs = _inputs(case, order, 0)
        kernel(*xs)
    return built


def _inputs(case, order, seed, dtype=torch.float64):
    tensors = _tensors(case[5], seed, dtype)
    return [tensors[k].requires_grad_(k != 2) for k in order]


@needs_compiler
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_rule_gradcheck(kernels, case):
    kernel, order = kernels[case[0]]
    xs = _inputs(case, order, 1)
    out = kernel(*xs)
    assert type(out.grad_fn).__name__ == NODE
    assert torch.autograd.gradcheck(lambda *t: kernel(*t), xs, eps=1e-6, atol=1e-6)
    # the backward kernel matches eager's backward formula, not just numerically
    grads = torch.autograd.grad(out, [x for x in xs if x.requires_grad],
                                torch.linspace(-1, 1, 15, dtype=torch.float64).view(SHAPE))
    expected = torch.autograd.grad(kernel.torch_fn(*xs)[0], [x for x in xs if x.requires_grad],
                                   torch.linspace(-1, 1, 15, dtype=torch.float64).view(SHAPE))
    for got, exp in zip(grads, expected):
        torch.testing.assert_close(got, exp, rtol=1e-12, atol=1e-12)


def test_every_float_op_has_a_rule():
    """Every float op of the table has a derivative (comparisons and bool logic: none)."""
    for name, rule in pointwise.RULES.items():
        for args in [(X(0),), (X(0), X(1)), (X(0), 2.0), (X(0), X(1), X(2)), (X(0), -1.0, 1.0)]:
            expr = rule(args, {})
            if expr is not None:
                d = pointwise.derivative(expr.template)
                assert d is not None, (name, expr.template)
                assert (d == pointwise.NONDIFF) == (expr.kind == "b"), name


EDGES = torch.tensor([0.0, -0.0, 6.0, -3.0, 3.0, 0.5, -0.5, float("nan"), float("inf"),
                      -float("inf"), 1.0, 25.0, -1e-30, 1e-30, 0.1])


EDGE_CASES = ["abs", "relu", "relu6", "hardsigmoid", "hardswish", "elu", "leaky_relu",
              "hardtanh", "clamp", "clamp_min", "clamp_max", "maximum", "minimum", "sigmoid",
              "tanh", "exp", "gelu", "silu", "softplus", "floor", "sqrt", "log", "pow_tensor",
              "clamp_min_tensor", "clamp_max_tensor"]


@pytest.fixture(scope="module")
def edge_kernels():
    built = {c[0]: _case_kernel(c, "float32", EDGES.shape) for c in CASES if c[0] in EDGE_CASES}
    assert library.build_kernels([k for k, _ in built.values()])
    for kernel, order in built.values():
        kernel(*[EDGES.clone().requires_grad_() for _ in order])     # backward kernels wanted
    return built


@needs_compiler
@pytest.mark.parametrize("name", EDGE_CASES)
def test_edges_as_eager(edge_kernels, name):
    """Ties, bounds, zeros, NaN and Inf: the backward kernel decides as eager's does."""
    kernel, order = edge_kernels[name]
    first = EDGES.clone().requires_grad_()
    second = (EDGES.flip(0) if len(order) > 1 else EDGES).clone().requires_grad_()
    xs = [first, second][:len(order)]
    out = kernel(*xs)
    assert type(out.grad_fn).__name__ == NODE
    g = torch.linspace(-2, 2, len(EDGES))
    got = torch.autograd.grad(out, xs, g)
    expected = torch.autograd.grad(kernel.torch_fn(*xs)[0], xs, g)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, equal_nan=True)


# ------------------------------------------------------------------------ fused groups
def bias_gelu_residual(x, b, r):
    return F.gelu(x + b) + r


def mlp_gelu(x, w1, b1, w2, b2):
    h = F.gelu(x @ w1 + b1)
    return torch.tanh(h @ w2 + b2) * 0.5 + x


def shared(x, y, s):                        # t read three times; s a 0-d tensor
    t = x * y
    return torch.sigmoid(t) * t + torch.sin(t) * s - 2.0 / (t * t + 1.0)


def two_outputs(x, scale, r):              # a used inside the group and returned
    a = x * scale + r
    b = torch.where(a > 0, a * a, torch.exp(a) - 1.0)
    return a, b.clamp(-0.5, 3.0) * 2


def per_row(x, m, v):                       # m: per-row (outer), v: a bias row (inner)
    return F.silu(x * m + v).masked_fill(x > 1.5, 0.0) - F.softplus(x)


GROUPS = [
    (bias_gelu_residual, [(8, 32), (32,), (8, 32)]),
    (mlp_gelu, [(4, 16), (16, 24), (24,), (24, 16), (16,)]),
    (shared, [(6, 10), (6, 10), ()]),
    (two_outputs, [(5, 7), (7,), (5, 7)]),
    (per_row, [(6, 9), (6, 1), (9,)]),
]


def _args(shapes, seed, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=gen, dtype=dtype).requires_grad_() for s in shapes]


def _grads(fn, args):
    out = fn(*args)
    outs = out if isinstance(out, tuple) else (out,)
    weights = [torch.linspace(-1, 2, o.numel()).view(o.shape) for o in outs]
    loss = sum((o * w).sum() for o, w in zip(outs, weights) if o.requires_grad)
    return out, torch.autograd.grad(loss, args)


def _fused_nodes(g, args):
    return [n for n in g.get_concrete(*args).optimized.nodes if n.op == "fused"]


@needs_compiler
@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("fn, shapes", GROUPS, ids=[f.__name__ for f, _ in GROUPS])
def test_group_grads_as_eager(fn, shapes, strict):
    g = to_graph(fn, strict=strict)
    for seed in (0, 1):                   # a second call: nothing baked in at trace time
        args = _args(shapes, seed)
        got_out, got = _grads(g, args)
        exp_out, exp = _grads(fn, args)
        assert_same(got_out, exp_out)
        for a, b in zip((got_out if isinstance(got_out, tuple) else (got_out,)),
                        (exp_out if isinstance(exp_out, tuple) else (exp_out,))):
            assert a.requires_grad == b.requires_grad
        for a, b in zip(got, exp):       # (a weight's gradient sums rows: a norm-wise atol)
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5 * float(b.abs().max()))
    nodes = _fused_nodes(g, args)
    assert max(len(n.target.ops) for n in nodes) >= 3
    out = g(*args)
    assert type((out[0] if isinstance(out, tuple) else out).grad_fn).__name__ == NODE


def masked_grad(x, a, b):
    return torch.where(x > 0, a * 2.0, b + 1.0) * torch.relu(a)


@needs_compiler
def test_requires_grad_follows_eager():
    """An output reached only through a condition carries no gradient, as in eager."""
    g = to_graph(masked_grad)
    x = torch.randn(4, 6, requires_grad=True)
    a, b = torch.randn(4, 6), torch.randn(4, 6)
    assert g(x, a, b).requires_grad is masked_grad(x, a, b).requires_grad is False
    b.requires_grad_()
    out = g(x, a, b)
    assert out.requires_grad and type(out.grad_fn).__name__ == NODE
    (gx, gb) = torch.autograd.grad(out.sum(), [x, b], allow_unused=True)
    (ex, eb) = torch.autograd.grad(masked_grad(x, a, b).sum(), [x, b], allow_unused=True)
    assert gx is None and ex is None
    torch.testing.assert_close(gb, eb)


def nan_inf(x, y):
    return torch.maximum(torch.relu(x) * y, x.clamp(-1.0, 1.0)) + torch.exp(y)


@needs_compiler
def test_nan_inf_as_eager():
    g = to_graph(nan_inf)
    x = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, 1.0, -2.0, 0.5, 3.0])
    y = torch.tensor([1.0, 0.0, 2.0, float("nan"), float("inf"), 1.0, -100.0, 1e30])
    for xs in ((x, y), (y, x)):
        args = [t.clone().requires_grad_() for t in xs]
        got = torch.autograd.grad(g(*args).sum(), args)
        exp = torch.autograd.grad(nan_inf(*args).sum(), args)
        for a, b in zip(got, exp):
            torch.testing.assert_close(a, b, equal_nan=True)


@needs_compiler
def test_double_backward_replays_torch_ops():
    g = to_graph(shared)
    args = _args([(3, 4), (3, 4), ()], 2, torch.float64)
    out = g(*args)
    assert type(out.grad_fn).__name__ == NODE
    got = torch.autograd.grad(out.sum(), args, create_graph=True)
    exp = torch.autograd.grad(shared(*args).sum(), args, create_graph=True)
    for a, b in zip(got, exp):
        torch.testing.assert_close(a, b)
    got2 = torch.autograd.grad(sum(t.sum() for t in got), args)
    exp2 = torch.autograd.grad(sum(t.sum() for t in exp), args)
    for a, b in zip(got2, exp2):
        torch.testing.assert_close(a, b)


def _saved_bytes(fn, args):
    """Bytes autograd keeps for backward beyond the caller's own tensors (which stay alive
    anyway): eager's saved intermediates; the fused node's, if it saved any."""
    held = {a.untyped_storage().data_ptr() for a in args}
    seen = {}

    def pack(t):
        if t.untyped_storage().data_ptr() not in held:
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*args)
    return sum(seen.values())


@needs_compiler
def test_saved_memory_at_most_eager():
    """The node saves the inputs its backward reads: never more than eager saves."""
    for fn, shapes in GROUPS:
        args = _args(shapes, 3)
        g = to_graph(fn)
        g(*args)
        assert _saved_bytes(g, args) <= _saved_bytes(fn, args), fn.__name__


@needs_compiler
def test_inplace_change_of_a_saved_input_raises_as_eager():
    g = to_graph(bias_gelu_residual)
    x, b, r = _args([(8, 32), (32,), (8, 32)], 4)
    leaf = x.detach().clone().requires_grad_()
    x = leaf * 1                              # a non-leaf, changed in place below
    out = g(x, b, r)
    assert type(out.grad_fn).__name__ == NODE
    with torch.no_grad():
        x.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


def test_plan_saves_no_input_of_a_linear_group():
    """``x * 2 + y - z``: every gradient is the incoming one scaled; nothing is saved."""
    spec = KernelSpec("float32", (("float32", "full"),) * 3, (
        Step("({0} * {1})", (Operand("in", 0), Operand("c", 2.0))),
        Step("({0} + {1})", (Operand("v", 0), Operand("in", 1))),
        Step("({0} - {1})", (Operand("v", 1), Operand("in", 2)))), ((2, "float32"),))
    p = plan(spec, (True, True, True))
    assert p.saved == () and p.sources[1] == ("g", 0) and p.sources[0] == ("k", 0)
    assert plan(spec, (False, True, False)).kernel is None


def test_no_rule_keeps_torch_ops():
    spec = KernelSpec("float32", (("float32", "full"),),
                      (Step("m_unknown({0})", (Operand("in", 0),)),), ((0, "float32"),))
    assert plan(spec, (True,)) is None
    assert autograd_node.Recipe       # the generic API other kernels build on


@needs_compiler
def test_torch_func_grad_takes_the_torch_ops():
    """torch.func transforms need a Function with setup_context: the group's torch ops
    serve them (before, the node raised under torch.func.grad)."""
    def loss(x, b):
        return (bias_gelu_residual(x, b, x) * 2).sum()
    g = to_graph(loss)
    x, b = torch.randn(4, 8), torch.randn(8)
    for _ in range(2):
        got = torch.func.grad(g, argnums=(0, 1))(x, b)
        exp = torch.func.grad(loss, argnums=(0, 1))(x, b)
        for a, e in zip(got, exp):
            torch.testing.assert_close(a, e)
        x = x + 1


def whole_sums(y):
    return y.sum() + (y.mean() + y * y).sum()


def row_sums(y):
    return y.sum(-1, keepdim=True) + (y.mean(-1, keepdim=True) + y * y).sum(-1, keepdim=True)


@needs_compiler
@pytest.mark.parametrize("fn", [whole_sums, row_sums])
def test_row_value_read_per_element_gets_the_row_sum_of_its_shares(fn):
    """A mean added to every element of a summed row: its gradient is the row's sum of
    shares (a row program's backward once passed one element's share: off by ~1)."""
    g = to_graph(fn)
    for seed in (0, 1):
        y = _args([(4, 50)], seed)[0]
        out = g(y)
        assert type(out.grad_fn).__name__ == NODE
        got, = torch.autograd.grad(out.sum(), y)
        exp, = torch.autograd.grad(fn(y).sum(), y)
        torch.testing.assert_close(got, exp, rtol=1e-5, atol=1e-5)
