"""Models and decoding/sampling loops as a new user writes them (issue 13): options users
pass to Hugging Face models, and sampling loops in the style of other projects (nanoGPT's
``generate`` with a seeded generator, HF's sampling warpers over a KV cache, beam search
and a speculative accept loop written by hand), eagerly and through ``to_graph`` (default
and strict), a second call with other inputs and batch. The programs follow their sources'
structure and torch calls; they are written here, not copied.

What this needed: a ``torch.Generator`` made inside the converted call is a stand-in whose
state is a graph value threaded through the draws (``runtime/operators/
traced_generators.py``); before, any generator fell back.
"""
import os
import sys
import warnings

import pytest
import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tests.e2e.e2e_helpers import assert_same  # noqa: E402
from transpiler import ConversionError, FallbackWarning, to_graph  # noqa: E402

THIS_FILE = os.path.basename(__file__)


def converts_like_eager(fn, calls, *, seed=5):
    """``fn`` converted gives eager's results with no fallback, and leaves the global
    generator where eager leaves it: in default mode on every call, in strict mode on the
    first (CI time)."""
    for strict in (False, True):
        g = to_graph(fn, strict=strict)
        for i, make in enumerate(calls[:1] if strict else calls):
            torch.manual_seed(seed + i)
            exp, exp_next = fn(*make()), torch.rand(2)
            torch.manual_seed(seed + i)
            with warnings.catch_warnings():
                warnings.simplefilter("error", FallbackWarning)
                got = g(*make())
            assert_same(got, exp, f"call {i} ({'strict' if strict else 'default'})")
            assert torch.equal(torch.rand(2), exp_next), "the global generator moved"
    return g


def falls_back_at(fn, args, text):
    """Default mode: eager's result and one FallbackWarning naming this file's line holding
    ``text``; strict: ConversionError naming it."""
    exp = fn(*args)
    with pytest.warns(FallbackWarning) as caught:
        got = to_graph(fn)(*args)
    assert_same(got, exp)
    with pytest.raises(ConversionError) as err:
        to_graph(fn, strict=True)(*args)
    for message in (str(caught[0].message), str(err.value)):
        line = message.split(THIS_FILE + ":")[1].split(":")[0]
        with open(__file__) as f:
            assert text in f.read().splitlines()[int(line) - 1], message


# ------------------------------------------------------------ generators made in the call
def draws_of_every_kind(p, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.multinomial(p, 2, generator=g), torch.randn(3, generator=g),
            p.multinomial(1, replacement=True, generator=g), torch.rand(2, 2, generator=g),
            torch.randint(0, 10, (4,), generator=g), torch.bernoulli(p, generator=g),
            torch.normal(p, 1.0, generator=g), torch.randperm(5, generator=g))


def unseeded_generator(p):
    g = torch.Generator()                 # a new generator's default seed
    return torch.multinomial(p, 1, generator=g), torch.randn(2, generator=g)


def state_saved_and_restored(p, seed):
    g = torch.Generator()
    g.manual_seed(seed)
    saved = g.get_state()
    a = torch.multinomial(p, 1, generator=g)
    g.set_state(saved)
    return a, torch.multinomial(p, 1, generator=g)     # the same draw again, as eager


def sample_until_stop(logits, max_new, seed, stop):
    """A growing ``ids`` sampled in a tensor ``while`` from one seeded generator."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.zeros(logits.shape[0], 1, dtype=torch.long)
    done = torch.zeros(logits.shape[0], dtype=torch.bool)
    step = 0
    while not done.all() and step < max_new:
        probs = F.softmax(logits + 0.1 * ids.sum(1, keepdim=True), -1)
        nxt = torch.multinomial(probs, 1, generator=g)
        ids = torch.cat([ids, nxt], 1)
        done = done | (nxt[:, 0] == stop)
        step += 1
    return ids


def seeded_on_one_path(p, seed):
    g = torch.Generator()
    if p.sum() > 2:                       # a tensor if: the state is chosen per path
        g.manual_seed(seed)
    return torch.multinomial(p, 2, generator=g)


def _p(b, seed):
    return torch.rand(b, 5, generator=torch.Generator().manual_seed(seed)) + 0.01


def test_draws_from_a_generator_made_inside_are_eagers():
    converts_like_eager(draws_of_every_kind, [lambda: (_p(2, 1), 1), lambda: (_p(3, 2), 7)])
    converts_like_eager(unseeded_generator, [lambda: (_p(2, 1),), lambda: (_p(1, 3),)])
    converts_like_eager(state_saved_and_restored, [lambda: (_p(2, 1), 4),
                                                   lambda: (_p(4, 2), 9)])


def test_a_generator_threads_through_tensor_loops_and_branches():
    converts_like_eager(sample_until_stop, [
        lambda: (torch.randn(2, 6, generator=torch.Generator().manual_seed(1)), 8, 1, 3),
        lambda: (torch.randn(3, 6, generator=torch.Generator().manual_seed(2)), 5, 2, 3),
        lambda: (torch.randn(3, 6, generator=torch.Generator().manual_seed(3)), 9, 7, 0)])
    converts_like_eager(seeded_on_one_path, [lambda: (_p(1, 1), 3), lambda: (_p(3, 2), 4),
                                             lambda: (_p(3, 3), 5)])


def returns_its_generator(p):
    g = torch.Generator().manual_seed(0)
    return torch.multinomial(p, 1, generator=g), g


def draws_in_place(p):
    g = torch.Generator().manual_seed(0)
    out = torch.empty(3)
    out.uniform_(generator=g)                          # draws in place
    return out * p.sum()


def test_what_the_graph_cannot_thread_falls_back_naming_the_line():
    falls_back_at(draws_in_place, (_p(2, 1),), "draws in place")
    with pytest.warns(FallbackWarning, match="TracedGenerator"):
        got = to_graph(returns_its_generator)(_p(2, 1))
    assert type(got[1]) is torch.Generator


# ------------------------------------------------------------ a loop variable's new object
class StepOut:
    """A model output's shape: tensors and a plain value, made anew by each step."""

    def __init__(self, logits, kind):
        self.logits, self.kind = logits, kind


def next_output_until(x, limit):
    out = StepOut(x * 2, "step")
    first = out
    while out.logits.sum() < limit:                    # a tensor while
        out = StepOut(out.logits * 1.5 + 1, "step")    # rebound to a new object
    return out.logits, out.kind, type(out).__name__, first.logits


def asks_whether_it_is_the_first(x, limit):
    out = StepOut(x, "step")
    first = out
    while out.logits.sum() < limit:                    # no iteration: out is first
        out = StepOut(out.logits + 1, "step")
    return out.logits, out is first


def test_a_loop_variable_rebound_to_a_new_object_each_iteration():
    """The body's new object carries its state as the variable's (``fresh_loop_objects``);
    the object from before the loop keeps its own; an ``is`` that no iteration would
    answer True falls back naming the loop."""
    x = torch.tensor([1.0, 2.0])
    converts_like_eager(next_output_until, [lambda: (x, 20.0), lambda: (-x, -50.0),
                                            lambda: (x + 3, 200.0)])
    g = to_graph(next_output_until)
    assert g(x, 20.0)[0].shape == (2,)
    falls_back_at(asks_whether_it_is_the_first, (x, 20.0), "no iteration: out is first")


# ------------------------------------------------------------ sampling loops around models
@pytest.fixture(scope="module")
def gpt2():
    pytest.importorskip("transformers")
    from benchmarks import model_zoo as Z
    return Z.gpt2()[0]


@pytest.fixture(scope="module")
def llama():
    pytest.importorskip("transformers")
    from benchmarks import model_zoo as Z
    return Z.llama()[0]


def ids(b, s, seed, lo=3):
    return torch.randint(lo, 256, (b, s), generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def nanogpt_generate(model, idx, max_new_tokens, temperature, top_k, seed, block=12):
    """nanoGPT's ``generate`` (crop to the block, temperature, top-k, multinomial), drawing
    from a generator seeded by the caller's number."""
    gen = torch.Generator().manual_seed(seed)
    for _ in range(max_new_tokens):
        idx_cond = idx if idx.size(1) <= block else idx[:, -block:]
        logits = model(idx_cond).logits
        logits = logits[:, -1, :] / temperature
        if top_k is not None:
            v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
            logits[logits < v[:, [-1]]] = -float('Inf')
        probs = F.softmax(logits, dim=-1)
        idx_next = torch.multinomial(probs, num_samples=1, generator=gen)
        idx = torch.cat((idx, idx_next), dim=1)
    return idx


def test_nanogpt_generate_with_a_seeded_generator(gpt2):
    converts_like_eager(lambda *a: nanogpt_generate(gpt2, *a), [
        lambda: (ids(1, 5, 1), 3, 0.8, 10, 11), lambda: (ids(2, 10, 2), 4, 1.0, None, 12)])


@torch.no_grad()
def hf_style_sample(model, input_ids, max_new, eos, pad, seed, top_k=8, top_p=0.9,
                    temperature=0.7, penalty=1.3, mask_steps=False):
    """transformers' sampling loop by hand: prefill, then one token per step over the KV
    cache, with its logits processors (repetition penalty, temperature, top-k, top-p),
    rows that finished padded, stopping when every row has."""
    from transformers import DynamicCache
    gen = torch.Generator().manual_seed(seed)
    cache = DynamicCache()
    attn = torch.ones_like(input_ids)
    out = model(input_ids, attention_mask=attn, past_key_values=cache, use_cache=True)
    unfinished = torch.ones(input_ids.shape[0], dtype=torch.long)
    cur, max_len = input_ids.shape[1], input_ids.shape[1] + max_new
    while unfinished.max() != 0 and cur < max_len:
        scores = out.logits[:, -1, :].float()
        score = torch.gather(scores, 1, input_ids)
        score = torch.where(score < 0, score * penalty, score / penalty)
        scores = scores.scatter(1, input_ids, score) / temperature
        kth = torch.topk(scores, top_k)[0][..., -1, None]
        scores = scores.masked_fill(scores < kth, -float("inf"))
        sorted_logits, sorted_idx = torch.sort(scores, descending=False)
        remove = sorted_logits.softmax(dim=-1).cumsum(dim=-1) <= (1 - top_p)
        remove[..., -1:] = 0
        scores = scores.masked_fill(remove.scatter(1, sorted_idx, remove), -float("inf"))
        tok = torch.multinomial(F.softmax(scores, dim=-1), 1, generator=gen).squeeze(1)
        tok = tok * unfinished + pad * (1 - unfinished)
        input_ids = torch.cat([input_ids, tok[:, None]], dim=-1)
        attn = torch.cat([attn, attn.new_ones((attn.shape[0], 1))], dim=-1)
        unfinished = unfinished & ~(tok == eos)
        cur += 1
        out = model(tok[:, None], attention_mask=attn if mask_steps else None,
                    past_key_values=cache, use_cache=True)
    return input_ids


def test_hf_style_sampling_loop_over_the_cache(llama):
    converts_like_eager(lambda *a: hf_style_sample(llama, *a), [
        lambda: (ids(1, 5, 1), 6, 7, 0, 11), lambda: (ids(3, 4, 2), 5, 9, 0, 12)])


def test_hf_style_sampling_loop_passing_the_grown_mask(gpt2):
    """The mask grows by a run-time length with the cache: DynamicLayer.get_seq_length's
    ``0 if numel() == 0 else shape[-2]`` is a run-time size (``size_hints.note_chosen``),
    so the mask's padding_length sizes F.pad (masking_utils.py:230)."""
    converts_like_eager(lambda *a: hf_style_sample(gpt2, *a, mask_steps=True), [
        lambda: (ids(2, 4, 2), 3, 9, 0, 12), lambda: (ids(3, 5, 3), 4, 7, 0, 13)])


@torch.no_grad()
def beam_search(model, prompt, beams, steps, eos):
    """Beam search by hand over tensors: beam scores, top-k over beams x vocabulary, the
    cache reordered by the chosen beams (``reorder_cache``), finished beams kept."""
    from transformers import DynamicCache
    b = prompt.shape[0]
    seqs = prompt.repeat_interleave(beams, 0)
    scores = torch.zeros(b, beams)
    scores[:, 1:] = -1e9
    scores = scores.view(-1)
    done = torch.zeros(b * beams, dtype=torch.bool)
    cache, inp = DynamicCache(), seqs
    for _ in range(steps):
        logp = F.log_softmax(model(inp, past_key_values=cache, use_cache=True).logits[:, -1], -1)
        logp = torch.where(done[:, None], torch.full_like(logp, -1e9), logp)
        logp[:, eos] = torch.where(done, torch.zeros_like(scores), logp[:, eos])
        top, idx = (scores[:, None] + logp).view(b, -1).topk(beams, dim=-1)
        vocab = logp.shape[-1]
        beam_idx = (idx // vocab + torch.arange(b)[:, None] * beams).view(-1)
        tok = (idx % vocab).view(-1)
        cache.reorder_cache(beam_idx)
        seqs = torch.cat([seqs[beam_idx], tok[:, None]], 1)
        done = done[beam_idx] | (tok == eos)
        scores, inp = top.view(-1), tok[:, None]
        if done.all():
            break
    best = (scores / (seqs != eos).sum(-1).float()).view(b, beams).argmax(-1)
    return seqs.view(b, beams, -1)[torch.arange(b), best], scores.view(b, beams)


def test_beam_search_by_hand_reordering_the_cache(gpt2):
    converts_like_eager(lambda *a: beam_search(gpt2, *a), [
        lambda: (ids(1, 4, 1), 3, 5, 7), lambda: (ids(2, 6, 2), 2, 4, 9)])


@torch.no_grad()
def speculative(target, draft, ids_, k, max_new):
    """Greedy speculative decoding: the draft proposes ``k`` tokens, the target scores them
    in one call, the longest agreeing prefix and the target's next token are kept."""
    start = ids_.shape[1]
    while ids_.shape[1] - start < max_new:
        prop = ids_
        for _ in range(k):
            prop = torch.cat([prop, draft(prop).logits[:, -1].argmax(-1, keepdim=True)], 1)
        pred = target(prop).logits[:, ids_.shape[1] - 1:].argmax(-1)
        guess = prop[:, ids_.shape[1]:]
        n_acc = int((guess == pred[:, :k]).cumprod(-1).sum())
        ids_ = torch.cat([ids_, guess[:, :n_acc], pred[:, n_acc:n_acc + 1]], 1)
    return ids_[:, :start + max_new]


def test_speculative_decoding_accept_loop(gpt2):
    import copy
    draft = copy.deepcopy(gpt2)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(0.01 * torch.randn(p.shape, generator=torch.Generator().manual_seed(1)))
    converts_like_eager(lambda *a: speculative(gpt2, draft, *a), [
        lambda: (ids(1, 4, 1), 2, 4), lambda: (ids(1, 6, 2), 2, 3)])


def test_generate_through_the_wrapper_sampled_and_beams(gpt2):
    w = to_graph(gpt2)
    for kw in (dict(max_new_tokens=4, do_sample=True, top_k=10, top_p=0.9, temperature=0.8,
                    pad_token_id=0),
               dict(max_new_tokens=3, num_beams=2, do_sample=False, pad_token_id=0,
                    eos_token_id=7)):
        for x in (ids(1, 4, 1), ids(2, 5, 2)):
            torch.manual_seed(3)
            exp = gpt2.generate(x, **kw)
            torch.manual_seed(3)
            assert torch.equal(w.generate(x, **kw), exp)


# ------------------------------------------------------------ options users pass
def _flat(o):
    if isinstance(o, torch.Tensor):
        return [o]
    if isinstance(o, (list, tuple)):
        return [t for v in o for t in _flat(v)]
    if hasattr(o, "to_tuple"):
        return _flat(o.to_tuple())
    if hasattr(o, "layers"):
        return [t for layer in o.layers for t in (layer.keys, layer.values)]
    return []


def _same_output(got, exp, tol):
    assert type(got) is type(exp)
    fg, fe = _flat(got), _flat(exp)
    assert len(fg) == len(fe)
    for a, b in zip(fg, fe):
        assert type(a) is torch.Tensor and a.dtype == b.dtype and a.shape == b.shape
        torch.testing.assert_close(a.float(), b.float(), rtol=tol, atol=tol)


def _padded(b, s):
    m = torch.ones(b, s, dtype=torch.long)
    for r in range(b):
        m[r, :r % 3] = 0                  # left padding on some rows
    return m


@pytest.mark.parametrize("strict", [False, True])
def test_bf16_model_and_inference_mode(gpt2, strict):
    import copy
    half = copy.deepcopy(gpt2).to(torch.bfloat16)
    for model, mode, tol in ((half, torch.no_grad, 2e-2), (gpt2, torch.inference_mode, 1e-4)):
        w = to_graph(model, strict=strict)
        for b, s in ((1, 7), (3, 9)):
            x, kw = ids(b, s, b + s), dict(attention_mask=_padded(b, s))
            with mode():
                exp = model(x, **kw)
            with mode(), warnings.catch_warnings():
                warnings.simplefilter("error", FallbackWarning)
                got = w(x, **kw)
            _same_output(got, exp, tol)


def test_legacy_tuple_cache_raises_eagers_error(gpt2):
    """transformers 5 no longer takes a tuple of (key, value) pairs as the cache: the
    converted call raises eager's error, in strict mode too (eager does not run it)."""
    with torch.no_grad():
        cache = gpt2(ids(1, 4, 1), use_cache=True).past_key_values
        legacy = tuple((layer.keys, layer.values) for layer in cache.layers)
        for strict in (False, True):
            with pytest.raises(AttributeError, match="get_seq_length"):
                gpt2(ids(1, 1, 2), past_key_values=legacy)
            with pytest.raises(AttributeError, match="get_seq_length"):
                to_graph(gpt2, strict=strict)(ids(1, 1, 2), past_key_values=legacy)


def test_t5_encoder_outputs_reused_with_the_cache():
    pytest.importorskip("transformers")
    from benchmarks import model_zoo as Z
    t5 = Z.t5()[0]
    w = to_graph(t5, strict=True)
    for b, s in ((1, 7), (3, 5)):
        x, dec = ids(b, s, s), ids(b, 3, s + 1, lo=0)
        outs = []
        for fn in (t5, w):
            with torch.no_grad():
                first = fn(x, decoder_input_ids=dec, use_cache=True)
                nxt = first.logits[:, -1:].argmax(-1)
                second = fn(None, decoder_input_ids=nxt, use_cache=True,
                            encoder_outputs=(first.encoder_last_hidden_state,),
                            past_key_values=first.past_key_values)
            outs.append((first, second))
        (e1, e2), (g1, g2) = outs
        _same_output(g1.logits, e1.logits, 1e-4)
        _same_output(g2, e2, 1e-4)
