"""Rotary position embeddings become one ``rotary`` node (``kernels.rotary``).

Rule: ``addcmul(cat((-x[..., h:], x[..., :h]), -1) * sin, x, cos)`` (how ``patterns``
leaves transformers' ``q * cos + rotate_half(q) * sin``; ``x`` may be the other factor
of the ``addcmul``, the ``mul``'s factors in either order) becomes ``rotary(x, cos, sin)``
when ``x`` is a static 4-D float32 value with last dimension ``2h``, ``cos``/``sin``
broadcast to it along its leading dimensions, and the slices, ``neg``, ``cat`` and ``mul``
are read by nothing else. Five torch ops and a fused kernel that takes torch's path on
the transposed ``x`` become one C loop reading ``x`` through its strides.
"""
from __future__ import annotations

from typing import Optional

import torch

from ..graph import Graph, Node
from ..kernels.rotary import Rotary
from ..meta import TensorMeta
from .lazy_subgraph import LazySubgraph
from .rewrite import Uses, graphs_post_order, has_effect


def rotary(graph: Graph) -> Graph:
    """Rewrite every rotary embedding, in every graph."""
    for g in graphs_post_order(graph):
        uses = None
        for node in list(g.nodes):
            if node.op != "addcmul" or node.graph is not g or has_effect(node):
                continue
            uses = uses or Uses(g)
            match = _match(uses, node)
            if match is None:
                continue
            x, cos, sin, members = match
            fn = LazySubgraph(members, [x, cos, sin], [node], "rotary")
            new = uses.insert_before(node, "rotary", Rotary(lambda *a, fn=fn: fn(*a)[0]),
                                     (x, cos, sin), meta=node.meta, like=node)
            uses.replace(node, new)
            for m in reversed(members):
                uses.erase(m)
    return graph


def _only(uses: Uses, value, reader: Node) -> bool:
    return isinstance(value, Node) and not has_effect(value) and \
        uses.only_reader(value, reader)


def _match(uses: Uses, node: Node):
    if len(node.args) != 3 or node.kwargs:
        return None
    mul, t1, t2 = node.args
    if not (_only(uses, mul, node) and mul.op == "mul" and len(mul.args) == 2 and
            not mul.kwargs):
        return None
    for cat, sin in (mul.args, mul.args[::-1]):
        if isinstance(cat, Node) and cat.op == "cat":
            break
    else:
        return None
    if not _only(uses, cat, mul) or not isinstance(sin, Node):
        return None
    found = _rotate_half(uses, cat)
    if found is None:
        return None
    x, parts = found
    if t1 is x and isinstance(t2, Node):
        cos = t2
    elif t2 is x and isinstance(t1, Node):
        cos = t1
    else:
        return None
    if not (_fits(cos, x) and _fits(sin, x) and isinstance(node.meta, TensorMeta) and
            node.meta.shape == x.meta.shape and node.meta.dtype == torch.float32):
        return None
    return x, cos, sin, parts + [cat, mul, node]


def _rotate_half(uses: Uses, cat: Node):
    """(x, [its slices and neg]) when ``cat`` is ``cat((-x[..., h:], x[..., :h]), -1)``."""
    dim = cat.args[1] if len(cat.args) > 1 else cat.kwargs.get("dim", 0)
    if set(cat.kwargs) - {"dim"} or not isinstance(cat.args[0], (tuple, list)) or \
            len(cat.args[0]) != 2 or dim not in (-1, 3):
        return None
    neg, first = cat.args[0]
    if not (_only(uses, neg, cat) and neg.op == "neg" and len(neg.args) == 1):
        return None
    second = neg.args[0]
    if not (_only(uses, second, neg) and _only(uses, first, cat) and
            first.op == second.op == "getitem"):
        return None
    x = first.args[0]
    if second.args[0] is not x or not isinstance(x, Node):
        return None
    meta = x.meta
    if not (isinstance(meta, TensorMeta) and meta.is_static and len(meta.shape) == 4 and
            meta.dtype == torch.float32 and meta.shape[-1] % 2 == 0):
        return None
    h = meta.shape[-1] // 2
    if first.args[1] != (Ellipsis, slice(None, h, None)) or \
            second.args[1] != (Ellipsis, slice(h, None, None)):
        return None
    return x, [first, second, neg]


def _fits(t: Node, x: Node) -> bool:
    """``t`` broadcasts to ``x`` along leading dims only (its last dim is x's), float32."""
    meta: Optional[TensorMeta] = t.meta if isinstance(t.meta, TensorMeta) else None
    if meta is None or not meta.is_static or meta.dtype != torch.float32 or \
            not 1 <= len(meta.shape) <= 4 or meta.shape[-1] != x.meta.shape[-1]:
        return False
    return all(a in (1, b) for a, b in zip(reversed(meta.shape), reversed(x.meta.shape)))
