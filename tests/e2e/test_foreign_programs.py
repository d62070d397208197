"""Programs written by other projects, run as a new user would (issues 13 and 15).

Each program follows the structure, control flow and torch calls of a named public source
(karpathy/nanoGPT and minGPT, pytorch/examples, the PyTorch seq2seq tutorial, facebook
llama's sampling loop, OpenNMT-style beam search), at tiny sizes. The source is named in a
comment; the code is written after it, not copied. Each runs eagerly and through
``to_graph`` in default and strict mode, on calls with other inputs (other sizes, so values
baked at trace time show up), seeded alike so random ops draw the same numbers; results
must equal eager's (``assert_same``), gradients too where the program trains. A program
that cannot be a graph must fall back naming its own line (strict: ``ConversionError``).

Mechanisms these found (fixed; see the README's "Programs from other projects"):
``nn.TransformerEncoder(..., mask=m)`` asked ``bool()`` of the mask inside torch
(``runtime/library_questions.py``); ``torch.distributions`` argument validation did too;
``all(t)``/``any(t)`` of a tensor (``runtime/operators/truth_builtins.py``);
``torch.cat(..., axis=)``; hooks a library installs on submodules during a refused trace
were left installed (``transpiler/hook_snapshot.py``); an op refusing meta tensors
(``pack_padded_sequence``) crashed with its own error (``shape_inference.fails_eagerly``).
"""
from __future__ import annotations

import math
import re
import warnings
from dataclasses import dataclass

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Bernoulli, Categorical, Normal

from e2e_helpers import _clone, assert_same
from transpiler import ConversionError, FallbackWarning, to_graph

THIS_FILE = __file__.rsplit("/", 1)[-1]


# ----------------------------------------------------------------------------- runner
def _call(fn, args, seed):
    torch.manual_seed(seed)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        out = fn(*_clone(args))
    return out, [str(w.message) for w in rec if issubclass(w.category, FallbackWarning)]


def run_program(make, inputs, *, grad=False, falls_back_at=None):
    """``make()`` builds the program (a function or module) from seed 0; it is run on each
    input tuple eagerly and converted in default mode, and on the first in strict mode.
    ``falls_back_at``: the text of the program's line where it must fall back (None: it
    must convert)."""
    for strict in (False, True):
        torch.manual_seed(0)
        eager = make()
        torch.manual_seed(0)
        g = to_graph(make(), strict=strict)
        for i, args in enumerate(inputs if not strict else inputs[:1]):   # (CI time)
            with torch.set_grad_enabled(grad):
                exp, _ = _call(eager, args, 100 + i)
                if falls_back_at is not None and strict:
                    with pytest.raises(ConversionError) as err:
                        _call(g, args, 100 + i)
                    _names_line(str(err.value), falls_back_at)
                    break
                got, fallbacks = _call(g, args, 100 + i)
            if falls_back_at is None:
                assert not fallbacks, fallbacks[0]
            else:
                assert fallbacks, "expected a fallback"
                _names_line(fallbacks[0], falls_back_at)
            assert_same(got, exp, f"call {i} ({'strict' if strict else 'default'})")
    return g


def _names_line(message, text):
    """The message names this file and the line holding ``text``."""
    m = re.search(re.escape(THIS_FILE) + r":(\d+)", message)
    assert m, f"fallback does not name the program's line: {message}"
    with open(__file__) as f:
        line = f.read().splitlines()[int(m.group(1)) - 1]
    assert text in line, f"named line {m.group(1)} is {line.strip()!r}, not {text!r}"


def grads_match(make, loss_of, inputs):
    """A train step's loss and every gradient, eager against converted (default mode)."""
    torch.manual_seed(0)
    eager = make()
    torch.manual_seed(0)
    conv = make()
    g = to_graph(conv)
    for i, args in enumerate(inputs):
        for m in (eager, conv):
            m.zero_grad()
        torch.manual_seed(i)
        exp = loss_of(eager(*_clone(args)))
        exp.backward()
        torch.manual_seed(i)
        with warnings.catch_warnings():
            warnings.simplefilter("error", FallbackWarning)
            got = loss_of(g(*_clone(args)))
        got.backward()
        assert_same(got, exp)
        for (name, p), q in zip(eager.named_parameters(), conv.parameters()):
            assert (p.grad is None) == (q.grad is None), name
            if p.grad is not None:
                torch.testing.assert_close(q.grad, p.grad, rtol=1e-5, atol=1e-6, msg=name)


def ids(b, t, s, vocab=23):
    return torch.randint(0, vocab, (b, t), generator=torch.Generator().manual_seed(s))


# ------------------------------------------------- karpathy/nanoGPT: model.py (GPT, generate)
@dataclass
class GPTConfig:
    block_size: int = 16
    vocab_size: int = 23
    n_layer: int = 2
    n_head: int = 2
    n_embd: int = 16
    dropout: float = 0.0
    bias: bool = True
    flash: bool = True


class LayerNorm(nn.Module):
    """LayerNorm with an optional bias (nanoGPT)."""

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, input):
        return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head, self.n_embd, self.dropout = config.n_head, config.n_embd, config.dropout
        self.flash = config.flash
        if not self.flash:     # the slow path: a causal mask buffer, sliced per length
            n = config.block_size
            self.register_buffer("bias", torch.tril(torch.ones(n, n)).view(1, 1, n, n))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        if self.flash:
            y = F.scaled_dot_product_attention(
                q, k, v, attn_mask=None, dropout_p=self.dropout if self.training else 0,
                is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))
            att = self.attn_dropout(F.softmax(att, dim=-1))
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = nn.ModuleDict(dict(
            c_fc=nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias),
            c_proj=nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            wpe=nn.Embedding(config.block_size, config.n_embd),
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f=LayerNorm(config.n_embd, bias=config.bias)))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight      # weight tying

    def forward(self, idx, targets=None):
        b, t = idx.size()
        assert t <= self.config.block_size, \
            f"Cannot forward sequence of length {t}, block size is only {self.config.block_size}"
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        if targets is not None:
            logits = self.lm_head(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1),
                                   ignore_index=-1)
        else:
            logits = self.lm_head(x[:, [-1], :])    # a list index keeps the time dim
            loss = None
        return logits, loss

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None):
        for _ in range(max_new_tokens):
            idx_cond = idx if idx.size(1) <= self.config.block_size \
                else idx[:, -self.config.block_size:]
            logits, _ = self(idx_cond)
            logits = logits[:, -1, :] / temperature
            if top_k is not None:
                v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                logits[logits < v[:, [-1]]] = -float('Inf')
            probs = F.softmax(logits, dim=-1)
            idx_next = torch.multinomial(probs, num_samples=1)
            idx = torch.cat((idx, idx_next), dim=1)
        return idx


@pytest.mark.parametrize("flash", [True, False])
def test_nanogpt_forward_and_loss(flash):
    """Inference (the last position, kept by a list index) with sdpa; the loss with the
    mask buffer sliced per length."""
    make = lambda: GPT(GPTConfig(flash=flash)).eval()      # noqa: E731
    if flash:
        run_program(make, [(ids(1, 5, 1),), (ids(2, 7, 2),)])
    else:
        run_program(make, [(ids(1, 5, 1), ids(1, 5, 9)), (ids(2, 7, 2), ids(2, 7, 8))])


def test_nanogpt_generate_top_k_and_crop():
    """Sampling (multinomial) with top-k, the context cropped at block_size."""
    def make():
        model = GPT(GPTConfig(n_layer=1)).eval()
        return lambda idx, n, top_k: model.generate(idx, n, top_k=top_k)
    run_program(make, [(ids(1, 5, 1), 3, 5), (ids(2, 12, 2), 6, None)])


def test_nanogpt_train_step_gradients():
    grads_match(lambda: GPT(GPTConfig(flash=False)).train(), lambda out: out[1],
                [(ids(2, 6, 1), ids(2, 6, 2)), (ids(3, 8, 3), ids(3, 8, 4))])


# ------------------------------------------------- karpathy/minGPT: model.py generate()
def test_mingpt_generate_greedy_and_sampled():
    def make(do_sample):
        model = GPT(GPTConfig(block_size=8, n_layer=1)).eval()

        @torch.no_grad()
        def generate(idx, max_new_tokens, temperature=1.0, top_k=None):
            for _ in range(max_new_tokens):
                idx_cond = idx if idx.size(1) <= 8 else idx[:, -8:]
                logits, _ = model(idx_cond)
                logits = logits[:, -1, :] / temperature
                if top_k is not None:
                    v, _ = torch.topk(logits, top_k)
                    logits[logits < v[:, [-1]]] = -float('Inf')
                probs = F.softmax(logits, dim=-1)
                if do_sample:
                    idx_next = torch.multinomial(probs, num_samples=1)
                else:
                    _, idx_next = torch.topk(probs, k=1, dim=-1)
                idx = torch.cat((idx, idx_next), dim=1)
            return idx
        return generate
    run_program(lambda: make(False), [(ids(1, 3, 1), 7), (ids(2, 5, 2), 3)])


# ------------------------------------------------- pytorch/examples: word_language_model
class RNNModel(nn.Module):
    """Encoder, recurrent module, decoder (model.py), with init_hidden."""

    def __init__(self, rnn_type, ntoken, ninp, nhid, nlayers, dropout=0.0):
        super().__init__()
        self.ntoken = ntoken
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        if rnn_type in ['LSTM', 'GRU']:
            self.rnn = getattr(nn, rnn_type)(ninp, nhid, nlayers, dropout=dropout)
        else:
            nonlinearity = {'RNN_TANH': 'tanh', 'RNN_RELU': 'relu'}[rnn_type]
            self.rnn = nn.RNN(ninp, nhid, nlayers, nonlinearity=nonlinearity, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        self.rnn_type, self.nhid, self.nlayers = rnn_type, nhid, nlayers

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        decoded = self.decoder(self.drop(output)).view(-1, self.ntoken)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        if self.rnn_type == 'LSTM':
            return (weight.new_zeros(self.nlayers, bsz, self.nhid),
                    weight.new_zeros(self.nlayers, bsz, self.nhid))
        return weight.new_zeros(self.nlayers, bsz, self.nhid)


def toks(t, b, s):
    return torch.randint(0, 30, (t, b), generator=torch.Generator().manual_seed(s))


@pytest.mark.parametrize("kind", ["LSTM", "RNN_TANH"])
def test_word_language_model_rnn(kind):
    def make():
        model = RNNModel(kind, 30, 16, 16, 2).eval()

        def evaluate(data):
            hidden = model.init_hidden(data.size(1))
            return model(data, hidden)
        return evaluate
    run_program(make, [(toks(7, 2, 1),), (toks(5, 3, 2),)])


def test_word_language_model_generate_py():
    """generate.py: sample a word, ``input.fill_(word_idx)``, collect Python ints."""
    def make():
        model = RNNModel("LSTM", 30, 16, 16, 2).eval()

        def generate(n, temperature):
            hidden = model.init_hidden(1)
            input = torch.randint(30, (1, 1), dtype=torch.long)
            words = []
            with torch.no_grad():
                for i in range(n):
                    output, hidden = model(input, hidden)
                    word_weights = output.squeeze().div(temperature).exp().cpu()
                    word_idx = torch.multinomial(word_weights, 1)[0]
                    input.fill_(word_idx)
                    words.append(int(word_idx))
            return words
        return generate
    run_program(make, [(5, 1.0), (8, 0.7)])


class TransformerModel(nn.Transformer):
    """model.py's TransformerModel: caches its causal mask on ``self`` in forward."""

    def __init__(self, ntoken, ninp, nhead, nhid, nlayers):
        super().__init__(d_model=ninp, nhead=nhead, dim_feedforward=nhid,
                         num_encoder_layers=nlayers, dropout=0.0)
        self.src_mask = None
        self.input_emb = nn.Embedding(ntoken, ninp)
        self.ninp = ninp
        self.decoder = nn.Linear(ninp, ntoken)

    def _generate_square_subsequent_mask(self, sz):
        mask = (torch.triu(torch.ones(sz, sz)) == 1).transpose(0, 1)
        return mask.float().masked_fill(mask == 0, float('-inf')).masked_fill(mask == 1, 0.0)

    def forward(self, src, has_mask=True):
        if has_mask:
            if self.src_mask is None or self.src_mask.size(0) != len(src):
                mask = self._generate_square_subsequent_mask(len(src)).to(src.device)
                self.src_mask = mask            # the cache write: eager runs this call
        else:
            self.src_mask = None
        src = self.input_emb(src) * math.sqrt(self.ninp)
        output = self.encoder(src, mask=self.src_mask)
        return F.log_softmax(self.decoder(output), dim=-1)


def test_word_language_model_transformer_mask_cache():
    """The calls that write the mask cache on ``self`` convert too (the graph sets it when
    it runs: ``runtime.module_writes``), leaving eager's mask on the module; the calls that
    find it cached convert, the encoder applying the mask (torch asks whether it is
    causal: ``runtime.library_questions``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)        # (enable_nested_tensor note)
        torch.manual_seed(0)
        eager = TransformerModel(30, 16, 2, 32, 2).eval()
        torch.manual_seed(0)
        g = to_graph(TransformerModel(30, 16, 2, 32, 2).eval())
    for i, (src, writes) in enumerate([(toks(7, 2, 1), True), (toks(7, 3, 2), False),
                                       (toks(5, 2, 3), True), (toks(5, 4, 4), False)]):
        exp, _ = _call(eager, (src,), i)
        got, fallbacks = _call(g, (src,), i)
        assert not fallbacks, fallbacks
        assert_same(got, exp)
        assert_same(g.original_module.src_mask, eager.src_mask)     # (stored anew: writes)


def _encoder(batch_first=False):
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=batch_first)
    return nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()


def test_transformer_encoder_with_a_mask_argument():
    """The PyTorch language-modeling tutorial's call: ``encoder(src, src_mask)``, the mask
    an argument (causal, then another), or made inside from the length."""
    causal = nn.Transformer.generate_square_subsequent_mask(5)
    other = torch.zeros(5, 5).masked_fill(torch.rand(5, 5) > 0.7, float("-inf")).fill_diagonal_(0)

    def make():
        enc = _encoder()
        return lambda x, m: enc(x, mask=m)
    run_program(make, [(torch.randn(5, 2, 16), causal), (torch.randn(5, 3, 16), other),
                       (torch.randn(5, 2, 16), causal)])

    def make_inside():
        enc = _encoder()
        return lambda x: enc(x, mask=nn.Transformer.generate_square_subsequent_mask(x.size(0)))
    run_program(make_inside, [(torch.randn(5, 2, 16),), (torch.randn(5, 3, 16),)])


# ------------------------------------------------- PyTorch tutorial: translation_transformer
PAD, BOS, EOS = 1, 2, 3


def square_subsequent_mask(sz):
    mask = (torch.triu(torch.ones((sz, sz))) == 1).transpose(0, 1)
    return mask.float().masked_fill(mask == 0, float('-inf')).masked_fill(mask == 1, 0.0)


class Seq2SeqTransformer(nn.Module):
    """nn.Transformer with token embeddings scaled by sqrt(E) and a sinusoid table."""

    def __init__(self, V=20, E=16):
        super().__init__()
        self.transformer = nn.Transformer(d_model=E, nhead=2, num_encoder_layers=1,
                                          num_decoder_layers=1, dim_feedforward=32,
                                          dropout=0.0)
        self.generator = nn.Linear(E, V)
        self.src_tok_emb, self.tgt_tok_emb = nn.Embedding(V, E), nn.Embedding(V, E)
        den = torch.exp(-torch.arange(0, E, 2) * math.log(10000) / E)
        pos = torch.arange(0, 50).reshape(50, 1)
        table = torch.zeros((50, E))
        table[:, 0::2], table[:, 1::2] = torch.sin(pos * den), torch.cos(pos * den)
        self.register_buffer('pos_embedding', table.unsqueeze(-2))
        self.E = E

    def embed(self, emb, tokens):
        x = emb(tokens.long()) * math.sqrt(self.E)
        return x + self.pos_embedding[:x.size(0), :]

    def forward(self, src, trg, src_mask, tgt_mask, src_padding_mask, tgt_padding_mask,
                memory_key_padding_mask):
        outs = self.transformer(self.embed(self.src_tok_emb, src),
                                self.embed(self.tgt_tok_emb, trg), src_mask, tgt_mask, None,
                                src_padding_mask, tgt_padding_mask, memory_key_padding_mask)
        return self.generator(outs)

    def encode(self, src, src_mask):
        return self.transformer.encoder(self.embed(self.src_tok_emb, src), src_mask)

    def decode(self, tgt, memory, tgt_mask):
        return self.transformer.decoder(self.embed(self.tgt_tok_emb, tgt), memory, tgt_mask)


def test_translation_tutorial_train_loss_with_masks():
    """create_mask (causal tgt mask, padding masks) into nn.Transformer; loss, gradients."""
    def make():
        model = Seq2SeqTransformer()

        def step(src, tgt):
            tgt_input = tgt[:-1, :]
            src_mask = torch.zeros((src.shape[0], src.shape[0])).type(torch.bool)
            tgt_mask = square_subsequent_mask(tgt_input.shape[0])
            src_padding_mask = (src == PAD).transpose(0, 1)
            tgt_padding_mask = (tgt_input == PAD).transpose(0, 1)
            logits = model(src, tgt_input, src_mask, tgt_mask, src_padding_mask,
                           tgt_padding_mask, src_padding_mask)
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                   tgt[1:, :].reshape(-1), ignore_index=PAD)
        return step
    run_program(make, [(torch.tensor([[2, 2], [5, 6], [7, 3], [3, 1]]),
                        torch.tensor([[2, 2], [8, 9], [3, 10], [1, 3]])),
                       (torch.tensor([[2, 2, 2], [5, 6, 11], [3, 7, 3]]),
                        torch.tensor([[2, 2, 2], [8, 9, 4], [3, 10, 3]]))], grad=True)


def test_translation_tutorial_greedy_decode():
    """``next_word = next_word.item()``, ``ys`` grown by cat, ``if next_word == EOS:
    break``: one loop with a staged break."""
    def make():
        model = Seq2SeqTransformer().eval()

        def greedy_decode(src, src_mask, max_len, start_symbol):
            memory = model.encode(src, src_mask)
            ys = torch.ones(1, 1).fill_(start_symbol).type(torch.long)
            for i in range(max_len - 1):
                tgt_mask = square_subsequent_mask(ys.size(0)).type(torch.bool)
                out = model.decode(ys, memory, tgt_mask).transpose(0, 1)
                _, next_word = torch.max(model.generator(out[:, -1]), dim=1)
                next_word = next_word.item()
                ys = torch.cat([ys, torch.ones(1, 1).type_as(src.data).fill_(next_word)], dim=0)
                if next_word == EOS:
                    break
            return ys
        return greedy_decode
    run_program(make, [(torch.tensor([[2], [5], [7], [3]]), torch.zeros(4, 4, dtype=torch.bool),
                        6, BOS),
                       (torch.tensor([[2], [9], [3]]), torch.zeros(3, 3, dtype=torch.bool), 8,
                        BOS)])


class PackedLSTM(nn.Module):
    """Text classifiers' packed LSTM (pack_padded_sequence with lengths)."""

    def __init__(self):
        super().__init__()
        self.emb, self.rnn, self.fc = nn.Embedding(20, 8), nn.LSTM(8, 8, batch_first=True), \
            nn.Linear(8, 2)

    def forward(self, text, lengths):
        packed = nn.utils.rnn.pack_padded_sequence(self.emb(text), lengths, batch_first=True,
                                                   enforce_sorted=False)
        packed_output, (hidden, cell) = self.rnn(packed)
        output, _ = nn.utils.rnn.pad_packed_sequence(packed_output, batch_first=True)
        return self.fc(hidden[-1]), output


def test_pack_padded_sequence_with_tensor_lengths_converts():
    """Packing with lengths known only when the graph runs: the packed sizes are run-time
    dims (runtime.packed_sequences), with and without grad."""
    inputs = [(torch.randint(0, 20, (3, 6)), torch.tensor([6, 4, 2])),
              (torch.randint(0, 20, (2, 5)), torch.tensor([3, 5]))]
    run_program(PackedLSTM, inputs)
    run_program(PackedLSTM, inputs, grad=True)


# ------------------------------------------------- pytorch/examples: reinforcement_learning
class Policy(nn.Module):
    """actor_critic.py: one trunk, an action head and a value head."""

    def __init__(self):
        super().__init__()
        self.affine1 = nn.Linear(4, 32)
        self.action_head = nn.Linear(32, 2)
        self.value_head = nn.Linear(32, 1)
        self.saved_actions = []

    def forward(self, x):
        x = F.relu(self.affine1(x))
        return F.softmax(self.action_head(x), dim=-1), self.value_head(x)


def test_actor_critic_select_action():
    """``Categorical(probs)`` validates its argument (torch asks ``bool()`` of a check):
    the check is staged, ``sample``/``log_prob``/``item`` convert."""
    def make():
        model = Policy()

        def select_action(state):
            probs, state_value = model(state)
            m = Categorical(probs)
            action = m.sample()
            return action.item(), m.log_prob(action), state_value
        return select_action
    run_program(make, [(torch.randn(4),), (torch.randn(4),), (torch.randn(4) * 3,)])


def test_gaussian_policy_rsample_gradients():
    class GaussianPolicy(nn.Module):       # (SAC/PPO-style continuous policy)
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            mu, log_std = self.lin(x).chunk(2, -1)
            d = Normal(mu, log_std.exp())
            a = d.rsample()
            return a, d.log_prob(a).sum(-1), d.entropy().mean()
    run_program(GaussianPolicy, [(torch.randn(3, 4),), (torch.randn(5, 4),)], grad=True)
    grads_match(GaussianPolicy, lambda out: out[1].mean() - 0.1 * out[2],
                [(torch.randn(3, 4),), (torch.randn(5, 4),)])


def test_distribution_validation_raises_as_eager():
    """A sample outside the support: eager raises ValueError, so does the graph."""
    def log_prob(logits, y):
        return Bernoulli(logits=logits).log_prob(y).sum()
    g = to_graph(log_prob, strict=True)
    good = (torch.randn(4), torch.tensor([0., 1., 1., 0.]))
    assert_same(g(*good), log_prob(*good))
    bad = (torch.randn(4), torch.tensor([0., 2., 1., 0.]))
    with pytest.raises(ValueError, match="support"):
        log_prob(*bad)
    with pytest.raises(ValueError, match="support"):
        g(*bad)


def test_actor_critic_episode_over_a_state_tensor_converts():
    """``for s in states`` (a tensor of static length) appending tuples a stacked list
    cannot hold unrolls (h96; it fell back naming the line)."""
    def make():
        model = Policy()

        def episode(states, rewards, gamma):
            saved = []
            for s in states:
                probs, v = model(s)
                m = Categorical(probs)
                a = m.sample()
                saved.append((m.log_prob(a), v))
            R, returns = 0, []
            for r in rewards[::-1]:
                R = r + gamma * R
                returns.insert(0, R)
            returns = torch.tensor(returns)
            returns = (returns - returns.mean()) / (returns.std() + 1e-7)
            losses = [-lp * (R - v.item()) + F.smooth_l1_loss(v, torch.tensor([R]))
                      for (lp, v), R in zip(saved, returns)]
            return torch.stack(losses).sum()
        return episode
    run_program(make, [(torch.randn(5, 4), [1.0, 1.0, 0.0, 1.0, 1.0], 0.99),
                       (torch.randn(3, 4), [1.0, 0.5, 1.0], 0.9)],
                grad=True)


# ------------------------------------------------- facebookresearch/llama: generation.py
def sample_top_p(probs, p):
    probs_sort, probs_idx = torch.sort(probs, dim=-1, descending=True)
    probs_sum = torch.cumsum(probs_sort, dim=-1)
    mask = probs_sum - probs_sort > p
    probs_sort[mask] = 0.0
    probs_sort.div_(probs_sort.sum(dim=-1, keepdim=True))
    next_token = torch.multinomial(probs_sort, num_samples=1)
    return torch.gather(probs_idx, -1, next_token)


def test_llama_style_generate_with_eos_all():
    """The token buffer filled in place per position, ``if all(eos_reached): break``
    (``all`` of a tensor: a staged test)."""
    def make():
        model = GPT(GPTConfig(block_size=32, n_layer=1)).eval()

        def generate(tokens, prompt_len, temperature, top_p, eos_id):
            bsz, total_len = tokens.shape
            eos_reached = torch.tensor([False] * bsz)
            input_text_mask = tokens != -1
            for cur_pos in range(prompt_len, total_len):
                logits, _ = model(tokens[:, :cur_pos].clamp(min=0))
                if temperature > 0:
                    probs = torch.softmax(logits[:, -1] / temperature, dim=-1)
                    next_token = sample_top_p(probs, top_p)
                else:
                    next_token = torch.argmax(logits[:, -1], dim=-1)
                next_token = next_token.reshape(-1)
                next_token = torch.where(input_text_mask[:, cur_pos], tokens[:, cur_pos],
                                         next_token)
                tokens[:, cur_pos] = next_token
                eos_reached |= (~input_text_mask[:, cur_pos]) & (next_token == eos_id)
                if all(eos_reached):
                    break
            return tokens
        return generate

    def prompt(rows, total):
        t = torch.full((len(rows), total), -1, dtype=torch.long)
        for k, r in enumerate(rows):
            t[k, :len(r)] = torch.tensor(r)
        return t
    run_program(make, [(prompt([[2, 3, 4], [5, 6]], 6), 2, 0.8, 0.9, 1),
                       (prompt([[7, 8]], 7), 2, 0.0, 0.9, 3)])


@pytest.mark.parametrize("spelling", ["all", "any", "all_list"])
def test_all_any_of_tensors(spelling):
    def f(x):
        out = 0
        for _ in range(6):
            x = x * 0.5
            if spelling == "all" and all(x < 1.0):
                break
            if spelling == "any" and any(x < 0.2):
                break
            if spelling == "all_list" and all([x[0] < 1.0, x[1] < 1.0, True]):
                break
            out += 1
        return x, out, all(x), any(x > 1)
    run_program(lambda: f, [(torch.tensor([4.0, 0.5, 3.0]),), (torch.tensor([0.1, 9.0, 0.3]),),
                            (torch.tensor([float("nan"), 0.0, 3.0]),)])


# ------------------------------------------------- pytorch/examples: vae, super_resolution,
# ------------------------------------------------- fast_neural_style, siamese_network
class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc21, self.fc22 = nn.Linear(64, 32), nn.Linear(32, 8), nn.Linear(32, 8)
        self.fc3, self.fc4 = nn.Linear(8, 32), nn.Linear(32, 64)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        eps = torch.randn_like(std)
        return mu + eps * std

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, 64))
        z = self.reparameterize(mu, logvar)
        recon = torch.sigmoid(self.fc4(F.relu(self.fc3(z))))
        bce = F.binary_cross_entropy(recon, x.view(-1, 64), reduction='sum')
        kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
        return bce + kld, recon


def test_vae_loss_and_gradients():
    inputs = [(torch.rand(3, 1, 8, 8),), (torch.rand(5, 1, 8, 8),)]
    run_program(VAE, inputs, grad=True)
    grads_match(VAE, lambda out: out[0], inputs)


class SuperResolutionNet(nn.Module):
    def __init__(self, upscale_factor=3):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, (5, 5), (1, 1), (2, 2))
        self.conv2 = nn.Conv2d(16, 8, (3, 3), (1, 1), (1, 1))
        self.conv3 = nn.Conv2d(8, upscale_factor ** 2, (3, 3), (1, 1), (1, 1))
        self.pixel_shuffle = nn.PixelShuffle(upscale_factor)

    def forward(self, x):
        x = F.relu(self.conv2(F.relu(self.conv1(x))))
        return self.pixel_shuffle(self.conv3(x))


def test_super_resolution():
    run_program(lambda: SuperResolutionNet().eval(),
                [(torch.randn(1, 1, 8, 8),), (torch.randn(2, 1, 6, 10),)])


class ConvLayer(nn.Module):
    def __init__(self, i, o, k, s, upsample=None):
        super().__init__()
        self.upsample = upsample
        self.reflection_pad = nn.ReflectionPad2d(k // 2)
        self.conv2d = nn.Conv2d(i, o, k, s)

    def forward(self, x):
        if self.upsample:
            x = F.interpolate(x, mode='nearest', scale_factor=self.upsample)
        return self.conv2d(self.reflection_pad(x))


class TransformerNet(nn.Module):
    """fast_neural_style: reflection padding, instance norm, a residual block, upsampling."""

    def __init__(self):
        super().__init__()
        self.conv1, self.in1 = ConvLayer(3, 8, 9, 1), nn.InstanceNorm2d(8, affine=True)
        self.conv2, self.in2 = ConvLayer(8, 16, 3, 2), nn.InstanceNorm2d(16, affine=True)
        self.res_a, self.res_in = ConvLayer(16, 16, 3, 1), nn.InstanceNorm2d(16, affine=True)
        self.up, self.in4 = ConvLayer(16, 8, 3, 1, upsample=2), nn.InstanceNorm2d(8, affine=True)
        self.out = ConvLayer(8, 3, 9, 1)

    def forward(self, X):
        y = F.relu(self.in1(self.conv1(X)))
        y = F.relu(self.in2(self.conv2(y)))
        y = y + self.res_in(self.res_a(y))
        y = F.relu(self.in4(self.up(y)))
        return self.out(y)


def gram_matrix(y):
    (b, ch, h, w) = y.size()
    features = y.view(b, ch, w * h)
    return features.bmm(features.transpose(1, 2)) / (ch * h * w)


def test_fast_neural_style_loss():
    def make():
        net = TransformerNet()

        def step(x, style_grams):
            y = net(x)
            style_loss = 0.
            for ft_y, gm_s in zip([y, y * 2], style_grams):
                style_loss += F.mse_loss(gram_matrix(ft_y), gm_s[:len(x), :, :])
            return F.mse_loss(y, x) + 1e-2 * style_loss
        return step
    grams = [torch.randn(4, 3, 3), torch.randn(4, 3, 3)]
    run_program(make, [(torch.randn(2, 3, 16, 16), grams), (torch.randn(1, 3, 12, 20), grams)],
                grad=True)


class SiameseNetwork(nn.Module):
    def __init__(self):
        super().__init__()
        self.cnn = nn.Sequential(nn.Conv2d(1, 8, 3), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
                                 nn.MaxPool2d(2))
        self.fc = nn.Sequential(nn.Linear(8 * 3 * 3 * 2, 16), nn.ReLU(inplace=True),
                                nn.Linear(16, 1))

    def forward_once(self, x):
        output = self.cnn(x)
        return output.view(output.size()[0], -1)

    def forward(self, input1, input2):
        output = torch.cat((self.forward_once(input1), self.forward_once(input2)), 1)
        return torch.sigmoid(self.fc(output))


def test_siamese_eval_and_train():
    pairs = [(torch.randn(2, 1, 8, 8), torch.randn(2, 1, 8, 8)),
             (torch.randn(3, 1, 8, 8), torch.randn(3, 1, 8, 8))]
    run_program(lambda: SiameseNetwork().eval(), pairs)
    grads_match(lambda: SiameseNetwork().train(),
                lambda out: F.binary_cross_entropy(out, torch.ones_like(out)), pairs)


# ------------------------------------------------- programs that must fall back (data-made
# ------------------------------------------------- Python values), naming their line
class EncoderRNN(nn.Module):
    """PyTorch's seq2seq translation tutorial: one token at a time, GRU."""

    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.hidden_size = hidden_size
        self.embedding = nn.Embedding(input_size, hidden_size)
        self.gru = nn.GRU(hidden_size, hidden_size)

    def forward(self, input, hidden):
        return self.gru(self.embedding(input).view(1, 1, -1), hidden)


class AttnDecoderRNN(nn.Module):
    def __init__(self, hidden_size, output_size, max_length):
        super().__init__()
        self.embedding = nn.Embedding(output_size, hidden_size)
        self.attn = nn.Linear(hidden_size * 2, max_length)
        self.attn_combine = nn.Linear(hidden_size * 2, hidden_size)
        self.gru = nn.GRU(hidden_size, hidden_size)
        self.out = nn.Linear(hidden_size, output_size)

    def forward(self, input, hidden, encoder_outputs):
        embedded = self.embedding(input).view(1, 1, -1)
        attn_weights = F.softmax(self.attn(torch.cat((embedded[0], hidden[0]), 1)), dim=1)
        attn_applied = torch.bmm(attn_weights.unsqueeze(0), encoder_outputs.unsqueeze(0))
        output = torch.cat((embedded[0], attn_applied[0]), 1)
        output = F.relu(self.attn_combine(output).unsqueeze(0))
        output, hidden = self.gru(output, hidden)
        return F.log_softmax(self.out(output[0]), dim=1), hidden, attn_weights


def test_seq2seq_tutorial_greedy_decode_falls_back():
    """Decoded words are text chosen by ``topi.item() == EOS``: not a graph value."""
    def make():
        enc, dec, L = EncoderRNN(12, 16), AttnDecoderRNN(16, 12, 10), 10

        def evaluate(input_tensor):
            with torch.no_grad():
                encoder_hidden = torch.zeros(1, 1, 16)
                encoder_outputs = torch.zeros(L, 16)
                for ei in range(input_tensor.size()[0]):
                    encoder_output, encoder_hidden = enc(input_tensor[ei], encoder_hidden)
                    encoder_outputs[ei] += encoder_output[0, 0]
                decoder_input = torch.tensor([[0]])
                decoder_hidden = encoder_hidden
                decoded_words = []
                for di in range(L):
                    decoder_output, decoder_hidden, _ = dec(decoder_input, decoder_hidden,
                                                            encoder_outputs)
                    topv, topi = decoder_output.data.topk(1)
                    if topi.item() == 1:
                        decoded_words.append('<EOS>')
                        break
                    else:
                        decoded_words.append(f"w{topi.item()}")
                    decoder_input = topi.squeeze().detach()
                return decoded_words
        return evaluate
    run_program(make, [(torch.tensor([[3], [4], [5], [1]]),), (torch.tensor([[6], [2], [1]]),)],
                falls_back_at="if topi.item() == 1:")


def test_beam_search_with_python_hypotheses_falls_back():
    """Finished hypotheses collected as Python lists (``.tolist()`` in a tensor ``if``)."""
    def make():
        model = GPT(GPTConfig(block_size=32, n_layer=1)).eval()

        def beam_search(prefix, beam, steps, eos):
            seqs, scores = prefix.repeat(beam, 1), torch.zeros(beam)
            scores[1:] = -1e9
            finished = []
            for _ in range(steps):
                logits = model(seqs, seqs)[0]
                logp = F.log_softmax(logits[:, -1], -1)
                top, idx = (scores[:, None] + logp).view(-1).topk(beam)
                prev, tok = idx // logp.size(1), idx % logp.size(1)
                seqs, scores = torch.cat([seqs[prev], tok[:, None]], 1), top
                done = tok == eos
                if done.any():
                    for b in done.nonzero().flatten().tolist():
                        finished.append((scores[b].item(), seqs[b].tolist()))
                    scores = scores.masked_fill(done, -1e9)
                if len(finished) >= beam:
                    break
            return max(finished) if finished else seqs[scores.argmax()].tolist()
        return beam_search
    run_program(make, [(ids(1, 3, 1), 3, 6, 2), (ids(1, 4, 2), 2, 5, 3)],
                falls_back_at="for b in done.nonzero().flatten().tolist():")


# ------------------------------------------------- a library installing hooks on first call
class LazyCapture(nn.Module):
    """The first forward registers forward hooks on the layers and marks the model as
    hooked (as transformers' output capturing does); the hooks log each layer's output in
    a list the model keeps across calls (a side effect no graph repeats)."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])
        self.history = []

    def _install(self):
        if getattr(self, "_hooks_installed", False):
            return
        for layer in self.layers:
            layer.register_forward_hook(lambda mod, inp, out: self.history.append(out))
        self._hooks_installed = True

    def forward(self, x):
        self._install()
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x


@pytest.mark.parametrize("strict", [False, True])
def test_hooks_installed_by_a_refused_trace_are_removed(strict):
    """The first call through the graph installs the hooks while tracing; the trace is
    refused (the hooks log into the model's list), and the hooks go with the mark, so the
    eager run (and the user's own eager calls) log each layer's output once."""
    torch.manual_seed(0)
    model = LazyCapture()
    g = to_graph(model, strict=strict)
    x = torch.randn(2, 8)
    if strict:
        with pytest.raises(ConversionError):
            g(x)
    else:
        with pytest.warns(FallbackWarning):
            g(x)
    assert len(model.history) == (0 if strict else 3)
    assert all(len(layer._forward_hooks) == (0 if strict else 1) for layer in model.layers)
    model(x)                                       # eager, after: each output once
    assert len(model.history) == (3 if strict else 6)
    assert all(len(layer._forward_hooks) == 1 for layer in model.layers)


class LazySetUp(nn.Module):
    """A library's one-time set-up on the first call (transformers' output capturing):
    hooks registered on the layers, and a mark on a submodule that later calls read."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 8))
        self.seen = []

    def forward(self, x):
        if not getattr(self.body, "_set_up", False):
            for layer in self.body:
                layer.register_forward_hook(lambda mod, inp, out: None)
            self.body._set_up = True
        return self.body(x) * 2


@pytest.mark.parametrize("strict", [False, True])
def test_one_time_set_up_on_the_first_call_converts(strict):
    """The first trace's set-up is kept once a second trace changes nothing
    (``transpiler/lazy_init.py``): the first call converts, in strict mode too; the hooks
    are registered once, as eagerly."""
    torch.manual_seed(0)
    model, twin = LazySetUp(), LazySetUp()
    twin.load_state_dict(model.state_dict())
    g = to_graph(model, strict=strict)
    for x in (torch.randn(2, 8), torch.randn(3, 8)):
        with warnings.catch_warnings():
            warnings.simplefilter("error", FallbackWarning)
            got = g(x)
        assert_same(got, twin(x))
    assert model.body._set_up is True
    assert [len(m._forward_hooks) for m in model.body] == [1, 1, 1]
    assert [len(m._forward_hooks) for m in twin.body] == [1, 1, 1]


class CountsCalls(nn.Module):
    """A number set on every call is no set-up: it is carried (``runtime.module_numbers``),
    counted as eagerly."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return self.lin(x)


def test_a_counter_on_the_module_is_not_kept():
    model = CountsCalls()
    g = to_graph(model, strict=True)
    for i in range(3):                  # (not kept as a set-up: carried, one trace)
        g(torch.randn(2, 4))
        assert type(model.calls) is int and model.calls == i + 1
    assert g.cache_info().traces == 1


# ------------------------------------------------- TorchScript helpers, custom Functions
@torch.jit.script
def bias_gelu(bias, y):
    """Megatron/older HF repos' fused bias+GELU, scripted."""
    x = bias + y
    return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))


class ScriptedHelper(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4, bias=False)
        self.b = nn.Parameter(torch.randn(4))

    def forward(self, x):
        return bias_gelu(self.b, self.lin(x))


def test_jit_script_function_runs_as_its_python():
    """A scripted function called with traced tensors ran in the TorchScript interpreter on
    placeholder storage: garbage baked in as a constant (values of 1e16). Now its Python
    original is converted (as torch.compile inlines it)."""
    inputs = [(torch.randn(2, 4),), (torch.randn(3, 4),)]
    run_program(ScriptedHelper, inputs)
    grads_match(ScriptedHelper, lambda out: out.square().mean(), inputs)


class UsesScriptedModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.jit.script(nn.Sequential(nn.Linear(4, 4), nn.Tanh()))

    def forward(self, x):
        return self.body(x) + 1


def test_jit_scripted_module_falls_back_at_its_call():
    run_program(UsesScriptedModule, [(torch.randn(2, 4),), (torch.randn(3, 4),)],
                falls_back_at="return self.body(x) + 1")


class GradReverse(torch.autograd.Function):
    """DANN's gradient reversal layer."""

    @staticmethod
    def forward(ctx, x, lambd):
        ctx.lambd = lambd
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output.neg() * ctx.lambd, None


def test_custom_autograd_function_under_autograd_keeps_its_backward():
    """With autograd recording, the graph calls ``GradReverse.apply`` itself, so the
    gradients are reversed (traced as forward's ops they were not, silently; then it fell
    back); without autograd, forward's ops are traced."""
    def make():
        m = nn.Linear(4, 2)

        def step(x, lambd):
            loss = GradReverse.apply(m(x), lambd).square().mean()
            loss.backward()
            return loss, m.weight.grad.clone()
        return step
    run_program(make, [(torch.randn(3, 4), 0.5), (torch.randn(2, 4), 1.0)], grad=True)

    def make_eval():
        m = nn.Linear(4, 2)
        return lambda x, lambd: GradReverse.apply(m(x), lambd) * 2
    run_program(make_eval, [(torch.randn(3, 4), 0.5), (torch.randn(2, 4), 1.0)])


# ------------------------------------------------- HF Mixtral's (older) routing loop; DDPM
class MoE(nn.Module):
    """Top-k routing, one expert at a time: ``torch.where`` of its mask (a run-time
    number of tokens) and ``if top_x.shape[0] == 0: continue``."""

    def __init__(self, d=8, n=4, k=2):
        super().__init__()
        self.gate, self.top_k, self.num_experts = nn.Linear(d, n, bias=False), k, n
        self.experts = nn.ModuleList([nn.Sequential(nn.Linear(d, 16), nn.SiLU(),
                                                    nn.Linear(16, d)) for _ in range(n)])

    def forward(self, hidden_states):
        batch_size, sequence_length, hidden_dim = hidden_states.shape
        hidden_states = hidden_states.view(-1, hidden_dim)
        router_logits = self.gate(hidden_states)
        routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
        routing_weights, selected_experts = torch.topk(routing_weights, self.top_k, dim=-1)
        routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
        final = torch.zeros((batch_size * sequence_length, hidden_dim))
        expert_mask = F.one_hot(selected_experts, num_classes=self.num_experts).permute(2, 1, 0)
        for expert_idx in range(self.num_experts):
            idx, top_x = torch.where(expert_mask[expert_idx])
            if top_x.shape[0] == 0:
                continue
            current = hidden_states[None, top_x].reshape(-1, hidden_dim)
            out = self.experts[expert_idx](current) * routing_weights[top_x, idx, None]
            final.index_add_(0, top_x, out)
        return final.reshape(batch_size, sequence_length, hidden_dim), router_logits


def test_moe_routing_loop_and_gradients():
    inputs = [(torch.randn(2, 3, 8),), (torch.randn(1, 5, 8),)]
    run_program(MoE, inputs)
    grads_match(MoE, lambda out: out[0].square().mean(), inputs)


def test_ddpm_sampling_loop():
    """denoising-diffusion-pytorch's p_sample_loop: ``reversed(range(T))``, coefficients
    gathered per timestep, ``noise = randn_like(x) if t > 0 else 0.``."""
    class Diffusion(nn.Module):
        def __init__(self, T=4):
            super().__init__()
            self.T = T
            betas = torch.linspace(1e-4, 0.02, T)
            ac = torch.cumprod(1. - betas, dim=0)
            ac_prev = F.pad(ac[:-1], (1, 0), value=1.)
            self.register_buffer('coef1', betas * torch.sqrt(ac_prev) / (1. - ac))
            self.register_buffer('coef2', (1. - ac_prev) * torch.sqrt(1. - betas) / (1. - ac))
            self.register_buffer('log_var', torch.log((betas * (1. - ac_prev) / (1. - ac))
                                                      .clamp(min=1e-20)))
            self.net = nn.Conv2d(3, 3, 3, padding=1)

        def extract(self, a, t, x_shape):
            return a.gather(-1, t).reshape(t.shape[0], *((1,) * (len(x_shape) - 1)))

        @torch.no_grad()
        def forward(self, shape):
            img = torch.randn(shape)
            for t in reversed(range(0, self.T)):
                tt = torch.full((shape[0],), t, dtype=torch.long)
                x_start = self.net(img).clamp(-1., 1.)
                mean = self.extract(self.coef1, tt, img.shape) * x_start + \
                    self.extract(self.coef2, tt, img.shape) * img
                noise = torch.randn_like(img) if t > 0 else 0.
                img = mean + (0.5 * self.extract(self.log_var, tt, img.shape)).exp() * noise
            return (img + 1) * 0.5
    run_program(Diffusion, [((2, 3, 8, 8),), ((1, 3, 6, 6),)])
