"""Autograd edges in converted training code (h70), each checked against eager torch.

* Reductions over size-1 tensors under autograd: a fused group ending in a whole-tensor
  ``mean``/``sum`` of a ``[1, 1]`` value (a regression batch of one) gave its input a 0-d
  gradient that ``sum_to_size`` could not take; sum/mean/amax/var/std/norm over size-1
  dims, keepdim both ways, 0-d results and size-1 broadcast inputs, values and grads.
* ``checkpoint(fn, *args, use_reentrant=True)``: values, grads, ``requires_grad``, the
  grad mode after the call, ``autograd.grad`` through it raising torch's error, no input
  requiring grad, grad mode off at the call, the RNG replay of dropout inside ``fn``.
* Grad mode after a converted call is eager's on every path (a graph switching it, a
  trace that fails after a ``torch.set_grad_enabled(False)`` call, a graph that raises).
* A fallback for backward hooks on a library module's child names the user's line.
* ``p.grad = ...`` / ``p.data = ...`` of real parameters set to graph values, and
  ``autograd.grad(..., allow_unused=True)``: converted, eager's values after every call.

Every case runs eagerly and converted (default and strict) from the same seed and
compares returns (values, dtypes, ``requires_grad``), parameters, their ``.grad``, the grad
mode after the call and Python state.
"""
from __future__ import annotations

import itertools
import re
import time
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transpiler import ConversionError, FallbackWarning, to_graph

pytestmark = pytest.mark.usefixtures("one_thread", "sync_kernel_build")
THIS_FILE = __file__.rsplit("/", 1)[-1]


@pytest.fixture(autouse=True)
def _grad_mode_back():
    yield
    torch.set_grad_enabled(True)


def _converted(fn, strict=False):
    """``to_graph(fn)`` whose calls must not fall back."""
    g = to_graph(fn, strict=strict)

    def run(*args):
        with warnings.catch_warnings():
            warnings.simplefilter("error", FallbackWarning)
            return g(*args)
    return run


def _close(a, b, where=""):
    assert type(a) is type(b), f"{where}: {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape, f"{where}: {a} vs {b}"
        assert a.requires_grad == b.requires_grad, f"{where}: requires_grad differs"
        torch.testing.assert_close(b.detach(), a.detach(), rtol=1e-5, atol=1e-6)
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b), where
        for i, (u, v) in enumerate(zip(a, b)):
            _close(u, v, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} vs {b!r}"


# ----------------------------------------------------------------- size-1 reductions
_REDUCTIONS = {
    "sum": lambda t: t.sum(), "mean": lambda t: t.mean(), "amax": lambda t: t.amax(),
    "amin": lambda t: t.amin(), "max": lambda t: torch.max(t),
    "sum0": lambda t: t.sum(0), "mean0_keep": lambda t: t.mean(0, keepdim=True),
    "mean_last": lambda t: t.mean(-1), "mean_last_keep": lambda t: t.mean(-1, keepdim=True),
    "sum_last_keep": lambda t: t.sum(-1, keepdim=True),
    "amax_last_keep": lambda t: t.amax(-1, keepdim=True),
    "var_last_keep": lambda t: t.var(-1, keepdim=True, unbiased=False),
    "std": lambda t: t.std(unbiased=False), "norm": lambda t: t.norm(),
    "norm_last_keep": lambda t: t.norm(dim=-1, keepdim=True),
}
_SHAPES = [(1,), (1, 1), (1, 3), (2, 1), ()]


def _cases(red):
    for shape in _SHAPES:
        for b_shape in sorted({(1,), (), shape}):
            try:        # (combinations eager refuses: no dim -1 of a 0-d tensor, ...)
                red(torch.ones(shape) - torch.ones(b_shape))
            except (IndexError, RuntimeError):
                continue
            yield shape, b_shape


@pytest.mark.parametrize("name", list(_REDUCTIONS))
def test_size_one_reduction_grads(name):
    """A pointwise chain over ``x`` and a (broadcast) ``b``, reduced: value and both
    gradients equal eager's (the chain fuses with the reduction into one kernel), for
    each size-1 shape of ``x`` and ``b``."""
    red = _REDUCTIONS[name]

    def f(x, b):
        return red((x * 2.0 - b).pow(2) + b.tanh())
    for shape, b_shape in _cases(red):
        gen = torch.Generator().manual_seed(3)
        x0, b0 = torch.randn(shape, generator=gen), torch.randn(b_shape, generator=gen)
        results = []
        for run in (f, _converted(f)):
            for _ in range(2):          # (the second call: the planned fast path)
                x, b = x0.clone().requires_grad_(), b0.clone().requires_grad_()
                y = run(x, b)
                y.sum().backward()
                results.append((y, x.grad, b.grad))
        for got in results[1:]:
            _close(results[0], got, f"{name} {shape} {b_shape}")


def test_batch_of_one_regression_step():
    """d2l's squared loss on the last batch of one sample: loss.backward() in the step."""
    def build():
        torch.manual_seed(0)
        net = nn.Linear(2, 1)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)

        def step(x, y):
            opt.zero_grad()
            loss = (net(x) - y).pow(2).mean()
            loss.backward()
            opt.step()
            return loss.detach()
        return net, step
    batches = [(torch.tensor([[float(i), 1.0]]), torch.tensor([[2.0 * i]])) for i in range(4)]
    net_e, step_e = build()
    eager = [step_e(*b) for b in batches]
    for strict in (False, True):
        net_g, step_g = build()
        run = _converted(step_g, strict=strict)
        _close(eager, [run(*b) for b in batches])
        for pe, pg in zip(net_e.parameters(), net_g.parameters()):
            _close(pe, pg)
            _close(pe.grad, pg.grad)


# ----------------------------------------------------------------- reentrant checkpoint
class _Blocks(nn.Module):
    """Layers under checkpoint(..., use_reentrant=True), dropout inside (its mask replayed
    by the recompute) and an in-place ReLU on the block's own value."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(5, 6)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(6, 6), nn.Dropout(0.3),
                                                  nn.ReLU(inplace=True)) for _ in range(2))
        self.out = nn.Linear(6, 3)

    def forward(self, x):
        h = self.inp(x)
        for block in self.blocks:
            h = torch.utils.checkpoint.checkpoint(block, h, use_reentrant=True)
        return self.out(h)


def _ckpt_run(mode):
    torch.manual_seed(0)
    net = _Blocks()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    model = net if mode == "eager" else to_graph(net, strict=mode == "strict")

    def step(x, y):
        opt.zero_grad()
        out = model(x)
        loss = F.cross_entropy(out, y)
        loss.backward()
        opt.step()
        return loss.detach(), out.requires_grad, torch.is_grad_enabled()
    run = step if mode == "eager" else _converted(step, strict=mode == "strict")
    gen = torch.Generator().manual_seed(5)
    torch.manual_seed(1)
    outs = [run(torch.randn(4, 5, generator=gen), torch.randint(0, 3, (4,), generator=gen))
            for _ in range(3)]
    return outs, [(p.detach().clone(), p.grad.clone()) for p in net.parameters()], \
        torch.get_rng_state()


def test_reentrant_checkpoint_steps_match_eager():
    """A training step through reentrant-checkpointed blocks: losses, the output's flag,
    params and grads, grad mode after each step and the RNG state equal eager's."""
    e_outs, e_params, e_rng = _ckpt_run("eager")
    for mode in ("default", "strict"):
        g_outs, g_params, g_rng = _ckpt_run(mode)
        _close(e_outs, g_outs, mode)
        _close(e_params, g_params, mode)
        assert torch.equal(e_rng, g_rng)


def _ckpt_fn(inp, lin):
    def f(x):
        y = torch.utils.checkpoint.checkpoint(lin, inp(x), use_reentrant=True)
        return y, y.requires_grad, torch.is_grad_enabled()
    return f


def test_reentrant_checkpoint_output_and_grad_mode():
    """The output requires grad, its grad_fn is eager's CheckpointFunctionBackward, grad
    mode stays on, gradients equal eager's; autograd.grad through it raises torch's error
    in both; under no_grad nothing requires grad and grad mode stays off."""
    torch.manual_seed(0)
    inp, lin = nn.Linear(3, 4), nn.Linear(4, 1)
    f = _ckpt_fn(inp, lin)
    x = torch.randn(2, 3)
    for run in (_converted(f), _converted(f, strict=True)):
        e, g = f(x), run(x)
        _close(e, g)
        assert torch.is_grad_enabled()
        assert type(g[0].grad_fn).__name__ == type(e[0].grad_fn).__name__
        e[0].sum().backward()
        e_grads = [p.grad.clone() for p in (*inp.parameters(), *lin.parameters())]
        inp.zero_grad(), lin.zero_grad()
        g[0].sum().backward()
        _close(e_grads, [p.grad.clone() for p in (*inp.parameters(), *lin.parameters())])
        inp.zero_grad(), lin.zero_grad()
        for y in (f(x)[0], run(x)[0]):
            with pytest.raises(RuntimeError, match="use_reentrant=True"):
                torch.autograd.grad(y.sum(), inp.weight)
        with torch.no_grad():
            e, g = f(x), run(x)
            assert not torch.is_grad_enabled()
        _close(e, g)
        assert torch.is_grad_enabled()


def test_reentrant_checkpoint_inputs_without_grad():
    """No argument requires grad (the parameters inside do): eager's forward runs under
    no_grad, the output does not require grad, torch warns; the same converted."""
    torch.manual_seed(0)
    lin = nn.Linear(4, 2)

    def f(x):
        y = torch.utils.checkpoint.checkpoint(lin, x, use_reentrant=True)
        return y, y.requires_grad, torch.is_grad_enabled()
    x = torch.randn(3, 4)
    for run in (_converted(f), _converted(f, strict=True)):
        with pytest.warns(UserWarning, match="None of the inputs have requires_grad"):
            got = run(x)
        _close(f(x), got)
        assert torch.is_grad_enabled()


def _falls_back(fn, *args, match):
    """Default mode: one FallbackWarning naming this file, eager's result; strict raises."""
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        got = to_graph(fn)(*args)
    fbs = [str(w.message) for w in rec if issubclass(w.category, FallbackWarning)]
    assert len(fbs) == 1 and THIS_FILE in fbs[0] and re.search(match, fbs[0]), fbs
    assert torch.is_grad_enabled()
    with pytest.raises(ConversionError, match=match):
        to_graph(fn, strict=True)(*args)
    assert torch.is_grad_enabled()
    return got


def test_reentrant_checkpoint_refusals():
    """What eager's recompute repeats (a print, BatchNorm's running statistics) or an output
    depending on no argument requiring grad: fallback naming the line, eager's results."""
    torch.manual_seed(0)
    lin = nn.Linear(4, 4)
    bn = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    x = torch.randn(3, 4, requires_grad=True)

    def printing(h):
        print("in block")
        return lin(h)

    def f_print(x):
        return torch.utils.checkpoint.checkpoint(printing, x, use_reentrant=True)

    def f_bn(x):
        return torch.utils.checkpoint.checkpoint(bn, x, use_reentrant=True)

    def f_const(x):
        return torch.utils.checkpoint.checkpoint(lambda h: torch.ones(2, 4) * 2, x,
                                                 use_reentrant=True)
    _falls_back(f_print, x, match="effect")
    stats = bn[1].running_mean.clone()
    _falls_back(f_bn, x, match="writes a real tensor|effect")
    assert not torch.equal(stats, bn[1].running_mean)
    got = _falls_back(f_const, x, match="does not depend")
    assert got.requires_grad


def test_reentrant_checkpoint_sequential_falls_back():
    """checkpoint_sequential(use_reentrant=True) calls checkpoint from torch's code: the
    grad-mode switch made in C++ is caught, the call falls back naming the line."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(5, 6), nn.ReLU(), nn.Linear(6, 3))

    def f(x):
        return torch.utils.checkpoint.checkpoint_sequential(net, 2, x, use_reentrant=True)
    x = torch.randn(2, 5, requires_grad=True)
    got = _falls_back(f, x, match="grad mode was switched")
    _close(f(x), got)


# ----------------------------------------------------------------- grad mode after a call
class _NoGradInside(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        with torch.no_grad():
            y = x * 2
        return y + 1

    @staticmethod
    def backward(ctx, g):
        return g * 2


def test_grad_mode_after_calls_is_eagers():
    """A custom Function whose forward uses no_grad (called with and without a grad
    input), a function-style set_grad_enabled(False) left off, a trace that fails after
    switching, a graph raising inside no_grad: grad mode afterwards is eager's."""
    def custom(x):
        return _NoGradInside.apply(x) * 3, torch.is_grad_enabled()

    def left_off(x):
        torch.set_grad_enabled(False)
        return x * 2

    def fails_after_switch(x):
        torch.set_grad_enabled(False)
        y = x * 2
        time.time()             # (a value that changes on every call: refused)
        return y

    def raises_inside(x):
        with torch.no_grad():
            torch._assert(x.sum() > 100, "too small")
        return x
    x, xr = torch.randn(3), torch.randn(3, requires_grad=True)
    for fn, arg in ((custom, x), (custom, xr), (left_off, x), (fails_after_switch, x),
                    (raises_inside, x)):
        for strict in (False, True):
            torch.set_grad_enabled(True)
            try:
                want = fn(arg)
            except Exception as e:      # noqa: BLE001
                want = type(e)
            want_mode = torch.is_grad_enabled()
            torch.set_grad_enabled(True)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    got = to_graph(fn, strict=strict)(arg)
                except ConversionError:
                    assert strict and fn is fails_after_switch
                    assert torch.is_grad_enabled()
                    continue
                except Exception as e:      # noqa: BLE001
                    got = type(e)
            assert torch.is_grad_enabled() == want_mode, (fn.__name__, strict)
            if isinstance(want, type):
                assert got is want
            else:
                _close(want, got, fn.__name__)


# ----------------------------------------------------------------- backward hooks
def test_backward_hook_fallback_names_the_users_line():
    """to_graph(Sequential) with register_full_backward_hook on a child: the fallback names
    the line calling the model (not torch's container.py), the hook runs as eager's."""
    def build():
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))
        seen = []

        def hook(module, grad_input, grad_output):
            seen.append(round(grad_output[0].abs().sum().item(), 4))
            return (grad_input[0] * 0.5,)
        net[2].register_full_backward_hook(hook)
        return net, seen
    x = torch.randn(4, 5)
    net, seen_e = build()
    net(x).sum().backward()
    e_grads = [p.grad for p in net.parameters()]
    net, seen_g = build()
    model = to_graph(net)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        model(x).sum().backward()
    fbs = [str(w.message) for w in rec if issubclass(w.category, FallbackWarning)]
    assert len(fbs) == 1 and re.search(re.escape(THIS_FILE) + r":\d+: submodule '2' has "
                                       r"backward hooks", fbs[0]), fbs
    assert seen_e == seen_g
    _close(e_grads, [p.grad for p in net.parameters()])
    with pytest.raises(ConversionError, match=re.escape(THIS_FILE)):
        to_graph(build()[0], strict=True)(x)


# ----------------------------------------------------------------- .grad / .data of real leaves
def _steps_match(build, batches, traces=1):
    """``build()`` -> (step, objs, state): eager vs converted (default, strict): what each
    call returns, then ``state()`` (parameters, grads, Python values) after every call."""
    step, _, state = build()
    eager = []
    for b in batches:
        eager.append((step(*b), state()))
    for strict in (False, True):
        step, _, state = build()
        run = _converted(step, strict=strict)
        for i, b in enumerate(batches):
            _close(eager[i], (run(*b), state()), f"call {i} strict={strict}")
        assert torch.is_grad_enabled()


def _leaves(*mods):
    return lambda: [(p.detach().clone(), p.requires_grad,
                     None if p.grad is None else p.grad.clone())
                    for m in mods for p in m.parameters()]


def _batches(n=4, seed=5):
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(6, 5, generator=gen), torch.randint(0, 3, (6,), generator=gen))
            for _ in range(n)]


def test_grad_set_from_autograd_grad_then_step():
    """p.grad = g.clamp(...) after autograd.grad, then Adam's step (reads it) and a read of
    p.grad in the step (sees it); zero_grad(set_to_none) after."""
    def build():
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))
        opt = torch.optim.Adam(net.parameters(), lr=1e-2)

        def step(x, y):
            loss = F.cross_entropy(net(x), y)
            grads = torch.autograd.grad(loss, list(net.parameters()))
            for p, g in zip(net.parameters(), grads):
                p.grad = g.clamp(-0.05, 0.05)
            seen = net[0].weight.grad.abs().max()
            opt.step()
            opt.zero_grad()
            return loss.detach(), seen, net[0].weight.grad is None
        return step, [net, opt], _leaves(net)
    _steps_match(build, _batches())


def test_grad_set_then_backward_accumulates():
    """p.grad set to a graph value, then loss.backward() adds to it, as eager's."""
    def build():
        torch.manual_seed(0)
        lin = nn.Linear(5, 3)

        def step(x, y):
            lin.weight.grad = torch.full_like(lin.weight, 0.5) * x.mean()
            F.cross_entropy(lin(x), y).backward()
            g = lin.weight.grad.clone()
            with torch.no_grad():
                lin.weight.sub_(0.1 * lin.weight.grad)
            lin.weight.grad = None
            lin.bias.grad = None
            return g
        return step, [lin], _leaves(lin)
    _steps_match(build, _batches())


def test_data_set_momentum_update():
    """MoCo's key encoder: param_k.data = param_k.data * m + param_q.data * (1 - m) on real
    parameters, read by the key encoder's forward in the same call; the query encoder
    trained by SGD between calls."""
    def build():
        torch.manual_seed(0)
        enc_q, enc_k = nn.Linear(5, 4), nn.Linear(5, 4)
        enc_k.load_state_dict(enc_q.state_dict())
        for p in enc_k.parameters():
            p.requires_grad = False
        opt = torch.optim.SGD(enc_q.parameters(), lr=0.5)

        def step(x, y):
            with torch.no_grad():
                for pq, pk in zip(enc_q.parameters(), enc_k.parameters()):
                    pk.data = pk.data * 0.9 + pq.data * 0.1
                k = enc_k(x)
            loss = (enc_q(x) - k).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss.detach(), k
        return step, [enc_q, enc_k], _leaves(enc_q, enc_k)
    _steps_match(build, _batches())


def test_data_read_sees_rebinding_outside_the_graph():
    """A converted function reading w.data, the caller rebinding w.data between calls: each
    call reads the storage w has then (the graph does not keep the trace's alias)."""
    torch.manual_seed(0)
    w = nn.Parameter(torch.randn(3))

    def f(x):
        return w.data * x + w

    g = _converted(f, strict=True)
    x = torch.randn(3)
    for i in range(3):
        _close(f(x), g(x), f"call {i}")
        w.data = torch.randn(3)


def test_vector_to_parameters_in_a_tensor_branch():
    """vector_to_parameters (it sets param.data of each parameter) in one branch of a
    tensor `if`: the forward, backward and SGD step after it, and parameters_to_vector at
    the end, see the values the run's branch left."""
    from torch.nn.utils import parameters_to_vector, vector_to_parameters

    def build():
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, 3))
        opt = torch.optim.SGD(net.parameters(), lr=0.1)

        def step(x, y):
            flat = parameters_to_vector(net.parameters()).detach()
            with torch.no_grad():
                if x.sum() > 0:
                    vector_to_parameters(flat * 0.5, net.parameters())
            loss = F.cross_entropy(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss.detach(), parameters_to_vector(net.parameters()).detach()
        return step, [net], _leaves(net)
    batches = _batches(6)
    assert len({bool(b[0].sum() > 0) for b in batches}) == 2     # (both branches run)
    _steps_match(build, batches)


def test_autograd_grad_allow_unused():
    """allow_unused=True: the unused head's gradients are None (the step branches on it in
    Python), the used ones eager's; an input reached on one path of a tensor `if` only
    falls back naming the line."""
    def build():
        torch.manual_seed(0)
        trunk, head_a, head_b = nn.Linear(5, 6), nn.Linear(6, 3), nn.Linear(6, 1)
        params = [*trunk.parameters(), *head_a.parameters(), *head_b.parameters()]

        def step(x, y):
            loss = F.cross_entropy(head_a(torch.relu(trunk(x))), y)
            grads = torch.autograd.grad(loss, params, allow_unused=True)
            nones = [g is None for g in grads]
            with torch.no_grad():
                for p, g in zip(params, grads):
                    if g is not None:
                        p.add_(g, alpha=-0.1)
            return loss.detach(), nones
        return step, [trunk, head_a, head_b], _leaves(trunk, head_a, head_b)
    _steps_match(build, _batches())

    torch.manual_seed(0)
    a, b = nn.Linear(5, 1), nn.Linear(5, 1)

    def one_path(x):
        y = a(x).sum() if x.sum() > 0 else b(x).sum()
        return torch.autograd.grad(y, [a.weight, b.weight], allow_unused=True)
    got = _falls_back(one_path, torch.ones(2, 5), match="only the run can tell")
    assert got[1] is None and got[0] is not None


def test_data_set_to_another_shape_falls_back():
    """p.data = v of another shape (what a lazy module's materialize does): the ops after
    it were traced for p as it was, so the call falls back naming the line."""
    def build():
        torch.manual_seed(0)
        return nn.Linear(3, 2)

    def make(lin):
        def f(x):
            lin.weight.data = torch.zeros(2, lin.weight.shape[1] + 1) + x.sum()
            return lin.weight * 2
        return f
    x = torch.randn(3)
    want = make(build())(x)
    got = _falls_back(make(build()), x, match="setting its .data to a value of another shape")
    _close(want, got)
