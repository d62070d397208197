"""Crashes become conversions or clean fallbacks: what used to raise an internal error
while tracing either converts (checked against eager) or falls back (default mode: eager
and one FallbackWarning; strict: ConversionError, never anything else for a program eager
runs). An error the eager program raises itself is raised as eager raises it."""
import warnings

import pytest
import torch

from e2e_helpers import _clone, assert_same, check
from transpiler import ConversionError, FallbackWarning, to_graph


def run_default(fn, *args):
    """(result, FallbackWarnings) of a default-mode call."""
    g = to_graph(fn)
    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter("always")
        got = g(*args)
    return got, [w for w in ws if issubclass(w.category, FallbackWarning)]


# --------------------------------------------------------------- tuples with None outputs
def _encoder_layer(batch_first, norm_first=False):
    torch.manual_seed(0)
    return torch.nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=batch_first,
                                            norm_first=norm_first)


def _inputs(batch_first, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 5, 16, generator=g) if batch_first else torch.randn(5, 2, 16, generator=g)
    mask = torch.zeros(2, 5, dtype=torch.bool)
    mask[1, 3:] = True
    return x, mask


def _same_module_call(module, args_list, kwargs_list):
    g = to_graph(module, strict=True)
    for args, kwargs in zip(args_list, kwargs_list):
        exp = module(*_clone(args), **kwargs)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            got = g(*_clone(args), **kwargs)
        assert_same(got, exp)
    return g


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("norm_first", [True, False])
def test_transformer_encoder_layer(batch_first, train, norm_first):
    layer = _encoder_layer(batch_first, norm_first).train(train)
    inputs = [_inputs(batch_first, s) for s in (1, 2)]
    _same_module_call(layer, [(x,) for x, _ in inputs],
                      [{"src_key_padding_mask": m} for _, m in inputs])
    _same_module_call(layer, [(x,) for x, _ in inputs], [{}, {}])


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("train", [True, False])
def test_transformer_encoder(batch_first, train):
    encoder = torch.nn.TransformerEncoder(_encoder_layer(batch_first), 2,
                                          enable_nested_tensor=False).train(train)
    inputs = [_inputs(batch_first, s) for s in (3, 4)]
    _same_module_call(encoder, [(x,) for x, _ in inputs],
                      [{"src_key_padding_mask": m} for _, m in inputs])


def test_transformer_encoder_gradients():
    encoder = torch.nn.TransformerEncoder(_encoder_layer(True), 2, enable_nested_tensor=False)
    x, mask = _inputs(True, 5)
    g = to_graph(encoder, strict=True)
    xs = [x.clone().requires_grad_(), x.clone().requires_grad_()]
    outs = [encoder(xs[0], src_key_padding_mask=mask), g(xs[1], src_key_padding_mask=mask)]
    grads = [torch.autograd.grad(o.square().sum(), [xi, encoder.layers[0].linear1.weight])
             for o, xi in zip(outs, xs)]
    assert_same(outs[1], outs[0])
    for a, b in zip(grads[1], grads[0]):
        assert_same(a, b)


@pytest.mark.parametrize("need_weights", [True, False])
def test_multihead_attention_outputs(need_weights):
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True)

    def f(q, k):
        out, weights = mha(q, k, k, need_weights=need_weights)
        if out.sum() > 0:
            out = out * 2
        return out, weights

    check(f, (torch.randn(2, 3, 8), torch.randn(2, 4, 8)),
          (torch.randn(2, 3, 8) + 1, torch.randn(2, 4, 8)))
    assert to_graph(f, strict=True)(torch.randn(2, 3, 8), torch.randn(2, 4, 8))[1] is None \
        if not need_weights else True


def test_multihead_attention_none_weights_used_in_python():
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(8, 2)

    def f(q):
        out, weights = mha(q, q, q, need_weights=False)
        return out + 1 if weights is None else out - 1

    check(f, (torch.randn(3, 2, 8),), (torch.randn(3, 2, 8),))


# --------------------------------------------------------------- the error policy
def test_user_shape_error_is_raised_as_eager_raises_it():
    def f(x):
        return x @ torch.ones(5, 2)

    for strict in (False, True):
        with pytest.raises(RuntimeError) as info:
            to_graph(f, strict=strict)(torch.ones(2, 3))
        assert not isinstance(info.value, ConversionError)
        with pytest.raises(RuntimeError):
            f(torch.ones(2, 3))


def test_user_python_error_is_raised_as_eager_raises_it():
    def f(x, n):
        if n > 2:
            raise ValueError("n too big")
        return x + n

    for strict in (False, True):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FallbackWarning)
            with pytest.raises(ValueError, match="n too big"):
                to_graph(f, strict=strict)(torch.ones(2), 3)
        assert_same(to_graph(f, strict=strict)(torch.ones(2), 1), f(torch.ones(2), 1))


def test_error_in_a_branch_eager_may_skip_is_not_raised():
    """Both branches of a tensor ``if`` are traced; an op that fails in the one eager does
    not take must not fail the call: default mode falls back, strict raises ConversionError."""
    def f(x, w):
        if x.sum() > 100:
            y = x @ w           # shapes disagree: eager never gets here for these inputs
        else:
            y = x + 1
        return y

    x, w = torch.ones(2, 3), torch.ones(5, 2)
    got, ws = run_default(f, x, w)
    assert_same(got, f(x, w))
    assert len(ws) == 1
    with pytest.raises(ConversionError):
        to_graph(f, strict=True)(x, w)


def test_internal_error_falls_back_or_is_a_conversion_error(monkeypatch):
    """An error of ours while tracing (here: shape inference failing where the op works on
    real tensors) falls back in default mode and is a ConversionError in strict mode."""
    import runtime.autocast_ops as symbolic     # (symbolic's tracing infers through it)
    real_infer = symbolic.infer

    def broken(func, args, kwargs):
        if getattr(func, "__name__", "") == "tanh":
            raise IndexError("internal: not the user's")
        return real_infer(func, args, kwargs)
    monkeypatch.setattr(symbolic, "infer", broken)

    def f(x):
        return torch.tanh(x) + 1

    x = torch.randn(3)
    got, ws = run_default(f, x)
    assert_same(got, f(x))
    assert len(ws) == 1 and "test_fidelity_crashes.py" in str(ws[0].message)
    with pytest.raises(ConversionError, match="IndexError"):
        to_graph(f, strict=True)(x)


# --------------------------------------------------------------- nested objects in branches
class Obj:
    pass


def _holder(x):
    a = Obj()
    a.b = Obj()
    a.b.c = Obj()
    a.b.t = x
    a.b.c.t = x * 2
    return a


def nested_attr(x):
    a = _holder(x)
    if x.sum() > 1:
        a.b.t = a.b.t - 1
    return a.b.t


def nested_attr_two_levels(x):
    a = _holder(x)
    if x.sum() > 1:
        a.b.c.t = a.b.c.t - 1
    else:
        a.b.c.t = a.b.c.t * 3
    return a.b.c.t + a.b.t


def object_in_dict(x):
    o = Obj()
    o.t = x
    d = {"k": o, "n": 1}
    if x.sum() > 1:
        d["k"].t = d["k"].t - 1
    return d["k"].t, o.t


def object_in_list(x):
    o = Obj()
    o.t = x
    lst = [o, x]
    if x.mean() > 0:
        lst[0].t = lst[0].t * 3
    return lst[0].t + o.t


def object_in_list_while(x):
    o = Obj()
    o.t = x
    lst = [o]
    i = 0
    while x.sum() > i:
        lst[0].t = lst[0].t + 1
        i += 1
    return lst[0].t


def nested_attr_for_rows(x):
    a = _holder(x[0])
    for r in x:
        if r.sum() > 0:
            a.b.t = a.b.t + r
    return a.b.t


@pytest.mark.parametrize("fn", [nested_attr, nested_attr_two_levels, object_in_dict,
                                object_in_list, object_in_list_while, nested_attr_for_rows])
def test_nested_object_state(fn):
    inputs = [(torch.ones(3),), (torch.zeros(3),), (torch.tensor([2.0, -1.0, 0.5]),)]
    check(fn, *inputs)
    for args in inputs:
        got, ws = run_default(fn, *_clone(args))
        assert not ws
        assert_same(got, fn(*_clone(args)))


def test_nested_object_gradients():
    x1 = torch.tensor([2.0, -1.0, 0.5], requires_grad=True)
    x2 = x1.detach().clone().requires_grad_()
    g = to_graph(nested_attr_two_levels, strict=True)
    out1, out2 = nested_attr_two_levels(x1), g(x2)
    assert_same(out2, out1)
    (gx1,), (gx2,) = torch.autograd.grad(out1.sum(), [x1]), torch.autograd.grad(out2.sum(), [x2])
    assert_same(gx2, gx1)


def test_argument_objects_mutated_in_a_branch_convert_and_keep_real_tensors():
    """The caller's object (reached through an argument, one or two levels down) mutated
    in a tensor branch: the cond's output is written back (runtime.argument_objects), and
    the object holds real tensors, as eager."""
    def one_level(a, x):
        if x.sum() > 1:
            a.t = a.t - x
        return x

    def two_levels(a, x):
        if x.sum() > 1:
            a.b.t = a.b.t - x
        return x

    for fn in (one_level, two_levels):
        for x in (torch.ones(3), torch.zeros(3)):
            a1, a2 = _holder(torch.ones(3)), _holder(torch.ones(3))
            a1.t, a2.t = torch.ones(3), torch.ones(3)
            fn(a1, x)
            got, ws = run_default(fn, a2, x)
            assert not ws, [str(w.message) for w in ws]
            assert_same(a2.t, a1.t)
            assert_same(a2.b.t, a1.b.t)
            assert type(a2.b.c.t) is torch.Tensor


# --------------------------------------------------------------- tensor-dependent recursion
def countdown(x):
    if x.sum() > 0:
        return countdown(x - 1)   # the recursive call: its depth depends on x
    return x


def test_tensor_recursion_is_a_clean_fallback():
    import inspect
    line = inspect.getsourcelines(countdown)[1] + 2
    x = torch.tensor([2.0, 1.0])
    got, ws = run_default(countdown, x)
    assert_same(got, countdown(x))
    assert len(ws) == 1 and f"test_fidelity_crashes.py:{line}" in str(ws[0].message)
    with pytest.raises(ConversionError, match="recursi") as info:
        to_graph(countdown, strict=True)(x)
    assert info.value.lineno == line


def test_python_recursion_still_converts():
    def power(x, n):
        if n == 0:
            return x
        y = power(x, n - 1)
        if y.sum() > 10:
            y = y / 2
        return y * 2

    check(power, (torch.ones(3), 4), (torch.full((3,), 3.0), 4))


# --------------------------------------------------------------- sizes known at run time
def grow_view(ids, done):
    h = ids.float()
    while not done:
        ids = torch.cat([ids, ids[:, -1:] + 1], 1)
        h = ids.float().view(-1, ids.size()[-1])
        done = h.sum() > 40
    return ids, h


def grow_reshape_expand(ids, done):
    h = ids.float()
    while not done:
        ids = torch.cat([ids, ids[:, -1:] * 2], 1)
        b, t = ids.size()
        h = ids.float().reshape(b * t).expand(2, -1) + torch.zeros(t * b)
        done = ids.sum() > 30
    return h


def grow_causal_mask(ids, done):
    """GPT-2's attention: a causal mask the size of the sequence, built every step."""
    w = ids.float()
    while not done:
        ids = torch.cat([ids, ids[:, -1:] + 1], 1)
        t = ids.shape[1]
        mask = torch.ones(t, t).tril().view(1, t, t)
        pos = torch.arange(t)
        w = (ids.float().unsqueeze(1) * mask).sum(-1) + pos
        done = w.sum() > 60
    return w, ids.new_zeros(ids.size(0), ids.size(1) - 1)


def selected_sizes(x):
    y = x[x > 0]
    n = y.size(0)
    z = torch.zeros(n, 2) + y.view(-1, 1)
    return z.reshape(-1, n), torch.arange(n - 1), y.new_ones(n).cumsum(0)


@pytest.mark.parametrize("fn", [grow_view, grow_reshape_expand, grow_causal_mask])
def test_run_time_sizes_in_a_tensor_while(fn):
    inputs = [(torch.ones(2, 2, dtype=torch.long), torch.tensor(False)),
              (torch.full((3, 1), 2, dtype=torch.long), torch.tensor(False)),
              (torch.ones(2, 3, dtype=torch.long), torch.tensor(True))]
    check(fn, *inputs)


def test_run_time_sizes_of_a_data_dependent_shape():
    check(selected_sizes, (torch.tensor([1.0, -2.0, 3.0, 4.0]),), (torch.tensor([-1.0, 2.0]),),
          (torch.tensor([5.0, 6.0, 7.0, 8.0]),))


def test_run_time_size_gradients():
    def f(x, y):
        i = torch.tensor(0)
        while i < y.sum():
            x = torch.cat([x, x[-1:] * 2], 0)
            i = i + 1
        return x.view(-1, x.size(0)).sum() * x.reshape(x.size(0), 1).square().sum()

    for steps in (1, 3):
        x1 = torch.tensor([0.5, -1.0], requires_grad=True)
        x2 = x1.detach().clone().requires_grad_()
        y = torch.tensor(float(steps))
        out1, out2 = f(x1, y), to_graph(f, strict=True)(x2, y)
        assert_same(out2, out1)
        assert_same(torch.autograd.grad(out2, x2)[0], torch.autograd.grad(out1, x1)[0])


def test_transformer_encoder_nested_fast_path_converts():
    """Under no_grad in eval, the encoder asks whether the padding mask is left-aligned (a
    question about data, in torch's own Python): the call now runs a staged form of it
    (runtime/encoder_nested_path.py) and gives eager's zeros at padded positions; it used
    to fall back here and, with to_graph(encoder), to differ silently."""
    torch.manual_seed(0)
    encoder = torch.nn.TransformerEncoder(_encoder_layer(True), 2).eval()
    x, mask = _inputs(True, 6)
    with torch.no_grad():
        exp = encoder(x, src_key_padding_mask=mask)
        got, ws = run_default(lambda x, m: encoder(x, src_key_padding_mask=m), x, mask)
        assert_same(got, exp)
        assert not ws
        strict = to_graph(lambda x, m: encoder(x, src_key_padding_mask=m), strict=True)
        assert_same(strict(x, mask), exp)
        assert torch.equal(strict(x, mask)[mask], torch.zeros_like(exp[mask]))


class _CausalSelfAttention(torch.nn.Module):
    """GPT-2's attention: sizes read from the input, a causal buffer sliced to them."""

    def __init__(self, channels=8, heads=2, block=16):
        super().__init__()
        self.c_attn = torch.nn.Linear(channels, 3 * channels)
        self.c_proj = torch.nn.Linear(channels, channels)
        self.heads = heads
        self.register_buffer("bias", torch.tril(torch.ones(block, block)).view(1, 1, block, block))

    def forward(self, x):
        import math
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        y = (torch.softmax(att, dim=-1) @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class _Generator(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb = torch.nn.Embedding(10, 8)
        self.attn = _CausalSelfAttention()
        self.head = torch.nn.Linear(8, 10)

    def forward(self, ids, limit):
        done = torch.tensor(False)
        score = torch.zeros(())
        while not done:
            h = self.attn(self.emb(ids))
            logits = self.head(h[:, -1, :])
            nxt = logits.argmax(-1, keepdim=True)
            score = score + logits.max(-1).values.sum()
            ids = torch.cat([ids, nxt], 1)
            done = (ids.size(1) >= limit) | (nxt == 3).all()
        return ids, score


@pytest.mark.parametrize("grad", [False, True])
def test_greedy_generation_with_causal_attention(grad):
    model = _Generator().eval()
    inputs = [(torch.tensor([[1, 2]]), torch.tensor(9)),
              (torch.tensor([[4, 5], [6, 7]]), torch.tensor(6)),
              (torch.tensor([[3, 3, 3]]), torch.tensor(4))]
    with torch.set_grad_enabled(grad):
        check(model, *inputs)


def _positives(x):
    y = x[x > 0]
    return y, y.size(0)


def sized_full(x):
    y, t = _positives(x)
    return torch.full((t, 2), 1.5) + y.sum()


def sized_repeat_pad(x):
    y, t = _positives(x)
    return torch.nn.functional.pad(y.repeat(t), (0, t))


def sized_narrow_slice(x):
    y, t = _positives(x)
    return x.narrow(0, 0, t) * y + torch.zeros(t)[t - 1:]


def sized_eye_linspace(x):
    y, t = _positives(x)
    return torch.eye(t) * torch.linspace(0, 1, t) + y.reshape(t, 1) @ y.reshape(1, t)


def sized_arithmetic(x):
    y, t = _positives(x)
    return torch.zeros(t + 1, t * 2).sum(0) + torch.arange(t, 2 * t).sum(), y.new_full((t,), 2.0)


@pytest.mark.parametrize("fn", [sized_full, sized_repeat_pad, sized_narrow_slice,
                                sized_eye_linspace, sized_arithmetic])
def test_run_time_size_spellings(fn):
    check(fn, (torch.tensor([1.0, -2.0, 3.0, 4.0]),), (torch.tensor([5.0, 6.0, -1.0]),))
