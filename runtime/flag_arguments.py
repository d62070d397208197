"""A run-time Python bool passed where a torch function needs a real ``bool``.

A comparison of sizes known only at run time (``q_length > 1`` where the length grows in a
tensor ``while``) is a graph value standing for a Python ``bool``. Passed on as a flag
(``scaled_dot_product_attention(..., is_causal=q_length > 1 and mask is None)``), the op
cannot take it: its meaning selects a code path, not a tensor operand. So the call becomes
a ``cond`` on the flag whose branches make the same call with ``True`` and with ``False``:
what eager computes for the flag's value, on every run.

Requires: ``control_flow.cond``; flags are 0-d graph values marked as Python bools
(``introspection``). Provides: ``flags_in(args, kwargs)``, ``call_per_flag``.
"""
from __future__ import annotations

from typing import Callable, List, Tuple

import torch

from .introspection import kind_of

Path = Tuple[str, object]      # ("arg", index) or ("kwarg", name)


def _is_flag(v) -> bool:
    return isinstance(v, torch.Tensor) and hasattr(v, "_node") and v.dim() == 0 and \
        kind_of(v) == "bool"


def flags_in(args, kwargs) -> List[Path]:
    """Where run-time Python bools sit among the top-level arguments (after the first: a
    method's own tensor is an operand, never a flag)."""
    found: List[Path] = [("arg", i) for i, v in enumerate(args) if i > 0 and _is_flag(v)]
    return found + [("kwarg", k) for k, v in kwargs.items() if _is_flag(v)]


def _with(args, kwargs, path: Path, value: bool):
    args, kwargs = list(args), dict(kwargs)
    if path[0] == "arg":
        args[path[1]] = value
    else:
        kwargs[path[1]] = value
    return tuple(args), kwargs


def call_per_flag(record: Callable, func, args, kwargs, path: Path):
    """``record(func, args, kwargs)`` with the flag at ``path`` replaced by ``True`` in one
    branch of a ``cond`` on it and by ``False`` in the other."""
    from .control_flow import cond
    flag = args[path[1]] if path[0] == "arg" else kwargs[path[1]]
    on_args, on_kwargs = _with(args, kwargs, path, True)
    off_args, off_kwargs = _with(args, kwargs, path, False)
    return cond(flag, lambda: record(func, on_args, on_kwargs),
                lambda: record(func, off_args, off_kwargs))
