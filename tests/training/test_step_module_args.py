"""Issue 15.2: a whole training step whose model is an argument, a closure variable or
held by a config object (GPT-2 tiny, a Hugging Face model: modules nested well past the
guard depth of plain Python values) converts with one trace and trains as eager does.

Such a model is guarded as ``to_graph(module)`` guards its own (``runtime.module_state``:
identity, training flag, submodules, parameters, buffers, attributes, the config objects
they hold), not walked to a depth: a config attribute or a submodule attribute changed
between calls makes the next call trace again, never reuse a stale graph.
"""
from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import TYPE_CHECKING
import warnings

import pytest
import torch
import torch.nn.functional as F

from benchmarks import model_zoo
from benchmarks.training_tasks import _no_dropout
from transpiler import ConversionError, FallbackWarning, to_graph

if TYPE_CHECKING:                   # a name annotations use, not bound when running
    from collections import OrderedDict as OnlyForTypes

STEPS = 5


def _lm_loss(out, ids):
    logits = out.logits[:, :-1]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))


def step(model, opt, ids):
    opt.zero_grad(set_to_none=True)
    loss = _lm_loss(model(ids), ids)
    loss.backward()
    opt.step()
    return loss.detach()


class Trainer:                      # a plain object holding the model and its optimizer
    def __init__(self, model, opt):
        self.model, self.opt = model, opt


def holder_step(trainer, ids):
    trainer.opt.zero_grad(set_to_none=True)
    loss = _lm_loss(trainer.model(ids), ids)
    loss.backward()
    trainer.opt.step()
    return loss.detach()


@pytest.fixture(scope="module")
def gpt2():
    return _no_dropout(model_zoo.gpt2()[0].train())


def _batch(seed):
    (ids,), _ = model_zoo._tokens(2, seed, mask=False)
    return ids


def _pair(gpt2):
    """(eager model, its optimizer, converted model, its optimizer): equal copies."""
    models = [copy.deepcopy(gpt2) for _ in range(2)]
    return [x for m in models for x in (m, torch.optim.SGD(m.parameters(), lr=0.1))]


def _spelling(kind, model, opt, strict):
    """A converted step for ``kind`` and a function calling it as ``(ids)``."""
    if kind == "argument":
        fn = to_graph(step, strict=strict)
        return fn, lambda ids: fn(model, opt, ids)
    if kind == "closure":
        def closure_step(ids):
            opt.zero_grad(set_to_none=True)
            loss = _lm_loss(model(ids), ids)
            loss.backward()
            opt.step()
            return loss.detach()
        fn = to_graph(closure_step, strict=strict)
        return fn, fn
    trainer = Trainer(model, opt)
    fn = to_graph(holder_step, strict=strict)
    return fn, lambda ids: fn(trainer, ids)


def _assert_models_equal(a, b):
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(p, q, atol=1e-5, rtol=1e-5, msg=name)


@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict"])
@pytest.mark.parametrize("kind", ["argument", "closure", "holder"])
def test_gpt2_step_converts_once_and_trains_as_eager(gpt2, kind, strict):
    ref, ref_opt, model, opt = _pair(gpt2)
    fn, call = _spelling(kind, model, opt, strict)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        for s in range(STEPS):
            ids = _batch(s)
            want = step(ref, ref_opt, ids)
            got = call(ids)
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    info = fn.cache_info()
    assert (info.traces, info.fallbacks, info.hits) == (1, 0, STEPS - 1)
    _assert_models_equal(ref, model)


@pytest.mark.parametrize("kind,strict", [("argument", True), ("closure", False),
                                         ("holder", True)])
def test_attribute_changed_between_calls_retraces(gpt2, kind, strict):
    """A submodule attribute the forward reads (``attn.scale_attn_weights``: the loss
    changes) and config attributes (``config.use_cache``, the attention implementation),
    each changed between calls: the next call traces again and matches eager."""
    ref, ref_opt, model, opt = _pair(gpt2)
    fn, call = _spelling(kind, model, opt, strict)

    def both(s):
        ids = _batch(s)
        torch.testing.assert_close(call(ids), step(ref, ref_opt, ids), atol=1e-5, rtol=1e-5)

    both(0)
    for m in (ref, model):
        m.transformer.h[0].attn.scale_attn_weights = False
    both(1)
    assert fn.cache_info().traces == 2
    for m in (ref, model):
        m.config.use_cache = True
    both(2)
    assert fn.cache_info().traces == 3
    for m in (ref, model):
        m.config._attn_implementation = "eager"
    both(3)
    assert fn.cache_info().traces == 4
    both(4)
    assert fn.cache_info().traces == 4
    _assert_models_equal(ref, model)


def test_another_model_is_another_trace(gpt2):
    """The guard is the module's identity: an equal-shaped other model traces anew (the
    graph holds the first one's parameters)."""
    ref_a, ref_opt_a, a, opt_a = _pair(gpt2)
    ref_b, ref_opt_b, b, opt_b = _pair(gpt2)
    with torch.no_grad():
        for p, q in zip(b.parameters(), ref_b.parameters()):
            p.mul_(0.5), q.mul_(0.5)
    fn = to_graph(step, strict=True)
    for s in range(2):
        ids = _batch(s)
        torch.testing.assert_close(fn(a, opt_a, ids), step(ref_a, ref_opt_a, ids))
        torch.testing.assert_close(fn(b, opt_b, ids), step(ref_b, ref_opt_b, ids))
    assert fn.cache_info().traces == 2
    _assert_models_equal(ref_a, a)
    _assert_models_equal(ref_b, b)


def test_module_in_a_config_object_guarded_by_identity(gpt2):
    """A holder whose ``model`` attribute is rebound to another module: traces again."""
    ref, ref_opt, model, opt = _pair(gpt2)
    other = copy.deepcopy(model)
    other_ref = copy.deepcopy(model)
    trainer = Trainer(model, opt)
    fn = to_graph(holder_step, strict=True)
    ids = _batch(0)
    torch.testing.assert_close(fn(trainer, ids), step(ref, ref_opt, ids))
    trainer.model, trainer.opt = other, torch.optim.SGD(other.parameters(), lr=0.1)
    want = step(other_ref, torch.optim.SGD(other_ref.parameters(), lr=0.1), _batch(1))
    torch.testing.assert_close(fn(trainer, _batch(1)), want)
    assert fn.cache_info().traces == 2


class _Deep(torch.nn.Module):
    """A module whose config object nests past the guard depth (``cfg.a.b.c.d.e``)."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.cfg = SimpleNamespace(a=SimpleNamespace(b=SimpleNamespace(c=SimpleNamespace(
            d=SimpleNamespace(e=SimpleNamespace(scale=2.0))))))

    def forward(self, x):
        return self.lin(x) * self.cfg.a.b.c.d.e.scale


class _Outer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = _Deep()

    def forward(self, x):
        return self.inner(x)


def _forward(model, x):
    return model(x)


@pytest.mark.parametrize("where", ["argument", "submodule", "wrapper"])
def test_config_past_the_guard_depth_is_refused(where):
    """A change past the depth could not be seen: default mode runs eagerly with one
    FallbackWarning per call (never the first call's scale), strict raises."""
    root = _Deep() if where == "argument" else _Outer()
    deep = root if where == "argument" else root.inner
    x = torch.randn(2, 3)
    default, strict = ((to_graph(root), to_graph(root, strict=True)) if where == "wrapper"
                       else (to_graph(_forward), to_graph(_forward, strict=True)))
    args = (x,) if where == "wrapper" else (root, x)
    with pytest.warns(FallbackWarning, match="nested deeper"):
        torch.testing.assert_close(default(*args), root(x))
    deep.cfg.a.b.c.d.e.scale = 3.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)     # (said once per signature)
        torch.testing.assert_close(default(*args), root(x))
    for scale in (2.0, 3.0):
        deep.cfg.a.b.c.d.e.scale = scale
        with pytest.raises(ConversionError, match="nested deeper"):
            strict(*args)


def _annotated(x):
    def scale(t: OnlyForTypes) -> OnlyForTypes:    # (transformers' output capturing hook)
        return t * 2
    return scale(x) + 1


@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict"])
def test_future_annotations_stay_unevaluated(strict):
    """The converted code keeps its file's ``from __future__ import annotations``: a
    nested function annotated with a name imported only for type checkers converts."""
    fn = to_graph(_annotated, strict=strict)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        for x in (torch.randn(3), torch.randn(3, requires_grad=True)):
            torch.testing.assert_close(fn(x), _annotated(x))
    assert fn.cache_info().fallbacks == 0
