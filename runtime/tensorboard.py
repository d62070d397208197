"""A graph as a TensorBoard event file, for TensorBoard's Graph panel.

    g.to_tensorboard("runs/f")          # then: tensorboard --logdir runs

Each node becomes a ``NodeDef`` whose ``op`` is the op name and whose inputs name its
producers. A ``cond``/``while`` node opens a name scope: its subgraphs' nodes are named
``cond_1/then/add_3``, ``while_2/body/mul_4`` (scopes nest), their inputs
(``operand``/``captured`` placeholders) read the outer values, a ``return`` node collects
each subgraph's outputs, and the node itself is ``cond_1/cond_1``, reading the predicate
and the returns. Attributes: ``_output_shapes`` (TensorShapeProto, -1 for a dynamic
dimension), ``dtype`` (``dtypes`` for several outputs), ``location`` (``file.py:12:
source line``), ``ops`` for fused groups, ``role`` for subgraph inputs.

TensorBoard (``pip install tograph[tensorboard]``) is imported only when a graph is
exported, so ``import runtime`` never needs it.
"""
from __future__ import annotations

import os
import re
import time
from types import SimpleNamespace
from typing import Dict, List, Optional

import torch

from .dot import source_text, sub_labels, subgraph_feeds
from .graph import Graph, Node, iter_nodes

_DTYPES = {     # torch dtype -> TensorBoard DataType enum name
    torch.float32: "DT_FLOAT", torch.float64: "DT_DOUBLE", torch.float16: "DT_HALF",
    torch.bfloat16: "DT_BFLOAT16", torch.int64: "DT_INT64", torch.int32: "DT_INT32",
    torch.int16: "DT_INT16", torch.int8: "DT_INT8", torch.uint8: "DT_UINT8",
    torch.bool: "DT_BOOL", torch.complex64: "DT_COMPLEX64", torch.complex128: "DT_COMPLEX128",
}
_BAD_CHARS = re.compile(r"[^0-9A-Za-z_.\-]")    # '/' would open a scope


def _tensorboard() -> SimpleNamespace:
    """TensorBoard's protobuf modules and event writer, or an ImportError naming the extra."""
    try:
        from tensorboard.compat.proto import (attr_value_pb2, event_pb2, graph_pb2,
                                              node_def_pb2, tensor_shape_pb2, types_pb2)
        from tensorboard.summary.writer.event_file_writer import EventFileWriter
    except ImportError as e:
        raise ImportError("exporting a graph to TensorBoard needs the tensorboard package: "
                          "pip install 'tograph[tensorboard]'") from e
    return SimpleNamespace(attr=attr_value_pb2, event=event_pb2, graph=graph_pb2,
                           node=node_def_pb2, shape=tensor_shape_pb2, types=types_pb2,
                           EventFileWriter=EventFileWriter)


class _Builder:
    """Collects the NodeDefs of one graph, naming each node by its scope."""

    def __init__(self):
        self.pb = _tensorboard()
        self.nodes: List = []
        self.names: Dict[int, str] = {}

    def graph(self, graph: Graph, scope: str, feeds: Optional[List[Node]] = None,
              n_explicit: int = 0) -> Optional[str]:
        """Add ``graph``'s nodes under ``scope``; returns the name of its return node."""
        for i, value in enumerate(graph.inputs):
            role = "input" if feeds is None else ("operand" if i < n_explicit else "captured")
            reads = [feeds[i]] if feeds is not None and i < len(feeds) else []
            self.add(value, scope, reads, role=self.attr(s=role.encode()))
        for node in graph.nodes:
            if node.subgraphs:
                self.control(node, scope)
            elif node.op != "placeholder":
                self.add(node, scope, node.inputs)
        outs = list(iter_nodes(graph.outputs))
        if feeds is None and not outs:
            return None
        taken, name = {_clean(n.name) for n in graph.nodes}, "return"
        while name in taken:
            name += "_"
        self.nodes.append(self.pb.node.NodeDef(
            name=scope + name, op="return", input=[self.names[id(v)] for v in outs],
            attr=self.meta_attrs(tuple(v.meta for v in outs))))
        return scope + name

    def control(self, node: Node, scope: str) -> None:
        inner = f"{scope}{_clean(node.name)}/"
        feeds, direct, n_explicit = subgraph_feeds(node)
        returns = [self.graph(sub, f"{inner}{label}/", feeds, n_explicit)
                   for label, sub in zip(sub_labels(node), node.subgraphs)]
        self.add(node, inner, direct, extra_inputs=returns)

    def add(self, node: Node, scope: str, reads: List[Node], extra_inputs=(), **attrs) -> None:
        name = scope + _clean(node.name)
        self.names[id(node)] = name
        attrs.update(self.meta_attrs(node.meta))
        where = source_text(node.location)
        if where:
            attrs["location"] = self.attr(s=where.encode())
        if node.op == "fused":
            ops = [op.encode() for op in node.attrs.get("ops") or ()]
            attrs["ops"] = self.attr(list=self.pb.attr.AttrValue.ListValue(s=ops))
        inputs = [self.names[id(v)] for v in reads] + list(extra_inputs)
        self.nodes.append(self.pb.node.NodeDef(name=name, op=node.op, input=inputs, attr=attrs))

    def attr(self, **value):
        return self.pb.attr.AttrValue(**value)

    def meta_attrs(self, meta) -> dict:
        """``_output_shapes`` and ``dtype`` (``dtypes`` for several outputs) of a meta."""
        if meta is None:
            return {}
        metas = meta if isinstance(meta, tuple) else (meta,)
        metas = [m for m in metas if m is not None]
        shapes = [self.shape(m.shape) for m in metas]
        types = [self.pb.types.DataType.Value(_DTYPES.get(m.dtype, "DT_INVALID"))
                 for m in metas]
        as_list = self.pb.attr.AttrValue.ListValue
        attrs = {"_output_shapes": self.attr(list=as_list(shape=shapes))}
        if isinstance(meta, tuple):
            attrs["dtypes"] = self.attr(list=as_list(type=types))
        elif types:
            attrs["dtype"] = self.attr(type=types[0])
        return attrs

    def shape(self, shape):
        if shape is None:
            return self.pb.shape.TensorShapeProto(unknown_rank=True)
        dim = self.pb.shape.TensorShapeProto.Dim
        return self.pb.shape.TensorShapeProto(dim=[dim(size=-1 if d is None else d)
                                                   for d in shape])


def _clean(name: str) -> str:
    """A node name as TensorBoard accepts it (no '/', which would open a scope)."""
    return _BAD_CHARS.sub("_", name) or "_"


def to_graph_def(graph: Graph):
    """TensorBoard's ``GraphDef`` of ``graph`` (cond/while subgraphs as name scopes)."""
    builder = _Builder()
    builder.graph(graph, "")
    return builder.pb.graph.GraphDef(node=builder.nodes)


def to_tensorboard(graph: Graph, logdir) -> str:
    """Write ``graph`` as a new event file in ``logdir`` (created if needed); its path."""
    pb = _tensorboard()
    graph_def = to_graph_def(graph)
    writer = pb.EventFileWriter(os.fspath(logdir))
    writer.add_event(pb.event.Event(wall_time=time.time(),
                                     graph_def=graph_def.SerializeToString()))
    writer.close()
    return writer._file_name        # no public accessor in TensorBoard's writer
