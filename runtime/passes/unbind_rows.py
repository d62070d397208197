"""Many rows of one tensor by constant index: ``x[0]``, ``x[1]``, ... -> one ``unbind``.

Rule: when pure ``getitem(x, t)`` nodes with constant integers ``t`` read at least half
of the rows of ``x`` (a loop over time steps, unrolled), ``x.unbind(0)`` runs once and each
row is a ``get`` of its result: one torch call instead of one per row (a ``get`` is plain
tuple indexing in the generated code). The rows are the same views either way. Not done
when the graph mutates anything in place.
"""
from __future__ import annotations

from typing import Dict, List

import torch

from ..graph import Graph, Node
from ..meta import TensorMeta
from .rewrite import bump, graphs_post_order


def unbind_rows(graph: Graph) -> Graph:
    for g in graphs_post_order(graph):
        if not any(n.impure for n in g.nodes):     # nothing mutated in place
            _unbind_graph(g)
    return graph


def _unbind_graph(graph: Graph) -> None:
    rows: Dict[int, List[Node]] = {}
    for node in graph.nodes:
        if node.op == "getitem" and not node.kwargs and len(node.args) == 2 and \
                type(node.args[1]) is int and isinstance(node.args[0], Node):
            x = node.args[0]
            meta = x.meta
            if isinstance(meta, TensorMeta) and meta.is_static and meta.shape and \
                    -meta.shape[0] <= node.args[1] < meta.shape[0]:
                rows.setdefault(id(x), []).append(node)
    for members in rows.values():
        x = members[0].args[0]
        n = x.meta.shape[0]
        if len(members) < 2 or 2 * len({m.args[1] % n for m in members}) < n:
            continue
        first = graph.nodes.index(members[0])
        row_meta = TensorMeta(tuple(x.meta.shape[1:]), x.meta.dtype)
        unbound = graph.add_node("unbind", torch.unbind, (x,), {}, (row_meta,) * n,
                                 location=members[0].location, index=first)
        for m in members:
            index = m.args[1] % n
            m.op, m.target, m.args, m.attrs = "get", None, (unbound,), {"index": index}
            bump()
