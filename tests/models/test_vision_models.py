"""Vision models as they are (torchvision resnet18, mobilenet_v3_small, googlenet, a small
ViT, and ``nn.TransformerEncoder``; built by ``benchmarks/model_zoo.py``): ``to_graph(model)``
is an ``nn.Module`` that converts with no fallback and matches eager within 1e-4 on a first
call, a second call with other inputs and another batch size; in train mode, two SGD steps
through ``to_graph(model).parameters()`` give eager's outputs, gradients, BatchNorm running
stats and updated weights (dropout drawn from the same seed; the second step's graph reads
the weights the first one updated).
"""
import copy
import os
import sys
import warnings

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.torchvision_cpu import import_torchvision  # noqa: E402

if import_torchvision() is None:        # (the 'models' extra is not installed)
    pytest.skip("torchvision is not installed", allow_module_level=True)

from benchmarks import model_zoo as Z  # noqa: E402
from transpiler import FallbackWarning, RetracingWarning, ToGraphModule, to_graph  # noqa: E402

NAMES = ("resnet18", "mobilenet_v3_small", "googlenet", "vit", "transformer_encoder")
CALLS = ((2, 1), (2, 2), (3, 3))        # (batch, seed): first, other inputs, other batch
STEPS = ((2, 4), (2, 5))                # train steps: the second on the updated weights
SMALL = 32                              # CNN images (the zoo's 64 is for the benchmark)


def _build(name):
    """The zoo's model and inputs; the CNNs on 32x32 images to keep the tier quick."""
    model, make = Z.MODELS[name]()
    if name in ("resnet18", "mobilenet_v3_small", "googlenet"):
        def make(batch, seed):
            g = torch.Generator().manual_seed(seed)
            return (torch.randn(batch, 3, SMALL, SMALL, generator=g),), {}
    return model, make


def close(got, exp, what):
    torch.testing.assert_close(got, exp, rtol=1e-4, atol=1e-4, msg=lambda m: f"{what}: {m}")


@pytest.fixture(autouse=True)
def _no_fallback():
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        warnings.simplefilter("error", RetracingWarning)
        yield


@pytest.mark.parametrize("name", NAMES)
def test_eval_matches_eager(name):
    model, make = _build(name)
    w = to_graph(model)
    assert isinstance(w, ToGraphModule) and w.original_module is model
    for batch, seed in CALLS:
        args, kwargs = make(batch, seed)
        with torch.no_grad():
            close(w(*args, **kwargs), model(*args, **kwargs), f"{name} batch {batch} seed {seed}")
    # two graphs: the first batch size static, the second dynamic (or static when the
    # model cannot serve other batch sizes)
    assert sum(hasattr(e, "optimized") for e in w.graph_function._entries.values()) == 2


def test_vit_batch_sizes_share_a_dynamic_graph():
    """ViT's encoder blocks (run by nn.Sequential, not converted) assert with a message
    formatting ``input.shape``: the message of a true assert is never read, so the batch
    stays dynamic (runtime/size_text.py): batches 2, 3, 5, 8 in at most 3 traces."""
    model, make = _build("vit")
    w = to_graph(model, strict=True)
    for batch in (2, 3, 5, 8):
        args, kwargs = make(batch, batch)
        with torch.no_grad():
            close(w(*args, **kwargs), model(*args, **kwargs), f"vit batch {batch}")
    info = w.cache_info()
    assert info.traces <= 3 and info.dynamic_dims, info


@pytest.mark.parametrize("name", NAMES)
def test_train_steps_match_eager(name):
    model, make = _build(name)
    eager = copy.deepcopy(model).train()
    w = to_graph(model, strict=True).train()
    assert model.training and all(m.training for m in model.modules())
    optimizers = [(eager, torch.optim.SGD(eager.parameters(), lr=0.05, momentum=0.9)),
                  (w, torch.optim.SGD(w.parameters(), lr=0.05, momentum=0.9))]
    for step, (batch, seed) in enumerate(STEPS):
        args, kwargs = make(batch, seed)
        outs = []
        for m, opt in optimizers:
            torch.manual_seed(step)                     # the same dropout masks
            opt.zero_grad()
            out = m(*args, **kwargs)
            out.square().mean().backward()
            opt.step()
            outs.append(out.detach())
        close(outs[1], outs[0], f"{name} step {step} output")
        for (pname, p), q in zip(model.named_parameters(), eager.parameters()):
            close(p.grad, q.grad, f"{name} step {step} grad {pname}")
            close(p.detach(), q.detach(), f"{name} step {step} weight {pname}")
        for (bname, b), c in zip(model.named_buffers(), eager.buffers()):
            close(b, c, f"{name} step {step} buffer {bname}")
    assert len(w.graph_function._history) == 1        # the second step reused the graph
