"""Loading graphs: ``_Reader`` rebuilds a graph tree from the JSON document and the tensor
data, checking structure as it goes (``_Bad`` / ``_expect``), and ``loads`` / ``load`` check
the header, run the reader, then verify the graph, raising ``GraphLoadError`` on any fault."""
from __future__ import annotations

import json
import keyword
import math
import operator
import os
from typing import Any, Dict, Optional, Tuple

import torch

from ..errors import GraphError, GraphLoadError
from ..graph import Graph, Node
from ..meta import TensorMeta
from .format import _HEADER, _MAX_DEPTH, _PYTYPES, FORMAT, MAGIC, VERSION
from .targets import _enum_table, resolve_target

# ops the executor interprets itself: no target
_BUILTIN_OPS = {"placeholder", "constant", "get", "cond", "while"}



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
    from ..verifier import verify
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
    from ..graph import iter_nodes
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
