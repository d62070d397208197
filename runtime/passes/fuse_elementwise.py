"""Elementwise fusion: maximal groups of pointwise ops become one generated C kernel.

Rule: pure pointwise nodes (``kernels.pointwise`` knows their C form) of one float dtype
(bools ride along as 0/1) and one result shape, connected by dataflow, join one group,
as long as the group stays a single step of the graph (no path leaves the group and comes
back) and no impure node or control-flow node lies between its members (effects keep
their order). A group of two or more ops (or one op of ``ALONE``: a GELU, whose torch
kernel costs more than the generated one) becomes one ``fused`` node whose target is a
``FusedKernel``; values read outside the group are its outputs (``get`` nodes when there
are several). Each group's inputs broadcast to its shape (a bias row, a per-row scalar, a
0-d tensor, a Python number); the kernels of a whole graph, subgraphs included, are
compiled in one C translation unit (one compiler run) and cached on disk.

Reductions join too: ``sum``/``mean``/``amax``/``amin`` along the last dimension with
``keepdim=True`` (role ``reduce``, result per row: ``S[:-1] + (1,)``) or over the whole
tensor (``x.sum()``, ``torch.max(x)``: result ``()``), and ``any``/``all`` of a whole
non-empty bool tensor (the ``amax``/``amin`` of its 0/1 values, stored as a bool: a loop
test such as ``while (err > tol).any()`` becomes one kernel); pointwise ops on such
per-row values are ``row`` members. A group reduces one way only; its kernel is a row program
(``kernels/rows.py``).

The replaced nodes survive inside each kernel as a torch function (``torch_fn``), which
runs when there is no compiler, autograd needs the graph, or the tensors are not on the
CPU.
"""
from __future__ import annotations

import heapq
import math
from typing import Dict, List, Optional, Set, Tuple

import torch

from ..graph import Graph, Node, iter_nodes, map_nodes
from ..kernels.codegen import KernelSpec, Operand, Step, read_mode
from ..kernels.launch import FusedKernel
from ..kernels.pointwise import Expr, match
from ..meta import TensorMeta
from .gemm_epilogue import absorb_products
from .lazy_subgraph import LazySubgraph

_FLOATS = {torch.float32: "float32", torch.float64: "float64"}
_READABLE = {torch.float32: "float32", torch.float64: "float64", torch.bool: "bool",
             torch.int64: "int64", torch.int32: "int32", torch.int16: "int16",
             torch.int8: "int8", torch.uint8: "uint8"}
_BARRIERS = ("cond", "while")
# Ops worth a kernel of their own: torch's CPU GELU was measured ~1.5-1.8x slower than
# the generated kernel on transformer MLP activations (1x17x128 to 8x17x128, 1 thread).
ALONE = frozenset({"gelu"})
# ... up to this many elements for the exact (erf) GELU: past it torch's own is the faster
# (1 thread, CPU time: 16K elements 9.6 us against 9.2, 64x512 12.8 against 20.3, 1024x512
# 113 against 227, 2048x1024 902 against 929), until outputs are large enough that the
# kernel's recycled output (kernels/launch.LARGE_BYTES) saves torch's page faults (1024x3072
# 1367 against 1547: from ALONE_ERF_LARGE on); the tanh form's kernel was 3-4x faster than
# torch's at every size measured (2K to 3M elements)
ALONE_ERF_MAX = 16384
ALONE_ERF_LARGE = 1 << 21


class _Group:
    def __init__(self, gid: int, dtype: Optional[str], shape):
        self.id = gid
        self.dtype = dtype
        self.shape = shape
        self.members: List[Node] = []
        self.exprs: Dict[int, Expr] = {}
        self.member_ids: Set[int] = set()
        self.roles: Dict[int, str] = {}  # id(member) -> "vec", "row" or "reduce"
        self.row_kind: Optional[str] = None   # "last" or "all" once a member reduces
        self.deps: Set[int] = set()      # ids of groups this one reads (through anything)
        self.open = True


def fuse_elementwise(graph: Graph) -> Graph:
    """Fuse in place (the pass manager hands us its own copy); compile all kernels once."""
    kernels: List[FusedKernel] = []
    _fuse_graph(graph, kernels)
    absorb_products(graph, kernels)          # small matmuls become kernel prologues
    if kernels:
        from ..kernels.library import build_kernels
        build_kernels(kernels)
    return graph


def _fuse_graph(graph: Graph, kernels: List[FusedKernel]) -> None:
    for node in graph.nodes:
        for sub in node.subgraphs:
            _fuse_graph(sub, kernels)
    groups = [g for g in _find_groups(graph) if len(g.members) >= 2 or
              (len(g.members) == 1 and _alone(g.members[0]))]
    if not groups:
        return
    replacements: Dict[int, Node] = {}
    priority: Dict[int, int] = {}
    position = {id(n): i for i, n in enumerate(graph.nodes)}
    members: Set[int] = set()
    new_nodes: List[Node] = []
    for group in groups:
        fused, gets, kernel = _replace(graph, group, replacements, len(kernels), position)
        kernels.append(kernel)
        last = max(position[id(m)] for m in group.members)
        for n in [fused] + gets:
            priority[id(n)] = last
            new_nodes.append(n)
        members.update(id(m) for m in group.members)
    graph._cache.pop("fusion_readers", None)
    kept = [n for n in graph.nodes if id(n) not in members]
    _rewire(graph, kept + new_nodes, replacements)
    for n in kept:
        priority[id(n)] = position[id(n)]
    graph.nodes = _toposort(kept + new_nodes, priority)
    for m in (m for g in groups for m in g.members):
        graph._names.pop(m.name, None)


def _alone(node: Node) -> bool:
    """Whether ``node``, a group by itself, is worth a kernel (``ALONE``)."""
    if node.op not in ALONE:
        return False
    approximate = node.kwargs.get("approximate", node.args[1] if len(node.args) > 1
                                  else "none")
    meta = node.meta
    if approximate == "tanh":
        return True
    n = math.prod(meta.shape) if isinstance(meta, TensorMeta) and meta.is_static else None
    return n is not None and (n <= ALONE_ERF_MAX or n >= ALONE_ERF_LARGE)


# ----------------------------------------------------------------------------- grouping
def _node_dtype(node: Node, expr: Expr) -> Optional[str]:
    """The float type a node computes in (None: a bool op of bools, fits any group).

    A comparison computes in torch's result type: dimensioned tensors decide over 0-d
    tensors (a float64 0-d tensor compared with float32 values compares in float32)."""
    if node.meta.dtype in _FLOATS:
        return _FLOATS[node.meta.dtype]
    tensors = [a.meta for a in expr.operands if isinstance(a, Node)]
    for dimensioned in (True, False):
        floats = {_FLOATS[m.dtype] for m in tensors if m.dtype in _FLOATS and
                  (m.shape != ()) == dimensioned}
        if floats:
            return "float64" if "float64" in floats else "float32"
    return None


_REDUCTIONS = ("sum", "mean", "amax", "amin", "max", "min", "any", "all")
# any/all of a whole bool tensor: the amax/amin of its 0/1 values, stored as a bool
_BOOL_REDUCTIONS = {"any": "amax", "all": "amin"}


def _reduction(node: Node) -> Optional[Expr]:
    """``x.sum(-1, keepdim=True)`` (and mean, amax, amin) of a float, static-shaped ``x``
    (kind ``last``), or the whole of ``x``: ``x.sum()``, ``torch.max(x)`` (kind ``all``)."""
    args, kwargs = node.args, node.kwargs
    if not args or len(args) > 3 or set(kwargs) - {"dim", "keepdim"}:
        return None
    x = args[0]
    if node.op in _BOOL_REDUCTIONS:     # (a non-empty tensor: amax of nothing is -inf)
        if len(args) != 1 or kwargs or not isinstance(x, Node) or \
                not isinstance(x.meta, TensorMeta) or x.meta.dtype != torch.bool or \
                node.meta.dtype != torch.bool or not x.meta.is_static or \
                not x.meta.shape or not all(x.meta.shape):
            return None
        return Expr("", (x,), f"reduce:{_BOOL_REDUCTIONS[node.op]}:all")
    if not isinstance(x, Node) or not isinstance(x.meta, TensorMeta) or \
            x.meta.dtype not in _FLOATS or not x.meta.is_static or not x.meta.shape or \
            node.meta.dtype != x.meta.dtype:
        return None
    name = {"max": "amax", "min": "amin"}.get(node.op, node.op)
    if len(args) == 1 and "dim" not in kwargs and not kwargs.get("keepdim"):
        return Expr("", (x,), f"reduce:{name}:all")
    if node.op in ("max", "min") or x.meta.shape[-1] == 1:
        return None              # max(x, dim) returns (values, indices)
    dim = args[1] if len(args) > 1 else kwargs.get("dim")
    keepdim = args[2] if len(args) > 2 else kwargs.get("keepdim", False)
    if isinstance(dim, (tuple, list)) and len(dim) == 1:
        dim = dim[0]
    rank = len(x.meta.shape)
    if keepdim is not True or not isinstance(dim, int) or dim not in (-1, rank - 1):
        return None
    return Expr("", (x,), f"reduce:{name}:last")


def _row_shape(shape, kind: str) -> tuple:
    """The shape of a per-row value: ``S[:-1] + (1,)`` for ``last``, ``()`` for ``all``."""
    return () if kind == "all" else tuple(shape[:-1]) + (1,)


def _fusable(node: Node, operands: Optional[List[Node]] = None) -> Optional[Expr]:
    """``operands``: ``node.inputs`` when the caller has it."""
    meta = node.meta
    if node.op in _REDUCTIONS and isinstance(meta, TensorMeta) and not node.impure:
        return _reduction(node)
    if node.impure or node.subgraphs or not isinstance(meta, TensorMeta):
        return None
    if meta.dtype not in _FLOATS and meta.dtype != torch.bool:
        return None
    if operands is None:
        operands = node.inputs
    if any(not isinstance(a.meta, TensorMeta) or a.meta.dtype not in _READABLE
           for a in operands):
        return None
    all_bool = bool(operands) and all(a.meta.dtype == torch.bool for a in operands)
    expr = match(node.op, node.args, node.kwargs, bool_operands=all_bool)
    if expr is None:
        return None
    if {id(a) for a in operands} != {id(a) for a in expr.operands if isinstance(a, Node)}:
        return None          # a tensor the table does not read (it would be lost)
    for value in expr.operands:
        if not isinstance(value, (Node, bool, int, float)):
            return None
    if meta.dtype == torch.bool and operands and not all_bool and \
            not any(a.meta.dtype in _FLOATS for a in operands):
        return None          # integer comparisons stay exact in torch
    return expr


def _role(group: "_Group", space, expr: Expr) -> Tuple[str, Optional[str]]:
    """How a node would sit in ``group`` and the way the group then reduces:
    (``vec`` over the group's shape, ``row`` a per-row value, ``reduce``, or '' if it
    cannot join; ``last``/``all`` or None). A group reduces one way only."""
    shape = group.shape
    if expr.kind.startswith("reduce:"):
        kind = expr.kind.rsplit(":", 1)[1]
        ok = space == shape and group.row_kind in (None, kind)
        return ("reduce", kind) if ok else ("", None)
    if space == shape:
        return "vec", group.row_kind
    static = shape is not None and shape and all(d is not None for d in shape)
    for kind in (("last", "all") if group.row_kind is None else (group.row_kind,)):
        if static and space == _row_shape(shape, kind) and space != tuple(shape):
            return "row", kind
    return "", None


class _Grouping:
    """Greedy grouping in program order. A node joins (and may merge) the groups of its
    fusable inputs when the merged group would read nothing that depends on itself: no
    path may leave the group and come back, or the fused node could not be placed."""

    def __init__(self):
        self.groups: List[_Group] = []
        self.parent: Dict[int, int] = {}
        self.group_of: Dict[int, int] = {}    # id(node) -> group id (resolve with find)
        self.anc: Dict[int, Set[int]] = {}     # id(node) -> group ids it depends on
        self.inputs: Dict[int, List[Node]] = {}  # id(node) -> its inputs (computed once)
        self.merges = 0                        # groups merged so far (find() results change)
        self._reads: Dict[int, tuple] = {}     # id(node) -> (merges, reads(node))

    def find(self, gid: int) -> int:
        while self.parent[gid] != gid:
            self.parent[gid] = self.parent[self.parent[gid]]
            gid = self.parent[gid]
        return gid

    def group(self, node: Node) -> Optional[_Group]:
        gid = self.group_of.get(id(node))
        return None if gid is None else self.groups[self.find(gid)]

    def reads(self, value: Node) -> Set[int]:
        """Groups ``value`` depends on, itself included when it is a group member (a set
        shared between calls while no groups merge: do not change it)."""
        known = self._reads.get(id(value))
        if known is not None and known[0] == self.merges:
            return known[1]
        find = self.find
        out = {find(g) for g in self.anc.get(id(value), ())}
        g = self.group_of.get(id(value))
        if g is not None:
            out.add(find(g))
        if g is not None or id(value) in self.anc:    # known node: its answer is final
            self._reads[id(value)] = (self.merges, out)
        return out

    def closure(self, gids: Set[int]) -> Set[int]:
        seen: Set[int] = set()
        stack = list(gids)
        while stack:
            g = self.find(stack.pop())
            if g in seen:
                continue
            seen.add(g)
            stack.extend(self.groups[g].deps)
        return seen

    def can_form(self, parts: List[_Group], node: Node) -> bool:
        ids = {g.id for g in parts}
        # one group: its members' other inputs were checked when they joined (and cannot
        # depend on anything that came later); merging groups rechecks every member
        members = [node] if len(parts) == 1 else [m for g in parts for m in g.members] + [node]
        member_ids = parts[0].member_ids if len(parts) == 1 else \
            {id(m) for g in parts for m in g.members}
        checked: Set[int] = set()
        for m in members:
            for v in self.inputs[id(m)]:
                if id(v) in member_ids or id(v) in checked or v is node:
                    continue
                checked.add(id(v))
                if self.closure(self.reads(v)) & ids:
                    return False
        return True

    def add(self, node: Node, expr: Optional[Expr], inputs: List[Node]) -> None:
        self.inputs[id(node)] = inputs
        anc: Set[int] = set()
        for v in inputs:
            anc |= self.reads(v)
        self.anc[id(node)] = anc
        if expr is None:
            return
        dtype = _node_dtype(node, expr)
        reduces = expr.kind.startswith("reduce:")
        space = expr.operands[0].meta.shape if reduces else node.meta.shape
        candidates: List[_Group] = []
        for v in inputs:
            g = self.group(v)
            if g is not None and g.open and _role(g, space, expr)[0] and \
                    all(g is not c for c in candidates):
                candidates.append(g)
        chosen_parts: List[_Group] = []
        for parts in [candidates] + [[c] for c in candidates]:
            floats = {p.dtype for p in parts if p.dtype} | ({dtype} if dtype else set())
            kinds = {p.row_kind for p in parts if p.row_kind}
            if parts and len(floats) <= 1 and len({p.shape for p in parts}) == 1 and \
                    len(kinds) <= 1 and self.can_form(parts, node):
                chosen_parts = parts
                break
        if chosen_parts:
            chosen = chosen_parts[0]
            for other in chosen_parts[1:]:
                self.parent[other.id] = chosen.id
                self.merges += 1
                chosen.members.extend(other.members)
                chosen.member_ids |= other.member_ids
                chosen.exprs.update(other.exprs)
                chosen.roles.update(other.roles)
                chosen.row_kind = chosen.row_kind or other.row_kind
                chosen.deps |= other.deps
                chosen.dtype = chosen.dtype or other.dtype
        else:
            chosen = _Group(len(self.groups), None, space)
            self.groups.append(chosen)
            self.parent[chosen.id] = chosen.id
        chosen.dtype = chosen.dtype or dtype
        role, chosen.row_kind = _role(chosen, space, expr)
        chosen.roles[id(node)] = role
        chosen.members.append(node)
        chosen.member_ids.add(id(node))
        chosen.exprs[id(node)] = expr
        self.group_of[id(node)] = chosen.id
        for v in inputs:
            if self.group(v) is not chosen:
                chosen.deps |= self.reads(v)
        chosen.deps = {self.find(d) for d in chosen.deps} - {chosen.id}

    def close_all(self) -> None:
        for g in self.groups:
            g.open = False


def _find_groups(graph: Graph) -> List[_Group]:
    grouping = _Grouping()
    for node in graph.nodes:
        if node.op in _BARRIERS or node.impure:
            grouping.close_all()
        inputs = node.inputs
        grouping.add(node, _fusable(node, inputs), inputs)
    result = []
    for g in grouping.groups:
        if grouping.find(g.id) == g.id:
            g.dtype = g.dtype or "float32"
            result.append(g)
    return result


# ----------------------------------------------------------------------------- rewriting
def _replace(graph: Graph, group: _Group, replacements: Dict[int, Node], index: int,
             order: Optional[Dict[int, int]] = None):
    """The fused node (and ``get`` nodes) standing for ``group``; fills ``replacements``.
    ``order``: id(node) -> position in ``graph.nodes``."""
    if order is None:
        order = {id(n): i for i, n in enumerate(graph.nodes)}
    group.members.sort(key=lambda n: order[id(n)])
    member_ids = {id(m) for m in group.members}
    inputs: List[Node] = []
    input_index: Dict[int, int] = {}
    steps: List[Step] = []
    value_index: Dict[int, int] = {}
    for m in group.members:
        operands = []
        for value in group.exprs[id(m)].operands:
            if isinstance(value, Node) and id(value) in member_ids:
                operands.append(Operand("v", value_index[id(value)]))
            elif isinstance(value, Node):
                if id(value) not in input_index:
                    input_index[id(value)] = len(inputs)
                    inputs.append(value)
                operands.append(Operand("in", input_index[id(value)]))
            else:
                operands.append(Operand("c", value))
        value_index[id(m)] = len(steps)
        role = group.roles[id(m)]
        expr = group.exprs[id(m)]
        steps.append(Step(expr.template, tuple(operands),
                          reduce=expr.kind.split(":")[1] if role == "reduce" else "",
                          row=role == "row"))
    outputs = _outputs(graph, group, member_ids)
    shape = group.shape
    static = shape is not None and all(d is not None for d in shape)
    rows = any(role != "vec" for role in group.roles.values())
    if rows:
        split = 0 if group.row_kind == "all" else len(shape) - 1
        modes = [(read_mode(tuple(v.meta.shape), shape, split) if v.meta.is_static else None)
                 or "expand" for v in inputs]
    elif static:
        split, modes = _layout(shape, [v.meta.shape for v in inputs])
    else:
        split, modes = 0, [_dynamic_mode(v.meta.shape) for v in inputs]
    # an input read as is must have the static shape it was planned for; others
    # (mode "expand") are broadcast to the result and copied when the kernel runs
    in_shapes = [tuple(v.meta.shape) if m != "expand" and v.meta.is_static else None
                 for v, m in zip(inputs, modes)]
    modes = ["full" if m == "expand" else m for m in modes]
    spec = KernelSpec(
        dtype=group.dtype,
        inputs=tuple((_READABLE[v.meta.dtype], mode) for v, mode in zip(inputs, modes)),
        steps=tuple(steps),
        outputs=tuple((value_index[id(o)], _READABLE[o.meta.dtype]) for o in outputs))
    kernel = FusedKernel(spec, f"tg_kernel_{index}", LazySubgraph(group.members, inputs, outputs, "fused_torch"),
                         in_shapes, tuple(shape) if static else None, split,
                         [m.op for m in group.members],
                         _row_shape(shape, group.row_kind) if rows else None)
    meta = outputs[0].meta if len(outputs) == 1 else tuple(o.meta for o in outputs)
    fused = Node(graph, "fused", kernel, tuple(inputs), {}, meta,
                 graph.fresh_name("fused"), {"ops": kernel.ops},
                 location=group.members[-1].location)
    graph._names[fused.name] = fused
    gets = []
    if len(outputs) == 1:
        replacements[id(outputs[0])] = fused
    else:
        for k, o in enumerate(outputs):
            get = Node(graph, "get", None, (fused,), {}, o.meta, graph.fresh_name("get"),
                       {"index": k}, location=o.location)
            graph._names[get.name] = get
            gets.append(get)
            replacements[id(o)] = get
    return fused, gets, kernel


def _outputs(graph: Graph, group: _Group, member_ids: Set[int]) -> List[Node]:
    """Members read outside the group (by another node or as graph outputs)."""
    readers = graph._cache.get("fusion_readers")
    if readers is None:          # who reads each value, once per graph (not per group)
        readers = {id(n): [] for n in graph.nodes}
        for node in graph.nodes:
            for value in node.inputs:
                readers.setdefault(id(value), []).append(id(node))
        for value in iter_nodes(graph.outputs):
            readers.setdefault(id(value), []).append(None)
        graph._cache["fusion_readers"] = readers
    return [m for m in group.members
            if any(r is None or r not in member_ids for r in readers.get(id(m), ()))]


def _layout(shape, in_shapes):
    """(split, modes): how each input is read over ``shape`` split as outer x inner."""
    rank = len(shape)
    best = None
    for split in range(rank + 1):
        modes = [read_mode(tuple(s), shape, split) if s is not None and None not in s else None
                 for s in in_shapes]
        if None in modes:
            continue
        flat = all(m in ("full", "scalar") for m in modes)
        score = (flat, split == 0)
        if best is None or score > best[0]:
            best = (score, split, modes)
    if best is None:     # some input broadcasts oddly: it is expanded and copied when run
        return 0, [(read_mode(tuple(s), shape, 0) if s is not None and None not in s else None)
                   or "expand" for s in in_shapes]
    return best[1], best[2]


def _dynamic_mode(s) -> str:
    return "scalar" if s is not None and all(d == 1 for d in s) else "expand"


def _rewire(graph: Graph, nodes: List[Node], replacements: Dict[int, Node]) -> None:
    def swap(n: Node) -> Node:
        return replacements.get(id(n), n)
    for node in nodes:
        node.args = map_nodes(node.args, swap)
        node.kwargs = map_nodes(node.kwargs, swap)
        for sub in node.subgraphs:
            sub.captures = [(swap(o), i) for o, i in sub.captures]
            sub._capture_map = {id(o): i for o, i in sub.captures}
    graph.outputs = map_nodes(graph.outputs, swap)


def _toposort(nodes: List[Node], priority: Dict[int, int]) -> List[Node]:
    """Dependencies first; otherwise the original order (fused nodes at their last member)."""
    ids = {id(n) for n in nodes}
    waiting: Dict[int, int] = {}
    users: Dict[int, List[Node]] = {}
    heap = []
    for i, n in enumerate(nodes):
        deps = {id(v) for v in n.inputs if id(v) in ids}
        waiting[id(n)] = len(deps)
        for d in deps:
            users.setdefault(d, []).append(n)
        if not deps:
            heapq.heappush(heap, (priority[id(n)], i, n))
    index = {id(n): i for i, n in enumerate(nodes)}
    out = []
    while heap:
        _, _, n = heapq.heappop(heap)
        out.append(n)
        for u in users.get(id(n), ()):
            waiting[id(u)] -= 1
            if waiting[id(u)] == 0:
                heapq.heappush(heap, (priority[id(u)], index[id(u)], u))
    if len(out) != len(nodes):
        raise AssertionError("elementwise fusion made a cycle")
    return out
