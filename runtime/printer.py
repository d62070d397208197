"""A jaxpr-like text listing of a graph: one node per line, types inline, subgraphs indented.

    graph(%input_a: f32[2,2]) {
      %const_b: f32[2,2] = constant
      %matmul_1: f32[2,2] = matmul %input_a %const_b        # seed.py:7
      return %matmul_1
    }
"""
from __future__ import annotations

import os
from typing import Any, List

import torch

from .graph import Graph, Node
from .meta import meta_text


def format_value(value: Any) -> str:
    """An argument as the listing shows it: nodes by name, constants as Python literals."""
    if isinstance(value, Node):
        return f"%{value.name}"
    if isinstance(value, tuple):
        inner = ", ".join(format_value(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, list):
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {format_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, slice):
        parts = [format_value(p) if p is not None else "" for p in (value.start, value.stop)]
        text = ":".join(parts)
        return text + (":" + format_value(value.step) if value.step is not None else "")
    if value is Ellipsis:
        return "..."
    if isinstance(value, torch.dtype):
        return str(value).replace("torch.", "")
    if isinstance(value, torch.Tensor):
        return f"tensor{list(value.shape)}"
    return repr(value)


def _op_text(node: Node) -> str:
    """The op as listed; a fused group shows the ops it runs: ``fused[mul,add,tanh]``."""
    if "planned_inplace" in node.attrs:       # memory planning: runs in place
        return node.op + "_"
    ops = node.attrs.get("ops") if node.op == "fused" else None
    if not ops:
        return node.op
    shown = ops if len(ops) <= 12 else ops[:10] + [f"... {len(ops)} ops"]
    return f"fused[{','.join(shown)}]"


def _node_line(node: Node) -> str:
    parts = [format_value(a) for a in node.args]
    parts += [f"{k}={format_value(v)}" for k, v in node.kwargs.items()]
    if node.op == "get":
        parts = [f"{parts[0]}[{node.attrs['index']}]"]
    if node.op == "constant" and "value" in node.attrs:
        value = node.attrs["value"]
        if isinstance(value, torch.Tensor) and value.numel() <= 4:
            parts.append(str(value.detach().tolist()))
    lhs = f"%{node.name}: {meta_text(node.meta)}" if node.meta is not None else "_"
    text = f"{lhs} = {_op_text(node)} {' '.join(parts)}".rstrip()
    if node.location is not None:
        text = f"{text:<56}  # {os.path.basename(node.location[0])}:{node.location[1]}"
    return text


def _format(graph: Graph, label: str, indent: int, out: List[str]) -> None:
    pad = "  " * indent
    params = ", ".join(f"%{p.name}: {meta_text(p.meta)}" for p in graph.inputs)
    out.append(f"{pad}{label}({params}) {{")
    for node in graph.nodes:
        if node.op == "placeholder":
            continue
        out.append(f"{pad}  {_node_line(node)}")
        labels = {"cond": ("then", "else"), "while": ("cond", "body")}.get(node.op, ())
        for sub_label, sub in zip(labels or ["sub"] * len(node.subgraphs), node.subgraphs):
            _format(sub, sub_label, indent + 2, out)
    out.append(f"{pad}  return {format_value(graph.outputs)}")
    out.append(f"{pad}}}")


def format_graph(graph: Graph) -> str:
    out: List[str] = []
    _format(graph, graph.name, 0, out)
    return "\n".join(out)
