"""Iterators and files from outside the call: refused before a trace advances them.

    data = infinite_loader(loader)      # a generator made before the call

    @to_graph
    def step():
        x, y = next(data)               # advances the caller's generator
        ...

A graph cannot repeat ``next()`` (the value is baked into it), so such a call falls back;
but a fallback decided after the trace ran ``next()`` is too late where the position
cannot be put back (a generator's frame, ``itertools.count``, a ``map`` object, a file
read): the eager re-run would take the next batch, and code in the generator (a print)
would run twice. So while tracing, a real call (``next``, ``list``, ``sum``, ``zip``,
``itertools.islice``, a method of the iterator, ``json.load(f)``) that is given an
iterator the call did not make, or a file (even one it opened: what a read gives, or a
write does, is outside too), raises GraphError naming the line *before* it runs
(``refuse``), as does a ``for`` over such an iterator (``refuse_loop``; ``iterated``
for the ``for`` of a comprehension). The eager run then finds it where eager would.

"Made by the call" (``note_made``): an iterator a class or ``iter`` returned in this
trace, or a generator function's new generator, that none of the call's arguments held
(``iter(list)``, ``zip(...)``, ``model.parameters()``, an iterator class's instance), and
a generator expression of the converted code over such an iterator or over a container.
Anything else with a ``__next__`` is from outside (a global, a closure, an argument, an
attribute, what ``d.get(k)`` hands back): when in doubt, the call falls back.
"""
from __future__ import annotations

import builtins
import inspect
import io
import sys
import types

from ..errors import GraphError
from ..source_info import format_location, user_location
from ..symbolic import current_graph

# builtins that take an iterator without advancing it (iter(it) returns it)
_HARMLESS = frozenset(map(id, (builtins.iter, builtins.isinstance, builtins.issubclass,
                               builtins.type, builtins.id, builtins.hash, builtins.callable,
                               builtins.repr, builtins.str, builtins.getattr,
                               builtins.hasattr, builtins.len, inspect.getgeneratorstate)))
# methods of an iterator or a file that read nothing from it
_HARMLESS_METHODS = frozenset(("__length_hint__", "__reduce__", "__reduce_ex__", "__iter__",
                               "__repr__", "__sizeof__", "tell", "fileno", "readable",
                               "writable", "seekable", "isatty", "__enter__"))
_STREAMS = ("stdout", "stderr", "__stdout__", "__stderr__")


def _made(graph) -> dict:
    """id -> iterator made by the call being traced (kept on the root graph for the trace:
    ``symbolic.tracing`` drops it when the trace ends)."""
    root = graph.root
    made = root.__dict__.get("made_iterators")
    if made is None:
        made = root.__dict__["made_iterators"] = {}
    return made


def _is_stream(v) -> bool:
    return isinstance(v, io.IOBase) and not isinstance(v, (io.StringIO, io.BytesIO)) and \
        not any(getattr(sys, s, None) is v for s in _STREAMS)


def _is_iterator(v) -> bool:
    cls = type(v)
    return hasattr(cls, "__next__") and \
        cls.__module__.split(".")[0] not in ("runtime", "transpiler")


def _outside(v, made) -> bool:
    """Whether ``v`` is an iterator the call did not make, or a file (see the module
    docstring)."""
    if _is_stream(v):               # (one the call opened too: what it reads is outside)
        return True
    if not _is_iterator(v) or made.get(id(v)) is v:
        return False
    if isinstance(v, types.GeneratorType) and v.gi_code.co_filename.startswith(
            "<tograph generated"):      # a generator expression of converted code: what
        return False                    # it iterates passed ``iterated`` when it was made
    return True


def _given(f, args, kwargs) -> list:
    """The values a call of ``f`` may advance: its arguments (and the items of a list or
    tuple argument) and the object of a method that is not ``_HARMLESS_METHODS``."""
    if id(f) in _HARMLESS:
        return []
    given = []
    for a in list(args) + list(kwargs.values()):
        given.append(a)
        if type(a) in (list, tuple):
            given.extend(a)
    owner = getattr(f, "__self__", None)
    if owner is not None and not isinstance(owner, types.ModuleType) and \
            getattr(f, "__name__", None) not in _HARMLESS_METHODS:
        given.append(owner)
    return given


def refuse(f, args, kwargs) -> None:
    """While tracing: GraphError before a real call of ``f`` that may advance an iterator
    or a file from outside the call (see the module docstring)."""
    graph = current_graph()
    if graph is None:
        return
    made = _made(graph)
    for v in _given(f, args, kwargs):
        if _outside(v, made):
            name = getattr(f, "__qualname__", None) or type(f).__name__
            _raise(f"calls {name}() on {_what(v)}")


def refuse_loop(iterable) -> None:
    """While tracing: GraphError before a ``for`` over an iterator from outside the call."""
    graph = current_graph()
    if graph is not None and _outside(iterable, _made(graph)):
        _raise(f"loops over {_what(iterable)}")


def iterated(iterable):
    """What a set/dict comprehension or generator expression of converted code iterates
    (Python runs those loops itself): ``iterable``, once ``refuse_loop`` passed it."""
    refuse_loop(iterable)
    return iterable


def note_made(result, f, args, kwargs) -> None:
    """Record ``result`` of a real call as made by the call being traced: what a class
    (``zip``, ``map``, ``itertools.count``, a user iterator class) or ``iter`` returns, or
    a generator function's new generator, where no argument (or the method's object) is it
    or holds it as an attribute (``iter(it)`` is ``it``). An iterator another function
    hands back (``d.get(k)``, ``getattr(o, name)``) may be the caller's: not recorded."""
    graph = current_graph()
    if graph is None or not _is_iterator(result) or _is_stream(result):
        return
    if isinstance(result, types.GeneratorType):
        fresh = inspect.getgeneratorstate(result) == inspect.GEN_CREATED and \
            getattr(getattr(f, "__func__", f), "__code__", None) is result.gi_code
    else:
        fresh = isinstance(f, type) or f is builtins.iter
    if not fresh:
        return
    held = set()
    for v in list(args) + list(kwargs.values()) + [getattr(f, "__self__", None)]:
        held.add(id(v))
        attrs = getattr(v, "__dict__", None)
        if isinstance(attrs, dict):
            held.update(id(a) for a in attrs.values())
    if id(result) not in held:
        _made(graph)[id(result)] = result


def _what(v) -> str:
    name = type(v).__name__
    kind = "a file" if _is_stream(v) else f"a {name}" if name == "generator" or \
        name.endswith("iterator") else f"a {name} iterator"
    return (f"{kind} from outside the call (a global, closure, argument or attribute): a "
            f"graph cannot repeat that on every call, and a trace that did it could not "
            f"put it back for the eager run")


def _raise(what: str) -> None:
    location = user_location()
    error = GraphError(f"{format_location(location)}: {what}")
    error.location = location
    raise error
