"""An eager Python decoding loop calling ``to_graph(model)`` step by step, with a
``DynamicCache`` and a growing ``attention_mask`` (what a user writes first):

    for step in range(12):
        out = model(tok[:, None], attention_mask=attn, past_key_values=cache, use_cache=True)
        tok = out.logits[:, -1].argmax(-1)
        attn = torch.cat([attn, attn.new_ones((b, 1))], -1)

The mask is one longer than the cache (``S + 1`` against ``S``): the dynamic trace's
doubling probe (``2S + 2`` against the ``2S + 1`` transformers computes from the cache)
refused the dynamic graph at ``masking_utils``' ``expand``, and every step traced again
(13 traces for 12 steps). Now that refusal is retried shifted (``runtime/size_probes.py``):
one graph serves every step whose sizes keep the traced offsets. Traces: the prefill, the
first step (the first size of its signature) and one dynamic graph.

Tokens equal eager's exactly, with no FallbackWarning; GPT-2 and LLaMA tiny, mask and no
mask, left padding, two tokens per step.
"""
import os
import sys
import warnings

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks import model_zoo  # noqa: E402
from transpiler import FallbackWarning, to_graph  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::transpiler.RetracingWarning",
                                        "ignore::FutureWarning")

PROMPT = 6


def decode(model, ids, attn, steps, per_step=1):
    """Greedy decoding in Python: prefill, then ``steps`` calls adding ``per_step`` tokens
    (the last token repeated) and as many mask columns."""
    from transformers import DynamicCache
    cache = DynamicCache()
    b = ids.shape[0]
    mask = {} if attn is None else {"attention_mask": attn}
    out = model(ids, past_key_values=cache, use_cache=True, **mask)
    tok = out.logits[:, -1].argmax(-1)
    toks = [tok]
    for _ in range(steps):
        new = tok[:, None].repeat(1, per_step)
        if attn is not None:
            attn = torch.cat([attn, attn.new_ones((b, per_step))], -1)
            mask = {"attention_mask": attn}
        out = model(new, past_key_values=cache, use_cache=True, **mask)
        tok = out.logits[:, -1].argmax(-1)
        toks.append(tok)
    return torch.stack(toks, 1), out.logits


def _inputs(batch, mask, left_pad):
    ids = torch.randint(0, model_zoo.VOCAB, (batch, PROMPT),
                        generator=torch.Generator().manual_seed(batch))
    if not mask:
        return ids, None
    attn = torch.ones(batch, PROMPT, dtype=torch.long)
    if left_pad:
        attn[0, :2] = 0
    return ids, attn


def _check(name, batch, mask, left_pad=False, steps=12, per_step=1, strict=False):
    model, _ = getattr(model_zoo, name)(use_cache=True)
    ids, attn = _inputs(batch, mask, left_pad)
    with torch.no_grad():
        exp_tokens, exp_logits = decode(model, ids, attn, steps, per_step)
        g = to_graph(model, strict=strict)
        with warnings.catch_warnings():
            warnings.simplefilter("error", FallbackWarning)
            got_tokens, got_logits = decode(g, ids, attn, steps, per_step)
    assert torch.equal(got_tokens, exp_tokens), (got_tokens, exp_tokens)
    torch.testing.assert_close(got_logits, exp_logits, rtol=1e-4, atol=1e-4)
    return g.cache_info()


@pytest.mark.parametrize("name", ["gpt2", "llama"])
@pytest.mark.parametrize("mask", [True, False], ids=["mask", "no_mask"])
def test_one_dynamic_graph_serves_every_step(name, mask):
    info = _check(name, 1, mask)
    assert info.traces == 3 and info.fallbacks == 0, info


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_left_padded_batch(name):
    info = _check(name, 2, True, left_pad=True)
    assert info.traces == 3, info


def test_two_tokens_per_step():
    info = _check("gpt2", 2, True, left_pad=True, steps=8, per_step=2)
    assert info.traces == 3, info


def test_strict_and_more_steps():
    info = _check("llama", 2, True, steps=32, strict=True)
    assert info.traces == 3, info
