"""Linear layers that autograd records call ``kernels.onednn_linear``'s target.

An ``addmm(bias, x, w)`` node (``torch.addmm``: transformers' ``Conv1D``) or a
``linear(x, w, bias)`` node (``F.linear``) whose result requires grad gets
``OneDNNLinear(target)`` where ``onednn_linear.available()`` (an AVX-512 CPU whose MKL
runs its AVX2 code) and its static shapes make at least ``MIN_WORK`` multiply-adds:
oneDNN's per-call cost (primitive lookup, its kernels' code and data out of cache among a
step's other ops) and the Python node's eat the faster product below that. GPT-2 at width
64 (128 rows: 128x64x256 = 2.1M) took 1.32x -> 1.14x eager per training step retargeted
(1 thread); at width 128 (128x128x512 = 8.4M) it gains ~10%. At run time the target takes
oneDNN's product under autograd where its conditions hold and calls the original target
otherwise (no autograd: the node computes what it did), so the node's meaning does not
change. Run last: the other passes look for
``torch.addmm`` / ``F.linear`` targets.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..graph import Graph, Node
from ..meta import TensorMeta
from ..kernels import onednn_linear as kernel

_TARGETS = {"addmm": (torch.addmm,), "linear": (F.linear,)}
MIN_WORK = 4_000_000          # multiply-adds of one product (rows x in x out)


def onednn_linear(graph: Graph) -> Graph:
    """Retarget, in place, every recorded ``addmm``/``linear`` node of the tree."""
    if not kernel.available():
        return graph
    for node in graph.walk():
        targets = _TARGETS.get(node.op)
        if targets is None or not any(node.target is t for t in targets) or \
                not node.attrs.get("requires_grad") or node.kwargs or \
                _work(node) < MIN_WORK:
            continue
        node.target = kernel.OneDNNLinear(node.target, kn=node.op == "addmm")
    return graph


def _work(node: Node) -> int:
    """Multiply-adds of the node's product from its static shapes (0: unknown)."""
    x, w = (node.args[1], node.args[2]) if node.op == "addmm" else node.args[:2]
    metas = [getattr(t, "meta", None) for t in (x, w)]
    if not all(isinstance(m, TensorMeta) and m.is_static and len(m.shape) >= 2
               for m in metas):
        return 0
    (xs, ws) = (m.shape for m in metas)
    return math.prod(xs) * (ws[1] if node.op == "addmm" else ws[0])
