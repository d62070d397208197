"""The generated entry functions (``transpiler.call_entry``): a cached call's checks,
unpacking and graph call as one function, tried before any cache key is built.

Each test calls a converted function and eager on the same arguments and compares them;
then it checks which way the call went: served by an entry function (``served``: the
ordinary path's key builder was not asked), or sent on (a changed argument, mode or Python
state: a new trace or a fallback, exactly as without entry functions).
"""
import math
import warnings

import pytest
import torch
import torch.nn as nn

from transpiler import FallbackWarning, api, call_entry, to_graph
from transpiler.run_eagerly import run_eagerly

pytestmark = pytest.mark.skipif(call_entry.TensorGuards is None,
                                reason="no torch TensorGuards: no entry functions are built")


def same(got, exp):
    """Same structure and container kinds, dtypes and values (floats within 1e-6)."""
    assert type(got) is type(exp), (type(got), type(exp))
    if isinstance(exp, torch.Tensor):
        torch.testing.assert_close(got, exp, rtol=1e-6, atol=1e-6)
        assert got.requires_grad == exp.requires_grad
    elif isinstance(exp, (tuple, list)):
        assert len(got) == len(exp)
        for a, b in zip(got, exp):
            same(a, b)
    elif isinstance(exp, dict):
        assert list(got) == list(exp)
        for k in exp:
            same(got[k], exp[k])
    else:
        assert got == exp or (got != got and exp != exp)


class Counter:
    """Counts the ordinary path's key builds (``api._flat_key``) and full signatures."""

    def __init__(self, monkeypatch):
        self.keys = 0
        flat_key, signature = api._flat_key, api.GraphFunction._signature

        def counted_key(args):
            self.keys += 1
            return flat_key(args)

        def counted_signature(gf, args, kwargs):
            self.keys += 1
            return signature(gf, args, kwargs)
        monkeypatch.setattr(api, "_flat_key", counted_key)
        monkeypatch.setattr(api.GraphFunction, "_signature", counted_signature)

    def served(self, call):
        """``call()``'s result, asserting an entry function served it."""
        before = self.keys
        out = call()
        assert self.keys == before, "the call took the ordinary path"
        return out

    def sent_on(self, call):
        before = self.keys
        out = call()
        assert self.keys > before, "an entry function served a call it should not"
        return out


@pytest.fixture
def counter(monkeypatch):
    return Counter(monkeypatch)


def traces(f):
    gf = getattr(f, "graph_function", f)
    return len(gf._history)


def affine(x, s):
    return torch.tanh(x * s + 1.0) - s


# ------------------------------------------------------------------- served and compared
def test_repeated_calls_are_served_and_equal_eager(counter):
    f = to_graph(affine, strict=True)
    x = torch.randn(3, 4)
    same(f(x, 2.0), affine(x, 2.0))
    for seed in range(3):
        x = torch.randn(3, 4, generator=torch.Generator().manual_seed(seed))
        same(counter.served(lambda: f(x, 2.0)), affine(x, 2.0))
    assert traces(f) == 1 and f.cache_info().hits == 3


def mixed(a, b, c, d, e, n, cfg, pair=(1, 2.5), name="x", flag=None):
    y = a * b + c - d * e * n + cfg["s"] * pair[1]
    return {"y": y if flag is None else -y, "n": n + pair[0], "name": name, "t": (d, [e])}


def test_containers_scalars_and_keywords_are_served(counter):
    f = to_graph(mixed, strict=True)
    ts = [torch.randn(3, 3) for _ in range(5)]
    args = (*ts, 3, {"s": 2.0})
    kwargs = {"pair": (4, -1.5), "name": "q"}
    same(f(*args, **kwargs), mixed(*args, **kwargs))
    fresh = [torch.randn(3, 3) for _ in range(5)]
    same(counter.served(lambda: f(*fresh, 3, {"s": 2.0}, **kwargs)),
         mixed(*fresh, 3, {"s": 2.0}, **kwargs))
    assert traces(f) == 1


@pytest.mark.parametrize("change", [
    lambda a: (a[0].double(),) + a[1:],                          # dtype
    lambda a: tuple(torch.randn(4, 3) for _ in range(5)) + a[5:],  # shape
    lambda a: (torch.randn(3, 3).t(),) + a[1:],                  # strides
    lambda a: (a[0].detach().requires_grad_(),) + a[1:],         # requires_grad
    lambda a: a[:5] + (4,) + a[6:],                              # int value
    lambda a: a[:5] + (3.0,) + a[6:],                            # int -> float
    lambda a: a[:5] + (True,) + a[6:],                           # int -> bool
    lambda a: a[:6] + ({"s": 3.0},),                             # a dict's value
    lambda a: a[:6] + ({"s": 2.0, "t": 1},),                     # a dict's keys
    lambda a: a[:6] + ({"s": 2},),                               # float -> int in a dict
    lambda a: a + ((1, 2.5, 3),),                                # a tuple's length
    lambda a: a + ([1, 2.5],),                                   # tuple -> list
    lambda a: a + ((1, 2.5), "y"),                               # a string
    lambda a: a + ((1, 2.5), "x", 0),                            # None -> int
], ids=["dtype", "shape", "strides", "requires_grad", "int", "int-float",
        "int-bool", "dict-value", "dict-keys", "dict-kind", "tuple-length", "tuple-list",
        "str", "none"])
def test_each_argument_check_sends_a_changed_call_on(counter, change):
    # (a storage offset is no check: a view at another offset shares the entry,
    # tests/e2e/test_view_argument_keys.py)
    f = to_graph(mixed, strict=True)
    args = tuple(torch.randn(3, 3) for _ in range(5)) + (3, {"s": 2.0})
    same(f(*args), mixed(*args))
    same(counter.served(lambda: f(*args)), mixed(*args))
    other = change(args)
    same(counter.sent_on(lambda: f(*other)), mixed(*other))
    assert traces(f) == 2
    same(counter.served(lambda: f(*other)), mixed(*other))      # its own entry function
    same(f(*args), mixed(*args))


def signed(x, s):
    return x * math.copysign(1.0, s)


def test_negative_zero_is_its_own_signature(counter):
    f = to_graph(signed, strict=True)
    x = torch.arange(1.0, 4.0)
    same(f(x, 0.0), signed(x, 0.0))
    same(counter.served(lambda: f(x, 0.0)), signed(x, 0.0))
    same(counter.sent_on(lambda: f(x, -0.0)), signed(x, -0.0))
    same(f(x, 0.0), signed(x, 0.0))
    same(f(x, -0.0), signed(x, -0.0))


def scaled(x, *, scale=1.0, shift=0.0):
    return x * scale + shift


def test_keyword_names_and_order_are_checked(counter):
    f = to_graph(scaled, strict=True)
    x = torch.randn(4)
    same(f(x, scale=2.0, shift=1.0), scaled(x, scale=2.0, shift=1.0))
    same(counter.served(lambda: f(x, scale=2.0, shift=1.0)), scaled(x, scale=2.0, shift=1.0))
    same(counter.sent_on(lambda: f(x, shift=1.0, scale=2.0)), scaled(x, shift=1.0, scale=2.0))
    same(counter.sent_on(lambda: f(x, scale=2.0)), scaled(x, scale=2.0))
    same(counter.sent_on(lambda: f(x)), scaled(x))


def test_a_tensor_with_attributes_or_a_subclass_is_not_served(counter):
    class Tagged(torch.Tensor):
        pass
    f = to_graph(affine)
    x = torch.randn(3)
    same(f(x, 2.0), affine(x, 2.0))
    y = torch.randn(3)
    y.note = "kept"
    same(counter.sent_on(lambda: f(y, 2.0)), affine(y, 2.0))
    z = torch.randn(3).as_subclass(Tagged)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out, exp = counter.sent_on(lambda: f(z, 2.0)), affine(z, 2.0)
    torch.testing.assert_close(out.as_subclass(torch.Tensor), exp.as_subclass(torch.Tensor))
    same(counter.served(lambda: f(x, 2.0)), affine(x, 2.0))


def test_sparse_and_unsupported_arguments_still_equal_eager(counter):
    import collections
    Pair = collections.namedtuple("Pair", "a b")

    def f(x, p):
        return x * p.a + p.b
    g = to_graph(f)
    x = torch.randn(3)
    for _ in range(call_entry.PER_ENTRY + 3):
        same(counter.sent_on(lambda: g(x, Pair(2.0, 1.0))), f(x, Pair(2.0, 1.0)))
    entry, = g._entries.values()
    assert g._entries.inline == () and entry.inline_tries == call_entry.PER_ENTRY
    s = torch.eye(3).to_sparse()
    h = to_graph(lambda m, v: torch.sparse.mm(m, v))
    v = torch.randn(3, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(2):
            same(h(s, v), torch.sparse.mm(s, v))


# ------------------------------------------------------------------------------- modes
def test_grad_mode_default_dtype_and_autocast_are_checked(counter):
    def f(x, w):
        return (x @ w).sum(0) * 0.5
    g = to_graph(f, strict=True)
    x, w = torch.randn(4, 3), torch.randn(3, 2, requires_grad=True)
    same(g(x, w), f(x, w))
    same(counter.served(lambda: g(x, w)), f(x, w))
    with torch.no_grad():
        same(counter.sent_on(lambda: g(x, w)), f(x, w))
        same(counter.served(lambda: g(x, w)), f(x, w))
    same(counter.served(lambda: g(x, w)), f(x, w))      # both kept: one function each
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        same(counter.sent_on(lambda: g(x, w)), f(x, w))
    finally:
        torch.set_default_dtype(old)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        same(counter.sent_on(lambda: g(x, w)), f(x, w))
        same(counter.served(lambda: g(x, w)), f(x, w))
    same(counter.served(lambda: g(x, w)), f(x, w))


def test_gradients_through_a_served_call():
    def f(x, w):
        return torch.tanh(x @ w).sum()
    g = to_graph(f, strict=True)
    x = torch.randn(4, 3)
    for _ in range(3):
        w1 = torch.randn(3, 2, requires_grad=True)
        w2 = w1.detach().clone().requires_grad_()
        g(x, w1).backward()
        f(x, w2).backward()
        torch.testing.assert_close(w1.grad, w2.grad)


def test_forward_ad_level_is_checked(counter):
    import torch.autograd.forward_ad as fwad
    g = to_graph(affine)
    x = torch.randn(3)
    same(g(x, 2.0), affine(x, 2.0))
    with fwad.dual_level():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FallbackWarning)
            same(counter.sent_on(lambda: g(x, 2.0)), affine(x, 2.0))
    same(counter.served(lambda: g(x, 2.0)), affine(x, 2.0))


def test_run_eagerly_is_seen(counter):
    calls = []

    def f(x):
        calls.append(1)
        return x + 1
    g = to_graph(f)
    x = torch.randn(2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g(x)
        g(x)
        n = len(calls)
        with run_eagerly():
            same(g(x), x + 1)
    assert len(calls) == n + 1


# -------------------------------------------------------------------- the entry's guard
SCALE = 2.0


def reads_global(x):
    return x * SCALE


def test_a_changed_global_retraces(counter):
    global SCALE
    g = to_graph(reads_global, strict=True)
    x = torch.randn(3)
    same(g(x), reads_global(x))
    same(counter.served(lambda: g(x)), reads_global(x))
    SCALE = 3.0
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            same(counter.sent_on(lambda: g(x)), reads_global(x))
        assert traces(g) == 2
        same(counter.served(lambda: g(x)), reads_global(x))
    finally:
        SCALE = 2.0


def test_a_changed_closure_and_attribute_retrace(counter):
    class Config:
        k = 2.0
    cfg = Config()
    offset = 1.0

    def f(x):
        return x * cfg.k + offset
    g = to_graph(f, strict=True)
    x = torch.randn(3)
    same(g(x), f(x))
    same(counter.served(lambda: g(x)), f(x))
    cfg.k = 5.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        same(counter.sent_on(lambda: g(x)), f(x))
        same(counter.served(lambda: g(x)), f(x))
        offset = -1.0
        same(counter.sent_on(lambda: g(x)), f(x))
    assert traces(g) == 3


def test_an_error_in_the_graph_is_raised_as_eager_raises_it(counter):
    def f(x, y):
        return x @ y
    g = to_graph(f)
    x, y = torch.randn(2, 3), torch.randn(3, 2)
    same(g(x, y), f(x, y))
    bad = torch.randn(3, 2)[:, :1].expand(3, 4)
    with pytest.raises(RuntimeError) as eager:
        f(x, bad.t())
    with pytest.raises(RuntimeError) as converted, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g(x, bad.t())
    assert type(converted.value) is type(eager.value)


# -------------------------------------------------------------------- cache bookkeeping
def test_an_evicted_entry_takes_its_function_with_it(counter):
    g = to_graph(affine, strict=True, cache_limit=1)
    x, y = torch.randn(3), torch.randn(3, dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        same(g(x, 2.0), affine(x, 2.0))
        first = g._entries.inline[0]
        same(g(y, 2.0), affine(y, 2.0))
        assert first not in g._entries.inline and len(g._entries.inline) == 1
        same(counter.sent_on(lambda: g(x, 2.0)), affine(x, 2.0))
    assert g.cache_info().evictions == 2


def test_functions_are_bounded_and_each_signature_served(counter):
    g = to_graph(affine, strict=True)
    xs = [torch.randn(n) for n in range(1, 8)]
    for x in xs:
        same(g(x, 2.0), affine(x, 2.0))
    assert len(g._entries.inline) <= 4
    for x in xs[-3:]:
        same(counter.served(lambda: g(x, 2.0)), affine(x, 2.0))
    for x in xs:
        same(g(x, 2.0), affine(x, 2.0))
    assert len(g._entries.inline) <= 4


def test_hits_are_counted_and_stamped(counter):
    g = to_graph(affine, strict=True)
    x = torch.randn(3)
    g(x, 2.0)
    entry = g._entries.inline[0].entry
    for _ in range(4):
        counter.served(lambda: g(x, 2.0))
    assert g.cache_info().hits == 4 and entry.used == 4


def test_a_partial_and_held_arguments_build_no_function():
    import functools
    p = to_graph(functools.partial(affine, s=2.0))
    x = torch.randn(3)
    same(p(x), affine(x, 2.0))
    same(p(x), affine(x, 2.0))
    assert p._entries.inline == ()


# ----------------------------------------------------------------------------- modules
class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.drop = nn.Dropout(0.5)

    def forward(self, x, scale=1.0):
        return torch.relu(self.drop(self.fc(x))) * scale


def test_module_calls_are_served_and_train_eval_is_seen(counter):
    torch.manual_seed(0)
    m = Small().eval()
    g = to_graph(m)
    x = torch.randn(2, 4)
    with torch.no_grad():
        same(g(x), m(x))
        same(counter.served(lambda: g(x)), m(x))
    m.train()
    torch.manual_seed(1)
    out = counter.sent_on(lambda: g(x))
    torch.manual_seed(1)
    same(out, m(x))
    m.eval()
    with torch.no_grad():
        same(counter.served(lambda: g(x)), m(x))
    g.drop.train()                          # one submodule's flag
    torch.manual_seed(2)
    with torch.no_grad():
        out = counter.sent_on(lambda: g(x))
    torch.manual_seed(2)
    with torch.no_grad():
        same(out, m(x))


def test_module_keywords_are_served(counter):
    m = Small().eval()
    g = to_graph(m)
    x = torch.randn(2, 4)
    same(g(x, scale=3.0), m(x, scale=3.0))
    same(counter.served(lambda: g(x, scale=3.0)), m(x, scale=3.0))
    same(counter.sent_on(lambda: g(x, scale=4.0)), m(x, scale=4.0))


def served_module(counter):
    """A converted ``Small`` (eval), its original and an input, its call served once."""
    m = Small().eval()
    g = to_graph(m)
    x = torch.randn(2, 4)
    same(g(x), m(x))
    same(counter.served(lambda: g(x)), m(x))
    return m, g, x


def test_hooks_added_later_run(counter):
    m, g, x = served_module(counter)
    seen = []
    handle = g.register_forward_hook(lambda mod, args, out: seen.append(out.sum().item()))
    same(g(x), m(x))
    assert len(seen) == 1
    handle.remove()
    same(counter.served(lambda: g(x)), m(x))
    inner = m.fc.register_forward_hook(lambda mod, args, out: out * 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        same(counter.sent_on(lambda: g(x)), m(x))
    inner.remove()
    glob = nn.modules.module.register_module_forward_hook(lambda mod, a, out: None)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            same(counter.sent_on(lambda: g(x)), m(x))
    finally:
        glob.remove()


def test_a_replaced_submodule_or_parameter_is_seen(counter):
    m, g, x = served_module(counter)
    m.fc = nn.Linear(4, 4)
    same(counter.sent_on(lambda: g(x)), m(x))
    same(counter.served(lambda: g(x)), m(x))
    m.fc.weight = nn.Parameter(torch.randn(4, 4))
    same(counter.sent_on(lambda: g(x)), m(x))
    with torch.no_grad():
        m.fc.bias.add_(1.0)                 # in place: the same tensor, read when it runs
    same(counter.served(lambda: g(x)), m(x))


def test_a_training_step_through_served_calls():
    torch.manual_seed(0)
    m1 = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
    m2 = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
    m2.load_state_dict(m1.state_dict())
    g = to_graph(m1)
    o1, o2 = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (m1, m2))
    x = torch.randn(8, 4)
    for _ in range(4):
        for model, opt in ((g, o1), (m2, o2)):
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
    for a, b in zip(m1.parameters(), m2.parameters()):
        torch.testing.assert_close(a, b)
    assert traces(g) == 1


# ------------------------------------------------------------------------ what is built
def test_the_function_reads_as_its_checks():
    g = to_graph(mixed, strict=True)
    args = tuple(torch.randn(2) for _ in range(5)) + (3, {"s": 2.0})
    g(*args)
    text = g._entries.inline[0].source
    assert "tensors(a0, a1, a2, a3, a4)" in text and "a5.__class__ is int" in text
    assert "tuple(a6) == k_a6" in text and "holds()" in text
    assert call_entry.MISS is g._entries.inline[0](args[:3], {})
