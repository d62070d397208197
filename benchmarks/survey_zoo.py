"""More real models for the survey of issue 13: architectures written by other projects.

Added later (h18): BLOOM, MPT, GPT-BigCode, Persimmon, StableLM, Qwen3, DeBERTa-v2, XLNet,
Funnel, MobileBERT, SqueezeBERT, ConvBERT, Wav2Vec2, HuBERT, Segformer, DINOv2, Swinv2,
ConvNeXtV2, LeViT (transformers); timm mixer, ghostnet, cspresnet, dla, hrnet, repvgg, rexnet,
poolformer, fastvit, coat, edgenext; torchvision mnasnet, mobilenet_v2/v3_large, resnext50,
wide_resnet50, alexnet.

Added by h34 (``FRESH_EYES``): XLM-R token classification, BLOOM and BART sequence
classification, LLaVA; ViT, BEiT, Swin, ConvNeXt (transformers); torchvision inception_v3 and
googlenet with their aux logits, swin_v2_t; timm eva02, nf_resnet, resnest, sequencer2d,
xcit, cait, davit, tnt, pvt_v2.

Added by h24 (``NEW_USER``): Gemma3, OLMo, OLMo2, CodeGen, GPT-Neo, StarCoder2, Granite,
Qwen3-MoE, RWKV, mBART, Pegasus, Marian, M2M100, SigLIP (transformers); timm levit_128s,
regnetx_002, efficientnetv2_rw_t, maxvit_nano, coatnet_nano.

transformers (Mistral, Qwen2, Phi, Phi3, Gemma, Gemma2, OPT, GPT-NeoX, GPT-J, Falcon,
DistilBERT, RoBERTa, ALBERT, ELECTRA, BART, Whisper, CLIP, Mixtral, Qwen2-MoE), timm
(resnet, efficientnet, convnext, deit, swin, mobilevit) and torchvision (vgg11,
densenet121, efficientnet_b0, convnext_tiny, swin_t, regnet, shufflenet, squeezenet,
inception_v3), each built as a new user would: a tiny config, random weights, no downloads.
Dropout probabilities are 0 so that a train step is deterministic.

Each builder takes ``mask`` (an ``attention_mask`` with left padding, for text models) and
returns ``(model, make_inputs)`` as ``benchmarks/model_zoo.py`` does: an eval-mode module
and ``make_inputs(batch, seed) -> (args, kwargs)``.
"""
from __future__ import annotations

from typing import Callable, Dict

import torch

from benchmarks.model_zoo import SEQ, VOCAB, _images, _tokens
from benchmarks.torchvision_cpu import import_torchvision

import_torchvision()

WIDTH = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
             num_attention_heads=4, max_position_embeddings=64)
VISION = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              image_size=32, patch_size=8, num_labels=3)


def no_dropout(model: torch.nn.Module) -> torch.nn.Module:
    """Dropout, DropPath and StochasticDepth set to probability 0 (a deterministic train
    step); the modules stay, so the code that calls them is traced as written."""
    for m in model.modules():
        name = type(m).__name__
        if "Dropout" in name or "StochasticDepth" in name or "DropPath" in name:
            for attr in ("p", "drop_prob"):
                if isinstance(getattr(m, attr, None), float):
                    setattr(m, attr, 0.0)
    return model


def _hf(config_cls: str, model_cls: str, attn: str = "sdpa", **config) -> torch.nn.Module:
    import transformers
    cfg = getattr(transformers, config_cls)(**config)
    for key, value in list(vars(cfg).items()):
        if isinstance(value, float) and ("dropout" in key or "pdrop" in key
                                         or key.endswith("drop_prob")):
            setattr(cfg, key, 0.0)
    cfg._attn_implementation = attn
    torch.manual_seed(0)
    return no_dropout(getattr(transformers, model_cls)(cfg)).eval()


def _text(model, mask):
    return model, lambda b, s: _tokens(b, s, mask)


def _seq2seq(model, mask, start=0):
    def make(b, s):
        (ids,), kwargs = _tokens(b, s, mask)
        g = torch.Generator().manual_seed(s + 100)
        kwargs["decoder_input_ids"] = torch.randint(start, VOCAB, (b, 8), generator=g)
        return (ids,), kwargs
    return model, make


# ------------------------------------------------------------------ transformers: decoders
def mistral(mask=False):
    return _text(_hf("MistralConfig", "MistralForCausalLM", num_key_value_heads=2,
                     sliding_window=8, use_cache=False, **WIDTH), mask)


def qwen2(mask=False):
    return _text(_hf("Qwen2Config", "Qwen2ForCausalLM", num_key_value_heads=2,
                     use_cache=False, **WIDTH), mask)


def phi(mask=False):
    return _text(_hf("PhiConfig", "PhiForCausalLM", partial_rotary_factor=0.5,
                     use_cache=False, **WIDTH), mask)


def phi3(mask=False):
    return _text(_hf("Phi3Config", "Phi3ForCausalLM", num_key_value_heads=2, pad_token_id=0,
                     use_cache=False, **WIDTH), mask)


def gemma(mask=False):
    return _text(_hf("GemmaConfig", "GemmaForCausalLM", num_key_value_heads=2, head_dim=16,
                     use_cache=False, **WIDTH), mask)


def gemma2(mask=False):
    return _text(_hf("Gemma2Config", "Gemma2ForCausalLM", num_key_value_heads=2, head_dim=16,
                     sliding_window=8, use_cache=False, attn="eager", **WIDTH), mask)


def opt(mask=False):
    return _text(_hf("OPTConfig", "OPTForCausalLM", vocab_size=VOCAB, hidden_size=64,
                     ffn_dim=128, num_hidden_layers=2, num_attention_heads=4,
                     word_embed_proj_dim=64, max_position_embeddings=64, use_cache=False),
                 mask)


def gpt_neox(mask=False):
    return _text(_hf("GPTNeoXConfig", "GPTNeoXForCausalLM", rotary_pct=0.5,
                     use_cache=False, **WIDTH), mask)


def gptj(mask=False):
    return _text(_hf("GPTJConfig", "GPTJForCausalLM", vocab_size=VOCAB, n_embd=64, n_layer=2,
                     n_head=4, rotary_dim=8, n_positions=64, use_cache=False), mask)


def falcon(mask=False):
    return _text(_hf("FalconConfig", "FalconForCausalLM", vocab_size=VOCAB, hidden_size=64,
                     num_hidden_layers=2, num_attention_heads=4, use_cache=False), mask)


def mixtral(mask=False):
    return _text(_hf("MixtralConfig", "MixtralForCausalLM", num_key_value_heads=2,
                     num_local_experts=4, num_experts_per_tok=2, use_cache=False, **WIDTH),
                 mask)


def qwen2_moe(mask=False):
    return _text(_hf("Qwen2MoeConfig", "Qwen2MoeForCausalLM", num_key_value_heads=2,
                     num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                     shared_expert_intermediate_size=64, use_cache=False, **WIDTH), mask)


# ------------------------------------------------------------------ transformers: encoders
def distilbert(mask=False):
    return _text(_hf("DistilBertConfig", "DistilBertModel", vocab_size=VOCAB, dim=64,
                     n_layers=2, n_heads=4, hidden_dim=128, max_position_embeddings=64), mask)


def roberta(mask=False):
    return _text(_hf("RobertaConfig", "RobertaModel", pad_token_id=1, **WIDTH), mask)


def albert(mask=False):
    return _text(_hf("AlbertConfig", "AlbertModel", embedding_size=32, **WIDTH), mask)


def electra(mask=False):
    return _text(_hf("ElectraConfig", "ElectraModel", embedding_size=32, **WIDTH), mask)


# ------------------------------------------------------------------ transformers: seq2seq
def bart(mask=False):
    m = _hf("BartConfig", "BartForConditionalGeneration", vocab_size=VOCAB, d_model=64,
            encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
            max_position_embeddings=64, use_cache=False)
    return _seq2seq(m, mask)


def whisper(mask=False):
    m = _hf("WhisperConfig", "WhisperForConditionalGeneration", vocab_size=VOCAB, d_model=64,
            encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
            num_mel_bins=16, max_source_positions=16, max_target_positions=32,
            decoder_start_token_id=1, pad_token_id=0, bos_token_id=1, eos_token_id=2,
            suppress_tokens=None, begin_suppress_tokens=None, use_cache=False)

    def make(b, s):
        g = torch.Generator().manual_seed(s)
        kwargs = {"decoder_input_ids": torch.randint(3, VOCAB, (b, 8), generator=g)}
        if mask:
            dm = torch.ones(b, 8, dtype=torch.long)
            kwargs["decoder_attention_mask"] = dm
        return (torch.randn(b, 16, 32, generator=g),), kwargs
    return m, make


def clip(mask=False):
    m = _hf("CLIPConfig", "CLIPModel",
            text_config=dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
                             num_hidden_layers=2, num_attention_heads=4,
                             max_position_embeddings=SEQ),
            vision_config=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                               num_attention_heads=4, image_size=32, patch_size=8),
            projection_dim=32)

    def make(b, s):
        (ids,), kwargs = _tokens(b, s, mask)
        g = torch.Generator().manual_seed(s + 7)
        kwargs["pixel_values"] = torch.randn(b, 3, 32, 32, generator=g)
        return (ids,), kwargs
    return m, make


# ------------------------------------------------------------------ timm
def _timm(name, size=64, **kw):
    import timm
    torch.manual_seed(0)
    return no_dropout(timm.create_model(name, pretrained=False, num_classes=10, **kw)).eval(), \
        _images(size)


def timm_resnet(mask=False):
    return _timm("resnet18d")


def timm_efficientnet(mask=False):
    return _timm("efficientnet_b0")


def timm_convnext(mask=False):
    return _timm("convnext_atto")


def timm_deit(mask=False):
    return _timm("deit_tiny_patch16_224", size=32, img_size=32, patch_size=8, depth=2)


def timm_swin(mask=False):
    from timm.models.swin_transformer import SwinTransformer
    torch.manual_seed(0)
    m = SwinTransformer(img_size=64, patch_size=4, window_size=4, embed_dim=32,
                        depths=(2, 2), num_heads=(2, 4), num_classes=10)
    return no_dropout(m).eval(), _images(64)


def timm_mobilevit(mask=False):
    return _timm("mobilevit_xxs")


# ------------------------------------------------------------------ torchvision
def _tv(name, size=64, **kw):
    tv = import_torchvision()
    torch.manual_seed(0)
    return no_dropout(getattr(tv.models, name)(num_classes=10, **kw)).eval(), _images(size)


def tv_vgg11(mask=False):
    return _tv("vgg11", size=32)


def tv_densenet121(mask=False):
    return _tv("densenet121")


def tv_efficientnet_b0(mask=False):
    return _tv("efficientnet_b0")


def tv_convnext_tiny(mask=False):
    return _tv("convnext_tiny")


def tv_swin_t(mask=False):
    return _tv("swin_t")


def tv_regnet(mask=False):
    return _tv("regnet_y_400mf")


def tv_shufflenet(mask=False):
    return _tv("shufflenet_v2_x0_5")


def tv_squeezenet(mask=False):
    return _tv("squeezenet1_1")


def tv_inception_v3(mask=False):
    return _tv("inception_v3", size=80, aux_logits=False, init_weights=True)


# ------------------------------------------------------------------ not tried before (h18)
def bloom(mask=False):
    return _text(_hf("BloomConfig", "BloomForCausalLM", vocab_size=VOCAB, hidden_size=64,
                     n_layer=2, n_head=4, use_cache=False, attn="eager"), mask)


def mpt(mask=False):
    return _text(_hf("MptConfig", "MptForCausalLM", vocab_size=VOCAB, d_model=64, n_layers=2,
                     n_heads=4, max_seq_len=64, expansion_ratio=2, use_cache=False,
                     attn="eager"), mask)


def gpt_bigcode(mask=False):
    return _text(_hf("GPTBigCodeConfig", "GPTBigCodeForCausalLM", vocab_size=VOCAB, n_embd=64,
                     n_layer=2, n_head=4, n_positions=64, multi_query=True, use_cache=False),
                 mask)


def persimmon(mask=False):
    return _text(_hf("PersimmonConfig", "PersimmonForCausalLM", use_cache=False,
                     attn="eager", **WIDTH), mask)


def stablelm(mask=False):
    return _text(_hf("StableLmConfig", "StableLmForCausalLM", num_key_value_heads=2,
                     partial_rotary_factor=0.25, use_cache=False, **WIDTH), mask)


def qwen3(mask=False):
    return _text(_hf("Qwen3Config", "Qwen3ForCausalLM", num_key_value_heads=2, head_dim=16,
                     use_cache=False, **WIDTH), mask)


def deberta_v2(mask=False):
    return _text(_hf("DebertaV2Config", "DebertaV2Model", relative_attention=True,
                     position_buckets=8, pos_att_type=["p2c", "c2p"], attn="eager", **WIDTH),
                 mask)


def xlnet(mask=False):
    return _text(_hf("XLNetConfig", "XLNetModel", vocab_size=VOCAB, d_model=64, n_layer=2,
                     n_head=4, d_inner=128, attn="eager"), mask)


def funnel(mask=False):
    return _text(_hf("FunnelConfig", "FunnelModel", vocab_size=VOCAB, d_model=64, n_head=4,
                     d_head=16, d_inner=128, block_sizes=[1, 1], num_decoder_layers=1,
                     attn="eager"), mask)


def mobilebert(mask=False):
    return _text(_hf("MobileBertConfig", "MobileBertModel", vocab_size=VOCAB, hidden_size=64,
                     embedding_size=32, intra_bottleneck_size=32, true_hidden_size=32,
                     num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                     num_feedforward_networks=2, max_position_embeddings=64, attn="eager"),
                 mask)


def squeezebert(mask=False):
    return _text(_hf("SqueezeBertConfig", "SqueezeBertModel", embedding_size=64,
                     attn="eager", **WIDTH), mask)


def convbert(mask=False):
    return _text(_hf("ConvBertConfig", "ConvBertModel", embedding_size=64, conv_kernel_size=3,
                     attn="eager", **WIDTH), mask)


def _audio(model):
    def make(b, s):
        g = torch.Generator().manual_seed(s)
        return (torch.randn(b, 800, generator=g),), {}
    return model, make


_SPEECH = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
               conv_dim=(16, 16), conv_stride=(5, 4), conv_kernel=(10, 4),
               num_conv_pos_embeddings=8, num_conv_pos_embedding_groups=4,
               mask_time_prob=0.0, attn="eager")


def wav2vec2(mask=False):
    return _audio(_hf("Wav2Vec2Config", "Wav2Vec2Model", **_SPEECH))


def hubert(mask=False):
    return _audio(_hf("HubertConfig", "HubertModel", **_SPEECH))


def _hf_images(model, size):
    def make(b, s):
        g = torch.Generator().manual_seed(s)
        return (), {"pixel_values": torch.randn(b, 3, size, size, generator=g)}
    return model, make


def segformer(mask=False):
    return _hf_images(_hf("SegformerConfig", "SegformerForSemanticSegmentation",
                          num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1],
                          hidden_sizes=[16, 32], patch_sizes=[7, 3], strides=[4, 2],
                          num_attention_heads=[1, 2], mlp_ratios=[2, 2],
                          decoder_hidden_size=32, num_labels=3, attn="eager"), 32)


def dinov2(mask=False):
    return _hf_images(_hf("Dinov2Config", "Dinov2Model", hidden_size=64, num_hidden_layers=2,
                          num_attention_heads=4, mlp_ratio=2, image_size=32, patch_size=8),
                      32)


def swinv2(mask=False):
    return _hf_images(_hf("Swinv2Config", "Swinv2Model", image_size=32, patch_size=4,
                          embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4,
                          attn="eager"), 32)


def convnextv2(mask=False):
    return _hf_images(_hf("ConvNextV2Config", "ConvNextV2Model", hidden_sizes=[16, 32],
                          depths=[1, 1], num_stages=2, attn="eager"), 32)


def levit(mask=False):
    return _hf_images(_hf("LevitConfig", "LevitModel", image_size=32, hidden_sizes=[32, 48, 64],
                          num_attention_heads=[1, 2, 2], depths=[1, 1, 1], key_dim=[8, 8, 8],
                          attn="eager"), 32)


def timm_mixer(mask=False):
    return _timm("mixer_s16_224", img_size=64)


def timm_ghostnet(mask=False):
    return _timm("ghostnet_050")


def timm_cspresnet(mask=False):
    return _timm("cspresnet50")


def timm_dla(mask=False):
    return _timm("dla34")


def timm_hrnet(mask=False):
    return _timm("hrnet_w18_small")


def timm_repvgg(mask=False):
    return _timm("repvgg_a0")


def timm_rexnet(mask=False):
    return _timm("rexnet_100")


def timm_poolformer(mask=False):
    return _timm("poolformer_s12")


def timm_fastvit(mask=False):
    return _timm("fastvit_t8")


def timm_coat(mask=False):
    return _timm("coat_lite_tiny", img_size=64)


def timm_edgenext(mask=False):
    return _timm("edgenext_xx_small")


def tv_mnasnet(mask=False):
    return _tv("mnasnet0_5")


def tv_mobilenet_v2(mask=False):
    return _tv("mobilenet_v2")


def tv_mobilenet_v3_large(mask=False):
    return _tv("mobilenet_v3_large")


def tv_resnext(mask=False):
    return _tv("resnext50_32x4d", size=32)


def tv_wide_resnet(mask=False):
    return _tv("wide_resnet50_2", size=32)


def tv_alexnet(mask=False):
    return _tv("alexnet", size=64)


# ------------------------------------------------------------------ not tried before (h24)
def gemma3(mask=False):
    return _text(_hf("Gemma3TextConfig", "Gemma3ForCausalLM", num_key_value_heads=2,
                     head_dim=16, sliding_window=8, use_cache=False, **WIDTH), mask)


def olmo(mask=False):
    return _text(_hf("OlmoConfig", "OlmoForCausalLM", use_cache=False, **WIDTH), mask)


def olmo2(mask=False):
    return _text(_hf("Olmo2Config", "Olmo2ForCausalLM", use_cache=False, **WIDTH), mask)


def codegen(mask=False):
    return _text(_hf("CodeGenConfig", "CodeGenForCausalLM", vocab_size=VOCAB, n_embd=64,
                     n_layer=2, n_head=4, n_positions=64, rotary_dim=8, use_cache=False,
                     attn="eager"), mask)


def gpt_neo(mask=False):
    return _text(_hf("GPTNeoConfig", "GPTNeoForCausalLM", vocab_size=VOCAB, hidden_size=64,
                     num_layers=2, num_heads=4, attention_types=[[["global", "local"], 1]],
                     window_size=8, max_position_embeddings=64, use_cache=False,
                     attn="eager"), mask)


def starcoder2(mask=False):
    return _text(_hf("Starcoder2Config", "Starcoder2ForCausalLM", num_key_value_heads=2,
                     use_cache=False, **WIDTH), mask)


def granite(mask=False):
    return _text(_hf("GraniteConfig", "GraniteForCausalLM", num_key_value_heads=2,
                     use_cache=False, **WIDTH), mask)


def qwen3_moe(mask=False):
    return _text(_hf("Qwen3MoeConfig", "Qwen3MoeForCausalLM", num_key_value_heads=2,
                     head_dim=16, num_experts=4, num_experts_per_tok=2,
                     moe_intermediate_size=32, use_cache=False, **WIDTH), mask)


def rwkv(mask=False):
    return _text(_hf("RwkvConfig", "RwkvForCausalLM", vocab_size=VOCAB, hidden_size=64,
                     num_hidden_layers=2, attention_hidden_size=64, intermediate_size=128,
                     context_length=64, use_cache=False, attn="eager"), False)


def _bart_like(config_cls, model_cls, **extra):
    m = _hf(config_cls, model_cls, vocab_size=VOCAB, d_model=64, encoder_layers=2,
            decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
            encoder_ffn_dim=128, decoder_ffn_dim=128, max_position_embeddings=64,
            use_cache=False, **extra)
    return m


def mbart(mask=False):
    return _seq2seq(_bart_like("MBartConfig", "MBartForConditionalGeneration"), mask)


def pegasus(mask=False):
    return _seq2seq(_bart_like("PegasusConfig", "PegasusForConditionalGeneration"), mask)


def marian(mask=False):
    return _seq2seq(_bart_like("MarianConfig", "MarianMTModel", decoder_vocab_size=VOCAB,
                               pad_token_id=VOCAB - 1, decoder_start_token_id=VOCAB - 1),
                    mask)


def m2m100(mask=False):
    return _seq2seq(_bart_like("M2M100Config", "M2M100ForConditionalGeneration"), mask)


def siglip(mask=False):
    m = _hf("SiglipConfig", "SiglipModel",
            text_config=dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
                             num_hidden_layers=2, num_attention_heads=4,
                             max_position_embeddings=SEQ),
            vision_config=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                               num_attention_heads=4, image_size=32, patch_size=8))

    def make(b, s):
        (ids,), _ = _tokens(b, s, False)       # SigLIP's text tower takes no attention mask
        g = torch.Generator().manual_seed(s + 7)
        return (ids,), {"pixel_values": torch.randn(b, 3, 32, 32, generator=g)}
    return m, make


def timm_levit(mask=False):
    return _timm("levit_128s", img_size=64)


def timm_regnet(mask=False):
    return _timm("regnetx_002")


def timm_efficientnetv2(mask=False):
    return _timm("efficientnetv2_rw_t")


def timm_maxvit(mask=False):
    return _timm("maxvit_nano_rw_256", size=64, img_size=64)


def timm_coatnet(mask=False):
    return _timm("coatnet_nano_rw_224", size=64, img_size=64)


# ------------------------------------------------------------------ fresh eyes (h34)
def xlm_roberta(mask=False):
    return _text(_hf("XLMRobertaConfig", "XLMRobertaForTokenClassification", pad_token_id=1,
                     num_labels=3, **WIDTH), mask)


def bloom_classifier(mask=False):
    """BLOOM's head on the last non-pad token; its MLP calls ``GeLUFunction.apply`` in
    train mode (a user autograd.Function: one node calling it)."""
    return _text(_hf("BloomConfig", "BloomForSequenceClassification", vocab_size=VOCAB,
                     hidden_size=64, n_layer=2, n_head=4, num_labels=3, pad_token_id=0,
                     attn="eager"), mask)


def bart_classifier(mask=False):
    """BART's head reads the last ``<eos>`` of each row and checks (``torch._check``)
    that all rows hold as many."""
    m = _bart_like("BartConfig", "BartForSequenceClassification", num_labels=3)
    eos = m.config.eos_token_id

    def make(b, s):
        (ids,), kwargs = _tokens(b, s, mask)
        ids[ids == eos] = 5
        ids[:, -1] = eos
        return (ids,), kwargs
    return m, make


def llava(mask=False):
    """LLaVA (CLIP vision tower, LLaMA text model): the prompt's image tokens take the
    projected patch features (2x2 patches of a 16x16 image)."""
    import transformers
    cfg = transformers.LlavaConfig(
        vision_config=dict(model_type="clip_vision_model", hidden_size=32,
                           intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                           image_size=16, patch_size=8),
        text_config=dict(model_type="llama", num_key_value_heads=2, **WIDTH),
        image_token_id=VOCAB - 1, vision_feature_layer=-1)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    m = transformers.LlavaForConditionalGeneration(cfg).eval()

    def make(b, s):
        (ids,), kwargs = _tokens(b, s, mask)
        ids[ids == VOCAB - 1] = 5
        ids[:, 1:5] = VOCAB - 1
        g = torch.Generator().manual_seed(s + 7)
        kwargs["pixel_values"] = torch.randn(b, 3, 16, 16, generator=g)
        return (ids,), kwargs
    return m, make


def vit(mask=False):
    return _hf("ViTConfig", "ViTForImageClassification", **VISION), _images(32)


def beit(mask=False):
    return _hf("BeitConfig", "BeitForImageClassification", use_relative_position_bias=True,
               **VISION), _images(32)


def hf_swin(mask=False):
    return _hf("SwinConfig", "SwinForImageClassification", image_size=32, patch_size=2,
               embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4,
               num_labels=3), _images(32)


def hf_convnext(mask=False):
    return _hf("ConvNextConfig", "ConvNextForImageClassification", num_stages=2,
               hidden_sizes=[16, 32], depths=[1, 1], num_labels=3, attn="eager"), _images(32)


def tv_inception_v3_aux(mask=False):
    """Train mode returns ``InceptionOutputs`` with the aux logits (which need 299x299)."""
    return _tv("inception_v3", size=299, aux_logits=True, init_weights=False)


def tv_googlenet_aux(mask=False):
    return _tv("googlenet", size=32, aux_logits=True, init_weights=False)


def tv_swin_v2_t(mask=False):
    return _tv("swin_v2_t", size=32)


def timm_eva02(mask=False):
    return _timm("eva02_tiny_patch14_224", size=28, img_size=28, patch_size=7)


def timm_nfnet(mask=False):
    return _timm("nf_resnet26", size=32)


def timm_resnest(mask=False):
    return _timm("resnest14d", size=32)


def timm_sequencer(mask=False):
    return _timm("sequencer2d_s")


def timm_xcit(mask=False):
    return _timm("xcit_nano_12_p16_224", size=32, img_size=32)


def timm_cait(mask=False):
    return _timm("cait_xxs24_224", size=32, img_size=32, patch_size=8)


def timm_davit(mask=False):
    return _timm("davit_tiny")


def timm_tnt(mask=False):
    return _timm("tnt_s_patch16_224", size=32, img_size=32)


def timm_pvt_v2(mask=False):
    return _timm("pvt_v2_b0")


FRESH_EYES_TEXT = ("xlm_roberta", "bloom_classifier", "bart_classifier", "llava")
FRESH_EYES = FRESH_EYES_TEXT + (
    "vit", "beit", "hf_swin", "hf_convnext", "tv_inception_v3_aux", "tv_googlenet_aux",
    "tv_swin_v2_t", "timm_eva02", "timm_nfnet", "timm_resnest", "timm_sequencer", "timm_xcit",
    "timm_cait", "timm_davit", "timm_tnt", "timm_pvt_v2")


NEW_USER_TEXT = ("gemma3", "olmo", "olmo2", "codegen", "gpt_neo", "starcoder2", "granite",
                 "qwen3_moe", "rwkv", "mbart", "pegasus", "marian", "m2m100", "siglip")
NEW_USER = NEW_USER_TEXT + ("timm_levit", "timm_regnet", "timm_efficientnetv2",
                            "timm_maxvit", "timm_coatnet")


TEXT = ("mistral", "qwen2", "phi", "phi3", "gemma", "gemma2", "opt", "gpt_neox", "gptj",
        "falcon", "mixtral", "qwen2_moe", "distilbert", "roberta", "albert", "electra",
        "bart", "whisper", "clip", "bloom", "mpt", "gpt_bigcode", "persimmon", "stablelm",
        "qwen3", "deberta_v2", "xlnet", "funnel", "mobilebert", "squeezebert", "convbert") \
    + NEW_USER_TEXT + FRESH_EYES_TEXT
SURVEY: Dict[str, Callable] = {name: globals()[name] for name in TEXT + (
    "timm_resnet", "timm_efficientnet", "timm_convnext", "timm_deit", "timm_swin",
    "timm_mobilevit", "tv_vgg11", "tv_densenet121", "tv_efficientnet_b0",
    "tv_convnext_tiny", "tv_swin_t", "tv_regnet", "tv_shufflenet", "tv_squeezenet",
    "tv_inception_v3", "wav2vec2", "hubert", "segformer", "dinov2", "swinv2", "convnextv2",
    "levit", "tv_mnasnet", "tv_mobilenet_v2", "tv_mobilenet_v3_large", "tv_resnext",
    "tv_wide_resnet", "tv_alexnet", "timm_mixer", "timm_ghostnet", "timm_cspresnet",
    "timm_dla", "timm_hrnet", "timm_repvgg", "timm_rexnet", "timm_poolformer", "timm_fastvit",
    "timm_coat", "timm_edgenext") + NEW_USER[len(NEW_USER_TEXT):]
    + FRESH_EYES[len(FRESH_EYES_TEXT):]}
