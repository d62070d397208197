"""Nodes cut out of a graph, run as plain torch ops when first needed.

A pass that replaces a group of nodes by one node (a fused kernel, a folded value, a rotary
loop) keeps the group as a fallback: ``LazySubgraph(members, inputs, outputs)`` copies the
members into a small graph of their own, lowered by the executor on the first call only
(most fallbacks never run). Calling it takes the inputs' values and returns the outputs'
as a tuple.
"""
from __future__ import annotations

from typing import Dict, List

from ..graph import Graph, Node, iter_nodes, map_nodes


class LazySubgraph:
    """``members`` (in order) reading ``inputs`` and each other, or constants (copied as
    they are), as ``(*inputs) -> tuple of outputs``."""

    def __init__(self, members: List[Node], inputs: List[Node], outputs: List[Node],
                 name: str = "subgraph"):
        self._parts = (list(members), list(inputs), list(outputs))
        # the members' inputs as they are now: a pass that later points the graph's
        # readers of an output at the new node (``uses.replace``) rewrites a member that
        # reads that output too, which would then read a node outside the subgraph
        self._reads = [(m.args, m.kwargs) for m in members]
        self._name = name
        self._fn = None

    def __call__(self, *args):
        if self._fn is None:
            self._fn = self._lower()
        return self._fn(*args)

    def _lower(self):
        from ..executor import lower
        members, inputs, outputs = self._parts
        sub = Graph(name=self._name)
        env: Dict[int, Node] = {}
        for k, v in enumerate(inputs):
            env[id(v)] = sub.placeholder(v.meta, name=f"in{k}")
        for m, (args, kwargs) in zip(members, self._reads):
            for v in iter_nodes((args, kwargs)):
                if id(v) not in env:          # a constant the members read: fixed
                    env[id(v)] = sub.constant(v.attrs["value"], name=v.name)
            env[id(m)] = sub.add_node(m.op, m.target, map_nodes(args, lambda n: env[id(n)]),
                                      map_nodes(kwargs, lambda n: env[id(n)]), m.meta,
                                      name=m.name, attrs=dict(m.attrs), location=m.location)
        sub.outputs = tuple(env[id(o)] for o in outputs)
        exe = lower(sub)
        return lambda *args: tuple(exe(*args))
