"""``scaled_dot_product_attention`` called the cheaper way that gives the same values.

Rules, for a call with ``dropout_p=0`` and ``is_causal=False`` on floating queries:

* a constant boolean mask (a folded value: the graph alone holds it, nothing changes it)
  that is ``ones(L, S).tril()`` in every batch and head becomes ``is_causal=True`` (the
  CPU kernel skips the masked blocks; equal values, causality is its top-left tril);
* another constant boolean mask becomes the additive float mask the op would make from it
  on every call (``0`` where True, ``-inf`` where False: what sdpa's own conversion does);
* keys and values both repeated per group of query heads as ``repeat_kv`` spells it
  (``x[:, :, None].expand(B, Hkv, n, S, D).reshape(B, Hkv * n, S, D)``) are passed
  unrepeated with ``enable_gqa=True`` (the op repeats them the same way, without the copy).

The shapes come from the nodes' metas; everything else keeps the call as traced.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from ..graph import Graph, Node, map_nodes
from ..meta import TensorMeta
from .rewrite import Uses, bump, graphs_post_order, has_effect

_SDPA = (F.scaled_dot_product_attention, torch._C._nn.scaled_dot_product_attention)
_NEW_AXIS = (slice(None), slice(None), None, slice(None), slice(None))
_GQA = tuple(int(p) for p in torch.__version__.split(".")[:2]) >= (2, 5)   # enable_gqa


def attention_arguments(graph: Graph) -> Graph:
    """Rewrite every qualifying attention call, in every graph."""
    for g in graphs_post_order(graph):
        uses = None
        for node in list(g.nodes):
            if node.target not in _SDPA or has_effect(node) or not _plain(node):
                continue
            uses = uses or Uses(g)
            _mask(uses, node)
            _groups(node)
    return graph


def _plain(node: Node) -> bool:
    if len(node.args) != 3 or set(node.kwargs) - {"attn_mask", "dropout_p", "scale",
                                                  "is_causal"}:
        return False
    q = node.args[0]
    return node.kwargs.get("dropout_p", 0.0) == 0 and \
        node.kwargs.get("is_causal", False) is False and isinstance(q, Node) and \
        isinstance(q.meta, TensorMeta) and q.meta.is_static and len(q.meta.shape) >= 2 and \
        q.meta.dtype.is_floating_point and all(
            isinstance(v, Node) and isinstance(v.meta, TensorMeta) and v.meta.is_static
            for v in node.args)


def _mask(uses: Uses, node: Node) -> None:
    mask = node.kwargs.get("attn_mask")
    value = _constant(mask, 4) if isinstance(mask, Node) else None
    if not isinstance(value, torch.Tensor) or value.dtype != torch.bool or value.dim() < 2:
        return
    q, k = node.args[0], node.args[1]
    L, S = q.meta.shape[-2], k.meta.shape[-2]
    if tuple(value.shape[-2:]) != (L, S) or value.dim() > len(q.meta.shape) or any(
            d != 1 and d != b for d, b in zip(reversed(value.shape[:-2]),
                                              reversed(q.meta.shape[:-2]))):
        return
    kwargs = dict(node.kwargs)
    if bool((value == torch.ones(L, S, dtype=torch.bool).tril()).all()):
        del kwargs["attn_mask"]
        kwargs["is_causal"] = True
    else:
        additive = torch.zeros(value.shape, dtype=q.meta.dtype).masked_fill_(
            value.logical_not(), float("-inf"))
        kwargs["attn_mask"] = uses.insert_before(
            node, "constant", None, (), meta=TensorMeta.of(additive),
            attrs={"value": additive, "folded": True}, like=mask)
    node.kwargs = kwargs
    uses.users[id(mask)] = [u for u in uses.users.get(id(mask), []) if u is not node]
    bump()


def _constant(node: Node, depth: int):
    """The value of a folded constant, or of a few pure ops (views: ``mask[None, None]``)
    on folded constants alone; None otherwise."""
    if node.op == "constant":
        return node.attrs.get("value") if node.attrs.get("folded") else None
    if depth == 0 or node.target is None or node.subgraphs or has_effect(node) or \
            not isinstance(node.meta, TensorMeta) or not node.meta.is_static:
        return None
    values = {}
    for v in node.inputs:
        values[id(v)] = _constant(v, depth - 1)
        if values[id(v)] is None:
            return None
    try:
        with torch.no_grad():
            value = node.target(*map_nodes(node.args, lambda n: values[id(n)]),
                                **map_nodes(node.kwargs, lambda n: values[id(n)]))
    except Exception:
        return None
    if not isinstance(value, torch.Tensor) or tuple(value.shape) != tuple(node.meta.shape):
        return None
    return value


def _groups(node: Node) -> None:
    q, k, v = node.args
    k0, v0 = (_unrepeated(k), _unrepeated(v)) if _GQA else (None, None)
    if k0 is None or v0 is None or k0.meta.shape[1] != v0.meta.shape[1] or \
            q.meta.shape[-3] != k.meta.shape[-3]:
        return
    node.args = (q, k0, v0)
    node.kwargs = {**node.kwargs, "enable_gqa": True}
    bump()


def _unrepeated(r: Node) -> Optional[Node]:
    """``x`` when ``r`` is ``x[:, :, None].expand(B, H, n, S, D).reshape(B, H * n, S, D)``
    with n > 1 (``repeat_kv``), else None."""
    if r.op != "reshape" or has_effect(r) or len(r.meta.shape) != 4:
        return None
    e = r.args[0]
    if not (isinstance(e, Node) and e.op == "expand" and isinstance(e.meta, TensorMeta)):
        return None
    u = e.args[0]
    if not (isinstance(u, Node) and u.op == "getitem" and len(u.args) == 2 and
            u.args[1] == _NEW_AXIS):
        return None
    x = u.args[0]
    if not (isinstance(x, Node) and isinstance(x.meta, TensorMeta) and x.meta.is_static):
        return None
    B, H, S, D = x.meta.shape if len(x.meta.shape) == 4 else (None,) * 4
    n = e.meta.shape[2] if e.meta.shape is not None and len(e.meta.shape) == 5 else None
    if B is None or not n or n < 2 or tuple(e.meta.shape) != (B, H, n, S, D) or \
            tuple(r.meta.shape) != (B, H * n, S, D) or x.meta.dtype != r.meta.dtype:
        return None
    return x
