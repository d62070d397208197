"""Small matrix products taken into the fused kernel that reads them (passes/gemm_epilogue.py).

Each test traces an ordinary function, optimizes it (the whole pipeline), checks which
products became kernel prologues, and compares the run with eager torch: same shape and
dtype, values within float tolerance (the kernel sums in k order with fused multiply-adds,
a library GEMM in its own blocked order), NaN where eager has NaN. Cases cover every form
(``mm``, ``matmul``, ``addmm`` with a full, row, column or scalar addend), the epilogue's
broadcast inputs, odd and rectangular shapes, float64, special values, the limits that
keep a product a library call, autograd and the no-compiler path, memory planning and
loop bodies.
"""
import pytest
import torch
from hypothesis import given, settings, strategies as st

from runtime.kernels import compiler
from runtime.options import options
from runtime.passes import gemm_epilogue
from transpiler import to_graph

HAS_CC = compiler.compiler_available()
NAN, INF = float("nan"), float("inf")


pytestmark = pytest.mark.usefixtures("module_kernel_cache")


@pytest.fixture(autouse=True)
def narrow_rows_too(monkeypatch):
    """Products of any width are taken in here, to test the kernels on every shape (by
    default rows narrower than ``MIN_N`` stay library calls: test_narrow_rows_stay)."""
    monkeypatch.setattr(gemm_epilogue, "MIN_N", 1)


def randn(*shape, seed=0, dtype=torch.float32):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def products(graph):
    """The fused nodes of ``graph`` (subgraphs too) that begin with a product."""
    return [n for n in graph.walk() if n.op == "fused" and n.target.spec.gemm]


def run(fn, *args, absorbed=1, rtol=1e-5, atol=1e-5):
    """Optimize ``fn`` for ``args``, check ``absorbed`` products were taken in (and
    compiled where a compiler exists), run it and compare with eager."""
    f = to_graph(fn, strict=True)
    graph = f.graph(*args).optimize()
    taken = products(graph)
    assert len(taken) == absorbed, graph
    for node in taken:
        assert node.target.compiled == HAS_CC, node.target
        assert node.target.ops[0] in ("addmm", "mm", "matmul"), node.target.ops
    got, exp = f(*args), fn(*args)
    assert got.shape == exp.shape and got.dtype == exp.dtype, (got, exp)
    torch.testing.assert_close(got, exp, rtol=rtol, atol=atol, equal_nan=True)
    return f, graph


# ------------------------------------------------------------------------------ forms
def rnn_step(x, h, w, v, b):
    return torch.tanh(x @ w + h @ v + b)


def test_rnn_step_takes_the_addmm_in():
    x, h = randn(16, 32), randn(16, 64, seed=1)
    w, v, b = randn(32, 64, seed=2) * 0.2, randn(64, 64, seed=3) * 0.1, randn(64, seed=4)
    _, graph = run(rnn_step, x, h, w, v, b)
    node = products(graph)[0]
    assert node.target.ops[:2] == ["addmm", "add"]
    assert not any(n.op in ("addmm", "mm", "matmul") and n.meta.shape == (16, 64) and
                   n is not node for n in graph.nodes if n.op == "addmm")
    if HAS_CC:
        assert "acc[j]" in node.target.source


@pytest.mark.parametrize("form", ["mm", "matmul", "operator"])
def test_plain_products(form):
    product = {"mm": torch.mm, "matmul": torch.matmul, "operator": lambda a, b: a @ b}[form]

    def f(a, b, c):
        return torch.sigmoid(product(a, b) * 2.0) - c

    args = randn(7, 5), randn(5, 9, seed=1), randn(7, 9, seed=2)
    run(f, *args)
    with options.override(compiler=False):             # the torch path of each form
        g = to_graph(f, strict=True)
        assert products(g.graph(*args).optimize())
        torch.testing.assert_close(g(*args), f(*args))


@pytest.mark.parametrize("addend", [(6, 10), (10,), (1, 10), (6, 1), (1, 1), ()])
def test_addmm_addend_broadcasts(addend):
    def f(c, a, b):
        return torch.relu(torch.addmm(c, a, b)) * 0.5

    run(f, randn(*addend, seed=3), randn(6, 4), randn(4, 10, seed=1))


def test_epilogue_reads_every_broadcast_form():
    def f(a, b, full, row, col, one):
        return ((a @ b) * row + col) * full - one

    run(f, randn(9, 3), randn(3, 11, seed=1), randn(9, 11, seed=2), randn(11, seed=3),
        randn(9, 1, seed=4), randn(1, 1, seed=5))


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (1, 17, 3), (33, 1, 5), (5, 64, 1), (3, 7, 257)])
def test_odd_shapes(m, k, n):
    def f(a, b):
        return torch.tanh(a @ b) + 1.0

    run(f, randn(m, k), randn(k, n, seed=1))


def test_float64():
    def f(a, b, c):
        return torch.exp(torch.addmm(c, a, b) * 0.1)

    run(f, randn(8, 6, dtype=torch.float64), randn(6, 5, seed=1, dtype=torch.float64),
        randn(5, seed=2, dtype=torch.float64), rtol=1e-12, atol=1e-12)


def test_special_values_propagate_as_in_eager():
    a, b = randn(6, 4), randn(4, 5, seed=1)
    a[0, 0], a[1, 2], b[3, 1], b[2, 4] = NAN, INF, -INF, 0.0
    a[2, :] = 0.0
    b[:, 0] = 1e-40                                     # denormal

    def f(a, b, c):
        return torch.tanh(torch.addmm(c, a, b)) * 2.0

    c = randn(6, 5, seed=2)
    c[4, 4] = NAN
    run(f, a, b, c)


def test_inf_times_zero_is_nan_like_eager():
    a = torch.tensor([[INF, 1.0], [0.0, 2.0]])
    b = torch.tensor([[0.0, 1.0], [3.0, 4.0]])

    def f(a, b):
        return ((a @ b) + 1.0) * 2.0

    run(f, a, b)


# ------------------------------------------------------------------------- left alone
def test_large_products_stay_library_calls():
    def f(a, b):
        return torch.relu(a @ b) * 2.0

    n = 128                                             # 128^3 > MAX_WORK
    assert n ** 3 > gemm_epilogue.MAX_WORK
    run(f, randn(n, n), randn(n, n, seed=1), absorbed=0, rtol=1e-4)


def test_narrow_rows_stay(monkeypatch):
    monkeypatch.setattr(gemm_epilogue, "MIN_N", 64)

    def f(a, b):
        return torch.relu(a @ b) * 2.0

    run(f, randn(16, 64), randn(64, 32, seed=1), absorbed=0)
    run(f, randn(16, 64), randn(64, 64, seed=1), absorbed=1)


def test_product_read_twice_or_returned_stays():
    def twice(a, b):
        p = a @ b
        return torch.tanh(p) + 1.0, p * 2.0

    def returned(a, b):
        p = a @ b
        return p, torch.tanh(p) * 2.0

    for fn in (twice, returned):
        f = to_graph(fn, strict=True)
        args = randn(4, 3), randn(3, 5, seed=1)
        assert not products(f.graph(*args).optimize())
        for got, exp in zip(f(*args), fn(*args)):
            torch.testing.assert_close(got, exp)


def test_scaled_addmm_and_other_dtypes_stay():
    def scaled(c, a, b):
        return torch.tanh(torch.addmm(c, a, b, beta=0.5)) * 2.0

    def batched(a, b):
        return torch.tanh(a @ b) * 2.0

    def mixed(a, b, c):
        return torch.tanh(a @ b) * c                   # float32 product, float64 epilogue

    run(scaled, randn(4, 5), randn(4, 3, seed=1), randn(3, 5, seed=2), absorbed=0)
    run(batched, randn(2, 4, 3), randn(3, 5, seed=1), absorbed=0)
    run(mixed, randn(4, 3), randn(3, 5, seed=1), randn(4, 5, seed=2, dtype=torch.float64),
        absorbed=0)


def test_integer_products_stay():
    def f(a, b):
        return (a @ b) * 2 + 1

    a = torch.arange(12).reshape(3, 4)
    b = torch.arange(8).reshape(4, 2)
    g = to_graph(f, strict=True)
    assert not products(g.graph(a, b).optimize())
    assert torch.equal(g(a, b), f(a, b))


# ------------------------------------------------------------------- autograd, no compiler
def test_gradients_are_eager():
    x, h = randn(4, 3), randn(4, 6, seed=1)
    w, v, b = randn(3, 6, seed=2), randn(6, 6, seed=3), randn(6, seed=4)
    leaves = [t.clone().requires_grad_() for t in (x, h, w, v, b)]
    twins = [t.clone().requires_grad_() for t in (x, h, w, v, b)]
    f = to_graph(rnn_step, strict=True)
    assert products(f.graph(*leaves).optimize())
    got, exp = f(*leaves), rnn_step(*twins)
    cot = randn(4, 6, seed=9)
    got.backward(cot)
    exp.backward(cot)
    torch.testing.assert_close(got, exp)
    for a, e in zip(leaves, twins):
        torch.testing.assert_close(a.grad, e.grad)


def test_without_compiler_the_torch_path_is_eager():
    args = randn(5, 4), randn(5, 6, seed=1), randn(4, 6, seed=2), randn(6, 6, seed=3), \
        randn(6, seed=4)
    with options.override(compiler=False):
        f = to_graph(rnn_step, strict=True)
        graph = f.graph(*args).optimize()
        taken = products(graph)
        assert taken and not any(n.target.compiled for n in taken)
        torch.testing.assert_close(f(*args), rnn_step(*args))


def test_non_contiguous_inputs_are_read_right():
    def f(a, b, c):
        return torch.tanh(torch.addmm(c, a, b)) - 1.0

    a, b, c = randn(5, 4), randn(6, 4, seed=1), randn(5, 6, seed=2)
    g = to_graph(f, strict=True)
    g(a, b.t().contiguous(), c)
    torch.testing.assert_close(g(a, b.t(), c), f(a, b.t(), c))     # a transposed view


# ---------------------------------------------------------------- planning and loops
def test_planned_buffers_never_overwrite_the_matrices():
    def chain(x, w):
        a = torch.tanh(x * 2.0 + 1.0)
        b = torch.sigmoid(a @ w) * 3.0                 # a dies here: not a buffer for b
        c = torch.tanh(b @ w) + b                      # nor b for c
        return torch.exp(c @ w * 0.1) - 1.0

    x, w = randn(8, 8), randn(8, 8, seed=1)
    f, graph = run(chain, x, w, absorbed=3)
    for node in products(graph):
        out = node.kwargs.get("out")
        a_slot, b_slot = node.target.spec.gemm[0], node.target.spec.gemm[1]
        assert out is None or (out is not node.args[a_slot] and out is not node.args[b_slot])
    for _ in range(3):                                 # buffers reused across calls
        torch.testing.assert_close(f(x, w), chain(x, w))


def rnn_loop(x, h, w, v, b):
    for t in range(x.shape[0]):
        h = torch.tanh(x[t] @ w + h @ v + b)
    return h


def test_unrolled_rnn_takes_every_step_in():
    """Every step takes its product in; the 12 equal steps then run as one loop
    (``passes/roll_steps``) of that kernel."""
    x, h = randn(12, 4, 8), randn(4, 16, seed=1)
    w, v, b = randn(8, 16, seed=2) * 0.3, randn(16, 16, seed=3) * 0.3, randn(16, seed=4)
    _, graph = run(rnn_loop, x, h, w, v, b, absorbed=0)
    loops = [n for n in graph.walk() if n.op == "kernel_loop"]
    assert len(loops) == 1 and loops[0].attrs["steps"] == 12, graph
    assert loops[0].target.kernel.spec.gemm and loops[0].target.kernel.compiled == HAS_CC


def while_rnn(h, v, b):
    i = 0
    while h.abs().sum() < 1e6 and i < 7:
        h = torch.tanh(h @ v + b) * 2.0
        i += 1
    return h


def test_product_in_a_while_body():
    run(while_rnn, randn(4, 6), randn(6, 6, seed=1), randn(6, seed=2))


# ---------------------------------------------------------------------------- random
@settings(max_examples=25, deadline=None)
@given(m=st.integers(1, 24), k=st.integers(1, 24), n=st.integers(1, 40),
       addend=st.sampled_from(["none", "full", "row", "col", "one"]),
       seed=st.integers(0, 1000))
def test_random_shapes(m, k, n, addend, seed):
    shapes = {"full": (m, n), "row": (n,), "col": (m, 1), "one": (1, 1)}

    def with_c(c, a, b):
        return torch.sigmoid(torch.addmm(c, a, b)) * 2.0 - 1.0

    def without(a, b):
        return torch.sigmoid(a @ b) * 2.0 - 1.0

    a, b = randn(m, k, seed=seed), randn(k, n, seed=seed + 1)
    if addend == "none":
        run(without, a, b)
    else:
        run(with_c, randn(*shapes[addend], seed=seed + 2), a, b)
