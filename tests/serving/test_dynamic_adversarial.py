"""Adversarial sweeps for automatic dynamic shapes (issue 14 item 2).

Each program is called with a sequence of sizes (batch 2, 3, 5, 1, 7, 0; sequence lengths;
image H/W) and compared with eager at EVERY call: values, dtypes, shapes, containers, the
Python values returned (``x.shape[0]``, ``len(x)``, ``x.size()``, strings), argument
mutation and, for some, gradients. Default mode (a FallbackWarning is allowed, wrong values
never), strict mode (ConversionError is allowed, wrong values and other errors never) and
strict mode with ``dynamic=True`` (every dim dynamic from the first call).
``cache_info().traces`` must stay small where the sizes can be dynamic (``traces=``) and at
most one per signature otherwise.

Faults still open are marked with a strict xfail naming their class (see the report of
helper h9); written without reading tests/serving/test_dynamic_shapes.py.
"""
import copy
import math
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from transpiler import ConversionError, FallbackWarning, to_graph
from tests.e2e.e2e_helpers import assert_same

BATCH = (2, 3, 5, 1, 7, 0, 4)
BATCH_NZ = (2, 3, 5, 1, 7, 4)
CASES = []


def case(make, sizes=BATCH, traces=3, grad=False, module=False, xfail=None):
    """Register a program: ``make(size)`` gives the argument tuple of one call (``size``
    any object from ``sizes``); ``traces``: the most traces allowed over the sweep when
    nothing fell back, besides one per call with a varying size 0 or 1 (None: one per
    distinct signature); ``module``: the program is a
    factory of an nn.Module (eager and converted get their own copies); ``xfail``: a
    reason (both modes) or {mode: reason}."""
    def deco(fn):
        for mode in ("default", "strict", "dynamic"):
            reason = xfail.get(mode) if isinstance(xfail, dict) else xfail
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            CASES.append(pytest.param(fn, make, sizes, traces, grad, module, mode,
                                      id=f"{fn.__name__}-{mode}", marks=marks))
        return fn
    return deco


def _clone(v, grad=False):
    if isinstance(v, torch.Tensor):
        c = v.detach().clone()
        if grad and c.is_floating_point():
            c.requires_grad_(True)
        return c
    if isinstance(v, (tuple, list)):
        return type(v)(_clone(x, grad) for x in v)
    if isinstance(v, dict):
        return {k: _clone(x, grad) for k, x in v.items()}
    return v


def _leaves(v):
    if isinstance(v, torch.Tensor):
        return [v]
    if isinstance(v, (tuple, list)):
        return [t for x in v for t in _leaves(x)]
    if isinstance(v, dict):
        return [t for x in v.values() for t in _leaves(x)]
    return []


def _backward(out):
    loss = sum(t.float().sum() for t in _leaves(out) if t.requires_grad)
    if isinstance(loss, torch.Tensor):
        loss.backward()


def _run(fn, args, grad):
    """(result or exception, grads of the float arguments)."""
    try:
        out = fn(*args)
    except ConversionError:
        raise
    except Exception as e:  # noqa: BLE001 (eager's error is the expected answer)
        return e, None
    if grad:
        _backward(out)
        return out, [None if t.grad is None else t.grad.clone() for t in _leaves(args)]
    return out, None


@pytest.mark.parametrize("fn, make, sizes, traces, grad, module, mode", CASES)
def test_sweep(fn, make, sizes, traces, grad, module, mode):
    torch.manual_seed(0)
    strict = mode != "default"
    options = {"dynamic": True} if mode == "dynamic" else {}
    if module:
        eager_m = fn()
        eager = eager_m
        conv_m = copy.deepcopy(eager_m)
        g = to_graph(conv_m, strict=strict, **options)
    else:
        eager, g = fn, to_graph(fn, strict=strict, **options)
    fell_back, refused, signatures, calls = False, 0, set(), []
    for size in sizes:
        args = make(size)
        calls.append([tuple(t.shape) for t in _leaves(args)])
        signatures.add(tuple((tuple(t.shape), t.dtype) for t in _leaves(args)))
        a_eager, a_conv = _clone(args, grad), _clone(args, grad)
        exp, exp_grads = _run(eager, a_eager, grad)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                got, got_grads = _run(g, a_conv, grad)
            except ConversionError:
                assert strict, "ConversionError in default mode"
                refused += 1
                continue
        if any(issubclass(w.category, FallbackWarning) for w in caught):
            fell_back = True
        where = f"{fn.__name__} at size {size!r}"
        if isinstance(exp, Exception):
            assert isinstance(got, type(exp)), \
                f"{where}: eager raised {type(exp).__name__}: {exp}; converted gave {got!r}"
            continue
        assert not isinstance(got, Exception), \
            f"{where}: eager ran; converted raised {type(got).__name__}: {got}"
        assert_same(got, exp, where)
        assert_same(a_conv, a_eager, where + " (arguments after the call)")
        if grad:
            for i, (a, b) in enumerate(zip(got_grads, exp_grads)):
                assert (a is None) == (b is None), f"{where}: grad {i} presence"
                if b is not None:
                    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
            if module:
                for (name, p), q in zip(eager_m.named_parameters(), conv_m.parameters()):
                    if p.grad is not None:
                        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5,
                                                   msg=f"{where}: grad of {name}")
                eager_m.zero_grad()
                conv_m.zero_grad()
    if module:
        for (name, b1), b2 in zip(eager_m.named_buffers(), conv_m.buffers()):
            assert_same(b2, b1, f"{fn.__name__}: buffer {name}")
    info = g.cache_info()
    assert info.traces <= len(signatures), f"{fn.__name__}: {info}"
    if traces is not None and not fell_back and not refused:
        assert info.traces <= traces + _specialized(calls), f"{fn.__name__}: {info}"


def _specialized(calls):
    """How many distinct calls have a varying dim of size 0 or 1 (those stay static)."""
    varying = {(i, d) for c in calls for i, shape in enumerate(c) for d in range(len(shape))
               if len({len(k[i]) for k in calls}) == 1 and len({k[i][d] for k in calls}) > 1}
    return len({tuple(map(tuple, c)) for c in calls
                if any(c[i][d] in (0, 1) for i, d in varying)})


def rand(*shape):
    return torch.randn(*shape)


# ---------------------------------------------------------------- sizes used as Python ints


@case(lambda n: (rand(n, 2, 3),))
def view_by_size(x):
    n = x.shape[0]
    return x.view(n, -1) * 2


@case(lambda n: (rand(n, 4, 3),))
def reshape_by_size(x):
    return x.reshape(x.size(0), 2, -1).sum(-1)


@case(lambda n: (rand(3, n),), sizes=(2, 3, 5, 1, 7, 0, 9))
def arange_of_dim1(x):
    return x * torch.arange(x.shape[1]), torch.arange(x.shape[1])


@case(lambda n: (rand(n, 5),))
def zeros_n_by_3(x):
    n = x.shape[0]
    return torch.zeros(n, 3) + x[:, :3], torch.ones(n, dtype=torch.int64)


@case(lambda n: (rand(n, 4),), traces=None)
def range_over_rows(x):
    acc = torch.zeros(4)
    for i in range(x.shape[0]):
        acc = acc + x[i] * i
    return acc


@case(lambda n: (rand(3, n),), sizes=(2, 3, 4, 5, 8, 9, 1, 0))
def slice_half_width(x):
    return x[:, : x.shape[1] // 2] * 3


@case(lambda n: (rand(n, 4),), sizes=BATCH_NZ)
def last_row(x):
    n = x.shape[0]
    return x[n - 1], x[-1] + x[0]


@case(lambda n: (rand(n, 4),))
def size_times_two_returned(x):
    return x.shape[0] * 2, x.sum(), x.shape[0] - 1, -x.shape[0]


@case(lambda n: (rand(n, 4),), sizes=(2, 3, 5, 6, 4, 7, 1, 9), traces=None)
def python_branch_on_size(x):
    if x.shape[0] > 4:
        return x * 2
    return x - 1


@case(lambda n: (rand(n, 4),), sizes=(2, 1, 3, 5, 1, 6))
def squeeze_when_one(x):
    if x.size(0) == 1:
        return x.squeeze(0)
    return x.mean(0)


@case(lambda n: (rand(n, 2),), sizes=(2, 3, 5, 1, 7, 4, 9), traces=None)
def max_of_size(x):
    m = max(x.shape[0], 3)
    return torch.ones(m) * x.sum(), m


@case(lambda d: (rand(2, 3, d),), sizes=(4, 8, 16, 5, 9), traces=None)
def attention_scale_sqrt(x):
    return x @ x.transpose(-1, -2) / math.sqrt(x.shape[-1])


@case(lambda n: (rand(n, 3),), sizes=(2, 3, 5, 4, 7, 1, 0, 8))
def int_of_true_division(x):
    h = int(x.shape[0] / 2)
    return x[:h].sum(0), x[h:] * 2, h


@case(lambda n: (rand(n, 2),), sizes=(3, 6, 7, 8, 4, 9, 12), traces=None)
def divmod_of_size(x):
    q, r = divmod(x.shape[0], 3)
    return x[: q * 3].view(q, 3, -1).sum(1), r, q


@case(lambda n: (rand(n, 2),), sizes=(2, 3, 5), traces=None)
def shape_in_fstring(x):
    return x * 2, f"shape={tuple(x.shape)}", str(x.shape), repr(x.size(0))


@case(lambda n: (rand(n, 3), rand(n, 2)), sizes=(2, 3, 5, 1, 7))
def assert_equal_batches(x, y):
    assert x.shape[0] == y.shape[0], "batch mismatch"
    return x.sum(1) + y.sum(1)


@case(lambda n: (rand(n, 3), rand(n + 1 if n == 5 else n, 2)), sizes=(2, 3, 5, 4))
def assert_equal_batches_fails(x, y):
    assert x.shape[0] == y.shape[0], "batch mismatch"
    return x.sum(1) + y.sum(1)


@case(lambda n: (rand(n, 3),))
def shapes_in_containers(x):
    return {"n": x.shape[0], "shape": list(x.shape), "size": x.size(), "t": x + 1}, [x.size(0)]


@case(lambda n: (rand(n, 3),))
def len_numel_dim(x):
    return len(x), x.numel(), x.dim(), x.size(), x * len(x), x.shape[-1] * x.shape[0]


@case(lambda n: (rand(n, 3),), sizes=(2, 3, 5, 7, 4))
def size_as_float_scale(x):
    return x / x.shape[0], x.sum() / float(x.numel()), x.shape[0] / 2


@case(lambda n: (rand(n, 3),), sizes=(2, 3, 5, 7, 4))
def size_compared_tensor(x):
    n = torch.tensor(x.shape[0])
    return n * x.sum(), (x.shape[0] == n), torch.full((2,), x.shape[0])


# ---------------------------------------------------------------- broadcasting


@case(lambda n: (rand(n, 4), rand(1 if n % 2 else n, 4)), sizes=(2, 4, 3, 6, 5, 8, 1, 7))
def broadcast_one_or_n(x, y):
    return x + y, (x * y).sum(0)


@case(lambda n: (rand(n, 4), rand(1, 4)))
def expand_to_batch(x, y):
    return y.expand(x.shape[0], -1) + x, y.expand_as(x)


@case(lambda n: (rand(n, 4), rand(1, 4)))
def repeat_to_batch(x, y):
    return y.repeat(x.shape[0], 2), x.repeat(2, 1)


@case(lambda n: (rand(n, 4),), sizes=(2, 3, 5, 4, 7, 1, 9))
def cat_with_own_half(x):
    return torch.cat([x, x[: x.shape[0] // 2]], 0)


@case(lambda k: (rand(3, k), rand(k, 5)), sizes=(2, 3, 5, 1, 7, 0, 4))
def matmul_related_dims(x, y):
    return x @ y, torch.cat([x, y.T], 0).shape


@case(lambda nm: (rand(nm[0], 4), rand(nm[1], 4)),
      sizes=((2, 2), (3, 3), (5, 5), (5, 1), (4, 1), (3, 5), (6, 6), (4, 2), (7, 7)))
def equal_then_different_batches(x, y):
    return x + y


@case(lambda nm: (rand(nm[0], 4), rand(nm[1], 4)),
      sizes=((2, 2), (3, 3), (5, 5), (4, 6), (6, 6), (2, 3)), traces=None)
def cat_of_two_batches(x, y):
    return torch.cat([x, y], 0), x.shape[0] + y.shape[0]


# ---------------------------------------------------------------- reductions and views


@case(lambda n: (rand(n, 5),), grad=True)
def mean_and_sum(x):
    return x.mean(0), x.sum(-1), x.amax(1), x.std(1) if x.shape[1] > 1 else x


@case(lambda n: (rand(n, 3, 4),))
def flatten_unflatten(x):
    y = x.flatten(0, 1)
    return y.unflatten(0, (x.shape[0], x.shape[1])), y.shape, x.flatten().shape[0]


@case(lambda n: (rand(n, 3),), sizes=(2, 3, 5, 1, 7, 4, 6), traces=None)
def split_by_two(x):
    parts = x.split(2)
    return torch.stack([p.sum() for p in parts]), len(parts)


@case(lambda n: (rand(n, 3),), sizes=(3, 4, 5, 7, 6, 9, 2), traces=None)
def chunk_three(x):
    parts = x.chunk(3)
    return [p.shape[0] for p in parts], sum(p.sum() for p in parts)


@case(lambda n: (rand(n, 3),), sizes=(2, 3, 5, 1, 7, 4), traces=None)
def unbind_sum(x):
    return sum(x.unbind(0))


@case(lambda n: (rand(n, 3),), sizes=(2, 3, 5, 1, 7, 4), traces=None)
def stack_of_list(x):
    return torch.stack(list(x)) * 2


@case(lambda n: (rand(n, 3),), sizes=(2, 3, 5, 1, 7, 4), traces=None)
def topk_min_three(x):
    return x.topk(k=min(3, x.shape[0]), dim=0).values


@case(lambda n: (rand(n, 3, 2),), grad=True)
def transpose_and_permute(x):
    return x.T.contiguous().sum(), x.permute(2, 0, 1).reshape(2, -1), x.mT @ x


@case(lambda n: (rand(n, 3),), sizes=(2, 3, 5, 7, 4))
def narrow_drop_first(x):
    return x.narrow(0, 1, x.shape[0] - 1), x[1:], x[:-1]


@case(lambda t: (rand(2, t),), sizes=(3, 4, 5, 7, 8, 2))
def pad_to_eight(x):
    return F.pad(x, (0, 8 - x.shape[-1])), F.pad(x, (1, 2))


@case(lambda n: (rand(n, 3),), sizes=(2, 3, 5, 1, 7, 0, 4))
def fixed_bound_slices(x):
    return x[:4], x[-2:], x[2:], x[:4].shape[0], x[::2]


@case(lambda n: (rand(n, n),), sizes=(2, 3, 5, 1, 4, 6))
def square_diag_tril(x):
    return x.diagonal(), torch.tril(x), x.trace(), torch.eye(x.shape[0]) * x


@case(lambda n: (rand(n, 3), torch.arange(n).flip(0)), sizes=(2, 3, 5, 1, 7, 4))
def gather_index_select(x, idx):
    return x[idx], x.index_select(0, idx), x.gather(0, idx[:, None].expand(-1, 3))


@case(lambda n: (rand(n, 4),), sizes=(2, 3, 5, 1, 7, 0, 4))
def masked_select_count(x):
    m = x > 0
    return x[m], m.sum(), x.masked_fill(m, 0.0), x.nonzero().shape


# ---------------------------------------------------------------- control flow


@case(lambda n: (rand(n, 3),), sizes=(2, 3, 5, 1, 7, 4))
def tensor_if(x):
    if x.sum() > 0:
        y = x * x.shape[0]
    else:
        y = x - x.shape[0]
    return y


@case(lambda n: (rand(n, 3),), sizes=(2, 3, 5, 1, 7, 4))
def tensor_while_to_size(x):
    t = torch.tensor(1)
    while t < x.shape[0]:
        t = t * 2
    return t, x * t


@case(lambda n: (rand(n, 3),), sizes=(2, 3, 5, 1, 7, 4), traces=None)
def python_while_rows(x):
    i = 0
    acc = x[0] * 0
    while i < x.shape[0]:
        acc = acc + x[i]
        i += 1
    return acc, i


@case(lambda n: (rand(n, 3),), sizes=(2, 3, 5, 1, 7, 4), traces=None, grad=True)
def for_row_in_tensor(x):
    acc = torch.zeros(())
    for row in x:
        acc = acc + row.max()
    return acc


@case(lambda n: (rand(n, 3),), sizes=(2, 3, 5, 1, 7, 4), traces=None)
def enumerate_rows(x):
    acc = torch.zeros(3)
    for i, row in enumerate(x):
        acc = acc + i * row
    return acc


@case(lambda n: (rand(n, 3),), sizes=(2, 3, 5, 1, 7, 4), traces=None)
def comprehension_rows(x):
    return torch.stack([r * 2 for r in x]).sum(0), [r.sum() > 0 for r in x][-1]


@case(lambda n: (rand(n, 3), rand(n + 1, 3)), sizes=(2, 3, 5, 1, 7, 4), traces=None)
def zip_rows(x, y):
    return sum(a * b for a, b in zip(x, y))


@case(lambda n: (rand(n, 3),), sizes=(2, 3, 5, 1, 7, 4))
def tensor_for_over_arange(x):
    acc = torch.zeros(3)
    for i in torch.arange(x.shape[0]):
        acc = acc + x[i]
    return acc


# ---------------------------------------------------------------- nn modules


def _lin():
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


@case(lambda n: (rand(n, 4),), module=True, grad=True)
def linear_mlp():
    return _lin()


class _ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 4, 3, stride=2, padding=1)
        self.pool = nn.AdaptiveAvgPool2d((2, 2))

    def forward(self, x):
        y = self.c(x)
        return self.pool(y).flatten(1), y.shape


@case(lambda hw: (rand(2, 3, hw[0], hw[1]),), module=True,
      sizes=((8, 8), (9, 9), (12, 7), (5, 6), (16, 16), (3, 3), (8, 8)))
def conv_hw():
    return _ConvNet()


@case(lambda n: (rand(n, 3, 4, 4),), module=True, sizes=(2, 3, 5, 7, 4), grad=True)
def batchnorm_train():
    return nn.BatchNorm2d(3)


@case(lambda n: (rand(n, 3, 4, 4),), module=True, sizes=(2, 3, 5, 1, 7, 4))
def batchnorm_eval():
    return nn.BatchNorm2d(3).eval()


@case(lambda bt: (rand(bt[0], bt[1], 6),), module=True, grad=True,
      sizes=((2, 4), (3, 4), (2, 6), (5, 9), (1, 1), (4, 3)))
def layernorm_seq():
    return nn.LayerNorm(6)


@case(lambda bt: (torch.randint(0, 10, bt),), module=True,
      sizes=((2, 4), (3, 4), (2, 6), (5, 9), (1, 1), (4, 3)))
def embedding_seq():
    return nn.Embedding(10, 5)


class _MHA(nn.Module):
    def __init__(self):
        super().__init__()
        self.m = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x):
        return self.m(x, x, x)[0]


@case(lambda bt: (rand(bt[0], bt[1], 8),), module=True,
      sizes=((2, 4), (3, 4), (2, 6), (5, 9), (1, 1), (4, 3)))
def multihead_attention():
    return _MHA().eval()


class _LSTM(nn.Module):
    def __init__(self):
        super().__init__()
        self.m = nn.LSTM(4, 6, batch_first=True)

    def forward(self, x):
        out, (h, c) = self.m(x)
        return out, h


@case(lambda bt: (rand(bt[0], bt[1], 4),), module=True,
      sizes=((2, 4), (3, 4), (2, 6), (5, 9), (1, 1), (4, 3)), traces=None)
def lstm_batch_seq():
    return _LSTM()


@case(lambda hw: (rand(1, 2, hw, hw + 1),), sizes=(4, 5, 8, 3, 6))
def interpolate_from_shape(x):
    return F.interpolate(x, size=(x.shape[2] * 2, x.shape[3] * 2), mode="bilinear",
                         align_corners=False), F.interpolate(x, scale_factor=2.0)


@case(lambda hw: (rand(2, 3, hw, hw),), sizes=(4, 5, 8, 3, 7, 2))
def adaptive_pooling(x):
    return F.adaptive_avg_pool2d(x, (2, 3)), F.adaptive_max_pool2d(x, 1).flatten(1)


class _Block(nn.Module):
    """A tiny causal transformer block: mask and positions made from x.shape[1]."""

    def __init__(self, d=8):
        super().__init__()
        self.pos = nn.Embedding(32, d)
        self.qkv = nn.Linear(d, 3 * d)
        self.ln = nn.LayerNorm(d)
        self.d = d

    def forward(self, x):
        B, T, C = x.shape
        x = x + self.pos(torch.arange(T))
        q, k, v = self.qkv(self.ln(x)).split(self.d, dim=-1)
        att = q @ k.transpose(-2, -1) / math.sqrt(C)
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        return x + att @ v


@case(lambda bt: (rand(bt[0], bt[1], 8),), module=True, grad=True,
      sizes=((2, 4), (3, 4), (2, 6), (5, 9), (1, 1), (4, 3), (2, 2)), traces=4)
def causal_block():
    return _Block()


# ---------------------------------------------------------------- code written elsewhere


# transformers/models/llama/modeling_llama.py: rotate_half
@case(lambda bt: (rand(bt[0], 2, bt[1], 8),), sizes=((2, 4), (3, 4), (2, 6), (5, 9), (1, 1)))
def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


# transformers/models/llama/modeling_llama.py: repeat_kv
@case(lambda bt: (rand(bt[0], 2, bt[1], 4), 3), sizes=((2, 4), (3, 4), (2, 6), (5, 9), (1, 1)))
def repeat_kv(hidden_states, n_rep):
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep,
                                                           slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


# transformers (4.2x) modeling_bart.py: _make_causal_mask
@case(lambda bt: (torch.ones(bt[0], bt[1], dtype=torch.long),),
      sizes=((2, 4), (3, 4), (2, 6), (5, 9), (1, 1), (2, 3)))
def make_causal_mask(input_ids):
    bsz, tgt_len = input_ids.shape
    dtype = torch.float32
    mask = torch.full((tgt_len, tgt_len), torch.finfo(dtype).min)
    mask_cond = torch.arange(mask.size(-1))
    mask.masked_fill_(mask_cond < (mask_cond + 1).view(mask.size(-1), 1), 0)
    mask = mask.to(dtype)
    return mask[None, None, :, :].expand(bsz, 1, tgt_len, tgt_len)


# transformers/models/t5/modeling_t5.py: T5Attention._relative_position_bucket + compute_bias
def _relative_position_bucket(relative_position, bidirectional=True, num_buckets=32,
                              max_distance=128):
    relative_buckets = 0
    if bidirectional:
        num_buckets //= 2
        relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
        relative_position = torch.abs(relative_position)
    else:
        relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    relative_position_if_large = max_exact + (
        torch.log(relative_position.float() / max_exact)
        / math.log(max_distance / max_exact) * (num_buckets - max_exact)).to(torch.long)
    relative_position_if_large = torch.min(
        relative_position_if_large, torch.full_like(relative_position_if_large, num_buckets - 1))
    relative_buckets += torch.where(is_small, relative_position, relative_position_if_large)
    return relative_buckets


@case(lambda t: (rand(1, t, 4),), sizes=(4, 5, 9, 3, 20, 2))
def t5_relative_buckets(x):
    query_length = key_length = x.shape[1]
    context_position = torch.arange(query_length, dtype=torch.long)[:, None]
    memory_position = torch.arange(key_length, dtype=torch.long)[None, :]
    return _relative_position_bucket(memory_position - context_position)


# torchvision/models/shufflenetv2.py: channel_shuffle
@case(lambda n: (rand(n, 6, 3, 3), 3), sizes=(2, 3, 5, 1, 4))
def channel_shuffle(x, groups):
    batchsize, num_channels, height, width = x.size()
    channels_per_group = num_channels // groups
    x = x.view(batchsize, groups, channels_per_group, height, width)
    x = torch.transpose(x, 1, 2).contiguous()
    x = x.view(batchsize, num_channels, height, width)
    return x


# torchvision/models/vision_transformer.py: VisionTransformer.forward's class token
@case(lambda n: (rand(n, 4, 8), torch.zeros(1, 1, 8)), sizes=(2, 3, 5, 1, 7, 4))
def vit_class_token(x, class_token):
    n = x.shape[0]
    batch_class_token = class_token.expand(n, -1, -1)
    x = torch.cat([batch_class_token, x], dim=1)
    return x[:, 0]


# timm/models/swin_transformer.py: window_partition (+ window_reverse)
@case(lambda b: (rand(b, 8, 8, 3), 4), sizes=(2, 3, 1, 5))
def swin_window_partition(x, window_size):
    B, H, W, C = x.shape
    x = x.view(B, H // window_size, window_size, W // window_size, window_size, C)
    windows = x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, window_size, window_size, C)
    return windows, windows.shape[0] // (H * W // window_size // window_size)


# ---------------------------------------------------------------- sizes 0/1, large, dtypes


@case(lambda n: (rand(n, 3),), sizes=(0, 1, 2, 0, 3, 1, 500, 2, 1000))
def zero_one_large(x):
    return x.sum(0), x.mean(), x.shape[0] == 0, x.reshape(-1, 3).shape


@case(lambda n: (torch.arange(n * 2).view(n, 2) if n % 2 else rand(n, 2),),
      sizes=(2, 3, 4, 5, 6, 7, 8), traces=None)
def dtype_alternates(x):
    return x * 2, x.sum(0), (x // 1).dtype, x.shape[0]


@case(lambda n: (rand(n, 3), torch.randint(0, 3, (n,))), sizes=(2, 3, 5, 1, 7, 4),
      grad=True)
def cross_entropy_loss(logits, target):
    return F.cross_entropy(logits, target), F.one_hot(target, 3).sum(0)


@case(lambda n: (rand(n, 3),), sizes=(2, 3, 5, 1, 7, 4))
def inplace_on_argument(x):
    x[0] = x.shape[0]
    x.mul_(2)
    return x.sum()


# ---------------------------------------------------------------- relations between sizes


@case(lambda nm: (rand(nm[0], 3), rand(nm[1], 2)),
      sizes=((5, 3), (7, 4), (9, 2), (3, 5), (2, 6), (6, 6), (4, 9)), traces=None)
def slice_bound_by_other_input(x, y):
    z = x[: y.shape[0]]
    return z * 2, z.shape[0], z.sum(0), z.reshape(-1).shape


@case(lambda nm: (rand(nm[0], 4), rand(nm[1])),
      sizes=((4, 2), (6, 3), (8, 4), (8, 2), (6, 4), (10, 5), (5, 5)), traces=None)
def view_by_other_input(x, y):
    return x.view(y.shape[0], -1), (x.view(-1, 2) + 1).shape


@case(lambda nm: (rand(nm[0], 1), rand(1, nm[1])), sizes=((3, 3), (4, 4), (5, 2), (2, 5), (1, 3)))
def outer_broadcast(x, y):
    return x + y, (x * y).shape, x.expand(x.shape[0], y.shape[1]).sum(1)


@case(lambda nm: (rand(nm[0], 3), rand(nm[1], 3)),
      sizes=((2, 2), (3, 3), (5, 5), (4, 6), (6, 6), (2, 3)), traces=None)
def equal_sizes_returned(x, y):
    return x.shape[0] == y.shape[0], x.shape[0] < y.shape[0], x.sum() + y.sum()


@case(lambda n: (rand(n, n), rand(n, 1)), sizes=(2, 3, 5, 1, 4, 6))
def square_and_column(x, y):
    return x @ y, x.expand(x.shape[0], x.shape[0]) - y, torch.bmm(x[None], x[None])


# ---------------------------------------------------------------- more sizes as numbers


@case(lambda n: (rand(n, 2),), sizes=(2, 3, 4, 5, 6, 7, 8), traces=None)
def parity_branch(x):
    if x.shape[0] % 2 == 0:
        return x.view(2, -1, 2)
    return x[1:]


@case(lambda n: (rand(n, 2),), sizes=(2, 3, 5, 1, 4, 0), traces=None)
def lists_from_sizes(x):
    return [0] * x.shape[0], [x.shape[0]] * 2, tuple(range(x.shape[0]))


@case(lambda n: (rand(n, 3),), sizes=(2, 3, 5, 1, 4, 0))
def tensors_from_shape(x):
    n = x.shape[0]
    return (torch.tensor(n / 2), torch.as_tensor(float(n)), torch.tensor(n > 2),
            torch.tensor(n * 1.5, dtype=torch.float16), torch.tensor([x.shape[0], x.shape[1]]),
            torch.tensor(x.shape),
            torch.tensor(x.shape[0] * 1.5), torch.as_tensor(x.shape[0]))


@case(lambda n: (rand(n, 3),), sizes=(2, 3, 5, 1, 4, 0))
def new_tensors_of_shape(x):
    return (x.new_zeros(x.shape[0]), torch.zeros(x.shape), torch.zeros(*x.shape),
            torch.empty(x.size()).fill_(2), x.new_full((x.shape[0], 2), x.shape[0]),
            torch.ones_like(x).sum(0))


@case(lambda n: (rand(n, 3),), sizes=(2, 3, 5, 1, 4, 7), traces=None)
def builtins_over_shape(x):
    return min(x.shape), sum(x.shape), math.prod(x.shape), max(x.shape) * x.sum()


@case(lambda n: (rand(n),), sizes=(2, 3, 5, 1, 4, 7, 0))
def ranges_of_size(x):
    n = x.shape[0]
    return (torch.linspace(0, 1, n), torch.arange(0, n, 2), torch.arange(n, dtype=torch.float32),
            torch.arange(n) / max(n, 1), torch.arange(n - 1, -1, -1))


@case(lambda n: (rand(n, 2),), sizes=(2, 3, 5, 1, 4, 7))
def roll_by_half(x):
    return x.roll(x.shape[0] // 2, 0), x.roll(1, 0), x.flip(0)


@case(lambda n: (rand(n),), sizes=(2, 3, 5, 4, 7, 1), traces=None)
def unfold_windows(x):
    return x.unfold(0, 2, 1), x.unfold(0, 2, 1).shape[0]


@case(lambda n: (rand(n, n),), sizes=(2, 3, 5, 1, 4, 6))
def tril_indices_of_size(x):
    i, j = torch.tril_indices(x.shape[0], x.shape[0])
    return x[i, j], i


@case(lambda n: (rand(n, 2),), sizes=(2, 3, 5, 4, 7, 1), grad=True)
def pairwise_and_order(x):
    d = (x[:, None] - x[None]).pow(2).sum(-1)
    return d, x.cumsum(0), x.sort(0).values, x.argmax(0), x.max(0).indices, F.softmax(x, 0)


@case(lambda n: (rand(n, 2),), sizes=(2, 3, 5, 4, 7, 1))
def where_first_half(x):
    keep = torch.arange(x.shape[0]) < x.shape[0] // 2
    return torch.where(keep[:, None], x, 0.0), keep.sum()


@case(lambda n: (rand(n, 2),), sizes=(2, 3, 5, 4, 7, 1, 16), traces=None)
def python_while_halving(x):
    n = x.shape[0]
    while n > 1:
        n //= 2
        x = x[:n] + x[n: 2 * n]
    return x, n


@case(lambda n: (rand(n, 2),), sizes=(2, 3, 5, 4, 7, 1), traces=None)
def dict_keyed_by_size(x):
    table = {2: "two", 3: "three"}
    return table.get(x.shape[0], "many"), x.shape[0] in (2, 4), x * 2


@case(lambda n: (rand(n, 3),), sizes=(2, 3, 5, 1, 4, 6))
def layer_norm_shape_from_input(x):
    return F.layer_norm(x, x.shape[-1:]), F.layer_norm(x, (x.shape[-1],)), F.normalize(x, dim=0)


@case(lambda n: (rand(n * n),), sizes=(2, 3, 5, 1, 4), traces=None)
def isqrt_view(x):
    k = math.isqrt(x.numel())
    return x.view(k, -1), k


# ---------------------------------------------------------------- more modules and libraries


class _ConvFlatten(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(1, 2, 3, padding=1)

    def forward(self, x):
        y = F.max_pool2d(self.c(x), 2)
        return y.view(y.size(0), -1)


@case(lambda s: (rand(s[0], 1, s[1], s[1]),), module=True, grad=True,
      sizes=((2, 4), (3, 4), (2, 6), (5, 8), (1, 4), (2, 5)))
def conv_flatten_features():
    return _ConvFlatten()


class _Seq1d(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv1d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm1d(4)
        self.gn = nn.GroupNorm(2, 4)

    def forward(self, x):
        y = self.gn(self.bn(self.c(x)))
        return F.avg_pool1d(y, 2), y.mean(-1)


@case(lambda bl: (rand(bl[0], 3, bl[1]),), module=True,
      sizes=((2, 4), (3, 4), (2, 7), (5, 9), (4, 3), (2, 2)), traces=4)
def conv1d_bn_gn_seq():
    return _Seq1d()


class _GRU(nn.Module):
    def __init__(self):
        super().__init__()
        self.m = nn.GRU(3, 4, batch_first=True)

    def forward(self, x):
        return self.m(x)[0][:, -1]


@case(lambda bt: (rand(bt[0], bt[1], 3),), module=True, sizes=((2, 4), (3, 4), (2, 6), (1, 1)),
      traces=None)
def gru_last_step():
    return _GRU()


@case(lambda bt: (rand(bt[0], 2, bt[1], 4),) * 3, sizes=((2, 4), (3, 4), (2, 6), (5, 9), (1, 1)))
def sdpa_causal(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class _GPT2Bias(nn.Module):
    """transformers/models/gpt2/modeling_gpt2.py (4.3x): the causal `bias` buffer sliced by
    query/key lengths, with position ids from arange."""

    def __init__(self, n=16):
        super().__init__()
        self.register_buffer("bias", torch.tril(torch.ones(n, n, dtype=torch.bool))[None, None])
        self.wpe = nn.Embedding(n, 4)

    def forward(self, x):
        past_length = 0
        input_shape = x.size()
        position_ids = torch.arange(past_length, input_shape[-1] + past_length, dtype=torch.long)
        position_ids = position_ids.unsqueeze(0).view(-1, input_shape[-1])
        h = self.wpe(position_ids) + x[..., None]
        query_length, key_length = x.size(-1), x.size(-1)
        causal_mask = self.bias[:, :, key_length - query_length: key_length, :key_length]
        w = h @ h.transpose(-1, -2)
        w = torch.where(causal_mask, w, torch.tensor(torch.finfo(w.dtype).min))
        return w.softmax(-1), position_ids


@case(lambda bt: (rand(bt[0], bt[1]),), module=True, sizes=((2, 4), (3, 4), (2, 6), (5, 9),
                                                           (1, 1), (2, 16), (3, 2)), traces=4)
def gpt2_causal_bias():
    return _GPT2Bias()


# transformers/modeling_utils.py: get_extended_attention_mask (encoder case)
@case(lambda bt: ((torch.rand(bt) > 0.3).long(),), sizes=((2, 4), (3, 4), (2, 6), (5, 9), (1, 1)))
def bert_extended_mask(attention_mask):
    dtype = torch.float32
    extended_attention_mask = attention_mask[:, None, None, :]
    extended_attention_mask = extended_attention_mask.to(dtype=dtype)
    return (1.0 - extended_attention_mask) * torch.finfo(dtype).min


# transformers/models/llama/modeling_llama.py: LlamaRotaryEmbedding.forward (default rope)
@case(lambda bt: (rand(bt[0], bt[1], 8), torch.arange(bt[1])[None].expand(bt[0], -1)),
      sizes=((2, 4), (3, 4), (2, 6), (5, 9), (1, 1)))
def llama_rotary(x, position_ids):
    inv_freq = 1.0 / (10000 ** (torch.arange(0, 8, 2, dtype=torch.int64).float() / 8))
    inv_freq_expanded = inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
    position_ids_expanded = position_ids[:, None, :].float()
    freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype=x.dtype), emb.sin().to(dtype=x.dtype)


@case(lambda n: (rand(n, 3),), sizes=(2, 3, 5, 4))
def float_size_in_where_clamp(x):
    n = x.shape[0]
    return (torch.where(x[0, 0] > 0, n / 2, x.sum()), torch.clamp(x.sum(), max=n / 2),
            torch.where(x[0, 0] > 0, n / 2, 0.5), torch.where(x[:, 0] > 0, x[:, 1], n / 4),
            x.long().sum().clamp(max=n / 2), torch.clip(x.sum(), n / 4, n / 2),
            torch.where(x[0, 0] > 0, n, 0), x.sum().half().clamp_max(n / 2))


@case(lambda n: (rand(n, 3),), sizes=(2, 3, 5, 7))
def list_index_with_size(x):
    n = x.shape[0]
    y = x.clone()
    y[[n - 1, 0]] = 5.0
    return x[[n - 1, 0]], x[[n // 2]], x[[0, n - 1], :], y, x[:, [0]][[n - 1]]


@case(lambda n: (rand(6, 3), torch.tensor(n)), sizes=(1, 2, 4), traces=None)
def list_index_in_staged_loop(x, k):
    acc = torch.zeros(2, 3)
    for i in range(k):
        acc = acc + x[[i, 0]]
    return acc


@case(lambda n: (rand(n, 3),), sizes=(2, 3, 5, 7))
def nbytes_of_input(x):
    return x.nbytes, x.itemsize * x.numel()


@case(lambda n: (rand(n, 3), rand(3, 2)), sizes=(2, 3, 5, 4, 7, 1, 9), grad=True)
def cond_and_while_on_sizes_with_grad(x, w):
    h = x @ w
    if h.sum() > 0:
        h = h * x.shape[0]
    else:
        h = h.flip(0) / x.shape[0]
    i = torch.tensor(0)
    while i < x.shape[0] // 2:
        h = h + h[i]
        i = i + 1
    return h.softmax(0).sum(1), h.shape[0]
