"""Constant folding: compute, once, what every call would compute the same way.

Rule: a pure, non-random node whose inputs are Python literals, graph-built factories
(``zeros``, ``ones``, ``full``, ``arange``, ``tensor``...; not ``empty``) or values
already folded, with a static shape of at most ``MAX_ELEMENTS`` elements, becomes a
``constant`` node with attrs ``{"value": t, "folded": True}``. Factories themselves stay
(each call gets a fresh tensor) and ``constant`` nodes that are not folded values are
never folded through: they are parameters and globals, mutable and maybe requiring grad.
A folded value is one tensor shared by every call, so nothing is folded whose storage
group escapes to the caller or is mutated (see ``rewrite``), nor factories asking for
``requires_grad``. A node whose evaluation raises is left to raise at run time.
"""
from __future__ import annotations

import math
from typing import Any, Dict

import torch

from ..graph import Graph, Node, map_nodes
from ..meta import TensorMeta
from .rewrite import Uses, facts_for, graphs_post_order, has_effect, inputs_of

MAX_ELEMENTS = 4096

FACTORIES = frozenset({"zeros", "ones", "full", "arange", "tensor", "scalar_tensor",
                       "as_tensor", "eye", "linspace", "logspace"})
NEVER = frozenset({"empty", "empty_like", "new_empty", "empty_strided", "item", "tolist"})


def fold(graph: Graph) -> Graph:
    """Replace small pure computations on literals and factories by their value."""
    facts: list = []                  # computed when a node first qualifies
    for g in graphs_post_order(graph):
        if any(n.op in FACTORIES or n.attrs.get("folded") for n in g.nodes):
            _fold_graph(g, graph, facts)
    return graph


def _small(meta) -> bool:
    return isinstance(meta, TensorMeta) and meta.is_static and \
        math.prod(meta.shape) <= MAX_ELEMENTS


def _fold_graph(graph: Graph, root: Graph, facts: list) -> None:
    uses = Uses(graph)
    known: Dict[int, Any] = {}        # node id -> value (factories, folded constants)
    with torch.no_grad():
        for node in list(graph.nodes):
            if node.op == "constant":
                if node.attrs.get("folded"):
                    known[id(node)] = node.attrs["value"]
                continue
            inputs = inputs_of(node)
            if not _foldable(node, inputs, known):
                continue
            if node.op in FACTORIES and not inputs:
                known[id(node)] = node            # a factory stays; evaluated when read
                continue
            if not facts:
                facts.append(facts_for(root))
            if not facts[0].stable(node) or facts[0].escapes(node):
                continue
            value = _evaluate(node, known)
            if value is None:
                continue
            const = uses.insert_before(node, "constant", None, (), meta=node.meta,
                                       attrs={"value": value, "folded": True})
            uses.replace_node(node, const)
            known[id(const)] = value


def _foldable(node: Node, inputs, known) -> bool:
    if node.target is None:
        return False
    if has_effect(node) or node.op in NEVER or node.subgraphs or not _small(node.meta):
        return False
    if node.op in FACTORIES and not inputs:
        return not node.kwargs.get("requires_grad")
    return bool(inputs) and all(id(v) in known for v in inputs)


def _value(node: Node, known):
    value = known[id(node)]
    if value is node:                     # a factory not evaluated yet
        value = known[id(node)] = _evaluate(node, known)
    if value is None:
        raise ValueError(f"%{node.name} cannot be evaluated now")
    return value


def _evaluate(node: Node, known):
    try:
        args = map_nodes(node.args, lambda n: _value(n, known))
        kwargs = map_nodes(node.kwargs, lambda n: _value(n, known))
        value = node.target(*args, **kwargs)
    except Exception:
        return None
    meta = node.meta
    if not isinstance(value, torch.Tensor) or value.requires_grad or value.dtype != meta.dtype \
            or tuple(value.shape) != tuple(meta.shape):
        return None
    return value
