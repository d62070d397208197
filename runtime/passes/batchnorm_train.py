"""Train-mode batch norms that autograd records call ``kernels.batchnorm_train``'s target,
with the activation after them folded in.

A ``batch_norm`` node (``F.batch_norm``) with a literal ``training=True`` whose result
requires grad gets ``BatchNormTrain(target, act)``; where its only reader is a
``hardswish`` or ``relu`` node of the same graph (``F.hardswish(y)``, ``F.relu(y)``, in
place or not: the batch norm's result is fresh and seen by nothing else) and that reader is
no output, the activation node is removed and its readers read the batch norm node, whose
target then applies the activation (in its C loops, or as eager's op where it takes
torch's path). At run time the target takes its path only where its conditions hold, so
the node's meaning does not change. Run before ``plan_memory`` and ``grad_out_of_place``
(they would plan the activation node).
"""
from __future__ import annotations

import torch.nn.functional as F

from ..graph import Graph, Node
from ..kernels.batchnorm_train import BatchNormTrain
from .rewrite import Uses, graphs_post_order

_BN_PARAMS = ("input", "running_mean", "running_var", "weight", "bias", "training",
              "momentum", "eps")
_ACTS = {"hardswish": (F.hardswish, ("input", "inplace")),
         "relu": (F.relu, ("input", "inplace"))}


def batchnorm_train(graph: Graph) -> Graph:
    """Retarget, in place, every train-mode ``batch_norm`` node of the tree."""
    for g in graphs_post_order(graph):
        uses = None
        for node in list(g.nodes):
            if node.op != "batch_norm" or node.target is not F.batch_norm or \
                    not node.attrs.get("requires_grad") or not _training(node):
                continue
            uses = uses or Uses(g)
            readers = uses.readers(node)
            act = _activation(readers[0], node) if len(readers) == 1 else None
            if act is not None and uses.only_reader(node, readers[0]) and \
                    readers[0].meta == node.meta:
                uses.replace_node(readers[0], node)
            else:
                act = None
            node.target = BatchNormTrain(node.target, act)
    return graph


def _training(node: Node) -> bool:
    if set(node.kwargs) - set(_BN_PARAMS) or len(node.args) > len(_BN_PARAMS):
        return False
    args = dict(zip(_BN_PARAMS, node.args), **node.kwargs)
    return args.get("training") is True


def _activation(reader: Node, bn: Node):
    """"hardswish" / "relu" when ``reader`` is that activation of ``bn`` alone."""
    spec = _ACTS.get(reader.op)
    if spec is None or reader.target is not spec[0] or reader.subgraphs or \
            reader.graph is not bn.graph or set(reader.kwargs) - set(spec[1]) or \
            len(reader.args) > len(spec[1]) or not reader.args or reader.args[0] is not bn:
        return None
    args = dict(zip(spec[1], reader.args), **reader.kwargs)
    return reader.op if args.get("inplace", False) in (True, False) else None
