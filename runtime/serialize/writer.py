"""Saving graphs: ``_Writer`` turns a graph tree into the JSON document and the tensor data
section, ``dumps`` builds the file bytes and ``save`` writes them to a path."""
from __future__ import annotations

import json
import math
import os
import sys
from typing import Any, Dict, List

import torch

from ..errors import GraphError
from ..graph import Graph, Node
from ..meta import TensorMeta
from .format import _HEADER, _MAX_DEPTH, _PYTYPES, FORMAT, MAGIC, VERSION
from .targets import target_name


class _Writer:
    def __init__(self):
        self.tensors: List[dict] = []
        self.chunks: List[bytes] = []
        self.offset = 0
        self._seen: Dict[int, int] = {}

    def tensor(self, t: torch.Tensor, where: str) -> int:
        key = id(t)
        if key in self._seen:
            return self._seen[key]
        from ..symbolic import SymbolicTensor
        if isinstance(t, SymbolicTensor):
            raise GraphError(f"{where}: holds the symbolic tensor {t._node.name!r} instead of "
                             f"its node")
        with torch._C.DisableTorchFunction():
            return self._tensor(t, where, key)

    def _tensor(self, t: torch.Tensor, where: str, key: int) -> int:
        if t.is_sparse or t.is_quantized or t.layout != torch.strided or t.is_nested:
            raise GraphError(f"{where}: cannot save a {t.layout} / quantized / nested tensor")
        if t.device.type == "meta":
            raise GraphError(f"{where}: cannot save a tensor on the meta device (it has no data)")
        if sys.byteorder != "little":
            raise GraphError("saving graphs is only supported on little-endian machines")
        data = t.detach().to("cpu").resolve_conj().resolve_neg().contiguous()
        raw = data.reshape(-1).view(torch.uint8).numpy().tobytes() if data.numel() else b""
        entry = {"dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape),
                 "offset": self.offset, "nbytes": len(raw),
                 "requires_grad": bool(t.requires_grad),
                 "parameter": isinstance(t, torch.nn.Parameter)}
        self.tensors.append(entry)
        self.chunks.append(raw)
        self.offset += len(raw)
        self._seen[key] = len(self.tensors) - 1
        return self._seen[key]

    # values ----------------------------------------------------------------------------
    def value(self, v: Any, graph: Graph, where: str, depth: int = 0) -> Any:
        if depth > _MAX_DEPTH:
            raise GraphError(f"{where}: value nested too deeply to save")
        rec = lambda x: self.value(x, graph, where, depth + 1)   # noqa: E731
        if isinstance(v, Node):
            if v.graph is not graph:
                raise GraphError(f"{where}: refers to %{v.name}, which is not a value of "
                                 f"graph {graph.name!r}")
            return {"node": v.name}
        if v is None or isinstance(v, (bool, str)):
            return v
        if isinstance(v, int):
            return int(v)
        if isinstance(v, float):
            return float(v) if math.isfinite(v) else {"float": repr(float(v))}
        if isinstance(v, complex):
            return {"complex": [rec(v.real), rec(v.imag)]}
        if v is Ellipsis:
            return {"ellipsis": None}
        if isinstance(v, torch.dtype):
            return {"dtype": str(v).replace("torch.", "")}
        if isinstance(v, torch.device):
            return {"device": str(v)}
        if isinstance(v, torch.layout):
            return {"layout": str(v).replace("torch.", "")}
        if isinstance(v, torch.memory_format):
            return {"memory_format": str(v).replace("torch.", "")}
        if isinstance(v, type) and v in _PYTYPES.values():
            return {"pytype": v.__name__}
        if isinstance(v, torch.Tensor):
            return {"tensor": self.tensor(v, where)}
        if isinstance(v, slice):
            return {"slice": [rec(v.start), rec(v.stop), rec(v.step)]}
        if isinstance(v, tuple):
            if hasattr(v, "_fields"):
                cls = type(v)
                return {"namedtuple": [f"{cls.__module__}.{cls.__qualname__}",
                                       list(v._fields), [rec(x) for x in v]]}
            if type(v) is not tuple and not isinstance(v, torch.Size):
                # structseq (torch.return_types.*): no _fields
                cls = type(v)
                if cls.__module__ == "torch.return_types":
                    return {"namedtuple": [f"torch.return_types.{cls.__name__}", None,
                                           [rec(x) for x in v]]}
            return {"tuple": [rec(x) for x in v]}
        if isinstance(v, list):
            return [rec(x) for x in v]
        if isinstance(v, dict):
            return {"dict": [[rec(k), rec(x)] for k, x in v.items()]}
        if type(v).__module__ == "numpy" and hasattr(v, "item"):
            return rec(v.item())
        raise GraphError(f"{where}: cannot save a value of type {type(v).__name__}")

    def meta(self, m: Any, where: str) -> Any:
        if m is None:
            return None
        if isinstance(m, TensorMeta):
            shape = None if m.shape is None else [None if d is None else int(d) for d in m.shape]
            return {"shape": shape, "dtype": str(m.dtype).replace("torch.", "")}
        if isinstance(m, (tuple, list)):
            return [self.meta(x, where) for x in m]
        raise GraphError(f"{where}: cannot save a meta of type {type(m).__name__}")

    # graphs ----------------------------------------------------------------------------
    def graph(self, g: Graph) -> dict:
        nodes = []
        for node in g.nodes:
            where = f"node %{node.name} ({node.op})"
            if node.target is None:
                target = None
            else:
                target = target_name(node.target)
                if target is None:
                    raise GraphError(f"cannot save {where}: its target {node.target!r} is not "
                                     f"a torch operation or a registered runtime.graph_ops "
                                     f"function")
            attrs = {}
            for key, value in node.attrs.items():
                if not key.startswith("_"):
                    attrs[key] = self.value(value, g, f"{where}, attribute {key!r}")
            loc = node.location
            nodes.append({
                "name": node.name, "op": node.op, "target": target,
                "args": [self.value(a, g, where) for a in node.args],
                "kwargs": {str(k): self.value(v, g, where) for k, v in node.kwargs.items()},
                "attrs": attrs,
                "meta": self.meta(node.meta, where),
                "location": None if loc is None else [str(loc[0]), int(loc[1])],
                "impure": bool(node.impure),
                "subgraphs": [self.graph(s) for s in node.subgraphs],
            })
        return {"name": g.name, "nodes": nodes,
                "outputs": self.value(g.outputs, g, f"outputs of graph {g.name!r}"),
                "captures": [[outer.name, inner.name] for outer, inner in g.captures]}


def dumps(graph: Graph) -> bytes:
    """The bytes of ``graph`` saved (see the module docstring for the format)."""
    from ..verifier import verify
    if graph.parent is not None:
        raise GraphError(f"cannot save subgraph {graph.name!r} on its own: save the root graph")
    verify(graph)
    writer = _Writer()
    tree = writer.graph(graph)
    doc = {"format": FORMAT, "version": VERSION, "graph": tree, "tensors": writer.tensors,
           "data_bytes": writer.offset}
    text = json.dumps(doc, allow_nan=False, ensure_ascii=True, separators=(",", ":"))
    body = text.encode("utf-8")
    return _HEADER.pack(MAGIC, VERSION, 0, len(body)) + body + b"".join(writer.chunks)


def save(graph: Graph, path) -> None:
    """Write ``graph`` (with its subgraphs and constant tensors) to ``path``."""
    data = dumps(graph)
    tmp = f"{os.fspath(path)}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
