"""Memory planning end to end: dead intermediates lend their buffers (``out=``) to later
fused kernels and out-capable torch ops.

Each test traces a small function with the full optimizer, looks at which nodes were
planned (``attrs["planned_out"]``, the ``out=`` buffer node) and at ``memory_report``, then
runs the function and compares with eager: results, gradients (planning is skipped on
calls where autograd records), ``no_grad`` calls, and repeated calls whose earlier results
must not be overwritten. Values that must never lend their buffer: outputs, values with a
view still alive, values read by ``cond``/``while``.
"""
import pytest
import torch
import torch.nn.functional as F

from runtime.executor import lower
from runtime.options import options
from runtime.passes.plan_memory import format_report
from runtime.passes import gemm_epilogue
from transpiler import to_graph


@pytest.fixture(scope="module", autouse=True)
def kernel_cache(suite_kernel_cache):
    with options.override(cache_dir=suite_kernel_cache):
        yield


# ------------------------------------------------------------------------------- helpers
def walk(graph):
    for node in graph.nodes:
        yield node
        for sub in node.subgraphs:
            yield from walk(sub)


def planned(graph):
    """(writer, buffer) for every node given an ``out=`` buffer, subgraphs included."""
    found = []
    for node in walk(graph):
        if node.attrs.get("planned_out"):
            assert "out" in node.kwargs, node
            found.append((node, node.kwargs["out"]))
    return found


def compiled(fn, *args):
    f = to_graph(fn, strict=True)
    entry = f.get_concrete(*args)
    return f, entry


def assert_close(got, exp):
    if isinstance(exp, (tuple, list)):
        assert len(got) == len(exp)
        for g, e in zip(got, exp):
            assert_close(g, e)
        return
    assert got.dtype == exp.dtype and got.shape == exp.shape, (got, exp)
    # (products inside a loop body may be fused GEMM prologues: sums in k order, not MKL's
    # blocked order, so several iterations differ from eager by float rounding)
    torch.testing.assert_close(got.detach(), exp.detach(), rtol=1e-5, atol=1e-5,
                               equal_nan=True)


@pytest.fixture(autouse=True)
def library_matmuls(monkeypatch):
    """The small matmuls here stay library calls that take ``out=`` buffers (not the
    prologue of the kernel after them: tests/runtime/test_gemm_epilogue.py plans those)."""
    monkeypatch.setattr(gemm_epilogue, "MAX_WORK", 0)


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# ------------------------------------------------------------------------ the basic chain
def chain(x, w):
    a = torch.tanh(x * 2.0 + 1.0)          # fused
    b = a @ w                              # matmul
    c = torch.sigmoid(b - 0.5) * 3.0       # fused: may write into b (read last)
    d = c @ w                              # matmul: may take a (dead before it)
    return torch.exp(d * 0.1) + 1.0        # fused: may write into d


def test_chain_plans_out_and_reports_the_bytes():
    x, w = randn(8, 8), randn(8, 8, seed=1)
    f, entry = compiled(chain, x, w)
    graph = entry.optimized
    pairs = planned(graph)
    assert [writer.op for writer, _ in pairs] == ["fused", "matmul", "fused"]
    names = {n.name: n for n in graph.nodes}
    for writer, buffer in pairs:
        assert buffer.name in names and names[buffer.name] is buffer
        assert buffer.meta.shape == writer.meta.shape and buffer.meta.dtype == writer.meta.dtype
        assert buffer is not writer
    # five fresh 8x8 float32 intermediates (256 bytes each), three written into dead ones
    assert graph.memory_report == {"bytes_without_planning": 5 * 256,
                                   "bytes_with_planning": 2 * 256, "bytes_reused": 3 * 256}
    assert format_report(graph.memory_report) == \
        "memory: 1280 B allocated per call without planning, 512 B with (768 B reused)"
    source = entry.executable.source
    # (a torch op's buffer also needs eager's layout: contiguous for a product)
    assert "_plan = " in source and source.count(" if _plan") == 3
    assert source.count(".is_contiguous() else None") == 1
    assert_close(f(x, w), chain(x, w))
    assert_close(lower(graph)(x, w), chain(x, w))


def test_report_in_megabytes():
    x, w = randn(512, 512), randn(512, 512, seed=1)
    _, entry = compiled(chain, x, w)
    report = entry.optimized.memory_report
    assert report["bytes_reused"] == 3 * 512 * 512 * 4
    assert report["bytes_with_planning"] < report["bytes_without_planning"]
    assert format_report(report) == \
        "memory: 5.2 MB allocated per call without planning, 2.1 MB with (3.1 MB reused)"


@pytest.mark.parametrize("which", ["x", "w", "both"])
def test_gradients_equal_eager(which):
    x, w = randn(6, 6), randn(6, 6, seed=1)
    f, entry = compiled(chain, x, w)              # planned for inputs without grad
    assert planned(entry.optimized)
    got_in = [x.clone().requires_grad_(which in ("x", "both")),
              w.clone().requires_grad_(which in ("w", "both"))]
    exp_in = [t.detach().clone().requires_grad_(t.requires_grad) for t in got_in]
    _, graded = compiled(chain, *got_in)
    assert planned(graded.optimized)              # planned, but skipped at run time
    got, exp = f(*got_in), chain(*exp_in)
    assert_close(got, exp)
    (got * torch.linspace(-1, 1, 36).reshape(6, 6)).sum().backward()
    (exp * torch.linspace(-1, 1, 36).reshape(6, 6)).sum().backward()
    for a, b in zip(got_in, exp_in):
        assert (a.grad is None) == (b.grad is None)
        if b.grad is not None:
            assert_close(a.grad, b.grad)


def test_no_grad_calls_use_the_plan_and_equal_eager():
    x, w = randn(6, 6).requires_grad_(), randn(6, 6, seed=1)
    f, entry = compiled(chain, x, w)
    assert planned(entry.optimized)
    with torch.no_grad():
        got = f(x, w)
        exp = chain(x, w)
    assert not got.requires_grad
    assert_close(got, exp)
    got = f(x, w)                                 # and with grad again afterwards
    assert got.requires_grad
    assert_close(got, chain(x, w))


# --------------------------------------------------------------- values that must not lend
def returns_intermediate(x, w):
    a = torch.tanh(x * 2.0 + 1.0)
    b = a @ w
    c = torch.sigmoid(b - 0.5) * 3.0
    d = c @ w
    return a, torch.exp(d * 0.1) + 1.0


def test_returned_value_is_not_reused():
    x, w = randn(8, 8), randn(8, 8, seed=1)
    f, entry = compiled(returns_intermediate, x, w)
    pairs = planned(entry.optimized)
    assert pairs                                  # something else was planned
    returned = set(map(id, entry.optimized.outputs))
    assert not any(id(buffer) in returned for _, buffer in pairs)
    assert_close(f(x, w), returns_intermediate(x, w))


def view_alive(x, w):
    t = torch.tanh(x * 2.0 + 1.0)
    v = t[0]                                      # a view of t, read at the end
    tt = t.t()                                    # another view, read later
    u = torch.sigmoid(x @ w - 0.5) * 3.0          # could take t's buffer
    m = (u @ w) * 2.0 + 1.0
    return m + v + tt


def test_value_with_live_view_is_not_reused():
    x, w = randn(8, 8), randn(8, 8, seed=1)
    f, entry = compiled(view_alive, x, w)
    graph = entry.optimized
    viewed = {id(n.inputs[0]) for n in walk(graph) if n.op in ("getitem", "t")}
    assert viewed
    assert not any(id(buffer) in viewed for _, buffer in planned(graph))
    for seed in range(3):
        x, w = randn(8, 8, seed=seed), randn(8, 8, seed=seed + 10)
        assert_close(f(x, w), view_alive(x, w))


def with_cond(x, w):
    a = torch.tanh(x * 2.0 + 1.0)
    b = a @ w
    if b.sum() > 0:
        c = torch.sigmoid(b) * 2.0
    else:
        c = torch.exp(b) + 1.0
    d = torch.tanh(c @ w - 0.5) * 3.0
    return (d @ w) * 0.5 + 1.0


def with_while(x, w):
    a = torch.tanh(x * 2.0 + 1.0)
    b = a @ w
    i = 0
    while b.abs().sum() < 1000.0 and i < 5:
        b = torch.tanh(b @ w * 2.0) * 3.0 + b
        i += 1
    c = torch.sigmoid(b * 2.0) - 1.0
    return (c @ w) * 0.5 + 1.0


@pytest.mark.parametrize("fn", [with_cond, with_while])
def test_values_read_by_control_flow_are_not_reused(fn):
    x, w = randn(8, 8), randn(8, 8, seed=1)
    f, entry = compiled(fn, x, w)
    graph = entry.optimized
    flow = [n for n in graph.nodes if n.op in ("cond", "while")]
    assert flow
    read = {id(v) for n in flow for v in n.inputs}
    pairs = planned(graph)
    assert pairs
    assert not any(id(buffer) in read for _, buffer in pairs)
    for sign in (1.0, -1.0):
        assert_close(f(x * sign, w), fn(x * sign, w))


W = randn(8, 8, seed=5).requires_grad_()


def with_parameter(x):
    a = torch.tanh(x * 2.0 + 1.0)
    b = a @ W
    c = torch.sigmoid(b - 0.5) * 3.0
    d = c @ W
    return torch.exp(d * 0.1) + 1.0


def test_parameter_requiring_grad_keeps_autograd_right():
    x = randn(8, 8)
    f, entry = compiled(with_parameter, x)
    assert planned(entry.optimized)
    assert "requires_grad" in entry.executable.source.split("\n", 2)[1]
    got = f(x)
    assert got.requires_grad
    got.sum().backward()
    g1, W.grad = W.grad.clone(), None
    exp = with_parameter(x)
    exp.sum().backward()
    assert_close(got, exp)
    assert_close(g1, W.grad)
    W.grad = None
    with torch.no_grad():
        assert_close(f(x), with_parameter(x))


def inplace_user_op(x, w):
    a = torch.tanh(x * 2.0 + 1.0)
    b = a @ w
    y = torch.sigmoid(b - 0.5) * 3.0
    y.add_(1.0)
    z = (y @ w) * 2.0 - 1.0
    return z, torch.exp(z * 0.1) + y


def test_inplace_user_op_stays_right():
    x, w = randn(8, 8), randn(8, 8, seed=1)
    f, entry = compiled(inplace_user_op, x, w)
    assert planned(entry.optimized)
    assert_close(f(x, w), inplace_user_op(x, w))


def test_many_calls_do_not_share_buffers():
    x, w = randn(8, 8), randn(8, 8, seed=1)
    f, entry = compiled(returns_intermediate, x, w)
    assert planned(entry.optimized)
    kept = []
    for seed in range(6):
        x, w = randn(8, 8, seed=seed), randn(8, 8, seed=seed + 100)
        got = f(x, w)
        kept.append((got, [t.clone() for t in got], (x, w)))
    ptrs = [t.data_ptr() for got, _, _ in kept for t in got]
    assert len(set(ptrs)) == len(ptrs)               # every result has its own storage
    for got, copy, args in kept:
        assert_close(got, copy)                      # not overwritten by a later call
        assert_close(got, returns_intermediate(*args))


# ------------------------------------------------------------------------ known bugs
def relu_inplace(x):
    t = x @ x                                       # fresh, dies at the relu
    y = F.relu(t, inplace=True)                     # y is t's storage
    u = x @ (x * 2.0)                               # x * 2.0 is planned into t's buffer
    return y + u


def test_relu_inplace_result_is_not_overwritten():
    x = randn(4, 4)
    f, entry = compiled(relu_inplace, x)
    assert_close(f(x), relu_inplace(x))


def relu_inplace_dropped(x):
    t = x @ x
    F.relu(t, inplace=True)                         # mutates t; the result is unused
    return t * 1.0


def test_relu_inplace_mutation_is_kept():
    x = randn(4, 4)
    f, _ = compiled(relu_inplace_dropped, x)
    assert_close(f(x), relu_inplace_dropped(x))


def leaf_made_inside(x):
    w = torch.ones(8, 8).requires_grad_()            # a leaf requiring grad, made in the graph
    a = torch.exp(x @ w)
    return torch.tanh(a @ x).sum(), w


def test_requires_grad_made_inside_the_graph():
    x = randn(8, 8)
    f, _ = compiled(leaf_made_inside, x)
    got, w = f(x)
    got.backward()
    exp, w2 = leaf_made_inside(x)
    exp.backward()
    assert_close(got, exp)
    assert_close(w.grad, w2.grad)


def parameter_in_branch(x):
    a = torch.tanh(x * 2.0 + 1.0)
    b = a @ x
    if b.sum() > 0:
        c = b @ W
    else:
        c = b @ W * 2.0
    return torch.exp(c)


def test_parameter_requiring_grad_inside_a_branch():
    x = randn(8, 8)
    f, _ = compiled(parameter_in_branch, x)
    got = f(x)
    exp = parameter_in_branch(x)
    assert_close(got, exp)


def grad_inside(x, w):
    with torch.enable_grad():
        a = torch.exp(x @ w * 0.1)
        b = torch.tanh(a @ w) * 2.0
    return b


def test_grad_switched_on_inside_a_no_grad_call_is_not_planned():
    """Entered under no_grad, the graph turns autograd on: buffers must not be reused."""
    x, w = randn(6, 6), randn(6, 6, seed=1).requires_grad_()
    f, entry = compiled(grad_inside, x, w)
    assert not any(n.attrs.get("planned_out") or "planned_inplace" in n.attrs
                   for n in entry.optimized.walk())
    with torch.no_grad():
        got = f(x, w)
        expected = grad_inside(x, w)
    assert_close(got, expected)
    (g_got,) = torch.autograd.grad(got.sum(), w)
    (g_exp,) = torch.autograd.grad(expected.sum(), w)
    assert_close(g_got, g_exp)
