"""MoE decoders (Mixtral, Qwen2-MoE) traced once per sequence length; dense ones twice (h88).

Found with ``tograph.dynamic``'s log on a tiny Mixtral called at new (batch, length) sizes
with a padding mask: the trace with both ``input_ids`` dims dynamic failed at
``MixtralSparseMoeBlock.forward``'s ``hidden_states.reshape(batch_size, sequence_length,
hidden_dim)`` -- not at the routing (``topk``, ``one_hot``, ``nonzero``, ``torch.where``,
``index_add_`` all pass): shape inference's probe resized every run-time dim alike, (B*S)
doubled to 2BS where (2B)(2S) was asked. Each value is now probed at the shape it has when
the inputs have theirs (``runtime/probe_shapes.py``, h94): one dynamic graph serves every
size. The case below is that shape pattern alone; the models are in
``tests/models/test_decoder_dynamic_lengths.py``.
"""
import warnings

import pytest
import torch

from transpiler import FallbackWarning, to_graph


def _no_fallback(fn, *args):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        out = fn(*args)
    assert not [w for w in seen if issubclass(w.category, FallbackWarning)]
    return out


def _moe_shape(x):
    """A sparse MoE block's shapes: tokens flattened to (B*S, H), then back to (B, S, H)."""
    batch, length, width = x.shape
    tokens = x.view(-1, width)
    return (tokens * 2).reshape(batch, length, width)


def test_flattened_tokens_reshaped_back_serve_every_length():
    conv = to_graph(_moe_shape, dynamic={"x": [0, 1]})
    for batch, length in [(2, 7), (3, 9), (4, 5)]:
        x = torch.randn(batch, length, 8)
        assert torch.equal(_no_fallback(conv, x), _moe_shape(x))
    assert conv.cache_info().traces == 1, conv.cache_info()


EXPERTS, WIDTH = 4, 8
torch.manual_seed(0)
ROUTER, PROJ = torch.randn(EXPERTS, WIDTH), torch.randn(EXPERTS, WIDTH, WIDTH)


def _route(tokens):
    """Mixtral's expert routing over (N, H) tokens: topk, one_hot, nonzero, where,
    index_add_ in a loop over the experts hit."""
    probs = torch.nn.functional.linear(tokens, ROUTER).softmax(-1)
    weights, chosen = torch.topk(probs, 2, dim=-1)
    out = torch.zeros_like(tokens)
    mask = torch.nn.functional.one_hot(chosen, num_classes=EXPERTS + 1).permute(2, 1, 0)
    hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()
    for expert in hit:
        expert = expert[0]
        if expert == EXPERTS:
            continue
        slot, token = torch.where(mask[expert])
        out.index_add_(0, token, (tokens[token] @ PROJ[expert]) * weights[token, slot, None])
    return out


@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict"])
def test_the_routing_serves_every_token_count(strict):
    """The routing itself is not what retraces: one trace serves every token count."""
    conv = to_graph(_route, strict=strict, dynamic={"tokens": [0]})
    for n in (14, 27, 20, 55):
        tokens = torch.randn(n, WIDTH)
        torch.testing.assert_close(_no_fallback(conv, tokens), _route(tokens))
    assert conv.cache_info().traces == 1, conv.cache_info()
