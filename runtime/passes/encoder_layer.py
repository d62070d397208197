"""``nn.TransformerEncoderLayer`` in inference: the one fused op eager itself calls.

In eval mode, without autograd recording, eager's ``TransformerEncoderLayer.forward``
(batch-first, packed q/k/v with biases, relu or exact gelu, equal norm eps, an even head
count, no autocast) skips its Python blocks and calls ``torch._transformer_encoder_layer_fwd``
once: projections, attention, residuals, norms and the feed-forward in C++. A trace cannot
take that path (its tensors have ``__torch_function__``), so the graph held the layer's
slow path, ~20 ops of a few µs each at batch 1. This pass finds that slow path again
(after eval dropout is gone, before ``open_attention`` opens the attention)::

    post-norm: n1 = LN1(x + sa(x));          out = LN2(n1 + ff(n1))
    pre-norm:  a1 = x + sa(LN1(x));          out = a1 + ff(LN2(a1))
    sa(y) = multi_head_attention_forward(yᵀ, yᵀ, yᵀ, ...)[0]ᵀ     (ᵀ: transpose(1, 0))
    ff(y) = linear2(act(linear1(y)))         act: relu, or gelu without approximation

and makes it one ``encoder_layer`` node, whose every intermediate value nothing else
reads. The node calls eager's fused op where eager's own conditions for it hold when it
runs (fast path enabled, no autocast, no autograd recording, CPU/CUDA tensors, plain
tensors), so its result is eager's, bit for bit; otherwise it runs the slow path's own ops
(``_slow_path``: the same functional calls the layer makes), which autograd records.
Masks, odd head counts, unequal eps, other activations keep the ops they traced.
Blocks written out in the same pre-norm form (torchvision's ViT ``EncoderBlock``:
``x = attn(ln_1(input)) + input; return x + mlp(ln_2(x))``) become the node too; eager
runs those as separate ops, so there the results agree to float rounding (as with
``open_attention``), not bit for bit.
"""
from __future__ import annotations

import inspect
from typing import Optional

import torch
import torch.nn.functional as F

from ..graph import Graph, Node
from ..graph_ops import register
from .attention import _SIGNATURE, _meta, _plain_call, _swapped
from .rewrite import Uses, graphs_post_order, replace_with_new

_LAYER_NORM = inspect.signature(F.layer_norm)
_DEVICES = ("cpu", "cuda")


def encoder_layers(graph: Graph) -> Graph:
    """Replace every encoder layer's traced slow path by one ``encoder_layer`` node."""
    for g in graphs_post_order(graph):
        uses = None
        for node in list(g.nodes):
            if node.op != "multi_head_attention_forward" or node.target is not \
                    F.multi_head_attention_forward or node not in g.nodes:
                continue
            uses = uses or Uses(g)
            found = _layer(node, uses)
            if found is not None:
                out, args = found
                replace_with_new(uses, out, "encoder_layer", encoder_layer, args)
    return graph


def _only(uses: Uses, node: Node) -> Optional[Node]:
    """The one node reading ``node`` (which is no output), else None."""
    readers = uses.readers(node)
    if len(readers) != 1 or uses.out_count.get(id(node)):
        return None
    return readers[0]


def _add_of(node: Optional[Node], value: Node) -> Optional[Node]:
    """The other operand when ``node`` is a plain ``a + b`` with ``value`` one of them."""
    if node is None or node.op != "add" or node.kwargs or len(node.args) != 2:
        return None
    a, b = node.args
    other = b if a is value else a if b is value else None
    return other if isinstance(other, Node) else None


def _norm(node: Optional[Node], x: Node, e: int, dtype):
    """``(weight, bias, eps)`` when ``node`` is ``layer_norm(x, (e,), weight, bias, eps)``."""
    if node is None or node.op != "layer_norm":
        return None
    try:
        a = _LAYER_NORM.bind(*node.args, **node.kwargs).arguments
    except TypeError:
        return None
    if a.get("input") is not x or tuple(a.get("normalized_shape", ())) != (e,):
        return None
    w, b, eps = a.get("weight"), a.get("bias"), a.get("eps", 1e-5)
    if not _vector(w, e, dtype) or not _vector(b, e, dtype) or type(eps) is not float:
        return None
    return w, b, eps


def _vector(v, n: int, dtype) -> bool:
    meta = _meta(v)
    return meta is not None and meta.shape == (n,) and meta.dtype == dtype


def _linear(node: Optional[Node], x: Node, dtype):
    """``(weight, bias)`` when ``node`` is ``linear(x, weight, bias)`` with a bias."""
    if node is None or node.op != "linear" or node.kwargs or len(node.args) != 3 or \
            node.args[0] is not x:
        return None
    w, b = node.args[1:]
    wm = _meta(w)
    if wm is None or len(wm.shape) != 2 or wm.dtype != dtype or not _vector(b, wm.shape[0], dtype):
        return None
    return w, b


def _activation(node: Optional[Node], x: Node) -> Optional[bool]:
    """``use_gelu`` (False: relu) when ``node`` is ``relu(x)`` or exact ``gelu(x)``."""
    if node is None or len(node.args) != 1 or node.args[0] is not x:
        return None
    if node.op == "relu" and node.kwargs.get("inplace", False) is False and \
            set(node.kwargs) <= {"inplace"}:
        return False
    if node.op == "gelu" and node.kwargs.get("approximate", "none") == "none" and \
            set(node.kwargs) <= {"approximate"}:
        return True
    return None


def _feed_forward(uses: Uses, y: Node, dtype):
    """``(l1, use_gelu, w1, b1, w2, b2, l2)``: ``linear2(act(linear1(y)))`` read by ``y``'s
    reader ``l1`` only as far as ``l2``."""
    l1 = next((r for r in uses.readers(y) if r.op == "linear" and r.args[:1] == (y,)), None)
    lin1 = _linear(l1, y, dtype)
    if lin1 is None:
        return None
    act = _only(uses, l1)
    use_gelu = _activation(act, l1)
    if use_gelu is None:
        return None
    l2 = _only(uses, act)
    lin2 = _linear(l2, act, dtype)
    if lin2 is None:
        return None
    return (l1, use_gelu) + lin1 + lin2 + (l2,)


def _layer(mha: Node, uses: Uses):
    """``(the layer's result node, the encoder_layer node's arguments)``, or None."""
    call = _plain_call(mha, uses)
    if call is None:
        return None
    query, heads, w_in, b_in, w_out, b_out, masks = call
    if masks != (None, None, False, None) or heads % 2 or b_in is None or b_out is None or \
            _SIGNATURE.bind(*mha.args, **mha.kwargs).arguments.get("training") is not False:
        return None                     # (train mode: eager's slow path, even without dropout)
    source = _swapped(query)             # batch-first: yᵀ in, the result turned back
    if source is None or any(r is not mha for r in uses.readers(query)) or \
            uses.out_count.get(id(query)):
        return None
    meta = _meta(source)
    _, _, e = meta.shape
    get = _only(uses, mha)
    back = _only(uses, get) if get is not None else None
    if back is None or _swapped(back) is not get:
        return None
    add1 = _only(uses, back)
    x = _add_of(add1, back)
    if x is None:
        return None
    dtype = meta.dtype
    if x is source:                     # post-norm: LN1(x + sa(x)), LN2(n1 + ff(n1))
        n1 = _only(uses, add1)
        norm1 = _norm(n1, add1, e, dtype)
        if norm1 is None or len(uses.readers(n1)) != 2 or uses.out_count.get(id(n1)):
            return None
        ff = _feed_forward(uses, n1, dtype)
        if ff is None:
            return None
        add2 = _only(uses, ff[-1])
        if _add_of(add2, ff[-1]) is not n1:
            return None
        n2 = _only(uses, add2)
        norm2 = _norm(n2, add2, e, dtype)
        out, norm_first = n2, False
    else:                               # pre-norm: a1 = x + sa(LN1(x)), a1 + ff(LN2(a1))
        norm1 = _norm(source, x, e, dtype)
        if norm1 is None or _only(uses, source) is not query or \
                len(uses.readers(add1)) != 2 or uses.out_count.get(id(add1)):
            return None
        n2 = next((r for r in uses.readers(add1) if r.op == "layer_norm"), None)
        norm2 = _norm(n2, add1, e, dtype)
        if norm2 is None:
            return None
        ff = _feed_forward(uses, n2, dtype)
        if ff is None or _only(uses, n2) is not ff[0]:
            return None
        out = _only(uses, ff[-1])
        if _add_of(out, ff[-1]) is not add1:
            return None
        norm_first = True
    if norm2 is None or norm1[2] != norm2[2]:
        return None
    _, use_gelu, w1, b1, w2, b2, _ = ff
    return out, (x, heads, w_in, b_in, w_out, b_out, use_gelu, norm_first, norm1[2],
                 norm1[0], norm1[1], norm2[0], norm2[1], w1, b1, w2, b2)


@register
def encoder_layer(x, heads, w_in, b_in, w_out, b_out, use_gelu, norm_first, eps,
                  n1_w, n1_b, n2_w, n2_b, w1, b1, w2, b2):
    """One ``nn.TransformerEncoderLayer`` (eval, batch-first, no masks): eager's fused op
    where eager would call it now, else the slow path's ops."""
    weights = (w_in, b_in, w_out, b_out, n1_w, n1_b, n2_w, n2_b, w1, b1, w2, b2)
    if _fast_path(x, weights):
        return torch._transformer_encoder_layer_fwd(
            x, x.shape[-1], heads, w_in, b_in, w_out, b_out, use_gelu, norm_first, eps,
            n1_w, n1_b, n2_w, n2_b, w1, b1, w2, b2, None, None)
    return _slow_path(x, heads, weights, use_gelu, norm_first, eps)


def _fast_path(x, weights) -> bool:
    """Eager's run-time conditions for the fused op (those the trace could not decide)."""
    if not torch.backends.mha.get_fastpath_enabled() or torch.is_autocast_enabled():
        return False
    tensors = (x,) + weights
    if torch.overrides.has_torch_function(tensors) or \
            any(t.device.type not in _DEVICES for t in tensors):
        return False
    return not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors))


def _slow_path(x, heads, weights, use_gelu, norm_first, eps):
    """The layer's own Python path (``_sa_block``, ``_ff_block``, the norms) in eval mode."""
    w_in, b_in, w_out, b_out, n1_w, n1_b, n2_w, n2_b, w1, b1, w2, b2 = weights
    e = x.shape[-1]
    act = F.gelu if use_gelu else F.relu

    def sa(y):
        t = y.transpose(1, 0)
        return F.multi_head_attention_forward(
            t, t, t, e, heads, w_in, b_in, None, None, False, 0.0, w_out, b_out,
            training=False, need_weights=False)[0].transpose(1, 0)

    def ff(y):
        return F.linear(act(F.linear(y, w1, b1)), w2, b2)

    if norm_first:
        x = x + sa(F.layer_norm(x, (e,), n1_w, n1_b, eps))
        return x + ff(F.layer_norm(x, (e,), n2_w, n2_b, eps))
    x = F.layer_norm(x + sa(x), (e,), n1_w, n1_b, eps)
    return F.layer_norm(x + ff(x), (e,), n2_w, n2_b, eps)
