"""Dropout that does nothing is dropped: readers read its input.

Rule: ``dropout(x, p, training=False)`` (``F.dropout``, ``torch.dropout``, ``nn.Dropout``
in eval mode) and its ``alpha_dropout``/``feature_alpha_dropout``/``dropout1d``/
``dropout2d``/``dropout3d`` kin return ``x`` itself in eager, so readers read ``x``; so do
they with ``p=0`` in training mode (a model trained with dropout 0: no random draw either).
It applies only where eager returns that very object, untouched (``inplace=True`` too):
a literal ``training``/``train`` of False, a literal ``p`` in [0, 1] (``F.dropout`` raises otherwise),
and for ``dropout1d``/``2d``/``3d`` an input of the batched rank (3, 4, 5; other ranks
reshape or warn). The op table marks these ops random, so the cleanup passes leave them.
"""
from __future__ import annotations

from ..graph import Graph, Node
from ..meta import TensorMeta
from .rewrite import Uses, facts_for, graphs_post_order

# op -> the rank its input must have (None: any)
_DROPOUTS = {"dropout": None, "alpha_dropout": None, "feature_alpha_dropout": None,
             "dropout1d": 3, "dropout2d": 4, "dropout3d": 5}


def drop_identity(graph: Graph) -> Graph:
    """Drop every dropout that is the identity, in every graph."""
    facts = None
    for g in graphs_post_order(graph):
        uses = None
        for node in list(g.nodes):
            x = _identity_of(node)
            if x is None:
                continue
            facts = facts or facts_for(graph)
            uses = uses or Uses(g)
            if node.meta == x.meta and facts.may_replace(node, x, exact=True):
                facts.union(node, x)
                uses.replace_node(node, x)
    return graph


def _identity_of(node: Node):
    """The ``x`` a dropout node returns itself, or None."""
    if node.op not in _DROPOUTS or node.subgraphs or \
            set(node.kwargs) - {"p", "training", "train", "inplace"} or len(node.args) > 3:
        return None
    names = ("input", "p", "training")
    args = dict(zip(names, node.args))
    for name, value in node.kwargs.items():
        args["training" if name == "train" else name] = value
    x, p = args.get("input"), args.get("p", 0.5)
    if not isinstance(x, Node) or type(p) not in (int, float) or not 0 <= p <= 1 or \
            (p != 0 and args.get("training", True) is not False):     # p=0: draws nothing
        return None
    rank = _DROPOUTS[node.op]
    if rank is not None and not (isinstance(x.meta, TensorMeta) and x.meta.shape is not None
                                 and len(x.meta.shape) == rank):
        return None
    return x
