"""Which leaves a backward gives a gradient to, as far as the trace can tell.

``reached(roots)`` walks a traced value's graph back to its leaves -- real tensors that
require grad (parameters, held as graph constants) and traced leaves (an argument that
requires grad, ``torch.ones(3, requires_grad=True)``) -- along values that require grad
(``grad_flags``), and splits them: *sure* (on every path: both branches of a ``cond``
reach it, or the body of a ``while`` that surely runs once) and *maybe* (one path only).
``autograd_effects`` predicts ``p.grad`` from it.
"""
from __future__ import annotations

from typing import Any, Dict

import torch

from . import grad_flags


def reached(roots):
    """(sure, maybe): the leaves -- real tensors (graph constants) that require grad and
    traced leaves (an argument that requires grad, ``requires_grad=True``) -- that
    ``roots`` were computed from along values that require grad. *Sure*: on every path
    (a ``cond`` output's leaf when every branch's value reaches it); *maybe*: on some
    path only (one branch, a ``while`` body that may not run). Each maps key -> leaf."""
    sure: Dict[int, Any] = {}
    maybe: Dict[int, Any] = {}
    for r in roots:
        if hasattr(r, "_node"):
            s, m = _reach(r._node, {})
            sure.update(s)
            maybe.update(m)
    return sure, {k: v for k, v in maybe.items() if k not in sure}


def _reach(node, memo):
    """``reached`` of one value: (sure, maybe) dicts."""
    if id(node) in memo:
        return memo[id(node)]
    memo[id(node)] = ({}, {})           # (a cycle cannot happen; a guard all the same)
    sure: Dict[int, Any] = {}
    maybe: Dict[int, Any] = {}
    if node.op == "constant":
        value = node.attrs.get("value")
        if isinstance(value, torch.Tensor) and value.requires_grad:
            sure[id(value)] = value
    elif node.attrs.get(grad_flags.KEY, True) is False:
        pass
    elif node.op == "placeholder" or node.op == "requires_grad_" or \
            node.kwargs.get("requires_grad") is True:
        sure[id(node)] = node       # a traced leaf (keyed as ``_key`` keys it); in a
        #                             branch or body, an input the caller maps outward
    elif node.op == "get" and node.args and getattr(node.args[0], "op", None) == "cond":
        sure, maybe = _reach_cond(node.args[0], node.attrs.get("index", 0), memo)
    elif node.op == "get" and node.args and getattr(node.args[0], "op", None) == "while":
        sure, maybe = _reach_while(node.args[0], node.attrs.get("index", 0), memo)
    elif node.subgraphs:                    # a while loop (its body may not run)
        outer_values = list(node.inputs)
        for sub in node.subgraphs:
            outer_values += [outer for outer, _ in sub.captures]
            for n in sub.walk():
                if n.op == "constant" or n.op == "requires_grad_" or \
                        n.kwargs.get("requires_grad") is True:
                    maybe.update(_reach(n, memo)[0])
        for v in outer_values:
            s, m = _reach(v, memo)
            maybe.update(s)
            maybe.update(m)
    elif node.op == "get" and node.args and getattr(node.args[0], "subgraphs", None):
        sure, maybe = _reach(node.args[0], memo)
    else:
        for i in node.inputs:
            s, m = _reach(i, memo)
            sure.update(s)
            maybe.update(m)
    memo[id(node)] = (sure, maybe)
    return sure, maybe


def _reach_while(loop, index: int, memo):
    """``reached`` of loop variable ``index`` of a ``while``: all maybe (the body may
    not run), but for a loop that surely runs once (``for xt in xs`` over a static
    size): what the body's value reaches from outside the loop variables (constants,
    leaves made in the body, captured values) is sure."""
    maybe = dict(_reach(loop, memo)[1])
    sure: Dict[int, Any] = {}
    body = loop.subgraphs[1] if len(loop.subgraphs) > 1 else None
    outputs = body.outputs if body is not None and isinstance(body.outputs, (tuple, list)) \
        else ()
    if index < len(outputs) and hasattr(outputs[index], "op") and _runs_once(loop):
        carried = {id(p) for p in body.inputs if not p.attrs.get("captured")}
        captured = {id(inner): outer for outer, inner in body.captures}
        for key, leaf in _reach(outputs[index], {})[0].items():
            if key in captured:
                sure.update(_reach(captured[key], memo)[0])
            elif key not in carried:
                sure[key] = leaf
    return sure, {k: v for k, v in maybe.items() if k not in sure}


def _runs_once(loop) -> bool:
    """Whether the loop's condition holds for its initial values, when those are
    numbers or literal factories (``index < 4`` from ``tensor(0)``)."""
    from .graph import Node, map_nodes
    from .passes.fold import FACTORIES
    cond = loop.subgraphs[0]
    env: Dict[int, Any] = {}
    try:
        for p, init in zip(cond.inputs, loop.args):
            if not isinstance(init, Node):
                env[id(p)] = init
            elif init.op in FACTORIES and not init.inputs:
                env[id(p)] = init.target(*init.args, **init.kwargs)
        for n in cond.nodes:
            if n.op == "placeholder":
                continue
            if n.op == "constant":
                env[id(n)] = n.attrs["value"]
                continue
            if n.target is None or n.impure or any(id(i) not in env for i in n.inputs):
                return False
            env[id(n)] = n.target(*map_nodes(n.args, lambda v: env[id(v)]),
                                  **map_nodes(n.kwargs, lambda v: env[id(v)]))
        out = cond.outputs[0] if isinstance(cond.outputs, (tuple, list)) else cond.outputs
        return id(out) in env and bool(env[id(out)])
    except Exception:       # noqa: BLE001 - not provable here: the body may not run
        return False


def _reach_cond(cond, index: int, memo):
    """``reached`` of output ``index`` of ``cond``: sure where every branch's value
    surely reaches the leaf (an operand or capture read on that branch, or a constant)."""
    per_branch = []
    maybe: Dict[int, Any] = {}
    for sub in cond.subgraphs:
        outputs = sub.outputs if isinstance(sub.outputs, (tuple, list)) else (sub.outputs,)
        out = outputs[index] if index < len(outputs) else None
        if not hasattr(out, "op"):
            per_branch.append({})
            continue
        s, m = _reach(out, {})
        bound = dict(zip([id(p) for p in sub.inputs], cond.args[1:]))
        bound.update({id(inner): outer for outer, inner in sub.captures})
        branch: Dict[int, Any] = {}
        for key, leaf in s.items():
            outer = bound.get(key)
            if outer is None:
                branch[key] = leaf
                continue
            if hasattr(outer, "op"):        # the operand's own leaves, as it reaches them
                os_, om = _reach(outer, memo)
                branch.update(os_)
                maybe.update(om)
        for key, leaf in m.items():
            outer = bound.get(key)
            if outer is None:
                maybe[key] = leaf
            elif hasattr(outer, "op"):
                os_, om = _reach(outer, memo)
                maybe.update(os_)
                maybe.update(om)
        per_branch.append(branch)
    sure = dict(per_branch[0]) if per_branch else {}
    for branch in per_branch[1:]:
        sure = {k: v for k, v in sure.items() if k in branch}
    for branch in per_branch:
        maybe.update({k: v for k, v in branch.items() if k not in sure})
    return sure, maybe
