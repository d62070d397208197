"""Calls of TorchScript functions and modules while tracing.

``@torch.jit.script`` helpers are common in code written before torch.compile (fused
bias+GELU, activation helpers, ``jit.script``-ed modules). The TorchScript interpreter does
not dispatch through ``__torch_function__``: called with traced tensors it computes on
their placeholder storage, and its result (garbage, a constant) would be baked into the
graph silently. A scripted *function* keeps its Python original (``_torchdynamo_inline``,
as torch.compile inlines it): the call goes to that, converted like any user function. A
scripted *module* (or a function without its original) called with a traced tensor
refuses the trace, naming the line.
"""
from __future__ import annotations

import torch

from ..errors import GraphError
from ..source_info import format_location, user_location
from ..symbolic import contains_symbolic

_SCRIPTED = (torch.jit.ScriptFunction, torch.jit.ScriptModule)


def unscripted(f, args, kwargs):
    """``f`` itself, or the Python function a scripted function was made from; raises
    ``GraphError`` for TorchScript that would run on traced tensors."""
    if not isinstance(f, _SCRIPTED):
        return f
    original = getattr(f, "_torchdynamo_inline", None)
    if isinstance(f, torch.jit.ScriptFunction) and callable(original):
        return original
    if contains_symbolic(list(args)) or contains_symbolic(dict(kwargs)):
        name = getattr(f, "qualified_name", None) or getattr(f, "original_name", None) or f
        raise GraphError(f"{format_location(user_location())}: {name} is TorchScript, which "
                         f"runs in its own interpreter: a trace cannot see its operations")
    return f
