"""The fast path of a fused kernel under autograd (``runtime/kernels/planned_node.py``):
a compiled kernel over static shapes runs as a planned node (shapes, broadcast sums and
casts fixed at the first call) instead of the general ``autograd_node`` node.

Differential against eager, in default and strict mode, two calls with different inputs
(so nothing is baked at trace time): values, every input's gradient (float32 within
1e-5), float64 ``gradcheck``; and the node is checked to be the planned one
(``grad_fn._forward_cls``), so no test passes on the general node or the torch ops. The
planned node's gradients are bit-equal to the general node's (same C kernels). Spellings:
GPT-2's GELU, bias + GELU + residual (a broadcast bias row), a per-row scale, a 0-d scale,
inputs of which some need no gradient, a comparison beside a differentiable output, a
layernorm and a softmax written out (row programs), float64; double backward replays the
torch ops; an input changed in place before backward raises as in eager; autograd saves
no more than eager; GPT-2 tiny's training steps equal eager's and take the planned node.
"""
import math

import pytest
import torch

from runtime.kernels import autograd_node, planned_node
from runtime.kernels import rotary as rotary_kernel
from transpiler import to_graph

needs_compiler = pytest.mark.skipif(rotary_kernel._functions() is None,
                                    reason="no C compiler")
pytestmark = needs_compiler


@pytest.fixture(autouse=True)
def _sync_kernels():
    """Kernels compiled before a graph's first call, so every call below is the C path."""
    from runtime.options import options
    with options.override(kernel_build="sync"):
        yield


# ------------------------------------------------------------------------ the programs
def new_gelu(x):
    """transformers' NewGELUActivation (GPT-2)."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) *
                                       (x + 0.044715 * torch.pow(x, 3.0))))


def bias_gelu_residual(x, b, r):
    return torch.nn.functional.gelu(x + b, approximate="tanh") + r


def row_scale(x, s):                    # s: (rows, 1), read per row
    return torch.sigmoid(x * s) * x


def scalar_scale(x, s):                 # s: a 0-d tensor
    return torch.tanh(x * s) + s


def relu_and_mask(x, w):                # a comparison beside a differentiable output
    y = torch.relu(x * w)
    return y, x > 0


def layer_norm(x, r, w, b):             # a row program with its residual add
    h = x + r
    mu = h.mean(-1, keepdim=True)
    d = h - mu
    var = (d * d).mean(-1, keepdim=True)
    return h, d * torch.rsqrt(var + 1e-5) * w + b


def softmax(x, m):
    z = x + m
    e = torch.exp(z - z.amax(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True)


def _shapes(name, n=32):
    return {"new_gelu": [(4, n)], "bias_gelu_residual": [(4, n), (n,), (4, n)],
            "row_scale": [(4, n), (4, 1)], "scalar_scale": [(4, n), ()],
            "relu_and_mask": [(4, n), (4, n)], "layer_norm": [(4, n), (4, n), (n,), (n,)],
            "softmax": [(4, n), (4, n)]}[name]


PROGRAMS = {f.__name__: f for f in (new_gelu, bias_gelu_residual, row_scale, scalar_scale,
                                    relu_and_mask, layer_norm, softmax)}


def _args(name, seed, dtype=torch.float32, grads=None):
    gen = torch.Generator().manual_seed(seed)
    shapes = _shapes(name)
    grads = grads if grads is not None else [True] * len(shapes)
    return [torch.randn(s, generator=gen, dtype=dtype).requires_grad_(need)
            for s, need in zip(shapes, grads)]


def _outs(out):
    return out if isinstance(out, tuple) else (out,)


def _planned_nodes(outs):
    return [o.grad_fn for o in outs if o.grad_fn is not None
            and getattr(o.grad_fn, "_forward_cls", None) is planned_node._FusedNode]


def _gradients(fn, args, seed):
    """(outputs, gradients of the inputs needing one) for random cotangents."""
    outs = _outs(fn(*args))
    diff = [o for o in outs if o.requires_grad]
    gen = torch.Generator().manual_seed(seed + 100)
    dys = [torch.randn(o.shape, generator=gen, dtype=o.dtype) for o in diff]
    wanted = [a for a in args if a.requires_grad]
    return outs, torch.autograd.grad(diff, wanted, dys)


def _close(got, expected):
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------- tests
@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_planned_node_equals_eager(name, strict):
    fn = PROGRAMS[name]
    g = to_graph(fn, strict=strict)
    for seed in (0, 1):
        args = _args(name, seed)
        outs, grads = _gradients(g, args, seed)
        assert _planned_nodes(outs), [type(o.grad_fn).__name__ for o in outs]
        exp_outs, exp_grads = _gradients(fn, [a.detach().requires_grad_(a.requires_grad)
                                              for a in args], seed)
        for o, e in zip(outs, exp_outs):
            assert o.dtype == e.dtype and o.shape == e.shape
            assert o.requires_grad == e.requires_grad
            if o.dtype == torch.bool:
                assert torch.equal(o, e)
            else:
                _close(o.detach(), e.detach())
        for a, e in zip(grads, exp_grads):
            assert a.shape == e.shape and a.dtype == e.dtype
            _close(a, e)


@pytest.mark.parametrize("name,grads", [
    ("bias_gelu_residual", [True, False, True]),     # the bias row needs none
    ("bias_gelu_residual", [False, True, False]),    # only the bias row
    ("layer_norm", [True, False, False, True]),
    ("scalar_scale", [False, True]),
])
def test_inputs_not_needing_gradients(name, grads):
    fn = PROGRAMS[name]
    g = to_graph(fn, strict=True)
    for seed in (0, 1):
        args = _args(name, seed, grads=grads)
        outs, got = _gradients(g, args, seed)
        assert _planned_nodes(outs)
        _, exp = _gradients(fn, [a.detach().requires_grad_(a.requires_grad) for a in args],
                            seed)
        assert len(got) == sum(grads)
        for a, e in zip(got, exp):
            _close(a, e)


@pytest.mark.parametrize("name", ["new_gelu", "bias_gelu_residual", "layer_norm"])
def test_planned_node_gradcheck_float64(name):
    g = to_graph(PROGRAMS[name], strict=True)
    args = _args(name, 3, dtype=torch.float64)
    assert _planned_nodes(_outs(g(*args)))
    assert torch.autograd.gradcheck(lambda *a: g(*a), args, eps=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", ["new_gelu", "bias_gelu_residual", "layer_norm"])
def test_planned_node_bit_equal_to_general_node(name, monkeypatch):
    """The same C kernels forward and backward: the planned node changes the Python
    around them only."""
    fn = PROGRAMS[name]
    planned = to_graph(fn, strict=True)
    args = _args(name, 5)
    outs_p, grads_p = _gradients(planned, args, 5)
    assert _planned_nodes(outs_p)
    monkeypatch.setattr(planned_node.Planned, "fits", staticmethod(lambda k, r: False))
    general = to_graph(fn, strict=True)
    outs_g, grads_g = _gradients(general, args, 5)
    assert not _planned_nodes(outs_g)
    assert all(o.grad_fn is None or o.grad_fn._forward_cls is autograd_node._FusedNode
               for o in outs_g)
    for a, b in zip(outs_p + grads_p, outs_g + grads_g):
        assert torch.equal(a, b)


def test_double_backward_replays_torch_ops():
    g = to_graph(bias_gelu_residual, strict=True)
    for seed in (0, 1):
        args = _args("bias_gelu_residual", seed, dtype=torch.float64)
        got = []
        for f, a in ((g, args), (bias_gelu_residual, [x.detach().requires_grad_()
                                                     for x in args])):
            y = f(*a)
            if f is g:
                assert _planned_nodes((y,))
            (dx,) = torch.autograd.grad(y.sum(), a[0], create_graph=True)
            got.append(torch.autograd.grad((dx * dx).sum(), a, allow_unused=True))
        for a, e in zip(*got):                         # (r enters linearly: None both)
            assert (a is None) == (e is None)
            if e is not None:
                torch.testing.assert_close(a, e, rtol=1e-9, atol=1e-12)


def test_unused_output_gets_zero_gradient():
    g = to_graph(layer_norm, strict=True)
    args = _args("layer_norm", 2)
    h, y = g(*args)
    assert _planned_nodes((h, y))
    got = torch.autograd.grad(y.sum(), args)           # h unused
    ea = [a.detach().requires_grad_() for a in args]
    exp = torch.autograd.grad(layer_norm(*ea)[1].sum(), ea)
    for a, e in zip(got, exp):
        _close(a, e)


def test_input_changed_in_place_before_backward_raises():
    g = to_graph(bias_gelu_residual, strict=True)
    x, b, r = _args("bias_gelu_residual", 0)
    x = x.detach() * 1                                 # a non-leaf the program may change
    x.requires_grad_()
    y = g(x, b, r)
    assert _planned_nodes((y,))
    with torch.no_grad():
        x.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def _saved_bytes(fn, args):
    seen = {}

    def pack(t):
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*args)
    return sum(seen.values())


@pytest.mark.parametrize("name", ["new_gelu", "bias_gelu_residual", "layer_norm"])
def test_saves_what_the_general_node_saves(name, monkeypatch):
    """The group's inputs its backward reads, nothing more (a whole model then saves at
    most eager's: test_models_training; one group alone may save a bias eager does not)."""
    g = to_graph(PROGRAMS[name], strict=True)
    args = _args(name, 0)
    assert _planned_nodes(_outs(g(*args)))
    planned = _saved_bytes(g, args)
    monkeypatch.setattr(planned_node.Planned, "fits", staticmethod(lambda k, r: False))
    general = to_graph(PROGRAMS[name], strict=True)
    assert not _planned_nodes(_outs(general(*args)))
    assert planned == _saved_bytes(general, args)
    if name == "new_gelu":                             # x only: eager keeps x, x**3, tanh...
        assert planned == args[0].nbytes < _saved_bytes(PROGRAMS[name], args)


# ---------------------------------------------------------------------------- GPT-2
transformers = pytest.importorskip("transformers")


def test_gpt2_training_steps_take_the_planned_node_and_equal_eager():
    from benchmarks.training_check import Run, train_side_by_side
    from benchmarks.training_tasks import TASKS
    task = TASKS["gpt2"]("test")
    runs = {"eager": Run(task), "tograph": Run(task, wrap=lambda m: to_graph(m, strict=True))}
    diffs = train_side_by_side(task, runs, 2)
    assert runs["tograph"].error is None and runs["tograph"].fallbacks == []
    assert diffs["tograph"]["max_rel_diff"] <= 1e-5, diffs["tograph"]
    # the converted model's forward under autograd holds the planned GELU nodes
    model = runs["tograph"].called
    (ids,), target = task.batch(0)
    loss = task.loss(model(ids), target)
    seen, stack, planned = set(), [loss.grad_fn], 0
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        planned += getattr(node, "_forward_cls", None) is planned_node._FusedNode
        stack.extend(f for f, _ in node.next_functions)
    assert planned == 2                                 # one GELU per layer
