"""``nn.TransformerEncoder``'s nested-tensor path, as eager takes it, for a traced call.

In eval, with a ``src_key_padding_mask`` and no ``mask``, under the fused op's conditions
(fast path enabled, no autocast, no autograd recording, CPU/CUDA, plain tensors; the first
layer a batch-first post-norm ``TransformerEncoderLayer`` with an even head count, which
``use_nested_tensor`` records), eager's ``TransformerEncoder.forward`` asks whether the
mask is left-aligned (each sequence's padding at its end: a question about the mask's
values). If so it packs the batch into a nested tensor, runs the layers on it and pads the
result back with zeros: padded positions come out 0 (the final ``norm``'s bias when it has
one), where the dense path computes values there. Traced torch code could not take that
path (its left-alignment question fell back, or, converted, was skipped as under
torch.compile: silently different).

``forward`` here is the encoder's forward, written for a trace: the layers run densely with
the padding mask (the same values at the sequences' own positions, and the layers' own
fast-path semantics, ``runtime.attention_fast_path``), then ``nested_padding`` zeroes the
padded positions wherever eager would have taken the nested path when the graph runs: the
conditions above and the left-alignment of that call's mask. Calls route here from
converted code (``calls.call``) and for ``to_graph(encoder)`` itself; an encoder with
forward hooks, or a subclass, runs torch's own forward (whose data question falls back).
"""
from __future__ import annotations

import types
from typing import Optional

import torch
import torch.nn.functional as F
from torch.nn.modules.transformer import _detect_is_causal_mask, _get_seq_len

from .attention_fast_path import layer_tensors, takes_fast_path
from .errors import GraphError
from .graph_ops import register
from .source_info import format_location, user_location
from .symbolic import contains_symbolic, dispatch_record


def forward_of(module) -> Optional[types.MethodType]:
    """``forward`` bound to ``module`` when it is an ``nn.TransformerEncoder`` with torch's
    forward (the caller runs its hooks around it); else None."""
    if not isinstance(module, torch.nn.TransformerEncoder) or \
            type(module).forward is not torch.nn.TransformerEncoder.forward:
        return None
    return types.MethodType(forward, module)


def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
    """``TransformerEncoder.forward`` (torch 2.13's), the nested path staged as
    ``nested_padding``."""
    src_key_padding_mask = F._canonical_mask(
        mask=src_key_padding_mask, mask_name="src_key_padding_mask",
        other_type=F._none_or_dtype(mask), other_name="mask", target_type=src.dtype)
    mask = F._canonical_mask(mask=mask, mask_name="mask", other_type=None, other_name="",
                             target_type=src.dtype, check_other=False)
    first = self.layers[0]
    nested = _may_nest(self, first, src, mask, src_key_padding_mask)
    seq_len = _get_seq_len(src, first.self_attn.batch_first)
    is_causal = _detect_is_causal_mask(mask, is_causal, seq_len)
    output = src
    for mod in self.layers:
        output = mod(output, src_mask=mask, is_causal=is_causal,
                     src_key_padding_mask=src_key_padding_mask)
    if nested:
        args = (output, src_key_padding_mask.logical_not(), (src,) + layer_tensors(first))
        output = dispatch_record(nested_padding, args, {}) if contains_symbolic(args) else \
            nested_padding(*args)
    if self.norm is not None:
        output = self.norm(output)
    return output


def _may_nest(self, first, src, mask, padding) -> bool:
    """Eager's conditions for the nested path that a trace can decide (the rest are
    ``nested_padding``'s, when the graph runs)."""
    if not getattr(self, "use_nested_tensor", False) or first.training or src.dim() != 3 \
            or padding is None:
        return False
    if not getattr(self, "mask_check", True):
        raise GraphError(f"{format_location(user_location())}: nn.TransformerEncoder with "
                         f"mask_check=False reads any padding mask as left-aligned on its "
                         f"nested-tensor path; a graph does not repeat that")
    return mask is None


@register
def nested_padding(output, valid, tensors):
    """``output`` as eager's nested path leaves it: zeros where ``valid`` is False, when
    eager takes that path now (its conditions hold and ``valid`` is left-aligned)."""
    if not takes_fast_path(tensors) or \
            not torch._nested_tensor_from_mask_left_aligned(tensors[0], valid):
        return output
    return output.masked_fill(valid.logical_not().unsqueeze(-1), 0.0)
