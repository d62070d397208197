"""The sweep's ``--past``: the causes of the fallbacks it found replaced by code of the same
results, on both sides (eager and converted), to see what lies behind them.

Each replacement answers as the original does on the sweep's inputs: ``torchvision._is_tracing``
(``torch._C._get_tracing_state()``) by Python returning None, as outside ``torch.jit.trace``;
``torchvision::nms`` by ``nms_traceable`` (the same greedy NMS in torch ops); the lists of
tensors RAFT's ``CorrBlock`` and detection's ``AnchorGenerator`` store on themselves by
tuples; detection's train-time size draw from a one-size list by that size.
"""
import sys

import torch

from benchmarks.torchvision_ops import nms_traceable, register_cpu_ops


def _not_tracing():
    """torchvision._is_tracing's answer outside ``torch.jit.trace``, as Python code."""
    return None


def _build_pyramid_as_tuple(self, fmap1, fmap2):
    """RAFT's ``CorrBlock.build_pyramid`` (its shape checks left out), keeping the pyramid
    as a tuple."""
    corr_volume = self._compute_corr_volume(fmap1, fmap2)
    batch_size, h, w, num_channels, _, _ = corr_volume.shape
    corr_volume = corr_volume.reshape(batch_size * h * w, num_channels, h, w)
    pyramid = [corr_volume]
    for _ in range(self.num_levels - 1):
        corr_volume = torch.nn.functional.avg_pool2d(corr_volume, kernel_size=2, stride=2)
        pyramid.append(corr_volume)
    self.corr_pyramid = tuple(pyramid)


def _set_cell_anchors_as_tuple(self, dtype, device):
    """AnchorGenerator.set_cell_anchors, keeping the anchors as a tuple."""
    self.cell_anchors = tuple(a.to(dtype=dtype, device=device) for a in self.cell_anchors)


def _first_size(self, k):
    """GeneralizedRCNNTransform.torch_choice for a one-size list (what it returns then),
    without its ``int(tensor.item())``."""
    return k[0]


def work_around_known_fallbacks(assign=setattr):
    """Make the replacements (module docstring) with ``assign``: ``setattr``, or a test's
    ``monkeypatch.setattr`` (undone after the test)."""
    tv = register_cpu_ops()
    detection = tv.models.detection
    assign(tv, "_is_tracing", _not_tracing)
    assign(sys.modules["torchvision.ops.boxes"], "nms", nms_traceable)
    assign(sys.modules["torchvision.models.optical_flow.raft"].CorrBlock, "build_pyramid",
           _build_pyramid_as_tuple)
    assign(detection.transform.GeneralizedRCNNTransform, "torch_choice", _first_size)
    assign(detection.anchor_utils.AnchorGenerator, "set_cell_anchors",
           _set_cell_anchors_as_tuple)
