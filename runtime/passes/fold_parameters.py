"""What only parameters, buffers and constants decide is computed once and kept.

Rule: in each graph, the pure nodes whose tensor inputs are all constant tensors (a
module's parameters and buffers, a global, a folded value), factories or other such
nodes, with static shapes, become one ``folded`` node (``runtime.folded_values``): its
inputs are the constant tensors read (the *sources*), its target computes the nodes'
values that the rest of the graph reads, and keeps them while every source holds the same
bytes (compared on every call). Rotary embeddings' cos/sin tables, GPT-2's position
embeddings and T5's relative position bias (with the mask it is added to) are such
computations: a function of the weights and the signature's shapes.

Not folded: a node with an effect, random, or reading a value that is mutated in the
graph (``rewrite.Facts``); a value that escapes to the caller (it would be the kept
tensor itself); a source that is not a CPU tensor of at most ``MAX_SOURCE_ELEMENTS``
elements (the per-call comparison stays ~1 us); more than ``MAX_ELEMENTS`` elements of
kept values; a lone view or conversion of a source (no work saved).
"""
from __future__ import annotations

import math
from typing import Dict, List

import torch

from ..folded_values import MAX_SOURCE_ELEMENTS, FoldedValues
from ..graph import Graph, Node
from ..meta import TensorMeta
from .fold import FACTORIES, NEVER
from .lazy_subgraph import LazySubgraph
from .rewrite import (FRESH, Uses, facts_for, graphs_post_order, has_effect, inputs_of,
                      mutates)

MAX_ELEMENTS = 1 << 22      # kept values per folded node


def fold_parameters(graph: Graph) -> Graph:
    """Replace, in every graph, the computations of constants alone by ``folded`` nodes."""
    for g in graphs_post_order(graph):
        if any(_source(n) for n in g.nodes):
            _fold_graph(g, graph)
    return graph


def _source(node: Node) -> bool:
    value = node.attrs.get("value") if node.op == "constant" else None
    return isinstance(value, torch.Tensor) and value.is_cpu and \
        value.numel() <= MAX_SOURCE_ELEMENTS and not value.is_sparse and \
        value.layout == torch.strided


def _static(meta) -> bool:
    if isinstance(meta, tuple):
        return all(_static(m) for m in meta)
    return isinstance(meta, TensorMeta) and meta.is_static


def _elements(meta) -> int:
    if isinstance(meta, tuple):
        return sum(_elements(m) for m in meta)
    return math.prod(meta.shape)


def _fold_graph(graph: Graph, root: Graph) -> None:
    facts = facts_for(root)
    uses = Uses(graph)
    in_place = _in_place(graph, uses)
    changed = {facts.group(v) for n in root.walk() if mutates(n) and id(n) not in in_place
               for v in inputs_of(n)}

    def stable(node: Node) -> bool:
        return facts.group(node) not in changed and \
            all(facts.group(v) not in changed for v in inputs_of(node))

    derived: Dict[int, Node] = {}       # node id -> node: decided by constants alone
    sources: Dict[int, Node] = {}      # constants read (folded ones: fixed, not compared)
    members: List[Node] = []
    starts = _loop_starts(graph)
    for node in graph.nodes:
        if node.op == "constant":
            if (node.attrs.get("folded") or _source(node)) and stable(node):
                sources[id(node)] = node
            continue
        if not (_candidate(node) or id(node) in in_place):
            continue
        inputs = inputs_of(node)
        if not inputs and (node.op not in FACTORIES or id(node) in starts):
            continue
        if not all(id(v) in sources or id(v) in derived for v in inputs):
            continue
        if not stable(node) or facts.escapes(node):
            continue
        derived[id(node)] = node
        members.append(node)
    if not members:
        return
    outputs = [m for m in members
               if any(id(r) not in derived for r in uses.readers(m)) or
               uses.out_count.get(id(m), 0)]
    if not outputs or not _worth(members) or \
            sum(_elements(o.meta) for o in outputs) > MAX_ELEMENTS:
        return
    used_sources = []
    for m in members:
        for v in inputs_of(m):
            if id(v) in sources and not v.attrs.get("folded") and \
                    all(v is not s for s in used_sources):
                used_sources.append(v)
    if facts.grad_switch and any(getattr(v.attrs.get("value"), "requires_grad", False)
                                 for v in used_sources):
        return      # (the folded node would run where grad mode may differ from its members':
        #            spectral_norm's reshape of weight_orig before its no_grad block)
    target = FoldedValues(LazySubgraph(members, used_sources, outputs, "folded"), [m.op for m in members])
    index = {id(n): i for i, n in enumerate(graph.nodes)}
    readers = [index[id(r)] for o in outputs for r in uses.readers(o) if id(r) not in derived]
    anchor = graph.nodes[min(readers)] if readers else None
    if anchor is not None:          # constants have no inputs: those read later move up
        for source in used_sources:
            if index[id(source)] > index[id(anchor)]:
                graph.nodes.remove(source)
                graph.nodes.insert(graph.nodes.index(anchor), source)
    folded = _add(uses, anchor, "folded", target, tuple(used_sources),
                  tuple(o.meta for o in outputs), {"ops": target.ops}, outputs[0])
    for k, out in enumerate(outputs):
        get = _add(uses, anchor, "get", None, (folded,), out.meta, {"index": k}, out)
        uses.replace(out, get)
    for m in reversed(members):
        if not uses.used(m):
            uses.erase(m)


def _add(uses: Uses, anchor, op, target, args, meta, attrs, like: Node) -> Node:
    """A new node before ``anchor`` (None: at the end of the graph)."""
    if anchor is not None:
        return uses.insert_before(anchor, op, target, args, meta=meta, like=like, attrs=attrs)
    node = uses.graph.add_node(op, target, args, {}, meta, attrs=attrs, location=like.location)
    for value in args:
        uses.users[id(value)].append(node)
    return node


def _in_place(graph: Graph, uses: Uses) -> set:
    """Ids of in-place elementwise updates (``b += t``) of a fresh value that nothing else
    reads: functional in effect, they may be folded with what they update."""
    found = set()
    for node in graph.nodes:
        x = node.args[0] if node.args else None
        if node.op.endswith("_") and node.op[:-1] in FRESH and node.target is not None and \
                not node.subgraphs and isinstance(x, Node) and x.op in FRESH and \
                not has_effect(x) and uses.readers(x) == [node] and \
                not uses.out_count.get(id(x)) and _static(node.meta) and \
                not isinstance(node.meta, tuple):
            found.add(id(node))
    return found


def _candidate(node: Node) -> bool:
    if node.target is None or node.subgraphs or has_effect(node) or node.op in NEVER:
        return False
    if node.kwargs.get("requires_grad") or node.op.endswith("_"):
        return False
    return _static(node.meta) and not isinstance(node.meta, tuple)


def _loop_starts(graph: Graph) -> set:
    """Ids of the loop variables' start values of the ``while`` nodes of ``graph``: a
    literal start (``tensor(0)``, a ``for`` loop's counter) stays a literal node, which
    ``counted_loops`` and ``kernel_while`` read (folded, the loop would run as a general
    ``while``; and there is no work to save)."""
    return {id(v) for n in graph.nodes if n.op == "while"
            for v in n.args[:n.attrs.get("n_vars", 0)] if isinstance(v, Node)}


def _worth(members: List[Node]) -> bool:
    """Some work is saved: a computing op, or a chain of at least two ops."""
    return len(members) >= 2 or any(m.op in FRESH for m in members)


