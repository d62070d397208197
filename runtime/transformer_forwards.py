"""The forward a trace runs for torch.nn's transformer modules.

``to_graph(module)`` converts the module's ``forward``, and converted code calls torch's
modules natively; for some of torch's own that loses eager's fast-path semantics (``runtime.attention_fast_path``, ``runtime.encoder_nested_path``):

- ``nn.TransformerEncoder``: its nested-tensor path is a question about the padding mask's
  values; ``encoder_nested_path.forward`` stages it instead.
- ``nn.Transformer`` called from converted code: converted (as ``to_graph`` converts it),
  so that its encoder's call routes to the staged forward (natively, torch's forward
  would ask its question and fall back).
- ``nn.TransformerEncoderLayer`` called by ``to_graph``: converted, its fast-path reason is a dead variable by the
  time the slow path runs (conversion drops it), so the attention inside could not see
  that eager would have run the fused op. It runs unconverted, as it does when a user's
  module calls it (no tensor-dependent Python control flow in it to convert).
"""
from __future__ import annotations

import inspect
import types
from typing import Optional

import torch

from . import encoder_nested_path


def _native(fn):
    """A function calling ``fn`` (torch's forward) unconverted, with its signature."""
    def forward(self, *args, **kwargs):
        return fn(self, *args, **kwargs)
    forward.__signature__ = inspect.signature(fn)
    forward.__qualname__ = fn.__qualname__
    return forward


_LAYER_FORWARD = _native(torch.nn.TransformerEncoderLayer.forward)


def forward_of(module) -> Optional[types.MethodType]:
    """The forward to convert for ``module`` called by ``to_graph``, where it is not the
    module's own; else None."""
    staged = encoder_nested_path.forward_of(module)
    if staged is not None:
        return staged
    if isinstance(module, torch.nn.TransformerEncoderLayer) and \
            type(module).forward is torch.nn.TransformerEncoderLayer.forward:
        return types.MethodType(_LAYER_FORWARD, module)
    return None


def called_forward(module, converter) -> Optional[types.MethodType]:
    """The forward a call of ``module`` from converted code runs, where it is not torch's
    natively (``converter``: the recursive converter); else None."""
    staged = encoder_nested_path.forward_of(module)
    if staged is not None:
        return staged
    if isinstance(module, torch.nn.Transformer) and \
            type(module).forward is torch.nn.Transformer.forward:
        return converter(module.forward)
    return None
