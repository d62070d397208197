"""Check that a graph is well formed; run after every construction and pass in tests.

Rules: every value is defined before it is used, in its own graph (outer values enter a
subgraph only as captured placeholders); names are unique; a ``get`` reads an index its
source produces; ``cond``/``while`` nodes and their subgraphs agree on arity and dtypes.
"""
from __future__ import annotations

from typing import Set

from .errors import GraphError
from .graph import Graph, Node, iter_nodes
from .meta import TensorMeta


def _fail(graph: Graph, node: Node, why: str) -> None:
    raise GraphError(f"invalid graph {graph.name!r} at %{node.name} ({node.op}): {why}")


def _dtypes(metas):
    return [m.dtype if isinstance(m, TensorMeta) else None for m in metas]


def verify(graph: Graph, _names: Set[str] = None) -> None:
    names = set() if _names is None else _names
    defined: Set[int] = set()
    for node in graph.nodes:
        if node.name in names:
            _fail(graph, node, "duplicate name")
        names.add(node.name)
        if node.graph is not graph:
            _fail(graph, node, "node does not belong to this graph")
        for value in node.inputs:
            if id(value) not in defined:
                _fail(graph, node, f"uses %{value.name} before it is defined (or from another graph)")
            if value.meta is None:
                _fail(graph, node, f"uses %{value.name}, which produces no value")
        if node.op == "get":
            src = node.args[0]
            if not isinstance(src.meta, tuple) or not 0 <= node.attrs["index"] < len(src.meta):
                _fail(graph, node, "reads an output its source does not produce")
            if src.meta[node.attrs["index"]] != node.meta:
                _fail(graph, node, "meta differs from the output it reads")
        if node.op == "cond":
            _check_cond(graph, node)
        if node.op == "while":
            _check_while(graph, node)
        for sub in node.subgraphs:
            if sub.parent is not graph:
                _fail(graph, node, "subgraph's parent is not this graph")
            verify(sub, names)
        defined.add(id(node))
    for value in iter_nodes(graph.outputs):
        if id(value) not in defined:
            raise GraphError(f"invalid graph {graph.name!r}: output %{value.name} is not defined in it")


def _check_cond(graph: Graph, node: Node) -> None:
    if len(node.subgraphs) != 2:
        _fail(graph, node, "cond needs two subgraphs")
    n_in = len(node.args) - 1
    for sub in node.subgraphs:
        if len(sub.inputs) != n_in:
            _fail(graph, node, f"subgraph {sub.name!r} takes {len(sub.inputs)} inputs, node passes {n_in}")
        outs = list(iter_nodes(sub.outputs))
        if _dtypes([o.meta for o in outs]) != _dtypes(node.meta):
            _fail(graph, node, f"subgraph {sub.name!r} output dtypes disagree with the node")


def _check_while(graph: Graph, node: Node) -> None:
    if len(node.subgraphs) != 2:
        _fail(graph, node, "while needs cond and body subgraphs")
    cond_g, body_g = node.subgraphs
    n_in = len(node.args)
    for sub in node.subgraphs:
        if len(sub.inputs) != n_in:
            _fail(graph, node, f"subgraph {sub.name!r} takes {len(sub.inputs)} inputs, node passes {n_in}")
    if len(cond_g.outputs) != 1:
        _fail(graph, node, "the loop condition must produce one value")
    outs = list(iter_nodes(body_g.outputs))
    if _dtypes([o.meta for o in outs]) != _dtypes(node.meta):
        _fail(graph, node, "loop body output dtypes disagree with the loop variables")
