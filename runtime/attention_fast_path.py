"""torch.nn's attention fast paths, as eager takes them, for calls traced into a graph.

``nn.MultiheadAttention.forward`` and ``nn.TransformerEncoderLayer.forward`` call one fused
op (``torch._native_multi_head_attention``, ``torch._transformer_encoder_layer_fwd``)
when their conditions hold: eval, batch-first self-attention, an even head count, fast
path enabled, no autocast, CPU/CUDA tensors, no autograd recording, and no argument with
``__torch_function__``. A trace always fails the last one (its tensors have it), so the
graph held the Python path (``F.multi_head_attention_forward``), whose results differ from
the fused op's beyond rounding in two ways (measured on torch 2.13, CPU):

- a query row whose every key is masked (a fully padded sequence, a full row of
  ``attn_mask``, or both together) comes out NaN from the fused op (``need_weights=False``,
  as the encoder layer always asks), finite from the Python path;
- the fused op applies the masks as given and ignores the ``is_causal`` hint (with no mask,
  no causal mask at all), where the Python path may drop a given mask for a causal one,
  or raise when there is no mask.

When ``F.multi_head_attention_forward`` is traced, ``traced_attention`` looks at the
asking frames: ``MultiheadAttention.forward`` (or the ``TransformerEncoderLayer.forward``
around it) that passed every condition but ``has_torch_function``. There the call is
recorded with ``is_causal=False`` and its output goes through ``fast_path_rows``, which
sets eager's NaN rows wherever eager's remaining conditions (fast path enabled, no
autocast, devices, autograd) hold when the graph runs, as the fused op's caller decides.
A call eager would not take fast is recorded as before.
"""
from __future__ import annotations

import inspect
import os
import sys
from typing import Optional, Tuple

import torch
import torch.nn.functional as F

from .graph_ops import register
from .source_info import map_location

BLOCKED = "some Tensor argument has_torch_function"     # torch's reason, in both modules
_SIGNATURE = inspect.signature(F.multi_head_attention_forward)
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_OWN = tuple(os.path.join(_ROOT, d) + os.sep for d in ("runtime", "transpiler"))
_MAX_DEPTH = 16         # frames between the dispatch and MultiheadAttention.forward
_LAYER_DEPTH = 8        # frames between MultiheadAttention.forward and the layer's forward


def devices():
    """The device types torch's fast paths accept (torch's own list)."""
    return ("cpu", "cuda", "xpu", torch.utils.backend_registration._privateuse1_backend_name)


def takes_fast_path(tensors) -> bool:
    """Eager's run-time conditions for a fused transformer op over ``tensors`` (the input
    and the weights it reads), as torch's modules check them."""
    if not torch.backends.mha.get_fastpath_enabled() or torch.is_autocast_enabled():
        return False
    if torch.overrides.has_torch_function(tensors) or \
            any(t.device.type not in devices() for t in tensors):
        return False
    return not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors))


def layer_tensors(layer) -> tuple:
    """The weights ``TransformerEncoderLayer.forward`` checks (after its input)."""
    attn = layer.self_attn
    return (attn.in_proj_weight, attn.in_proj_bias, attn.out_proj.weight,
            attn.out_proj.bias, layer.norm1.weight, layer.norm1.bias, layer.norm2.weight,
            layer.norm2.bias, layer.linear1.weight, layer.linear1.bias,
            layer.linear2.weight, layer.linear2.bias)


class _Function:
    """Where a torch function's frames are: its own code, or code converted from it (whose
    lines map back into its source)."""

    def __init__(self, fn):
        self.code = fn.__code__
        lines, first = inspect.getsourcelines(fn)
        self.file, self.lines = self.code.co_filename, range(first, first + len(lines))

    def runs(self, frame) -> bool:
        if frame.f_code is self.code:
            return True
        where = map_location(frame.f_code.co_filename, frame.f_lineno) \
            if frame.f_code.co_filename != self.file else None
        return where is not None and where[0] == self.file and where[1] in self.lines


_MHA = _Function(torch.nn.MultiheadAttention.forward)
_LAYER = _Function(torch.nn.TransformerEncoderLayer.forward)


def _find(frame, function: _Function, depth: int):
    """The frames running ``function`` (natively; or converted: its branches' frames and
    the tograph frames between them), starting at most ``depth`` frames above ``frame``;
    else None."""
    for _ in range(depth):
        if frame is None:
            return None
        if function.runs(frame):
            found = []
            while frame is not None and (function.runs(frame) or
                                             frame.f_code.co_filename.startswith(_OWN)):
                found.append(frame)
                frame = frame.f_back
            return found
        frame = frame.f_back
    return None


def _local(frames, name: str, kind: type):
    """``name``'s value of type ``kind`` in the first of ``frames`` that holds one
    (converted branches keep the function's variables in enclosing frames, and pass
    markers for values they do not read)."""
    for frame in frames:
        value = frame.f_locals.get(name)
        if isinstance(value, kind):
            return value
    return None


def _eager_fast(start) -> Optional[tuple]:
    """The tensors whose run-time state decides eager's fused op, when the frames above
    ``start`` show a caller that took every other turn toward it; else None."""
    frames = _find(start, _MHA, _MAX_DEPTH)
    if frames is None:
        return None
    mha = _local(frames, "self", torch.nn.MultiheadAttention)
    if mha is None:
        return None
    if _local(frames, "why_not_fast_path", str) == BLOCKED:
        return (_local(frames, "query", torch.Tensor), mha.in_proj_weight, mha.in_proj_bias,
                mha.out_proj.weight, mha.out_proj.bias)
    outer = _find(frames[-1].f_back, _LAYER, _LAYER_DEPTH)
    if outer is None:
        return None
    layer = _local(outer, "self", torch.nn.TransformerEncoderLayer)
    if getattr(layer, "self_attn", None) is not mha or \
            _local(outer, "why_not_sparsity_fast_path", str) != BLOCKED:
        return None
    return (_local(outer, "src", torch.Tensor),) + layer_tensors(layer)


def traced_attention(args, kwargs):
    """``F.multi_head_attention_forward`` traced as the eager call asking it runs."""
    from .symbolic import dispatch_record
    tensors = _eager_fast(sys._getframe(1))
    if tensors is None:
        return dispatch_record(F.multi_head_attention_forward, args, kwargs)
    bound = _SIGNATURE.bind(*args, **kwargs)
    a = bound.arguments
    if a.get("is_causal"):
        a["is_causal"] = False          # (the fused op applies the masks as given)
    result = dispatch_record(F.multi_head_attention_forward, bound.args, bound.kwargs)
    masks = (a.get("attn_mask"), a.get("key_padding_mask"))
    if a.get("need_weights", True) or masks == (None, None):
        return result
    out = dispatch_record(fast_path_rows, (result[0],) + masks + (a["num_heads"], tensors), {})
    return (out,) + tuple(result[1:])


def fully_masked(attn_mask, key_padding_mask, heads: int, batch: int) -> torch.Tensor:
    """``(batch, queries)`` bool: rows whose every key some head masks (bool True or
    float -inf, the masks ``F.multi_head_attention_forward`` takes)."""
    masked = []
    for m in (attn_mask, key_padding_mask):
        masked.append(None if m is None else m if m.dtype == torch.bool else m == float("-inf"))
    attn, pad = masked
    if attn is not None:
        attn = attn.view(batch, heads, *attn.shape[-2:]) if attn.dim() == 3 else attn[None, None]
    if pad is not None:
        pad = pad.view(batch, 1, 1, pad.shape[-1])
    both = pad if attn is None else attn if pad is None else attn | pad
    return both.all(-1).any(1)


@register
def fast_path_rows(out, attn_mask, key_padding_mask, heads: int,
                   tensors: Tuple[torch.Tensor, ...]):
    """``out`` (queries, batch, embed) as eager's fused attention gives it: NaN in the rows
    whose every key is masked, where eager takes the fused op now."""
    if not takes_fast_path(tensors):
        return out
    rows = fully_masked(attn_mask, key_padding_mask, heads, out.shape[1])   # (batch|1, q|1)
    if not rows.any():
        return out                      # (no such row: no copy)
    return out.masked_fill(rows.transpose(0, 1).unsqueeze(-1), float("nan"))
