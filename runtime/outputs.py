"""Results rebuilt on every call, with the caller's exact types.

    return x.sum(), Holder(x * 2)            # Holder made inside the function
    return OrderedDict(a=x), MyDict(b=x)     # dict subclasses keep their class
    return ModelOutput(logits=y, past_key_values=cache)   # cache: an object of lists

A traced result may hold objects besides tuples, lists and dicts. ``template`` turns it
into an output structure the executor can rebuild: an object made inside the function
becomes a ``Rebuild`` marker (a tuple of its parts: items, attributes, slots) whose
``make`` builds a fresh object of the same class on each call, so the caller gets real
tensors and a new object every time, never the trace's object holding symbolic tensors.
Python-valued attributes are constants of the trace. An object that existed before the
call (an argument, a global, a closure value) is returned as itself, and must not hold a
traced tensor. What cannot be rebuilt faithfully (a class whose ``__new__`` needs
arguments, an object holding itself, a traced tensor inside a set or a C object) raises a
``GraphError``: the caller falls back to eager.

State is copied, not replayed: ``make`` sets the traced ``__dict__``/slots/items directly,
bypassing ``__init__``, ``__setattr__`` and ``__setitem__`` (their effects on the object are
already in the state copied; a dataclass's ``__post_init__`` does not run twice).
"""
from __future__ import annotations

import collections
import enum
import functools
import itertools
import types
from typing import Any, Callable, Dict, Optional

import torch

from .builtin_state import slot_names
from .errors import GraphError
from .graph import map_structure, same_tuple
from .path_values import PathChoice, PathValue, RepeatValue, identity_choice
from .introspection import python_class
from .source_info import format_location, user_location
from .symbolic import is_symbolic

_ATOMS = (int, float, complex, str, bytes, bool, type(None), range, slice, torch.dtype,
          torch.device, torch.Size, torch.memory_format, torch.layout, type,
          types.ModuleType, types.FunctionType, types.MethodType, types.BuiltinFunctionType,
          functools.partial, enum.Enum, torch.nn.Module)
_KEYS = itertools.count(1)


class Rebuild(tuple):
    """An object of the result, made afresh on each call as ``make(*parts)``; its parts
    are output structures (nodes, markers, Python values). ``shared``: the result holds it
    more than once (later places are ``Again(key)``)."""

    def __new__(cls, parts, make: Callable, key: int):
        self = super().__new__(cls, parts)
        self.make, self.key, self.shared = make, key, False
        return self

    def _tograph_with_parts(self, parts) -> "Rebuild":
        """The same marker over new parts (``graph.map_structure`` keeps it a Rebuild)."""
        new = Rebuild(parts, self.make, self.key)
        new.shared = self.shared
        return new

    def __repr__(self) -> str:
        return f"Rebuild({getattr(self.make, '__qualname__', self.make)}, {tuple(self)!r})"


class Again:
    """A later place of a ``Rebuild`` object in the result: the same object again."""

    __slots__ = ("key",)

    def __init__(self, key: int):
        self.key = key

    def __repr__(self) -> str:
        return f"Again({self.key})"


class Existing:
    """An object of the result that existed before the call, returned as itself: a
    container subclass (an ``OrderedDict``, a ``dict`` subclass) that ``map_structure``
    must not walk into (it would hand back a plain dict)."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __repr__(self) -> str:
        return f"Existing({type(self.obj).__name__})"


class ArgRef:
    """A list or dict of the result that is one the caller passed in (the trace received a
    rebuilt copy): the call's own object, found at ``path`` in its ``(args, kwargs)``."""

    __slots__ = ("path",)

    def __init__(self, path: tuple):
        self.path = path

    def __repr__(self) -> str:
        return f"ArgRef{self.path}"


def resolve_arguments(value, args, kwargs):
    """``value`` (a call's result) with each ``ArgRef`` replaced by the caller's object;
    ``template`` puts them only in tuples, lists and dicts of the result's own."""
    if value.__class__ is ArgRef:
        found = (args, kwargs)
        for key in value.path:
            found = found[key]
        return found
    kind = type(value)      # (a container holding no ArgRef is itself: a global list)
    if kind is tuple or kind is list or isinstance(value, tuple) and hasattr(value, "_fields"):
        items = [resolve_arguments(v, args, kwargs) for v in value]
        if all(a is b for a, b in zip(items, value)):
            return value
        return kind(*items) if kind is not tuple and kind is not list else kind(items)
    if kind is dict:
        items = {k: resolve_arguments(v, args, kwargs) for k, v in value.items()}
        return value if all(items[k] is v for k, v in value.items()) else items
    return value


def template(out, is_leaf: Callable[[Any], bool], leaf: Callable[[Any], Any],
             existed: Callable[[Any], bool],
             argument: Callable[[Any], Optional[tuple]] = lambda v: None):
    """The output structure of the traced result ``out``: ``leaf(v)`` where ``is_leaf(v)``,
    tuples/lists/dicts walked, a container the caller passed in as an ``ArgRef`` to it
    (``argument(v)``: its path in the call's arguments), objects ``existed`` before the
    call kept as themselves, other objects as ``Rebuild`` markers."""
    from .operators.iterables import SymbolicRange     # (operators import this module)
    done: Dict[int, Rebuild] = {}
    in_object = [0]                  # > 0 while walking an object rebuilt per call
    busy: set = set()
    keep = []                        # the objects ``done``/``firsts`` are keyed by stay alive
    firsts: Dict[int, Any] = {}      # id of a list/dict of the result -> its structure
    shared: Dict[int, int] = {}      # id of a structure the result holds again -> its key
    choosing: set = set()            # ids of lists chosen by path, walked as themselves

    def inside(values) -> tuple:         # walked as parts of a value made per call
        in_object[0] += 1
        try:
            return tuple(walk(x) for x in values)
        finally:
            in_object[0] -= 1

    def walk(v):
        if id(v) in firsts:                 # the same list again: ``(lst, lst)``
            return Again(shared.setdefault(id(firsts[id(v)]), next(_KEYS)))
        chosen = identity_choice(v) if id(v) not in choosing else None
        if chosen is not None:              # ``a if t else b``: the object of the path run
            index, options = chosen
            choosing.add(id(v))             # (an option None: ``v`` itself, walked as such)
            try:
                parts = (walk(index),) + tuple(walk(v if o is None else o) for o in options)
            finally:
                choosing.discard(id(v))
            firsts[id(v)] = built = Rebuild(parts, _pick_container, next(_KEYS))
            keep.append(v)
            return built
        if is_leaf(v):
            if isinstance(v, torch.Tensor):
                return leaf(v)
            firsts[id(v)] = built = leaf(v)     # (a list grown in a tensor loop)
            keep.append(v)
            return built
        kind = type(v)
        if kind is tuple:
            return tuple([walk(x) for x in v])
        path = argument(v)
        if path is not None:                # the caller's own list/dict, returned as itself
            if in_object[0]:
                raise GraphError(f"an object the call makes holds a {kind.__name__} the "
                                 f"caller passed in; it cannot be rebuilt on each call")
            return ArgRef(path)
        if (kind is list or kind is dict) and existed(v):     # a global list, self.cache
            _check_untraced(v)
            return Existing(v)
        if kind is list or kind is dict:
            if id(v) in busy:
                raise GraphError(f"the result holds a {kind.__name__} that holds itself; "
                                 f"it cannot be rebuilt on each call")
            busy.add(id(v))
            try:
                built = [walk(x) for x in v] if kind is list else \
                    {_key(k): walk(x) for k, x in v.items()}
            finally:
                busy.discard(id(v))
            firsts[id(v)] = built
            keep.append(v)
            return built
        if isinstance(v, tuple) and not getattr(v, "__dict__", None):
            return same_tuple(v, [walk(x) for x in v])      # namedtuples, structseqs
        if isinstance(v, RepeatValue):     # a list grown by a tensor loop: a fresh one
            return Rebuild((walk(v.index),), v.build, next(_KEYS))
        if isinstance(v, PathChoice):      # the container of the path the run took
            return Rebuild((walk(v.index),) + inside(v.options[:2]), _pick_container,
                           next(_KEYS))
        if isinstance(v, PathValue) and any(isinstance(o, PathValue) for o in v.options):
            return Rebuild((walk(v.index),) + inside(v.options), _pick_built,
                           next(_KEYS))   # (options rebuilt: lists grown)
        if isinstance(v, PathValue):       # the option the run took
            return Rebuild((walk(v.index),), _picker(v.options), next(_KEYS))
        if isinstance(v, SymbolicRange) or (isinstance(v, slice) and _holds_traced(
                (v.start, v.stop, v.step))):     # ``range(n)``/``slice(0, n)`` of a run-time n
            bounds = (v.start, v.stop, v.step)
            return Rebuild(tuple(walk(b) for b in bounds),
                           _bounds_maker(type(v) if isinstance(v, slice) else range, bounds),
                           next(_KEYS))
        if _is_runtime_marker(v) and not isinstance(v, _OUTPUT_MARKERS):
            raise GraphError(f"the result holds a {kind.__name__}, an object of the "
                             f"tracing machinery standing for a value known only when the "
                             f"graph runs; it cannot be returned")
        if isinstance(v, _ATOMS) or _is_runtime_marker(v):
            return v
        if id(v) in done:
            done[id(v)].shared = True
            return Again(done[id(v)].key)
        if existed(v):
            _check_untraced(v)
            return Existing(v) if isinstance(v, (tuple, list, dict, slice)) else v
        if id(v) in busy:
            raise GraphError(f"the result holds a {kind.__name__} object that holds itself; "
                             f"it cannot be rebuilt on each call")
        busy.add(id(v))
        in_object[0] += 1
        try:
            parts = _parts(v, walk)
        except _Atom:
            return v
        finally:
            busy.discard(id(v))
            in_object[0] -= 1
        marker = Rebuild(parts, maker(kind, v), next(_KEYS))
        done[id(v)] = marker
        keep.append(v)
        return marker
    result = walk(out)
    return _share(result, shared) if shared else result


def _share(structure, shared: Dict[int, int]):
    """``structure`` with each list/dict the result holds more than once (``shared``: the
    id of its first structure -> key) made a shared ``Rebuild`` (later places are
    ``Again(key)``), so the caller gets one container in all of them, as eager does."""
    def is_shared(s):
        return id(s) in shared

    def mark(s):
        if type(s) is list:
            parts = ([map_structure(x, is_shared, mark) for x in s], None, {})
        elif type(s) is dict:
            parts = ({k: map_structure(x, is_shared, mark) for k, x in s.items()}, None, {})
        elif isinstance(s, Rebuild):        # (a list chosen by path: its options marked too)
            parts = (s._tograph_with_parts([map_structure(x, is_shared, mark) for x in s]),)
        else:                               # (a list made at run time: ``Unstack``)
            parts = (s,)
        make = maker(type(s), s) if len(parts) == 3 else _itself
        marker = Rebuild(parts, make, shared[id(s)])
        marker.shared = True
        return marker
    return map_structure(structure, is_shared, mark)


def _itself(value):
    return value


def _bounds_maker(kind, bounds) -> Callable:
    """``make`` for a range/slice whose bounds are traced: each bound back as the Python
    number it stood for (a range's always ints), so the caller gets a plain range/slice."""
    where = format_location(user_location())
    classes = tuple(int if kind is range else
                    python_class(b._node.attrs, where) if is_symbolic(b) else None
                    for b in bounds)

    def make(*values):
        return kind(*(c(x) if c in (int, float, bool) and isinstance(x, torch.Tensor) else x
                      for c, x in zip(classes, values)))
    return make


def _key(k):
    if is_symbolic(k) or isinstance(k, torch.Tensor):
        raise GraphError("the result is a dict keyed by a tensor, which a graph cannot "
                         "rebuild on each call")
    return k


_OUTPUT_MARKERS = (Rebuild, Again, Existing, ArgRef)


def _is_runtime_marker(v) -> bool:
    return type(v).__module__.split(".")[0] == "runtime"


# --------------------------------------------------------------------------- parts
def _parts(v, walk) -> tuple:
    """(items, attributes, slots) of ``v``, each walked."""
    kind = type(v)
    if isinstance(v, (set, frozenset)) or not (
            isinstance(v, (dict, list)) or hasattr(v, "__dict__") or slot_names(kind)):
        if _holds_traced(v):
            raise GraphError(f"the result holds a traced tensor inside a {kind.__name__}, "
                             f"which cannot be rebuilt on each call")
        raise _Atom(v)
    if isinstance(v, tuple):
        raise GraphError(f"the result holds a {kind.__name__} (a tuple subclass with "
                         f"attributes), which cannot be rebuilt on each call")
    if isinstance(v, dict):
        items = {_key(k): walk(x) for k, x in items_of(v)}
    elif isinstance(v, list):
        items = [walk(x) for x in list.__iter__(v)]
    else:
        items = None
    attrs = getattr(v, "__dict__", None)
    attrs = {k: walk(x) for k, x in attrs.items()} if isinstance(attrs, dict) else None
    slots = {name: walk(getattr(v, name)) for name in slot_names(kind) if hasattr(v, name)}
    return items, attrs, slots


def items_of(obj):
    """The items of a dict subclass in its own order, without calling overrides (an
    ``OrderedDict`` keeps an order of its own; ``defaultdict`` makes no defaults here)."""
    base = collections.OrderedDict if isinstance(obj, collections.OrderedDict) else dict
    return base.items(obj)


class _Atom(Exception):
    """Not an object to rebuild (no state Python can see): kept as it is."""


def maker(cls, example) -> Callable:
    """A function ``(items, attrs, slots) -> a new cls object`` holding that state."""
    if cls.__new__ is not object.__new__ and not isinstance(example, (dict, list)):
        try:
            cls.__new__(cls)
        except Exception as e:
            raise GraphError(f"the result holds a {cls.__name__} object, whose class needs "
                             f"arguments to __new__ ({e}); it cannot be rebuilt on each "
                             f"call") from None
    _check_hooks(cls)
    setitem = next((b.__setitem__ for b in cls.__mro__
                    if b in (collections.OrderedDict, dict)), None)
    factory = getattr(example, "default_factory", None) \
        if isinstance(example, collections.defaultdict) else None
    set_slot = object.__setattr__

    def make(items, attrs, slots):
        obj = cls.__new__(cls)
        if factory is not None:
            obj.default_factory = factory
        if attrs:
            obj.__dict__.update(attrs)
        for name, value in slots.items():
            set_slot(obj, name, value)
        if items is not None:
            if setitem is not None:
                for k, value in items.items():
                    setitem(obj, k, value)
            else:
                list.extend(obj, items)
        return obj
    make.__qualname__ = f"make_{cls.__name__}"
    return make


def _picker(options: tuple) -> Callable:
    def pick(index):
        value = options[int(index)]
        return list(value) if type(value) is list else value     # (a fresh list per call)
    pick.__qualname__ = "pick_option"
    return pick


def _pick_built(index, *options):
    return options[int(index)]


def _pick_container(index, then_value, else_value):
    return else_value if int(index) else then_value


# --------------------------------------------------------------------------- checks
_HOOKS = ("__setattr__", "__delattr__", "__setitem__", "__delitem__")


def _check_hooks(cls) -> None:
    """A class whose ``__setattr__``/``__setitem__``... reaches mutable state besides the
    object (a global list it logs to, a registry in a closure) has effects that copying
    the object's state does not repeat on each call: GraphError. Hooks that only keep
    the object consistent (a frozen dataclass, ``ModelOutput``'s item/attribute sync)
    are reproduced by the copied state."""
    for name in _HOOKS:
        fn = getattr(cls, name, None)
        code = getattr(fn, "__code__", None)
        if code is None:
            continue
        ns = getattr(fn, "__globals__", {})
        reached = [(f"global {n!r}", ns[n]) for n in code.co_names if n in ns]
        for cell_name, cell in zip(code.co_freevars, getattr(fn, "__closure__", None) or ()):
            try:
                reached.append((f"closure variable {cell_name!r}", cell.cell_contents))
            except ValueError:
                pass
        for what, value in reached:
            if _mutable(value):
                raise GraphError(f"the result holds a {cls.__name__} object, whose "
                                 f"{name} reaches {what} (a {type(value).__name__}); its "
                                 f"effects would not be repeated on each call")


def _mutable(value) -> bool:
    if isinstance(value, (list, dict, set, bytearray, collections.deque)):
        return True
    return not isinstance(value, _ATOMS + (tuple, frozenset, BaseException)) and \
        isinstance(getattr(value, "__dict__", None), dict) and \
        not isinstance(value, type)


def _holds_traced(value, limit: int = 10000) -> bool:
    """Whether a traced (symbolic) tensor is reachable from ``value`` (through containers,
    ``__dict__`` and slots)."""
    for v in reachable([value], limit):
        if is_symbolic(v):
            return True
    return False


def _check_untraced(obj) -> None:
    if _holds_traced(obj):
        raise GraphError(f"the result is a {type(obj).__name__} object that existed before "
                         f"the call and now holds a traced tensor; it cannot be returned "
                         f"as it is")


def reachable(roots, limit: int = 20000, stop=frozenset()):
    """The values reachable from ``roots`` through containers, ``__dict__`` and slots
    (not into modules, classes, functions or tensors, nor into values whose id is in
    ``stop``), at most ``limit`` of them."""
    seen = set()
    stack = list(roots)
    while stack and len(seen) < limit:
        v = stack.pop()
        if id(v) in seen or isinstance(v, (int, float, str, bytes, bool, type(None))):
            continue
        seen.add(id(v))
        yield v
        if id(v) in stop or isinstance(v, (torch.Tensor, type, types.ModuleType,
                                           types.FunctionType, types.BuiltinFunctionType)):
            continue
        if isinstance(v, dict):
            stack.extend(dict.keys(v))
            stack.extend(dict.values(v))
        elif isinstance(v, (list, tuple, set, frozenset, collections.deque)):
            stack.extend(v)
        attrs = getattr(v, "__dict__", None)
        if isinstance(attrs, dict):
            stack.extend(attrs.values())
        for name in slot_names(type(v)):
            if hasattr(v, name):
                stack.append(getattr(v, name))
