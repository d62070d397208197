"""Squeeze-and-excitation blocks become one ``squeeze_excite`` node (``kernels.squeeze_excite``).

Rule: ``mul(gate(conv2d(act(conv2d(pool(x), w1, b1)), w2, b2)), x)`` (the factors in
either order) becomes ``squeeze_excite(x, w1, b1, w2, b2)``, where

* ``pool`` is ``adaptive_avg_pool2d(x, 1)`` (or ``(1, 1)``) or ``x.mean`` over the two
  spatial dimensions with ``keepdim=True``;
* both convolutions are 1x1, stride 1, no padding, one group (torchvision's
  ``SqueezeExcitation``, mobilenet_v3's and efficientnet's blocks); ``act`` is ``relu``
  (the ``conv2d_relu`` of ``patterns``, or a separate node), ``silu``, or none;
* ``gate`` is ``hardsigmoid`` or ``sigmoid``;

``x`` is a static 4-D float32/float64 value with the mul's shape and dtype, the pool, the
convolutions and activations are read by the next step alone (none is an output), none
writes in place, and no node with an effect stands between the pool and the mul (the block
now runs where the mul did). Six torch calls (~45-80 us at batch 1) become one C loop; the
block's own ops are kept (``LazySubgraph``) for what the loop does not take: autograd,
another device, unexpected layouts.
"""
from __future__ import annotations

from typing import List, Optional

import torch

from ..graph import Graph, Node
from ..kernels.squeeze_excite import SqueezeExcite
from ..meta import TensorMeta
from .fold_batchnorm import Positions
from .lazy_subgraph import LazySubgraph
from .patterns import _conv_args, conv2d_relu
from .rewrite import Uses, graphs_post_order, has_effect

_GATES = {"hardsigmoid": "hardsigmoid", "sigmoid": "sigmoid"}
_ACTS = {"relu": "relu", "silu": "silu"}
_SPATIAL = ({2, 3}, {-2, -1}, {2, -1}, {-2, 3})


def squeeze_excite(graph: Graph) -> Graph:
    """Rewrite every squeeze-excite block, in every graph."""
    for g in graphs_post_order(graph):
        if not any(n.op in ("adaptive_avg_pool2d", "mean") for n in g.nodes):
            continue
        uses = positions = None
        for node in list(g.nodes):
            if node.op != "mul" or node.graph is not g or len(node.args) != 2 or \
                    node.kwargs or has_effect(node) or \
                    not any(getattr(a, "op", None) in _GATES for a in node.args):
                continue
            uses = uses or Uses(g)
            match = _match(uses, node)
            if match is None:
                continue
            x, args, act, gate, members = match
            positions = positions or Positions(g)
            if positions.effect_between(members[0], node):
                continue
            fn = LazySubgraph(members + [node], [x, *[a for a in args if a is not None]],
                              [node], "squeeze_excite")
            target = SqueezeExcite(act, gate, _unpacked(fn))
            new = uses.insert_before(node, "squeeze_excite", target, (x, *args),
                                     meta=node.meta, like=node)
            uses.replace(node, new)
            uses.erase(node)
            for m in reversed(members):
                uses.erase(m)
            positions = None
    return graph


def _unpacked(fn: LazySubgraph):
    """``fn`` called as the target is (``x, w1, b1, w2, b2``; absent biases None)."""
    def torch_fn(x, w1, b1, w2, b2):
        return fn(x, *[t for t in (w1, b1, w2, b2) if t is not None])[0]
    return torch_fn


def _only(uses: Uses, value, reader: Node) -> bool:
    return isinstance(value, Node) and not has_effect(value) and \
        uses.only_reader(value, reader)


def _static4(value) -> bool:
    meta = getattr(value, "meta", None)
    return isinstance(meta, TensorMeta) and meta.shape is not None and \
        len(meta.shape) == 4 and all(type(d) is int for d in meta.shape) and \
        meta.dtype in (torch.float32, torch.float64)


def _match(uses: Uses, mul: Node):
    for gate, x in (mul.args, mul.args[::-1]):
        if not (_only(uses, gate, mul) and gate.op in _GATES and _static4(x) and
                isinstance(x, Node) and x.meta == mul.meta):
            continue
        gate_name = _unary(gate)
        if gate_name is None:
            continue
        fc2 = gate.args[0]
        fc2_args = _pointwise_conv(uses, fc2, gate)
        if fc2_args is None or fc2.op != "conv2d":
            continue
        inner, w2, b2 = fc2_args
        act, fc1 = None, inner
        if isinstance(inner, Node) and inner.op in _ACTS:
            act = _unary(inner)
            if act is None or not _only(uses, inner, fc2):
                continue
            fc1 = inner.args[0]
            reader = inner
        else:
            reader = fc2
        fc1_args = _pointwise_conv(uses, fc1, reader)
        if fc1_args is None:
            continue
        if fc1.op == "conv2d_relu":
            if act is not None:
                continue
            act = "relu"
        pool, w1, b1 = fc1_args
        if not (_only(uses, pool, fc1) and _pools(pool, x)):
            continue
        members: List[Node] = [pool, fc1] + ([inner] if inner is not fc1 else []) + \
            [fc2, gate]
        return x, (w1, b1, w2, b2), act, gate_name, members
    return None


def _unary(node: Node) -> Optional[str]:
    """The name of a one-input activation node (``inplace=False`` allowed), else None."""
    if len(node.args) != 1 or set(node.kwargs) - {"inplace"} or \
            node.kwargs.get("inplace", False) is not False:
        return None
    return _GATES.get(node.op) or _ACTS.get(node.op)


def _pointwise_conv(uses: Uses, conv, reader: Node):
    """(input, weight, bias) of a 1x1, stride 1, unpadded, one-group ``conv2d`` (or
    ``conv2d_relu``) read by ``reader`` alone, else None."""
    if not _only(uses, conv, reader):
        return None
    if conv.op == "conv2d_relu" and conv.target is conv2d_relu and not conv.kwargs:
        args = list(conv.args) + [1, 0, 1, 1][len(conv.args) - 3:]
    elif conv.op == "conv2d":
        args = _conv_args(conv)
    else:
        return None
    if args is None or len(args) != 7:
        return None
    x, w, b, stride, padding, _, groups = args
    if not (isinstance(w, Node) and _static4(w) and w.meta.shape[2:] == (1, 1)) or \
            not (b is None or isinstance(b, Node)) or not isinstance(x, Node):
        return None
    if stride not in (1, (1, 1), [1, 1]) or padding not in (0, (0, 0), [0, 0]) or groups != 1:
        return None
    return x, w, b


def _pools(pool: Node, x: Node) -> bool:
    """``pool`` averages ``x`` over its two spatial dimensions, keeping them as 1, 1."""
    if not pool.args or pool.args[0] is not x:
        return False
    if pool.op == "adaptive_avg_pool2d":
        size = pool.args[1] if len(pool.args) == 2 else pool.kwargs.get("output_size")
        return len(pool.args) + len(pool.kwargs) == 2 and size in (1, (1, 1), [1, 1])
    if pool.op == "mean":
        args = dict(zip(("dim", "keepdim"), pool.args[1:]))
        if len(pool.args) > 3 or set(pool.kwargs) - {"dim", "keepdim"}:
            return False
        args.update(pool.kwargs)
        dims = args.get("dim")
        return args.get("keepdim") is True and isinstance(dims, (tuple, list)) and \
            len(dims) == 2 and all(type(d) is int for d in dims) and set(dims) in _SPATIAL
    return False
