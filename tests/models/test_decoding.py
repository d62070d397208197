"""Greedy decoding around GPT-2 and LLaMA (transformers, tiny configs, no cache) written
naturally: ``ids`` grows by one token per iteration of a tensor ``while`` until every row
has emitted ``eos``. One ``while`` node carries ``ids`` with a run-time length; the tokens
equal eager's on two calls with other batch sizes, prompt lengths and token counts."""
import warnings

import pytest
import torch

from benchmarks.model_zoo import MODELS
from tests.e2e.e2e_helpers import op_counts
from transpiler import to_graph

EOS = 3


def greedy_logits_attr(model):
    def greedy(ids, max_new: int):
        done = torch.zeros(ids.shape[0], dtype=torch.bool)
        step = 0
        while not done.all() and step < max_new:
            logits = model(ids).logits[:, -1, :]
            nxt = logits.argmax(-1)
            nxt = torch.where(done, torch.full_like(nxt, EOS), nxt)
            ids = torch.cat([ids, nxt[:, None]], 1)
            done = done | (nxt == EOS)
            step += 1
        return ids
    return greedy


def greedy_first_output(model):
    def greedy(ids, max_new: int):
        done = torch.zeros(ids.shape[0], dtype=torch.bool)
        for _ in range(max_new):
            nxt = model(ids)[0][:, -1].argmax(-1)
            nxt = torch.where(done, torch.full_like(nxt, EOS), nxt)
            ids = torch.cat((ids, nxt.unsqueeze(-1)), dim=-1)
            done = done | (nxt == EOS)
            if done.all():
                break
        return ids
    return greedy


def prompt(batch, length, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(4, 256, (batch, length), generator=g)


@pytest.mark.parametrize("name,spelling,strict", [
    ("gpt2", greedy_logits_attr, True),
    ("llama", greedy_logits_attr, False),
    ("gpt2", greedy_first_output, False),
])
def test_greedy_decoding_is_one_while(name, spelling, strict):
    model, _ = MODELS[name]()
    fn = spelling(model)
    g = to_graph(fn, strict=strict)
    with torch.no_grad():
        for ids, max_new in ((prompt(2, 5, 0), 3), (prompt(1, 3, 1), 5)):
            exp = fn(ids, max_new)
            with warnings.catch_warnings():
                warnings.simplefilter("error")      # default mode: no fallback either
                got = g(ids, max_new)
            assert torch.equal(got, exp), (got, exp)
            assert op_counts(g.graph(ids, max_new))["while"] == 1


def test_greedy_decoding_with_a_growing_attention_mask():
    """The mask grows beside ``ids`` (left padding on one row): transformers pads it to
    the key length with a size it computes in an ``if`` test, inside the loop body."""
    model, _ = MODELS["gpt2"]()

    def greedy(ids, mask, max_new: int):
        done = torch.zeros(ids.shape[0], dtype=torch.bool)
        step = 0
        while not done.all() and step < max_new:
            nxt = model(ids, attention_mask=mask).logits[:, -1].argmax(-1)
            ids = torch.cat([ids, nxt[:, None]], 1)
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
            done = done | (nxt == EOS)
            step += 1
        return ids
    g = to_graph(greedy)
    with torch.no_grad():
        for ids, max_new in ((prompt(2, 5, 0), 3), (prompt(3, 4, 1), 4)):
            mask = torch.ones_like(ids)
            mask[0, :2] = 0
            exp = greedy(ids, mask, max_new)
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                got = g(ids, mask, max_new)
            assert torch.equal(got, exp), (got, exp)
            assert op_counts(g.graph(ids, mask, max_new))["while"] == 1
