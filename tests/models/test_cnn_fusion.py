"""The zoo CNNs (``benchmarks/model_zoo.py``: torchvision resnet18, mobilenet_v3_small,
googlenet, eval mode) through the convolution passes: strict conversion, every batch norm
folded and every eval dropout gone from the no_grad graph, results equal to eager's (within
float rounding: folding rounds differently) on two inputs, another batch size, and
eager's values and gradients where autograd records (the folded kernels run eager's ops).
"""
import os
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.torchvision_cpu import import_torchvision  # noqa: E402

if import_torchvision() is None:
    pytest.skip("torchvision is not installed", allow_module_level=True)

from benchmarks import model_zoo as Z  # noqa: E402
from transpiler import to_graph  # noqa: E402

# model -> conv_bn nodes expected in its no_grad graph
CNNS = {"resnet18": 20, "mobilenet_v3_small": 34, "googlenet": 57}


@pytest.mark.parametrize("name", sorted(CNNS))
def test_zoo_cnn_folds_and_matches_eager(name):
    model, make = Z.MODELS[name]()
    g = to_graph(model, strict=True)
    with torch.no_grad():
        for seed in (1, 2):
            (x,), _ = make(1, seed)
            torch.testing.assert_close(g(x), model(x), rtol=1e-4, atol=1e-5)
        ops = [n.op for n in g.get_concrete(x).optimized.walk()]
    assert ops.count("conv_bn") == CNNS[name]
    assert "batch_norm" not in ops and not any("dropout" in op for op in ops)
    assert "eager_layout" in ops          # passes/channels_last.py: the chains run NHWC


def test_zoo_resnet_batch_and_autograd():
    """Another batch size (a second graph), and eager's values where autograd records."""
    model, make = Z.MODELS["resnet18"]()
    g = to_graph(model, strict=True)
    (x,), _ = make(3, 4)
    with torch.no_grad():
        torch.testing.assert_close(g(x), model(x), rtol=1e-4, atol=1e-5)
    x.requires_grad_()
    got, exp = g(x), model(x)
    torch.testing.assert_close(got, exp, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(torch.autograd.grad(got.sum(), x)[0],
                               torch.autograd.grad(exp.sum(), x)[0], rtol=1e-4, atol=1e-6)
