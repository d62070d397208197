"""Real Hugging Face / timm models trained as a new user's script trains them (h61).

Written from README.md and the public API only. Each case builds a model from a tiny config
(random weights, no downloads, dropout left > 0), a batch maker (two micro-batches a step,
``attention_mask`` with padding, ``labels=`` so the model computes ``outputs.loss``), and a
training step written as the HF docs write it: forward, ``loss / accum``, ``backward``,
``clip_grad_norm_``, ``opt.step()``, ``sched.step()``. :func:`train` runs that step eager
and in one of two spellings from identical deep copies, with the same seed before every
step (dropout), and :func:`compare` lists every difference: losses, clip norms, gradients,
parameters, optimizer state, learning rates, eval losses.

Spellings: ``"module"`` -- ``to_graph(model)`` called inside the eager step; ``"step"`` --
``to_graph(train_step)`` of the whole step (and ``to_graph(eval_step)`` for evaluation).
"""
from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass, field
from typing import Callable, Dict, List

import torch
import torch.nn.functional as F

from benchmarks.torchvision_cpu import import_torchvision
from transpiler import FallbackWarning, to_graph

import_torchvision()          # timm imports torchvision (a CUDA build here: README)

VOCAB, SEQ, BATCH = 96, 10, 3
TEXT = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, max_position_embeddings=64)


# ------------------------------------------------------------------ batches
def _text(gen: torch.Generator, pad_left: bool = False) -> Dict[str, torch.Tensor]:
    ids = torch.randint(4, VOCAB, (BATCH, SEQ), generator=gen)
    mask = torch.ones(BATCH, SEQ, dtype=torch.long)
    if pad_left:
        mask[-1, :4] = 0
    else:
        mask[-1, -4:] = 0        # the last row padded
    ids = ids.masked_fill(mask == 0, 0)
    return {"input_ids": ids, "attention_mask": mask}


def _seq_class(gen):
    b = _text(gen)
    b["labels"] = torch.randint(0, 2, (BATCH,), generator=gen)
    return b


def _mlm(gen):
    b = _text(gen)
    labels = b["input_ids"].clone()
    chosen = torch.rand(BATCH, SEQ, generator=gen) < 0.3
    chosen[:, 0] = True
    labels[~chosen | (b["attention_mask"] == 0)] = -100
    b["input_ids"] = b["input_ids"].masked_fill(chosen, 3)          # [MASK] id 3
    b["labels"] = labels
    return b


def _causal(gen, pad_left=False):
    b = _text(gen, pad_left)
    b["labels"] = b["input_ids"].masked_fill(b["attention_mask"] == 0, -100)
    return b


def _seq2seq(gen):
    b = _text(gen)
    labels = torch.randint(4, VOCAB, (BATCH, 6), generator=gen)
    labels[-1, -2:] = -100
    b["labels"] = labels
    return b


def _images(gen, size=32, classes=3):
    return {"pixel_values": torch.randn(BATCH, 3, size, size, generator=gen),
            "labels": torch.randint(0, classes, (BATCH,), generator=gen)}


def _whisper(gen):
    return {"input_features": torch.randn(BATCH, 16, 32, generator=gen),
            "labels": torch.randint(4, VOCAB, (BATCH, 5), generator=gen)}


def _audio(gen):
    mask = torch.ones(BATCH, 400, dtype=torch.long)
    mask[-1, -80:] = 0
    labels = torch.randint(1, 20, (BATCH, 4), generator=gen)
    labels[-1, -1] = -100
    return {"input_values": torch.randn(BATCH, 400, generator=gen), "attention_mask": mask,
            "labels": labels}


# ------------------------------------------------------------------ models
def _hf(config: str, model: str, **kw):
    import transformers
    cfg = getattr(transformers, config)(**kw)
    return getattr(transformers, model)(cfg)


def bert_cls():
    return _hf("BertConfig", "BertForSequenceClassification", num_labels=2,
               hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1, **TEXT)


def bert_mlm():
    return _hf("BertConfig", "BertForMaskedLM", hidden_dropout_prob=0.1,
               attention_probs_dropout_prob=0.1, **TEXT)


def roberta_cls():
    return _hf("RobertaConfig", "RobertaForSequenceClassification", num_labels=2,
               pad_token_id=1, hidden_dropout_prob=0.1, **TEXT)


def distilbert_cls():
    return _hf("DistilBertConfig", "DistilBertForSequenceClassification", vocab_size=VOCAB,
               dim=32, hidden_dim=64, n_layers=2, n_heads=4, max_position_embeddings=64,
               dropout=0.1, attention_dropout=0.1, seq_classif_dropout=0.2, num_labels=2)


def gpt2_lm():
    return _hf("GPT2Config", "GPT2LMHeadModel", vocab_size=VOCAB, n_embd=32, n_layer=2,
               n_head=4, n_positions=64, resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1)


def llama_lm():
    return _hf("LlamaConfig", "LlamaForCausalLM", num_key_value_heads=2,
               attention_dropout=0.1, **TEXT)


def qwen2_lm():
    return _hf("Qwen2Config", "Qwen2ForCausalLM", num_key_value_heads=2,
               attention_dropout=0.1, **TEXT)


def mistral_lm():
    return _hf("MistralConfig", "MistralForCausalLM", num_key_value_heads=2,
               attention_dropout=0.1, **TEXT)


def t5_lm():
    return _hf("T5Config", "T5ForConditionalGeneration", vocab_size=VOCAB, d_model=32,
               d_kv=8, d_ff=64, num_layers=2, num_heads=4, dropout_rate=0.1,
               decoder_start_token_id=0, pad_token_id=0)


def bart_lm():
    return _hf("BartConfig", "BartForConditionalGeneration", vocab_size=VOCAB, d_model=32,
               encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
               decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
               max_position_embeddings=64, dropout=0.1, attention_dropout=0.1,
               pad_token_id=1, decoder_start_token_id=2)


def vit_cls():
    return _hf("ViTConfig", "ViTForImageClassification", hidden_size=32,
               intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
               image_size=32, patch_size=8, num_labels=3, hidden_dropout_prob=0.1,
               attention_probs_dropout_prob=0.1)


def whisper_lm():
    return _hf("WhisperConfig", "WhisperForConditionalGeneration", vocab_size=VOCAB,
               d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
               decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
               num_mel_bins=16, max_source_positions=16, max_target_positions=32,
               dropout=0.1, pad_token_id=0, decoder_start_token_id=1, eos_token_id=2,
               bos_token_id=1, begin_suppress_tokens=None, suppress_tokens=None)


def wav2vec2_ctc():
    return _hf("Wav2Vec2Config", "Wav2Vec2ForCTC", vocab_size=20, hidden_size=32,
               intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
               conv_dim=(16, 16), conv_stride=(5, 4), conv_kernel=(10, 4),
               num_conv_pos_embeddings=8, num_conv_pos_embedding_groups=4,
               hidden_dropout=0.1, activation_dropout=0.1, feat_proj_dropout=0.1,
               mask_time_prob=0.0, layerdrop=0.0, ctc_loss_reduction="mean", pad_token_id=0,
               feat_extract_norm="layer")


def timm_resnet():
    import timm
    return timm.create_model("resnet10t", pretrained=False, num_classes=3, drop_rate=0.2)


def timm_vit():
    import timm
    return timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=3,
                             img_size=32, patch_size=8, depth=2, embed_dim=32, num_heads=4,
                             drop_rate=0.1, attn_drop_rate=0.1, drop_path_rate=0.1)


@dataclass
class Case:
    name: str
    build: Callable
    batch: Callable
    hf: bool = True                 # model(**batch).loss; else logits + cross_entropy
    opt: str = "adamw"              # "adamw" (linear warmup) or "sgd" (StepLR)
    freeze_embeddings: bool = False
    evaluate: bool = False          # model.eval() + no_grad eval loss between steps


CASES: Dict[str, Case] = {c.name: c for c in [
    Case("bert_cls", bert_cls, _seq_class, evaluate=True),
    Case("bert_mlm", bert_mlm, _mlm, freeze_embeddings=True),
    Case("roberta_cls", roberta_cls, _seq_class, opt="sgd"),
    Case("distilbert_cls", distilbert_cls, _seq_class, freeze_embeddings=True, evaluate=True),
    Case("gpt2_lm", gpt2_lm, _causal, evaluate=True),
    Case("llama_lm", llama_lm, lambda g: _causal(g, pad_left=True), freeze_embeddings=True),
    Case("qwen2_lm", qwen2_lm, _causal, opt="sgd"),
    Case("mistral_lm", mistral_lm, lambda g: _causal(g, pad_left=True)),
    Case("t5_lm", t5_lm, _seq2seq, evaluate=True),
    Case("bart_lm", bart_lm, _seq2seq, freeze_embeddings=True),
    Case("vit_cls", vit_cls, _images, opt="sgd", evaluate=True),
    Case("whisper_lm", whisper_lm, _whisper),
    Case("wav2vec2_ctc", wav2vec2_ctc, _audio),
    Case("timm_resnet", timm_resnet, _images, hf=False, evaluate=True),
    Case("timm_vit", timm_vit, _images, hf=False, opt="sgd"),
]}


# ------------------------------------------------------------------ the user's steps
def compute_loss(model, batch, hf=True):
    if hf:
        return model(**batch).loss
    return F.cross_entropy(model(batch["pixel_values"]), batch["labels"])


def train_step(model, optimizer, scheduler, micro_batches, hf=True):
    """One optimizer step over gradient-accumulation micro-batches (HF docs' loop)."""
    optimizer.zero_grad(set_to_none=True)
    total = 0.0
    for batch in micro_batches:
        loss = compute_loss(model, batch, hf) / len(micro_batches)
        loss.backward()
        total += loss.item()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    optimizer.step()
    scheduler.step()
    return total, norm


def docs_step(model, optimizer, scheduler, micro_batches, hf=True):
    """The HF docs' loop body as written there (one batch, ``zero_grad`` last)."""
    outputs = model(**micro_batches[0])
    loss = outputs.loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()
    return loss.detach(), torch.zeros(())


def autocast_step(model, optimizer, scheduler, micro_batches, hf=True):
    """CPU bf16 mixed precision, the tuple spelling of the outputs (``return_dict=False``)."""
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(**micro_batches[0], return_dict=False)[0]
    loss.backward()
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()
    return loss.detach().float(), torch.zeros(())


def eval_step(model, batch, hf=True):
    model.eval()
    with torch.no_grad():
        loss = compute_loss(model, batch, hf)
    model.train()
    return loss


def make_optimizer(case: Case, model):
    from transformers import get_linear_schedule_with_warmup
    params = [p for p in model.parameters() if p.requires_grad]
    if case.opt == "sgd":
        opt = torch.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=0.01)
        return opt, torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01)
    return opt, get_linear_schedule_with_warmup(opt, num_warmup_steps=2, num_training_steps=10)


def grouped_adamw(model):
    """HF's usual groups: no weight decay for biases and LayerNorm weights."""
    from transformers import get_linear_schedule_with_warmup
    no_decay = ("bias", "LayerNorm.weight", "ln_", "norm")
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    groups = [{"params": [p for n, p in named if not any(k in n for k in no_decay)],
               "weight_decay": 0.01},
              {"params": [p for n, p in named if any(k in n for k in no_decay)],
               "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=1e-3)
    return opt, get_linear_schedule_with_warmup(opt, num_warmup_steps=1, num_training_steps=10)


def batches(case: Case, steps: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    return [[case.batch(gen) for _ in range(2)] for _ in range(steps)], case.batch(gen)


def fresh(case: Case, seed: int = 0):
    torch.manual_seed(seed)
    model = case.build()
    if case.freeze_embeddings:
        model.get_input_embeddings().requires_grad_(False)
    model.train()
    return model


# ------------------------------------------------------------------ runs
@dataclass
class Record:
    losses: List = field(default_factory=list)
    norms: List = field(default_factory=list)
    grads: List = field(default_factory=list)          # per step: {name: grad or None}
    evals: List = field(default_factory=list)
    lrs: List = field(default_factory=list)
    fallbacks: List[str] = field(default_factory=list)
    model: torch.nn.Module = None
    optimizer: torch.optim.Optimizer = None
    converted: object = None                           # the GraphFunction (cache_info())
    rng: torch.Tensor = None                           # the global RNG state after the run


def train(case: Case, model, spelling: str, steps: int = 3, strict: bool = False,
          step=train_step, seed_once: bool = False, short_last: bool = False,
          make_opt=None, between=None) -> Record:
    """``steps`` optimizer steps of ``model`` (a deep copy the caller made) on the case's
    batches; ``spelling`` "eager", "module" (to_graph(model) in an eager step) or "step"
    (to_graph(step)). The same seed before every step, or once before the first
    (``seed_once``: then the RNG state after the run is compared too); ``short_last``: the
    last step's batches have one row fewer (a new batch size mid-training). ``make_opt(model)``
    replaces the case's optimizer and scheduler; ``between(model, i)`` runs before step ``i``
    (a change the user makes mid-training; it may return a new (optimizer, scheduler))."""
    data, eval_batch = batches(case, steps)
    if short_last:
        data[-1] = [{k: v[:-1] for k, v in b.items()} for b in data[-1]]
    rec = Record(model=model)
    opt, sched = (make_opt or (lambda m: make_optimizer(case, m)))(model)
    rec.optimizer = opt
    runner, step_fn, eval_fn = model, step, eval_step
    if spelling == "module":
        runner = to_graph(model, strict=strict)
        rec.converted = runner.graph_function
    elif spelling == "step":
        step_fn = rec.converted = to_graph(step, strict=strict)
        eval_fn = to_graph(eval_step, strict=strict)
    if seed_once:
        torch.manual_seed(1000)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i, micro in enumerate(data):
            if between is not None:
                new = between(model, i)
                if new is not None:
                    opt, sched = new
                    rec.optimizer = opt
            if not seed_once:
                torch.manual_seed(1000 + i)       # dropout: the same seed before every step
            total, norm = step_fn(runner, opt, sched, micro, case.hf)
            rec.losses.append(float(total))
            rec.norms.append(float(norm))
            rec.grads.append({n: None if p.grad is None else p.grad.clone()
                              for n, p in model.named_parameters()})
            rec.lrs.append(list(sched.get_last_lr()))
            if case.evaluate:
                rec.evals.append(float(eval_fn(runner, eval_batch, case.hf)))
                assert model.training, "eval_step left the model in eval mode"
    rec.fallbacks = [str(w.message) for w in caught if issubclass(w.category, FallbackWarning)]
    rec.rng = torch.get_rng_state()
    return rec


def run_pair(case: Case, spelling: str, steps: int = 3, strict: bool = False, **kw):
    """Eager and ``spelling`` from identical copies made before any call."""
    model = fresh(case)
    twin = copy.deepcopy(model)
    return train(case, model, "eager", steps, **kw), train(case, twin, spelling, steps, strict,
                                                            **kw)


def _close(a, b, rtol, atol):
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and a.dtype == b.dtype and torch.allclose(a, b, rtol=rtol,
                                                                          atol=atol)


def compare(eager: Record, mine: Record, rtol=1e-5, atol=1e-6) -> List[str]:
    """Every difference between two runs, as text (empty: equal)."""
    out = []
    if not torch.equal(eager.rng, mine.rng):
        out.append("the global RNG state after the run differs")
    for what in ("losses", "norms", "evals", "lrs"):
        a, b = getattr(eager, what), getattr(mine, what)
        ta, tb = torch.tensor(a, dtype=torch.float64), torch.tensor(b, dtype=torch.float64)
        if ta.shape != tb.shape or not torch.allclose(ta, tb, rtol=rtol, atol=atol):
            out.append(f"{what}: eager {a} vs {b}")
    for i, (ga, gb) in enumerate(zip(eager.grads, mine.grads)):
        bad = [n for n in ga if not _close(ga[n], gb.get(n), rtol, atol * 10)]
        if bad:
            out.append(f"step {i} grads differ: {bad[:4]} ({len(bad)} of {len(ga)})")
    pa, pb = dict(eager.model.named_parameters()), dict(mine.model.named_parameters())
    bad = [n for n in pa if not _close(pa[n].detach(), pb[n].detach(), rtol, atol * 10)]
    if bad:
        out.append(f"parameters differ: {bad[:4]} ({len(bad)} of {len(pa)})")
    ba, bb = dict(eager.model.named_buffers()), dict(mine.model.named_buffers())
    bad = [n for n in ba if not _close(ba[n], bb[n], rtol, atol * 10)]
    if bad:
        out.append(f"buffers differ: {bad[:4]}")
    sa, sb = eager.optimizer.state_dict(), mine.optimizer.state_dict()
    if sa["param_groups"] != sb["param_groups"]:
        out.append("optimizer param_groups differ")
    if sa["state"].keys() != sb["state"].keys():
        out.append("optimizer state keys differ")
    else:
        for k in sa["state"]:
            for key, va in sa["state"][k].items():
                vb = sb["state"][k].get(key)
                if isinstance(va, torch.Tensor):
                    if not _close(va, vb, rtol, atol * 10):
                        out.append(f"optimizer state {k}.{key} differs")
                elif va != vb:
                    out.append(f"optimizer state {k}.{key}: {va} vs {vb}")
    return out
