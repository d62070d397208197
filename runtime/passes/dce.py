"""Dead code elimination.

Rule: a node is live when a graph output or a node with effects (``rewrite.has_effect``:
impure, random, in-place...) needs it, directly or through other nodes; placeholders
always stay (they are the graph's signature). Other nodes are dropped, inside
``cond``/``while`` subgraphs too. A captured input of a subgraph that no subgraph of its
node reads any more is dropped from both (all) subgraphs and from the node's arguments,
so captures stay aligned; explicit operands and loop variables are kept.
"""
from __future__ import annotations

from typing import Set

from ..graph import Graph, Node, iter_nodes
from .rewrite import bump, has_effect, inputs_of, sub_operands


def dce(graph: Graph) -> Graph:
    """Drop the nodes nothing needs, and captured subgraph inputs nothing reads."""
    _dce_graph(graph)
    return graph


def _dce_graph(graph: Graph) -> None:
    for node in graph.nodes:
        if node.subgraphs:
            for sub in node.subgraphs:
                _dce_graph(sub)
            _drop_unused_captures(node)
    live: Set[int] = {id(v) for v in iter_nodes(graph.outputs)}
    for node in reversed(graph.nodes):
        if node.op == "placeholder" or has_effect(node):
            live.add(id(node))
        if id(node) in live:
            live.update(id(v) for v in inputs_of(node))
    dead = [n for n in graph.nodes if id(n) not in live]
    if not dead:
        return
    graph.nodes = [n for n in graph.nodes if id(n) in live]
    for node in dead:
        graph.forget(node)
    bump(len(dead))


def _first_capture(node: Node) -> int:
    """Index of the first subgraph input that is a capture (not an operand/loop variable)."""
    if node.op == "cond":
        return node.attrs.get("n_operands", len(node.args) - 1)
    return node.attrs.get("n_vars", len(node.args))


def _drop_unused_captures(node: Node) -> None:
    if node.op not in ("cond", "while"):
        return
    start = _first_capture(node)
    inputs = [sub.inputs for sub in node.subgraphs]
    read: Set[int] = set()
    for sub in node.subgraphs:
        for inner in sub.nodes:
            read.update(id(v) for v in inputs_of(inner))
        read.update(id(v) for v in iter_nodes(sub.outputs))
    count = len(inputs[0])
    unused = [i for i in range(start, count)
              if all(id(ins[i]) not in read for ins in inputs)]
    if not unused:
        return
    drop = set(unused)
    offset = 1 if node.op == "cond" else 0
    operands = sub_operands(node, 0)
    node.args = node.args[:offset] + tuple(v for i, v in enumerate(operands) if i not in drop)
    for sub, ins in zip(node.subgraphs, inputs):
        gone = {id(ins[i]) for i in unused}
        sub.nodes = [n for n in sub.nodes if id(n) not in gone]
        for i in unused:
            sub._names.pop(ins[i].name, None)
        sub.captures = [(o, i) for o, i in sub.captures if id(i) not in gone]
        sub._capture_map = {id(o): i for o, i in sub.captures}
    bump(len(unused))
