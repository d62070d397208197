"""Common subexpression elimination: compute a value once.

Rule: two nodes of one graph with the same op, target, arguments and attrs, in the same
grad-mode region, compute the same value; readers of the later one read the earlier.
Python literals compare by type and value (``1``, ``1.0``, ``True`` and ``-0.0`` vs ``0.0``
differ), nodes by identity, other objects (tensors) by identity. Never merged: nodes with
effects (random, in-place, printing...), ``cond``/``while`` nodes, placeholders, values
whose storage may be mutated, and two values that both reach the caller (see
``rewrite.Facts.may_merge``). ``constant`` nodes merge when they hold the same object.
"""
from __future__ import annotations

from typing import Any, Dict

from ..constant_keys import key_of  # noqa: F401 (cse.key_of, as before)
from ..graph import Graph, Node
from .rewrite import Uses, facts_for, graphs_post_order, grad_regions, has_effect

_SKIP_ATTRS = {"_example"}


def cse(graph: Graph) -> Graph:
    """Merge repeated pure computations within each graph."""
    facts: list = []                  # computed at the first repeat, kept current by union
    for g in graphs_post_order(graph):
        _cse_graph(g, graph, facts)
    return graph


def _node_key(node: Node, region: int):
    if node.op == "constant":
        return ("constant", id(node.attrs.get("value")), region)
    attrs = tuple((k, key_of(v)) for k, v in sorted(node.attrs.items()) if k not in _SKIP_ATTRS)
    kwargs = tuple((k, key_of(v)) for k, v in node.kwargs.items()) if node.kwargs else ()
    return (node.op, id(node.target), key_of(node.args), kwargs, attrs, region)


def _cse_graph(graph: Graph, root: Graph, lazy_facts: list) -> None:
    regions = grad_regions(graph)
    seen: Dict[Any, Node] = {}
    uses = None
    for node in list(graph.nodes):
        if node.op == "placeholder" or node.subgraphs or has_effect(node):
            continue
        key = _node_key(node, regions[id(node)])
        first = seen.get(key)
        if first is None:
            seen[key] = node
            continue
        if not lazy_facts:
            lazy_facts.append(facts_for(root))
        facts = lazy_facts[0]
        if node.op != "constant" and not facts.may_merge(first, node):
            continue
        uses = uses or Uses(graph)
        facts.union(first, node)
        uses.replace_node(node, first)
