"""Cheaper calls on the transformers' hot paths (issue 13, batch-1 speed): each cached or
lowered fast form is checked against eager on two calls with other values, in default and
strict mode, and against the general path where the fast one must not apply (autograd,
another dtype, another layout)."""
import pytest
import torch

from runtime.kernels import rotary as rotary_kernel
from tests.e2e.e2e_helpers import assert_same
from tests.runtime.rotary_programs import projected, rotate_half
from transpiler import to_graph


# --------------------------------------------------------------------------- rotary's cached call
def _rotary(g, *args):
    nodes = [n for n in g.get_concrete(*args).optimized.walk() if n.op == "rotary"]
    assert len(nodes) == 1
    return nodes[0].target


def _inputs(seed, dtype=torch.float32, batch=2):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, 5, 16, generator=gen).to(dtype)
    w = torch.randn(32, 16, generator=gen).to(dtype)
    cos = torch.randn(batch, 1, 5, 8, generator=gen).to(dtype)
    sin = torch.randn(batch, 1, 5, 8, generator=gen).to(dtype)
    return x, w, cos, sin


def _compiled():
    if rotary_kernel._functions() is None:
        pytest.skip("no C compiler: rotary runs torch ops")


@pytest.mark.parametrize("strict", [False, True])
def test_cached_rotary_call_reads_each_calls_values(strict):
    """The second call takes the cached plan (same layouts) and must read its own x, cos
    and sin: values baked at the first call would show here."""
    _compiled()
    g = to_graph(projected, strict=strict)
    with torch.no_grad():
        first = _inputs(0)
        assert_same(g(*first), projected(*first))
        kernel = _rotary(g, *first)
        assert len(kernel._plans) == 1
        for seed in (1, 2):
            args = _inputs(seed)
            got, expected = g(*args), projected(*args)
            assert_same(got, expected)
            assert not torch.equal(got, g(*first))
        assert len(kernel._plans) == 1          # one layout, one plan


def test_cached_rotary_other_layout_and_dtype_take_their_own_plan():
    """The plan is keyed by every property the checks read: a contiguous x (not the
    transposed view) and float64 tables go through the checks again."""
    _compiled()
    x, _, cos, sin = _inputs(3)
    q = torch.randn(2, 5, 4, 8).transpose(1, 2)     # the transposed layout
    kernel = rotary_kernel.Rotary(lambda x, c, s: x * c + rotate_half(x) * s)
    with torch.no_grad():
        for args in [(q, cos, sin), (q.contiguous(), cos, sin), (q, cos, sin),
                     (q.double(), cos.double(), sin.double()),
                     (q.contiguous(), cos, sin)]:
            got = kernel(*args)
            expected = kernel.torch_fn(*args)
            assert got.dtype == expected.dtype
            assert got.stride() == expected.stride()
            torch.testing.assert_close(got, expected, rtol=0, atol=0)
    assert len(kernel._plans) == 3


def test_cached_rotary_under_autograd_gives_eagers_gradients():
    """A plan made without grad must not serve a call that records: the x gradient is
    eager's, and a call in no_grad afterwards still uses the plan."""
    _compiled()
    g = to_graph(projected)
    with torch.no_grad():
        args = _inputs(4)
        g(*args)
    x, w, cos, sin = _inputs(5)
    w1, w2 = w.clone().requires_grad_(), w.clone().requires_grad_()
    got = g(x, w1, cos, sin)
    expected = projected(x, w2, cos, sin)
    assert got.requires_grad and expected.requires_grad
    assert_same(got.detach(), expected.detach())
    got.pow(2).sum().backward()
    expected.pow(2).sum().backward()
    torch.testing.assert_close(w1.grad, w2.grad, rtol=1e-6, atol=1e-6)
    with torch.no_grad():
        args = _inputs(6)
        assert_same(g(*args), projected(*args))


# --------------------------------------------------------------------------- fast_calls
F = torch.nn.functional


def views(x):
    n = x.shape[0]
    a = x.view((n, 4, 6)).transpose(1, 2)
    b = x.reshape([n * 2, 12]) * 2
    c = x.view(x.shape)
    return a.reshape((n, 24)) + c, b.view(-1), x.view(torch.int32).view((n, 24))


def splits(x):
    q, k, v = x.split(8, dim=1)
    first, rest = x.split(12)
    a, b = x.split([10, 14], dim=-1)        # (sizes: Tensor.split's other branch)
    return q * k + v, first.sum(0), rest, a.sum(), torch.split(b, 7, 1)


def embeds(ids, w):
    a = F.embedding(ids, w)
    b = F.embedding(ids, w, padding_idx=None, max_norm=None, norm_type=2.0,
                    scale_grad_by_freq=False, sparse=False)
    c = F.embedding(ids, w, 1)              # a padding row: F.embedding's own call
    d = F.embedding(ids, w, scale_grad_by_freq=True)
    return a + b * 2 + c + d


def _calls(g, *args):
    return list(g.get_concrete(*args).executable.fn.__globals__.values())


def embeds_renormed(ids, w):
    return F.embedding(ids, w, max_norm=1.0) * 3     # renormalizes w's rows in place


def _source(g, *args):
    return g.get_concrete(*args).executable.source


@pytest.mark.parametrize("strict", [False, True])
def test_view_and_reshape_with_a_size_tuple_equal_eager(strict):
    g = to_graph(views, strict=strict)
    for seed in (0, 1):
        x = torch.randn(3 + seed, 24, generator=torch.Generator().manual_seed(seed))
        assert_same(g(x), views(x))
    source = _source(g, x)
    assert "(x, 4, 4, 6)" in source and "(x, 8, 12)" in source    # unpacked sizes
    xg, xe = torch.randn(2, 24, requires_grad=True), None
    xe = xg.detach().clone().requires_grad_()
    sum(t.float().sum() for t in g(xg)[:2]).backward()
    sum(t.float().sum() for t in views(xe)[:2]).backward()
    assert_same(xg.grad, xe.grad)


@pytest.mark.parametrize("strict", [False, True])
def test_split_by_size_equals_eager(strict):
    g = to_graph(splits, strict=strict)
    for seed in (0, 1):
        x = torch.randn(24, 24, generator=torch.Generator().manual_seed(seed))
        assert_same(g(x), splits(x))
    called = g.get_concrete(x).executable.fn.__globals__.values()
    assert any(f is torch._C._VariableFunctions.split for f in called)
    assert any(f is torch.Tensor.split for f in called)     # the list of sizes
    xg = torch.randn(24, 24, requires_grad=True)
    xe = xg.detach().clone().requires_grad_()
    out_g, out_e = g(xg), splits(xe)
    (out_g[0].sum() + out_g[1].sum() * 3 + out_g[4][1].sum()).backward()
    (out_e[0].sum() + out_e[1].sum() * 3 + out_e[4][1].sum()).backward()
    assert_same(xg.grad, xe.grad)


@pytest.mark.parametrize("strict", [False, True])
def test_embedding_without_renorm_equals_eager_with_gradients(strict):
    g = to_graph(embeds, strict=strict)
    for seed in (0, 1):
        gen = torch.Generator().manual_seed(seed)
        ids = torch.randint(0, 10, (2, 7), generator=gen)
        w = torch.randn(10, 4, generator=gen)
        assert_same(g(ids, w), embeds(ids, w))
    called = _calls(g, ids, w)
    assert any(f is torch.embedding for f in called) and any(f is F.embedding for f in called)
    wg = torch.randn(10, 4, requires_grad=True)
    we = wg.detach().clone().requires_grad_()
    ids = torch.tensor([[1, 2, 2, 3], [1, 1, 5, 9]])
    g(ids, wg).pow(2).sum().backward()
    embeds(ids, we).pow(2).sum().backward()
    assert_same(wg.grad, we.grad)           # the padding row and the frequency scaling


@pytest.mark.parametrize("strict", [False, True])
def test_embedding_with_max_norm_keeps_its_in_place_renorm(strict):
    g = to_graph(embeds_renormed, strict=strict)
    for seed in (0, 1):
        gen = torch.Generator().manual_seed(seed)
        ids = torch.randint(0, 6, (3, 5), generator=gen)
        w = torch.randn(6, 4, generator=gen) * 3
        wg, we = w.clone(), w.clone()
        with torch.no_grad():
            assert_same(g(ids, wg), embeds_renormed(ids, we))
        assert_same(wg, we)                  # the argument mutated as eagerly
        assert not torch.equal(wg, w)


def test_spelling_rules():
    from runtime import fast_calls
    x = object()
    assert fast_calls.spelling(torch.Tensor.view, (x, (2, 3)), {}) == \
        (torch.Tensor.view, (x, 2, 3), {})
    assert fast_calls.spelling(torch.Tensor.view, (x, ()), {}) is None
    assert fast_calls.spelling(torch.Tensor.view, (x, torch.float16), {}) is None
    assert fast_calls.spelling(torch.Tensor.reshape, (x, (2, 3.0)), {}) is None
    assert fast_calls.spelling(torch.Tensor.split, (x, [1, 2]), {}) is None
    assert fast_calls.spelling(torch.Tensor.split, (x, 2), {"dim": 1})[1] == (x, 2, 1)
    assert fast_calls.spelling(torch.Tensor.split, (x, 2, 1), {"dim": 1}) is None
    assert fast_calls.spelling(F.embedding, (x, x), {"max_norm": 1.0}) is None
    assert fast_calls.spelling(F.embedding, (x, x, 0), {}) is None
    assert fast_calls.spelling(F.embedding, (x, x), {"padding_idx": 0}) is None
    assert fast_calls.spelling(F.embedding, (x, x), {"bogus": 0}) is None
    assert fast_calls.spelling(F.embedding, (x,), {"weight": x})[0] is torch.embedding
