"""One tensor object passed as two arguments (``f(x, x)``): the trace gives both the same
value (one graph input), so ``a is b``, torch's own ``query is key`` and writes through one
name read through the other behave as in eager, and the pattern (which leaves are one
object) is part of the call's signature on every path (the signature cache, the flat fast
key, the generated entry functions, a module's calls): calls alternating between aliased
and distinct arguments each get their own graph (``transpiler.argument_aliases``).

Each case runs eager and converted on twin arguments built by one factory, call after call,
and compares results and what the call left in the arguments."""
import inspect
import warnings

import pytest
import torch
from torch import nn

from e2e_helpers import assert_same
from transpiler import ConversionError, FallbackWarning, to_graph


def _run(fn, makes, strict=True, rounds=2):
    """Calls ``fn`` eager and converted on twins from each factory in ``makes`` (each
    returns (args, kwargs)), ``rounds`` times over, comparing results and arguments."""
    g = to_graph(fn, strict=strict)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        for _ in range(rounds):
            for make in makes:
                args, kwargs = make()
                exp = fn(*args, **kwargs)
                got_args, got_kwargs = make()
                got = g(*got_args, **got_kwargs)
                assert_same(got, exp)
                assert_same((got_args, got_kwargs), (args, kwargs), "arguments")
    return g


def _pair(aliased, n=3):
    x = torch.arange(1.0, n + 1)
    return (x, x) if aliased else (x, x.clone())


def test_is_and_is_not_alternating():
    def f(a, b):
        if a is b:
            return a * 2
        return b * 3

    def h(a, b):
        return (a + 1) if a is not b else (b - 1)

    for fn in (f, h):
        g = _run(fn, [lambda: (_pair(True), {}), lambda: (_pair(False), {})], rounds=3)
        assert g.cache_info().traces == 2


def test_three_arguments_each_pattern_its_own_graph():
    def f(a, b, c):
        return (a is b) * 1 + (b is c) * 10 + (a is c) * 100 + a + b * 2 + c * 3

    x, y = torch.ones(2), torch.full((2,), 5.0)
    patterns = [(x, x, y), (x, y, y), (x, y, x), (x, x, x), (x, y, y.clone())]
    g = _run(f, [lambda p=p: (p, {}) for p in patterns])
    assert g.cache_info().traces == len(patterns)


def test_keyword_and_mixed_arguments():
    def f(a, b=None):
        return a * 2 if a is b else a - b

    def mixed(aliased):
        a, b = _pair(aliased)
        return (a,), {"b": b}

    _run(f, [lambda: ((), dict(zip("ab", _pair(True)))),
             lambda: ((), dict(zip("ab", _pair(False)))),
             lambda: mixed(True), lambda: mixed(False)])


def test_in_containers():
    def lists(xs):
        return xs[0] * 2 if xs[0] is xs[1] else xs[0] + xs[1]

    def dicts(d, t):
        return (d["p"] is d["q"]) + (d["q"] is t[1]) * 10 + d["p"] * t[0]

    _run(lists, [lambda: ([list(_pair(True))], {}), lambda: ([list(_pair(False))], {})])
    x, y = torch.ones(2), torch.full((2,), 3.0)
    _run(dicts, [lambda: (({"p": x, "q": x}, (y, x)), {}),
                 lambda: (({"p": x, "q": y}, (y, y)), {}),
                 lambda: (({"p": y, "q": x.clone()}, (y, x)), {})])


def test_in_place_write_through_one_alias():
    """(A regression check: the graph's ops run on the caller's tensors in order, so this
    held before argument_aliases too; now ``a`` and ``b`` are also one graph input.)"""
    def f(a, b):
        c = b * 2
        a.add_(1)
        return c, b * 2

    _run(f, [lambda: (_pair(True), {}), lambda: (_pair(False), {})], rounds=3)


def _write_then_read(a, b):
    c = (b * 2 + 1).relu()
    a[0] = 7.0                           # the write through a
    return c + (b * 2 + 1).relu(), b.mean()


def _write_in_loop(a, b):
    s = b.sum() * 0
    while s < 100:
        a.add_(1)                        # the write through a
        s = s + b.sum()
    return s, b * 1


def _zero_then_mean(a, b):
    c = b.mean()
    a.zero_()                            # the write through a
    return b.mean() - c, (b * b).sum()


def _overlapping():
    x = torch.arange(1.0, 6.0)
    return x[:4], x[1:]


def _whole_view():
    x = torch.arange(1.0, 5.0)
    return x, x.view(4)


def _distinct():
    return torch.arange(1.0, 5.0), torch.arange(1.0, 5.0)


@pytest.mark.parametrize("fn", [_write_then_read, _write_in_loop, _zero_then_mean])
def test_in_place_write_to_one_argument_read_through_a_view(fn):
    """Distinct tensors sharing storage (views of one tensor) where the graph writes one
    in place: the graph takes them as independent (it merged ``b * 2 + 1`` across the
    write), so such a call falls back naming the write's line; calls with tensors of their
    own keep the graph, through every path (entry functions included)."""
    g = to_graph(fn)
    lines, first = inspect.getsourcelines(fn)
    line = first + next(i for i, text in enumerate(lines) if "the write through a" in text)
    for make in [_distinct, _overlapping, _distinct, _whole_view, _distinct, _overlapping,
                 _whole_view, _distinct]:
        exp_args = make()
        exp = fn(*exp_args)
        args = make()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = g(*args)
        assert_same(got, exp)
        assert_same(args, exp_args, "arguments")
        fell = [w for w in caught if issubclass(w.category, FallbackWarning)]
        if make is _distinct:
            assert not fell
        elif fell:          # (warned once per signature; later calls run eagerly)
            assert f"test_aliased_arguments.py:{line}:" in str(fell[0].message)
            assert "share storage" in str(fell[0].message)
    # (_overlapping and _whole_view: one signature, the storage offset is in no key)
    assert g.cache_info().traces == 1 and g.cache_info().fallbacks == 1
    with pytest.raises(ConversionError, match="share storage"):
        to_graph(fn, strict=True)(*_overlapping())


def test_gradients_through_one_leaf_twice():
    def f(a, b):
        return (a * b + a.sin()).sum() + (b is a) * 1.0

    w = torch.randn(3, requires_grad=True)
    v = torch.randn(3, requires_grad=True)
    g = to_graph(f, strict=True)
    for args in [(w, w), (w, v), (w, w)]:
        for p in (w, v):
            p.grad = None
        out = f(*args)
        out.backward()
        exp = [None if p.grad is None else p.grad.clone() for p in (w, v)]
        for p in (w, v):
            p.grad = None
        got_out = g(*args)
        got_out.backward()
        assert_same(got_out, out)
        for got, want in zip([p.grad for p in (w, v)], exp):
            assert (got is None) == (want is None)
            if want is not None:
                assert_same(got, want)


class _Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = nn.Linear(4, 4)
        self.k = nn.Linear(4, 4)

    def forward(self, query, key, value):
        if query is key and key is value:     # a self-attention shortcut, as torch's
            return self.q(query) * 2
        return self.q(query) + self.k(key) * value


def test_module_forward_with_query_key_value_one_tensor():
    torch.manual_seed(0)
    m = _Attention().eval()
    g = to_graph(m, strict=True)
    x, y = torch.randn(2, 4), torch.randn(2, 4)
    with torch.no_grad():
        for args in [(x, x, x), (x, y, y), (x, x, x), (x, x, y), (y, y, y)]:
            assert_same(g(*args), m(*args))


def test_multihead_attention_self_attention_fully_masked_row():
    mha = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    x, mask = torch.randn(2, 5, 8), torch.zeros(2, 5, dtype=torch.bool)
    mask[1] = True                                   # a row with every key masked: NaN
    g = to_graph(mha, strict=True)
    with torch.no_grad():
        for args in [(x, x, x), (x, x.clone(), x), (x, x, x)]:
            got = g(*args, key_padding_mask=mask, need_weights=False)
            assert_same(got, mha(*args, key_padding_mask=mask, need_weights=False))


def test_default_mode_no_fallback():
    def f(a, b):
        return a + 1 if a is b else a - b

    _run(f, [lambda: (_pair(True), {}), lambda: (_pair(False), {})], strict=False)


@pytest.mark.parametrize("first", [True, False])
def test_generated_entry_functions_check_the_pattern(first):
    """The per-signature entry functions (``call_entry``) serve a call only with the
    traced pattern; many calls alternate through them."""
    def f(a, b):
        return a * 2 if a is b else a * 3

    g = to_graph(f, strict=True)
    x, y = torch.ones(2), torch.ones(2)
    for i in range(6):
        aliased = (i % 2 == 0) == first
        args = (x, x) if aliased else (x, y)
        assert_same(g(*args), f(*args))
    info = g.cache_info()
    assert (info.traces, info.hits) == (2, 4)


class _Holder:
    def __init__(self, a, b):
        self.a, self.b = a, b


def test_tensors_held_by_an_argument_object():
    """(A regression check: an argument object's tensors were told apart before too.)"""
    def f(s, t):
        r = s.a * 2 if s.a is s.b else s.a * 3
        return r + (t is s.b) * 10

    g = to_graph(f, strict=True)
    x, y = torch.ones(2), torch.full((2,), 4.0)
    s = _Holder(x, y)
    for b, t in [(y, y), (x, y), (y, x), (x, x), (y, y), (x, y)]:
        s.b = b
        assert_same(g(s, t), f(s, t))


def test_retrace_says_which_arguments_are_one_tensor():
    def f(a, b):
        return a * 2 if a is b else b * 3

    g = to_graph(f, strict=True)
    x = torch.ones(2)
    g(x, x.clone())
    g(x, x)
    assert "one tensor object passed as several arguments: distinct tensors -> b is a" in \
        str(g.explain(x, x))


def test_export_refuses_one_tensor_as_two_examples():
    from runtime.export.errors import ExportError
    from runtime.export.torch_export import to_torch_export

    def f(a, b):
        return a * 2 if a is b else a + b

    x = torch.ones(3)
    with pytest.raises(ExportError, match="one tensor object as several arguments"):
        to_torch_export(to_graph(f), (x, x))
