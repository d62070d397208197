"""Fresh eyes (h61): real Hugging Face and timm models trained as a new user's script would.

Written from README.md and the public API only (``to_graph``, ``FallbackWarning``,
``ConversionError``, ``cache_info()``). Models from tiny configs with dropout > 0 (models
and steps in ``fresh_eyes_hf.py``); 3 optimizer steps of two accumulated micro-batches each
(AdamW + linear warmup or SGD momentum + StepLR, ``clip_grad_norm_``, padded
``attention_mask``, ``labels=``, frozen embeddings on some, ``model.eval()`` + ``no_grad``
evaluation between steps on others), eager and converted from deep copies made before any
call, the same seed before every step. Compared: losses, clip norms, eval losses, learning
rates, every gradient after every step, final parameters and buffers, optimizer state, and
the global RNG state after the run (dropout's RNG fidelity: bit-equal where it converts).

Spellings: ``module`` -- ``to_graph(model)`` inside the eager step; ``step`` --
``to_graph(train_step)`` of the whole step (forward, loss, backward, clip, optimizer and
scheduler steps) and ``to_graph(eval_step)``.
"""
import dataclasses
import importlib.util

import pytest
import torch

pytestmark = [
    pytest.mark.skipif(not all(importlib.util.find_spec(m) for m in ("transformers", "timm")),
                       reason="needs the 'models' extra"),
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
]

from tests.training import fresh_eyes_hf as H  # noqa: E402  (imports no model library)

SPELLINGS = ["module", "step"]
CONVERTS = ["bert_mlm", "gpt2_lm", "llama_lm", "qwen2_lm", "mistral_lm", "t5_lm", "bart_lm",
            "whisper_lm", "wav2vec2_ctc", "timm_resnet", "timm_vit"]
# ``*ForSequenceClassification`` / ``*ForImageClassification`` set
# ``self.config.problem_type`` on their first call with labels (transformers' lazy default).
PROBLEM_TYPE = ["bert_cls", "roberta_cls", "distilbert_cls", "vit_cls"]


def _converted(mine):
    info = mine.converted.cache_info()
    assert mine.fallbacks == [], mine.fallbacks
    assert info.traces >= 1 and info.fallbacks == 0, info
    return info


@pytest.mark.parametrize("spelling", SPELLINGS)
@pytest.mark.parametrize("name", CONVERTS)
def test_training_converts_and_equals_eager(name, spelling):
    eager, mine = H.run_pair(H.CASES[name], spelling)
    _converted(mine)
    assert H.compare(eager, mine) == []
    assert any(g is not None for g in mine.grads[-1].values())


@pytest.mark.parametrize("name", ["gpt2_lm", "t5_lm", "timm_resnet"])
def test_strict_mode_converts_the_same_training(name):
    """Strict mode raises on any fallback: these train with no eager part at all."""
    for spelling in SPELLINGS:
        eager, mine = H.run_pair(H.CASES[name], spelling, strict=True)
        _converted(mine)
        assert H.compare(eager, mine) == []


@pytest.mark.parametrize("spelling", SPELLINGS)
@pytest.mark.parametrize("name", ["gpt2_lm", "llama_lm", "t5_lm"])
def test_docs_loop_seeded_once_with_a_short_last_batch(name, spelling):
    """The HF docs' loop body (``zero_grad()`` last), the seed set once before training
    (dropout's RNG stream runs on across steps, and the RNG state after the run is eager's),
    and a last batch one row short (a new batch size: one more trace, no fallback)."""
    eager, mine = H.run_pair(H.CASES[name], spelling, steps=4, step=H.docs_step,
                             seed_once=True, short_last=True)
    info = _converted(mine)
    assert info.traces <= 3, info            # static, batch dim dynamic (+ eval mode)
    assert H.compare(eager, mine) == []


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_gradient_checkpointing_with_dropout(spelling, monkeypatch):
    """``gradient_checkpointing_enable()``: the recomputed forward's dropout must draw the
    masks of the first (torch's checkpoint preserves the RNG state); GPT-2, dropout 0.1."""
    case = H.CASES["gpt2_lm"]

    def build():
        model = H.gpt2_lm()
        model.gradient_checkpointing_enable()
        return model
    monkeypatch.setattr(case, "build", build)
    eager, mine = H.run_pair(case, spelling, step=H.docs_step, seed_once=True)
    _converted(mine)
    assert H.compare(eager, mine) == []


@pytest.mark.parametrize("name", ["gpt2_lm", "t5_lm", "bert_mlm", "bart_lm"])
def test_bf16_autocast_tuple_outputs(name):
    """CPU bf16 autocast around ``model(**batch, return_dict=False)[0]``, both spellings."""
    for spelling in SPELLINGS:
        eager, mine = H.run_pair(H.CASES[name], spelling, step=H.autocast_step)
        _converted(mine)
        assert H.compare(eager, mine) == []


def _freeze_embeddings(model, i):
    if i == 1:
        model.get_input_embeddings().requires_grad_(False)


def _unfreeze_embeddings(model, i):
    if i == 1:
        model.get_input_embeddings().requires_grad_(True)


def _resize_vocab(model, i):
    if i == 1:
        model.resize_token_embeddings(H.VOCAB + 8)        # new parameter tensors, new optimizer
        return H.grouped_adamw(model)


def _dropout_off(model, i):
    if i == 1:
        for m in model.modules():
            if isinstance(m, torch.nn.Dropout):
                m.p = 0.0


def _adamw_all(model):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return opt, torch.optim.lr_scheduler.StepLR(opt, step_size=2)


@pytest.mark.parametrize("change", [_freeze_embeddings, _unfreeze_embeddings, _resize_vocab,
                                    _dropout_off], ids=lambda f: f.__name__.strip("_"))
@pytest.mark.parametrize("spelling", SPELLINGS)
def test_changes_between_steps_with_param_groups(spelling, change):
    """What users change mid-training, with HF's no-decay parameter groups: freezing or
    unfreezing the embeddings (the optimizer holds all parameters; a frozen one has no
    gradient), ``resize_token_embeddings`` (new parameters, a new optimizer: a retrace),
    dropout turned off (a retrace). Gradients, None-ness included, are eager's."""
    case = dataclasses.replace(H.CASES["bert_mlm"], freeze_embeddings=False)
    model = H.fresh(case)
    make_opt = H.grouped_adamw
    if change is _unfreeze_embeddings:
        model.get_input_embeddings().requires_grad_(False)
        make_opt = _adamw_all                   # the optimizer holds the frozen parameter too
    twin = H.copy.deepcopy(model)
    kw = dict(steps=3, make_opt=make_opt, between=change)
    eager, mine = H.train(case, model, "eager", **kw), H.train(case, twin, spelling, **kw)
    _converted(mine)
    assert H.compare(eager, mine) == []
    assert eager.grads[0]["bert.embeddings.word_embeddings.weight"] is not None or \
        change is _unfreeze_embeddings


# ------------------------------------------------------------------ clean fallbacks, needless
@pytest.mark.parametrize("spelling", SPELLINGS)
@pytest.mark.parametrize("name", PROBLEM_TYPE)
def test_problem_type_first_call_falls_back_naming_the_line(name, spelling):
    """The first call writes ``self.config.problem_type``: a fallback naming that line of
    transformers (``module``) or the user's line calling the model (``step``), and eager's
    training."""
    eager, mine = H.run_pair(H.CASES[name], spelling)
    assert len(mine.fallbacks) == 1, mine.fallbacks
    line = "modeling_" if spelling == "module" else "fresh_eyes_hf.py:"
    assert line in mine.fallbacks[0] and "mutates" in mine.fallbacks[0], mine.fallbacks
    assert H.compare(eager, mine) == []


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_problem_type_later_calls_convert(spelling):
    case = dataclasses.replace(H.CASES["bert_cls"], evaluate=False)   # train-mode calls only
    eager, mine = H.run_pair(case, spelling)
    assert H.compare(eager, mine) == []
    assert mine.converted.cache_info().traces >= 1, mine.converted.cache_info()


@pytest.mark.parametrize("name", PROBLEM_TYPE)
def test_problem_type_preset_converts(name):
    """With ``config.problem_type`` set before the first call, sequence and image
    classification convert in both spellings and train as eager (so the fallback above is
    the lazy write's alone)."""
    case = H.CASES[name]
    for spelling in SPELLINGS:
        model = H.fresh(case)
        model.config.problem_type = "single_label_classification"
        twin = H.copy.deepcopy(model)
        eager, mine = H.train(case, model, "eager"), H.train(case, twin, spelling)
        _converted(mine)
        assert H.compare(eager, mine) == []


def _llama_no_dropout():
    model = H.llama_lm()
    model.config.attention_dropout = 0.0
    for layer in model.model.layers:
        layer.self_attn.attention_dropout = 0.0
    return model


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_llama_bf16_autocast_converts(spelling, monkeypatch):
    """sdpa under bf16 autocast with float32 q, k (rotary embeddings) and a bf16 v: inferred
    as autocast runs it (``runtime.autocast_ops.infer``; it fell back before)."""
    case = H.CASES["llama_lm"]
    monkeypatch.setattr(case, "build", _llama_no_dropout)
    eager, mine = H.run_pair(case, spelling, step=H.autocast_step)
    assert H.compare(eager, mine) == []
    _converted(mine)


@pytest.mark.parametrize("spelling", SPELLINGS)
@pytest.mark.parametrize("name", ["whisper_lm", "wav2vec2_ctc"])
def test_audio_bf16_autocast_converts(name, spelling):
    """conv1d under bf16 autocast fed a bf16 input (Whisper's conv1 -> conv2, Wav2Vec2's
    feature encoder), and Wav2Vec2's CTC loss under autocast (masked_select's data-dependent
    size, ctc_loss in float32): they fell back before."""
    eager, mine = H.run_pair(H.CASES[name], spelling, step=H.autocast_step)
    assert H.compare(eager, mine) == []
    _converted(mine)


@pytest.mark.parametrize("spelling", SPELLINGS)
@pytest.mark.parametrize("name", ["llama_lm", "mistral_lm", "qwen2_lm"])
def test_bf16_autocast_with_attention_dropout_converts_with_eagers_masks(name, spelling):
    """With attention dropout too: it converts now, so the fallback whose failed trace left
    the RNG advanced (a strict xfail here before) is not reached; dropout masks and the RNG
    state after equal eager's."""
    eager, mine = H.run_pair(H.CASES[name], spelling, step=H.autocast_step)
    _converted(mine)
    assert H.compare(eager, mine) == []
