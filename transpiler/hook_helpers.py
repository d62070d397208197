"""The user functions a module hook can call: what a trace runs natively with the hook.

A hook on a torch module (``nn.Linear.register_forward_hook(hook)``) is run by
``nn.Module.__call__`` itself while the forward is traced: not converted, so the helpers
it calls are never met by the converter (``Snapshot.include_new``). The side-effect
snapshot watches each hook's closure and globals (``Snapshot.take``), but a hook that
writes through a helper (``def hook(m, i, o): log(o)`` with ``log`` bumping a dict, a
``nonlocal`` or a global of its own) changed state no one watched: the trace's value stayed
there, a graph value among them (a symbolic tensor left in the user's dict), and the graph
never wrote it again. ``reached(hook)`` gives the user functions the hook's closure cells
and the globals its code names hold, and theirs in turn (bounded), so their state is
watched too: a change is carried (``runtime.carried_numbers``) or falls back.
"""
from __future__ import annotations

import types
from typing import List

from runtime.python_state import names_used
from runtime.source_info import _is_library

_DEPTH = 3          # helpers of helpers of helpers
_LIMIT = 32         # functions taken from one hook


def _user_function(value) -> bool:
    func = getattr(value, "__func__", value)
    if not isinstance(func, types.FunctionType):
        return False
    file = func.__code__.co_filename
    return not file.startswith("<") and not _is_library(file) and \
        (func.__module__ or "").split(".")[0] not in ("runtime", "transpiler")


def _held_functions(func) -> list:
    """The user functions ``func``'s closure cells and named globals hold."""
    values = []
    for cell in func.__closure__ or ():
        try:
            values.append(cell.cell_contents)
        except ValueError:
            pass
    ns = func.__globals__
    values += [ns[n] for n in names_used(func.__code__) if n in ns]
    return [v for v in values if _user_function(v)]


def reached(hook) -> List[types.FunctionType]:
    """The user functions ``hook`` may call through its closure and globals (not ``hook``
    itself), nearest first."""
    start = getattr(hook, "__func__", hook)
    if not isinstance(start, types.FunctionType):
        return []
    seen, found, level = {id(start)}, [], [start]
    for _ in range(_DEPTH):
        following = []
        for func in level:
            for held in _held_functions(func):
                inner = getattr(held, "__func__", held)
                if id(inner) not in seen and len(found) < _LIMIT:
                    seen.add(id(inner))
                    found.append(held)
                    following.append(inner)
        level = following
    return found
