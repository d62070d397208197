"""Algebraic simplification: a table of exact rewrites, one rule per line.

Rule: a node matching a rule's pattern is replaced either by an existing value (``Use``)
or by a cheaper node computing the same thing (``New``). A rule applies only when the
result keeps the node's dtype and shape (``x * 1`` with an int ``x`` and ``1.0`` promotes;
``x + zeros(3, 3)`` broadcasts), and ``Use`` only when ``rewrite.Facts.may_replace``
allows it (no mutated storage, no output made the same object as an input or another
output, no grad-mode switch in the graph, unless eager returns that very object too).
Rules are exact for every value, NaN, Inf and -0.0 included, which is why ``x + 0 -> x``
is for integers only (-0.0 + 0 is +0.0) and ``x - x``, ``x * 0`` fold to zeros only for
integers (Inf - Inf and Inf * 0 are NaN).
"""
from __future__ import annotations

from typing import Callable, List, NamedTuple, Optional, Tuple

import torch

from ..graph import Graph, Node
from ..meta import TensorMeta
from .rewrite import (Facts, Uses, facts_for, has_effect, inputs_of, replace_with_new,
                      rule_sites, rules_by_op)


class Use(NamedTuple):
    """Readers of the node read ``value`` instead; ``exact``: eager returns ``value`` itself."""
    value: Node
    exact: bool = False


class New(NamedTuple):
    """The node is replaced by ``op`` = ``target(*args)`` (same meta and location)."""
    op: str
    target: Callable
    args: tuple


# --------------------------------------------------------------------------- matchers
def _arg(node: Node, i: int):
    return node.args[i] if len(node.args) > i else None


def _lit(value, *wanted) -> bool:
    """``value`` is a Python number equal to one of ``wanted``."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value in wanted


_FILLS = {"zeros": 0, "ones": 1}


def _unit(value, unit) -> bool:
    """``value`` is ``unit`` everywhere: a Python number, a ``zeros``/``ones``/``full``
    factory or a folded constant (the caller still checks dtype and shape)."""
    if not isinstance(value, Node):
        return _lit(value, unit)
    if value.kwargs.get("requires_grad"):   # a leaf the backward gives a gradient to
        return False
    if value.op in _FILLS and not has_effect(value) and not inputs_of(value):
        return _FILLS[value.op] == unit
    if value.op == "full" and len(value.args) == 2 and not inputs_of(value):
        return _lit(value.args[1], unit)
    if value.op == "constant" and value.attrs.get("folded"):
        return bool((value.attrs["value"] == unit).all())
    return False


def _is(value, *ops: str) -> bool:
    return isinstance(value, Node) and value.op in ops and not has_effect(value)


def _integral(node: Node) -> bool:
    meta = node.meta
    return isinstance(meta, TensorMeta) and not (meta.dtype.is_floating_point
                                                 or meta.dtype.is_complex)


def _binary(node: Node, unit, integral_only=False, commutes=True) -> Optional[Use]:
    """``x op unit -> x`` (and ``unit op x -> x`` when the op commutes); ``unit`` may be
    a tensor of units, whose broadcasting or promotion ``_apply`` catches by the meta."""
    if node.kwargs or len(node.args) != 2 or (integral_only and not _integral(node)):
        return None
    a, b = node.args
    for x, u in ((a, b), (b, a)) if commutes else ((a, b),):
        if isinstance(x, Node) and _unit(u, unit):
            if isinstance(u, Node) and not (_static(x) and _static(node)):
                return None             # a unit tensor may broadcast dims we cannot see
            return Use(x)
    return None


def _static(node: Node) -> bool:
    return isinstance(node.meta, TensorMeta) and node.meta.is_static


def _plain(node: Node) -> bool:
    """One argument and no keyword arguments (``inplace=False`` aside)."""
    return len(node.args) == 1 and all(k == "inplace" and v is False
                                       for k, v in node.kwargs.items())


def _twice(node: Node, op: str) -> Optional[Node]:
    """The ``x`` of ``node(op(x))`` (both with no other arguments)."""
    inner = _arg(node, 0)
    if _plain(node) and _is(inner, op) and _plain(inner) and isinstance(inner.args[0], Node):
        return inner.args[0]
    return None


def _transposes(node: Node) -> Optional[Use]:
    """``transpose(transpose(x, a, b), a, b) -> x`` (or ``b, a`` the second time)."""
    inner = _arg(node, 0)
    if node.kwargs or len(node.args) != 3 or not _is(inner, "transpose") or inner.kwargs \
            or len(inner.args) != 3:
        return None
    if set(node.args[1:]) == set(inner.args[1:]) and isinstance(inner.args[0], Node):
        return Use(inner.args[0])
    return None


def _unsqueeze_squeeze(node: Node) -> Optional[Use]:
    inner = _arg(node, 0)
    if node.kwargs or len(node.args) != 2 or not _is(inner, "unsqueeze") or inner.kwargs:
        return None
    dim = _arg(inner, 1)
    if type(dim) is int and node.args[1] == dim and type(node.args[1]) is int \
            and isinstance(inner.args[0], Node):
        return Use(inner.args[0])
    return None


def _same_shape_view(node: Node) -> Optional[Use]:
    """``x.view(x.shape)`` / ``x.reshape(x.shape)`` (HF's ``reshape(b, -1, s, d)`` of a
    tensor already that shape) reads as ``x``: the same elements, one autograd view node
    fewer. Not exact (eager returns a new view object), so ``may_replace`` decides."""
    x = _arg(node, 0)
    if isinstance(x, Node) and _static(node) and not node.kwargs:
        return Use(x)           # ``_apply`` checks x's meta equals the node's
    return None


_CASTS = {"float": torch.float32, "double": torch.float64, "half": torch.float16,
          "bfloat16": torch.bfloat16, "int": torch.int32, "long": torch.int64,
          "short": torch.int16, "bool": torch.bool}


def _same_dtype_cast(node: Node) -> Optional[Use]:
    """``x.float()`` of a float32 ``x`` (``x.to(x.dtype)``...) is ``x`` itself in eager."""
    x = _arg(node, 0)
    if not isinstance(x, Node) or not isinstance(x.meta, TensorMeta):
        return None
    if node.op in _CASTS and len(node.args) == 1 and not node.kwargs:
        wanted = _CASTS[node.op]
    elif node.op == "to" and len(node.args) == 2 and not node.kwargs \
            and isinstance(node.args[1], torch.dtype):
        wanted = node.args[1]
    else:
        return None
    return Use(x, exact=True) if x.meta.dtype == wanted else None


def _neg_pair(node: Node, op: str) -> Optional[New]:
    """``neg(x) * neg(y) -> x * y``."""
    if node.kwargs or len(node.args) != 2 or not all(_is(a, "neg") for a in node.args):
        return None
    (x,), (y,) = node.args[0].args, node.args[1].args
    return New(op, getattr(torch.Tensor, op), (x, y))


def _minus_neg(node: Node, op: str, target) -> Optional[New]:
    """``x - neg(y) -> x + y`` and ``x + neg(y) -> x - y``."""
    if node.kwargs or len(node.args) != 2 or not isinstance(node.args[0], Node) \
            or not _is(node.args[1], "neg") or len(node.args[1].args) != 1:
        return None
    return New(op, target, (node.args[0], node.args[1].args[0]))


def _self_minus_self(node: Node) -> Optional[New]:
    """``x - x -> zeros_like(x)`` (integers: for floats Inf - Inf is NaN)."""
    if node.kwargs or len(node.args) != 2 or node.args[0] is not node.args[1] \
            or not isinstance(node.args[0], Node) or not _integral(node):
        return None
    return New("zeros_like", torch.zeros_like, (node.args[0],))


def _times_zero(node: Node) -> Optional[New]:
    """``x * 0 -> zeros_like(x)`` (integers: for floats Inf * 0 is NaN)."""
    use = _binary(node, 0, integral_only=True)
    return New("zeros_like", torch.zeros_like, (use.value,)) if use else None


def _square(node: Node) -> Optional[New]:
    """``x ** 2 -> x * x`` (torch computes pow by 2 as that product)."""
    x = _arg(node, 0)
    if node.kwargs or len(node.args) != 2 or not isinstance(x, Node) or not _lit(node.args[1], 2):
        return None
    return New("mul", torch.Tensor.mul, (x, x))


def _idempotent(node: Node, op: str) -> Optional[Use]:
    """``op(op(x)) -> op(x)``."""
    return Use(node.args[0]) if _twice(node, op) is not None else None


def _involution(node: Node, op: str) -> Optional[Use]:
    """``op(op(x)) -> x``."""
    x = _twice(node, op)
    return Use(x) if x is not None else None


def _abs_neg(node: Node) -> Optional[New]:
    """``abs(-x) -> abs(x)``."""
    x = _twice(node, "neg")
    return New("abs", torch.abs, (x,)) if x is not None else None


# --------------------------------------------------------------------------- the table
RULES: List[Tuple[str, Callable[[Node], object]]] = [
    ("mul", lambda n: _binary(n, 1)),                               # x*1 -> x, 1*x -> x
    ("div", lambda n: _binary(n, 1, commutes=False)),               # x/1 -> x
    ("true_divide", lambda n: _binary(n, 1, commutes=False)),       # x/1 -> x
    ("floordiv", lambda n: _binary(n, 1, True, commutes=False)),    # x//1 -> x (ints)
    ("floor_divide", lambda n: _binary(n, 1, True, commutes=False)),  # x//1 -> x (ints)
    ("add", lambda n: _binary(n, 0, integral_only=True)),           # x+0 -> x, 0+x -> x (ints)
    ("sub", lambda n: _binary(n, 0, commutes=False)),               # x-0 -> x
    ("pow", lambda n: _binary(n, 1, commutes=False)),               # x**1 -> x
    ("pow", _square),                                               # x**2 -> x*x
    ("neg", lambda n: _involution(n, "neg")),                       # -(-x) -> x
    ("t", lambda n: _involution(n, "t")),                           # x.t().t() -> x
    ("T", lambda n: _involution(n, "T")),                           # x.T.T -> x
    ("transpose", _transposes),                                     # x.transpose(a,b).transpose(a,b) -> x
    ("squeeze", _unsqueeze_squeeze),                                # x.unsqueeze(d).squeeze(d) -> x
    ("relu", lambda n: _idempotent(n, "relu")),                     # relu(relu(x)) -> relu(x)
    ("abs", lambda n: _idempotent(n, "abs")),                       # abs(abs(x)) -> abs(x)
    ("abs", _abs_neg),                                              # abs(-x) -> abs(x)
    ("mul", lambda n: _neg_pair(n, "mul")),                         # (-x)*(-y) -> x*y
    ("sub", lambda n: _minus_neg(n, "add", torch.Tensor.add)),      # x - (-y) -> x + y
    ("add", lambda n: _minus_neg(n, "sub", torch.Tensor.sub)),      # x + (-y) -> x - y
    ("sub", _self_minus_self),                                      # x - x -> zeros_like(x) (ints)
    ("mul", _times_zero),                                           # x*0 -> zeros_like(x) (ints)
    *[(cast, _same_dtype_cast) for cast in _CASTS],                 # x.float() -> x when f32
    ("to", _same_dtype_cast),                                       # x.to(x.dtype) -> x
    ("view", _same_shape_view),                                     # x.view(x.shape) -> x
    ("reshape", _same_shape_view),                                  # x.reshape(x.shape) -> x
]

_BY_OP = rules_by_op(RULES)


# --------------------------------------------------------------------------- the pass
def simplify(graph: Graph) -> Graph:
    """Apply the rule table to every node, in every graph, until none matches."""
    facts = uses = None
    for g, node, rules in rule_sites(graph, _BY_OP):
        for rule in rules:
            result = rule(node)
            if result is None:
                continue
            facts = facts or facts_for(graph)
            if uses is None or uses.graph is not g:
                uses = Uses(g)
            if _apply(node, result, facts, uses):
                break
    return graph


def _same_meta(a, b) -> bool:
    return isinstance(a, TensorMeta) and isinstance(b, TensorMeta) and a == b


def _apply(node: Node, result, facts: Facts, uses: Uses) -> bool:
    if isinstance(result, Use):
        value = result.value
        if not _same_meta(value.meta, node.meta) or value.graph is not node.graph:
            return False
        if not facts.may_replace(node, value, result.exact):
            return False
        facts.union(node, value)
        uses.replace_node(node, value)
        return True
    ins = [a for a in result.args if isinstance(a, Node)]
    if len({id(a) for a in ins}) == 1 and not _same_meta(ins[0].meta, node.meta):
        return False            # abs(x), x*x, zeros_like(x) take x's dtype and shape
    if not facts.stable(node) or any(facts.mutated(a) for a in ins):
        return False
    new = replace_with_new(uses, node, result.op, result.target, result.args)
    facts.union(new, node)                  # the new node reaches whoever the old one did
    return True
