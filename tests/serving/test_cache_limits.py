"""Bounded signature caches (issue 14, item 3): ``to_graph(fn, cache_limit=N)``.

A converted function keeps at most N traced signatures, dropping the least recently used;
one ``CacheLimitWarning`` (a ``RetracingWarning``) at the caller's line when the limit is
first hit; an evicted entry's fast-path keys go with it; ``f.cache_info()`` counts traces,
hits, misses, evictions and fallbacks. Every result is checked against eager, before and
after evictions (a signature evicted and called again is traced again, to the same values),
on the fast path (flat positional arguments) and the full one (a list argument), in
default and strict mode.
"""
import contextlib
import warnings


import pytest
import torch

from runtime.options import options
from tests.e2e.e2e_helpers import assert_same
from transpiler import RetracingWarning, to_graph
from transpiler.retracing import CacheLimitWarning
from transpiler.signature_cache import DEFAULT_LIMIT, CacheInfo, default_limit


@pytest.fixture(scope="module", autouse=True)
def no_kernels():
    with options.override(compiler=False):     # (each scale is a new kernel: compile time)
        yield



def scaled(x, n):
    if x.sum() > 0:
        return x * n + 1
    return x - n


def scaled_list(xs, n):
    if xs[0].sum() > 0:
        return xs[0] * n + xs[1]
    return xs[1] - n


X = torch.tensor([1.0, 2.0, 3.0])
NEG = torch.tensor([-1.0, -2.0, -3.0])


@contextlib.contextmanager
def quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def fast_consistent(g):
    """Every fast-path key serves an entry still cached, and there are not too many."""
    cached = {id(e) for e in g._entries.values()}
    assert all(id(e) in cached for e in g._fast.values())
    assert len(g._fast) <= 4 * g.cache_info().limit


# ------------------------------------------------------------------------- LRU order
@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("spelling", ["fast", "full"])
def test_least_recently_used_is_evicted(strict, spelling):
    fn = scaled if spelling == "fast" else scaled_list
    g = to_graph(fn, strict=strict, cache_limit=3)

    def call(n, x=X):
        args = (x, n) if spelling == "fast" else ([x, x * 2], n)
        assert_same(g(*args), fn(*args))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RetracingWarning)
        for n in (1, 2, 3):
            call(n)
        call(1)                                 # 1 is now the most recently used
        assert g.cache_info().traces == 3 and g.cache_info().evictions == 0
        call(4)                                 # full: evicts 2, the least recently used
        info = g.cache_info()
        assert (info.traces, info.evictions, info.entries) == (4, 1, 3)
        call(1)
        call(3, NEG)                            # (another sign: another branch taken)
        call(4)
        assert g.cache_info().traces == 4       # 1, 3, 4 were kept: no new trace
        call(2)                                 # 2 was evicted: traced again, same values
        assert g.cache_info().traces == 5 and g.cache_info().evictions == 2
    fast_consistent(g)


def test_counts_hits_misses():
    g = to_graph(scaled, cache_limit=2)
    with quiet():
        for n in (1, 1, 1, 2, 2, 1, 3, 1, 2):
            assert_same(g(X, n), scaled(X, n))
    info = g.cache_info()
    assert isinstance(info, CacheInfo)
    # traces: 1, 2, 3 (evicts 2: 1 was used later), 2 again (evicts 3)
    assert (info.traces, info.misses, info.hits, info.evictions, info.fallbacks,
            info.entries, info.limit) == (4, 4, 5, 2, 0, 2, 2)
    assert info.dynamic_dims == {}


def test_guard_failure_replaces_its_entry():
    state = {"k": 2.0}

    def f(x):
        if x.sum() > 0:
            return x * state["k"]
        return x

    g = to_graph(f, cache_limit=4)
    with quiet():
        for k in (2.0, 3.0, 4.0, 5.0, 6.0, 7.0):
            state["k"] = k
            assert_same(g(X), f(X))
    info = g.cache_info()
    assert info.entries == 1 and info.evictions == 0 and info.traces == 6
    fast_consistent(g)


# ------------------------------------------------------------------------- one warning
def test_one_warning_at_the_callers_line():
    g = to_graph(scaled, cache_limit=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(8):
            assert_same(g(X, n), scaled(X, n))
    limit = [w for w in caught if issubclass(w.category, CacheLimitWarning)]
    assert len(limit) == 1 and issubclass(CacheLimitWarning, RetracingWarning)
    assert limit[0].filename == __file__
    text = str(limit[0].message)
    assert "scaled" in text and "cache_limit" in text and "TOGRAPH_CACHE_LIMIT" in text
    assert g.cache_info().evictions == 6


# ------------------------------------------------------------------------- results after eviction
@pytest.mark.parametrize("strict", [False, True])
def test_gradients_after_eviction(strict):
    def f(x, n):
        y = x
        for _ in range(n):
            if y.sum() > 0:
                y = y * 0.5
            else:
                y = y * 2.0
        return y.sum()

    g = to_graph(f, strict=strict, cache_limit=2)
    with quiet():
        for n in (1, 2, 3, 1, 2, 3):
            xg = torch.tensor([0.5, -1.5, 2.0], requires_grad=True)
            xe = xg.detach().clone().requires_grad_(True)
            out_g, out_e = g(xg, n), f(xe, n)
            assert_same(out_g, out_e)
            out_g.backward()
            out_e.backward()
            assert_same(xg.grad, xe.grad)
    assert g.cache_info().evictions == 4
    fast_consistent(g)


def test_fallbacks_are_counted_and_bounded():
    log = []

    def f(x, n):
        if x.sum() > 0:
            log.append(n)               # a side effect in a tensor branch: runs eagerly
        return x + n

    g = to_graph(f, cache_limit=2)
    with quiet():
        for n in (1, 2, 1, 3):
            log_before = len(log)
            assert_same(g(X, n), X + n)
            assert len(log) == log_before + 1
    info = g.cache_info()
    # the third call (n=1 again) retries its fallback, as the state it met (log) changed
    # (transpiler/fallback_retry.py), and falls back again: counted, not a hit
    assert info.fallbacks == 4 and info.traces == 0 and info.hits == 0 and info.entries == 2


# ------------------------------------------------------------------------- configuration
def test_limit_from_environment(monkeypatch):
    monkeypatch.delenv("TOGRAPH_CACHE_LIMIT", raising=False)
    assert default_limit() == DEFAULT_LIMIT and to_graph(scaled).cache_info().limit == 64
    monkeypatch.setenv("TOGRAPH_CACHE_LIMIT", "5")
    assert to_graph(scaled).cache_info().limit == 5
    assert to_graph(scaled, cache_limit=7).cache_info().limit == 7      # the argument wins
    monkeypatch.setenv("TOGRAPH_CACHE_LIMIT", "many")
    with pytest.raises(ValueError, match="TOGRAPH_CACHE_LIMIT"):
        to_graph(scaled)
    monkeypatch.delenv("TOGRAPH_CACHE_LIMIT")
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="cache_limit"):
            to_graph(scaled, cache_limit=bad)


def test_decorator_and_rewrap_keep_the_limit():
    @to_graph(cache_limit=3)
    def f(x, n):
        return x * n

    assert f.cache_info().limit == 3
    assert to_graph(f, cache_limit=3) is f
    assert to_graph(f, cache_limit=5).cache_info().limit == 5


# ------------------------------------------------------------------------- modules, methods
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.drop = torch.nn.Dropout(0.0)

    def forward(self, x, scale):
        y = self.drop(self.fc(x))
        if y.sum() > 0:
            return y * scale
        return y


def test_module_wrapper_cache_info():
    torch.manual_seed(0)
    net = Net()
    m = to_graph(net, cache_limit=2)
    x = torch.randn(3, 4)
    with quiet():
        for scale in (1.0, 2.0, 3.0):
            assert_same(m(x, scale), net(x, scale))
        m.eval()
        assert_same(m(x, 3.0), net(x, 3.0))
        m.train()
    info = m.cache_info()
    assert info.entries == 2 and info.evictions == 2 and info.traces == 4
    import copy
    assert copy.deepcopy(m).cache_info().limit == 2


class Holder:
    def __init__(self, k):
        self.k = k

    @to_graph(cache_limit=2)
    def apply(self, x, n):
        if x.sum() > 0:
            return x * self.k + n
        return x - n


def test_bound_method_cache_info():
    a, b = Holder(2.0), Holder(3.0)
    with quiet():
        for n in (1, 2, 3):
            assert_same(a.apply(X, n), Holder.apply.python_function(a, X, n))
        assert_same(b.apply(X, 1), Holder.apply.python_function(b, X, 1))
    assert a.apply.cache_info().evictions == 1 and a.apply.cache_info().limit == 2
    assert b.apply.cache_info().traces == 1


# ------------------------------------------------------------------------- sizes
def test_sizes_sweep_stays_bounded():
    g = to_graph(scaled, cache_limit=4)
    with quiet():
        for b in range(2, 20):
            x = torch.randn(b, 3)
            assert_same(g(x, 2), scaled(x, 2))
    info = g.cache_info()
    assert info.entries <= 4 and info.dynamic_dims == {"x": (0,)}
    assert info.traces + info.hits == 18
    fast_consistent(g)
