"""A convolution over non-overlapping patches (a ViT's patch embedding) becomes one matrix
product.

Rule: ``conv2d(x, w, b, stride=(kh, kw), padding=0, dilation=1, groups=1)`` with ``w`` of
shape ``(O, C, kh, kw)``, ``kh * kw > 1`` and ``stride == (kh, kw)``, over a float
``x`` of static shape ``(B, C, H, W)`` with ``H % kh == W % kw == 0``, reads each input
element once: it is the product of the patches by the flattened kernels,

    patches = x.reshape(B, C, Ho, kh, Wo, kw).permute(0, 2, 4, 1, 3, 5)
               .reshape(B * Ho * Wo, C * kh * kw)
    out = linear(patches, w.reshape(O, C * kh * kw), b)          # (B * Ho * Wo, O)
    out = out.view(B, Ho, Wo, O).permute(0, 3, 1, 2).contiguous()

the last copy giving eager's contiguous ``(B, O, Ho, Wo)`` layout (a ``view`` of the
product when ``O == 1`` or ``Ho * Wo == 1``, whose rows are already in that order: eager's
strides exactly). The node's target (``patch_conv2d``) checks at run time that ``x`` and
``w`` are contiguous and runs the convolution itself otherwise (a channels-last input
gives eager a channels-last result). The library GEMM is
several times cheaper than the convolution at these sizes (torchvision ViT's 8x8 patch
embedding of a 32x32 image: ~2.4x, 1 thread). The same products, summed in the GEMM's
order instead of the convolution's: results agree to float rounding. ``1x1`` kernels
(pointwise convolutions in CNNs, which the conv passes fuse) and overlapping, padded,
dilated or grouped convolutions are left alone.
"""
from __future__ import annotations

from typing import Optional

import torch

from ..graph import Graph, Node
from ..graph_ops import register
from ..meta import TensorMeta
from .patterns import _conv_args
from .rewrite import Uses, graphs_post_order, has_effect, replace_with_new
from ..kernels.conv_params import int_pair as _pair


def patch_conv(graph: Graph) -> Graph:
    """Replace every patch convolution, in every graph."""
    for g in graphs_post_order(graph):
        uses = None
        for node in list(g.nodes):
            if node.op != "conv2d":
                continue
            shape = _patch_shape(node)
            if shape is not None:
                uses = uses or Uses(g)
                _replace(node, uses, *shape)
    return graph


def _static(value) -> Optional[TensorMeta]:
    meta = value.meta if isinstance(value, Node) else None
    return meta if isinstance(meta, TensorMeta) and meta.is_static else None


def _patch_shape(node: Node):
    """``(x, w, b, B, C, H, W, O, kh, kw)`` for a patch convolution, else None."""
    args = _conv_args(node)
    if args is None or has_effect(node):
        return None
    x, w, b, stride, padding, dilation, groups = args
    xm, wm, om = _static(x), _static(w), _static(node)
    if xm is None or wm is None or om is None or len(xm.shape) != 4 or len(wm.shape) != 4:
        return None
    if not xm.dtype.is_floating_point or wm.dtype != xm.dtype or om.dtype != xm.dtype:
        return None
    if b is not None and (_static(b) is None or _static(b).shape != (wm.shape[0],)
                          or _static(b).dtype != xm.dtype):
        return None
    (n, c, h, wd), (o, ci, kh, kw) = xm.shape, wm.shape
    if ci != c or kh * kw <= 1 or _pair(stride) != (kh, kw) or groups != 1 or \
            _pair(dilation) != (1, 1) or _pair(padding) != (0, 0) or h % kh or wd % kw:
        return None
    if om.shape != (n, o, h // kh, wd // kw):
        return None
    return x, w, b, n, c, h, wd, o, kh, kw


@register
def patch_conv2d(x, w, b, kh: int, kw: int):
    """``conv2d(x, w, b, stride=(kh, kw))`` as one matrix product of the patches; the
    convolution itself when ``x`` or ``w`` is not contiguous (a channels-last input gives
    a channels-last result in eager)."""
    if not (x.is_contiguous() and w.is_contiguous()):
        return torch.conv2d(x, w, b, (kh, kw))
    n, c, h, wd = x.shape
    o, ho, wo = w.shape[0], h // kh, wd // kw
    patches = x.view(n, c, ho, kh, wo, kw).permute(0, 2, 4, 1, 3, 5) \
        .reshape(n * ho * wo, c * kh * kw)
    prod = torch._C._nn.linear(patches, w.view(o, c * kh * kw), b)
    if o == 1 or ho * wo == 1:          # the rows are already in (B, O, Ho, Wo) order
        return prod.view(n, o, ho, wo)
    return prod.view(n, ho, wo, o).permute(0, 3, 1, 2).contiguous()


def _replace(node: Node, uses: Uses, x, w, b, n, c, h, wd, o, kh, kw) -> None:
    replace_with_new(uses, node, "patch_conv2d", patch_conv2d, (x, w, b, kh, kw))
