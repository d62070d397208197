"""The graph IR: one ``Node`` class and one ``Graph`` class.

A node is one operation and the value it produces. Its ``args``/``kwargs`` are nested
Python structures in which other nodes appear as leaves (constants stay inline), exactly
as the operation will be called. Multi-output operations (``cond``, ``while``, ``max``
with ``dim``...) produce a tuple, read back by ``getitem`` nodes.

``cond`` and ``while`` nodes own child graphs (``node.subgraphs``). A child graph's
inputs are its explicit operands followed by the values it *captures* from enclosing
graphs (closure variables of a branch or loop body); the owning node lists the outer
values in the same order as its inputs.
"""
from __future__ import annotations

import contextlib
import itertools
import re
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from .source_info import Location
from .threads import TRACE_LOCK, PerThreadList

_IDENT = re.compile(r"[^0-9a-zA-Z_]")
_NODES_ADDED = PerThreadList([0])      # per thread: see runtime.threads
_BASES: Dict[str, str] = {}      # name base -> its identifier form (fresh_name)


def node_count() -> int:
    """How many nodes were ever added to any graph (to tell whether code recorded any)."""
    return _NODES_ADDED[0]


def same_tuple(like: tuple, items) -> tuple:
    """A tuple of the same kind as ``like`` (namedtuples and tuple subclasses kept)."""
    if type(like) is tuple:
        return tuple(items)
    remake = getattr(like, "_tograph_with_parts", None)    # runtime.outputs.Rebuild
    if remake is not None:
        return remake(items)
    if not hasattr(like, "_fields"):
        return type(like)(items)
    try:
        return type(like)(*items)
    except (AttributeError, TypeError):     # a namedtuple whose __new__ reads its parts'
        return tuple.__new__(type(like), items)     # (PackedSequence's .device), given nodes


def map_structure(value: Any, is_leaf: Callable[[Any], bool], fn: Callable[[Any], Any]) -> Any:
    """Rebuild nested tuples (kinds kept), lists, dicts and slices with ``fn`` applied to
    each part for which ``is_leaf`` holds; other values stay as they are."""
    def walk(v):
        if is_leaf(v):
            return fn(v)
        if isinstance(v, tuple):
            return same_tuple(v, [walk(x) for x in v])
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, slice):
            return slice(walk(v.start), walk(v.stop), walk(v.step))
        return v
    return walk(value)


def find_leaves(value, wanted: Callable[[Any], bool], slices: bool = True) -> list:
    """The parts of ``value`` (through lists, tuples, dicts and, if ``slices``, slice
    bounds) for which ``wanted`` holds, in order."""
    found: list = []

    def visit(v):
        if wanted(v):
            found.append(v)
        elif isinstance(v, (list, tuple)):
            for x in v:
                visit(x)
        elif isinstance(v, dict):
            for x in v.values():
                visit(x)
        elif slices and isinstance(v, slice):
            visit(v.start), visit(v.stop), visit(v.step)
    visit(value)
    return found



_CONTAINERS = (tuple, list, dict, slice)


def _is_node(v) -> bool:
    return isinstance(v, Node)


def map_nodes(value: Any, fn: Callable[["Node"], Any]) -> Any:
    """Rebuild a nested tuple/list/dict/slice structure with ``fn`` applied to its nodes."""
    kind = type(value)
    if kind is tuple or kind is list:       # flat arguments: the usual case
        for x in value:
            if isinstance(x, _CONTAINERS):
                break
        else:
            out = [fn(x) if isinstance(x, Node) else x for x in value]
            return tuple(out) if kind is tuple else out
    elif kind is dict:
        for x in value.values():
            if isinstance(x, _CONTAINERS):
                break
        else:
            return {k: fn(x) if isinstance(x, Node) else x for k, x in value.items()}
    elif isinstance(value, Node):
        return fn(value)
    return map_structure(value, _is_node, fn)


def _collect(value: Any, found: List["Node"]) -> None:
    if isinstance(value, Node):
        found.append(value)
    elif isinstance(value, (tuple, list)):
        for x in value:
            if isinstance(x, Node):
                found.append(x)
            elif isinstance(x, _CONTAINERS):
                _collect(x, found)
    elif isinstance(value, dict):
        for x in value.values():
            _collect(x, found)
    elif isinstance(value, slice):
        _collect(value.start, found)
        _collect(value.stop, found)
        _collect(value.step, found)


def iter_nodes(value: Any) -> Iterator["Node"]:
    """The nodes inside a nested structure, in order."""
    found: List[Node] = []
    _collect(value, found)
    return iter(found)


class Node:
    """One operation in a graph and the value it produces.

    op        short readable name of the operation (``"matmul"``, ``"cond"``, ``"placeholder"``)
    target    the callable that runs it (torch function or tensor method), or None for
              the built-in ops interpreted by the executor (placeholder, constant, getitem,
              cond, while, print, assert)
    args/kwargs  how ``target`` is called; nodes appear as leaves
    attrs     op-specific facts (a constant's value, a placeholder's declared shape...)
    meta      TensorMeta of the value, a tuple of them for multi-output ops, None for no value
    subgraphs child graphs: ``[then, else]`` for cond, ``[cond, body]`` for while
    location  (file, line) of the user code that created it, or None
    """

    __slots__ = ("op", "target", "args", "kwargs", "attrs", "meta", "name", "graph",
                 "subgraphs", "location", "impure")

    def __init__(self, graph: "Graph", op: str, target: Optional[Callable], args: tuple,
                 kwargs: dict, meta: Any, name: str, attrs: Optional[dict] = None,
                 subgraphs: Optional[List["Graph"]] = None,
                 location: Optional[Location] = None, impure: bool = False):
        self.graph = graph
        self.op = op
        self.target = target
        self.args = args
        self.kwargs = kwargs
        self.attrs = attrs or {}
        self.meta = meta
        self.name = name
        self.subgraphs = subgraphs or []
        self.location = location
        self.impure = impure

    @property
    def inputs(self) -> List["Node"]:
        """The nodes this node reads, in argument order."""
        found: List[Node] = []
        for value in (*self.args, *self.kwargs.values()):   # flat arguments: the usual case
            if isinstance(value, Node):
                found.append(value)
            elif isinstance(value, (tuple, list, dict, slice)):
                return list(iter_nodes((self.args, self.kwargs)))
        return found

    def __repr__(self) -> str:
        return f"%{self.name}"


class Graph:
    """A static dataflow graph: placeholders, nodes in topological order, outputs.

    ``Graph()`` also serves as the TF1-style default graph: ``with Graph().as_default():``.
    """

    def __init__(self, parent: Optional["Graph"] = None, name: str = "graph"):
        self.parent = parent
        self.name = name
        self.nodes: List[Node] = []
        self.outputs: Any = ()
        self.captures: List[Tuple[Node, Node]] = []   # (outer value, inner placeholder)
        self._capture_map: Dict[int, Node] = {}
        self._constants: Dict[int, Tuple[Any, Node]] = {}
        self._names: Dict[str, Node] = {} if parent is None else parent._names
        self._counters: Dict[str, itertools.count] = {} if parent is None else parent._counters
        self._cache: Dict[Any, Any] = {}               # compiled executables, keyed by caller

    # ---------------------------------------------------------------- structure
    @property
    def root(self) -> "Graph":
        g = self
        while g.parent is not None:
            g = g.parent
        return g

    @property
    def inputs(self) -> List[Node]:
        """Placeholder nodes, in order: explicit inputs first, then captured values."""
        return [n for n in self.nodes if n.op == "placeholder"]

    def ancestors(self) -> Iterator["Graph"]:
        g: Optional[Graph] = self
        while g is not None:
            yield g
            g = g.parent

    def walk(self) -> Iterator[Node]:
        """Every node of this graph and of its child graphs, depth first."""
        for node in self.nodes:
            yield node
            for sub in node.subgraphs:
                yield from sub.walk()

    def tensor(self, name: str):
        """The symbolic tensor called ``name`` (TF's ``get_tensor_by_name``)."""
        from .symbolic import wrap_node
        key = name[:-2] if name.endswith(":0") else name
        node = self._names.get(key)
        if node is None:
            raise KeyError(f"no tensor named {name!r} in this graph")
        return wrap_node(node)

    def node(self, name: str) -> Node:
        return self._names[name]

    # ---------------------------------------------------------------- building
    def fresh_name(self, base: str) -> str:
        clean = _BASES.get(base)
        if clean is None:
            clean = _IDENT.sub("_", base) or "v"
            if clean[0].isdigit():
                clean = "v" + clean
            if len(_BASES) < 10_000:
                _BASES[base] = clean
        base = clean
        counter = self._counters.setdefault(base, itertools.count(1))
        while True:
            name = f"{base}_{next(counter)}"
            if name not in self._names:
                return name

    def unique_name(self, wanted: str) -> str:
        """A user-given name if free (``input_a``), else the name with a numeric suffix."""
        return wanted if wanted not in self._names else self.fresh_name(wanted)

    def add_node(self, op: str, target=None, args=(), kwargs=None, meta=None, *,
                 name: Optional[str] = None, attrs=None, subgraphs=None, location=None,
                 impure=False, index: Optional[int] = None) -> Node:
        args = tuple(args)
        kwargs = dict(kwargs) if kwargs else {}
        for value in (*args, *kwargs.values()):
            if isinstance(value, Node):
                if value.graph is not self:
                    raise AssertionError(f"{value} belongs to another graph; capture it first")
            elif isinstance(value, _CONTAINERS):       # nested arguments: check them all
                for inner in iter_nodes((args, kwargs)):
                    if inner.graph is not self:
                        raise AssertionError(
                            f"{inner} belongs to another graph; capture it first")
                break
            elif getattr(type(value), "__tograph_trace_only__", False):
                value._refuse()          # a path_values.PathValue: no constant of a graph
        name = self.unique_name(name) if name else self.fresh_name(op)
        node = Node(self, op, target, args, kwargs, meta, name, attrs,
                    subgraphs, location, impure)
        self._names[name] = node
        _NODES_ADDED[0] += 1
        if index is None:
            self.nodes.append(node)
        else:
            self.nodes.insert(index, node)
        return node

    def placeholder(self, meta, name: str = "input", attrs=None, location=None) -> Node:
        index = len(self.inputs)
        return self.add_node("placeholder", meta=meta, name=name, attrs=attrs,
                             location=location, index=index)

    def constant(self, value, name: Optional[str] = None, location=None) -> Node:
        """A node holding ``value`` (a tensor kept by reference: parameters stay live)."""
        from .meta import TensorMeta
        key = id(value)
        if name is None and key in self._constants:
            return self._constants[key][1]
        node = self.add_node("constant", meta=TensorMeta.of(value), name=name or "const",
                             attrs={"value": value}, location=location)
        if name is None:
            self._constants[key] = (value, node)
        return node

    def capture(self, node: Node) -> Node:
        """The value of ``node`` (from this graph or an enclosing one) as seen in this graph."""
        if node.graph is self:
            return node
        if self.parent is None:
            raise AssertionError(f"{node} is not from this graph or an enclosing one")
        outer = self.parent.capture(node)
        inner = self._capture_map.get(id(outer))
        if inner is None:
            inner = self.placeholder(node.meta, name=node.name, attrs={"captured": True})
            self.captures.append((outer, inner))
            self._capture_map[id(outer)] = inner
        return inner

    def mark(self) -> int:
        """A point to roll back to: the number of non-placeholder nodes so far."""
        return sum(1 for n in self.nodes if n.op != "placeholder")

    def rollback(self, mark: int) -> None:
        """Forget the non-placeholder nodes added after ``mark`` (an abandoned attempt)."""
        kept, dropped, seen = [], [], 0
        for node in self.nodes:
            if node.op == "placeholder" or seen < mark:
                kept.append(node)
                seen += node.op != "placeholder"
            else:
                dropped.append(node)
        for node in dropped:
            self.forget(node)
        gone = {id(n) for n in dropped}
        self._constants = {k: v for k, v in self._constants.items() if id(v[1]) not in gone}
        self.nodes = kept

    def forget(self, node: Node) -> None:
        """Release the names of ``node`` and of everything in its subgraphs."""
        self._names.pop(node.name, None)
        for sub in node.subgraphs:
            sub.forget_all()

    def forget_all(self) -> None:
        """Release the names of every node of this (abandoned) graph."""
        for node in self.nodes:
            self.forget(node)

    # ---------------------------------------------------------------- default graph
    @contextlib.contextmanager
    def as_default(self):
        """Make this the graph that ``placeholder``/``constant`` and ops on them record into."""
        from . import session
        session._DEFAULT_STACK.append(self)
        try:
            yield self
        finally:
            session._DEFAULT_STACK.pop()

    # ---------------------------------------------------------------- use
    def optimize(self) -> "Graph":
        """The optimized graph that calls execute (passes come with the optimizer); one
        thread at a time (``runtime.threads.TRACE_LOCK``)."""
        from .passes import optimize
        with TRACE_LOCK:
            return optimize(self)

    def executor_source(self) -> str:
        """The generated Python that runs this graph (an optimized graph: what executes)."""
        from .executor import compile_graph
        return compile_graph(self).source

    def kernel_source(self) -> str:
        """The C of the fused kernels of this (optimized) graph, '' when it has none."""
        sources = []
        for node in self.walk():
            source = getattr(node.target, "source", None) if node.op == "fused" else None
            if source and source not in sources:
                sources.append(source)
        return "\n".join(sources)

    def __call__(self, *inputs):
        """Run the graph on values for its explicit inputs; returns its outputs."""
        from .executor import compile_graph
        return compile_graph(self)(*inputs)

    def save(self, path) -> None:
        from .serialize import save
        save(self, path)

    def to_dot(self) -> str:
        """The Graphviz DOT text of this graph (``runtime.dot`` says what it shows)."""
        from .dot import to_dot
        return to_dot(self)

    def render(self, path, format=None) -> str:
        """Draw this graph into ``path`` (.svg, .png, .pdf, .dot) with Graphviz."""
        from .dot import render
        return render(self, path, format)

    def to_tensorboard(self, logdir) -> str:
        """Write this graph to an event file in ``logdir`` for TensorBoard; its path."""
        from .tensorboard import to_tensorboard
        return to_tensorboard(self, logdir)

    def __str__(self) -> str:
        from .printer import format_graph
        return format_graph(self)

    def __repr__(self) -> str:
        return f"<Graph {self.name}: {len(self.nodes)} nodes>"
