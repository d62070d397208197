"""Decoding loops that pass the attention mask with the KV cache, as every real generation
loop does (issue 13: models "with and without attention_mask, with use_cache on and
off"): the mask grows by one column per step (``attn = torch.cat([attn, ones], 1)``) and
goes to the model with ``past_key_values=cache``, in ONE tensor ``while``.

What it took: a size that a tensor ``if`` chooses is a run-time size when every path gives
an int and one a size (``runtime/size_hints.note_chosen``). transformers'
``DynamicLayer.get_seq_length`` is ``0 if keys.numel() == 0 else keys.shape[-2]``; inside
the loop the keys' length is known only at run time, so that ``if`` is a cond, and the
mask's ``padding_length`` (``masking_utils.prepare_padding_mask``) computed from it sized
``F.pad``: before, shape inference had no value for it and the loop fell back. Its hint
is the value on the path the cond's test takes for the example tensors (the test is
computed from the hints too); a path whose int does not follow the run-time dimensions
(the 0) gives none, so nothing that follows the size is taken for static.

Each program runs eagerly and converted (default on every call, strict on the first),
with no FallbackWarning; tokens equal; the converted graph holds one ``while``.
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


def converts_like_eager(fn, calls, *, loops=None):
    """``fn`` converted gives eager's results with no fallback (default mode on every call,
    strict on the first); its graph for the first call has ``loops`` ``while`` nodes."""
    for strict in (False, True):
        g = to_graph(fn, strict=strict)
        for i, make in enumerate(calls[:1] if strict else calls):
            exp = fn(*make())
            with warnings.catch_warnings():
                warnings.simplefilter("error", FallbackWarning)
                got = g(*make())
            assert_same(got, exp, f"call {i} ({'strict' if strict else 'default'})")
    if loops is not None:
        ops = [n.op for n in g.graph(*calls[0]()).nodes]
        assert ops.count("while") == loops, ops
    return g


def ids(b, s, seed, lo=3):
    return torch.randint(lo, 256, (b, s), generator=torch.Generator().manual_seed(seed))


def left_padded(b, s):
    m = torch.ones(b, s, dtype=torch.long)
    for r in range(b):
        m[r, :r % 3] = 0                  # left padding on some rows
    return m


def keys(b, s, seed=0):
    return torch.randn(b, s, 4, generator=torch.Generator().manual_seed(seed))


def positions(attn):
    """Position ids from the mask, as ``generate`` makes them for a left-padded batch."""
    return (attn.long().cumsum(-1) - 1).masked_fill(attn == 0, 1)


# ------------------------------------------------------------ decoder-only models
@pytest.fixture(scope="module")
def models():
    pytest.importorskip("transformers")
    from benchmarks import model_zoo as Z
    return {"gpt2": Z.gpt2()[0], "llama": Z.llama()[0]}


@torch.no_grad()
def greedy(model, input_ids, attn, max_new, eos, grow=True, with_positions=False,
           cached=True):
    """Greedy decoding passing ``attention_mask`` every step: prefill, then a tensor
    ``while`` over the cache (``cached``) or over the whole sequence; the mask grows by a
    column of ones per step (``grow``) or stays the prompt's; position ids from the mask
    (``with_positions``); finished rows emit ``eos``."""
    from transformers import DynamicCache
    cache = DynamicCache() if cached else None
    kw = dict(position_ids=positions(attn)) if with_positions else {}
    out = model(input_ids, attention_mask=attn, past_key_values=cache, use_cache=cached, **kw)
    done = torch.zeros(input_ids.shape[0], dtype=torch.bool)
    step = 0
    while not done.all() and step < max_new:
        tok = torch.where(done, torch.full_like(done, eos, dtype=torch.long),
                          out.logits[:, -1].argmax(-1))
        input_ids = torch.cat([input_ids, tok[:, None]], 1)
        if grow:
            attn = torch.cat([attn, attn.new_ones((attn.shape[0], 1))], -1)
        done = done | (tok == eos)
        step += 1
        if with_positions:
            kw["position_ids"] = positions(attn)[:, -1:] if cached else positions(attn)
        out = model(tok[:, None] if cached else input_ids, attention_mask=attn,
                    past_key_values=cache, use_cache=cached, **kw)
    return input_ids


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_greedy_loop_passing_the_grown_mask(models, name):
    """The xfail of test_models_new_user, greedy, in both model families: the cache and
    the mask grow by a run-time length in one ``while``."""
    model = models[name]
    converts_like_eager(lambda *a: greedy(model, *a), [
        lambda: (ids(2, 5, 1), torch.ones(2, 5, dtype=torch.long), 4, 7),
        lambda: (ids(3, 4, 2), torch.ones(3, 4, dtype=torch.long), 3, 9)], loops=1)


def test_left_padded_batch_with_positions_from_the_mask(models):
    model = models["llama"]
    converts_like_eager(lambda *a: greedy(model, *a, with_positions=True), [
        lambda: (ids(3, 5, 3), left_padded(3, 5), 4, 7),
        lambda: (ids(2, 6, 4), left_padded(2, 6), 3, 9)])


def test_a_mask_that_is_not_grown_is_padded_as_eager_pads_it(models):
    """The prompt's mask passed every step: transformers pads it to the cache's length
    (``padding_length > 0`` at run time, the other path of the same cond)."""
    model = models["gpt2"]
    converts_like_eager(lambda *a: greedy(model, *a, grow=False), [
        lambda: (ids(2, 5, 5), left_padded(2, 5), 4, 7),
        lambda: (ids(3, 4, 6), torch.ones(3, 4, dtype=torch.long), 3, 9)])


def test_use_cache_off_the_whole_mask_each_step(models):
    model = models["gpt2"]
    converts_like_eager(lambda *a: greedy(model, *a, cached=False, with_positions=True), [
        lambda: (ids(3, 4, 7), left_padded(3, 4), 3, 7),
        lambda: (ids(2, 5, 8), torch.ones(2, 5, dtype=torch.long), 2, 9)])


# ------------------------------------------------------------ encoder-decoder (T5)
@torch.no_grad()
def t5_greedy(model, src, src_mask, max_new, eos):
    """T5-style: the encoder once with its (left-padded) mask, then a decoder loop over an
    ``EncoderDecoderCache`` passing the fixed encoder mask and a grown decoder mask."""
    from transformers import DynamicCache, EncoderDecoderCache
    enc = model.get_encoder()(input_ids=src, attention_mask=src_mask)
    cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
    dec = torch.zeros(src.shape[0], 1, dtype=torch.long)
    dmask = torch.ones_like(dec)
    out = model(encoder_outputs=enc, attention_mask=src_mask, decoder_input_ids=dec,
                decoder_attention_mask=dmask, past_key_values=cache, use_cache=True)
    done = torch.zeros(src.shape[0], dtype=torch.bool)
    step = 0
    while not done.all() and step < max_new:
        tok = torch.where(done, torch.full_like(done, eos, dtype=torch.long),
                          out.logits[:, -1].argmax(-1))
        dec = torch.cat([dec, tok[:, None]], 1)
        dmask = torch.cat([dmask, dmask.new_ones((dmask.shape[0], 1))], -1)
        done = done | (tok == eos)
        step += 1
        out = model(encoder_outputs=enc, attention_mask=src_mask, decoder_input_ids=tok[:, None],
                    decoder_attention_mask=dmask, past_key_values=cache, use_cache=True)
    return dec


def test_t5_decoder_loop_with_the_encoder_mask_and_a_grown_decoder_mask():
    pytest.importorskip("transformers")
    from benchmarks import model_zoo as Z
    t5 = Z.t5()[0]
    converts_like_eager(lambda *a: t5_greedy(t5, *a), [
        lambda: (ids(2, 5, 9), left_padded(2, 5), 4, 7),
        lambda: (ids(3, 4, 10), left_padded(3, 4), 3, 9)])


def test_generate_with_a_left_padded_mask_is_unchanged(models):
    """``to_graph(model).generate(..., attention_mask=...)``: eager's tokens, no fallback."""
    model = models["llama"]
    w = to_graph(model)
    for b, s in ((1, 4), (3, 5)):
        x, mask = ids(b, s, b + s), left_padded(b, s)
        exp = model.generate(x, attention_mask=mask, max_new_tokens=4, do_sample=False,
                             pad_token_id=0)
        with warnings.catch_warnings():
            warnings.simplefilter("error", FallbackWarning)
            got = w.generate(x, attention_mask=mask, max_new_tokens=4, do_sample=False,
                             pad_token_id=0)
        assert torch.equal(got, exp)


# ------------------------------------------------------------ the mechanism, by hand
def seq_length(k):
    """DynamicLayer.get_seq_length's shape: an int on one path, a size on the other."""
    if k.numel() == 0:
        return 0
    return k.shape[-2]


def padded_to_the_cache(k, m):
    """masking_utils.prepare_padding_mask's shape: a size from the chosen one pads."""
    n = seq_length(k) + 1
    if (p := n - m.shape[-1]) > 0:
        m = F.pad(m, (0, p))
    return m * 2 + torch.arange(m.shape[-1])


def grows_and_pads(k, m, steps: int):
    i = 0
    out, total = m, torch.zeros(())
    while i < steps and k.sum() > -1e9:          # a tensor while: k's length is run-time
        k = torch.cat([k, k[:, :1]], 1)
        out = padded_to_the_cache(k, m)
        total = total + torch.arange(seq_length(k) + 1).sum()
        i += 1
    return out, total, k


def shrinks_to_empty(k, m):
    """The 0 path is taken at run time on the last iteration (``k`` empty)."""
    out, total = m, torch.zeros(())
    while k.numel() > 0 and k.sum() > -1e9:     # a tensor while: k's length is run-time
        k = k[:, 1:]
        out = padded_to_the_cache(k, m)
        total = total + out.sum() + seq_length(k)
    return out, total


def test_a_size_chosen_by_a_tensor_if_sizes_pad_and_arange_in_a_loop():
    m = torch.ones(2, 2)
    converts_like_eager(grows_and_pads, [lambda: (keys(2, 3), m, 3), lambda: (keys(3, 5), m, 4),
                                         lambda: (keys(2, 1), m, 2)], loops=1)
    converts_like_eager(shrinks_to_empty, [lambda: (keys(2, 3), m), lambda: (keys(2, 6), m)],
                        loops=1)


def test_a_chosen_size_serves_dynamic_input_dims():
    """Two traces for nine lengths: the dynamic graph's ``pad`` follows the chosen size
    (its hint at every probe, the doubled sizes of ``strict_dims`` too)."""
    g = to_graph(padded_to_the_cache, strict=True)
    m = torch.ones(2, 2)
    for s in (3, 4, 8, 9, 2, 5, 6, 7, 12):
        k = keys(2, s, s)
        assert_same(g(k, m), padded_to_the_cache(k, m), f"length {s}")
    info = g.cache_info()
    assert info.traces == 2 and info.dynamic_dims == {"k": (1,)}, info


def padded_by_a_length(k, m):
    if (p := k.shape[1] + 1 - m.shape[-1]) > 0:      # p: an operand of the branch
        m = F.pad(m, (0, p))
    return m * 2


def test_a_branch_operand_that_is_a_size_serves_dynamic_input_dims():
    """A cond branch's operand size is hinted as the size outside, at every probe (it was
    known at two sizes one apart only: the doubled probe of a dynamic trace failed, and
    each length was traced static)."""
    g = to_graph(padded_by_a_length, strict=True)
    m = torch.ones(2, 2)
    for s in (3, 4, 8, 9, 2, 5, 1, 12):
        k = keys(2, s, s)
        assert_same(g(k, m), padded_by_a_length(k, m), f"length {s}")
    info = g.cache_info()
    assert info.dynamic_dims == {"k": (1,)} and info.traces <= 3, info     # (1: its own)


def below_a_threshold(k, m):
    n = 2 if k.shape[1] < 6 else k.shape[1]      # a constant on the path below 6
    return F.pad(m, (0, n)) + torch.arange(m.shape[1] + n)


def grows_past_a_threshold(k, m, steps: int):
    i, out = 0, m
    while i < steps and k.sum() > -1e9:
        k = torch.cat([k, k[:, :1]], 1)
        out = below_a_threshold(k, m)
        i += 1
    return out, k


def test_a_size_that_is_a_constant_below_a_threshold_is_never_taken_for_static():
    """Where the chosen path's int does not follow the sizes, the size has no hint: each
    length is traced static (or the loop falls back), never a graph whose output length
    was fixed at the example's."""
    m = torch.ones(2, 2)
    for dynamic in (None, True):
        g = to_graph(below_a_threshold, dynamic=dynamic)
        for s in (3, 4, 8, 9, 2, 5, 6, 7, 12):
            k = keys(2, s, s)
            assert_same(g(k, m), below_a_threshold(k, m), f"length {s}")
    g = to_graph(grows_past_a_threshold)
    for s, steps in ((3, 5), (4, 6), (2, 1), (7, 2)):
        k = keys(2, s, s)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FallbackWarning)
            got = g(k, m, steps)
        assert_same(got, grows_past_a_threshold(k, m, steps), f"length {s}, {steps} steps")


def chosen_by_data(k):
    if k[0, -1].sum() > 0:                       # data decides: no hint
        return 0
    return k.shape[1]


def grows_with_a_size_chosen_by_data(k, m, steps: int):
    i, out = 0, m
    while i < steps and k.sum() > -1e9:
        k = torch.cat([k, k[:, :1]], 1)
        out = F.pad(m, (0, chosen_by_data(k)))   # sized by data
        i += 1
    return out, k


def named_line(message: str) -> str:
    """The line of this file that ``message`` names (``test_kv_cache_mask_loops.py:N``)."""
    number = int(message.split(THIS_FILE + ":")[1].split(":")[0])
    with open(__file__) as f:
        return f.read().splitlines()[number - 1]


def test_a_size_chosen_by_data_falls_back_naming_the_line():
    """No hint when data picks the path: the loop runs eagerly (strict: an error), naming
    the line the size is needed at."""
    m = torch.ones(2, 2)
    args = (keys(2, 3), m, 3)
    with pytest.warns(FallbackWarning) as caught:
        got = to_graph(grows_with_a_size_chosen_by_data)(*args)
    assert_same(got, grows_with_a_size_chosen_by_data(*args))
    with pytest.raises(ConversionError) as err:
        to_graph(grows_with_a_size_chosen_by_data, strict=True)(*args)
    assert "sized by data" in named_line(str(caught[0].message))
    assert "sized by data" in named_line(str(err.value))
