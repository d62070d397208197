"""Pattern fusion: small subgraphs that one torch kernel computes, one rule per line.

Rule: a node matching a pattern of the table becomes one fused node (its op named after
the kernel, its meta and user location those of the node it replaces). A pattern fires
only when each intermediate it swallows has the node as its only reader (and is no
output), in the same grad-mode region; when the dtypes agree and the fused result has
the node's meta; and when no value it reads may be mutated in place between the first
node it swallows and the node (the fused node reads its inputs later than the
intermediates did; a training step's ``opt.step()`` after the forward does not stop
``matmul(x, w) + b -> addmm``). Fused kernels have their own gradients.

Not fused: ``exp(x) / exp(x).sum(d, keepdim=True) -> softmax(x, d)`` (softmax subtracts the
maximum first, so for large ``x`` it returns numbers where the pattern returns NaN).
"""
from __future__ import annotations

from typing import Callable, List, NamedTuple, Optional, Tuple

import torch
import torch.nn.functional as F

from ..graph import Graph, Node, iter_nodes
from ..graph_ops import register
from ..meta import TensorMeta
from .rewrite import (Facts, Uses, facts_for, grad_regions, has_effect, replace_with_new,
                      rule_sites, rules_by_op)


@register
def conv2d_relu(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """``relu(conv2d(...))``, the relu done in place on the convolution's fresh result."""
    return torch.relu_(torch.conv2d(x, weight, bias, stride, padding, dilation, groups))


class Fused(NamedTuple):
    """The fused node: ``op`` = ``target(*args)``."""
    op: str
    target: Callable
    args: tuple


class Reshaped(NamedTuple):
    """An argument of a fused node: ``value.reshape(shape)`` (a node made if it fires)."""
    value: Node
    shape: tuple


class _Ctx:
    """What the matchers may ask about one graph."""

    def __init__(self, graph: Graph, facts: Facts):
        self.graph = graph
        self.facts = facts
        self.uses = Uses(graph)
        self.regions = grad_regions(graph) if facts.grad_switch else None

    def replace(self, node: Node, fused: Fused) -> Node:
        """Swap ``node`` for the fused node (making the reshapes it reads first)."""
        def make(value):
            if not isinstance(value, Reshaped):
                return value
            meta = TensorMeta(value.shape, value.value.meta.dtype)
            return self.uses.insert_before(node, "reshape", torch.Tensor.reshape,
                                           (value.value, value.shape), meta=meta)
        args = tuple(make(a) for a in fused.args)
        new = replace_with_new(self.uses, node, fused.op, fused.target, args)
        self.facts.union(new, node)
        if self.regions is not None:
            self.regions[id(new)] = self.regions[id(node)]
        return new

    def only_for(self, mid, node: Node) -> bool:
        """``mid`` is a pure node read by ``node`` alone, in the same grad region."""
        if not isinstance(mid, Node) or has_effect(mid) or not self.uses.only_reader(mid, node):
            return False
        return self.regions is None or self.regions.get(id(mid)) == self.regions.get(id(node))


# --------------------------------------------------------------------------- matchers
def _meta(value) -> Optional[TensorMeta]:
    return value.meta if isinstance(value, Node) and isinstance(value.meta, TensorMeta) else None


def _rank(value) -> Optional[int]:
    meta = _meta(value)
    return None if meta is None or meta.shape is None else len(meta.shape)


def _same_dtype(*values) -> bool:
    metas = [_meta(v) for v in values]
    return all(m is not None for m in metas) and len({m.dtype for m in metas}) == 1


# A fused op (addmm, linear with its bias, addcmul, silu, mish, rsqrt, conv with its bias)
# rounds once where eager rounds each op's result to its dtype: in float32/float64 that is the
# 1e-5 contract's noise, in bfloat16/float16 a whole ulp of those types (0.25 near 100), which
# iterative code amplifies (Muon's Newton-Schulz steps ended 45% off eager). Only these dtypes
# fuse; a rule that rounds exactly as eager does in any dtype is marked ``exact`` in the table.
_ROUNDS_ONCE = (torch.float32, torch.float64)


def _wide(node: Node) -> bool:
    meta = _meta(node)
    return meta is not None and meta.dtype in _ROUNDS_ONCE


def _plain(node: Node, n_args: int) -> bool:
    return len(node.args) == n_args and all(k == "inplace" and v is False
                                            for k, v in node.kwargs.items())


def _is(value, *ops: str) -> bool:
    return isinstance(value, Node) and value.op in ops


def _sum_of(node: Node, ops) -> List[Tuple[Node, object]]:
    """``(inner, other)`` for ``add(inner, other)`` / ``add(other, inner)``, inner in ``ops``."""
    if node.op != "add" or not _plain(node, 2):
        return []
    a, b = node.args
    return [(i, o) for i, o in ((a, b), (b, a)) if _is(i, *ops)]


def _transposed(value) -> Optional[Node]:
    """The 2-D ``w`` of ``w.t()``, ``w.T``, ``w.transpose(0, 1)``."""
    if not isinstance(value, Node) or not value.args or _rank(value.args[0]) != 2:
        return None
    if value.op in ("t", "T") and _plain(value, 1):
        return value.args[0]
    if value.op == "transpose" and _plain(value, 3) and set(value.args[1:]) in ({0, 1}, {-1, -2}):
        return value.args[0]
    return None


def _linear(node: Node, ctx: _Ctx) -> Optional[Fused]:
    """``matmul(x, w.t()) + b -> linear(x, w, b)``"""
    for mm, b in _sum_of(node, ("matmul",)):
        if not _plain(mm, 2) or not ctx.only_for(mm, node):
            continue
        x, w = mm.args[0], _transposed(mm.args[1])
        if w is not None and _rank(b) == 1 and _meta(b).shape == (_meta(w).shape[0],) \
                and _same_dtype(x, w, b, node) and _meta(mm) == _meta(node):
            return Fused("linear", F.linear, (x, w, b))
    return None


def _linear_bias(node: Node, ctx: _Ctx) -> Optional[Fused]:
    """``linear(x, w) + b -> linear(x, w, b)``"""
    for lin, b in _sum_of(node, ("linear",)):
        if len(lin.args) != 2 or lin.kwargs.get("bias", None) is not None or \
                set(lin.kwargs) - {"bias"} or not ctx.only_for(lin, node):
            continue
        x, w = lin.args
        if _rank(w) == 2 and _rank(b) == 1 and _meta(b).shape == (_meta(w).shape[0],) \
                and _same_dtype(x, w, b, node) and _meta(lin) == _meta(node):
            return Fused("linear", F.linear, (x, w, b))
    return None


def _addmm(node: Node, ctx: _Ctx) -> Optional[Fused]:
    """``matmul(x, w) + b -> addmm(b, x, w)`` (2-D x and w, b broadcast to the product)"""
    for mm, b in _sum_of(node, ("matmul", "mm")):
        if not _plain(mm, 2) or not ctx.only_for(mm, node):
            continue
        x, w = mm.args
        if _rank(x) == 2 and _rank(w) == 2 and _rank(b) is not None and _rank(b) <= 2 \
                and _same_dtype(x, w, b, node) and _meta(mm) == _meta(node):
            return Fused("addmm", torch.addmm, (b, x, w))
    return None


_CONV_PARAMS = ("input", "weight", "bias", "stride", "padding", "dilation", "groups")
_CONV_DEFAULTS = (None, None, None, 1, 0, 1, 1)


def _conv_args(conv: Node) -> Optional[list]:
    """The seven arguments of a ``conv2d`` node, defaults filled in (None if unknown kwargs)."""
    if conv.op != "conv2d" or conv.target is not torch.conv2d or set(conv.kwargs) - set(_CONV_PARAMS):
        return None
    args = list(conv.args) + list(_CONV_DEFAULTS[len(conv.args):])
    for name, value in conv.kwargs.items():
        args[_CONV_PARAMS.index(name)] = value
    return args


def _conv_bias(node: Node, ctx: _Ctx) -> Optional[Fused]:
    """``conv2d(x, w) + b -> conv2d(x, w, b.reshape(C))`` (b shaped (C,1,1) or (1,C,1,1))"""
    for conv, b in _sum_of(node, ("conv2d",)):
        args = _conv_args(conv)
        if args is None or args[2] is not None or not ctx.only_for(conv, node):
            continue
        shape = _meta(conv).shape if _meta(conv) else None
        if not shape or len(shape) not in (3, 4) or shape[-3] is None or _meta(b) is None:
            continue
        channels = shape[-3]
        fits = [(channels, 1, 1)] + ([(1, channels, 1, 1)] if len(shape) == 4 else [])
        if _meta(b).shape in fits and _same_dtype(conv, b, node) and _meta(conv) == _meta(node):
            args[2] = Reshaped(b, (channels,))
            return Fused("conv2d", torch.conv2d, tuple(args))
    return None


def _conv_relu(node: Node, ctx: _Ctx) -> Optional[Fused]:
    """``relu(conv2d(...)) -> conv2d_relu(...)`` (relu in place on the conv's result)"""
    conv = node.args[0] if _plain(node, 1) else None
    args = _conv_args(conv) if _is(conv, "conv2d") else None
    if args is None or not ctx.only_for(conv, node) or _meta(conv) != _meta(node):
        return None
    return Fused("conv2d_relu", conv2d_relu, tuple(args))


def _addcmul(node: Node, ctx: _Ctx) -> Optional[Fused]:
    """``a + b * c -> addcmul(a, b, c)`` (floating point, all one dtype)"""
    for mul, a in _sum_of(node, ("mul",)):
        if not _plain(mul, 2) or not ctx.only_for(mul, node):
            continue
        b, c = mul.args
        if _same_dtype(a, b, c, node) and _meta(node).dtype.is_floating_point:
            return Fused("addcmul", torch.addcmul, (a, b, c))
    return None


def _product_with(node: Node, ctx: _Ctx, op: str) -> Optional[Tuple[Node, Node]]:
    """``(x, f)`` for ``x * f`` or ``f * x`` where ``f = op(x)`` is read by the product only."""
    if node.op != "mul" or not _plain(node, 2):
        return None
    for x, f in (node.args, node.args[::-1]):
        if _is(f, op) and _plain(f, 1) and f.args[0] is x and ctx.only_for(f, node):
            return x, f
    return None


def _silu(node: Node, ctx: _Ctx) -> Optional[Fused]:
    """``x * sigmoid(x) -> silu(x)``"""
    found = _product_with(node, ctx, "sigmoid")
    if found and _meta(found[0]) == _meta(node) and _meta(node).dtype.is_floating_point:
        return Fused("silu", F.silu, (found[0],))
    return None


def _mish(node: Node, ctx: _Ctx) -> Optional[Fused]:
    """``x * tanh(softplus(x)) -> mish(x)``"""
    if node.op != "mul" or not _plain(node, 2):
        return None
    for x, th in (node.args, node.args[::-1]):
        sp = th.args[0] if _is(th, "tanh") and _plain(th, 1) else None
        if _is(sp, "softplus") and _plain(sp, 1) and sp.args[0] is x and \
                ctx.only_for(th, node) and ctx.only_for(sp, th) and _meta(x) == _meta(node) \
                and _meta(node).dtype.is_floating_point:
            return Fused("mish", F.mish, (x,))
    return None


def _rsqrt(node: Node, ctx: _Ctx) -> Optional[Fused]:
    """``1 / sqrt(x) -> rsqrt(x)``"""
    if node.op in ("rdiv", "rtruediv") and len(node.args) == 2 and not node.kwargs \
            and node.args[1] in (1, 1.0) and type(node.args[1]) in (int, float):
        root = node.args[0]
    elif node.op == "reciprocal" and _plain(node, 1):
        root = node.args[0]
    else:
        return None
    if _is(root, "sqrt") and _plain(root, 1) and ctx.only_for(root, node) \
            and _meta(root) == _meta(node) and _meta(root.args[0]) is not None:
        return Fused("rsqrt", torch.rsqrt, (root.args[0],))
    return None


# --------------------------------------------------------------------------- the table
RULES: List[Tuple[str, Callable[[Node, _Ctx], Optional[Fused]]]] = [
    ("add", _linear),              # matmul(x, w.t()) + b -> linear(x, w, b)
    ("add", _linear_bias),         # linear(x, w) + b -> linear(x, w, b)
    ("add", _addmm),               # matmul(x, w) + b -> addmm(b, x, w)
    ("add", _conv_bias),           # conv2d(x, w) + b[C,1,1] -> conv2d(x, w, b.reshape(C))
    ("add", _addcmul),             # a + b * c -> addcmul(a, b, c)
    ("relu", _conv_relu),          # relu(conv2d(...)) -> conv2d_relu(...)  (exact)
    ("mul", _silu),                # x * sigmoid(x) -> silu(x)
    ("mul", _mish),                # x * tanh(softplus(x)) -> mish(x)
    ("rdiv", _rsqrt),              # 1 / sqrt(x) -> rsqrt(x)
    ("reciprocal", _rsqrt),        # sqrt(x).reciprocal() -> rsqrt(x)
]

_BY_OP = rules_by_op(RULES)
_EXACT = frozenset({_conv_relu})          # relu of a rounded value is the rounded relu


# --------------------------------------------------------------------------- the pass
def _first_swallowed(node: Node, leaves: List[Node]) -> Node:
    """The earliest node of ``node``'s graph between the leaves and ``node`` (what the
    fused node replaces), or ``node``."""
    graph, stop = node.graph, {id(v) for v in leaves}
    between, stack = set(), list(iter_nodes((node.args, node.kwargs)))
    while stack:
        value = stack.pop()
        if id(value) in stop or id(value) in between or value.graph is not graph:
            continue
        between.add(id(value))
        stack.extend(iter_nodes((value.args, value.kwargs)))
    if not between:
        return node
    return next(n for n in graph.nodes if id(n) in between)


def fuse_patterns(graph: Graph) -> Graph:
    """Replace every match of the table by its fused kernel, in every graph."""
    facts = ctx = None
    for g, node, rules in rule_sites(graph, _BY_OP):
        facts = facts or facts_for(graph)
        if ctx is None or ctx.graph is not g:
            ctx = _Ctx(g, facts)
        wide = _wide(node)
        for rule in rules:
            if not wide and rule not in _EXACT:
                continue
            fused = rule(node, ctx)
            if fused is None:
                continue
            leaves = list(iter_nodes([a.value if isinstance(a, Reshaped) else a
                                      for a in fused.args]))
            first = _first_swallowed(node, leaves)
            if not any(facts.mutated_between(v, first, node) for v in leaves):
                ctx.replace(node, fused)
                break
    return graph
