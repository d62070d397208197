"""A KV cache passed IN and grown by the call converts (``runtime/argument_objects.py``):
``model(nxt, past_key_values=cache)`` with a transformers ``DynamicCache`` /
``EncoderDecoderCache`` from a previous call, or a user-written cache class. The cache's
tensors are graph inputs (their growing dim dynamic after a second length), and what the
call writes (``layer.keys = torch.cat(...)``, ``cache.k.append(k)``) is written back:
the caller's cache and its layer objects stay the same objects, holding eager's tensors.
Checked against eager on twin caches, step after step, then with another batch.
"""
import copy
import os
import sys
import warnings

import pytest
import torch
from torch import nn

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

pytest.importorskip("transformers")

from benchmarks import model_zoo as Z  # noqa: E402
from transpiler import FallbackWarning, to_graph  # noqa: E402


def tokens(batch, length, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(4, 256, (batch, length), generator=g)


def layer_tensors(cache):
    """(keys, values) of every layer of a DynamicCache or EncoderDecoderCache."""
    caches = [cache.self_attention_cache, cache.cross_attention_cache] \
        if hasattr(cache, "self_attention_cache") else [cache]
    return [(layer.keys, layer.values) for c in caches for layer in c.layers]


def same_cache(got, exp):
    assert type(got) is type(exp)
    pairs_g, pairs_e = layer_tensors(got), layer_tensors(exp)
    assert len(pairs_g) == len(pairs_e)
    for (kg, vg), (ke, ve) in zip(pairs_g, pairs_e):
        for a, b in ((kg, ke), (vg, ve)):
            assert type(a) is torch.Tensor and a.shape == b.shape
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def converted_call(g, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        return g(*args, **kwargs)


def decode_against_eager(model, g, make_call, batches=(2, 3), steps=3):
    """Prefill eagerly, then feed the cache back step by step: eager on one cache,
    the converted model on its deep copy."""
    with torch.no_grad():
        for batch in batches:
            args, kwargs = make_call(tokens(batch, 5, batch), None)
            out = model(*args, **kwargs)
            c_eager = out.past_key_values
            c_graph = copy.deepcopy(c_eager)
            layers = [id(x) for c in (c_graph.__dict__.values()) for x in
                      (c if isinstance(c, list) else [c])]
            nxt = out.logits[:, -1:].argmax(-1)
            for _ in range(steps):
                args, kwargs = make_call(nxt, c_graph)
                got = converted_call(g, *args, **kwargs)
                args, kwargs = make_call(nxt, c_eager)
                exp = model(*args, **kwargs)
                torch.testing.assert_close(got.logits, exp.logits, rtol=1e-4, atol=1e-4)
                assert got.past_key_values is c_graph
                assert [id(x) for c in (c_graph.__dict__.values()) for x in
                        (c if isinstance(c, list) else [c])] == layers
                same_cache(c_graph, c_eager)
                nxt = exp.logits[:, -1:].argmax(-1)


@pytest.mark.parametrize("name,batches", [("gpt2", (2, 3)), ("llama", (2,))])
def test_decoder_cache_passed_in_and_grown(name, batches):
    model, _ = getattr(Z, name)(use_cache=True)
    g = to_graph(model, strict=True)
    decode_against_eager(model, g, lambda ids, cache: (
        (ids,), dict(use_cache=True) if cache is None else
        dict(past_key_values=cache, use_cache=True)), batches=batches)
    info = g.cache_info()
    assert info.fallbacks == 0 and info.traces <= 4, info   # (two per cache object)


def test_t5_encoder_decoder_cache_passed_in():
    model, _ = Z.t5(use_cache=True)
    g = to_graph(model, strict=True)
    src = {}

    def call(ids, cache):
        if cache is None:
            src["ids"] = tokens(ids.shape[0], 7, 9)
            return (), dict(input_ids=src["ids"], decoder_input_ids=ids, use_cache=True)
        return (), dict(input_ids=src["ids"], decoder_input_ids=ids, past_key_values=cache,
                        use_cache=True)
    decode_against_eager(model, g, call, batches=(2,), steps=2)


def test_an_empty_cache_passed_in_for_the_prefill():
    """``DynamicCache(config=...)`` made by the caller, filled by the converted prefill
    (its layers' lazy initialization: a flag, a device, the tensors), then decoding."""
    from transformers import DynamicCache
    model, _ = Z.gpt2(use_cache=True)
    g = to_graph(model, strict=True)
    with torch.no_grad():
        ids = tokens(2, 5, 0)
        c_eager, c_graph = DynamicCache(config=model.config), DynamicCache(config=model.config)
        exp = model(ids, past_key_values=c_eager, use_cache=True)
        got = converted_call(g, ids, past_key_values=c_graph, use_cache=True)
        torch.testing.assert_close(got.logits, exp.logits, rtol=1e-4, atol=1e-4)
        assert got.past_key_values is c_graph
        same_cache(c_graph, c_eager)
        nxt = exp.logits[:, -1:].argmax(-1)
        exp = model(nxt, past_key_values=c_eager, use_cache=True)
        got = converted_call(g, nxt, past_key_values=c_graph, use_cache=True)
        torch.testing.assert_close(got.logits, exp.logits, rtol=1e-4, atol=1e-4)
        same_cache(c_graph, c_eager)


# ----------------------------------------------------------------- a user-written cache
class KV:
    def __init__(self):
        self.k, self.v = [], []


class Attention(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.qkv, self.out = nn.Linear(width, 3 * width), nn.Linear(width, width)

    def forward(self, x, cache, index):
        q, k, v = self.qkv(x).chunk(3, -1)
        if len(cache.k) > index:
            cache.k[index] = torch.cat([cache.k[index], k], 1)
            cache.v[index] = torch.cat([cache.v[index], v], 1)
        else:
            cache.k.append(k)
            cache.v.append(v)
        k, v = cache.k[index], cache.v[index]
        att = torch.softmax(q @ k.transpose(1, 2) / k.shape[-1] ** 0.5, -1)
        return x + self.out(att @ v)


class TinyLM(nn.Module):
    def __init__(self, width=16, layers=2):
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(256, width)
        self.blocks = nn.ModuleList(Attention(width) for _ in range(layers))
        self.head = nn.Linear(width, 256)

    def forward(self, ids, cache):
        h = self.emb(ids)
        for i, block in enumerate(self.blocks):
            h = block(h, cache, i)
        return self.head(h)


def step(model, ids, cache, stats):
    logits = model(ids, cache)
    stats.last = logits[:, -1].amax(-1)      # another argument object written
    return logits[:, -1].argmax(-1, keepdim=True)


@pytest.mark.parametrize("strict", [True, False])
def test_a_user_cache_class_and_another_argument_object(strict):
    model = TinyLM().eval()
    g = to_graph(step, strict=strict)
    with torch.no_grad():
        for batch in (2, 3):
            ce, cg = KV(), KV()
            se, sg = KV(), KV()
            lists = (cg.k, cg.v)
            ids = tokens(batch, 4, batch)
            for _ in range(4):
                exp = step(model, ids, ce, se)
                got = converted_call(g, model, ids, cg, sg)
                assert torch.equal(got, exp)
                assert (cg.k, cg.v) == lists and cg.k is lists[0] and cg.v is lists[1]
                assert len(cg.k) == len(ce.k) == 2
                for a, b in zip(cg.k + cg.v, ce.k + ce.v):
                    assert type(a) is torch.Tensor
                    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
                torch.testing.assert_close(sg.last, se.last)
                ids = exp


# ----------------------------------------------------------------- decoding loops
def decode_counted(model):
    def decode(ids, n: int):
        out = model(ids, use_cache=True)
        cache = out.past_key_values
        nxt = out.logits[:, -1:].argmax(-1)
        toks = [nxt]
        for _ in range(n):                    # a Python count: unrolled while tracing
            out = model(nxt, past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            nxt = out.logits[:, -1:].argmax(-1)
            toks.append(nxt)
        return torch.cat(toks, 1)
    return decode


def decode_until_eos(model):
    def decode(ids, max_new: int):
        out = model(ids, use_cache=True)
        cache = out.past_key_values
        nxt = out.logits[:, -1].argmax(-1)
        done = nxt == 3
        toks = nxt[:, None]
        while not done.all() and toks.shape[1] < max_new:      # a tensor while
            out = model(nxt[:, None], past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            nxt = torch.where(done, torch.full_like(nxt, 3), out.logits[:, -1].argmax(-1))
            toks = torch.cat([toks, nxt[:, None]], 1)
            done = done | (nxt == 3)
        return toks
    return decode


def test_a_decoding_loop_with_use_cache_inside_one_function():
    """Prefill, then one token per step feeding ``past_key_values`` back, in one
    converted function: a Python-counted loop converts, and so does a tensor ``while``
    carrying the cache object (its layers' tensors are loop variables with a run-time
    length: ``tests/models/test_kv_cache_while.py``)."""
    model, _ = Z.gpt2(use_cache=True)
    with torch.no_grad():
        fn = decode_counted(model)
        g = to_graph(fn, strict=True)
        ids = tokens(2, 5, 0)
        assert torch.equal(converted_call(g, ids, 3), fn(ids, 3))
        fn = decode_until_eos(model)
        g = to_graph(fn, strict=True)
        ids = tokens(2, 5, 0)
        assert torch.equal(converted_call(g, ids, 4), fn(ids, 4))
        assert [n.op for n in g.graph(ids, 4).nodes].count("while") == 1
