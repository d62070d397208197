"""Models from other libraries as a new user converts them (issue 13, h34): task heads
with their labels, decoders fed their own cache, seq2seq and vision heads, torchvision's
BatchNorm statistics, and plain PyTorch RNNs, attention and ``nn.Transformer``: each built
from a tiny config with random weights, run eagerly and through ``to_graph(model)`` with
no fallback -- first call, other inputs, another batch size and sequence length, with and
without masks, eval and train mode, the loss and every gradient.

Two shared mechanisms it took (both were fallbacks on every call):
- a user ``torch.autograd.Function`` under autograd is one node calling its ``apply``
  when the graph runs, so its own backward is used (BLOOM's ``GeLUFunction`` in train
  mode; before: "a custom autograd.Function's backward is not part of a traced graph");
- ``torch._check(cond)`` and its kin on a condition known only at run time are staged
  checks raising eager's error type (transformers' ``torch_compilable_check``: BART's
  classification head checks that every row has as many ``<eos>`` tokens, LLaVA that the
  prompt has a token per image feature).
"""
import copy
import os
import sys
import warnings

import pytest
import torch
import torch.nn as nn

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.torchvision_cpu import import_torchvision  # noqa: E402

import_torchvision()            # (before transformers, whose image utilities import it)
pytest.importorskip("transformers")

from benchmarks.model_survey import _check  # noqa: E402
from benchmarks.models import leaves  # noqa: E402
from benchmarks.survey_zoo import VISION, VOCAB, WIDTH, _hf, llava  # noqa: E402
from transpiler import ConversionError, FallbackWarning, to_graph  # noqa: E402

THIS_FILE = os.path.basename(__file__)


# ----------------------------------------------------------------------------- helpers
def tokens(batch, length, mask, seed):
    """Token ids (and a right-padded ``attention_mask`` on rows after the first)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, VOCAB, (batch, length), generator=g)
    kwargs = {}
    if mask:
        m = torch.ones(batch, length, dtype=torch.long)
        m[1:, length - 1 - seed % 3:] = 0
        kwargs["attention_mask"] = m
    return ids, kwargs


def _no_fallback(fn, args, kwargs, grad=False):
    with torch.set_grad_enabled(grad), warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        return fn(*args, **kwargs)


def _loss(out):
    """The first differentiable float output, squared and averaged (the loss when the
    call was given labels)."""
    for _, leaf in leaves(out):
        if isinstance(leaf, torch.Tensor) and leaf.is_floating_point() and leaf.requires_grad:
            return leaf.float().square().mean()
    raise AssertionError("no differentiable output")


def converts_like_eager(model, make, calls, train_calls=(), strict=False):
    """``to_graph(model)`` gives eager's outputs (types, structure, dtypes, values within
    1e-4) with no fallback on every eval call ``make(*call)``; for each train call, two
    steps in train mode give eager's outputs, every gradient (within 1e-4 of its size)
    and buffer."""
    g = to_graph(model, strict=strict)
    for call in calls:
        args, kwargs = make(*call)
        exp = _no_fallback(model, args, kwargs)
        got = _no_fallback(g, args, kwargs)
        assert _check(got, exp) == "ok", f"{call}: {_check(got, exp)}"
    for call in train_calls:
        eager, conv = copy.deepcopy(model).train(), copy.deepcopy(model).train()
        gc = to_graph(conv, strict=strict)
        for step in range(2):
            args, kwargs = make(*call)
            torch.manual_seed(step)
            exp = _no_fallback(eager, args, kwargs, grad=True)
            torch.manual_seed(step)
            got = _no_fallback(gc, args, kwargs, grad=True)
            assert _check(got, exp) == "ok", f"train {call}: {_check(got, exp)}"
            _loss(exp).backward()
            _loss(got).backward()
            for (name, p), q in zip(eager.named_parameters(), conv.parameters()):
                assert (p.grad is None) == (q.grad is None), name
                if p.grad is not None:
                    tol = 1e-4 * max(1.0, p.grad.abs().max().item())
                    assert (p.grad - q.grad).abs().max().item() <= tol, f"grad of {name}"
            for (name, b), c in zip(eager.named_buffers(), conv.buffers()):
                assert torch.allclose(b.float(), c.float(), rtol=1e-4, atol=1e-4), name
    return g


def falls_back_naming(model, args, kwargs, where):
    """Eager's result with one FallbackWarning naming ``where`` (file:line text)."""
    exp = model(*args, **kwargs)
    with pytest.warns(FallbackWarning) as caught:
        got = to_graph(model)(*args, **kwargs)
    assert _check(got, exp) == "ok"
    assert where in str(caught[0].message), str(caught[0].message)


def _line_of(text):
    with open(__file__) as f:
        return next(i for i, line in enumerate(f.read().splitlines(), 1) if text in line)


TEXT_CALLS = [(1, 12, False, 1), (3, 9, True, 3)]
TRAIN_CALLS = [(2, 10, True, 4)]


def text_inputs(labels=None, eos=None):
    """``make(batch, length, mask, seed)`` for a text model with its head's labels."""
    def make(batch, length, mask, seed):
        ids, kwargs = tokens(batch, length, mask, seed)
        g = torch.Generator().manual_seed(seed + 50)
        if eos is not None:         # (BART's head reads the hidden state at <eos>)
            ids[ids == eos] = 5
            ids[:, -1] = eos
        if labels == "sequence":
            kwargs["labels"] = torch.randint(0, 3, (batch,), generator=g)
        elif labels == "token":
            kwargs["labels"] = torch.randint(0, 3, (batch, length), generator=g)
        elif labels == "span":
            kwargs["start_positions"] = torch.randint(0, length, (batch,), generator=g)
            kwargs["end_positions"] = torch.randint(0, length, (batch,), generator=g)
        elif labels == "lm":
            kwargs["labels"] = ids
        return (ids,), kwargs
    return make


# ------------------------------------------------ user autograd.Functions under autograd
class RoundStraightThrough(torch.autograd.Function):
    """A straight-through estimator: rounds forward, passes the gradient through scaled
    (traced as forward's ops the gradient of ``round`` would be zero)."""

    @staticmethod
    def forward(ctx, x, scale):
        ctx.scale = scale
        return torch.round(x * 4) / 4

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.scale, None


class ScaledPair(torch.autograd.Function):
    """Two outputs, saved tensors, a backward that is not forward's derivative."""

    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        return x * y, x + y

    @staticmethod
    def backward(ctx, ga, gb):
        x, y = ctx.saved_tensors
        return 2 * ga * y + gb, ga * x + 3 * gb


class Doubled(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x.mul_(2)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return 2 * grad


class ScaledBySum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * float(x.sum())

    @staticmethod
    def backward(ctx, grad):
        return grad


def uses_custom_functions(x, w, y):
    h = torch.tanh(x @ w)
    a, b = ScaledPair.apply(RoundStraightThrough.apply(h, 0.5), y)
    if a.sum() > 0:
        return (a + b).square().sum()
    return (a - b).square().sum()


@pytest.mark.parametrize("strict", [False, True])
def test_custom_function_backward_is_its_own(strict):
    """Gradients through the converted call are the Functions' backwards (traced as
    forward's ops they would be zero or unscaled), at two batch sizes."""
    g = to_graph(uses_custom_functions, strict=strict)
    w = torch.randn(4, 4, requires_grad=True)
    for batch in (3, 5):
        x, y = torch.randn(batch, 4), torch.randn(batch, 4, requires_grad=True)
        exp = uses_custom_functions(x, w, y)
        exp_grads = torch.autograd.grad(exp, (w, y))
        got = _no_fallback(g, (x, w, y), {}, grad=True)
        torch.testing.assert_close(got, exp)
        for a, b in zip(torch.autograd.grad(got, (w, y)), exp_grads):
            torch.testing.assert_close(a, b)
    op_names = [n.op for n in g.graph(x, w, y).nodes]
    assert "RoundStraightThrough_apply" in op_names and "ScaledPair_apply" in op_names


def test_custom_function_without_autograd_traces_its_forward():
    g = to_graph(uses_custom_functions)
    x, w, y = torch.randn(3, 4), torch.randn(4, 4), torch.randn(3, 4)
    with torch.no_grad():
        torch.testing.assert_close(_no_fallback(g, (x, w, y), {}),
                                   uses_custom_functions(x, w, y))
        assert not any(n.op.endswith("_apply") for n in g.graph(x, w, y).nodes)


def writes_its_argument(w):
    h = w * 1.0
    return h + Doubled.apply(h)


def reads_data_in_forward(w):
    return ScaledBySum.apply(w * 2)


@pytest.mark.parametrize("fn, text", [(writes_its_argument, "Doubled.apply(h)"),
                                      (reads_data_in_forward, "ScaledBySum.apply(w * 2)")])
def test_custom_function_the_graph_cannot_call_falls_back_naming_it(fn, text):
    """A forward that writes its argument in place (``mark_dirty``) or reads tensor data:
    eager's result and gradient, and a FallbackWarning naming the call's line."""
    w = torch.randn(3, requires_grad=True)
    exp = fn(w)
    exp_grad, = torch.autograd.grad(exp.sum(), w)
    with pytest.warns(FallbackWarning) as caught:
        got = to_graph(fn)(w)
    torch.testing.assert_close(got, exp)
    torch.testing.assert_close(torch.autograd.grad(got.sum(), w)[0], exp_grad)
    assert f"{THIS_FILE}:{_line_of(text)}" in str(caught[0].message)
    with pytest.raises(ConversionError):
        to_graph(fn, strict=True)(w)


def test_bloom_trains_through_its_gelu_function():
    """BLOOM's MLP calls ``GeLUFunction.apply`` in train mode (its own backward)."""
    model = _hf("BloomConfig", "BloomForSequenceClassification", attn="eager",
                vocab_size=VOCAB, hidden_size=64, n_layer=2, n_head=4, num_labels=3,
                pad_token_id=0)
    converts_like_eager(model, text_inputs("sequence"), TEXT_CALLS[:1], TRAIN_CALLS)


# ---------------------------------------------------------- torch._check on run-time values
def checks_positives(x, n):
    y = x[x > 0]
    torch._check(y.numel() >= n, lambda: f"need {n} positives")
    torch._check_value(y.shape[0] < 4, lambda: "too many positives")
    torch._check_tensor_all(x < 10)
    return y.sum()


@pytest.mark.parametrize("x, error", [
    (torch.tensor([1.0, -2.0, 3.0]), None),
    (torch.tensor([1.0, -2.0, -3.0]), RuntimeError),
    (torch.tensor([1.0, 2.0, 3.0, 4.0]), ValueError),
    (torch.tensor([1.0, 20.0, 3.0]), RuntimeError)])
def test_torch_checks_are_staged(x, error):
    """Each check holds or raises eager's error type and message on every run."""
    g = to_graph(checks_positives, strict=True)
    g(torch.tensor([2.0, 1.0, -1.0]), 2)        # (traced on inputs where all hold)
    if error is None:
        torch.testing.assert_close(g(x, 2), checks_positives(x, 2))
        return
    with pytest.raises(error) as exp:
        checks_positives(x, 2)
    with pytest.raises(error) as got:
        g(x, 2)
    assert str(exp.value) in str(got.value)


def test_bart_sequence_classification_checks_its_eos_rows():
    """BART's head checks (``torch_compilable_check``) that all rows hold as many
    ``<eos>`` tokens: staged, so the head converts, and a batch breaking it raises."""
    model = _hf("BartConfig", "BartForSequenceClassification", vocab_size=VOCAB, d_model=64,
                encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                max_position_embeddings=64, num_labels=3)
    make = text_inputs("sequence", eos=model.config.eos_token_id)
    g = converts_like_eager(model, make, [(1, 10, False, 1), (3, 8, True, 2)])
    (ids,), _ = make(2, 8, False, 3)
    ids[0, 2] = model.config.eos_token_id
    with pytest.raises(ValueError, match="same number of <eos> tokens"):
        model(ids)
    with pytest.raises(RuntimeError):   # (torch._check's error, as under torch.compile)
        g(ids)


def test_llava_merges_image_features_under_a_staged_check():
    """LLaVA checks (``torch_compilable_check`` on a tensor: ``_check_tensor_all``) that
    the prompt holds as many image tokens as the vision tower gave features, then
    scatters them in; before, ``torch._check_tensor_all`` on a traced tensor fell back."""
    model, make = llava()
    converts_like_eager(model, make, [(1, 1), (3, 2)], [(2, 3)])
    (ids,), kwargs = make(1, 4)
    ids[0, -1] = model.config.image_token_id        # one image token too many
    for fn in (model, to_graph(model)):
        with pytest.raises((ValueError, RuntimeError)):
            fn(ids, **kwargs)


# ------------------------------------------------------------------- transformers' heads
HEADS = {
    "distilbert_sequence": (
        lambda: _hf("DistilBertConfig", "DistilBertForSequenceClassification",
                    vocab_size=VOCAB, dim=64, n_layers=2, n_heads=4, hidden_dim=128,
                    max_position_embeddings=64, num_labels=3), "sequence"),
    "xlm_roberta_token": (
        lambda: _hf("XLMRobertaConfig", "XLMRobertaForTokenClassification", pad_token_id=1,
                    num_labels=3, **WIDTH), "token"),
    "electra_span": (
        lambda: _hf("ElectraConfig", "ElectraForQuestionAnswering", embedding_size=32,
                    **WIDTH), "span"),
    "qwen2_sequence": (        # (the last non-pad token of each row)
        lambda: _hf("Qwen2Config", "Qwen2ForSequenceClassification", num_key_value_heads=2,
                    pad_token_id=0, num_labels=3, **WIDTH), "sequence"),
}


@pytest.mark.parametrize("name", sorted(HEADS))
def test_task_head_with_labels(name):
    build, labels = HEADS[name]
    converts_like_eager(build(), text_inputs(labels), TEXT_CALLS, TRAIN_CALLS)


def test_phi3_decodes_from_its_cache():
    """Prefill with ``use_cache=True``, then three steps feeding the cache back (a mask
    growing with it), batch 1 and 2: every step's outputs and cache equal eager's."""
    model = _hf("Phi3Config", "Phi3ForCausalLM", num_key_value_heads=2, pad_token_id=0,
                **WIDTH)
    g = to_graph(model)
    for batch, mask in ((1, False), (2, True)):
        ids, kwargs = tokens(batch, 9, mask, batch)
        with torch.no_grad():
            exp = model(ids, use_cache=True, **kwargs)
        got = _no_fallback(g, (ids,), dict(kwargs, use_cache=True))
        assert _check(got, exp) == "ok"
        exp_cache, got_cache = exp.past_key_values, got.past_key_values
        for _ in range(3):
            nxt = exp.logits[:, -1].argmax(-1, keepdim=True)
            if mask:
                kwargs["attention_mask"] = torch.cat(
                    [kwargs["attention_mask"], torch.ones(batch, 1, dtype=torch.long)], 1)
            with torch.no_grad():
                exp = model(nxt, past_key_values=exp_cache, use_cache=True, **kwargs)
            got = _no_fallback(g, (nxt,), dict(kwargs, past_key_values=got_cache,
                                               use_cache=True))
            assert _check(got, exp) == "ok"
            assert got.past_key_values is got_cache


# ------------------------------------------------------------------------------ vision
def pixels(size, labels=False):
    def make(batch, seed):
        g = torch.Generator().manual_seed(seed)
        kwargs = {"pixel_values": torch.randn(batch, 3, size, size, generator=g)}
        if labels:
            kwargs["labels"] = torch.randint(0, 3, (batch,), generator=g)
        return (), kwargs
    return make


@pytest.mark.parametrize("config, cls, extra", [
    ("BeitConfig", "BeitForImageClassification", dict(VISION, use_relative_position_bias=True)),
    ("SwinConfig", "SwinForImageClassification",
     dict(image_size=32, patch_size=2, embed_dim=16, depths=[1, 1], num_heads=[2, 2],
          window_size=4, num_labels=3)),
])
def test_image_classifier_with_labels(config, cls, extra):
    converts_like_eager(_hf(config, cls, **extra), pixels(32, labels=True),
                        [(1, 1), (3, 2)], [(2, 3)])


# ---------------------------------------------------------------------- plain PyTorch
class Tagger(nn.Module):
    """A bidirectional 2-layer RNN tagger taking an optional initial state."""

    def __init__(self, cell):
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.rnn = getattr(nn, cell)(16, 24, num_layers=2, batch_first=True,
                                     bidirectional=True)
        self.out = nn.Linear(48, 5)

    def forward(self, ids, h0=None):
        out, h = self.rnn(self.emb(ids), h0)
        return self.out(out), h


@pytest.mark.parametrize("cell", ["LSTM", "GRU"])
def test_rnn_tagger_with_initial_state(cell):
    torch.manual_seed(0)
    model = Tagger(cell).eval()

    def make(batch, length, seed):
        g = torch.Generator().manual_seed(seed)
        ids = torch.randint(0, 50, (batch, length), generator=g)
        h = torch.randn(4, batch, 24, generator=g)
        return (ids, (h, torch.randn(4, batch, 24, generator=g)) if cell == "LSTM" else h), {}
    converts_like_eager(model, make, [(1, 7, 1), (3, 9, 2)], [(2, 6, 3)])


class Attention(nn.Module):
    def __init__(self, batch_first):
        super().__init__()
        self.attn = nn.MultiheadAttention(32, 4, batch_first=batch_first)

    def forward(self, q, kv, key_padding_mask=None, attn_mask=None, average=True):
        return self.attn(q, kv, kv, key_padding_mask=key_padding_mask, attn_mask=attn_mask,
                         need_weights=True, average_attn_weights=average)


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("masks", ["padding", "bool", "float", "per_head"])
def test_multihead_attention_masks_and_weights(batch_first, masks):
    """Outputs and (per-head or averaged) attention weights with each kind of mask."""
    torch.manual_seed(0)
    model = Attention(batch_first).eval()

    def make(batch, length, seed):
        g = torch.Generator().manual_seed(seed)
        keys = length + 2
        q, kv = torch.randn(batch, length, 32, generator=g), torch.randn(batch, keys, 32,
                                                                          generator=g)
        if not batch_first:
            q, kv = q.transpose(0, 1), kv.transpose(0, 1)
        kwargs = {"average": seed % 2 == 0}
        if masks == "padding":
            pad = torch.zeros(batch, keys, dtype=torch.bool)
            pad[:, keys - 1 - seed % 2:] = True
            kwargs["key_padding_mask"] = pad
        elif masks == "bool":
            kwargs["attn_mask"] = torch.ones(length, keys, dtype=torch.bool).triu(3)
        elif masks == "float":
            kwargs["attn_mask"] = torch.randn(length, keys, generator=g)
        else:
            kwargs["attn_mask"] = torch.randn(batch * 4, length, keys, generator=g)
        return (q, kv), kwargs
    converts_like_eager(model, make, [(1, 5, 1), (3, 7, 2)],
                        [(2, 6, 3)] if masks == "padding" else [])


class Translator(nn.Module):
    """PyTorch's translation tutorial's shape: ``nn.Transformer`` with a causal target
    mask and padding masks for source, target and memory."""

    def __init__(self, norm_first):
        super().__init__()
        self.src_emb, self.tgt_emb = nn.Embedding(40, 32), nn.Embedding(40, 32)
        self.transformer = nn.Transformer(32, 4, 2, 2, 64, dropout=0.0, batch_first=True,
                                          norm_first=norm_first)
        self.generator = nn.Linear(32, 40)

    def forward(self, src, tgt, src_pad, tgt_pad):
        causal = nn.Transformer.generate_square_subsequent_mask(tgt.size(1))
        h = self.transformer(self.src_emb(src), self.tgt_emb(tgt), tgt_mask=causal,
                             src_key_padding_mask=src_pad, tgt_key_padding_mask=tgt_pad,
                             memory_key_padding_mask=src_pad)
        return self.generator(h)


def translator_inputs(batch, length, seed):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(1, 40, (batch, length), generator=g)
    tgt = torch.randint(1, 40, (batch, length - 2), generator=g)
    src_pad = torch.zeros(batch, length, dtype=torch.bool)
    tgt_pad = torch.zeros(batch, length - 2, dtype=torch.bool)
    src_pad[1:, length - 2:] = True
    tgt_pad[1:, length - 3:] = True
    return (src, tgt, src_pad, tgt_pad), {}


def test_transformer_with_padding_masks():
    torch.manual_seed(0)
    converts_like_eager(Translator(norm_first=True).eval(), translator_inputs,
                        [(1, 7, 1), (3, 9, 2)], [(2, 6, 3)])
    torch.manual_seed(0)        # post-norm trains too (the nested-tensor path is eval's)
    converts_like_eager(Translator(norm_first=False), translator_inputs, [], [(2, 6, 3)])
