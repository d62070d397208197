"""Greedy decoding with a KV cache in ONE converted function: prefill, then a tensor
``while`` (``not done.all() and step < max_new``) feeding ``past_key_values`` back until
every row has emitted EOS. The cache's tensors (a ``DynamicCache``'s layers' keys/values,
a user cache's lists) are loop variables with a run-time length; after the loop the
cache, its list and its layer objects are the same objects, holding eager's tensors.
Two calls per model: EOS hit early by every row (duplicate rows), and never (batch 3,
another prompt length); tokens equal, final caches within 1e-4, one ``while`` node.
"""
import copy
import os
import sys
import warnings

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

pytest.importorskip("transformers")

from benchmarks import model_zoo as Z  # noqa: E402
from tests.models.test_kv_cache_in import KV, TinyLM, same_cache  # noqa: E402
from transpiler import FallbackWarning, to_graph  # noqa: E402

MAX_NEW = 5


def tokens(batch, length, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(4, 256, (batch, length), generator=g)


def make_decode(model):
    def decode(ids, max_new: int, eos: int):
        out = model(ids, use_cache=True)
        cache = out.past_key_values
        nxt = out.logits[:, -1].argmax(-1)
        done = nxt == eos
        toks = nxt[:, None]
        step = 0
        while not done.all() and step < max_new:
            out = model(nxt[:, None], past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            nxt = torch.where(done, torch.full_like(nxt, eos), out.logits[:, -1].argmax(-1))
            toks = torch.cat([toks, nxt[:, None]], 1)
            done = done | (nxt == eos)
            step += 1
        return toks, cache
    return decode


def converted(g, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        return g(*args)


def calls_with_eos(decode):
    """([ids, ids], eos, new tokens of the first) with one eos: a batch-2 prompt (the same
    row twice) that emits eos as a new token inside the loop, and a batch-3 prompt of
    another length that never does."""
    for seed in range(50):
        prompt = tokens(1, 5, seed).repeat(2, 1)
        row = decode(prompt, MAX_NEW, -1)[0][0].tolist()
        early = [j for j in range(1, MAX_NEW - 1) if row[j] not in row[:j]]
        if early:
            break
    eos = row[early[0]]
    never = next(p for p in (tokens(3, 7, s) for s in range(1, 50))
                 if not (decode(p, MAX_NEW, eos)[0] == eos).any())
    return [prompt, never], eos, early[0] + 1


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_decoding_loop_carries_the_cache(name):
    model, _ = getattr(Z, name)(use_cache=True)
    decode = make_decode(model)
    g = to_graph(decode, strict=True)
    with torch.no_grad():
        prompts, eos, stop = calls_with_eos(decode)
        lengths = []
        for ids in prompts:
            exp, c_eager = decode(ids, MAX_NEW, eos)
            got, c_graph = converted(g, ids, MAX_NEW, eos)
            assert torch.equal(got, exp)
            same_cache(c_graph, c_eager)
            lengths.append(got.shape[1])
        assert lengths == [stop, MAX_NEW + 1] and stop < MAX_NEW    # early EOS; never
        ops = [n.op for n in g.graph(prompts[1], MAX_NEW, eos).nodes]
        assert ops.count("while") == 1
    assert g.cache_info().fallbacks == 0


def test_a_cache_passed_in_and_not_rebound():
    """The caller's DynamicCache grown by ``model(...)`` calls in the loop (the loop never
    assigns it): written back, its list and layer objects the same objects."""
    model, _ = Z.gpt2(use_cache=True)

    def decode(nxt, cache, max_new: int):
        done = nxt == 3
        toks = nxt[:, None]
        while not done.all() and toks.shape[1] <= max_new:
            logits = model(nxt[:, None], past_key_values=cache, use_cache=True).logits
            nxt = torch.where(done, torch.full_like(nxt, 3), logits[:, -1].argmax(-1))
            toks = torch.cat([toks, nxt[:, None]], 1)
            done = done | (nxt == 3)
        return toks
    g = to_graph(decode, strict=True)
    with torch.no_grad():
        for batch, length in ((2, 5), (3, 4)):
            out = model(tokens(batch, length, batch), use_cache=True)
            c_eager = out.past_key_values
            c_graph = copy.deepcopy(c_eager)
            layers, objects = c_graph.layers, list(c_graph.layers)
            nxt = out.logits[:, -1].argmax(-1)
            exp = decode(nxt, c_eager, 4)
            got = converted(g, nxt, c_graph, 4)
            assert torch.equal(got, exp)
            assert c_graph.layers is layers and all(a is b for a, b in zip(layers, objects))
            same_cache(c_graph, c_eager)


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "default"])
def test_a_user_cache_class_in_the_loop(strict):
    """A user's cache (lists of tensors whose items the model replaces: ``cache.k[i] =
    torch.cat(...)``), made inside the function and returned, and one passed in."""
    model = TinyLM().eval()

    def decode(ids, cache, eos: int):
        nxt = model(ids, cache)[:, -1].argmax(-1)
        done = nxt == eos
        toks = nxt[:, None]
        while not done.all() and toks.shape[1] <= MAX_NEW:
            nxt = torch.where(done, torch.full_like(nxt, eos), model(nxt[:, None], cache)[:, -1]
                              .argmax(-1))
            toks = torch.cat([toks, nxt[:, None]], 1)
            done = done | (nxt == eos)
        return toks

    def fresh(ids, eos: int):
        cache = KV()
        return decode(ids, cache, eos), cache.k, cache.v
    g_in, g_made = to_graph(decode, strict=strict), to_graph(fresh, strict=strict)
    with torch.no_grad():
        for ids in (tokens(2, 4, 0), tokens(3, 6, 1)):
            ce, cg = KV(), KV()
            exp = decode(ids, ce, -1)
            got = converted(g_in, ids, cg, -1)
            assert torch.equal(got, exp)
            assert len(cg.k) == len(ce.k) == 2
            for a, b in zip(cg.k + cg.v, ce.k + ce.v):
                assert type(a) is torch.Tensor
                torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
            exp = fresh(ids, -1)
            got = converted(g_made, ids, -1)
            assert torch.equal(got[0], exp[0]) and type(got[1]) is list
            for a, b in zip(got[1] + got[2], exp[1] + exp[2]):
                torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
        assert [n.op for n in g_in.graph(ids, KV(), -1).nodes].count("while") == 1
