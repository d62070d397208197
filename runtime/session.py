"""The TF1-style graph API: placeholders, constants, a default graph, and ``Session.run``.

    a = runtime.placeholder(torch.float32, shape=(2, 2), name="input_a")
    b = runtime.constant([[1.0, 2.0], [3.0, 4.0]], name="const_b")
    c = torch.matmul(a, b)              # recorded in the default graph, nothing computed
    with runtime.Session() as sess:
        sess.run(c, feed_dict={a: [[2.0, 0.0], [0.0, 2.0]]})

``Session.run`` compiles, once per (fetches, fed placeholders), the part of the graph the
fetches need, checks every feed before anything runs, and returns values in the
structure of the fetches.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

import torch

from .errors import FeedError, GraphError
from .executor import lower
from .graph import Graph, Node
from .meta import TensorMeta
from .ops import is_inplace
from .source_info import user_location
from .symbolic import SymbolicTensor, wrap_node
from .threads import PerThreadList

_DEFAULT_STACK = PerThreadList()      # as_default blocks, per thread (as TF's)
_GLOBAL_DEFAULT: List[Graph] = [Graph(name="default")]


def get_default_graph() -> Graph:
    return _DEFAULT_STACK[-1] if _DEFAULT_STACK else _GLOBAL_DEFAULT[0]


def reset_default_graph() -> Graph:
    """Start a fresh global default graph (outside any ``as_default`` block)."""
    if _DEFAULT_STACK:
        raise GraphError("reset_default_graph() inside a Graph.as_default() block")
    _GLOBAL_DEFAULT[0] = Graph(name="default")
    return _GLOBAL_DEFAULT[0]


def placeholder(dtype: torch.dtype, shape=None, name: str = "placeholder") -> SymbolicTensor:
    """A graph input whose value is fed at ``Session.run``. ``None`` in ``shape`` (or
    ``shape=None``) leaves that dimension (or the whole shape) to the feed."""
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"placeholder dtype must be a torch.dtype, got {dtype!r}")
    dims = None if shape is None else tuple(None if d is None else int(d) for d in shape)
    graph = get_default_graph()
    node = graph.placeholder(TensorMeta(dims, dtype), name=name,
                             attrs={"shape": dims}, location=user_location())
    return wrap_node(node)


def constant(value, dtype: Optional[torch.dtype] = None, name: str = "const") -> SymbolicTensor:
    """A constant tensor in the default graph (lists, numbers, arrays or tensors)."""
    tensor = torch.as_tensor(value, dtype=dtype).detach().clone()
    node = get_default_graph().constant(tensor, name=name, location=user_location())
    return wrap_node(node)


def _kind(dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return "bool"
    if dtype.is_complex:
        return "complex"
    if dtype.is_floating_point:
        return "float"
    return "int"


def convert_feed(node: Node, value) -> torch.Tensor:
    """``value`` as a tensor for placeholder ``node``, or a FeedError naming it."""
    meta: TensorMeta = node.meta
    label = f"placeholder {node.name!r}"
    try:
        tensor = value if isinstance(value, torch.Tensor) else torch.as_tensor(value)
    except Exception as e:
        raise FeedError(f"the feed for {label} cannot be made a tensor: {e}") from None
    if tensor.dtype != meta.dtype:
        src, dst = _kind(tensor.dtype), _kind(meta.dtype)
        if src == dst or (src == "int" and dst in ("float", "complex")) or \
                (src == "float" and dst == "complex"):
            tensor = tensor.to(meta.dtype)
        else:
            raise FeedError(f"the feed for {label} has dtype {tensor.dtype}, but the placeholder "
                            f"is {meta.dtype}")
    if meta.shape is not None:
        shape = tuple(tensor.shape)
        ok = len(shape) == len(meta.shape) and all(
            d is None or d == s for d, s in zip(meta.shape, shape))
        if not ok:
            want = tuple("?" if d is None else d for d in meta.shape)
            raise FeedError(f"the feed for {label} has shape {shape}, but the placeholder "
                            f"expects {want}")
    return tensor


class Session:
    """Runs fetches of a graph with feeds, like ``tf.compat.v1.Session``."""

    def __init__(self, graph: Optional[Graph] = None):
        self.graph = graph if graph is not None else get_default_graph()
        self._closed = False

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._closed = True

    # ----------------------------------------------------------------------------- fetch
    def _node_of(self, item, role: str) -> Node:
        if isinstance(item, Node) and item.graph is self.graph:
            return item
        if isinstance(item, SymbolicTensor):
            node = item._node
            if node.graph is not self.graph:
                raise GraphError(f"{role} {node.name!r} is not an element of this session's graph"
                                 if node.graph.root is not self.graph else
                                 f"{role} {node.name!r} lives inside a cond/while subgraph; "
                                 f"fetch the outputs of the cond/while node instead")
            return node
        if isinstance(item, str):
            name = item[:-2] if item.endswith(":0") else item
            node = self.graph._names.get(name)
            if node is None or node.graph is not self.graph:
                raise GraphError(f"{role} {item!r}: no tensor of that name in this graph")
            return node
        if isinstance(item, Node):
            return item
        raise TypeError(f"{role} must be a graph tensor or its name, got {type(item).__name__}")

    def _fetch_structure(self, fetches):
        if isinstance(fetches, (SymbolicTensor, str, Node)):
            return self._node_of(fetches, "fetch")
        if isinstance(fetches, tuple):
            items = tuple(self._fetch_structure(f) for f in fetches)
            return type(fetches)(*items) if hasattr(fetches, "_fields") else items
        if isinstance(fetches, list):
            return [self._fetch_structure(f) for f in fetches]
        if isinstance(fetches, dict):
            return {k: self._fetch_structure(v) for k, v in fetches.items()}
        if fetches is None or isinstance(fetches, (bool, int, float, complex, torch.Tensor)):
            return fetches        # a value already known: fetched as is
        raise TypeError(f"cannot fetch a {type(fetches).__name__}")

    def run(self, fetches, feed_dict: Optional[Dict[Any, Any]] = None):
        """Values of ``fetches`` (a tensor, a name, or nested list/tuple/dict of them)."""
        if self._closed:
            raise GraphError("this Session is closed")
        structure = self._fetch_structure(fetches)
        feeds: Dict[int, torch.Tensor] = {}
        fed_nodes: Dict[int, Node] = {}
        for key, value in (feed_dict or {}).items():
            node = self._node_of(getattr(key, "_fed_as", key), "feed key")
            if node.op != "placeholder":
                raise FeedError(f"cannot feed {node.name!r}: it is a {node.op!r} node, "
                                f"not a placeholder")
            feeds[id(node)] = convert_feed(node, value)
            fed_nodes[id(node)] = node
        needed = _placeholders_needed(structure)
        missing = [n.name for n in needed if id(n) not in feeds]
        if missing:
            raise FeedError("you must feed a value for placeholder " +
                            ", ".join(repr(m) for m in missing))
        order = sorted(fed_nodes.values(), key=lambda n: n.name)
        key = ("session", _structure_key(structure), tuple(n.name for n in order))
        exe = self.graph._cache.get(key)
        if exe is None:
            exe = lower(self.graph, order, structure, name="session_run", keep_effects=False)
            exe.mutates = any(n.impure and n.target is not None and is_inplace(n.target, n.kwargs)
                              for n in self.graph.walk())
            self.graph._cache[key] = exe
        values = [feeds[id(n)] for n in order]
        if exe.mutates:     # feeds are the caller's: in-place ops must not change them
            values = [v.clone() for v in values]
        return exe(*values)


def _structure_key(structure):
    if isinstance(structure, Node):
        return ("n", id(structure))
    if isinstance(structure, (tuple, list)):
        return (type(structure).__name__,) + tuple(_structure_key(s) for s in structure)
    if isinstance(structure, dict):
        return ("d",) + tuple((k, _structure_key(v)) for k, v in structure.items())
    return structure


def _placeholders_needed(structure) -> List[Node]:
    from .graph import iter_nodes
    seen, found, stack = set(), [], list(iter_nodes(structure))
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if node.op == "placeholder":
            found.append(node)
        stack.extend(node.inputs)
    return sorted(found, key=lambda n: n.name)
