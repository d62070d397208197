"""Grouped convolutions that autograd records call ``kernels.depthwise_train``'s target.

A ``conv2d`` node (``torch.conv2d`` / ``F.conv2d``) with a constant ``groups > 1`` whose
result requires grad gets ``DepthwiseConvTrain(target)``: at run time it takes the
depthwise path where its conditions hold (autograd on, the weight needs a gradient, a plain
float32 depthwise call) and calls the original target otherwise, so the node's meaning
does not change. Run last: the other passes look for ``torch.conv2d`` targets.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..graph import Graph
from ..kernels.depthwise_train import DepthwiseConvTrain

_TARGETS = (torch.conv2d, F.conv2d)


def depthwise_train(graph: Graph) -> Graph:
    """Retarget, in place, every grouped ``conv2d`` node of the tree; returns ``graph``."""
    for node in graph.walk():
        if node.op != "conv2d" or not any(node.target is t for t in _TARGETS) or \
                not node.attrs.get("requires_grad"):
            continue
        groups = node.args[6] if len(node.args) > 6 else node.kwargs.get("groups", 1)
        if type(groups) is int and groups > 1:
            node.target = DepthwiseConvTrain(node.target)
    return graph
