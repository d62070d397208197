"""Chains of eval-mode convolutions run channels-last (NHWC), converted at the chain's edges.

oneDNN's convolutions and torch's CPU pooling are much faster on channels-last tensors:
``max_pool2d`` 3x3 on 8x192x16x16 is ~10x faster, a depthwise 5x5 on 1x240x4x4 ~1.5x,
and a contiguous (NCHW) input makes ``conv2d`` reorder its input, its weight and its
result on every call. So, as inductor lays out convolutions, the ``conv_bn`` nodes
(``fold_batchnorm``: their weights are folded once and kept) run on a channels-last input
with channels-last weights, converted once per fold; what reads their results runs on
channels-last tensors too, as long as its values do not depend on the layout.

Rule, on a root graph with at least ``MIN_CONVS`` ``conv_bn`` nodes and no subgraphs:

* the *region* is every ``conv_bn`` node and every node of ``LAYOUT_FREE`` (convolutions,
  pooling, ``cat``, elementwise activations and arithmetic) reading a value of the region;
* a value of the region read by any other node (``flatten``, ``view``, ``linear``, a fused
  kernel, ...) or returned by the graph is read through one ``eager_layout`` node, inserted
  before its first such reader: the value itself when the tensors entering the region
  (the non-region inputs of its nodes, convolution weights included, constant or not) are
  channels-last themselves (eager's results are then channels-last too), else ``value.contiguous()`` (a copy only where the value is
  channels-last: a ``[N, C, 1, 1]`` pooled value is both);
* the ``conv_bn`` targets get ``channels_last=True``: their folded path converts the input
  (itself when it is channels-last already) and uses channels-last folded weights.

The region's values are the same numbers in either layout (reductions such as average
pooling may sum in another order: float rounding); only their strides differ, and only
inside the region. The pass does nothing when a value of the region may be written in
place by a node other than the ones ``conv_bn`` folded (an in-place op would then write a
copy), and where autograd records, ``conv_bn`` runs eager's own ops and layout.
``options.channels_last`` off turns the pass off.
"""
from __future__ import annotations

from typing import Dict, List

import torch

from ..graph import Graph, Node, iter_nodes, map_nodes
from ..graph_ops import register
from ..kernels.folded_conv import FoldedConv
from ..meta import TensorMeta
from ..options import options
from .rewrite import bump, facts_for, has_effect, inputs_of

MIN_CONVS = 2

# ops whose results hold the same values for any layout of their tensor inputs (elementwise
# ops, convolutions, pooling, cat); torch picks their result's layout from the inputs'
LAYOUT_FREE = frozenset("""
conv_bn conv2d conv2d_relu max_pool2d avg_pool2d adaptive_avg_pool2d cat concat
relu relu6 hardtanh hardswish hardsigmoid silu sigmoid tanh gelu elu leaky_relu mish
add sub mul div neg clamp clamp_min clamp_max squeeze_excite
""".split())


@register
def eager_layout(value, *entries):
    """``value`` with the layout eager gives it: itself when a tensor entering its
    channels-last region is channels-last (eager's results are too), else contiguous."""
    for t in entries:
        if isinstance(t, torch.Tensor) and t.dim() == 4 and not t.is_contiguous() and \
                t.is_contiguous(memory_format=torch.channels_last):
            return value
    return value.contiguous()


def channels_last(graph: Graph) -> Graph:
    """Run the ``conv_bn`` chains of the root graph channels-last (see the module text)."""
    if not options.channels_last or any(n.subgraphs for n in graph.nodes):
        return graph
    convs = [n for n in graph.nodes if n.op == "conv_bn" and isinstance(n.target, FoldedConv)
             and not n.target.channels_last]
    if len(convs) < MIN_CONVS:
        return graph
    region = _region(graph, convs)
    if region is None:
        return graph
    readers: Dict[int, List[Node]] = {}
    for node in graph.nodes:
        for value in inputs_of(node):
            readers.setdefault(id(value), []).append(node)
    entries = _entries(graph, region)
    outputs = {id(v) for v in iter_nodes(graph.outputs)}
    for node in list(graph.nodes):
        if id(node) not in region:
            continue
        outside = [r for r in readers.get(id(node), []) if id(r) not in region]
        if outside or id(node) in outputs:
            _edge(graph, node, outside, entries[id(node)])
    for node in convs:
        node.target = node.target.in_channels_last()
    bump()
    return graph


def _region(graph: Graph, convs: List[Node]):
    """ids of the region's nodes, or None where a value of it may be written in place."""
    region = {id(n) for n in convs}
    for node in graph.nodes:
        if id(node) in region or node.op not in LAYOUT_FREE or has_effect(node):
            continue
        if any(id(v) in region for v in inputs_of(node)) and _four_d(node):
            region.add(id(node))
    facts = facts_for(graph)
    if any(facts.mutated(n) for n in graph.nodes if id(n) in region):
        return None
    return region


def _four_d(node: Node) -> bool:
    meta = node.meta
    return isinstance(meta, TensorMeta) and meta.shape is not None and len(meta.shape) == 4


def _entries(graph: Graph, region) -> Dict[int, list]:
    """For each node of the region, the tensors entering the region that it derives from:
    the non-constant values that it or the region nodes before it read from outside."""
    found: Dict[int, list] = {}
    for node in graph.nodes:
        if id(node) not in region:
            continue
        mine, seen = [], set()
        # a convolution's weight decides its result's layout as its input does (eager's
        # conv returns channels-last for channels-last weights): it enters, constant or not
        weight = node.args[1] if node.op == "conv_bn" and len(node.args) > 1 else None
        for value in inputs_of(node):
            entering = _four_d(value) and (value.op != "constant" or value is weight)
            for entry in found[id(value)] if id(value) in region else \
                    ([value] if entering else []):
                if id(entry) not in seen:
                    seen.add(id(entry))
                    mine.append(entry)
        found[id(node)] = mine
    return found


def _edge(graph: Graph, node: Node, outside: List[Node], entries: list) -> None:
    """Readers outside the region and the graph's outputs read ``node`` in eager's layout."""
    index = min([graph.nodes.index(r) for r in outside], default=len(graph.nodes))
    edge = graph.add_node("eager_layout", eager_layout, (node, *entries), {}, node.meta,
                          location=node.location, index=index)
    swap = lambda v: edge if v is node else v  # noqa: E731
    for reader in outside:
        reader.args = map_nodes(reader.args, swap)
        reader.kwargs = map_nodes(reader.kwargs, swap)
    graph.outputs = map_nodes(graph.outputs, swap)
