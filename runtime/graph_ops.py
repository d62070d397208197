"""Functions that graph nodes call for operations torch has no single function for.

They are ordinary targets: the executor calls them like torch functions, and shape
inference runs them on meta tensors.

Saved graphs name their targets, and loading resolves names only through an allow-list
(see ``serialize``): torch's overridable operations, the public functions of this module,
and the functions declared with ``register`` (from any module, by its qualified name).
"""
from __future__ import annotations

import builtins
from typing import Callable, Dict, Optional

import torch

from .text_layout import as_number, render

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
    """The run-time size of dimension ``dim`` of ``x``, as a 0-d int64 tensor (``full``:
    a third of ``torch.tensor``'s cost, which parses its data; a dynamic graph takes a
    dozen sizes per call)."""
    return torch.full((), x.shape[dim], dtype=torch.int64)


@register
def setitem(x: torch.Tensor, index, value) -> torch.Tensor:
    """``x[index] = value`` as an op whose result is the mutated ``x`` (so later reads
    of ``x`` depend on it)."""
    x[index] = value
    return x


@register
def full_of_tensor(size, fill_value: torch.Tensor, **kwargs) -> torch.Tensor:
    """``torch.full(size, t)`` with a 0-d tensor ``t`` as the fill value (eager reads it as
    a Python number). On meta tensors (shape inference) the result is an empty tensor of
    the dtype that number would give."""
    if not fill_value.is_meta:
        return torch.full(size, fill_value, **kwargs)
    if kwargs.get("dtype") is None:
        kind = fill_value.dtype
        default = torch.get_default_dtype()
        kwargs["dtype"] = torch.bool if kind == torch.bool else \
            torch.int64 if not (kind.is_floating_point or kind.is_complex) else \
            (torch.complex128 if default == torch.float64 else torch.complex64) \
            if kind.is_complex else default
    return torch.empty(size, **kwargs)


def numel(x: torch.Tensor) -> torch.Tensor:
    """The run-time number of elements of ``x``, as a 0-d int64 tensor."""
    return torch.full((), x.numel(), dtype=torch.int64)


def effect(fn):
    """Mark ``fn`` as an op run only for its effect: no output, not run by shape inference."""
    fn._tograph_effect = True
    return fn


@effect
def print_values(*args, sep: str = " ", end: str = "\n", flush: bool = False,
                 layout=None, stream: str = "stdout", grad_fns=None) -> None:
    """``print`` as a graph op: prints the run-time values every time the graph runs.
    ``layout``: one ``text_layout`` part tuple per printed argument, rendered from ``args``
    (f-strings, Python numbers standing as 0-d tensors); None: print ``args`` as they are.
    ``stream``: ``"stdout"`` or ``"stderr"``, the stream ``sys`` holds when the graph runs
    (``print(..., file=sys.stderr)``). ``grad_fns``: the autograd node names eager's
    tensors show (``runtime.grad_fn_names``)."""
    import sys
    if grad_fns is not None:
        from .grad_fn_names import shown
        args = shown(args, grad_fns)
    if layout is not None:
        args = [render(parts, args) for parts in layout]
    print(*args, sep=sep, end=end, flush=flush, file=getattr(sys, stream))


@effect
def write_text(stream: str, text=None, *values, layout=None) -> None:
    """``sys.stdout.write(text)`` (``stream``: ``"stdout"`` or ``"stderr"``) as a graph
    op: writes to the stream ``sys`` holds when the graph runs, every time it runs.
    ``layout``: the text's ``text_layout`` parts, rendered from ``values``."""
    import sys
    getattr(sys, stream).write(render(layout, values) if layout is not None else text)


@effect
def log_at(logger: str, level: int, pathname: str, lineno: int, function: str, kinds,
           extra, message, n_args: int, *values, layout=None) -> None:
    """``logger.info(message, *args)`` as a graph op: if the logger named ``logger`` is
    enabled for ``level`` when the graph runs, a record of the call's place with the
    run-time ``args`` (``values[:n_args]``; number stand-ins as their numbers) goes to its
    handlers, as ``Logger._log`` makes it. ``layout``: the message's ``text_layout``
    parts, rendered from ``values[n_args:]``."""
    import logging
    target = logging.getLogger(logger if logger != "root" else None)
    if not target.isEnabledFor(level):
        return
    if layout is not None:
        message = render(layout, values[n_args:])
    args = tuple(as_number(v, k) for v, k in zip(values[:n_args], kinds))
    target.handle(target.makeRecord(target.name, level, pathname, lineno, message, args,
                                    None, function, extra, None))


def warning_name(category):
    """``category``'s importable name (``"builtins.UserWarning"``: a saved graph can hold
    it), or the class itself when it cannot be found by name (a class made in a function)."""
    import sys
    name = f"{category.__module__}.{category.__qualname__}"
    return name if _named(sys.modules.get(category.__module__), category.__qualname__) is \
        category else category


def warning_class(name: str):
    """The class ``warning_name`` named."""
    import importlib
    module, _, qualname = name.rpartition(".")
    while module:
        try:
            return _named(importlib.import_module(module), qualname)
        except ImportError:
            module, _, outer = module.rpartition(".")
            qualname = f"{outer}.{qualname}"
    raise ValueError(f"no warning category named {name!r}")


def _named(owner, qualname: str):
    for part in qualname.split("."):
        owner = getattr(owner, part, None)
    return owner


@effect
def warn_at(category, filename, lineno: int, module, outer: int, message=None, *values,
            layout=None) -> None:
    """``warnings.warn`` as a graph op: warns every time the graph runs, through the
    warning filters and the once-per-location registry of ``module``, as eager would.
    ``outer`` > 0: the location is the caller that many frames out of the converted call
    (a ``stacklevel`` pointing past it), found when the graph runs."""
    import sys
    import warnings
    if isinstance(category, str):
        category = warning_class(category)
    if layout is not None:
        message = render(layout, values)
    if outer:
        from .operators.messages import eager_frames
        frames, inside, _ = eager_frames(sys._getframe(1))
        if inside + outer > len(frames):
            filename, lineno, module = "sys", 1, "sys"
        else:
            frame = frames[inside + outer - 1]
            filename, lineno = frame.f_code.co_filename, frame.f_lineno
            module = frame.f_globals.get("__name__", "<string>")
    namespace = getattr(sys.modules.get(module), "__dict__", None)
    registry = namespace.setdefault("__warningregistry__", {}) \
        if isinstance(namespace, dict) else None
    warnings.warn_explicit(message, category, filename, lineno, module, registry, namespace)


@effect
def assert_true(test: torch.Tensor, where: str, message=None, *values, layout=None,
                error=None) -> None:
    """``assert`` as a graph op: raises ``AssertionError`` on every run where it fails.
    ``layout``: the message's ``text_layout`` parts, rendered from ``values``. ``error``:
    the name of a builtin exception to raise instead (a staged library check that eager
    raises as ``ValueError``: ``runtime.library_questions``), a class's ``warning_name``
    (a staged ``raise``: ``operators.staged_raises``), or the class itself."""
    if not bool(test):
        kind = AssertionError if error is None else error if isinstance(error, type) else \
            warning_class(error) if "." in error else getattr(builtins, error)
        if layout is not None:
            failed = kind(render(layout, values))
        else:       # eager's own error, to the letter (``assert t`` has no message)
            failed = kind() if message is None else kind(message)
        failed._tograph_exact = True    # (executor.located names ``where`` in a note)
        raise failed


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


@effect
def manual_seed(seed) -> None:
    """``torch.manual_seed(seed)`` as a graph op: reseeds the global generator every time
    the graph runs, in its place among the random ops (``seed``: a number or 0-d tensor)."""
    torch.manual_seed(int(seed))


@register
def get_rng_state() -> torch.Tensor:
    """``torch.get_rng_state()`` as a graph op: the global generator's state when the graph
    runs (impure: ``ops.RANDOM`` names it)."""
    return torch.get_rng_state()


@effect
def set_rng_state(state: torch.Tensor) -> None:
    """``torch.set_rng_state(state)`` as a graph op, every time the graph runs."""
    torch.set_rng_state(state)
