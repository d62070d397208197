"""The real models of issue 13, built from configs with random weights (no downloads).

Each builder returns ``(model, make_inputs)``: an eval-mode ``nn.Module`` exactly as its
library defines it, and ``make_inputs(batch, seed)`` giving ``(args, kwargs)`` for a call.
Configs are small so the models tier of the tests runs in seconds on 2 cores; the layer
structure (attention, MLP, norms, caches, conv blocks) is the library's own.
"""
from __future__ import annotations

from typing import Callable, Dict, Tuple

import torch

from benchmarks.torchvision_cpu import import_torchvision

import_torchvision()     # before transformers, whose image utilities import torchvision

Inputs = Callable[[int, int], Tuple[tuple, dict]]
SEQ = 16
VOCAB = 256


def _tokens(batch: int, seed: int, mask: bool) -> Tuple[tuple, dict]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (batch, SEQ), generator=g)
    kwargs = {}
    if mask:
        m = torch.ones(batch, SEQ, dtype=torch.long)
        m[:, : 1 + seed % 3] = 0 if batch > 1 else 1      # left padding on some rows
        kwargs["attention_mask"] = m
    return (ids,), kwargs


def _hf(config_cls_name: str, model_cls_name: str, **config) -> torch.nn.Module:
    import transformers
    cfg = getattr(transformers, config_cls_name)(**config)
    cfg._attn_implementation = config.pop("attn", "eager") if "attn" in config else "sdpa"
    torch.manual_seed(0)
    return getattr(transformers, model_cls_name)(cfg).eval()


def gpt2(mask=False, use_cache=False):
    m = _hf("GPT2Config", "GPT2LMHeadModel", vocab_size=VOCAB, n_positions=64, n_embd=64,
            n_layer=2, n_head=4, use_cache=use_cache)
    return m, lambda b, s: _tokens(b, s, mask)


def bert(mask=False, use_cache=False):
    m = _hf("BertConfig", "BertModel", vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2,
            num_attention_heads=4, intermediate_size=128, max_position_embeddings=64)
    return m, lambda b, s: _tokens(b, s, mask)


def llama(mask=False, use_cache=False):
    m = _hf("LlamaConfig", "LlamaForCausalLM", vocab_size=VOCAB, hidden_size=64,
            intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64, use_cache=use_cache)
    return m, lambda b, s: _tokens(b, s, mask)


def t5(mask=False, use_cache=False):
    m = _hf("T5Config", "T5ForConditionalGeneration", vocab_size=VOCAB, d_model=64, d_kv=16,
            d_ff=128, num_layers=2, num_decoder_layers=2, num_heads=4, use_cache=use_cache,
            decoder_start_token_id=0, pad_token_id=0)

    def inputs(b, s):
        (ids,), kwargs = _tokens(b, s, mask)
        g = torch.Generator().manual_seed(s + 100)
        kwargs["decoder_input_ids"] = torch.randint(0, VOCAB, (b, 8), generator=g)
        return (ids,), kwargs
    return m, inputs


def _images(size: int) -> Inputs:
    def make(batch, seed):
        g = torch.Generator().manual_seed(seed)
        return (torch.randn(batch, 3, size, size, generator=g),), {}
    return make


def resnet18():
    import_torchvision()
    from torchvision.models import resnet18 as build
    torch.manual_seed(0)
    return build(num_classes=10).eval(), _images(64)


def mobilenet_v3_small():
    import_torchvision()
    from torchvision.models import mobilenet_v3_small as build
    torch.manual_seed(0)
    return build(num_classes=10).eval(), _images(64)


def googlenet():
    import_torchvision()
    from torchvision.models import googlenet as build
    torch.manual_seed(0)
    return build(num_classes=10, aux_logits=False, init_weights=True).eval(), _images(64)


def vit():
    import_torchvision()
    from torchvision.models.vision_transformer import VisionTransformer
    torch.manual_seed(0)
    m = VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=4,
                          hidden_dim=64, mlp_dim=128, num_classes=10)
    return m.eval(), _images(32)


def transformer_encoder():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128,
                                             batch_first=True)
    m = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).eval()

    def make(batch, seed):
        g = torch.Generator().manual_seed(seed)
        return (torch.randn(batch, SEQ, 64, generator=g),), {}
    return m, make


MODELS: Dict[str, Callable] = {
    "gpt2": gpt2, "bert": bert, "llama": llama, "t5": t5,
    "resnet18": resnet18, "mobilenet_v3_small": mobilenet_v3_small, "googlenet": googlenet,
    "vit": vit, "transformer_encoder": transformer_encoder,
}
HF = ("gpt2", "bert", "llama", "t5")
