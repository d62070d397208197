"""Batch matmuls of the rows of one tensor by one weight: ``x[t] @ w`` for many ``t``.

Rule: pure ``matmul(getitem(x, t), w)`` nodes with the same ``x`` and ``w`` and constant
integer ``t`` (an RNN's input projection, unrolled over time steps) become one
``xw = matmul(x, w)`` placed before the first of them, each replaced by ``getitem(xw, t)``.
One large matrix product replaces many small ones (one kernel call instead of one per
step). Only when the rows used are at least half of ``x``'s first dimension (otherwise
the batch computes too much) and when nothing in the graph mutates a tensor in place
(``x`` or ``w`` could then change between the steps).
"""
from __future__ import annotations

from typing import Dict, List, Tuple

import torch

from ..graph import Graph, Node
from ..meta import TensorMeta
from .rewrite import bump, graphs_post_order

_GETITEM = ("getitem", "select")


def batch_matmul(graph: Graph) -> Graph:
    for g in graphs_post_order(graph):
        if not any(n.impure for n in g.nodes):     # nothing mutated in place
            _batch_graph(g)
    return graph


def _batch_graph(graph: Graph) -> None:
    groups: Dict[Tuple[int, int], List[Node]] = {}
    for node in graph.nodes:
        row = _row_product(node)
        if row is not None:
            x, w = row
            groups.setdefault((id(x), id(w)), []).append(node)
    for members in groups.values():
        x = members[0].args[0].args[0]
        w = members[0].args[1]
        rows = {m.args[0].args[1] for m in members}
        if len(members) < 2 or 2 * len(rows) < x.meta.shape[0]:
            continue
        _batch(graph, members, x, w)


def _row_product(node: Node):
    """(x, w) when ``node`` is ``x[t] @ w`` with a constant int ``t``; else None."""
    if node.op != "matmul" or node.impure or node.kwargs or len(node.args) != 2:
        return None
    a, w = node.args
    if not isinstance(a, Node) or not isinstance(w, Node) or a.op not in _GETITEM:
        return None
    if len(a.args) != 2 or a.kwargs or type(a.args[1]) is not int:
        return None
    x = a.args[0]
    meta = x.meta if isinstance(x, Node) else None
    if not isinstance(meta, TensorMeta) or not meta.is_static or len(meta.shape) < 3 or \
            not isinstance(w.meta, TensorMeta) or not w.meta.is_static or \
            len(w.meta.shape) != 2 or a.op == "select":
        return None
    return x, w


def _batch(graph: Graph, members: List[Node], x: Node, w: Node) -> None:
    first = graph.nodes.index(members[0])
    meta = TensorMeta(tuple(x.meta.shape[:-1]) + (w.meta.shape[-1],), members[0].meta.dtype)
    product = graph.add_node("matmul", torch.matmul, (x, w), {}, meta,
                             location=members[0].location, index=first)
    for m in members:
        index = m.args[0].args[1]
        m.op, m.target, m.args = "getitem", torch.Tensor.__getitem__, (product, index)
        bump()
