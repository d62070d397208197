"""Loop-invariant code motion: compute once, before the loop, what every iteration
computes the same way.

Rule: in a ``while`` node's body (and its condition), a node is invariant when it reads
only captured values (subgraph inputs past the ``n_vars`` loop variables), constants and
other invariant nodes. An invariant node that is pure, not random, not reading storage
that may be mutated, with static shapes, and that cannot fail on values alone (no
integer division, no data-dependent indexing: a loop that runs zero times must not
raise) moves to the enclosing graph, right before the ``while`` node; constants it reads
are copied there. Where the subgraph still reads it, it comes back in as a new capture:
an argument appended to the node and an input appended to both subgraphs, so their
arity stays equal. Loops that switch grad mode inside are left alone.
"""
from __future__ import annotations

from typing import Dict, List

from ..graph import Graph, Node, iter_nodes, map_nodes
from ..meta import TensorMeta
from ..ops import GLOBAL_STATE
from .rewrite import Facts, Uses, bump, facts_for, graphs_post_order, has_effect, inputs_of

# Ops that may raise for some values of correctly shaped inputs.
_VALUE_CHECKED = frozenset({
    "index", "index_select", "gather", "take", "take_along_dim", "embedding", "scatter",
    "scatter_add", "scatter_reduce", "index_add", "index_copy", "index_put", "index_fill",
    "masked_select", "nonzero", "bincount", "multinomial", "repeat_interleave", "item",
    "tolist", "one_hot", "cross_entropy", "nll_loss", "unique", "searchsorted", "bucketize",
    "cholesky", "inverse", "linalg_inv", "lu", "histc"})
_INT_DIVISION = frozenset({"div", "true_divide", "floor_divide", "remainder", "fmod",
                           "rdiv", "rtruediv", "rfloordiv", "rmod"})


def licm(graph: Graph) -> Graph:
    """Hoist loop-invariant computations out of every ``while`` loop."""
    facts = None
    for g in graphs_post_order(graph):
        for node in list(g.nodes):
            if node.op == "while" and node.graph is g:
                if any(n.op in GLOBAL_STATE for sub in node.subgraphs for n in sub.walk()):
                    continue
                facts = facts or facts_for(graph)
                for index in (1, 0):
                    _hoist(g, node, node.subgraphs[index], facts)
    return graph


def _static(meta) -> bool:
    if isinstance(meta, tuple):
        return all(_static(m) for m in meta)
    return isinstance(meta, TensorMeta) and meta.is_static


def _hoistable(node: Node, facts: Facts) -> bool:
    if has_effect(node) or node.subgraphs or (node.target is None and node.op != "get"):
        return False
    if node.op in _VALUE_CHECKED or not _static(node.meta):
        return False
    inputs = inputs_of(node)
    if not all(_static(v.meta) for v in inputs):
        return False
    if node.op == "getitem" and any(True for _ in iter_nodes(node.args[1:])):
        return False
    if node.op in _INT_DIVISION and any(not (v.meta.dtype.is_floating_point or v.meta.dtype.is_complex)
                                        for v in inputs if isinstance(v.meta, TensorMeta)):
        return False
    return facts.stable(node)


def _hoist(graph: Graph, loop: Node, sub: Graph, facts: Facts) -> None:
    n_vars = loop.attrs["n_vars"]
    outer: Dict[int, Node] = {}                 # invariant value in sub -> value outside
    for index, inner in enumerate(sub.inputs):
        if index >= n_vars:
            outer[id(inner)] = loop.args[index]
    constants: Dict[int, Node] = {}
    hoisted: List[Node] = []
    for node in sub.nodes:
        if node.op == "constant":
            constants[id(node)] = node
            continue
        if node.op == "placeholder" or not _hoistable(node, facts):
            continue
        if all(id(v) in outer or id(v) in constants for v in inputs_of(node)):
            hoisted.append(node)
            outer[id(node)] = node
    if not hoisted:
        return
    at = graph.nodes.index(loop)

    def outside(value: Node) -> Node:
        nonlocal at
        if id(value) not in outer:          # a constant: copied before the loop
            copy = graph.add_node("constant", None, (), {}, value.meta, name=value.name,
                                  attrs=dict(value.attrs), location=value.location, index=at)
            at += 1
            outer[id(value)] = copy
        return outer[id(value)]

    gone = {id(n) for n in hoisted}
    sub.nodes = [n for n in sub.nodes if id(n) not in gone]
    for node in hoisted:
        node.args = map_nodes(node.args, outside)
        node.kwargs = map_nodes(node.kwargs, outside)
        node.graph = graph
        graph.nodes.insert(at, node)
        at += 1
    bump(len(hoisted))
    uses = Uses(sub)
    for node in hoisted:
        if uses.used(node):
            _capture(loop, node, sub, uses)


def _capture(loop: Node, value: Node, sub: Graph, uses: Uses) -> None:
    """Pass ``value`` into every subgraph of ``loop`` as a new capture; ``sub`` reads it."""
    loop.args = loop.args + (value,)
    for each in loop.subgraphs:
        inner = each.placeholder(value.meta, name=value.name, attrs={"captured": True})
        each.captures.append((value, inner))
        each._capture_map[id(value)] = inner
        if each is sub:
            uses.replace(value, inner)
