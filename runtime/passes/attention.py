"""``nn.MultiheadAttention``'s functional form, opened into the torch ops it runs.

Rule: a ``multi_head_attention_forward`` node (what ``nn.MultiheadAttention``,
``nn.TransformerEncoderLayer`` and torchvision's ViT call) in its plain self-attention
form becomes the ops eager runs for it, so the graph calls them directly instead of a
Python function that re-checks its 25 arguments on every call (~100 us at batch 1,
more than the attention's arithmetic):

    proj = linear(x, in_proj_weight, in_proj_bias)          # (T, B, 3E)
    q, k, v = proj.view(T, B, 3, H, D).permute(2, 1, 3, 0, 4)   # each (B, H, T, D)
    out = scaled_dot_product_attention(q, k, v)              # (B, H, T, D)
    out = linear(out.permute(2, 0, 1, 3).reshape(T * B, E), out_proj_weight,
                 out_proj_bias).view(T, B, E)

It fires only where eager takes exactly that path: query, key and value the same
3-D value of static shape ``(T, B, E)`` with ``E == embed_dim_to_check`` divisible by
``num_heads``; packed input weights (``use_separate_proj_weight`` false), no
``bias_k``/``bias_v``, no ``add_zero_attn``, no ``static_k``/``static_v``,
``need_weights`` false, no dropout (``training`` false or ``dropout_p == 0``); the node's
second result (``None``) unread. Masks: ``attn_mask`` ((T, S) or (B * H, T, S)) and
``key_padding_mask`` ((B, S)), bool or of the query's dtype, one dtype when both are
given, become one ``attention_mask`` node running eager's own steps (``_canonical_mask``,
the padding spread over the heads and added); ``is_causal`` with a mask and no padding
mask is sdpa's ``is_causal`` without a mask, as eager does. Eager's own path takes the
same products and the same attention kernel; it copies q, k and v apart first
(``contiguous``) where this reads them as strided views of the projection, which the
attention kernel accepts (results agree to float rounding).
Gradients flow through the same ops. A batch-first caller's transposes around the call
(``x.transpose(1, 0)`` in, the result's ``transpose(1, 0)`` out, as
``nn.MultiheadAttention(batch_first=True)`` writes them) are folded into the permutes.
"""
from __future__ import annotations

import inspect
from typing import Optional

import torch
import torch.nn.functional as F

from ..graph import Graph, Node
from ..graph_ops import register
from ..meta import TensorMeta
from .rewrite import Uses, graphs_post_order, has_effect

_SIGNATURE = inspect.signature(F.multi_head_attention_forward)
_ABSENT = ("bias_k", "bias_v", "q_proj_weight",
           "k_proj_weight", "v_proj_weight", "static_k", "static_v")


def open_attention(graph: Graph) -> Graph:
    """Replace every plain self-attention ``multi_head_attention_forward`` node."""
    for g in graphs_post_order(graph):
        uses = None
        for node in list(g.nodes):
            if node.op != "multi_head_attention_forward" or \
                    node.target is not F.multi_head_attention_forward:
                continue
            uses = uses or Uses(g)
            call = _plain_call(node, uses)
            if call is not None:
                _open(node, uses, *call)
    return graph


def _meta(value) -> Optional[TensorMeta]:
    return value.meta if isinstance(value, Node) and isinstance(value.meta, TensorMeta) else None


def _shaped(value, shape) -> bool:
    meta = _meta(value)
    return meta is not None and meta.shape == shape


def _plain_call(node: Node, uses: Uses):
    """``(x, heads, w_in, b_in, w_out, b_out)`` when ``node`` is the plain form, else None."""
    if has_effect(node):
        return None
    try:
        bound = _SIGNATURE.bind(*node.args, **node.kwargs)
    except TypeError:
        return None
    bound.apply_defaults()
    a = bound.arguments
    x = a["query"]
    meta = _meta(x)
    if meta is None or not meta.is_static or len(meta.shape) != 3 or \
            not meta.dtype.is_floating_point or a["key"] is not x or a["value"] is not x:
        return None
    t, b, e = meta.shape
    heads = a["num_heads"]
    if type(heads) is not int or heads <= 0 or e % heads or a["embed_dim_to_check"] != e:
        return None
    if any(a[name] is not None for name in _ABSENT) or a["add_zero_attn"] is not False or \
            a["use_separate_proj_weight"] is not False or a["need_weights"] is not False or \
            type(a["is_causal"]) is not bool:
        return None
    masks = _masks(a["attn_mask"], a["key_padding_mask"], a["is_causal"], meta, heads)
    if masks is None:
        return None
    dropout = a["dropout_p"]
    if a["training"] is not False and not (type(dropout) in (int, float) and dropout == 0):
        return None
    w_in, b_in, w_out, b_out = (a["in_proj_weight"], a["in_proj_bias"],
                                a["out_proj_weight"], a["out_proj_bias"])
    if not _shaped(w_in, (3 * e, e)) or not _shaped(w_out, (e, e)):
        return None
    if b_in is not None and not _shaped(b_in, (3 * e,)):
        return None
    if b_out is not None and not _shaped(b_out, (e,)):
        return None
    if any(_meta(v).dtype != meta.dtype for v in (w_in, b_in, w_out, b_out) if v is not None):
        return None
    if node.meta is None or not isinstance(node.meta, tuple) or node.meta[0] != meta:
        return None
    readers = uses.readers(node)
    if uses.out_count.get(id(node)) or any(
            r.op != "get" or r.attrs.get("index") != 0 or r.args != (node,) for r in readers):
        return None
    return x, heads, w_in, b_in, w_out, b_out, masks


def _masks(attn_mask, padding, is_causal: bool, meta: TensorMeta, heads: int):
    """``(attn_mask, key_padding_mask, causal, mask shape)`` for the opened form, None
    where the masks take a form left alone. Each mask absent or a static bool mask or one
    of the query's dtype, shaped as eager accepts it ((T, S) or (B * H, T, S); (B, S)),
    both of one dtype when both are given (eager warns about mixed ones on every call)."""
    t, b, _ = meta.shape
    shapes = {"attn": ((t, t), (b * heads, t, t)), "padding": ((b, t),)}
    for mask, kind in ((attn_mask, "attn"), (padding, "padding")):
        if mask is None:
            continue
        m = _meta(mask)
        if m is None or not m.is_static or m.shape not in shapes[kind] or \
                m.dtype not in (torch.bool, meta.dtype):
            return None
    if attn_mask is not None and padding is not None and \
            _meta(attn_mask).dtype != _meta(padding).dtype:
        return None
    if is_causal and attn_mask is None:
        return None                     # eager raises
    if is_causal and padding is None:
        return None, None, True, None   # eager hands sdpa is_causal and no mask
    if attn_mask is None and padding is None:
        return None, None, False, None
    try:                                # the mask's shape: eager's steps on meta tensors
        shape = tuple(attention_mask(*(None if m is None else torch.empty(
            m.meta.shape, dtype=m.meta.dtype, device="meta") for m in (attn_mask, padding)),
            b, heads, meta.dtype).shape)
    except Exception:
        return None
    return attn_mask, padding, False, shape


@register
def attention_mask(attn_mask, key_padding_mask, batch: int, heads: int, dtype):
    """The mask ``multi_head_attention_forward(need_weights=False)`` hands
    ``scaled_dot_product_attention`` (its own steps: bool masks as -inf, a 2-D mask
    unsqueezed, the padding mask spread over the heads and added)."""
    padding = F._canonical_mask(mask=key_padding_mask, mask_name="key_padding_mask",
                                other_type=F._none_or_dtype(attn_mask),
                                other_name="attn_mask", target_type=dtype)
    mask = F._canonical_mask(mask=attn_mask, mask_name="attn_mask", other_type=None,
                             other_name="", target_type=dtype, check_other=False)
    if mask is not None and mask.dim() == 2:
        mask = mask.unsqueeze(0)
    if padding is not None:
        src = padding.shape[-1]
        padding = padding.view(batch, 1, 1, src).expand(-1, heads, -1, -1) \
            .reshape(batch * heads, 1, src)
        mask = padding if mask is None else mask + padding
    if mask.size(0) == 1 and mask.dim() == 3:
        return mask.unsqueeze(0)
    return mask.view(batch, heads, -1, mask.shape[-1])


def _swapped(value) -> Optional[Node]:
    """``y`` when ``value`` is ``y.transpose(1, 0)`` (or ``(0, 1)``) of a 3-D ``y``."""
    if isinstance(value, Node) and value.op == "transpose" and not value.kwargs and \
            len(value.args) == 3 and set(value.args[1:]) == {0, 1} and \
            _meta(value.args[0]) is not None and len(_meta(value.args[0]).shape) == 3:
        return value.args[0]
    return None


def _open(node: Node, uses: Uses, x: Node, heads: int, w_in, b_in, w_out, b_out,
          masks) -> None:
    """Insert the ops before ``node``; drop it and its ``get`` readers. A batch-first
    caller (``nn.MultiheadAttention(batch_first=True)``) transposes its input to
    ``(T, B, E)`` and the result back: then the ops read and give ``(B, T, E)``, the
    transposes left out (same rows, no strided copies)."""
    t, b, e = x.meta.shape
    d, dtype = e // heads, x.meta.dtype

    def add(op, target, args, shape):
        return uses.insert_before(node, op, target, args, meta=TensorMeta(shape, dtype))
    gets = list(uses.readers(node))
    outer = [r for g in gets for r in uses.readers(g)]
    source = _swapped(x)
    if source is not None:
        proj = add("linear", F.linear, (source, w_in, b_in), (b, t, 3 * e))
        split = add("view", torch.Tensor.view, (proj, (b, t, 3, heads, d)), (b, t, 3, heads, d))
        qkv = add("permute", torch.Tensor.permute, (split, (2, 0, 3, 1, 4)), (3, b, heads, t, d))
    else:
        proj = add("linear", F.linear, (x, w_in, b_in), (t, b, 3 * e))
        split = add("view", torch.Tensor.view, (proj, (t, b, 3, heads, d)), (t, b, 3, heads, d))
        qkv = add("permute", torch.Tensor.permute, (split, (2, 1, 3, 0, 4)), (3, b, heads, t, d))
    q, k, v = (add("select", torch.Tensor.select, (qkv, 0, i), (b, heads, t, d))
               for i in range(3))
    attn_mask, padding, causal, mask_shape = masks
    mask = None
    if mask_shape is not None:
        mask = add("attention_mask", attention_mask, (attn_mask, padding, b, heads, dtype),
                   mask_shape)
    att = add("scaled_dot_product_attention", F.scaled_dot_product_attention,
              (q, k, v, mask, 0.0, causal), (b, heads, t, d))
    back = bool(outer) and not any(uses.out_count.get(id(g)) for g in gets) and \
        all(_swapped(r) is not None for r in outer)
    if back:            # every reader turns the result back to (B, T, E)
        rows = add("permute", torch.Tensor.permute, (att, (0, 2, 1, 3)), (b, t, heads, d))
        shape = (b, t, e)
    else:
        rows = add("permute", torch.Tensor.permute, (att, (2, 0, 1, 3)), (t, b, heads, d))
        shape = (t, b, e)
    flat = add("reshape", torch.Tensor.reshape, (rows, (t * b, e)), (t * b, e))
    out = add("linear", F.linear, (flat, w_out, b_out), (t * b, e))
    result = add("view", torch.Tensor.view, (out, shape), shape)
    for reader in outer if back else ():
        uses.replace_node(reader, result)
    for reader in gets:
        uses.replace_node(reader, result)
    uses.erase(node)
