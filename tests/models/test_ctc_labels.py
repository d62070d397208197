"""transformers' ``Wav2Vec2ForCTC`` with labels converts (h43): its ``if labels.max() >=
vocab_size: raise ValueError(...)`` is a check the graph makes on every call, and its CTC
loss (tensor lengths, ``F.ctc_loss``) has a shape rule; before, both fell back on every
call. Compared with eager: the loss, the logits and every gradient, and the same
ValueError for out-of-range labels, calls alternating."""
import os
import sys
import warnings

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.torchvision_cpu import import_torchvision  # noqa: E402

import_torchvision()            # (before transformers, whose image utilities import it)
pytest.importorskip("transformers")

from benchmarks.survey_zoo import _SPEECH, _hf  # noqa: E402
from transpiler import FallbackWarning, to_graph  # noqa: E402

VOCAB = 12


def _run(fn, model, x, labels):
    model.zero_grad()
    out = fn(x, labels=labels)
    out.loss.backward()
    return out.loss.detach(), out.logits.detach(), \
        [p.grad.clone() for p in model.parameters() if p.grad is not None]


def test_wav2vec2_for_ctc_with_labels():
    model = _hf("Wav2Vec2Config", "Wav2Vec2ForCTC", **dict(_SPEECH, vocab_size=VOCAB))
    model.config.ctc_zero_infinity = True
    g = to_graph(model)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, 800, generator=gen)
    labels = torch.randint(1, VOCAB, (2, 5), generator=gen)
    bad = labels.clone()
    bad[1, 2] = VOCAB
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        for call in range(2):
            exp, got = _run(model, model, x, labels), _run(g, model, x, labels)
            torch.testing.assert_close(got[0], exp[0], rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(got[1], exp[1], rtol=1e-5, atol=1e-5)
            assert len(got[2]) == len(exp[2]) > 0
            for a, b in zip(got[2], exp[2]):
                torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
            for fn in (model, g):
                with pytest.raises(ValueError) as info:
                    fn(x, labels=bad)
                assert str(info.value) == f"Label values must be <= vocab_size: {VOCAB}"
    info = g.cache_info()
    assert info.fallbacks == 0 and info.traces == 1, info
