"""More real models, written by other projects (``benchmarks/survey_zoo.py``: tiny configs,
random weights), convert with no fallback and match eager -- output types and every tensor
(``benchmarks.models.compare``, within 1e-4 relative to size) -- on a first call and on
another batch with other inputs; text models with a left-padded ``attention_mask``, the
MoE models also asking for every layer's hidden states and attention weights (hooks on
each layer: ``runtime/operators/module_hooks.py``). The full survey, with strict mode and
a train step per model, is ``python -m benchmarks.model_survey``.
"""
import os
import sys
import warnings

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.torchvision_cpu import import_torchvision  # noqa: E402

import_torchvision()            # (before timm, whose import loads torchvision)
pytest.importorskip("transformers")
pytest.importorskip("timm")

from benchmarks.model_survey import _check, with_outputs  # noqa: E402
from benchmarks.survey_zoo import SURVEY, TEXT  # noqa: E402
from transpiler import FallbackWarning, to_graph  # noqa: E402

MODELS = ["mistral", "phi", "gemma2", "opt", "gpt_neox", "falcon", "qwen2_moe", "albert",
          "bart", "whisper", "clip", "timm_swin", "tv_shufflenet"]
# (efficientnet, mobilevit, densenet121, regnet... convert too; their C kernels take
# 15-30 s to build on 2 loaded cores: they are in the survey, not in CI)
OUTPUTS = ["mixtral"]           # output_hidden_states/output_attentions, labels, cache


def _run(fn, args, kwargs):
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        return fn(*args, **kwargs)


def _check_model(name, outputs=False):
    model, make = SURVEY[name](mask=name in TEXT)
    if outputs:
        model.set_attn_implementation("eager")
    g = to_graph(model, strict=name in ("mistral", "clip", "tv_shufflenet"))
    for batch, seed in ((1, 1), (2, 2)):
        args, kwargs = make(batch, seed)
        if outputs:
            kwargs = with_outputs(model, args, kwargs)
        exp = _run(model, args, kwargs)
        got = _run(g, args, kwargs)
        assert _check(got, exp) == "ok", f"{name} b{batch}: {_check(got, exp)}"


@pytest.mark.parametrize("name", MODELS)
def test_model_converts_and_matches(name):
    _check_model(name)


@pytest.mark.parametrize("name", OUTPUTS)
def test_model_with_every_output(name):
    _check_model(name, outputs=True)
