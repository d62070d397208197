"""What user functions keep from one call to the next, watched while a trace runs.

A graph repeats tensor work on every call, not Python work. State a function keeps across
calls changes on each eager call: a mutable default (``def f(x, seen=[])``), a list, dict
or object its closure holds (``calls.append(1)`` in a counter a factory made), an
attribute of a function object (``f.calls = getattr(f, "calls", 0) + 1``). A trace
changes it once; the graph would not change it again, and a result read from it (``x *
len(seen)``) would stay the trace's. ``side_effects.Snapshot`` watches these for the
function it converts; this module watches them for every user function the trace meets
(``Snapshot.include_new``) and for the function objects their code names, so a change
falls back, naming the function and its line, and is rolled back before the eager run.
A change a second trace does not repeat (a memo cache already filled) then converts.
"""
from __future__ import annotations

import types
from typing import Any, List, Optional, Tuple

from runtime.builtin_state import state_of
from runtime.plain_containers import dict_items, elements
from runtime.python_state import difference, fingerprint, restore

_ATOMS = (int, float, complex, str, bytes, bool, type(None))


class Watch:
    """(label, owner function, object, state before, copy) for each watched object: a
    function object's attributes shallowly (its code by identity), the other objects to
    ``python_state``'s depth (a closure's ``store["log"].append(v)``, a deque's items,
    the list of an object bound as a default: ``def log(v, hist=history)``), their
    containers' copies put back."""

    def __init__(self, skip=frozenset()):
        self.entries: List[Tuple[str, Any, Any, Any, Any]] = []
        self._met: set = set()          # ids of the functions met
        self._seen: set = set(skip)     # ids of the objects watched (or not to watch)

    def function(self, func, globals_used) -> None:
        """Watch what ``func`` keeps across calls and the attributes of the functions its
        code names (``globals_used``: (name, value) pairs), from now on."""
        if id(func) in self._met or not isinstance(func, types.FunctionType):
            return
        self._met.add(id(func))
        name = func.__qualname__
        code = func.__code__
        positional = code.co_varnames[:code.co_argcount]
        defaults = func.__defaults__ or ()
        for param, value in zip(positional[len(positional) - len(defaults):], defaults):
            self._add(f"the mutable default of parameter {param!r} of {name} (shared by "
                      f"all calls)", func, value)
        for param, value in (func.__kwdefaults__ or {}).items():
            self._add(f"the mutable default of parameter {param!r} of {name} (shared by "
                      f"all calls)", func, value)
        for var, cell in zip(code.co_freevars, func.__closure__ or ()):
            try:
                value = cell.cell_contents
            except ValueError:
                continue
            if not isinstance(value, (type, types.FunctionType, types.ModuleType)):
                self._add(f"closure variable {var!r} of {name} (kept by the function "
                          f"across calls)", func, value)
        self._add(f"an attribute of function {func.__name__!r}", func, func)
        for var, value in globals_used:
            if isinstance(value, types.FunctionType) and value is not func:
                self._add(f"an attribute of global {var!r} (a function)", func, value)

    def _add(self, label: str, owner, obj) -> None:
        if isinstance(obj, _ATOMS) or id(obj) in self._seen:
            return
        if _state(obj) is None and state_of(obj) is None:
            return
        self._seen.add(id(obj))
        if isinstance(obj, types.FunctionType):
            self.entries.append((label, owner, obj, _state(obj), [(obj, _copy(obj))]))
            return
        containers: list = []
        self.entries.append((label, owner, obj, fingerprint(obj, containers=containers),
                             containers))

    def changed(self) -> Optional[Tuple[str, Any]]:
        """(what changed, the function whose code reaches it) for the first change."""
        for label, owner, obj, state, _ in self.entries:
            if _now(obj) != state:
                where = difference(state, _now(obj)).lstrip(".")
                return f"the function changes {label}" + (f" (its {where})" if where
                                                          else ""), owner
        return None

    def restore(self) -> None:
        for _, _, obj, state, containers in self.entries:
            if _now(obj) != state:
                restore(containers)


def _now(obj):
    """What ``changed`` compares: a function's shallow state, another object's print."""
    return _state(obj) if isinstance(obj, types.FunctionType) else fingerprint(obj)


def _plain(obj) -> bool:
    """A user object whose attributes a call may change (not torch's or ours, not a
    module, whose state other guards watch)."""
    attrs = getattr(obj, "__dict__", None)
    return isinstance(attrs, dict) and "_modules" not in attrs and \
        type(obj).__module__.split(".")[0] not in ("runtime", "transpiler", "torch")


def _state(obj) -> Any:
    """A shallow fingerprint: identities of what a list, dict, set or object holds."""
    if isinstance(obj, list):       # (a subclass's own methods are not run: plain_containers)
        return tuple(id(v) for v in elements(obj))
    if isinstance(obj, dict):
        return tuple((id(k), id(v)) for k, v in dict_items(obj))
    if isinstance(obj, set):
        return frozenset(id(v) for v in elements(obj))
    if isinstance(obj, types.FunctionType) or _plain(obj) and not isinstance(obj, type):
        return tuple((k, id(v)) for k, v in vars(obj).items())
    return None


def _copy(obj):
    from .side_effects import _copy as shallow_copy     # (side_effects imports this module)
    return shallow_copy(obj)
