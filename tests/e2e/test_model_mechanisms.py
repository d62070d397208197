"""Mechanisms real models from other libraries need (issue 13's survey,
``benchmarks/model_survey.py``), each on small modules against eager.

Submodules with forward hooks: transformers installs hooks on every layer for
``output_hidden_states``/``output_attentions``; such a submodule used to run natively
(``nn.Module._call_impl`` unconverted), so its forward's tensor control flow could not
become graph nodes and ``torch.compiler.is_compiling()`` got eager's answer there (MoE
experts then took a kernel with no meta implementation and fell back). Now its pre-hooks,
converted forward and hooks run in ``_call_impl``'s order.
"""
import functools
import warnings

import pytest
import torch
from torch import nn

from tests.e2e.e2e_helpers import assert_same
from transpiler import ConversionError, FallbackWarning, to_graph


class Gate(nn.Module):
    """A forward with tensor control flow: only convertible code can trace it."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, scale=1.0):
        y = self.lin(x)
        if y.sum() > 0:
            y = y * 2 * scale
        else:
            y = y - 1
        return y


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = Gate()
        self.b = Gate()

    def forward(self, x):
        return self.b(torch.relu(self.a(x)) - 0.5)


def _inputs():
    g = torch.Generator().manual_seed(0)
    return [torch.randn(3, 4, generator=g) * s for s in (1.0, -3.0, 5.0)]


def _check_module(make, strict=True, grad=False):
    """Eager vs converted on three inputs (both branches taken), no FallbackWarning; with
    ``grad``, the gradients of every parameter too. Returns (eager model, converted)."""
    torch.manual_seed(0)
    model = make()
    torch.manual_seed(0)
    twin = make()
    twin.load_state_dict(model.state_dict())
    g = to_graph(twin, strict=strict)
    for x in _inputs():
        exp = model(x)
        with warnings.catch_warnings():
            warnings.simplefilter("error", FallbackWarning)
            got = g(x)
        assert_same(got, exp)
        if grad:
            exp.square().sum().backward()
            got.square().sum().backward()
            for (name, p), q in zip(model.named_parameters(), twin.parameters()):
                torch.testing.assert_close(q.grad, p.grad, msg=name)
    return model, twin, g


def _with_hooks(register):
    def make():
        net = Net()
        register(net)
        return net
    return make


@pytest.mark.parametrize("strict", [True, False])
def test_forward_hook_replacing_output(strict):
    def register(net):
        net.a.register_forward_hook(lambda m, args, out: out * 3 + args[0].sum())
    _check_module(_with_hooks(register), strict=strict)


def test_forward_hook_returning_none_keeps_the_output():
    def register(net):
        def hook(module, args, out):
            if out.sum() > 100:         # (tensor control flow in the hook: converted)
                torch._assert(out.shape[0] == 3, "batch")
        net.a.register_forward_hook(hook)
        net.b.register_forward_hook(hook)
    _check_module(_with_hooks(register))


def test_hook_mutating_outer_state_falls_back():
    """A hook appending to the caller's list is a side effect a graph cannot repeat: the
    call falls back naming the line (strict: ConversionError), with eager's effect."""
    seen = []
    torch.manual_seed(0)
    net = Net()
    net.a.register_forward_hook(lambda m, args, out: seen.append(out.shape))
    x = _inputs()[0]
    with pytest.raises(ConversionError):
        to_graph(net, strict=True)(x)
    seen.clear()
    with pytest.warns(FallbackWarning, match=r"test_model_mechanisms\.py:\d+"):
        got = to_graph(net)(x)
    assert_same(got, net(x))
    assert seen == [torch.Size([3, 4])] * 2


def test_pre_hooks_replacing_arguments():
    def register(net):
        net.a.register_forward_pre_hook(lambda m, args: args[0] + 1)           # not a tuple
        net.b.register_forward_pre_hook(lambda m, args: (args[0] * -1,))
        net.b.register_forward_pre_hook(lambda m, args, kwargs: (args, {"scale": 0.5}),
                                        with_kwargs=True)
        net.b.register_forward_hook(lambda m, args, kwargs, out: out + kwargs["scale"],
                                    with_kwargs=True)
    _check_module(_with_hooks(register))


def test_hooks_run_in_order_with_gradients():
    def register(net):
        net.a.register_forward_hook(lambda m, args, out: out * 2)
        net.a.register_forward_hook(lambda m, args, out: out + 1)
        net.a.register_forward_hook(lambda m, args, out: None)
        net.b.register_forward_pre_hook(lambda m, args: (args[0].tanh(),), prepend=True)
    _check_module(_with_hooks(register), grad=True)


class Collector(nn.Module):
    """transformers' ``capture_outputs`` pattern: hooks append each layer's output to a
    list the model's forward sets up and returns."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(Gate() for _ in range(3))
        self.active = None
        for layer in self.layers:
            layer.register_forward_hook(self._record)

    def _record(self, module, args, out):
        if self.active is not None:
            self.active.append(out)

    def forward(self, x):
        self.active = collected = []
        for layer in self.layers:
            x = layer(x)
        self.active = None
        return x, tuple(collected)


def test_hooks_collecting_layer_outputs():
    _check_module(Collector, grad=False)


def test_hook_added_after_a_trace_retraces():
    torch.manual_seed(0)
    net = Net()
    g = to_graph(net, strict=True)
    x = _inputs()[0]
    assert_same(g(x), net(x))
    handle = net.a.register_forward_hook(lambda m, args, out: out * 10)
    assert_same(g(x), net(x))
    handle.remove()
    assert_same(g(x), net(x))


@pytest.mark.parametrize("pre", [False, True])
def test_submodule_backward_hooks_fall_back(pre):
    """Backward hooks on a submodule run on its gradients: a graph of the forward has no
    module boundary to call them at (they were silently not called): the call falls back
    (strict: ConversionError), and the hooks run as in eager."""
    torch.manual_seed(0)
    net, calls = Net(), []
    if pre:
        net.a.register_full_backward_pre_hook(lambda m, gout: calls.append("pre"))
    else:
        net.a.register_full_backward_hook(lambda m, gin, gout: calls.append("post"))
    x = _inputs()[0].requires_grad_()
    with pytest.raises(ConversionError, match="backward hooks"):
        to_graph(net, strict=True)(x)
    with pytest.warns(FallbackWarning, match="backward hooks"):
        got = to_graph(net)(x)
    got.sum().backward()
    assert calls == ["pre" if pre else "post"]


def test_backward_hooks_of_a_module_argument_fall_back():
    torch.manual_seed(0)
    net, calls = Net(), []
    net.b.register_full_backward_hook(lambda m, gin, gout: calls.append(1))

    def step(model, x):
        return model.b(x * 2).sum()
    x = _inputs()[1].requires_grad_()
    with pytest.raises(ConversionError, match="backward hooks"):
        to_graph(step, strict=True)(net, x)
    with pytest.warns(FallbackWarning):
        to_graph(step)(net, x).backward()
    assert calls == [1]


# --------------------------------------------------------------------------------------
# A meta tensor made outside the trace (no data) used with traced tensors: the graph held
# it as a constant with no data and crashed when it ran ("Tensor on device meta is not on
# the expected device cpu"); now the call falls back naming the line, and eager's own error
# follows. (transformers' Mamba/Jamba reached this through ``associative_scan``, whose
# vmap/make_fx made such tensors; that operator now traces as its loop:
# tests/e2e/test_scan_operators.py.)

_NO_DATA = torch.ones(3, device="meta")


def _with_meta(x):
    return (x + _NO_DATA) * 2


@pytest.mark.parametrize("rows", [4, 8])
def test_meta_tensor_made_outside_the_trace_falls_back(rows):
    x = torch.randn(rows, 3)
    with pytest.raises(ConversionError, match="meta tensor"):
        to_graph(_with_meta, strict=True)(x)
    with pytest.raises(RuntimeError, match="meta") as eager:
        _with_meta(x)
    with pytest.warns(FallbackWarning, match=r"test_model_mechanisms\.py:\d+: a meta tensor"):
        with pytest.raises(RuntimeError) as converted:
            to_graph(_with_meta)(x)
    assert str(converted.value) == str(eager.value)


# --------------------------------------------------------------------------------------
# A size computed by torch from Python ints (``torch.div(h.size(1), w, rounding_mode=
# "trunc")``, Longformer/LED's chunking) is a graph value; shape inference's "item() on
# meta tensors" was taken for the user's own error (zero-filled stand-ins fail too) and
# strict mode raised RuntimeError where eager runs: now ConversionError / a fallback.

def _chunks(h, w):
    return h.view(h.size(0), torch.div(h.size(1), w, rounding_mode="trunc"), w, h.size(2))


@pytest.mark.parametrize("shape,w", [((2, 8, 3), 4), ((1, 12, 2), 3)])
def test_size_from_torch_div_never_crashes(shape, w):
    h = torch.randn(*shape)
    try:
        got = to_graph(_chunks, strict=True)(h, w)
    except ConversionError:
        got = None
    if got is not None:
        assert_same(got, _chunks(h, w))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        assert_same(to_graph(_chunks)(h, w), _chunks(h, w))


# --------------------------------------------------------------------------------------
# A method whose function is an ``lru_cache`` wrapper (transformers' ``logger.
# warning_once``): it was taken for a user function to convert, and the trace failed
# with "'functools._lru_cache_wrapper' object has no attribute '__code__'"; now it is
# called as it is and the rest converts.

class _Log:
    def __init__(self):
        self.said = []

    @functools.lru_cache(None)
    def once(self, msg):
        return len(msg)


_LOG = _Log()


def _gated(x, scale):
    _LOG.once("padding to a multiple of the window")
    if x.sum() > 0:
        return x * scale
    return x - scale


@pytest.mark.parametrize("scale", [2.0, torch.tensor(3.0)])
def test_lru_cached_method_call_converts(scale):
    g = to_graph(_gated, strict=True)
    for x in (torch.randn(3, 4) + 2, torch.randn(3, 4) - 2):
        with warnings.catch_warnings():
            warnings.simplefilter("error", FallbackWarning)
            assert_same(g(x, scale), _gated(x, scale))
