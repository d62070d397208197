"""Batch matmuls of the rows of one tensor by one weight: ``x[t] @ w`` for many ``t``.

Rule: pure ``matmul(getitem(x, t), w)`` nodes with the same ``x`` and ``w`` and constant
integer ``t`` (an RNN's input projection, unrolled over time steps; the row may also be
``get`` ``t`` of ``x.unbind(0)``: ``for xt in xs.unbind(0)``) become one
``xw = matmul(x, w)`` placed before the first of them, each replaced by ``getitem(xw, t)``.
One large matrix product replaces many small ones (one kernel call instead of one per
step). Only when the rows used are at least half of ``x``'s first dimension (otherwise
the batch computes too much) and when nothing in the graph mutates a tensor in place
(``x`` or ``w`` could then change between the steps). Distinct inputs of the graph
multiplied by one ``w`` (``for xt in steps`` over a list passed in) are rows too, of their
``stack`` (one copy of them; ``_batch_inputs``).
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import torch

from ..graph import Graph, Node
from ..meta import TensorMeta
from .rewrite import bump, graphs_post_order

STACKED = 4


def batch_matmul(graph: Graph) -> Graph:
    for g in graphs_post_order(graph):
        if not any(n.impure for n in g.nodes):     # nothing mutated in place
            _batch_graph(g)
    return graph


def _batch_graph(graph: Graph) -> None:
    groups: Dict[Tuple[int, int], List[Tuple[Node, int]]] = {}
    for node in graph.nodes:
        row = _row_product(node)
        if row is not None:
            x, w, t = row
            groups.setdefault((id(x), id(w)), []).append((node, t))
    for members in groups.values():
        x, w = _row_product(members[0][0])[:2]
        rows = {t for _, t in members}
        if len(members) < 2 or 2 * len(rows) < x.meta.shape[0]:
            continue
        _batch(graph, members, x, w)
    _batch_inputs(graph)


def _batch_inputs(graph: Graph) -> None:
    """``a_k @ w`` for ``STACKED`` or more distinct inputs ``a_k`` of the graph of one
    static 2-D shape (a list of time steps passed in): ``stack(a) @ w`` once, each product
    its row."""
    groups: Dict[Tuple[int, tuple], List[Node]] = {}
    for node in graph.nodes:
        if node.op != "matmul" or node.impure or node.kwargs or len(node.args) != 2:
            continue
        a, w = node.args
        if isinstance(a, Node) and isinstance(w, Node) and a.op == "placeholder" and \
                all(isinstance(v.meta, TensorMeta) and v.meta.is_static and
                    len(v.meta.shape) == 2 for v in (a, w)):
            groups.setdefault((id(w), tuple(a.meta.shape), a.meta.dtype), []).append(node)
    for members in groups.values():
        rows = list({id(m.args[0]): m.args[0] for m in members}.values())
        if len(rows) < STACKED or len(rows) != len(members):
            continue
        meta = TensorMeta((len(rows),) + tuple(rows[0].meta.shape), rows[0].meta.dtype)
        x = graph.add_node("stack", torch.stack, (rows,), {}, meta,
                           location=members[0].location, index=graph.nodes.index(members[0]))
        _batch(graph, list(zip(members, range(len(rows)))), x, members[0].args[1])


def _row_product(node: Node):
    """(x, w, t) when ``node`` is ``x[t] @ w`` with a constant int ``t``; else None."""
    if node.op != "matmul" or node.impure or node.kwargs or len(node.args) != 2:
        return None
    a, w = node.args
    if not isinstance(a, Node) or not isinstance(w, Node):
        return None
    row = row_of(a)
    if row is None:
        return None
    x, t = row
    meta = x.meta if isinstance(x, Node) else None
    if not isinstance(meta, TensorMeta) or not meta.is_static or len(meta.shape) < 3 or \
            not isinstance(w.meta, TensorMeta) or not w.meta.is_static or \
            len(w.meta.shape) != 2:
        return None
    return x, w, t


def row_of(a) -> Optional[Tuple[Node, int]]:
    """(x, t) when ``a`` is ``x[t]`` or ``get`` ``t`` of ``x.unbind(0)``, ``t`` a constant
    int; else None."""
    if not isinstance(a, Node):
        return None
    if a.op == "getitem" and len(a.args) == 2 and not a.kwargs and type(a.args[1]) is int:
        return a.args[0], a.args[1]
    if a.op == "get" and isinstance(a.args[0], Node) and a.args[0].op == "unbind":
        unbound = a.args[0]
        dim = unbound.args[1] if len(unbound.args) > 1 else unbound.kwargs.get("dim", 0)
        if len(unbound.args) <= 2 and set(unbound.kwargs) <= {"dim"} and dim == 0 and \
                not unbound.impure:
            return unbound.args[0], a.attrs["index"]
    return None


def _batch(graph: Graph, members: List[Tuple[Node, int]], x: Node, w: Node) -> None:
    first = graph.nodes.index(members[0][0])
    meta = TensorMeta(tuple(x.meta.shape[:-1]) + (w.meta.shape[-1],), members[0][0].meta.dtype)
    product = graph.add_node("matmul", torch.matmul, (x, w), {}, meta,
                             location=members[0][0].location, index=first)
    for m, index in members:
        m.op, m.target, m.args = "getitem", torch.Tensor.__getitem__, (product, index)
        bump()
