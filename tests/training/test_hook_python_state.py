"""Python state written by module hooks, eager vs converted, after every call.

A forward (pre-)hook runs while the forward is traced: on a torch module by
``nn.Module.__call__`` itself, natively. What it writes -- a dict item, a global, an
object's attribute, a list item, a ``nonlocal``; a counter, an ``.item()`` value, a
tensor -- must be what eager leaves after *every* call (exact Python types: a float, never
a 0-d tensor), or the call must fall back naming the user's line (strict:
``ConversionError``). It used to be silently lost: a dict counter in a hook stayed 0 (the
hook-dict watch put the old number back after the carried one was set), an ``.item()``
stored in a hook's dict came back a float64 0-d tensor, and a hook writing through a helper
(``def hook(m, i, o): log(o)``) left the trace's value, a graph value among them, in the
user's state.

Each case builds the same model twice from one seed; one copy runs eagerly, the other
through ``to_graph(model)``, ``to_graph(fn calling model)`` or a whole converted training
step (zero_grad, loss, backward, SGD step), and after each call we compare the hook's
state (type and value), the output, and for steps the parameters.
"""
from __future__ import annotations

import os
import warnings

import pytest
import torch
from torch import nn

from transpiler import ConversionError, FallbackWarning, to_graph

pytestmark = pytest.mark.usefixtures("one_thread")
THIS_FILE = os.path.basename(__file__)
CALLS = 4

G_DICT: dict = {}
G_NUM = None

# value kind -> (initial value, new value from (old, tensor))
VALUES = {
    "count": (0, lambda old, o: old + 1),
    "item": (0.0, lambda old, o: o.detach().abs().mean().item()),
    "acc_item": (0.0, lambda old, o: old + o.detach().abs().mean().item()),
    "tensor": ("zeros", lambda old, o: old * 0.5 + o.detach().abs().mean()),
}


class Holder:
    pass


def _writer(holder, value):
    """(touch(o) writing the state through ``holder``, read() -> the state)."""
    init, calc = VALUES[value]
    init = torch.zeros(()) if init == "zeros" else init
    if holder == "dict":
        st = {"v": init}

        def touch(o):
            st["v"] = calc(st["v"], o)
        return touch, lambda: st["v"]
    if holder == "global_dict":
        G_DICT.clear()
        G_DICT["v"] = init

        def touch(o):
            G_DICT["v"] = calc(G_DICT["v"], o)
        return touch, lambda: G_DICT["v"]
    if holder == "list":
        lst = [init]

        def touch(o):
            lst[0] = calc(lst[0], o)
        return touch, lambda: lst[0]
    if holder == "attr":
        obj = Holder()
        obj.v = init

        def touch(o):
            obj.v = calc(obj.v, o)
        return touch, lambda: obj.v
    if holder == "nonlocal":
        v = init

        def touch(o):
            nonlocal v
            v = calc(v, o)
        return touch, lambda: v
    assert holder == "global"
    global G_NUM
    G_NUM = init

    def touch(o):
        global G_NUM
        G_NUM = calc(G_NUM, o)
    return touch, lambda: G_NUM


class UserLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 4)

    def forward(self, x):
        return self.lin(x)


def _register(kind, first, net, touch):
    m = nn.modules.module
    if kind == "pre":
        return first.register_forward_pre_hook(lambda mod, a: touch(a[0]))
    if kind == "post":
        return first.register_forward_hook(lambda mod, a, o: touch(o))
    if kind == "pre_kwargs":
        return first.register_forward_pre_hook(lambda mod, a, k: touch(a[0]), with_kwargs=True)
    if kind == "post_kwargs":
        return first.register_forward_hook(lambda mod, a, k, o: touch(o), with_kwargs=True)
    if kind == "global_pre":
        return m.register_module_forward_pre_hook(
            lambda mod, a: touch(a[0]) if mod is first else None)
    if kind == "global_post":
        return m.register_module_forward_hook(lambda mod, a, o: touch(o) if mod is first else None)
    if kind == "root_post":
        return net.register_forward_hook(lambda mod, a, o: touch(o))
    assert kind == "backward"
    return first.register_full_backward_hook(lambda mod, gi, go: touch(go[0]))


def _build(holder, value, hook, entry, user=False):
    torch.manual_seed(0)
    first = UserLinear() if user else nn.Linear(3, 4)
    net = nn.Sequential(first, nn.ReLU(), nn.Linear(4, 2))
    touch, read = _writer(holder, value)
    handle = _register(hook, first, net, touch)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)

    def step(x, y):
        opt.zero_grad()
        loss = ((net(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        return loss.detach()
    target = {"model": net, "fn": lambda x: net(x).sum(), "step": step}[entry]
    return target, read, handle, net


def _data():
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(5, 3, generator=g), torch.randn(5, 2, generator=g))
            for _ in range(CALLS)]


def _same(a, b):
    assert type(a) is type(b), (a, b)
    if isinstance(a, dict):
        assert list(a) == list(b), (a, b)
        for k in a:
            _same(a[k], b[k])
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    elif isinstance(a, float):
        assert a == pytest.approx(b, rel=1e-5, abs=1e-7)
    else:
        assert a == b


def _states(build, entry, convert, strict=False):
    """[(state, output, parameters)] after each call; the FallbackWarnings; the converted
    function (None eagerly)."""
    target, read, handle, net = build()
    f = to_graph(target, strict=strict) if convert else target
    out = []
    try:
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            for x, y in _data():
                result = f(x, y) if entry == "step" else f(x)
                state = read()
                out.append((state.detach().clone() if isinstance(state, torch.Tensor)
                            else state, result.detach().clone(),
                            [p.detach().clone() for p in net.parameters()]))
    finally:
        handle.remove()
    fallbacks = [str(w.message) for w in rec if issubclass(w.category, FallbackWarning)]
    return out, fallbacks, (f if convert else None)


def check(build, entry, expect="convert", max_traces=2):
    """Eager vs converted after every call; ``expect``: "convert" (no FallbackWarning, at
    most ``max_traces`` traces), "fallback" (one naming this file, eager's results; strict
    raises ConversionError) or "fallback_once" (the first call only)."""
    eager, _, _ = _states(build, entry, convert=False)
    got, fallbacks, f = _states(build, entry, convert=True)
    for (es, eo, ep), (gs, go, gp) in zip(eager, got):
        _same(es, gs)
        _same(eo, go)
        for a, b in zip(ep, gp):
            _same(a, b)
    if expect == "convert":
        assert not fallbacks, fallbacks
        assert f.cache_info().traces <= max_traces, f.cache_info()
    else:
        assert fallbacks and all(THIS_FILE in m for m in fallbacks), fallbacks
        if expect == "fallback_once":
            assert len(fallbacks) == 1 and f.cache_info().traces <= max_traces
        with pytest.raises(ConversionError):
            _states(build, entry, convert=True, strict=True)
        return fallbacks
    if expect == "convert":
        strict, _, _ = _states(build, entry, convert=True, strict=True)
        for (es, eo, _), (gs, go, _) in zip(eager, strict):
            _same(es, gs)
            _same(eo, go)


# ------------------------------------------------ every holder and value, from a helper
@pytest.mark.parametrize("value", list(VALUES))
@pytest.mark.parametrize("holder", ["dict", "global_dict", "list", "attr", "nonlocal",
                                    "global"])
def test_hook_helper_writes(holder, value):
    """A forward hook on a torch module calling a helper that writes the state (the helper
    runs natively, unseen by the converter: its closure and globals are watched now)."""
    check(lambda: _build(holder, value, "post", "fn"), "fn")


# ------------------------------------------------ every hook kind, every entry point
@pytest.mark.parametrize("entry", ["model", "fn", "step"])
@pytest.mark.parametrize("hook", ["pre", "post", "pre_kwargs", "post_kwargs", "global_pre",
                                  "global_post", "root_post"])
def test_hook_kinds_and_entries(hook, entry):
    value = {"pre": "count", "post": "acc_item", "pre_kwargs": "item",
             "post_kwargs": "tensor", "global_pre": "acc_item", "global_post": "count",
             "root_post": "item"}[hook]
    holder = {"model": "dict", "fn": "global_dict", "step": "dict"}[entry]
    check(lambda: _build(holder, value, hook, entry), entry)


@pytest.mark.parametrize("holder", ["dict", "nonlocal"])
def test_hook_on_a_user_module_inside_a_container(holder):
    check(lambda: _build(holder, "acc_item", "pre", "step", user=True), "step")


@pytest.mark.parametrize("entry", ["model", "fn", "step"])
def test_full_backward_hook_writing_state_falls_back(entry):
    """A full backward hook: a graph has no module boundary to hook; eager's results, and
    the reason names the hook (it used to be torch's 'Error while setting up backward
    hooks' for a child of a container called from a function)."""
    fallbacks = check(lambda: _build("dict", "count", "backward", entry), entry,
                      expect="fallback")
    assert all("backward hooks" in m for m in fallbacks), fallbacks
    if entry != "model":
        assert all(f"(its hook at {__file__}:" in m for m in fallbacks), fallbacks


# ------------------------------------------------ the reported programs, hooks writing directly
class ActivationStats:
    """fastai's shape: the hook is a method; it counts and logs through another method."""

    def __init__(self, count):
        self.count, self.calls, self.hist = count, 0, []

    def hook(self, m, i, o):
        if self.count:
            self.calls += 1
        self.log(o)

    def log(self, o):
        self.hist.append(o.detach().abs().mean().item())


def _direct(kind, entry="fn", user=False):
    def build():
        torch.manual_seed(0)
        net = UserLinear() if user else nn.Linear(3, 2)
        st = {"n": 0}
        if kind == "pre_dict":
            def pre(m, a):
                st["n"] += 1
            handle = net.register_forward_pre_hook(pre)
            read = lambda: dict(st)     # noqa: E731
        elif kind == "pre_global_dict":
            G_DICT.clear()
            G_DICT["n"] = 0

            def pre(m, a):
                G_DICT["n"] += 1
            handle = net.register_forward_pre_hook(pre)
            read = lambda: dict(G_DICT)     # noqa: E731
        elif kind == "post_item":
            stats = {"calls": 0, "act": 0.0}
            handle = net.register_forward_hook(
                lambda m, i, o: stats.update(act=o.abs().mean().item(), calls=stats["calls"] + 1))
            read = lambda: dict(stats)      # noqa: E731
        elif kind == "post_item_new_key":
            stats = {"calls": 0}

            def hook(m, i, o):
                stats["act"] = o.detach().abs().mean().item()
                stats["calls"] += 1
            handle = net.register_forward_hook(hook)
            read = lambda: dict(stats)      # noqa: E731
        elif kind in ("method", "method_append"):
            stats = ActivationStats(count=kind == "method")
            handle = net.register_forward_hook(stats.hook)
            read = lambda: (stats.calls, list(stats.hist))     # noqa: E731
        else:
            assert kind == "activation_and_counter"
            feats = {"n": 0}

            def hook(m, i, o):
                feats["out"] = o.detach()
                feats["n"] += 1
            handle = net.register_forward_hook(hook)
            read = lambda: {k: v.clone() if isinstance(v, torch.Tensor) else v  # noqa: E731
                            for k, v in feats.items()}
        opt = torch.optim.SGD(net.parameters(), lr=0.1)

        def step(x, y):
            opt.zero_grad()
            loss = ((net(x)[:, :2] - y) ** 2).mean()
            loss.backward()
            opt.step()
            return loss.detach()
        target = {"model": net, "fn": lambda x: net(x).sum(), "step": step}[entry]
        return target, read, handle, net
    return build


@pytest.mark.parametrize("entry", ["model", "fn", "step"])
@pytest.mark.parametrize("kind", ["pre_dict", "pre_global_dict", "post_item",
                                  "post_item_new_key", "activation_and_counter"])
def test_hooks_writing_dicts(kind, entry):
    check(_direct(kind, entry), entry)



@pytest.mark.parametrize("entry", ["model", "fn", "step"])
@pytest.mark.parametrize("kind", ["method", "method_append"])
def test_hook_methods_of_an_object(kind, entry):
    """A hook that is a bound method changing its object (a counter, a list it appends to
    through another method): not carried; every call falls back, and the refused trace's
    appends are taken back (a graph value used to stay in ``self.hist``)."""
    check(_direct(kind, entry), entry, expect="fallback")


@pytest.mark.parametrize("entry", ["fn", "step"])
@pytest.mark.parametrize("kind", ["pre_dict", "post_item", "post_item_new_key"])
def test_hooks_of_a_user_module_called_from_converted_code(kind, entry):
    """A user module called from converted code: its hooks are converted and run around
    its converted forward (``module_hooks.hooked_call``), not natively."""
    check(_direct(kind, entry, user=True), entry)
