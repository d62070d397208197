"""A ``while`` that receives one value twice (an initial loop value that is also a value
the loop captures, or two initial values) exports: the lowering copies the loop variable,
as ``while_loop`` refuses inputs aliasing one another during ONNX's decompositions."""
import warnings

import pytest
import torch

from runtime.export import ExportWarning, to_onnx, to_torch_export
from transpiler import to_graph

onnxruntime = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")


def counters(x):                 # k = 0 and m = 0: one shared constant, captured inside
    total, k = torch.zeros(()), 0
    while k < x.shape[0]:
        r, m = x[k], 0
        while r.sum() < 20 and m < 3:
            r, m = r * 2, m + 1
        total, k = total + r.sum(), k + 1
    return total, k


def twins(x):                    # two loop variables starting as the same tensor
    a = b = x.sum()
    while a < 10:
        a, b = a + 1, b * 2
    return a, b


@pytest.mark.parametrize("fn", [counters, twins])
def test_onnx_and_pt2_match_eager(fn, tmp_path):
    example = (torch.full((3, 2), 0.5),)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExportWarning)
        module = to_torch_export(to_graph(fn), example).module()
        path = to_onnx(to_graph(fn), tmp_path / "m.onnx", example)
    session = onnxruntime.InferenceSession(path)
    for x in (torch.full((3, 2), 0.5), torch.full((5, 2), -1.0), torch.full((2, 2), 30.0)):
        want = [torch.as_tensor(v, dtype=torch.float32) for v in fn(x)]
        got_pt2 = module(x)
        got_onnx = session.run(None, {session.get_inputs()[0].name: x.numpy()})
        for g, o, w in zip(got_pt2, got_onnx, want):
            torch.testing.assert_close(g.float(), w)
            torch.testing.assert_close(torch.as_tensor(o).float(), w)
