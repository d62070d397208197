"""Calling a submodule that has forward hooks, from converted code: ``nn.Module._call_impl``'s
forward part with the hooks and ``forward`` converted.

A submodule with hooks used to run natively (``_call_impl`` unconverted), so its forward's
Python ran unconverted while tracing: ``torch.compiler.is_compiling()`` asked there got
eager's False (transformers' MoE experts then took a kernel without a meta
implementation), and its tensor control flow could not become graph nodes. transformers
installs such hooks on every layer for ``output_hidden_states``/``output_attentions``.

Here the pre-hooks, the forward and the hooks run in ``_call_impl``'s order, each through
``call`` (so converted when they are user or library functions), with the same argument
and result replacement rules. Only forward hooks: a module with backward hooks (its own or
torch's global ones) or an ``always_call`` hook (run when forward raises) keeps the native
call.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch
from torch.nn.modules import module as _m

from ..errors import GraphError
from ..source_info import format_location, user_location


def backward_hooked(module: torch.nn.Module) -> bool:
    """Whether ``module`` has backward hooks of its own (registered on it, not global)."""
    return bool(module._backward_hooks or module._backward_pre_hooks)


def refuse_backward_hooks(modules) -> None:
    """GraphError where one of ``modules`` or of their submodules (a native container's
    children: ``nn.Sequential`` calls them unconverted) has backward hooks: autograd would
    call them on the module's gradients, and a graph node records no module boundary to
    hook (they were silently not called; a child's failed in torch's own set-up)."""
    for root in modules:
        if not isinstance(root, torch.nn.Module):
            continue
        for module in root.modules():
            if backward_hooked(module):
                raise GraphError(f"{format_location(user_location())}: "
                                 f"{type(module).__name__} has backward hooks{_hook_at(module)}"
                                 f", which autograd runs on its gradients; a graph of its "
                                 f"forward cannot call them")


def _hook_at(module) -> str:
    """`` (its hook at file:line)`` for the first backward hook of ``module`` with code."""
    for hook in (*module._backward_hooks.values(), *module._backward_pre_hooks.values()):
        code = getattr(getattr(hook, "__func__", hook), "__code__", None)
        if code is not None:
            return f" (its hook at {code.co_filename}:{code.co_firstlineno})"
    return ""


def forward_hooks_only(module: torch.nn.Module) -> bool:
    """Whether the hooks calling ``module`` runs (its own and torch's global ones) are
    forward hooks and pre-hooks that ``hooked_call`` replays (no backward hooks, no
    ``always_call`` hook, run when forward raises)."""
    if module._backward_hooks or module._backward_pre_hooks or \
            _m._global_backward_hooks or _m._global_backward_pre_hooks:
        return False
    return not (module._forward_hooks_always_called or
                _m._global_forward_hooks_always_called)


def _hooks_supported(module: torch.nn.Module) -> bool:
    if not forward_hooks_only(module):
        return False
    return bool(module._forward_hooks or module._forward_pre_hooks or
                _m._global_forward_hooks or _m._global_forward_pre_hooks)


def hooked_call(module: torch.nn.Module, forward: Callable,
                call: Callable) -> Optional[Callable]:
    """A function calling ``module`` as ``module(*args, **kwargs)`` would, with ``forward``
    (the converted forward) and each hook run by ``call``; None when the module has no
    forward hooks or hooks this does not replay (backward, ``always_call``)."""
    if not _hooks_supported(module):
        return None

    def run(*args, **kwargs):
        for hook_id, hook in (*_m._global_forward_pre_hooks.items(),
                              *module._forward_pre_hooks.items()):
            if hook_id in module._forward_pre_hooks_with_kwargs:
                result = call(hook, module, args, kwargs)
                if result is not None:
                    if isinstance(result, tuple) and len(result) == 2:
                        args, kwargs = result
                    else:
                        raise RuntimeError("forward pre-hook must return None or a tuple of "
                                           f"(new_args, new_kwargs), but got {result}.")
            else:
                result = call(hook, module, args)
                if result is not None:
                    args = result if isinstance(result, tuple) else (result,)
        output = forward(*args, **kwargs)
        for hook_id, hook in (*_m._global_forward_hooks.items(),
                              *module._forward_hooks.items()):
            if hook_id in module._forward_hooks_with_kwargs or \
                    hook_id in _m._global_forward_hooks_with_kwargs:
                result = call(hook, module, args, kwargs, output)
            else:
                result = call(hook, module, args, output)
            if result is not None:
                output = result
        return output
    return run
