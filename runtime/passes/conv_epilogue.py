"""What follows a ``conv_bn`` node on its fresh result joins it: a residual add, then an
activation.

Rules, on a ``conv_bn`` node ``c`` (``fold_batchnorm``) read by one node alone, no output:

* ``add(c, r)``, ``add(r, c)``, ``c.add_(r)`` (``out += identity``) with ``r`` of ``c``'s
  shape and dtype (no broadcast, no promotion, no ``alpha``) -> ``c`` with the residual
  ``r`` (added in place into the convolution's fresh result: the same sum);
* ``relu``, ``relu6``, ``hardtanh(0, 6)``, ``hardswish``, ``hardsigmoid``, ``silu``
  of ``c``, ``inplace`` or not -> ``c`` with that activation, done in place on its fresh
  result (an in-place activation of a value nothing else reads is the same value).

Each rule fires only when no node with an effect stands between ``c`` and the node it
joins (``c`` now runs where that node did; see ``fold_batchnorm.Positions``). Where
autograd records, the target runs eager's ops in eager's order (``kernels/folded_conv``).
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch.nn.functional as F

from ..graph import Graph, Node
from ..meta import TensorMeta
from .fold_batchnorm import Positions
from .rewrite import Uses, graphs_post_order, replace_with_new

_ACTS = {"relu": "relu", "relu_": "relu", "relu6": "relu6", "hardswish": "hardswish",
         "hardsigmoid": "hardsigmoid", "silu": "silu", "hardtanh": "relu6",
         "hardswish_": "hardswish", "hardsigmoid_": "hardsigmoid", "silu_": "silu"}


def conv_epilogue(graph: Graph) -> Graph:
    """Fold residual adds and activations into the ``conv_bn`` nodes before them."""
    for g in graphs_post_order(graph):
        if not any(n.op == "conv_bn" for n in g.nodes):
            continue
        uses = Uses(g)
        for node in list(g.nodes):
            if node.graph is not g:
                continue
            found = _residual(node) or _activation(node)
            if found is None:
                continue
            conv, act, other = found
            if not uses.only_reader(conv, node) or not _same_meta(conv, node) or \
                    (other is not None and not _same_meta(other, node)) or \
                    Positions(g).effect_between(conv, node):
                continue
            kernel = conv.target
            args = tuple(conv.args) + ((other,) if other is not None else ())
            replace_with_new(uses, node, "conv_bn",
                             kernel.with_epilogue(act or kernel.act,
                                                  kernel.residual or other is not None), args)
            uses.erase(conv)
    return graph


def _same_meta(a, b: Node) -> bool:
    return isinstance(a, Node) and isinstance(a.meta, TensorMeta) and a.meta == b.meta


def _fresh_conv(value, residual_ok: bool) -> bool:
    """A ``conv_bn`` with no activation yet (and no residual, unless ``residual_ok``)."""
    return isinstance(value, Node) and value.op == "conv_bn" and value.target.act is None \
        and (residual_ok or not value.target.residual) and not value.impure


def _residual(node: Node) -> Optional[Tuple[Node, None, Node]]:
    if node.op not in ("add", "add_") or len(node.args) != 2 or node.kwargs:
        return None
    a, b = node.args
    pairs = ((a, b),) if node.op == "add_" else ((a, b), (b, a))
    for conv, other in pairs:
        if _fresh_conv(conv, False) and isinstance(other, Node) and other is not conv:
            return conv, None, other
    return None


def _activation(node: Node) -> Optional[Tuple[Node, str, None]]:
    act = _ACTS.get(node.op)
    if act is None or not node.args or not _fresh_conv(node.args[0], True):
        return None
    kwargs = dict(node.kwargs)
    kwargs.pop("inplace", None)
    rest = node.args[1:]
    if node.op == "hardtanh":
        if node.target is not F.hardtanh:
            return None
        bounds = dict(zip(("min_val", "max_val", "inplace"), rest))
        bounds.update(kwargs)
        bounds.pop("inplace", None)
        if set(bounds) != {"min_val", "max_val"} or \
                (bounds["min_val"], bounds["max_val"]) != (0.0, 6.0):
            return None
    elif kwargs or len(rest) > (1 if node.op in ("relu", "relu6", "hardswish",
                                                 "hardsigmoid", "silu") else 0) or \
            any(type(v) is not bool for v in rest):
        return None
    return node.args[0], act, None
