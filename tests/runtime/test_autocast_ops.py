"""CPU autocast in converted code (``runtime.autocast_ops``): a differential sweep.

Each case runs ops inside a ``torch.autocast("cpu", dtype=...)`` region with mixed input
dtypes (float32 leaves that require grad beside low-precision tensors: what rotary
embeddings, an earlier autocast op or a ``.half()`` leave), in bf16 and float16, eagerly
and through ``to_graph`` (default and strict mode). Compared: outputs (dtype, shape, bits),
the gradients of every input after a backward outside the call, and that nothing fell
back. Then the spellings of a region (``torch.amp.autocast``, ``torch.cpu.amp.autocast``,
a decorator on a helper, ``enabled=False`` nested, ``cache_enabled=False``), a region around
the call, a backward inside the call, a LLaMA-style attention block (float32 q/k out of
rotary embeddings, a bf16 v) and a Whisper-style conv front end (conv1 -> conv2 on bf16).
"""
from __future__ import annotations

import contextlib
import warnings

import pytest
import torch
import torch.nn.functional as F

from transpiler import FallbackWarning, to_graph

LOW = [torch.bfloat16, torch.float16]
DT = {"bf16": torch.bfloat16, "fp16": torch.float16}


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)        # eager and converted runs sum in the same order
    yield
    torch.set_num_threads(before)


def _f(*shape):
    """A float32 leaf that requires grad (a parameter's role)."""
    return torch.randn(*shape).requires_grad_()


def _lo(dtype, *shape):
    """A low-precision leaf that requires grad (an earlier autocast op's result's role)."""
    return torch.randn(*shape).to(dtype).requires_grad_()


_mha = torch.nn.MultiheadAttention(8, 2, batch_first=True)
_gru = torch.nn.GRU(4, 6)

# name -> (function of (dtype, *inputs) run inside the region, inputs(dtype))
CASES = {
    "matmul_f32_low": (lambda a, b: a @ b, lambda d: (_f(3, 4), _lo(d, 4, 5))),
    "linear_low_x": (lambda x, w, b: F.linear(x, w, b), lambda d: (_lo(d, 2, 4), _f(3, 4),
                                                                   _f(3))),
    "conv1d_low_x": (lambda x, w, b: F.conv1d(x, w, b), lambda d: (_lo(d, 2, 3, 9),
                                                                   _f(4, 3, 3), _f(4))),
    "conv2d_low_x": (lambda x, w, b: F.conv2d(x, w, b, padding=1),
                     lambda d: (_lo(d, 1, 2, 5, 5), _f(3, 2, 3, 3), _f(3))),
    "conv3d_f32_x": (lambda x, w, b: F.conv3d(x, w, b),
                     lambda d: (_f(1, 2, 3, 4, 4), _lo(d, 2, 2, 2, 2, 2), _f(2))),
    "bmm_mixed": (lambda a, b: torch.bmm(a, b), lambda d: (_f(2, 3, 4), _lo(d, 2, 4, 2))),
    "baddbmm_mixed": (lambda c, a, b: torch.baddbmm(c, a, b, alpha=0.5),
                      lambda d: (_f(2, 3, 2), _lo(d, 2, 3, 4), _f(2, 4, 2))),
    "addmm_mixed": (lambda c, a, b: torch.addmm(c, a, b), lambda d: (_f(3, 2), _f(3, 4),
                                                                     _lo(d, 4, 2))),
    "sdpa_f32_qk_low_v": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
                          lambda d: (_f(1, 2, 4, 8), _f(1, 2, 4, 8), _lo(d, 1, 2, 4, 8))),
    "sdpa_causal_low_q": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v,
                                                                         is_causal=True),
                          lambda d: (_lo(d, 1, 2, 4, 8), _f(1, 2, 4, 8), _f(1, 2, 4, 8))),
    "sdpa_f32_mask": (lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
                      lambda d: (_f(1, 2, 4, 8), _lo(d, 1, 2, 4, 8), _f(1, 2, 4, 8),
                                 torch.randn(1, 1, 4, 4))),
    "layer_norm_low_x": (lambda x, w, b: F.layer_norm(x, (4,), w, b),
                         lambda d: (_lo(d, 3, 4), _f(4), _f(4))),
    "softmax_low": (lambda x: x.softmax(-1), lambda d: (_lo(d, 3, 5),)),
    "log_softmax_low": (lambda x: F.log_softmax(x, -1), lambda d: (_lo(d, 3, 5),)),
    "cross_entropy_low": (lambda x, y: F.cross_entropy(x, y, label_smoothing=0.1),
                          lambda d: (_lo(d, 4, 5), torch.tensor([0, 3, 1, 4]))),
    "mse_mixed": (lambda a, b: F.mse_loss(a, b), lambda d: (_lo(d, 3, 4), _f(3, 4))),
    "sum_cumsum_low": (lambda x: (x.sum(), x.sum(-1, dtype=torch.float32), x.cumsum(0)),
                       lambda d: (_lo(d, 3, 4),)),
    "exp_pow_low": (lambda x, y: (x.exp(), x.pow(2), torch.pow(x.abs(), y)),
                    lambda d: (_lo(d, 3, 4), _f(3, 4))),
    "cat_stack_mixed": (lambda a, b: (torch.cat([a, b]), torch.stack([a, b], 1)),
                        lambda d: (_f(2, 3), _lo(d, 2, 3))),
    "where_mixed": (lambda c, a, b: torch.where(c > 0, a, b),
                    lambda d: (torch.randn(3, 4), _f(3, 4), _lo(d, 3, 4))),
    "index_ops_mixed": (lambda x, v, i: (x[i], x.index_select(0, i), x.gather(1, i[:, None]),
                                         x.index_copy(0, i, v),     # (promote: float32)
                                         x.index_put((i,), v.to(x.dtype)),
                                         x.scatter_add(0, i[:, None].expand(3, 4),
                                                       v.to(x.dtype))),
                        lambda d: (_lo(d, 5, 4), _f(3, 4), torch.tensor([3, 0, 2]))),
    "addcmul_index_copy_mixed": (lambda a, b, c: (torch.addcmul(a, b, c),
                                                  a.index_copy(0, torch.tensor([1, 0]), b)),
                          lambda d: (_f(2, 3), _lo(d, 2, 3), _f(2, 3))),
    "masked_select_nonzero_low": (lambda x, m: (x.masked_select(m > 0), torch.nonzero(m > 0),
                                                x[m > 0][:, None] @ x[:1, :1].float()),
                                  lambda d: (_lo(d, 3, 4), torch.randn(3, 4))),
    "ctc_loss_low_log_probs": (lambda x, t, il, tl: F.ctc_loss(x.log_softmax(-1), t, il, tl),
                               lambda d: (_lo(d, 6, 2, 5), torch.tensor([[1, 2], [3, 1]]),
                                          torch.tensor([6, 5]), torch.tensor([2, 1]))),
    "mha_module_low_x": (lambda x: _mha(x, x, x, need_weights=True),
                         lambda d: (_lo(d, 2, 3, 8),)),
    "gru_module_low_x": (lambda x: _gru(x), lambda d: (_lo(d, 3, 2, 4),)),
    "einsum_mixed": (lambda a, b: torch.einsum("ij,jk->ik", a, b),
                     lambda d: (_f(3, 4), _lo(d, 4, 2))),
    "prelu_group_norm_low_x": (lambda x, w, g, b: (F.prelu(x, w), F.group_norm(x, 2, g, b)),
                               lambda d: (_lo(d, 2, 4, 3), _f(1), _f(4), _f(4))),
    "conv_transpose2d_low_x": (lambda x, w: F.conv_transpose2d(x, w),
                               lambda d: (_lo(d, 1, 2, 3, 3), _f(2, 3, 2, 2))),
    "embedding_then_linear": (lambda i, e, w: F.linear(F.embedding(i, e), w),
                              lambda d: (torch.tensor([[1, 2]]), _f(5, 4), _f(3, 4))),
    "bce_nll_low": (lambda x, y, t: (F.binary_cross_entropy_with_logits(x, y),
                                     F.nll_loss(x, t)),
                    lambda d: (_lo(d, 3, 4), torch.rand(3, 4), torch.tensor([0, 3, 1]))),
    "norms_and_sorts_low": (lambda x: (x.norm(), x.var(0), x.mean(), x.topk(2).values,
                                       x.sort(-1).values), lambda d: (_lo(d, 3, 4),)),
    "addbmm_mixed": (lambda c, a, b: torch.addbmm(c, a, b),
                     lambda d: (_f(3, 2), _lo(d, 2, 3, 4), _f(2, 4, 2))),
    "chain_linear_gelu_linear": (lambda x, w1, w2: F.linear(F.gelu(F.linear(x, w1)), w2),
                                 lambda d: (_f(2, 4), _f(6, 4), _f(3, 6))),
}


def _run(fn, mode, dtype, inputs, region=True):
    """``fn`` (inside the region) eagerly or converted, then a backward outside: outputs,
    the inputs' gradients and the fallback warnings."""
    inputs = [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]

    def body(*xs):
        with torch.autocast("cpu", dtype=dtype):
            return fn(*xs)
    call = body if mode == "eager" else to_graph(body, strict=mode == "strict")
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        out = call(*inputs) if region else fn(*inputs)
    outs = out if isinstance(out, tuple) else (out,)
    loss = sum(o.float().sum() for o in outs if o.is_floating_point() and o.requires_grad)
    if isinstance(loss, torch.Tensor):
        loss.backward()
    grads = [t.grad for t in inputs]
    return outs, grads, [str(w.message) for w in rec if issubclass(w.category, FallbackWarning)]


def _bits(got, exp, what):
    assert len(got) == len(exp), what
    for i, (a, b) in enumerate(zip(got, exp)):
        if b is None:
            assert a is None, f"{what}[{i}]: {a} where eager has None"
            continue
        assert a is not None, f"{what}[{i}]: None where eager has a tensor"
        assert (a.dtype, a.shape) == (b.dtype, b.shape), \
            f"{what}[{i}]: {a.dtype}{tuple(a.shape)} != eager {b.dtype}{tuple(b.shape)}"
        assert a.requires_grad == b.requires_grad, f"{what}[{i}]: requires_grad"
        torch.testing.assert_close(a.detach(), b.detach(), rtol=0, atol=0, equal_nan=True,
                                   msg=lambda m: f"{what}[{i}]: not eager's bits: {m}")


def _same_as_eager(fn, dtype, make, modes=("default", "strict")):
    torch.manual_seed(0)
    inputs = make(dtype)
    exp_out, exp_grads, _ = _run(fn, "eager", dtype, inputs)
    for mode in modes:
        out, grads, fallbacks = _run(fn, mode, dtype, inputs)
        assert fallbacks == [], fallbacks
        _bits(out, exp_out, f"{mode} outputs")
        _bits(grads, exp_grads, f"{mode} grads")


@pytest.mark.parametrize("dtype", DT, ids=list(DT))
@pytest.mark.parametrize("name", CASES)
def test_op_under_autocast_equals_eager(name, dtype):
    fn, make = CASES[name]
    _same_as_eager(fn, DT[dtype], make)


def test_sdpa_mixed_dtypes_has_eagers_result_dtype_in_the_graph():
    """The node is the op run under autocast: its recorded dtype is eager's (bf16)."""
    g = to_graph(lambda q, k, v: _attend(q, k, v), strict=True)
    q, k, v = torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8)
    out = g(q, k, v.bfloat16())
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, _attend(q, k, v.bfloat16()))


def _attend(q, k, v):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return F.scaled_dot_product_attention(q, k, v)


def test_mixed_dtypes_autocast_cannot_reconcile_is_eagers_error():
    """An op that fails under autocast too (int and float matmul; ``mv``, in no autocast
    list, of float32 and bf16) raises eager's error."""
    def f(a, b):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return a @ b

    def g(a, b):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return torch.mv(a, b)
    for fn, a, b in ((f, torch.randn(2, 3), torch.ones(3, 2, dtype=torch.int64)),
                     (g, torch.randn(2, 3), torch.randn(3).bfloat16())):
        with pytest.raises(RuntimeError) as exp:
            fn(a, b)
        for strict in (False, True):
            with pytest.raises(RuntimeError) as got:
                to_graph(fn, strict=strict)(a, b)
            assert str(got.value).splitlines()[0] == str(exp.value).splitlines()[0]


# ----------------------------------------------------------------------- region spellings
def _spelled(ctx):
    def fn(x, w, v):
        with ctx():
            h = F.linear(x, w)                                  # bf16 / f16
            with torch.autocast("cpu", enabled=False):
                n = F.layer_norm(h.float(), (4,))               # float32: autocast off
            a = F.scaled_dot_product_attention(n[None], h[None].float(), v[None])
            return h, n, a, F.softmax(a, -1)
    return fn


@torch.autocast("cpu", dtype=torch.bfloat16)
def _decorated_helper(x, w):
    return F.linear(x, w)


SPELLINGS = {
    "torch_autocast": lambda: torch.autocast("cpu", dtype=torch.bfloat16),
    "amp_autocast_default_dtype": lambda: torch.amp.autocast("cpu"),
    "cpu_amp_autocast": lambda: _cpu_amp(dtype=torch.bfloat16),
    "float16": lambda: torch.autocast("cpu", dtype=torch.float16),
    "cache_disabled": lambda: torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False),
    "set_autocast_dtype_fp16": lambda: torch.autocast(device_type="cpu", dtype=torch.float16,
                                                      enabled=True),
}


@contextlib.contextmanager
def _cpu_amp(**kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)     # (deprecated spelling)
        ctx = torch.cpu.amp.autocast(**kw)
    with ctx:
        yield


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_region_spellings(spelling):
    fn = _spelled(SPELLINGS[spelling])
    _same_as_eager(fn, torch.bfloat16, lambda d: (_f(4, 4), _f(4, 4), _lo(d, 4, 4)))


def test_decorated_helper_and_default_autocast_dtype_change():
    """``@torch.autocast`` on a helper the converted code calls; and a changed default
    autocast dtype (``torch.set_autocast_dtype``) read by ``torch.amp.autocast("cpu")``:
    a new trace, eager's dtype."""
    def fn(x, w, v):
        h = _decorated_helper(x, w)
        with torch.amp.autocast("cpu"):
            return h, h.float() @ v
    _same_as_eager(fn, torch.bfloat16, lambda d: (_f(2, 4), _f(3, 4), _lo(d, 3, 2)))
    before = torch.get_autocast_dtype("cpu")
    try:
        torch.set_autocast_dtype("cpu", torch.float16)
        _same_as_eager(fn, torch.bfloat16, lambda d: (_f(2, 4), _f(3, 4), _lo(d, 3, 2)))
    finally:
        torch.set_autocast_dtype("cpu", before)


@pytest.mark.parametrize("dtype", DT, ids=list(DT))
def test_region_around_the_call(dtype):
    """Autocast opened by the caller around a converted call with mixed inputs."""
    def fn(q, k, v, w, b):
        a = F.scaled_dot_product_attention(q, k, v)
        return F.conv1d(a.flatten(0, 1), w, b)
    torch.manual_seed(0)
    inputs = (_f(1, 2, 4, 8), _f(1, 2, 4, 8), _lo(DT[dtype], 1, 2, 4, 8), _f(3, 4, 3),
              _lo(DT[dtype], 3))
    results = []
    for mode in ("eager", "default", "strict"):
        call = fn if mode == "eager" else to_graph(fn, strict=mode == "strict")
        xs = [t.detach().clone().requires_grad_() for t in inputs]
        with torch.autocast("cpu", dtype=DT[dtype]):
            out = call(*xs)
        out.float().sum().backward()
        results.append(((out,), [t.grad for t in xs]))
    for out, grads in results[1:]:
        _bits(out, results[0][0], "outputs")
        _bits(grads, results[0][1], "grads")


def test_backward_inside_the_call():
    """The loss's backward traced with the region: gradients bit for bit eager's."""
    torch.manual_seed(0)
    w1, w2 = _f(6, 4), _f(4, 6)

    def step(x, y):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = F.conv1d(x, w1[:, :, None]).transpose(1, 2)     # bf16 out
            h = F.linear(F.gelu(h), w2)
            loss = F.cross_entropy(h.flatten(0, 1), y)
        loss.backward()
        return loss, w1.grad, w2.grad
    x, y = torch.randn(2, 4, 5), torch.randint(0, 4, (10,))
    exp = step(x, y)
    exp = [t.clone() for t in exp]
    for mode in ("default", "strict"):
        w1.grad = w2.grad = None
        with warnings.catch_warnings():
            warnings.simplefilter("error", FallbackWarning)
            got = to_graph(step, strict=mode == "strict")(x, y)
        _bits(got, exp, mode)
    w1.grad = w2.grad = None


# ------------------------------------------------------------------- model-shaped blocks
def _rotate_half(x):
    return torch.cat((-x[..., x.shape[-1] // 2:], x[..., : x.shape[-1] // 2]), -1)


class _LlamaAttention(torch.nn.Module):
    """HF LLaMA's attention shape: bf16 projections, rotary embeddings whose float32 cos/sin
    leave q and k float32 while v stays bf16, then sdpa and the output projection."""

    def __init__(self, d=16, heads=2):
        super().__init__()
        self.heads, self.hd = heads, d // heads
        self.q, self.k, self.v, self.o = (torch.nn.Linear(d, d, bias=False) for _ in range(4))
        inv = 1.0 / (10000 ** (torch.arange(0, self.hd, 2).float() / self.hd))
        self.register_buffer("inv_freq", inv, persistent=False)

    def forward(self, x):
        b, t, _ = x.shape
        pos = torch.arange(t, dtype=torch.float32)
        with torch.autocast("cpu", enabled=False):      # HF computes rotary in float32
            freqs = pos[:, None] * self.inv_freq[None]
            emb = torch.cat((freqs, freqs), -1)
            cos, sin = emb.cos(), emb.sin()

        def heads(y):
            return y.view(b, t, self.heads, self.hd).transpose(1, 2)
        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        q = q * cos + _rotate_half(q) * sin             # float32 (bf16 * float32)
        k = k * cos + _rotate_half(k) * sin
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(a.transpose(1, 2).reshape(b, t, -1))


class _WhisperFrontEnd(torch.nn.Module):
    """Whisper's encoder stem: conv1 -> gelu -> conv2 (stride 2, fed conv1's bf16) -> gelu,
    plus float32 positions; Wav2Vec2's feature encoder is the same chain of conv1ds."""

    def __init__(self, mels=4, d=8, t=6):
        super().__init__()
        self.conv1 = torch.nn.Conv1d(mels, d, 3, padding=1)
        self.conv2 = torch.nn.Conv1d(d, d, 3, stride=2, padding=1)
        self.pos = torch.nn.Parameter(torch.randn(t // 2, d))
        self.norm = torch.nn.LayerNorm(d)

    def forward(self, x):
        h = F.gelu(self.conv1(x))
        h = F.gelu(self.conv2(h)).permute(0, 2, 1)
        return self.norm(h + self.pos)


@pytest.mark.parametrize("dtype", DT, ids=list(DT))
@pytest.mark.parametrize("block", [_LlamaAttention, _WhisperFrontEnd])
def test_model_blocks_train_like_eager(block, dtype):
    """Two steps (forward under autocast, backward, SGD) of each block: the losses,
    outputs and every parameter's gradient bit for bit eager's, nothing falling back."""
    torch.manual_seed(0)
    model = block()
    x = torch.randn(2, 6, 16) if block is _LlamaAttention else torch.randn(2, 4, 6)
    states = {}
    for mode in ("eager", "default", "strict"):
        m = block()
        m.load_state_dict(model.state_dict())
        opt = torch.optim.SGD(m.parameters(), lr=0.1)

        def step(x, m=m, opt=opt):
            with torch.autocast("cpu", dtype=DT[dtype]):
                out = m(x)
                loss = out.float().pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            return out, loss
        call = step if mode == "eager" else to_graph(step, strict=mode == "strict")
        with warnings.catch_warnings():
            warnings.simplefilter("error", FallbackWarning)
            outs = [call(x) for _ in range(2)]
        states[mode] = (outs, {k: v.clone() for k, v in m.state_dict().items()})
    for mode in ("default", "strict"):
        for i, (got, exp) in enumerate(zip(states[mode][0], states["eager"][0])):
            _bits(got, exp, f"{mode} step {i}")
        for k, v in states["eager"][1].items():
            assert torch.equal(states[mode][1][k], v), f"{mode}: parameter {k} differs"


_shared = torch.nn.Linear(6, 6)


def _siamese(x1, x2):
    z = _shared(x1) * _shared(x2)           # one weight cast by two ops of the caller's region
    z.float().sum().backward()
    return z, _shared.weight.grad


def test_callers_cast_cache_flag_is_part_of_the_signature():
    """Under the caller's region torch's cast cache spans the graph's ops as eager's; with
    ``cache_enabled=False`` each op casts anew. A graph traced with one flag must not
    serve the other (it did: gradients 8e-3 apart, silently)."""
    g = to_graph(_siamese, strict=True)
    torch.manual_seed(0)
    x1, x2 = torch.randn(4, 6), torch.randn(4, 6)
    for cache in (True, False, True, False):
        results = []
        for f in (_siamese, g):
            _shared.weight.grad = _shared.bias.grad = None
            with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=cache):
                z, grad = f(x1, x2)
            results.append((z, grad.clone()))
        _bits(results[1], results[0], f"cache_enabled={cache}")
    assert g.cache_info().traces == 2, g.cache_info()
    _shared.weight.grad = _shared.bias.grad = None


# ------------------------------------------------- autocast's cast cache: one cast shared
_w = torch.nn.Linear(6, 6)
_w2 = torch.nn.Linear(6, 6)


def _twice(x1, x2):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        z = _w(x1) * _w(x2)                 # one cached cast of the weight in eager
    return z


def _twice_then_loop(x1, x2):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        z, n = _w(x1), torch.zeros(())
        while (z.float().abs().sum() < 1e4) & (n < 3):
            z = _w(z) * 2                       # the cast made before the loop
            n = n + 1
    return z


def _twice_in_branch(x1, x2):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        z = _w(x1)
        if z.float().sum() > 0:
            z = z * F.linear(x2, _w.weight)
        else:
            z = z - F.linear(x2 * 2, _w.weight)
        return z + _w(x2)


def _nested_disabled(x1, x2):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        z = _w(x1)
        with torch.autocast("cpu", enabled=False):
            y = _w(x2.float())                  # float32: no cast, the weight as it is
        return z.float() * y + _w(x1).float()


def _other_dtype_inside(x1, x2):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        z = _w(x1)
        with torch.autocast("cpu", dtype=torch.float16):
            return z, _w(x2)        # eager's cache hands the bf16 cast to a float16 op


def test_a_cached_cast_of_another_dtype_is_eagers_error():
    """Eager's cache gives the bf16 cast to the float16 region's linear, which raises: the
    converted call falls back and raises it too (it computed a value before)."""
    x1, x2 = torch.randn(4, 6), torch.randn(4, 6)
    with pytest.raises(RuntimeError) as exp:
        _other_dtype_inside(x1, x2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        with pytest.raises(RuntimeError) as got:
            to_graph(_other_dtype_inside)(x1, x2)
    assert str(got.value) == str(exp.value)


@pytest.mark.parametrize("fn", [_twice, _twice_then_loop, _twice_in_branch,
                                _nested_disabled])
def test_a_weight_cast_by_several_ops_of_one_region_converts_exactly(fn):
    """Eager casts the weight once per region (autocast's cache) and its gradients sum in
    the low dtype: the graph shares one cast node, bit for bit, gradients too."""
    results = {}
    for mode in ("eager", "default", "strict"):
        call = fn if mode == "eager" else to_graph(fn, strict=mode == "strict")
        outs = []
        for seed in (0, 1):
            torch.manual_seed(seed)
            x1, x2 = torch.randn(4, 6), torch.randn(4, 6)
            for p in (*_w.parameters(), *_w2.parameters()):
                p.grad = None
            with warnings.catch_warnings():
                warnings.simplefilter("error", FallbackWarning)
                z = call(x1, x2)
            z.float().square().sum().backward()
            outs.append((z, _w.weight.grad.clone(), _w.bias.grad.clone()))
        results[mode] = outs
    for mode in ("default", "strict"):
        for got, exp in zip(results[mode], results["eager"]):
            _bits(got, exp, mode)


def test_a_second_cast_autocast_may_not_share_falls_back_naming_its_line():
    """A weight cast by a linear, then by an op that is not one of autocast's single
    low-precision ops (``chain_matmul``: the graph cannot hand it the shared cast) falls
    back naming that line (strict: ConversionError)."""
    import inspect

    def fn(x1, x2):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            z = _w(x1)
            return z, torch.chain_matmul(_w.weight, x2.T)   # CAST LINE
    lines, first = inspect.getsourcelines(fn)
    line = first + next(i for i, text in enumerate(lines) if "# CAST LINE" in text)
    torch.manual_seed(0)
    x1, x2 = torch.randn(4, 6), torch.randn(4, 6)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        got = to_graph(fn)(x1, x2)
    messages = [str(w.message) for w in rec if issubclass(w.category, FallbackWarning)]
    assert len(messages) == 1 and f"test_autocast_ops.py:{line}:" in messages[0] and \
        "cached cast" in messages[0], messages
    _bits(got, fn(x1, x2), "fallback")
    from transpiler import ConversionError
    with pytest.raises(ConversionError, match="cached cast"):
        to_graph(fn, strict=True)(x1, x2)


# ------------------------------------------------------------- Hugging Face models, fp16
def _fp16_step(model, optimizer, scheduler, micro_batches, hf=True):
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(**micro_batches[0], return_dict=False)[0]
    loss.backward()
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()
    return loss.detach().float(), torch.zeros(())


@pytest.mark.parametrize("name", ["llama_lm", "wav2vec2_ctc"])
def test_hf_models_train_under_float16_autocast_as_eager(name):
    """Three optimizer steps of tiny LLaMA (rotary: float32 q, k and an fp16 v into sdpa,
    attention dropout) and Wav2Vec2 (conv feature encoder, CTC loss) under CPU float16
    autocast, the whole step converted: nothing falls back, losses, gradients, parameters,
    optimizer state and the RNG state after equal eager's."""
    import importlib.util
    if importlib.util.find_spec("transformers") is None:
        pytest.skip("needs the 'models' extra")
    from tests.training import fresh_eyes_hf as H
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        eager, mine = H.run_pair(H.CASES[name], "step", step=_fp16_step)
    assert mine.fallbacks == [] and mine.converted.cache_info().traces == 1, mine.fallbacks
    assert H.compare(eager, mine) == []


_lstm = torch.nn.LSTM(4, 6, batch_first=True)


def _packed_lstm(x):
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
    with torch.autocast("cpu", dtype=torch.bfloat16):
        p = pack_padded_sequence(x, [3, 2], batch_first=True)     # PACK LINE
        return pad_packed_sequence(_lstm(p)[0], batch_first=True)[0]


def test_an_op_fake_tensors_size_otherwise_under_autocast_falls_back_naming_its_line():
    """``_pack_padded_sequence`` sized from lengths the graph fixes: on fake tensors under
    autocast it comes out with other sizes and a float batch_sizes; rather than trust
    that, the call falls back naming the line (OPEN: packed RNNs under autocast)."""
    import inspect
    lines, first = inspect.getsourcelines(_packed_lstm)
    line = first + next(i for i, text in enumerate(lines) if "# PACK LINE" in text)
    x = torch.randn(2, 3, 4)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        got = to_graph(_packed_lstm)(x)
    messages = [str(w.message) for w in rec if issubclass(w.category, FallbackWarning)]
    assert len(messages) == 1 and f"test_autocast_ops.py:{line}:" in messages[0] and \
        "could not be inferred" in messages[0], messages
    _bits((got,), (_packed_lstm(x),), "fallback")
