"""Linear layers under autograd through oneDNN (``runtime/kernels/onednn_linear.py``,
``runtime/passes/onednn_linear.py``): where MKL runs its AVX2 code on an AVX-512 CPU
(not Intel's), ``addmm``/``linear`` nodes that autograd records run as one ``_Linear``
node whose forward and two backward products are oneDNN's.

Differential against eager: values, every input's gradient and its layout (float32,
within 1e-5 relative: oneDNN sums in its own blocking), double backward through the
node's recorded torch-op backward, the calls that must stay torch's (no autograd,
float64, a non-contiguous input, a broadcast 2-D bias, kwargs), the pass's size threshold
and option, and GPT-2 at width 128 training 20 steps against eager. The kernel's tests
force the path with ``options.onednn_linear = "on"``, so they run on any CPU with oneDNN.
"""
import pytest
import torch
import torch.nn.functional as F

from runtime.kernels import onednn_linear as kernel
from runtime.options import options
from runtime.passes import onednn_linear as linear_pass
from transpiler import to_graph

from tests.training.test_gpt2_backward_paths import _node_types

pytestmark = [pytest.mark.skipif(kernel._lp is None or not torch.backends.mkldnn.is_available(),
                                 reason="this torch has no oneDNN linear"),
              pytest.mark.usefixtures("one_thread")]


@pytest.fixture
def onednn_on():
    with options.override(onednn_linear="on"):
        yield


def test_off_by_default():
    """Not eager's bits: opt-in only (mobilenet_v3_small's 20 steps drifted 2.4 relative)."""
    import os
    if "TOGRAPH_ONEDNN_LINEAR" not in os.environ:
        assert options.onednn_linear == "off" and not kernel.available()
    with options.override(onednn_linear="off"):
        assert not kernel.available()


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


def leaves(*shapes, seed=0, needs=None):
    g = torch.Generator().manual_seed(seed)
    needs = needs or [True] * len(shapes)
    return [torch.randn(*s, generator=g).requires_grad_(n) for s, n in zip(shapes, needs)]


def run(fn, args, grad_seed=5):
    out = fn(*args)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(grad_seed))
    out.backward(g)
    grads = [a.grad.clone() if a.grad is not None else None for a in args]
    for a in args:
        a.grad = None
    return out.detach(), grads, out.grad_fn


def compare(fn_ours, fn_eager, args):
    ours, g_ours, node = run(fn_ours, args)
    ref, g_ref, _ = run(fn_eager, args)
    assert ours.shape == ref.shape and ours.dtype == ref.dtype
    assert rel(ours, ref) <= 1e-5
    for a, b in zip(g_ours, g_ref):
        assert (a is None) == (b is None)
        if a is not None:
            assert a.shape == b.shape and a.stride() == b.stride() and a.dtype == b.dtype
            assert rel(a, b) <= 1e-5
    return node


# (rows, in, out) products: GPT-2 widths, odd sizes, a single row
SIZES = [(128, 128, 512), (128, 512, 128), (37, 45, 29), (1, 64, 16)]


@pytest.mark.parametrize("m,k,n", SIZES)
def test_conv1d_addmm_node_equals_eager(m, k, n):
    """``addmm(b, x, w)`` with ``w`` ``[in, out]`` (transformers' Conv1D)."""
    op = kernel.OneDNNLinear(torch.addmm, kn=True)
    b, x, w = leaves((n,), (m, k), (k, n))
    node = compare(lambda b, x, w: op(b, x, w), torch.addmm, [b, x, w])
    assert type(node).__name__ == "_LinearBackward"


@pytest.mark.parametrize("m,k,n", SIZES)
@pytest.mark.parametrize("bias", [True, False])
def test_linear_node_equals_eager(m, k, n, bias):
    """``linear(x, w, b)`` with ``w`` ``[out, in]``, 2-D and 3-D inputs."""
    op = kernel.OneDNNLinear(F.linear, kn=False)
    x, w, b = leaves((2, m, k), (n, k), (n,), seed=m)
    args = [x, w, b] if bias else [x, w]
    node = compare(lambda *a: op(*a), F.linear, args)
    assert type(node).__name__ == "_LinearBackward"


@pytest.mark.parametrize("needs", [(True, False, False), (False, True, True),
                                   (False, True, False), (True, True, False)])
def test_only_the_needed_gradients(needs):
    op = kernel.OneDNNLinear(torch.addmm, kn=True)
    b, x, w = leaves((64,), (32, 48), (48, 64), needs=list(needs))
    node = compare(lambda b, x, w: op(b, x, w), torch.addmm, [b, x, w])
    assert type(node).__name__ == "_LinearBackward"


def test_transposed_weight_layouts():
    """A ``linear`` weight that is a transposed view, and an ``addmm`` weight ``[in, out]``
    that is the transpose of a contiguous ``[out, in]`` (``x @ W.t()``)."""
    x, w = leaves((16, 24), (24, 40))
    lin = kernel.OneDNNLinear(F.linear, kn=False)
    compare(lambda x, w: lin(x, w.t()), lambda x, w: F.linear(x, w.t()), [x, w])
    add = kernel.OneDNNLinear(torch.addmm, kn=True)
    b, x2, wo = leaves((40,), (16, 24), (40, 24), seed=1)
    node = compare(lambda b, x, w: add(b, x, w.t()), lambda b, x, w: torch.addmm(b, x, w.t()),
                   [b, x2, wo])
    assert type(node).__name__ == "_LinearBackward"


def test_double_backward_records_torch_ops():
    """``create_graph=True``: the node's backward runs torch's ops, recorded, so second
    derivatives are eager's."""
    op = kernel.OneDNNLinear(torch.addmm, kn=True)

    def second(fn):
        b, x, w = leaves((12,), (8, 10), (10, 12), seed=3)
        y = fn(b, x, w)
        gx, gw = torch.autograd.grad((y * y).sum(), (x, w), create_graph=True)
        return [t.detach() for t in torch.autograd.grad((gx * gx).sum() + (gw ** 3).sum(),
                                                       (b, x, w))]
    for a, b in zip(second(lambda b, x, w: op(b, x, w)), second(torch.addmm)):
        assert rel(a, b) <= 1e-5


class _TorchForward(kernel._Linear):
    """The node with a float64 forward in torch's ops (oneDNN's product is float32 only):
    its backward is ``_Linear.backward``'s formulas, which float64 runs as torch ops."""

    @staticmethod
    def forward(ctx, x, w, bias, kn):
        ctx.kn = kn
        ctx.save_for_backward(x, w)
        return F.linear(x, w.t() if kn else w, bias)


@pytest.mark.parametrize("kn", [True, False])
def test_backward_formulas_gradcheck_in_float64(kn):
    """gradcheck and gradgradcheck of the node's derivative formulas (x, w, bias; ``w`` as
    ``[in, out]`` or ``[out, in]``; a 3-D input for ``linear``)."""
    g = torch.Generator().manual_seed(int(kn))
    x = torch.randn(*((6, 4) if kn else (2, 3, 4)), dtype=torch.float64, generator=g,
                    requires_grad=True)
    w = torch.randn(*((4, 7) if kn else (7, 4)), dtype=torch.float64, generator=g,
                    requires_grad=True)
    b = torch.randn(7, dtype=torch.float64, generator=g, requires_grad=True)
    fn = lambda x, w, b: _TorchForward.apply(x, w, b, kn)   # noqa: E731
    assert torch.autograd.gradcheck(fn, (x, w, b))
    assert torch.autograd.gradgradcheck(fn, (x, w, b))


@pytest.mark.parametrize("case", ["no_grad", "float64", "noncontiguous", "bias2d", "kwargs",
                                  "nothing_needs_grad", "mkldnn_off"])
def test_other_calls_stay_torch(case):
    op = kernel.OneDNNLinear(torch.addmm, kn=True)
    b, x, w = leaves((8,), (4, 6), (6, 8))
    kwargs = {}
    if case == "float64":
        b, x, w = (t.detach().double().requires_grad_() for t in (b, x, w))
    elif case == "noncontiguous":
        x = leaves((6, 4))[0].t()
    elif case == "bias2d":
        b = leaves((4, 8))[0]
    elif case == "kwargs":
        kwargs = {"beta": 0.5}
    elif case == "nothing_needs_grad":
        b, x, w = (t.detach() for t in (b, x, w))
    if case == "mkldnn_off":              # torch.backends.mkldnn switched off: MKL's op
        torch.backends.mkldnn.enabled = False
        try:
            out = op(b, x, w)
        finally:
            torch.backends.mkldnn.enabled = True
        assert type(out.grad_fn).__name__ == "AddmmBackward0"
        assert torch.equal(out, torch.addmm(b, x, w))
        return
    if case == "no_grad":
        with torch.no_grad():
            out = op(b, x, w)
        assert out.grad_fn is None
        assert torch.equal(out, torch.addmm(b, x, w))
        return
    out = op(b, x, w, **kwargs)
    assert torch.equal(out, torch.addmm(b, x, w, **kwargs))      # torch's own op, its bits
    assert out.grad_fn is None or type(out.grad_fn).__name__ == "AddmmBackward0"


class Block(torch.nn.Module):
    """A GPT-2-shaped MLP: Conv1D-style ``addmm`` in, GELU, ``linear`` out, residual."""

    def __init__(self, d, h):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.w_in = torch.nn.Parameter(torch.randn(d, h, generator=g) * d ** -0.5)
        self.b_in = torch.nn.Parameter(torch.randn(h, generator=g) * 0.1)
        torch.manual_seed(1)
        self.out = torch.nn.Linear(h, d)

    def forward(self, x):
        h = torch.addmm(self.b_in, x.view(-1, x.shape[-1]), self.w_in)
        h = F.gelu(h, approximate="tanh").view(*x.shape[:-1], -1)
        return x + self.out(h)


def _train(model, steps=4):
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses, grads = [], []
    for i in range(steps):
        x = torch.randn(4, 32, 128, generator=torch.Generator().manual_seed(i))
        opt.zero_grad(set_to_none=True)
        loss = model(x).square().mean()
        loss.backward()
        losses.append(loss.detach())
        grads.append([p.grad.clone() for p in model.parameters()])
        opt.step()
    return losses, grads, [p.detach().clone() for p in model.parameters()]


def _targets(converted, x):
    optimized = converted.graph_function.get_concrete(x).optimized
    return [n.target for n in optimized.walk() if n.op in ("addmm", "linear")]


@pytest.mark.parametrize("mode", ["on", "off"])
def test_pass_retargets_large_recorded_products(mode):
    """At 128 rows x 128 x 512 (8.4M multiply-adds) both products are retargeted when the
    option allows; training equals eager within 1e-5 either way."""
    eager = Block(128, 512)
    ours = to_graph(Block(128, 512), strict=True)
    with options.override(onednn_linear=mode):
        got = _train(ours)
    ref = _train(eager)
    x = torch.randn(4, 32, 128)
    kinds = {type(t).__name__ for t in _targets(ours, x)}
    assert kinds == ({"OneDNNLinear"} if mode == "on" else {"builtin_function_or_method"})
    for a, b in zip(got[0], ref[0]):
        assert rel(a, b) <= 1e-5
    for ga, gb in zip(got[1], ref[1]):
        for a, b in zip(ga, gb):
            assert rel(a, b) <= 1e-5
    for a, b in zip(got[2], ref[2]):
        assert rel(a, b) <= 1e-5


def test_pass_keeps_small_products_and_inference(onednn_on):
    """Below ``MIN_WORK`` (GPT-2 tiny's 128x64x256) and without autograd the nodes keep
    torch's targets: inference graphs are unchanged, bit for bit."""
    small = to_graph(Block(64, 256), strict=True)
    x = torch.randn(2, 64, 64)
    assert 128 * 64 * 256 < linear_pass.MIN_WORK
    small(x).sum().backward()
    assert all(type(t).__name__ != "OneDNNLinear" for t in _targets(small, x))
    xb = torch.randn(4, 32, 128)
    big = to_graph(Block(128, 512), strict=True)
    big(xb).sum().backward()                           # traced with autograd: retargeted
    assert {type(t).__name__ for t in _targets(big, xb)} == {"OneDNNLinear"}
    with options.override(onednn_linear="off"):
        plain = to_graph(Block(128, 512), strict=True)
        with torch.no_grad():
            want = plain(xb)
    with torch.no_grad():
        assert torch.equal(big(xb), want)
        assert rel(want, Block(128, 512)(xb)) <= 1e-5


import benchmarks.model_zoo  # noqa: E402,F401  -- torchvision before transformers, as it needs
transformers = pytest.importorskip("transformers")


def test_gpt2_width_128_trains_as_eager(onednn_on):
    """GPT-2 (2 layers, width 128, batch 4 x 32): 20 SGD steps through ``to_graph(model)``
    with its linear layers on oneDNN equal eager's within 1e-5 (losses, every gradient,
    final weights), and the converted forward holds the oneDNN nodes."""
    from benchmarks.training_check import Run, train_side_by_side
    from benchmarks.training_tasks import TASKS
    task = TASKS["gpt2_w128"]("bench")
    converted = Run(task, wrap=lambda m: to_graph(m, strict=True))
    runs = {"eager": Run(task), "tograph": converted}
    worst = train_side_by_side(task, runs, 20)["tograph"]
    assert converted.error is None and converted.fallbacks == [], converted.error
    assert worst["max_rel_diff"] <= 1e-5, worst
    model = runs["tograph"].called
    (ids,), target = task.batch(0)
    loss = task.loss(model(ids), target)
    # per layer c_attn, c_fc and the MLP's c_proj, and lm_head (attention's c_proj: 2.1M)
    assert _node_types(loss).count("_LinearBackward") == 7
