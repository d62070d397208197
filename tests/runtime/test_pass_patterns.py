"""Pattern fusion: each rule on a hand-built graph, the cases where it must not fire, and
traced functions whose optimized graphs match eager in values and gradients."""
import pytest
import torch
import torch.nn.functional as F

from runtime.passes import CLEANUP, dce, fuse_patterns
from transpiler import to_graph
from test_passes import graph_of, meta, op, ops, optimize, run_both

T = torch.Tensor


def _fused(g):
    return optimize(g, passes=[fuse_patterns, dce])


def test_linear_from_matmul_of_transpose_plus_bias():
    g, (x, w, b) = graph_of((5, 4), (3, 4), (3,))
    mm = op(g, torch.matmul, x, op(g, T.t, w, meta=meta(4, 3)), meta=meta(5, 3))
    g.outputs = (op(g, T.add, mm, b, meta=meta(5, 3)),)
    opt = _fused(g)
    assert ops(opt) == ["linear"]
    assert opt.nodes[-1].meta == meta(5, 3)
    run_both(g, opt, torch.randn(5, 4), torch.randn(3, 4), torch.randn(3))


def test_addmm_from_matmul_plus_bias_either_order():
    g, (x, w, b) = graph_of((5, 4), (4, 3), (3,))
    mm = op(g, torch.mm, x, w, meta=meta(5, 3))
    g.outputs = (op(g, T.add, b, mm, meta=meta(5, 3)),)
    opt = _fused(g)
    assert ops(opt) == ["addmm"]
    run_both(g, opt, torch.randn(5, 4), torch.randn(4, 3), torch.randn(3))


def test_no_fusion_when_the_product_has_another_reader_or_broadcast_grows():
    g, (x, w, b) = graph_of((5, 4), (4, 3), (2, 5, 3))
    mm = op(g, torch.matmul, x, w, meta=meta(5, 3))
    grown = op(g, T.add, mm, b, meta=meta(2, 5, 3))          # b makes the result 3-D
    g.outputs = (grown, op(g, T.add, mm, 1, meta=meta(5, 3)))
    assert ops(_fused(g)) == ops(g)


def test_no_fusion_across_dtypes():
    g, (x, w) = graph_of((5, 4), (4, 3))
    b = g.placeholder(meta(3, dtype=torch.float64), name="b")
    mm = op(g, torch.matmul, x, w, meta=meta(5, 3))
    g.outputs = (op(g, T.add, mm, b, meta=meta(5, 3, dtype=torch.float64)),)
    assert ops(_fused(g)) == ops(g)


@pytest.mark.parametrize("bias_shape", [(4, 1, 1), (1, 4, 1, 1)])
def test_conv_bias_then_relu(bias_shape):
    g, (x, w, b) = graph_of((2, 3, 6, 6), (4, 3, 3, 3), bias_shape)
    out = meta(2, 4, 4, 4)
    conv = op(g, torch.conv2d, x, w, None, 1, 0, 1, 1, meta=out)
    g.outputs = (op(g, F.relu, op(g, T.add, conv, b, meta=out), inplace=False, meta=out),)
    opt = _fused(g)
    assert ops(opt) == ["reshape", "conv2d_relu"]
    assert "conv2d_relu %x %y %reshape_1 1 0 1 1" in str(opt)
    run_both(g, opt, torch.randn(2, 3, 6, 6), torch.randn(4, 3, 3, 3), torch.randn(bias_shape))


def test_conv_bias_on_the_wrong_axis_is_kept():
    g, (x, w, b) = graph_of((2, 3, 6, 6), (4, 3, 3, 3), (4,))
    out = meta(2, 4, 4, 4)
    conv = op(g, torch.conv2d, x, w, meta=out)
    g.outputs = (op(g, T.add, conv, b, meta=out),)           # b adds along W, not C
    assert ops(_fused(g)) == ["conv2d", "add"]


UNARY = [  # (name, build, fused op)
    ("silu", lambda g, x: op(g, T.mul, x, op(g, torch.sigmoid, x)), "silu"),
    ("silu, sigmoid first", lambda g, x: op(g, T.mul, op(g, torch.sigmoid, x), x), "silu"),
    ("mish", lambda g, x: op(g, T.mul, x, op(g, torch.tanh, op(g, F.softplus, x))), "mish"),
    ("1/sqrt", lambda g, x: op(g, T.__rdiv__, op(g, torch.sqrt, x), 1), "rsqrt"),
    ("sqrt().reciprocal()", lambda g, x: op(g, T.reciprocal, op(g, torch.sqrt, x)), "rsqrt"),
]


@pytest.mark.parametrize("name, build, fused", UNARY, ids=[c[0] for c in UNARY])
def test_unary_patterns_including_nan_and_inf(name, build, fused):
    g, (x,) = graph_of((3,))
    g.outputs = (build(g, x),)
    opt = _fused(g)
    assert ops(opt) == [fused]
    for values in ([0.5, 2.0, 30.0], [float("nan"), float("inf"), -float("inf")], [0.0, -0.0, -1.0]):
        run_both(g, opt, torch.tensor(values))


def test_silu_kept_when_sigmoid_is_read_elsewhere():
    g, (x,) = graph_of((3,))
    s = op(g, torch.sigmoid, x)
    g.outputs = (op(g, T.mul, x, s), s)
    assert ops(_fused(g)) == ["sigmoid", "mul"]


def test_addcmul():
    g, (a, b, c) = graph_of((3,), (3,), (3,))
    g.outputs = (op(g, T.add, a, op(g, T.mul, b, c)),)
    opt = _fused(g)
    assert ops(opt) == ["addcmul"]
    run_both(g, opt, torch.randn(3), torch.randn(3), torch.randn(3))


def test_fusion_waits_for_mutated_inputs():
    # m = x @ w; x.add_(1); y = m + b: addmm would read the mutated x
    g, (x0, w, b) = graph_of((2, 2), (2, 2), (2,))
    x = op(g, T.clone, x0, meta=meta(2, 2))
    mm = op(g, torch.matmul, x, w, meta=meta(2, 2))
    op(g, T.add_, x, 1, meta=meta(2, 2))
    g.outputs = (op(g, T.add, mm, b, meta=meta(2, 2)),)
    opt = _fused(g)
    assert "addmm" not in ops(opt)
    run_both(g, opt, torch.randn(2, 2), torch.randn(2, 2), torch.randn(2))


# --------------------------------------------------------------------------- traced
torch.manual_seed(0)
W = torch.randn(6, 5, requires_grad=True)
B = torch.randn(6, requires_grad=True)
K = torch.randn(4, 3, 3, 3, requires_grad=True)
KB = torch.randn(4, 1, 1, requires_grad=True)


def mlp(x):
    h = x @ W.T + B
    h = h * torch.sigmoid(h)
    return (h * torch.tanh(F.softplus(h))).sum() + (1 / torch.sqrt(h.abs() + 1)).sum()


def conv_net(x):
    y = torch.relu(F.conv2d(x, K) + KB)
    return y.sum() + (y.mean() + y * y).sum()


@pytest.mark.parametrize("fn, shape, fused", [(mlp, (4, 5), {"linear", "silu", "mish", "rsqrt"}),
                                              (conv_net, (2, 3, 7, 7), {"conv2d_relu"})])
def test_traced_functions_fuse_and_keep_values_and_gradients(fn, shape, fused):
    graph_fn = to_graph(fn)
    torch.manual_seed(0)
    x = torch.randn(*shape, requires_grad=True)
    g = graph_fn.graph(x)
    opt = optimize(g, passes=CLEANUP + [fuse_patterns])
    assert fused <= set(ops(opt))
    lines = {n.location[1] for n in opt.nodes if n.op in fused}
    assert lines and lines <= {n.location[1] for n in g.nodes if n.location}
    params = [W, B] if fn is mlp else [K, KB]
    expected = fn(x)
    want = torch.autograd.grad(expected, [x] + params)
    got = graph_fn(x)
    grads = torch.autograd.grad(got, [x] + params)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-4)
    for a, e in zip(grads, want):
        torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-4)
