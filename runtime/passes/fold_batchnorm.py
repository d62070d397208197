"""Eval-mode batch norms after a 2-D convolution become one ``conv_bn`` node.

Rule: ``F.batch_norm(conv2d(x, w, b, ...), running_mean, running_var, weight, bias,
training=False, momentum, eps)`` becomes ``conv_bn(x, w, b, running_mean, running_var,
weight, bias, stride, padding, dilation, groups, eps)``, whose target
(``kernels.folded_conv.FoldedConv``) runs one convolution with the norm folded into its
weights where autograd records nothing, and eager's two ops otherwise. It fires only when
the convolution is read by the norm alone (and is no output), no node with an effect
stands between them (a write, a grad-mode switch, a cond/while: the convolution now runs
where the norm did), every tensor of the two besides ``x`` is a parameter or buffer
(a ``constant`` node: the folded weights are kept between calls and refolded when one of
them changes, in the graph or outside), and the result is a float32/float64 4-D tensor. Train mode (``training=True``: batch statistics) and norms without running
statistics (``track_running_stats=False``: eager passes ``training=True``) never fold.
``options.fold_batchnorm`` off turns the pass off.
"""
from __future__ import annotations

import bisect
from typing import Optional

import torch
import torch.nn.functional as F

from ..graph import Graph, Node
from ..kernels.folded_conv import FoldedConv
from ..meta import TensorMeta
from ..options import options
from .patterns import _conv_args
from .rewrite import Uses, has_effect, replace_with_new, rule_sites

_BN_PARAMS = ("input", "running_mean", "running_var", "weight", "bias", "training",
              "momentum", "eps")
_BN_DEFAULTS = (None, None, None, None, None, False, 0.1, 1e-5)
_SITES = {"batch_norm": [None]}


def fold_batchnorm(graph: Graph) -> Graph:
    """Replace every foldable ``batch_norm(conv2d(...))`` pair, in every graph."""
    if not options.fold_batchnorm:
        return graph
    uses = position = None
    for g, node, _ in rule_sites(graph, _SITES):
        args = bn_args(node)
        if args is None:
            continue
        if uses is None or uses.graph is not g:
            uses, position = Uses(g), None
        conv = args[0]
        conv_args = _conv_args(conv) if isinstance(conv, Node) else None
        if conv_args is None or not uses.only_reader(conv, node):
            continue
        x, w, b = conv_args[:3]
        if not _folds(node, conv, x, [w, b] + args[1:5]):
            continue
        position = position or Positions(g)
        if position.effect_between(conv, node):
            continue
        new = replace_with_new(uses, node, "conv_bn", FoldedConv(),
                               (x, w, b, *args[1:5], *conv_args[3:], args[7]))
        uses.erase(conv)
        position = None
    return graph


class Positions:
    """Where each node of one graph stands, and where the nodes with effects are."""

    def __init__(self, graph: Graph):
        self.index = {id(n): i for i, n in enumerate(graph.nodes)}
        self.barriers = [i for i, n in enumerate(graph.nodes) if has_effect(n) or n.subgraphs]

    def effect_between(self, first: Node, last: Node) -> bool:
        """A node with an effect (a write, a grad-mode switch, a cond/while, whose bodies
        may write) stands strictly between ``first`` and ``last``: moving what ``first``
        computes to where ``last`` runs could read other values or record otherwise."""
        start, end = self.index[id(first)], self.index[id(last)]
        k = bisect.bisect_right(self.barriers, start)
        return k < len(self.barriers) and self.barriers[k] < end


def bn_args(node: Node) -> Optional[list]:
    """The eight arguments of an eval ``F.batch_norm`` node (defaults filled in), or None."""
    if node.target is not F.batch_norm or set(node.kwargs) - set(_BN_PARAMS) or \
            len(node.args) > len(_BN_PARAMS):
        return None
    args = list(node.args) + list(_BN_DEFAULTS[len(node.args):])
    for name, value in node.kwargs.items():
        args[_BN_PARAMS.index(name)] = value
    training, eps = args[5], args[7]
    if training is not False or type(eps) not in (int, float) or \
            not isinstance(args[1], Node) or not isinstance(args[2], Node):
        return None
    return args


def _folds(bn: Node, conv: Node, x, tensors) -> bool:
    meta = bn.meta
    if not (isinstance(meta, TensorMeta) and meta == conv.meta and meta.shape is not None
            and len(meta.shape) == 4 and meta.dtype in (torch.float32, torch.float64)):
        return False
    if not (isinstance(x, Node) and isinstance(x.meta, TensorMeta) and
            x.meta.dtype == meta.dtype):
        return False
    for t in tensors:
        if t is None:
            continue
        if not (isinstance(t, Node) and t.op == "constant" and not t.attrs.get("folded")
                and isinstance(t.meta, TensorMeta) and t.meta.dtype == meta.dtype):
            return False
    return True
