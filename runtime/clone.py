"""Copy a graph (and its subgraphs) node by node: the starting point of every rewrite."""
from __future__ import annotations

from typing import Dict, Optional

from .graph import Graph, Node, map_nodes


def clone(graph: Graph, parent: Optional[Graph] = None,
          env: Optional[Dict[int, Node]] = None) -> Graph:
    """A structurally identical graph with fresh nodes (names, metas and attrs kept)."""
    env = {} if env is None else env
    new = Graph(parent=parent, name=graph.name)
    for node in graph.nodes:
        subs = [clone(s, new, env) for s in node.subgraphs]
        copy = new.add_node(node.op, node.target, map_nodes(node.args, lambda n: env[id(n)]),
                            map_nodes(node.kwargs, lambda n: env[id(n)]), node.meta,
                            name=node.name, attrs=dict(node.attrs), subgraphs=subs,
                            location=node.location, impure=node.impure)
        env[id(node)] = copy
    new.outputs = map_nodes(graph.outputs, lambda n: env[id(n)])
    new.captures = [(env.get(id(o), o), env[id(i)]) for o, i in graph.captures]
    new._capture_map = {id(o): i for o, i in new.captures}
    return new
