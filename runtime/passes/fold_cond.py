"""Branch folding: a ``cond`` whose predicate is known when the graph is built.

Rule: ``cond(p, ...)`` with ``p`` a Python bool or a folded constant (a ``constant`` node
with attrs ``folded=True``, from ``fold``) is replaced by the nodes of the branch ``p``
selects, moved into the enclosing graph where the ``cond`` was; readers of the cond's
outputs (its ``get`` nodes) read the branch's results instead. Parameters and other
non-folded constants can change between calls, so they never decide a branch.
"""
from __future__ import annotations

from typing import Dict

import torch

from ..graph import Graph, Node, iter_nodes, map_nodes
from .rewrite import Uses, bump, graphs_post_order, inputs_of


def fold_cond(graph: Graph) -> Graph:
    """Inline the taken branch of every ``cond`` with a constant predicate."""
    for g in graphs_post_order(graph):
        uses = None
        for node in list(g.nodes):
            if node.op != "cond":
                continue
            taken = _known_predicate(node.args[0])
            if taken is None:
                continue
            uses = uses or Uses(g)
            _inline(g, uses, node, node.subgraphs[0 if taken else 1])
    return graph


def _known_predicate(pred):
    if isinstance(pred, bool):
        return pred
    if isinstance(pred, Node) and pred.op == "constant" and pred.attrs.get("folded"):
        value = pred.attrs["value"]
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            return bool(value)
    return None


def _inline(graph: Graph, uses: Uses, node: Node, branch: Graph) -> None:
    readers = uses.readers(node)
    if uses.out_count.get(id(node)) or any(r.op != "get" for r in readers):
        return                          # the result tuple is used whole: keep the cond
    env: Dict[int, Node] = {id(p): outer for p, outer in zip(branch.inputs, node.args[1:])}
    rename = lambda n: env.get(id(n), n)  # noqa: E731
    at = graph.nodes.index(node)
    moved = []
    for inner in branch.nodes:
        if inner.op == "placeholder":
            graph._names.pop(inner.name, None)
            continue
        inner.args = map_nodes(inner.args, rename)
        inner.kwargs = map_nodes(inner.kwargs, rename)
        inner.graph = graph
        for sub in inner.subgraphs:
            sub.parent = graph
            sub.captures = [(rename(o), i) for o, i in sub.captures]
            sub._capture_map = {id(o): i for o, i in sub.captures}
        moved.append(inner)
    graph.nodes[at:at] = moved
    results = [rename(v) for v in iter_nodes(branch.outputs)]
    for value in moved:
        for read in inputs_of(value):
            uses.users[id(read)].append(value)
    for get in list(readers):
        if get.op == "get":
            uses.replace_node(get, results[get.attrs["index"]])
    for other in node.subgraphs:
        if other is not branch:
            other.forget_all()
    graph.nodes.remove(node)
    graph._names.pop(node.name, None)
    for value in inputs_of(node):
        uses.users[id(value)] = [u for u in uses.users[id(value)] if u is not node]
    bump()
