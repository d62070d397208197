"""Save and load graphs: one self-contained file, no pickle, no code run when loading.

File layout (all integers little-endian)::

    b"TOGRAPH\\0"  u32 version  u32 flags(0)  u64 json_length   -- 24-byte header
    JSON document (UTF-8, json_length bytes)                   -- the graph tree
    tensor data (raw little-endian bytes of every constant tensor, back to back)

The JSON document is ``{"format", "version", "graph", "tensors", "data_bytes"}``. A graph
is ``{"name", "nodes", "outputs", "captures"}``; a node is ``{"name", "op", "target",
"args", "kwargs", "attrs", "meta", "location", "impure", "subgraphs"}``. Values are JSON
scalars (str, int, finite float, bool, null), arrays for lists, and one-key tagged
objects for everything else: ``{"tuple": [...]}``, ``{"dict": [[k, v], ...]}``,
``{"slice": [start, stop, step]}``, ``{"ellipsis": null}``, ``{"float": "nan"}``,
``{"complex": [re, im]}``, ``{"dtype": "float32"}``, ``{"device": "cpu"}``,
``{"layout": "strided"}``, ``{"memory_format": "contiguous_format"}``,
``{"pytype": "float"}``, ``{"namedtuple": [type name, [fields], [items]]}``,
``{"node": name}`` (a value of the same graph) and ``{"tensor": index}``. A tensor entry
records dtype, shape, requires_grad, whether it was a Parameter, and its byte range in the
data section.

A node's target is saved as a qualified name ("torch.matmul", "torch.Tensor.__add__",
"torch.Tensor.T.__get__", "runtime.graph_ops.dim_size"). Loading resolves names only
through an allow-list: the operations torch's ``__torch_function__`` protocol reports
(``torch.overrides``), less a few that call Python callables or unpickle, plus the
functions in ``runtime.graph_ops.REGISTRY``. Nothing is imported or looked up by an
arbitrary name, and a loaded graph is checked (structure, then ``verify``) before it is
returned: a malformed, truncated or tampered file raises ``GraphLoadError``.
"""
from __future__ import annotations

import json
import math
import operator
import os
import struct
import sys
import keyword
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from . import graph_ops
from .errors import GraphError, GraphLoadError
from .graph import Graph, Node
from .meta import TensorMeta

MAGIC = b"TOGRAPH\x00"
VERSION = 1
_HEADER = struct.Struct("<8sIIQ")
FORMAT = "tograph-graph"

# ops the executor interprets itself: no target
_BUILTIN_OPS = {"placeholder", "constant", "get", "cond", "while"}
_MAX_DEPTH = 256

# Overridable operations a loaded graph must never call: they call Python callables
# given as arguments, register hooks, or unpickle/produce callables.
_DENIED = {
    "torch.Tensor.apply_", "torch.Tensor.map_", "torch.Tensor.map2_",
    "torch.Tensor.register_hook", "torch.Tensor.register_post_accumulate_grad_hook",
    "torch.Tensor.__reduce_ex__", "torch.Tensor.__setstate__", "torch.Tensor.module_load",
    "torch.Tensor._backward_hooks.__get__", "torch.Tensor._post_accumulate_grad_hooks.__get__",
    "torch.Tensor.grad_fn.__get__", "torch.Tensor._grad_fn.__get__",
    "torch.Tensor.__deepcopy__", "torch.Tensor.share_memory_",
}

# functions of runtime.graph_ops that are helpers (decorators), not graph targets
_GRAPH_OPS_HELPERS = {"register", "effect"}

# Operations torch.overrides lists as "ignored" (no tensor argument to dispatch on, or
# deprecated wrappers) that tracing still records: factories seen by the tracing
# TorchFunctionMode, ``Tensor.new_*``. They only build tensors.
_ALSO_ALLOWED = {f"torch.{n}" for n in (
    "tensor", "as_tensor", "scalar_tensor", "zeros", "ones", "full", "empty", "empty_strided",
    "empty_permuted", "arange", "range", "linspace", "logspace", "eye", "rand", "rand_like",
    "randn", "randn_like", "randint", "randint_like", "randperm", "normal", "tril_indices",
    "triu_indices", "vander", "bartlett_window", "blackman_window", "hamming_window",
    "hann_window", "kaiser_window", "fill", "as_strided", "result_type", "promote_types",
    "can_cast", "fft.fftfreq", "fft.rfftfreq", "functional.broadcast_shapes",
    "Tensor.new_tensor", "Tensor.new_zeros", "Tensor.new_ones", "Tensor.new_full",
    "Tensor.new_empty", "Tensor.new_empty_strided", "Tensor.unflatten", "Tensor.stride",
    "nn.functional.sigmoid", "nn.functional.tanh", "nn.functional.hardsigmoid",
    "nn.functional.hardswish", "nn.functional.upsample", "nn.functional.upsample_bilinear",
    "nn.functional.upsample_nearest")}

_PYTYPES = {"bool": bool, "int": int, "float": float, "complex": complex}


# --------------------------------------------------------------------------- name tables
def _named_values(kind) -> Dict[str, Any]:
    """``{"float32": torch.float32, ...}`` for every torch attribute of type ``kind``."""
    table = {}
    for value in vars(torch).values():
        if isinstance(value, kind):
            table.setdefault(str(value).replace("torch.", ""), value)
    return table


_TABLES: Dict[str, Any] = {}


def _enum_table(kind: str) -> Dict[str, Any]:
    if kind not in _TABLES:
        _TABLES[kind] = _named_values({"dtype": torch.dtype, "layout": torch.layout,
                                       "memory_format": torch.memory_format}[kind])
    return _TABLES[kind]


def _torch_targets() -> Tuple[Dict[str, Callable], Dict[Any, str]]:
    """(name -> callable, callable -> name) for the torch operations a graph may call.

    Built once: torch's testing overrides (every function ``__torch_function__`` can
    report), the in-place public functions torch lists as overridable, and the factories
    in ``_ALSO_ALLOWED``, named by the namespace torch indexes them under."""
    if "targets" in _TABLES:
        return _TABLES["targets"]
    from torch import overrides
    try:
        _, index = overrides._get_overridable_functions()
    except Exception:       # a torch without the private index: name by namespace
        index = {}
        for namespace, funcs in overrides.get_overridable_functions().items():
            prefix = getattr(namespace, "__name__", None)
            if prefix is None:
                continue
            prefix = "torch.Tensor" if namespace is torch.Tensor else prefix
            for func in funcs:
                index.setdefault(func, f"{prefix}.{getattr(func, '__name__', '?')}")
    ignored = set(overrides.get_ignored_functions())
    allowed = list(overrides.get_testing_overrides())
    for func, name in index.items():
        last = name.rsplit(".", 1)[-1]
        if name in _ALSO_ALLOWED and not isinstance(func, type):
            allowed.append(func)
            continue
        if isinstance(func, type) or func in ignored or name.endswith(".__set__"):
            continue
        if last.endswith("_") and not last.startswith("_") and \
                name.startswith(("torch.", "torch.nn.functional.", "torch.nn.init.")):
            allowed.append(func)
    by_name: Dict[str, Callable] = {}
    by_fn: Dict[Any, str] = {}
    for func in allowed:
        name = index.get(func)
        if name is None:
            fname = getattr(func, "__name__", None)
            if fname and getattr(torch, fname, None) is func:
                name = f"torch.{fname}"
        if name is None or name in _DENIED or name in by_name:
            continue
        by_name[name] = func
        try:
            by_fn.setdefault(func, name)
        except TypeError:   # unhashable callable: cannot be looked up anyway
            pass
    _TABLES["targets"] = (by_name, by_fn)
    return by_name, by_fn


def _graph_op_targets() -> Dict[str, Callable]:
    """The functions of ``runtime.graph_ops``: public module functions and the registry."""
    table = {}
    for name, value in vars(graph_ops).items():
        if callable(value) and not name.startswith("_") and \
                getattr(value, "__module__", None) == graph_ops.__name__ and \
                not isinstance(value, type) and name not in _GRAPH_OPS_HELPERS:
            table[f"runtime.graph_ops.{name}"] = value
    table.update(graph_ops.REGISTRY)
    return table


def target_name(target: Callable) -> Optional[str]:
    """The saved name of a node target, or None when it is not an allowed operation."""
    for name, fn in _graph_op_targets().items():
        if fn is target:
            return name
    _, by_fn = _torch_targets()
    try:
        return by_fn.get(target)
    except TypeError:
        return None


def resolve_target(name: str) -> Optional[Callable]:
    """The allowed callable a saved name stands for, or None."""
    if not isinstance(name, str):
        return None
    fn = _graph_op_targets().get(name)
    if fn is not None:
        return fn
    return _torch_targets()[0].get(name)


# --------------------------------------------------------------------------- save
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
        from .symbolic import SymbolicTensor
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
    from .verifier import verify
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


# --------------------------------------------------------------------------- load
class _Bad(Exception):
    """A structural problem in the file (turned into GraphLoadError by ``loads``)."""


def _expect(cond: bool, why: str) -> None:
    if not cond:
        raise _Bad(why)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _reject_constant(name):
    raise _Bad(f"non-standard JSON number {name}")


class _Reader:
    def __init__(self, doc: dict, data: bytes):
        self.data = data
        _expect(isinstance(doc.get("tensors"), list), "'tensors' must be a list")
        self.entries = doc["tensors"]
        self.tensors: Dict[int, torch.Tensor] = {}
        self.root: Optional[Graph] = None

    # tensors ---------------------------------------------------------------------------
    def tensor(self, index) -> torch.Tensor:
        _expect(_is_int(index) and 0 <= index < len(self.entries),
                f"tensor index {index!r} out of range")
        if index in self.tensors:
            return self.tensors[index]
        e = self.entries[index]
        _expect(isinstance(e, dict), f"tensor #{index} is not an object")
        dtype = _enum_table("dtype").get(e.get("dtype"))
        _expect(isinstance(e.get("dtype"), str) and dtype is not None,
                f"tensor #{index}: unknown dtype {e.get('dtype')!r}")
        shape = e.get("shape")
        _expect(isinstance(shape, list) and len(shape) <= 64 and
                all(_is_int(d) and d >= 0 for d in shape), f"tensor #{index}: bad shape")
        off, n = e.get("offset"), e.get("nbytes")
        _expect(_is_int(off) and _is_int(n) and off >= 0 and n >= 0 and off + n <= len(self.data),
                f"tensor #{index}: byte range out of bounds")
        numel = 1
        for d in shape:
            numel *= d
        _expect(numel * dtype.itemsize == n,
                f"tensor #{index}: {n} bytes do not hold {numel} {dtype} values")
        _expect(isinstance(e.get("requires_grad", False), bool) and
                isinstance(e.get("parameter", False), bool), f"tensor #{index}: bad flags")
        if n == 0:
            t = torch.empty(shape, dtype=dtype)
        else:
            buf = bytearray(self.data[off:off + n])
            t = torch.frombuffer(buf, dtype=torch.uint8).view(dtype).reshape(shape)
        if e.get("parameter", False):
            t = torch.nn.Parameter(t, requires_grad=e.get("requires_grad", False))
        elif e.get("requires_grad", False):
            t.requires_grad_(True)
        self.tensors[index] = t
        return t

    # values ----------------------------------------------------------------------------
    def value(self, v: Any, scope: Dict[str, Node], depth: int = 0) -> Any:
        _expect(depth <= _MAX_DEPTH, "value nested too deeply")
        rec = lambda x: self.value(x, scope, depth + 1)   # noqa: E731
        if v is None or isinstance(v, (bool, str, int)):
            return v
        if isinstance(v, float):
            _expect(math.isfinite(v), "non-finite float literal")
            return v
        if isinstance(v, list):
            return [rec(x) for x in v]
        _expect(isinstance(v, dict) and len(v) == 1, f"malformed value {_short(v)}")
        (tag, x), = v.items()
        if tag == "node":
            _expect(isinstance(x, str) and x in scope,
                    f"reference to unknown node {_short(x)} (not defined before use in its graph)")
            return scope[x]
        if tag == "tuple":
            _expect(isinstance(x, list), "malformed tuple")
            return tuple(rec(i) for i in x)
        if tag == "dict":
            _expect(isinstance(x, list) and all(isinstance(p, list) and len(p) == 2 for p in x),
                    "malformed dict")
            out = {}
            for k, item in x:
                key = rec(k)
                _expect(isinstance(key, (str, int, float, bool, type(None), tuple, torch.dtype)),
                        "unhashable dict key")
                out[key] = rec(item)
            return out
        if tag == "slice":
            _expect(isinstance(x, list) and len(x) == 3, "malformed slice")
            return slice(*(rec(i) for i in x))
        if tag == "ellipsis":
            return Ellipsis
        if tag == "float":
            _expect(x in ("inf", "-inf", "nan"), f"bad float {_short(x)}")
            return float(x)
        if tag == "complex":
            _expect(isinstance(x, list) and len(x) == 2, "malformed complex")
            re_, im = rec(x[0]), rec(x[1])
            _expect(all(isinstance(p, float) for p in (re_, im)), "malformed complex")
            return complex(re_, im)
        if tag in ("dtype", "layout", "memory_format"):
            found = _enum_table(tag).get(x) if isinstance(x, str) else None
            _expect(found is not None, f"unknown {tag} {_short(x)}")
            return found
        if tag == "device":
            _expect(isinstance(x, str) and len(x) < 64, "malformed device")
            try:
                return torch.device(x)
            except Exception:
                raise _Bad(f"bad device {_short(x)}") from None
        if tag == "pytype":
            _expect(x in _PYTYPES, f"unknown Python type {_short(x)}")
            return _PYTYPES[x]
        if tag == "tensor":
            return self.tensor(x)
        if tag == "namedtuple":
            return self.namedtuple(x, rec)
        raise _Bad(f"unknown value tag {_short(tag)}")

    def namedtuple(self, x, rec):
        _expect(isinstance(x, list) and len(x) == 3 and isinstance(x[0], str) and
                isinstance(x[2], list), "malformed namedtuple")
        type_name, fields, items = x
        items = [rec(i) for i in items]
        if type_name.startswith("torch.return_types."):
            import torch.return_types as rt
            cls = getattr(rt, type_name.rsplit(".", 1)[1], None)
            _expect(isinstance(cls, type) and issubclass(cls, tuple) and
                    cls.__module__ == "torch.return_types", f"unknown type {_short(type_name)}")
            try:
                return cls(items)
            except Exception:
                raise _Bad(f"bad {type_name} value") from None
        # a user namedtuple: rebuilt as a tuple type with the same name and fields (built
        # with ``type``: collections.namedtuple would eval generated source)
        _expect(isinstance(fields, list) and len(fields) == len(items) and
                all(isinstance(f, str) and f.isidentifier() and not keyword.iskeyword(f)
                    and not f.startswith("_") for f in fields) and len(set(fields)) == len(fields),
                "malformed namedtuple fields")
        short = type_name.rsplit(".", 1)[-1]
        short = short if short.isidentifier() else "record"
        return _record_type(short, tuple(fields))(*items)

    def meta(self, m: Any, depth: int = 0) -> Any:
        _expect(depth <= _MAX_DEPTH, "meta nested too deeply")
        if m is None:
            return None
        if isinstance(m, list):
            return tuple(self.meta(x, depth + 1) for x in m)
        _expect(isinstance(m, dict) and set(m) == {"shape", "dtype"}, "malformed meta")
        dtype = _enum_table("dtype").get(m["dtype"]) if isinstance(m["dtype"], str) else None
        _expect(dtype is not None, f"unknown dtype {_short(m['dtype'])}")
        shape = m["shape"]
        if shape is not None:
            _expect(isinstance(shape, list) and
                    all(d is None or (_is_int(d) and d >= 0) for d in shape), "malformed shape")
            shape = tuple(shape)
        return TensorMeta(shape, dtype)

    # graphs ----------------------------------------------------------------------------
    def graph(self, gj: Any, parent: Optional[Graph], parent_scope: Dict[str, Node],
              depth: int = 0) -> Graph:
        _expect(depth <= 64, "subgraphs nested too deeply")
        _expect(isinstance(gj, dict) and isinstance(gj.get("nodes"), list) and
                isinstance(gj.get("name"), str) and isinstance(gj.get("captures", []), list),
                "malformed graph")
        g = Graph(parent=parent, name=gj["name"])
        if self.root is None:
            self.root = g
        scope: Dict[str, Node] = {}
        for nj in gj["nodes"]:
            node = self.node(g, nj, scope, depth)
            scope[node.name] = node
        g.outputs = self.value(gj.get("outputs", ()), scope)
        for pair in gj.get("captures", []):
            _expect(isinstance(pair, list) and len(pair) == 2, "malformed capture")
            outer_name, inner_name = pair
            _expect(parent is not None, "the root graph cannot capture values")
            outer = parent_scope.get(outer_name) if isinstance(outer_name, str) else None
            inner = scope.get(inner_name) if isinstance(inner_name, str) else None
            _expect(outer is not None, f"capture of unknown outer node {_short(outer_name)}")
            _expect(inner is not None and inner.op == "placeholder",
                    f"capture into {_short(inner_name)}, which is not a placeholder of "
                    f"graph {g.name!r}")
            _expect(id(outer) not in g._capture_map, f"{outer.name!r} captured twice")
            g.captures.append((outer, inner))
            g._capture_map[id(outer)] = inner
        return g

    def node(self, g: Graph, nj: Any, scope: Dict[str, Node], depth: int) -> Node:
        _expect(isinstance(nj, dict), "malformed node")
        name, op = nj.get("name"), nj.get("op")
        _expect(isinstance(name, str) and name != "", "node without a name")
        _expect(isinstance(op, str) and op != "", f"node {name!r} without an op")
        _expect(name not in g._names, f"duplicate node name {name!r}")
        where = f"node %{name} ({op})"
        tname = nj.get("target")
        if tname is None:
            target = None
            _expect(op in _BUILTIN_OPS, f"{where} has no target")
        else:
            _expect(op not in _BUILTIN_OPS, f"{where}: a {op!r} node has no target")
            target = resolve_target(tname)
            if target is None:
                raise _Bad(f"{where}: operation {_short(tname)} is not allowed "
                           f"(not a torch operation or a registered runtime.graph_ops function)")
        args, kwargs, attrs = nj.get("args", []), nj.get("kwargs", {}), nj.get("attrs", {})
        _expect(isinstance(args, list) and isinstance(kwargs, dict) and isinstance(attrs, dict),
                f"{where}: malformed args/kwargs/attrs")
        for key in kwargs:
            _expect(key.isidentifier() and not keyword.iskeyword(key),
                    f"{where}: keyword argument name {_short(key)} is not an identifier")
        subs_j = nj.get("subgraphs", [])
        _expect(isinstance(subs_j, list), f"{where}: malformed subgraphs")
        subs = [self.graph(s, g, scope, depth + 1) for s in subs_j]
        args = tuple(self.value(a, scope) for a in args)
        kwargs = {k: self.value(v, scope) for k, v in kwargs.items()}
        attrs = {k: self.value(v, scope) for k, v in attrs.items()}
        _expect(not any(k.startswith("_") for k in attrs), f"{where}: private attribute")
        loc = nj.get("location")
        if loc is not None:
            _expect(isinstance(loc, list) and len(loc) == 2 and isinstance(loc[0], str)
                    and _is_int(loc[1]), f"{where}: malformed location")
            loc = (loc[0], loc[1])
        impure = nj.get("impure", False)
        _expect(isinstance(impure, bool), f"{where}: malformed impure flag")
        meta = self.meta(nj.get("meta"))
        self.check_builtin(op, where, args, attrs, subs, meta)
        node = g.add_node(op, target, args, kwargs, meta, name=name, attrs=attrs,
                          subgraphs=subs, location=loc, impure=impure)
        _expect(node.name == name, f"{where}: name could not be kept")
        return node

    @staticmethod
    def check_builtin(op, where, args, attrs, subs, meta) -> None:
        """Shape checks for the ops the executor interprets (beyond ``verify``)."""
        if op in _BUILTIN_OPS:
            _expect(op in ("cond", "while") or not subs, f"{where}: unexpected subgraphs")
        if op == "placeholder":
            _expect(not args and isinstance(meta, TensorMeta), f"{where}: malformed placeholder")
        elif op == "constant":
            _expect("value" in attrs and not args, f"{where}: constant without a value")
        elif op == "get":
            _expect(len(args) == 1 and isinstance(args[0], Node), f"{where}: malformed get")
            _expect(_is_int(attrs.get("index")), f"{where}: index must be an int")
        elif op == "cond":
            n = attrs.get("n_operands")
            _expect(len(subs) == 2 and _is_int(n) and 0 <= n <= len(args) - 1 and
                    all(isinstance(a, Node) for a in args), f"{where}: malformed cond")
            _expect(isinstance(meta, tuple), f"{where}: cond meta must be a tuple")
        elif op == "while":
            n = attrs.get("n_vars")
            _expect(len(subs) == 2 and _is_int(n) and 0 <= n <= len(args) and
                    all(isinstance(a, Node) for a in args), f"{where}: malformed while")
            _expect(isinstance(meta, tuple) and len(meta) == n, f"{where}: malformed while meta")
        if op in ("cond", "while"):
            for sub in subs:
                _expect(isinstance(sub.outputs, tuple) and
                        all(isinstance(o, Node) for o in sub.outputs),
                        f"{where}: subgraph {sub.name!r} outputs must be a tuple of values")


_RECORD_TYPES: Dict[Tuple[str, tuple], type] = {}


def _record_type(name: str, fields: tuple) -> type:
    """A namedtuple-like class (``_fields``, attribute access) made without ``eval``."""
    key = (name, fields)
    if key not in _RECORD_TYPES:
        def __new__(cls, *items):
            return tuple.__new__(cls, items)

        def __repr__(self):
            inner = ", ".join(f"{f}={v!r}" for f, v in zip(self._fields, self))
            return f"{type(self).__name__}({inner})"
        body = {"__new__": __new__, "__repr__": __repr__, "__slots__": (), "_fields": fields}
        body.update({f: property(operator.itemgetter(i)) for i, f in enumerate(fields)})
        _RECORD_TYPES[key] = type(name, (tuple,), body)
    return _RECORD_TYPES[key]


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 80 else text[:77] + "..."


def loads(data: bytes, source: str = "<bytes>") -> Graph:
    """The graph saved in ``data``; GraphLoadError when it is malformed or not allowed."""
    try:
        return _loads(bytes(data))
    except GraphLoadError as e:
        raise GraphLoadError(f"{source}: {e}") from None
    except _Bad as e:
        raise GraphLoadError(f"{source}: {e}") from None
    except GraphError as e:          # the verifier
        raise GraphLoadError(f"{source}: the graph is invalid: {e}") from None
    except (MemoryError, RecursionError) as e:
        raise GraphLoadError(f"{source}: the file is too large or too deeply nested "
                             f"({type(e).__name__})") from None
    except Exception as e:
        raise GraphLoadError(f"{source}: malformed graph file ({type(e).__name__}: {e})") from None


def _loads(data: bytes) -> Graph:
    from .verifier import verify
    _expect(len(data) >= _HEADER.size, "file too short for a tograph header")
    magic, version, flags, json_len = _HEADER.unpack_from(data, 0)
    _expect(magic == MAGIC, "not a tograph graph file (bad magic)")
    _expect(version == VERSION, f"unsupported format version {version} (this reader: {VERSION})")
    _expect(flags == 0, f"unknown flags {flags:#x}")
    _expect(_HEADER.size + json_len <= len(data), "truncated file (JSON section)")
    body = data[_HEADER.size:_HEADER.size + json_len]
    blob = data[_HEADER.size + json_len:]
    try:
        doc = json.loads(body.decode("utf-8"), parse_constant=_reject_constant)
    except _Bad:
        raise
    except (UnicodeDecodeError, ValueError) as e:
        raise _Bad(f"bad JSON: {e}") from None
    _expect(isinstance(doc, dict) and doc.get("format") == FORMAT, "not a tograph graph document")
    _expect(doc.get("version") == VERSION, "document version disagrees with the header")
    _expect(_is_int(doc.get("data_bytes")) and doc["data_bytes"] == len(blob),
            f"tensor data is {len(blob)} bytes, the document says {doc.get('data_bytes')!r} "
            f"(truncated or padded file)")
    reader = _Reader(doc, blob)
    graph = reader.graph(doc.get("graph"), None, {})
    _check_values_used(graph)
    verify(graph)
    return graph


def _check_values_used(graph: Graph) -> None:
    """Every node read by another node or returned produces a value (has a meta): nodes
    with no value (print, assert) bind no variable in the executor."""
    from .graph import iter_nodes
    graphs = [graph] + [sub for node in graph.walk() for sub in node.subgraphs]
    for g in graphs:
        for node in g.nodes:
            for value in node.inputs:
                _expect(value.meta is not None,
                        f"node %{node.name} reads %{value.name}, which produces no value")
        for value in iter_nodes(g.outputs):
            _expect(value.meta is not None,
                    f"graph {g.name!r} returns %{value.name}, which produces no value")


def load(path) -> Graph:
    """Read a graph saved by ``Graph.save``. Runs no code from the file: targets resolve
    through an allow-list, and the graph is verified before it is returned."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise GraphLoadError(f"cannot read graph file {os.fspath(path)!r}: {e}") from None
    return loads(data, os.fspath(path))
