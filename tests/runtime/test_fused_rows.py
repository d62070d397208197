"""Row programs end to end: fused groups that reduce along the last dimension.

A group may hold ``sum``/``mean``/``amax``/``amin`` over the last dimension with
``keepdim=True`` and the per-row values computed from them (layernorm, softmax, RMSnorm
written from primitives). Each test traces an ordinary function with the full optimizer,
checks that a row kernel formed (``spec.rows``) and compiled, runs it and compares with
eager: dtype, shape, values (NaN where torch has NaN; ``amax``/``amin`` give NaN for a row
holding a NaN), gradients through the torch path, and the torch path itself
(``compiler=False``). Reductions that must not be fused (another dim, ``keepdim=False``,
``dtype=``, integers) are checked to stay outside every kernel and still be right.
"""
import pytest
import torch
from test_fused_kernels import assert_same as same_as_kernels

from runtime.executor import lower
from runtime.kernels import compiler
from runtime.options import options
from transpiler import to_graph

HAS_CC = compiler.compiler_available()
NAN, INF = float("nan"), float("inf")


@pytest.fixture(scope="module", autouse=True)
def kernel_cache(suite_kernel_cache):
    """Kernels go to the suite's kernel cache (tests/conftest.py)."""
    with options.override(cache_dir=suite_kernel_cache):
        yield


# ------------------------------------------------------------------------------- helpers
def fused_nodes(graph):
    """Every ``fused`` node of ``graph`` and its subgraphs."""
    return [node for node in graph.walk() if node.op == "fused"]


def optimized(fn, *args):
    """(graph function, optimized graph, its fused nodes, those that are row programs)."""
    f = to_graph(fn, strict=True)
    graph = f.get_concrete(*args).optimized
    nodes = fused_nodes(graph)
    return f, graph, nodes, [n for n in nodes if n.target.spec.rows]


def assert_same(got, exp, rtol=None, atol=None):
    """Same structure, dtype, shape; floats close with NaN where eager has NaN."""
    same_as_kernels(got, exp, rtol, atol, signed_zeros=False)


def rows_input(shape, dtype=torch.float32, seed=0, special=True):
    """Random values; with ``special``, row 0 holds a NaN, row 1 +Inf, row 2 -Inf (rows 3+
    stay finite), when the tensor has at least four rows."""
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(shape, generator=gen, dtype=torch.float64) * 3).to(dtype)
    flat = x.reshape(-1, shape[-1])
    if special and flat.shape[0] >= 4:
        flat[0, shape[-1] // 2] = NAN
        flat[1, 0] = INF
        flat[2, -1] = -INF
    return x


def row_shape(shape):
    return tuple(shape[:-1]) + (1,)


# ---------------------------------------------------------------------- the row functions
def layernorm(x, w, b):
    m = x.mean(-1, keepdim=True)
    d = x - m
    v = (d * d).mean(dim=-1, keepdim=True)
    return d * torch.rsqrt(v + 1e-5) * w + b


def softmax(x):
    e = torch.exp(x - x.amax(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True)


def log_softmax(x):
    s = x - torch.amax(x, dim=-1, keepdim=True)
    return s - torch.log(torch.sum(torch.exp(s), dim=(-1,), keepdim=True))


def rmsnorm(x, w):
    return x * torch.rsqrt(torch.mean(x * x, len(x.shape) - 1, True) + 1e-6) * w


def minmax(x):
    lo = x.amin(len(x.shape) - 1, keepdim=True)
    hi = torch.amax(x, -1, True)
    return (x - lo) / (hi - lo + 1e-3)


def row_sums(x):
    """The reduction itself is the result: one value per row."""
    return (x * 2.0 + 1.0).sum(-1, keepdim=True)


def row_stats(x):
    """Row outputs beside a vec output."""
    m = x.mean(-1, keepdim=True)
    c = x - m
    return m, c * 2.0, (c * c).amax(-1, keepdim=True)


def chained(x):
    """Four reductions in sequence, each reading what the one before produced."""
    a = x - x.mean(-1, keepdim=True)
    b = a / (a.abs().amax(-1, keepdim=True) + 1.0)
    c = b - b.amin(-1, keepdim=True)
    return c / (c.sum(-1, keepdim=True) + 1.0)


def per_row_input(x, r):
    """A per-row input (shape ``S[:-1] + (1,)``) read inside and after the reduction."""
    return (x * r).sum(-1, keepdim=True) * r + x


def count_positive(x):
    """Bools cast to float, summed per row."""
    return (x > 0).float().sum(-1, keepdim=True) / 3.0


def then_matmul(x, w):
    """A softmax, a matmul (not fusable), then more elementwise ops."""
    e = torch.exp(x - x.amax(-1, keepdim=True))
    p = e / e.sum(-1, keepdim=True)
    return torch.tanh((p @ w) * 2.0) + 1.0


def inputs_for(name, shape, dtype, special=True):
    x = rows_input(shape, dtype, special=special)
    gen = torch.Generator().manual_seed(1)
    n = shape[-1]
    if name == "layernorm":
        return x, torch.randn(n, generator=gen, dtype=dtype), torch.randn(n, generator=gen,
                                                                          dtype=dtype)
    if name == "rmsnorm":
        return x, torch.randn(n, generator=gen, dtype=dtype)
    if name == "per_row_input":
        return x, torch.randn(row_shape(shape), generator=gen, dtype=dtype)
    if name == "then_matmul":
        return x, torch.randn(n, 6, generator=gen, dtype=dtype)
    return (x,)


# (function, number of fused groups, number of them that are row programs)
CASES = {
    "layernorm": (layernorm, 1, 1),
    "softmax": (softmax, 1, 1),
    "log_softmax": (log_softmax, 1, 1),
    "rmsnorm": (rmsnorm, 1, 1),
    "minmax": (minmax, 1, 1),
    "row_sums": (row_sums, 1, 1),
    "row_stats": (row_stats, 1, 1),
    "chained": (chained, 1, 1),
    "per_row_input": (per_row_input, 1, 1),
    "count_positive": (count_positive, 1, 1),
    "then_matmul": (then_matmul, 2, 1),
}
SHAPES = [(37,), (5, 33), (3, 4, 19), (2, 3, 2, 11)]


def check(name, shape, dtype, special=True):
    fn, groups, row_groups = CASES[name]
    args = inputs_for(name, shape, dtype, special)
    f, graph, nodes, rows = optimized(fn, *args)
    assert len(nodes) == groups, [n.target for n in nodes]
    assert len(rows) == row_groups, [n.target for n in nodes]
    assert any(step.reduce for n in rows for step in n.target.spec.steps)
    for node in nodes:
        assert node.target.compiled == HAS_CC, node.target
    assert_same(f(*args), fn(*args))
    return f, graph, rows, args


# ------------------------------------------------------------------------ every function
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name", list(CASES))
def test_row_functions_every_rank(name, dtype):
    for shape in SHAPES:
        if name == "then_matmul" and len(shape) == 1:
            shape = (1, 37)
        check(name, shape, dtype)


@pytest.mark.parametrize("name", ["layernorm", "softmax", "row_stats", "per_row_input"])
def test_large_rows_take_the_parallel_path(name):
    """600 rows of 513: above the size where a row kernel splits its rows over threads."""
    shape = (600, 513)
    fn = CASES[name][0]
    args = inputs_for(name, shape, torch.float32)
    f, _, nodes, rows = optimized(fn, *args)
    assert len(nodes) == 1 and len(rows) == 1 and rows[0].target.compiled == HAS_CC
    # a row sum of 513 float32 terms of size ~10 is only good to ~1e-5 absolute (the
    # kernel sums in double, torch in float32): that case gets a wider absolute tolerance
    atol = 1e-4 if name == "per_row_input" else None
    assert_same(f(*args), fn(*args), rtol=1e-5 if atol else None, atol=atol)
    kernel = rows[0].target
    assert shape[0] * shape[1] >= kernel._parallel_min


def test_rank_one_row_outputs_have_shape_one():
    x = rows_input((101,), special=False)
    f, _, rows, _ = check("row_stats", (101,), torch.float32, special=False)
    m, _, top = f(x)
    assert m.shape == (1,) and top.shape == (1,)
    assert rows[0].target.spec.output_rows.count(True) == 2


def test_executor_lowers_the_optimized_graph():
    args = inputs_for("layernorm", (5, 33), torch.float64)
    f, graph, _, rows = optimized(layernorm, *args)
    assert rows
    assert_same(lower(graph)(*args), layernorm(*args))


# ---------------------------------------------------------------------- NaN and infinities
def extremes(x):
    return (x + 0.5).amax(-1, keepdim=True), (x - 0.5).amin(-1, keepdim=True), \
        (x * 2.0).sum(-1, keepdim=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_amax_amin_propagate_nan_per_row(dtype):
    x = torch.tensor([[1.0, NAN, 3.0, 2.0, 0.0],       # NaN in the middle
                      [NAN, 1.0, 2.0, 3.0, 4.0],       # NaN first
                      [1.0, 2.0, 3.0, 4.0, NAN],       # NaN last
                      [INF, NAN, -INF, 0.0, 1.0],      # NaN beside both infinities
                      [-INF, -INF, -INF, -INF, -INF],
                      [INF, INF, INF, INF, INF],
                      [INF, -INF, 2.0, 1.0, 0.0],
                      [-1e30, 1e30, 1e-30, -0.0, 0.0],
                      [NAN, NAN, NAN, NAN, NAN]], dtype=dtype)
    f, _, nodes, rows = optimized(extremes, x)
    ops = {op for n in rows for op in n.target.ops}
    assert {"amax", "amin", "sum"} <= ops, ops
    assert all(n.target.compiled == HAS_CC for n in nodes)
    got, exp = f(x), extremes(x)
    assert_same(got, exp)
    assert got[0][:4].isnan().all() and got[1][:4].isnan().all()   # NaN wins over +-Inf
    # wide rows: the NaN sits in a vectorized part of the loop, not only the tail
    wide = rows_input((7, 301), dtype, seed=3, special=False)
    wide[0, 150] = NAN
    wide[1, 7] = NAN
    wide[2, 300] = NAN
    got = f2 = to_graph(extremes, strict=True)(wide)
    assert_same(got, extremes(wide))
    assert f2[0][:3].isnan().all() and not f2[0][3:].isnan().any()


def test_softmax_with_infinite_rows_is_eager():
    x = torch.tensor([[0.0, 1.0, 2.0], [-INF, 0.0, 1.0], [-INF, -INF, -INF], [INF, 0.0, 1.0],
                      [1e30, -1e30, 0.0]])
    f, _, _, rows = optimized(softmax, x)
    assert rows
    assert_same(f(x), softmax(x))


# ------------------------------------------------------------------- the torch path, autograd
@pytest.mark.parametrize("name", ["layernorm", "softmax", "chained", "row_stats"])
def test_without_compiler_the_torch_path_is_eager(name):
    fn = CASES[name][0]
    args = inputs_for(name, (6, 17), torch.float32)
    with options.override(compiler=False):
        f, _, nodes, rows = optimized(fn, *args)
        assert rows and not any(n.target.compiled for n in nodes)
        assert_same(f(*args), fn(*args))


@pytest.mark.parametrize("name", ["layernorm", "log_softmax", "rmsnorm", "per_row_input",
                                  "then_matmul"])
def test_gradients_equal_eager(name):
    fn = CASES[name][0]
    leaves = inputs_for(name, (4, 9), torch.float64, special=False)
    got_in = [t.clone().requires_grad_() for t in leaves]
    exp_in = [t.clone().requires_grad_() for t in leaves]
    f, _, _, rows = optimized(fn, *got_in)
    assert rows
    got, exp = f(*got_in), fn(*exp_in)
    assert got.grad_fn is not None
    assert_same(got, exp)
    weight = torch.linspace(-1.0, 2.0, got.numel(), dtype=torch.float64).reshape(got.shape)
    (got * weight).sum().backward()
    (exp * weight).sum().backward()
    for a, b in zip(got_in, exp_in):
        assert_same(a.grad, b.grad)
    with torch.no_grad():                 # no grad needed: the row kernel runs
        assert_same(f(*got_in), fn(*exp_in))


# --------------------------------------------------------------- reductions left unfused
def dim0(x):
    return (x * 2.0).sum(0, keepdim=True) * 3.0 + 1.0


def no_keepdim(x):
    return ((x * 2.0).mean(-1) * 3.0 + 1.0, (x + 1.0).amax(dim=-1, keepdim=False) - 2.0)


def with_dtype(x):
    return (x * 2.0).sum(-1, keepdim=True, dtype=torch.float64) * 3.0 + 1.0


def integers(i, x):
    return (i * 2).sum(-1, keepdim=True) + (x * 2.0 + 1.0)


def middle_dim(x):
    return torch.exp(x - x.amax(-2, keepdim=True)) * 2.0


@pytest.mark.parametrize("fn", [dim0, no_keepdim, with_dtype, middle_dim])
def test_other_reductions_stay_out_of_kernels(fn):
    x = rows_input((4, 5, 6), special=False)
    f, graph, nodes, rows = optimized(fn, x)
    assert not rows
    assert not {"sum", "mean", "amax", "amin"} & {op for n in nodes for op in n.target.ops}
    assert_same(f(x), fn(x))


def test_integer_reduction_stays_out_of_kernels():
    i = torch.arange(24).reshape(4, 6)
    x = rows_input((4, 6), special=False)
    f, graph, nodes, rows = optimized(integers, i, x)
    assert not rows
    assert any(n.op == "sum" for n in graph.nodes)
    assert_same(f(i, x), integers(i, x))


def test_last_dim_of_size_one_is_not_a_row_program():
    x = rows_input((5, 1), special=False)
    f, _, _, rows = optimized(softmax, x)
    assert not rows
    assert_same(f(x), softmax(x))


# --------------------------------------------------------------------- inputs of every form
def broadcast_softmax(x, a, b, r, s):
    y = x * a + b                          # a: (1, C, N), b: (B, 1, N): expanded when run
    m = (y + r).amax(-1, keepdim=True)     # r: per row
    e = torch.exp(y - m) * s               # s: 0-d
    return e / e.sum(-1, keepdim=True), m


def test_inputs_broadcast_in_every_way():
    gen = torch.Generator().manual_seed(4)
    B, C, N = 3, 4, 7
    args = (torch.randn(B, C, N, generator=gen), torch.randn(1, C, N, generator=gen),
            torch.randn(B, 1, N, generator=gen), torch.randn(B, C, 1, generator=gen),
            torch.tensor(2.0))
    f, _, nodes, rows = optimized(broadcast_softmax, *args)
    assert len(nodes) == 1 and len(rows) == 1 and nodes[0].target.compiled == HAS_CC
    modes = {mode for _, mode in rows[0].target.spec.inputs}
    assert {"outer", "scalar"} <= modes, modes
    assert_same(f(*args), broadcast_softmax(*args))


def test_non_contiguous_and_expanded_inputs():
    def centered(x):
        return x - x.mean(-1, keepdim=True) * 2.0

    f = to_graph(centered, strict=True)
    transposed = torch.randn(9, 5).t()
    expanded = torch.randn(1, 9).expand(5, 9)
    assert not transposed.is_contiguous() and not expanded.is_contiguous()
    _, _, _, rows = optimized(centered, transposed)
    assert rows
    for x in (transposed, expanded, transposed.contiguous()):
        assert_same(f(x), centered(x))
