"""A 2-D convolution with an eval-mode batch norm folded into its weights, and an epilogue.

``FoldedConv(act, residual)`` is the target of the ``conv_bn`` nodes that
``passes/fold_batchnorm.py`` makes and ``passes/conv_epilogue.py`` extends. A call
computes what eager computes as::

    y = F.batch_norm(torch.conv2d(x, w, b, stride, padding, dilation, groups),
                     running_mean, running_var, weight, bias, False, 0.0, eps)
    y = y + other                       # residual (eager: add / add_ on the fresh y)
    y = act(y)                          # relu, relu6, hardswish, hardsigmoid, silu

but, where autograd records nothing (grad mode off, or no tensor requires grad), as one
convolution with ``w * s`` and ``(b - running_mean) * s + bias``, ``s = weight /
sqrt(running_var + eps)`` (the batch norm's own per-channel scale), the activation done
in place on the convolution's fresh result.

The folded weights are computed once and kept, keyed by each source tensor's version
counter and data pointer: an in-place change (``p.mul_()`` under no_grad, an optimizer
step, ``load_state_dict``, ``nn.init``) bumps the version, a rebinding (``p.data = t``)
moves the data pointer (the storages of the last fold are kept alive, so a new tensor
cannot land on the same address), and either refolds on the next call. Some writes bypass
the version counter: a train-mode batch norm under no_grad updates its running statistics
in place without bumping it (torch's own kernel, as our graphs' C kernel), and so does a
write through ``p.data`` (``p.data.mul_(2)``). So every source of at most
``MAX_SOURCE_ELEMENTS`` elements (the norm's vectors always, small convolution weights
too) is also compared byte for byte with a copy kept from the fold, on every call, as
``folded_values`` does (~1 us each). A write through ``.data`` into a larger convolution
weight is not seen (comparing it would cost about what the convolution does):
``options.fold_batchnorm = False`` turns folding off for code that does that.

Float32 weights of at least ``MIN_PACKED`` elements (2^18) are also reordered, once per fold,
into oneDNN's own layout (``torch.ops.mkldnn._reorder_convolution_weight``, as
inductor does), and the convolution runs as ``mkldnn._convolution_pointwise`` on them:
``conv2d`` reorders the weight on every call, which for small images costs more than the
arithmetic (resnet18's 512-channel layers: about 4x faster at batch 1). Only the convolution and
bias run there: oneDNN's fused relu/hardsigmoid turn NaN into 0, so the activation
and residual add stay torch's, in place. Contiguous, non-empty inputs only; the result
gets eager's strides.

With ``channels_last`` (set by ``passes/channels_last.py`` on chains of these nodes) the
folded path converts its input to channels-last (nothing to do when it is already) and
keeps its folded weight channels-last; its result is channels-last, which the pass turns
back to eager's layout where the chain ends.

The folded path is taken only when it means the same as eager: float32/float64 tensors
of one dtype and device, every source value finite and the folded ones too (a scale of
Inf would turn ``0 * Inf`` into NaN where eager's ``x * Inf`` is not), shapes as a
batch norm after that convolution needs them. Anything else runs eager's ops, which
also raise eager's errors.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from ..folded_values import MAX_SOURCE_ELEMENTS, SourceCopy
from .depthwise import Depthwise
from .conv_params import int_pair as _pair

_FLOATS = (torch.float32, torch.float64)
MIN_PACKED = 1 << 18    # weight elements from which the packed oneDNN convolution is used


def _hardswish_(y):
    return F.hardswish(y, inplace=True)


def _hardsigmoid_(y):
    return F.hardsigmoid(y, inplace=True)


def _silu_(y):
    return F.silu(y, inplace=True)


def _relu6_(y):
    return F.hardtanh(y, 0.0, 6.0, inplace=True)


# activation name -> (in-place form for the fresh result, eager form)
ACTIVATIONS = {
    "relu": (torch.relu_, torch.relu),
    "relu6": (_relu6_, F.relu6),
    "hardswish": (_hardswish_, F.hardswish),
    "hardsigmoid": (_hardsigmoid_, F.hardsigmoid),
    "silu": (_silu_, F.silu),
}


def _key(tensors) -> tuple:
    key = []
    for t in tensors:
        key.append(t._version)
        key.append(t.data_ptr())
    return tuple(key)


def _copies(tensors) -> tuple:
    """(position, bytes) of every source small enough to compare on each call."""
    return tuple((i, SourceCopy(t)) for i, t in enumerate(tensors)
                 if t.numel() <= MAX_SOURCE_ELEMENTS)


def _unchanged(state, key, tensors) -> bool:
    return state[0] == key and all(c.same(tensors[i]) for i, c in state[4])


class FoldedConv:
    """``conv2d -> batch_norm(eval) [-> + other] [-> act]`` with the norm folded; see the
    module docstring. Arguments: ``(x, w, b, running_mean, running_var, weight, bias,
    stride, padding, dilation, groups, eps[, other])``; ``b``, ``weight``, ``bias`` may
    be None."""

    def __init__(self, act: Optional[str] = None, residual: bool = False,
                 channels_last: bool = False):
        if act is not None and act not in ACTIVATIONS:
            raise ValueError(f"unknown activation {act!r}")
        self.act = act
        self.residual = residual
        # ``passes/channels_last.py``: run the folded convolution on a channels-last input
        # with channels-last weights (its result channels-last too)
        self.channels_last = channels_last
        self.__name__ = "conv_bn" + (("_add" if residual else "") +
                                     (f"_{act}" if act else ""))
        # (key, (weight, bias) or None where not foldable, the weight in oneDNN's layout
        # or None, the storages folded from: kept alive so their addresses stay unique,
        # the small sources' bytes when folded)
        self._state = (None, None, None, (), ())

    def with_epilogue(self, act: Optional[str], residual: bool) -> "FoldedConv":
        return FoldedConv(act, residual, self.channels_last)

    def in_channels_last(self) -> "FoldedConv":
        return FoldedConv(self.act, self.residual, True)

    def __repr__(self) -> str:
        return f"FoldedConv({self.act!r}, residual={self.residual}" + \
            (", channels_last=True)" if self.channels_last else ")")

    def __call__(self, x, w, b, rm, rv, g, beta, stride, padding, dilation, groups, eps,
                 other=None):
        sources = tuple(t for t in (w, b, rm, rv, g, beta) if t is not None)
        if torch.is_grad_enabled() and (x.requires_grad or any(t.requires_grad for t in sources)
                                        or (other is not None and other.requires_grad)):
            return self.eager(x, w, b, rm, rv, g, beta, stride, padding, dilation, groups,
                              eps, other)
        key = _key(sources)
        state = self._state             # one tuple: threads sharing the graph see one fold
        if not _unchanged(state, key, sources):
            copies = _copies(sources)             # before: a source read as it is now
            folded = _fold(w, b, rm, rv, g, beta, eps)
            if folded is not None and self.channels_last and w.is_contiguous():
                folded = (folded[0].contiguous(memory_format=torch.channels_last), folded[1])
            packed = None if folded is None else \
                _pack(folded[0], x, stride, padding, dilation, groups)
            if packed is None and folded is not None and self.channels_last:
                packed = Depthwise.make(folded[0], stride, padding, dilation, groups)
            state = self._state = (key, folded, packed,
                                   tuple(t.untyped_storage() for t in sources), copies)
        _, folded, packed, _, _ = state
        if folded is None or x.dtype != folded[0].dtype or x.device != folded[0].device:
            return self.eager(x, w, b, rm, rv, g, beta, stride, padding, dilation, groups,
                              eps, other)
        cl = self.channels_last and x.dim() == 4 and w.is_contiguous()
        if cl:
            x = x.contiguous(memory_format=torch.channels_last)    # itself when it is
            if type(packed) is Depthwise:           # its own C loop, epilogue included
                y = packed(x, folded[1], other, self.act)
                if y is not None:
                    return y
                packed = None
        if packed is not None and (cl or x.is_contiguous()) and w.is_contiguous() and \
                x.numel():
            y = _packed_conv(x, packed, folded[1], stride, padding, dilation, groups, cl)
        else:
            y = torch.conv2d(x, folded[0], folded[1], stride, padding, dilation, groups)
        if other is not None:
            if other.shape != y.shape or other.dtype != y.dtype:
                return self.eager(x, w, b, rm, rv, g, beta, stride, padding, dilation,
                                  groups, eps, other)
            y.add_(other)
        if self.act is not None:
            y = ACTIVATIONS[self.act][0](y)
        return y

    def eager(self, x, w, b, rm, rv, g, beta, stride, padding, dilation, groups, eps,
              other=None):
        """Eager's own ops, in eager's order."""
        y = F.batch_norm(torch.conv2d(x, w, b, stride, padding, dilation, groups),
                         rm, rv, g, beta, False, 0.0, eps)
        if other is not None:
            y = y + other
        if self.act is not None:
            y = ACTIVATIONS[self.act][1](y)
        return y


def _fold(w, b, rm, rv, g, beta, eps):
    """(w * s, (b - rm) * s + beta) or None where folding would not mean the same."""
    sources = [t for t in (w, b, rm, rv, g, beta) if t is not None]
    dtype, device = w.dtype, w.device
    if dtype not in _FLOATS or any(t.dtype != dtype or t.device != device for t in sources):
        return None
    if w.dim() != 4 or any(t.dim() != 1 or t.shape[0] != w.shape[0] for t in sources[1:]):
        return None
    with torch.no_grad():
        if not all(bool(torch.isfinite(t).all()) for t in sources):
            return None
        scale = torch.sqrt(rv + eps).reciprocal_()      # as the batch norm kernel: 1/sqrt
        if g is not None:
            scale = scale * g
        weight = w * scale.reshape(-1, 1, 1, 1)            # keeps w's memory format
        shift = -rm * scale if b is None else (b - rm) * scale
        bias = shift if beta is None else shift + beta
        if not (bool(torch.isfinite(weight).all()) and bool(torch.isfinite(bias).all())):
            return None
    return weight, bias


def _pack(weight, x, stride, padding, dilation, groups):
    """``weight`` reordered once for oneDNN's convolution, or None where the plain
    ``conv2d`` is used: not float32 on the CPU, a string padding, or a weight smaller than
    ``MIN_PACKED`` elements. Measured per convolution (1 thread, CPU time, 64x64 images):
    the packed call costs ~100 us more per call (input reorder, result copy), so it wins
    only where ``conv2d``'s per-call weight reorder is large: 3x3 256->256 on 4x4 1.4x,
    512->512 on 2x2 3.9x at batch 1; 128->128 on 8x8 0.87x, 1x1 convolutions 0.1-0.9x."""
    params = [_pair(stride), _pair(padding), _pair(dilation)]
    if weight.dtype != torch.float32 or weight.device.type != "cpu" or None in params or \
            type(groups) is not int or weight.numel() < MIN_PACKED or \
            not torch.backends.mkldnn.is_available() or not (
                weight.is_contiguous() or
                weight.is_contiguous(memory_format=torch.channels_last)):
        return None
    stride, padding, dilation = params
    try:
        return torch.ops.mkldnn._reorder_convolution_weight(
            weight, padding, stride, dilation, groups, list(x.shape))
    except (RuntimeError, AttributeError):
        return None


def _packed_conv(x, packed, bias, stride, padding, dilation, groups, channels_last=False):
    """oneDNN's convolution with the packed weight; its result (which oneDNN lays out
    channels last) copied to the strides eager's ``conv2d`` gives a contiguous input,
    unless ``channels_last``."""
    y = torch.ops.mkldnn._convolution_pointwise(
        x, packed, bias, _pair(padding), _pair(stride), _pair(dilation), groups,
        "none", [], "")
    if channels_last:
        return y
    n, c, h, w = y.shape
    if y.stride() != (c * h * w, h * w, w, 1):
        y = y.clone(memory_format=torch.contiguous_format)
    return y
