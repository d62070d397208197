"""Functions that graph nodes call for operations torch has no single function for.

They are ordinary targets: the executor calls them like torch functions, and shape
inference runs them on meta tensors.

Saved graphs name their targets, and loading resolves names only through an allow-list
(see ``serialize``): torch's overridable operations, the public functions of this module,
and the functions declared with ``register`` (from any module, by its qualified name).
"""
from __future__ import annotations

from typing import Callable, Dict, Optional

import torch

from .text_layout import render

# qualified name ("runtime.graph_ops.dim_size") -> function; a saved graph may name these
REGISTRY: Dict[str, Callable] = {}


def register(fn: Optional[Callable] = None, *, name: Optional[str] = None):
    """Declare ``fn`` a graph target that saved graphs may name (usable as a decorator).

    The name defaults to ``module.qualname``; a name already taken by another function is
    an error. Loading a graph that names a function needs it registered in that process."""
    def add(f: Callable) -> Callable:
        key = name or f"{f.__module__}.{f.__qualname__}"
        if REGISTRY.get(key, f) is not f:
            raise ValueError(f"graph target name {key!r} is already registered")
        REGISTRY[key] = f
        return f
    return add(fn) if fn is not None else add


@register
def dim_size(x: torch.Tensor, dim: int) -> torch.Tensor:
    """The run-time size of dimension ``dim`` of ``x``, as a 0-d int64 tensor."""
    return torch.tensor(x.shape[dim], dtype=torch.int64)


@register
def setitem(x: torch.Tensor, index, value) -> torch.Tensor:
    """``x[index] = value`` as an op whose result is the mutated ``x`` (so later reads
    of ``x`` depend on it)."""
    x[index] = value
    return x


def numel(x: torch.Tensor) -> torch.Tensor:
    """The run-time number of elements of ``x``, as a 0-d int64 tensor."""
    return torch.tensor(x.numel(), dtype=torch.int64)


def effect(fn):
    """Mark ``fn`` as an op run only for its effect: no output, not run by shape inference."""
    fn._tograph_effect = True
    return fn


@effect
def print_values(*args, sep: str = " ", end: str = "\n", flush: bool = False,
                 layout=None) -> None:
    """``print`` as a graph op: prints the run-time values every time the graph runs.
    ``layout``: one ``text_layout`` part tuple per printed argument, rendered from ``args``
    (f-strings, Python numbers standing as 0-d tensors); None: print ``args`` as they are."""
    if layout is not None:
        args = [render(parts, args) for parts in layout]
    print(*args, sep=sep, end=end, flush=flush)


@effect
def assert_true(test: torch.Tensor, where: str, message=None, *values, layout=None) -> None:
    """``assert`` as a graph op: raises ``AssertionError`` on every run where it fails.
    ``layout``: the message's ``text_layout`` parts, rendered from ``values``."""
    if not bool(test):
        if layout is not None:
            raise AssertionError(render(layout, values))
        text = f"{where}: assertion failed" if message is None else str(message)
        raise AssertionError(text)


@effect
def set_grad_enabled(mode: bool) -> None:
    """Autograd on/off, as ``with torch.no_grad():`` in traced code switches it."""
    torch._C._set_grad_enabled(bool(mode))


@effect
def probe_value(name, value, loop) -> None:
    """``f.probe(..., names=[name])`` as a graph op: hands the run-time value to the open
    probe log (``runtime.probe_log``) every time it runs (name None: a loop's tick)."""
    from .probe_log import record
    record(name, value, loop)


@register
def requires_grad_of(x: torch.Tensor) -> torch.Tensor:
    """``x.requires_grad`` read at run time, as a 0-d bool tensor: for a value that
    requires grad on one path of a ``cond`` (or after a loop's iterations) only."""
    return torch.tensor(x.requires_grad)
