"""Warnings torch gives while a trace infers an op's shapes, and where the graph gives them.

An op that warns when it runs (``F.softmax`` with no ``dim``, as ``nn.Softmax()`` calls
it: "Implicit dimension choice ... deprecated") is run by shape inference on meta tensors
while tracing, and by the graph's node on every call. Left alone, a new signature's first
call warned twice (once from tograph's frames), and later calls from tograph's frames:
another location than eager's, so the once-per-location registries of the default filter
let it through once more. So:

- ``quiet()``: while shape inference runs an op on this thread, a filter placed first in
  ``warnings.filters`` ignores every warning and notes that one came (``noted``). The
  once-per-location registries are left as they are (``catch_warnings`` would reset them
  all on exit), and the user's filters are as before once inference is done.
- ``eager_frames()`` / ``at_frames(target, frames)``: the node of an op that warned runs
  it below stand-ins for the frames eager has above the op (taken from the stack while
  tracing, less tograph's own and torch's dispatch frames; converted code as the user's
  file and line): code objects with those files and lines, run with those modules'
  globals. A warning's ``stacklevel`` then reaches the file, line, module and registry
  it reaches eagerly: the same text, category and count under every filter.

State: per thread (``threading.local``): how deep in ``quiet`` the thread is and whether a
warning came; the filter entry is shared and matches only on a thread inside ``quiet``.
"""
from __future__ import annotations

import contextlib
import sys
import threading
import types
import warnings
from typing import Callable, List, Tuple

import torch

from . import source_info

_STATE = threading.local()
MAX_FRAMES = 8          # frames above the op reproduced (torch's stacklevels are small)
Frame = Tuple[str, int, dict]      # file, line, the module's globals


class _WhileInferring:
    """A filter's message pattern that matches on a thread inside ``quiet`` only."""

    def match(self, text) -> bool:  # noqa: ARG002 - every message
        if getattr(_STATE, "depth", 0):
            _STATE.noted = True
            return True
        return False


_ENTRY = ("ignore", _WhileInferring(), Warning, None, 0)


@contextlib.contextmanager
def quiet():
    """Ignore (and note) the warnings this thread gives inside."""
    _STATE.depth = getattr(_STATE, "depth", 0) + 1
    filters = warnings.filters          # (the list object the C warnings code reads)
    if not filters or filters[0] is not _ENTRY:
        filters.insert(0, _ENTRY)       # (no _filters_mutated(): registries stay valid)
    try:
        yield
    finally:
        _STATE.depth -= 1
        if not _STATE.depth:
            try:
                warnings.filters.remove(_ENTRY)
            except ValueError:
                pass


def reset() -> None:
    _STATE.noted = False


def note() -> None:
    """An op whose inference warned before (a cached inference) warns again."""
    _STATE.noted = True


def noted() -> bool:
    """Whether a warning came in ``quiet`` since ``reset``."""
    return getattr(_STATE, "noted", False)


def eager_frames(func) -> List[Frame]:
    """The frames above the call of ``func`` being traced, innermost first, as eager has
    them: tograph's own frames, torch's ``__torch_function__`` dispatch and ``func``'s own
    Python frame (which handed its call to the dispatch) left out, converted code as the
    user's file and line."""
    own = getattr(func, "__code__", None)
    frames: List[Frame] = []
    frame = sys._getframe(1)
    forward = False         # the last frame kept is a converted module's forward
    while frame is not None and len(frames) < MAX_FRAMES:
        code = frame.f_code
        name = code.co_filename
        if frame.f_code is own or name.startswith(source_info._SKIP_DIRS) or \
                name.endswith("torch/overrides.py"):
            own = None if frame.f_code is own else own
        elif source_info._is_library(name):
            if forward and not _in_module_call(code):
                frames += _module_call()
            frames.append((name, frame.f_lineno, frame.f_globals))
            forward = False
        else:
            where = source_info.map_location(name, frame.f_lineno)
            if where is not None:
                if forward:
                    frames += _module_call()
                frames.append((where[0], where[1], frame.f_globals))
                forward = code.co_name == "forward" and \
                    isinstance(frame.f_locals.get("self"), torch.nn.Module)
        frame = frame.f_back
    return frames[:MAX_FRAMES]


_MODULE_CALL: List[Frame] = []     # set once, whole (the same on every thread)


def _module_call() -> List[Frame]:
    """The frames ``module(x)`` has between its caller and ``forward`` (``_call_impl``,
    ``_wrapped_call_impl``), innermost first: a converted module's forward is called
    without them."""
    if not _MODULE_CALL:
        class Probe(torch.nn.Module):
            def forward(self):
                return sys._getframe(1), sys._getframe(2)
        _MODULE_CALL[:] = [(f.f_code.co_filename, f.f_lineno, f.f_globals) for f in Probe()()]
    return _MODULE_CALL


def _in_module_call(code) -> bool:
    """Whether ``code`` is ``nn.Module``'s own (``_call_impl``, its hooks' ``inner``): the
    forward kept last was called as a module."""
    return code.co_filename == _module_call()[0][0]


def _frame_at(filename: str, lineno: int, namespace: dict, call: Callable) -> Callable:
    """A function that calls ``call``, running as a frame of ``filename`` at ``lineno``
    with ``namespace`` as its globals."""
    source = "\n" * (max(lineno, 1) - 1) + \
        "def _tograph_frame(_call_): return lambda *a, **k: _call_(*a, **k)\n"
    module = compile(source, filename, "exec", dont_inherit=True)
    code = next(c for c in module.co_consts if isinstance(c, types.CodeType))
    return types.FunctionType(code, namespace)(call)


def at_frames(target: Callable, frames: List[Frame]) -> Callable:
    """``target`` called below stand-ins for ``frames`` (innermost first)."""
    call = target
    for filename, lineno, namespace in frames:
        call = _frame_at(filename, lineno, namespace, call)
    call._tograph_below_frames = target
    call.__name__ = getattr(target, "__name__", "call")
    return call


def unwrapped(target: Callable) -> Callable:
    """The op ``target`` runs, for a target ``at_frames`` made (a saved graph names it)."""
    return getattr(target, "_tograph_below_frames", target)

