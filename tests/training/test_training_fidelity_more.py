"""Training-step fidelity (issue 15): what real training code does beyond forward/backward/
step, eager against converted (default and strict mode).

- CPU autocast regions (``runtime.autocast_ops``): inference and training, the spellings
  projects use, autocast around a converted call; results bit for bit eager's (dtypes
  included), gradients too.
- ``torch.amp.GradScaler`` (``runtime.scaler_effects``): scale/step/update over several
  steps with a growth and an inf-skipped step, ``unscale_`` + clip, ``get_scale()``; the
  scaler's state after each run equal to eager's.
- ``torch.autograd.grad(..., create_graph=True)``: a gradient penalty through fused
  kernels (tanh, gelu, layer_norm, softmax), a MAML inner step, a Hessian-vector product.
- ``ReduceLROnPlateau.step(metric)`` with the metric as a logged float, a tensor, a keyword.
- ``loss.backward(create_graph=True)`` and a penalty on the ``p.grad`` it leaves.
- ``inference_mode`` inside the step converts (``runtime.inference_ops``).
- What still falls back names the line that does it (other scaler methods); strict mode
  raises ConversionError.
"""
from __future__ import annotations

import re
import warnings

import pytest
import torch
import torch.nn.functional as F

from tests.e2e.e2e_helpers import assert_same
from tests.training.test_training_programs import MLP, TinyGPT, _batches, _norm, _state
from transpiler import ConversionError, FallbackWarning, to_graph

pytestmark = pytest.mark.usefixtures("one_thread")
THIS_FILE = __file__.rsplit("/", 1)[-1]
BF16 = torch.bfloat16


def _exact(got, exp, path="out"):
    """Equal structure, dtypes and requires_grad; low-precision values bit for bit (what
    autocast computes runs as eager's ops), float32 ones within 1e-5 (fused kernels
    outside a region may round otherwise)."""
    assert_same(got, exp, path)
    if isinstance(exp, torch.Tensor):
        assert got.requires_grad == exp.requires_grad, f"{path}: requires_grad"
        if exp.dtype in (torch.bfloat16, torch.float16):
            assert torch.equal(torch.nan_to_num(got.detach()),
                               torch.nan_to_num(exp.detach())), f"{path}: {got} != {exp}"
    elif isinstance(exp, (list, tuple)):
        for i, (a, b) in enumerate(zip(got, exp)):
            _exact(a, b, f"{path}[{i}]")
    elif isinstance(exp, dict):
        for k in exp:
            _exact(got[k], exp[k], f"{path}[{k!r}]")


def _scaler_state(s):
    return None if s is None else dict(s.state_dict())


def _run(make, mode, steps=5):
    """``make()`` -> (step, objects to compare, batches[, scaler]); runs ``steps`` steps
    eagerly or converted (``mode``: 'eager', 'default', 'strict'); returns the outputs,
    the state after each step, and the fallback warnings."""
    torch.manual_seed(0)
    made = make()
    step, objs, batches = made[:3]
    scaler = made[3] if len(made) > 3 else None
    if mode != "eager":
        step = to_graph(step, strict=mode == "strict")
    outs, states = [], []
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        torch.manual_seed(1)
        for b in batches[:steps]:
            outs.append(step(*b))
            states.append((_norm(_state(objs)), _scaler_state(scaler)))
    return outs, states, [w for w in rec if issubclass(w.category, FallbackWarning)]


def _converts_like_eager(make, steps=5, exact=True):
    exp_outs, exp_states, _ = _run(make, "eager", steps)
    for mode in ("default", "strict"):
        outs, states, fallbacks = _run(make, mode, steps)
        assert not fallbacks, [str(w.message) for w in fallbacks]
        for i, (got, exp) in enumerate(zip(outs, exp_outs)):
            (_exact if exact else assert_same)(got, exp, f"{mode}.step{i}")
        for i, (got, exp) in enumerate(zip(states, exp_states)):
            assert_same(got, exp, f"{mode}.state{i}")


# ------------------------------------------------------------------ autocast: inference
def _gpt_logits(spell):
    def make():
        model = TinyGPT().eval()
        g = torch.Generator().manual_seed(5)
        batches = [(torch.randint(0, 11, (2, 6), generator=g),) for _ in range(3)]

        def step(idx):
            with spell():
                logits, _ = model(idx)
                probs = logits.softmax(-1)
            return logits, probs, probs.float().max(-1).values
        return step, [model], batches
    return make


SPELLINGS = {
    "autocast_cpu_bf16": lambda: torch.autocast("cpu", dtype=BF16),
    "amp_autocast_default": lambda: torch.amp.autocast("cpu"),
    "keyword_device_type": lambda: torch.autocast(device_type="cpu", dtype=BF16),
    "cache_disabled": lambda: torch.autocast("cpu", dtype=BF16, cache_enabled=False),
    "float16": lambda: torch.autocast("cpu", dtype=torch.float16),
}


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
def test_autocast_inference_spellings(spelling):
    _converts_like_eager(_gpt_logits(SPELLINGS[spelling]), steps=3)


@torch.autocast("cpu", dtype=BF16)
def _head(x, w):
    return x @ w


def _mixed_regions():
    model = MLP()
    w = torch.randn(4, 3)

    def step(x, y):
        with torch.autocast("cpu", dtype=BF16):
            h = model(x)
            with torch.autocast("cpu", enabled=False):
                exact = h.float() @ w           # float32 inside the bf16 region
            lsm = F.log_softmax(h, -1)          # (not in CPU autocast's lists: bf16)
            loss = F.cross_entropy(h, y)        # (float32 by autocast's rule)
        if loss > 1.0:                          # a tensor branch after the region
            h = h * 2
        return h, exact, lsm, loss, _head(x[:, :4], w), torch.cat([h, exact.to(BF16)], 1)
    return step, [model], _batches(3, (6, 8), 4)


def test_autocast_nested_disabled_decorator_and_branch():
    _converts_like_eager(_mixed_regions, steps=3)


def test_autocast_around_a_converted_call():
    """The caller's autocast dtype is part of the signature: one graph per dtype, each
    eager's."""
    torch.manual_seed(0)
    model = TinyGPT().eval()
    idx = torch.randint(0, 11, (2, 6))

    def f(idx):
        logits, _ = model(idx)
        return logits, logits.float().log_softmax(-1)
    g = to_graph(f, strict=True)
    for dtype in (None, BF16, torch.float16, BF16, None):
        ctx = torch.autocast("cpu", dtype=dtype) if dtype else torch.autocast("cpu",
                                                                            enabled=False)
        with ctx:
            _exact(g(idx), f(idx), str(dtype))
    assert g.cache_info().traces == 3
    assert not torch.is_autocast_enabled("cpu")


def test_autocast_ops_are_not_fused_or_rewritten():
    """Ops recorded under autocast stay their own nodes (autocast_<op>) after the
    optimizer; those after the region are optimized as before."""
    def f(x, w):
        with torch.autocast("cpu", dtype=BF16):
            y = F.gelu(x @ w) * 2 + 1
        return (y.float() * 3).relu() + 1
    x, w = torch.randn(8, 16), torch.randn(16, 16)
    g = to_graph(f, strict=True)
    _exact(g(x, w), f(x, w))
    ops = [n.op for n in g.graph(x, w).optimize().nodes]
    assert {"autocast_matmul", "autocast_gelu", "autocast_mul", "autocast_add"} <= set(ops)


def test_autocast_graph_is_not_saved_or_exported_silently(tmp_path):
    """Saving or exporting a graph holding autocast ops says so (their casts live in
    torch's dispatcher), rather than writing a program that computes in float32."""
    from runtime.errors import GraphError
    from runtime.export import to_torch_export
    from runtime.export.errors import ExportError

    def f(x, w):
        with torch.autocast("cpu", dtype=BF16):
            return x @ w
    x, w = torch.randn(3, 4), torch.randn(4, 2)
    g = to_graph(f, strict=True)
    with pytest.raises(ExportError, match="torch.autocast"):
        to_torch_export(g, (x, w))
    with pytest.raises(GraphError, match="autocast"):
        g.graph(x, w).save(str(tmp_path / "g"))


# ------------------------------------------------------------------ autocast's cast cache
_shared = torch.nn.Linear(6, 6)


def _siamese_one_region(x1, x2):
    with torch.autocast("cpu", dtype=BF16):
        z = _shared(x1) * _shared(x2)                   # CACHE LINE
    z.float().sum().backward()
    return z, _shared.weight.grad


def _two_regions(x1, x2):
    with torch.autocast("cpu", dtype=BF16):
        z = _shared(x1)
    z = z.float() + 1
    with torch.autocast("cpu", dtype=BF16):
        z = z * _shared(x2)
    z.float().sum().backward()
    return z, _shared.weight.grad


def _cast_in_loop(x1, x2):
    with torch.autocast("cpu", dtype=BF16):
        z, n = x1, torch.zeros(())
        while (z.float().abs().sum() < 1e4) & (n < 4):
            z = _shared(z) * 3                          # CACHE LINE
            n = n + 1
    z.float().sum().backward()
    return z, _shared.weight.grad


def _cache_case(fn, mode, caller_autocast=False):
    import contextlib
    results = []
    g = fn if mode == "eager" else to_graph(fn, strict=mode == "strict")
    for seed in (0, 1):
        torch.manual_seed(seed)
        x1, x2 = torch.randn(4, 6), torch.randn(4, 6)
        _shared.weight.grad = _shared.bias.grad = None
        with torch.autocast("cpu", dtype=BF16) if caller_autocast else \
                contextlib.nullcontext():
            out = g(x1, x2)
        results.append([v.clone() for v in out])
    return results


@pytest.mark.parametrize("fn", [_cast_in_loop])
def test_a_weight_cast_twice_in_one_region_falls_back_naming_its_line(fn):
    """Eager reuses autocast's cached cast (its gradients sum in bf16): a weight cast
    first in a loop body would be cast per iteration by a graph (other bits), so the step
    falls back (strict: ConversionError). Cast by two ops of one region, it converts (one
    shared cast node: below and ``tests/runtime/test_autocast_ops.py``)."""
    import inspect
    lines, first = inspect.getsourcelines(fn)
    line = first + next(i for i, text in enumerate(lines) if "CACHE LINE" in text)
    exp = _cache_case(fn, "eager")
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        got = _cache_case(fn, "default")
    messages = [str(w.message) for w in rec if issubclass(w.category, FallbackWarning)]
    assert len(messages) == 1 and f"{THIS_FILE}:{line}:" in messages[0], messages
    _exact(got, exp)
    with pytest.raises(ConversionError, match="cached cast"):
        _cache_case(fn, "strict")


def test_a_weight_cast_in_two_regions_or_under_the_callers_autocast_converts():
    _exact(_cache_case(_two_regions, "strict"), _cache_case(_two_regions, "eager"))
    _exact(_cache_case(_siamese_one_region, "strict"),
           _cache_case(_siamese_one_region, "eager"))      # (one cast shared by two ops)

    def siamese(x1, x2):            # the caller's region: torch's cache spans the graph's ops
        z = _shared(x1) * _shared(x2)
        z.float().sum().backward()
        return z, _shared.weight.grad
    _exact(_cache_case(siamese, "strict", caller_autocast=True),
           _cache_case(siamese, "eager", caller_autocast=True))


_square = torch.nn.Parameter(torch.randn(6, 6))


def _one_op_twice(x, cache):
    with torch.autocast("cpu", dtype=BF16, cache_enabled=cache):
        z = torch.mm(_square, _square) + x              # one op: one cast in eager too
    z.float().sum().backward()
    return z, _square.grad


def _uncached_twice(x, cache):
    with torch.autocast("cpu", dtype=BF16, cache_enabled=False):
        z = torch.mm(_square, _square) + torch.addmm(x, _square, _square)
    z.float().sum().backward()
    return z, _square.grad


@pytest.mark.parametrize("fn,cache", [(_one_op_twice, True), (_one_op_twice, False),
                                      (_uncached_twice, False)])
def test_autocast_cache_flag_and_one_op_using_a_leaf_twice(fn, cache):
    """An op casting one leaf twice shares the cast (cache on) or not (off), as eager; with
    the cache off, ops cast anew in eager too: both convert, gradients bit for bit."""
    g = to_graph(fn, strict=True)
    for seed in (0, 1):
        torch.manual_seed(seed)
        x = torch.randn(6, 6)
        _square.grad = None
        exp = [v.clone() for v in fn(x, cache)]
        _square.grad = None
        got = [v.clone() for v in g(x, cache)]
        _exact(got, exp)
        assert torch.equal(got[1], exp[1])


# ------------------------------------------------------------------ autocast: training
def _amp_step(init_scale=2.0 ** 8, growth_interval=2, clip=False, log_scale=False,
              inf_batch=None, scaler_enabled=True):
    def make():
        model = MLP(n_hidden=12)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        scaler = torch.amp.GradScaler("cpu", init_scale=init_scale,
                                      growth_interval=growth_interval,
                                      enabled=scaler_enabled)
        batches = _batches(5, (6, 8), 4)
        if inf_batch is not None:
            batches[inf_batch][0][0, 0] = float("inf")

        def step(x, y):
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=BF16):
                out = model(x)
                loss = F.cross_entropy(out, y)
            scaler.scale(loss).backward()
            if clip:
                scaler.unscale_(opt)
                norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(opt)
            scaler.update()
            logs = {"loss": loss.detach(), "out": out.detach()}
            if clip:
                logs["norm"] = norm
            if log_scale:
                logs["scale"] = scaler.get_scale()
            return logs
        return step, [model, opt], batches, scaler
    return make


@pytest.mark.parametrize("case", ["grow", "inf_skip", "unscale_clip", "log_scale",
                                  "disabled"])
def test_autocast_grad_scaler_steps(case):
    make = {"grow": _amp_step(),
            "inf_skip": _amp_step(inf_batch=2),
            "unscale_clip": _amp_step(clip=True, growth_interval=1),
            "log_scale": _amp_step(log_scale=True, growth_interval=1),
            "disabled": _amp_step(scaler_enabled=False)}[case]
    _converts_like_eager(make)


def test_autocast_gradients_equal_eager():
    """A backward through a bf16 region: the gradients (float32 leaves) bit for bit."""
    def make():
        model = TinyGPT()
        g = torch.Generator().manual_seed(2)
        batches = []
        for _ in range(3):
            d = torch.randint(0, 11, (2, 7), generator=g)
            batches.append((d[:, :-1], d[:, 1:].clone()))

        def step(x, y):
            model.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=BF16):
                _, loss = model(x, y)
            loss.backward()
            return loss.detach(), [p.grad for p in model.parameters()]
        return step, [model], batches
    _converts_like_eager(make, steps=3)


# ------------------------------------------------------------------ create_graph=True
class _Critic(torch.nn.Module):
    """Fused-kernel material on the double-backward path: tanh, gelu, layer_norm,
    softmax, sigmoid."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 16)
        self.ln = torch.nn.LayerNorm(16)
        self.b = torch.nn.Linear(16, 1)

    def forward(self, x):
        h = torch.tanh(self.a(x)) * torch.sigmoid(x.sum(1, keepdim=True))
        h = F.gelu(self.ln(h)) + h.softmax(-1)
        return self.b(h)


def _gradient_penalty(opt_cls):
    def make():
        netD = _Critic()
        opt = opt_cls(netD.parameters(), lr=1e-3)

        def step(real, _):
            fake = real.flip(0) * 0.5
            alpha = torch.rand(real.size(0), 1)
            interp = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
            out = netD(interp)
            grads, = torch.autograd.grad(out, interp, torch.ones_like(out),
                                         create_graph=True)
            gp = ((grads.norm(2, dim=1) - 1) ** 2).mean()
            opt.zero_grad()
            loss = netD(fake).mean() - netD(real).mean() + 10 * gp
            loss.backward()
            opt.step()
            return loss.detach(), gp.detach(), grads.requires_grad
        return step, [netD, opt], _batches(5, (4, 8), 2)
    return make


@pytest.mark.parametrize("opt_cls", [torch.optim.Adam, torch.optim.SGD])
def test_gradient_penalty_create_graph(opt_cls):
    _converts_like_eager(_gradient_penalty(opt_cls), exact=False)


def test_maml_inner_step():
    """MAML: an inner SGD step on fast weights kept differentiable, the meta-loss
    backpropagated through it to the slow weights."""
    def make():
        model = MLP(n_in=8, n_hidden=12)
        meta_opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        names = [n for n, _ in model.named_parameters()]

        def step(x, y):
            xs, xq, ys, yq = x[:3], x[3:], y[:3], y[3:]
            params = dict(model.named_parameters())
            inner = F.cross_entropy(torch.func.functional_call(model, params, (xs,)), ys)
            grads = torch.autograd.grad(inner, list(params.values()), create_graph=True)
            fast = {n: p - 0.4 * g for n, p, g in zip(names, params.values(), grads)}
            outer = F.cross_entropy(torch.func.functional_call(model, fast, (xq,)), yq)
            meta_opt.zero_grad()
            outer.backward()
            meta_opt.step()
            return inner.detach(), outer.detach()
        return step, [model, meta_opt], _batches(5, (6, 8), 4)
    _converts_like_eager(make, exact=False)


def test_hessian_vector_product():
    def hvp(x, v, w):
        y = (torch.tanh(x @ w) ** 2).sum()
        g, = torch.autograd.grad(y, w, create_graph=True)
        hv, = torch.autograd.grad((g * v).sum(), w)
        return g.detach(), hv, g.requires_grad

    for strict in (False, True):
        f = to_graph(hvp, strict=strict)
        for seed in (0, 1):
            torch.manual_seed(seed)
            x, v = torch.randn(5, 4), torch.randn(4, 3)
            w = torch.randn(4, 3, requires_grad=True)
            with warnings.catch_warnings():
                warnings.simplefilter("error", FallbackWarning)
                assert_same(f(x, v, w), hvp(x, v, w))


def test_create_graph_gradient_that_needs_no_history():
    """``(3 * x)'`` carries no history with create_graph (eager's requires_grad False):
    the graph reads the flag of the run, not a guess."""
    def f(x):
        y = (3 * x).sum()
        g, = torch.autograd.grad(y, x, create_graph=True)
        return g, g.requires_grad
    x = torch.randn(3, requires_grad=True)
    got, exp = to_graph(f, strict=True)(x), f(x)
    _exact(got, exp)


def test_backward_create_graph_gradient_norm_penalty():
    """``loss.backward(create_graph=True)`` then a penalty on the ``p.grad`` it left (with
    history), backpropagated: ``.grad`` reads keep their history, their requires_grad is
    the run's."""
    def make():
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(),
                                    torch.nn.Linear(16, 4))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)

        def step(x, y):
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x), y)
            loss.backward(create_graph=True)
            penalty = sum((p.grad ** 2).sum() for p in model.parameters())
            has_history = model[0].weight.grad.requires_grad
            opt.zero_grad(set_to_none=True)
            (loss + 0.1 * penalty).backward()
            opt.step()
            return loss.detach(), penalty.detach(), has_history
        return step, [model, opt], _batches(4, (6, 8), 4)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*create_graph=True.*reference cycle")
        _converts_like_eager(make, steps=4, exact=False)


# ------------------------------------------------------------------ ReduceLROnPlateau
def _plateau(metric):
    def make():
        model = MLP()
        opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.5)
        sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0, factor=0.5,
                                                           threshold=0.5)

        def step(x, y):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            if metric == "item":
                sched.step(loss.item())
            elif metric == "tensor":
                sched.step(loss.detach())
            else:
                sched.step(metrics=loss.item() * 2)
            return loss.item(), sched.get_last_lr()
        return step, [model, opt, sched], _batches(6, (6, 8), 4)
    return make


@pytest.mark.parametrize("metric", ["item", "tensor", "keyword"])
def test_reduce_lr_on_plateau_step_metric(metric):
    _converts_like_eager(_plateau(metric), steps=6)


# ------------------------------------------------------------------ what still falls back
def _inference_mode_step(model, opt, scaler):
    def step(x, y):
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        with torch.inference_mode():        # (converts: runtime.inference_ops)
            acc = (model(x).argmax(1) == y).float().mean()
        return acc.clone(), acc
    return step


def test_inference_mode_in_a_step_converts():
    """The accuracy under ``inference_mode`` after the update: an inference tensor as
    eager's (``is_inference()`` of each returned value compared too)."""
    def make():
        model = MLP()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        return _inference_mode_step(model, opt, None), [model, opt], _batches(3, (6, 8), 4)
    _converts_like_eager(make, steps=3)
    kinds = {}
    for mode in ("eager", "strict"):
        outs, _, _ = _run(make, mode, 3)
        kinds[mode] = [tuple(t.is_inference() for t in out) for out in outs]
    assert kinds["strict"] == kinds["eager"] == [(False, True)] * 3


def _scaler_state_dict(model, opt, scaler):
    def step(x, y):
        scaler.scale(F.cross_entropy(model(x), y)).backward()
        scaler.step(opt)
        scaler.update()
        return scaler.state_dict()["scale"]                           # FALLBACK LINE
    return step


# (reads of opt.param_groups and sched.last_epoch convert now:
# tests/training/test_step_python_state.py)
@pytest.mark.parametrize("make_step", [_scaler_state_dict])
def test_what_falls_back_names_its_line(make_step):
    import inspect
    lines, first = inspect.getsourcelines(make_step)
    line = first + next(i for i, text in enumerate(lines) if "FALLBACK LINE" in text)
    results = []
    for mode in ("eager", "default", "strict"):
        torch.manual_seed(0)
        model = MLP()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cpu", init_scale=4.0)
        step = make_step(model, opt, scaler)
        if mode == "strict":
            with pytest.raises(ConversionError) as info:
                to_graph(step, strict=True)(*_batches(1, (6, 8), 4)[0])
            assert f"{THIS_FILE}:{line}" in str(info.value), str(info.value)
            continue
        if mode == "default":
            step = to_graph(step)
        outs = []
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            for b in _batches(3, (6, 8), 4):
                outs.append(step(*b))
        fallbacks = [str(w.message) for w in rec if issubclass(w.category, FallbackWarning)]
        if mode == "default":
            assert len(fallbacks) == 1 and re.search(rf"{THIS_FILE}:{line}:", fallbacks[0]), \
                fallbacks
        results.append((outs, _norm(_state([model, opt])), _scaler_state(scaler)))
    assert_same(results[1], results[0])
