"""Fingerprints of Python state, to tell whether running some code changed it.

A graph repeats tensor work on every call, not Python work. Code traced into a graph
must therefore leave no Python change behind that the graph does not carry (a counter
bumped by a context manager's ``__enter__``, a ``nonlocal`` rebound by an inner function),
and Python values a trace read (``cfg.sub.scale``) must still hold before its graph is
reused. Both questions are answered by comparing fingerprints taken before and after.

``fingerprint(value)`` is a hashable summary of ``value`` to a bounded depth: atoms by
value, tensors and code by identity, containers and plain objects (their ``__dict__``,
an ``nn.Module``'s submodules, parameters and buffers) by the fingerprints of what they
hold, objects keeping state outside a ``__dict__`` (iterators, generators, numpy arrays,
``StringIO``, ``deque``, ``__slots__``) by that state (``builtin_state``), a library's
``logging.Logger`` by its own settings and effective level (not the registry of every
logger its manager holds; handlers, formatters and the manager by identity). An instance of
a class defined in user code also by its class's attributes (``cfg.scale`` where ``scale``
is set on the class), and such a class itself by them (``user_classes``). Past the depth
or the node budget a value counts by identity only.

``Reach`` collects what a function can name: the cells of its closure and of the
functions those cells hold (an inner function bumping a ``nonlocal``), and the globals its
code names (a helper function's globals too), each with the chain of names that leads to
it, so that a change can be reported at the line that reaches it.

Torch-free: tensors are recognised by their class's module and ``data_ptr``; this module
is shared by the runtime's region operators and the front door's guards.
"""
from __future__ import annotations

import dataclasses
import dis
import functools
import inspect
import logging
import types
from typing import Any, Dict, Iterable, List, Optional, Set, Tuple

from . import builtin_state
from .builtin_state import slot_names
from .plain_containers import (dict_copy, dict_items, elements, list_copy, put_back,
                               size)

_ATOMS = (int, str, bytes, bool, complex, type(None))
_CODE = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
         type, types.CodeType, functools.partial, classmethod, staticmethod, property,
         functools.cached_property)     # (a class's methods by identity, as functions)
DEPTH = 4           # how far into nested containers and objects a fingerprint looks
BUDGET = 2000       # values per fingerprint; beyond it values count by identity


def is_tensor(value) -> bool:
    return _tensor_class(type(value))


def _tensor_class(cls) -> bool:
    return cls.__module__.startswith(("torch", "runtime.symbolic")) and \
        hasattr(cls, "data_ptr")


class _Walk:
    __slots__ = ("budget", "active", "carried", "containers", "classes", "deep", "library",
                 "seen", "names", "modules", "inputs")

    def __init__(self, carried: Set[int], containers: Optional[list], seen=None):
        self.seen = seen                      # what was looked into (guard_tags.Seen)
        self.modules: Optional[list] = None   # nn.Modules met, by identity (guard_print)
        self.names: Optional[frozenset] = None    # names the code can read (guard_print)
        self.deep: Optional[list] = None      # objects past the depth, when asked for
        self.library = 0                      # > 0 inside a library's object (guard_print)
        self.classes: Dict[int, Any] = {}     # id(class) -> its attributes' fingerprint
        self.budget = BUDGET
        self.active: Set[int] = set()
        self.carried = carried
        self.containers = containers      # (container, shallow copy) when restoring
        self.inputs = None                # an ``InputSlots``: tensors in mutable slots


def fingerprint(value, depth: int = DEPTH, carried: Set[int] = frozenset(),
                containers: Optional[list] = None, seen=None) -> Any:
    """A comparable summary of ``value``; objects whose ids are in ``carried`` are state
    the caller carries itself (their attributes holding numbers and tensors are skipped).
    ``containers``: a list to receive (container, shallow copy) of each one walked;
    ``seen``: a ``guard_tags.Seen`` told of every container and object looked into."""
    return _fp(value, depth, _Walk(carried, containers, seen))


def guard_print(value, seen=None, names: Optional[Iterable[str]] = None,
                modules: Optional[list] = None, inputs: Optional["InputSlots"] = None) -> tuple:
    """``(fingerprint(value), the objects it did not look into for depth)``, not counting
    those inside a library's objects (a Logger's handlers): a guard built on it cannot see
    a change past ``DEPTH`` (``cfg.a.b.c.d.e.scale``). ``names``: every name the traced
    code can use (attribute names and string constants); a class attribute named nowhere
    there (a model class's ``config_class``, whose class holds nested plans) is not read
    by the trace, so what lies past the depth beneath it does not count either (it is
    still fingerprinted to the depth, as everything else). ``modules``: a list to receive
    the ``nn.Module``s met (the value itself, or one a config object holds); each counts
    by identity, not walked: the caller guards their trees as ``to_graph(module)`` guards
    its own (``runtime.module_state``), at any depth. ``inputs``: an ``InputSlots``
    told of each tensor held in a list, a dict or an object's ``__dict__`` of the value's
    own data (graph inputs, printed as such, not by identity: ``runtime.argument_objects``)."""
    walk = _Walk(frozenset(), None, seen)
    walk.deep = []
    walk.modules = modules
    walk.inputs = inputs
    walk.names = frozenset(names) if names is not None else None
    found = _fp(value, DEPTH, walk)
    if inputs is not None:
        inputs.exhausted = walk.budget <= 0
    return found, walk.deep


_ATOM, _FLOAT, _IDENTITY, _WALK, _LOGGER = range(5)
_KINDS: Dict[type, int] = {}         # class -> how to fingerprint its instances
# logging's machinery: a trace's log calls are graph nodes that look the logger up when
# the graph runs (runtime.operators.messages); what else code reads of a Logger is its
# own settings and whether it is enabled (``_logger_fp``), never the manager's registry of
# every logger, the handlers' or formatters' insides, or their locks: identity there
_LOGGING = (logging.Manager, logging.PlaceHolder, logging.Handler, logging.Formatter,
            logging.Filter, logging.LoggerAdapter)


# torch's immutable values compared by value (a cache layer's ``device``): torch-free here
_VALUE_CLASSES = frozenset({("torch", "device"), ("torch", "dtype"), ("torch", "layout"),
                            ("torch", "memory_format")})


def _kind(cls) -> int:
    kind = _KINDS.get(cls)
    if kind is None:
        library = not user_classes(cls)
        kind = _FLOAT if issubclass(cls, float) else _ATOM if issubclass(cls, _ATOMS) or \
            (cls.__module__, cls.__qualname__) in _VALUE_CLASSES else \
            _IDENTITY if (issubclass(cls, _CODE) or _tensor_class(cls) or
                          cls.__module__.split(".")[0] in ("runtime", "transpiler")
                          and not getattr(cls, "__tograph_carried__", False)) else \
            _LOGGER if library and issubclass(cls, logging.Logger) else \
            _IDENTITY if library and issubclass(cls, _LOGGING) else _WALK
        if len(_KINDS) < 10_000:
            _KINDS[cls] = kind
    return kind


def _fp(v, depth: int, walk: _Walk):
    cls = type(v)
    kind = _KINDS.get(cls)
    if kind is None:
        kind = _kind(cls)
    if kind == _ATOM:
        return (cls, v)
    if kind == _FLOAT:
        return ("f", repr(v))                # nan == nan, and -0.0 is not 0.0
    if kind == _IDENTITY:
        if cls is type and depth > 0 and user_classes(v):     # a user class: its attributes
            return ("class", id(v), _class_fp(v, depth - 1, walk))
        return ("id", id(v))
    if kind == _LOGGER:
        return _logger_fp(v, walk)
    if walk.modules is not None and _is_module(v):
        walk.modules.append(v)
        return ("module", id(v))
    key = id(v)
    walk.budget -= 1
    if depth <= 0 or walk.budget <= 0 or key in walk.active:
        if depth <= 0 and walk.deep is not None and key not in walk.active and \
                not walk.library:
            walk.deep.append(v)
        return ("id", key)
    walk.active.add(key)
    library = walk.deep is not None and _library_object(cls)
    walk.library += library
    inputs = walk.inputs              # (no slots inside torch's objects: an optimizer)
    if inputs is not None and cls.__module__.split(".")[0] == "torch":
        walk.inputs = None
    try:
        return _fp_inner(v, cls, depth - 1, walk)
    finally:
        walk.active.discard(key)
        walk.library -= library
        walk.inputs = inputs


def _logger_fp(v, walk: _Walk):
    """A library's Logger: its own attributes (numbers and text by value, the rest by
    identity: its handlers and filters, its parent), its handlers and filters by
    identity, and what ``isEnabledFor`` answers by: the effective level (its ancestors'
    levels) and the manager's ``disable`` -- the dicts holding those are its tags."""
    own = tuple((k, _key(x)) for k, x in vars(v).items() if k != "_cache")
    chain, level, node = [], logging.NOTSET, v
    while node is not None and len(chain) < 100:
        chain.append(node)
        if level == logging.NOTSET:
            level = getattr(node, "level", logging.NOTSET)
        node = getattr(node, "parent", None)
    manager = getattr(v, "manager", None)
    if walk.containers is not None:
        walk.containers.append((v, dict(vars(v))))
    if walk.seen is not None:
        walk.seen.walked(v, type(v))
        for node in chain[1:] + ([manager] if manager is not None else []):
            attrs = getattr(node, "__dict__", None)
            if type(attrs) is dict:
                walk.seen.dicts[id(attrs)] = attrs
        for held in (getattr(v, "handlers", None), getattr(v, "filters", None)):
            if type(held) is list:
                walk.seen.lists[id(held)] = held
    return ("logger", id(v), own, level, getattr(manager, "disable", None),
            tuple(map(id, getattr(v, "handlers", ()))), tuple(map(id, getattr(v, "filters", ()))))


_DATA = (list, tuple, dict, set, frozenset, types.SimpleNamespace)


def _is_module(v) -> bool:
    """An ``nn.Module`` (told by its ``__dict__``: this module is torch-free)."""
    attrs = getattr(v, "__dict__", None)
    return type(attrs) is dict and "_modules" in attrs and "_parameters" in attrs


def _library_object(cls) -> bool:
    """An object of a library's class (a Logger, a Formatter): what it holds deep down is
    the library's business, not Python state a trace reads through data (guard_print)."""
    return not issubclass(cls, _DATA) and not user_classes(cls) and \
        not dataclasses.is_dataclass(cls)


def _fp_inner(v, cls, depth: int, walk: _Walk):
    carried = id(v) in walk.carried
    if walk.seen is not None:
        walk.seen.walked(v, cls)
    if isinstance(v, (list, tuple)):        # (a subclass's own methods are not run:
        if walk.containers is not None and isinstance(v, list):     # plain_containers)
            walk.containers.append((v, list_copy(v)))
        if walk.inputs is not None and isinstance(v, list):
            return (cls, size(v), walk.inputs.holder(v, "list", depth, walk))
        return (cls, size(v), tuple(_fp(x, depth, walk) for x in elements(v)))
    if isinstance(v, dict):
        if walk.containers is not None:
            walk.containers.append((v, dict_copy(v)))
        items = tuple((_key(k), _fp(x, depth, walk)) for k, x in dict_items(v)
                      if not (carried and _carried_leaf(x))) if walk.inputs is None else \
            walk.inputs.holder(v, "dict", depth, walk)
        attrs = getattr(v, "__dict__", None)
        if isinstance(attrs, dict) and attrs:       # a dict subclass's own attributes
            items += (("__dict__", _attrs(v, attrs, carried, depth, walk)),)
        return (cls, items)
    if isinstance(v, (set, frozenset)):
        if walk.containers is not None and isinstance(v, set):
            walk.containers.append((v, set(elements(v))))
        return (cls, frozenset(_key(x) for x in elements(v)))
    if isinstance(v, bytearray):
        return (cls, bytes(v))
    attrs = getattr(v, "__dict__", None)
    inner = builtin_state.state_of(v)       # an iterator's position, an array's bytes, ...
    if inner is not None:
        if walk.seen is not None:           # state no version tag follows
            walk.seen.opaque = True
        if walk.containers is not None:
            put_back = builtin_state.restorer(v)
            if put_back is not None:
                walk.containers.append((v, _PutBack(put_back)))
        inner = (walk.inputs.holder(v, "slots", depth, walk) if walk.inputs is not None and
                 slotted(v) else _attrs(v, dict(inner), carried, depth, walk, record=False)) \
            if slot_names(cls) and attrs is None else _fp(inner, depth + 1, walk)
    if not isinstance(attrs, dict):
        return ("id", id(v)) if inner is None else (cls, "state", inner)
    found = (cls, _attrs(v, attrs, carried, depth, walk)) + ((inner,) if inner else ())
    return found + (_class_fp(cls, depth, walk),) if user_classes(cls) else found


def _attrs(v, attrs: dict, carried: bool, depth: int, walk: _Walk, record=True) -> tuple:
    if walk.containers is not None and record:
        walk.containers.append((v, dict(attrs)))
    if walk.inputs is not None and record and attrs is getattr(v, "__dict__", None):
        return walk.inputs.holder(v, "attrs", depth, walk)
    return tuple((k, _fp(x, depth, walk)) for k, x in attrs.items()
                 if not k.startswith("_tograph") and not (carried and _carried_leaf(x)))


class InputSlots:
    """Told by a ``guard_print`` walk of the lists, dicts and objects' ``__dict__``s it
    looks into (``holders``, in walk order) and of the tensors they hold (``slots``:
    (holder index, key, tensor); an ``nn.Parameter`` is not one): those tensors print as
    graph inputs, by their slot's place, not by identity. ``record=False``: print only."""

    def __init__(self, record: bool = True):
        self.record = record
        self.exhausted = False      # the walk ran out of budget: not every slot was seen
        self.holders: List[Tuple[Any, str]] = []
        self.slots: List[Tuple[int, Any, Any]] = []

    def holder(self, v, kind: str, depth: int, walk: "_Walk") -> tuple:
        """The fingerprint of the items of ``v`` (a list, a dict, an object's attributes)."""
        index = len(self.holders)
        if self.record:
            self.holders.append((v, kind))
        items = enumerate(elements(v)) if kind == "list" else vars(v).items() \
            if kind == "attrs" else slots_of(v).items() if kind == "slots" else dict_items(v)
        out = []
        for k, x in items:
            if kind == "attrs" and k.startswith("_tograph"):
                continue
            if is_tensor(x) and "Parameter" not in type(x).__name__:
                if self.record:
                    self.slots.append((index, k, x))
                out.append((_key(k), "input"))
            else:
                out.append((_key(k), _fp(x, depth, walk)))
        return tuple(out)


def slotted(v) -> bool:
    """Whether ``v`` is an object of a user class keeping its attributes in ``__slots__``
    only (an argument object: its slots are a holder, kind "slots")."""
    cls = type(v)
    return not hasattr(v, "__dict__") and not hasattr(cls, "__next__") and \
        bool(slot_names(cls)) and bool(user_classes(cls))


def slots_of(v) -> dict:
    """The slots of ``v`` that are set, by name."""
    return {name: getattr(v, name) for name in slot_names(type(v)) if hasattr(v, name)}


def _carried_leaf(x) -> bool:
    """A value a carried object's state holds as a leaf (the graph carries it)."""
    return isinstance(x, _ATOMS + (float,)) or is_tensor(x)


_USER_CLASSES: Dict[type, tuple] = {}


def user_classes(cls) -> tuple:
    """The classes of ``cls``'s MRO defined in user code (not the standard library, torch,
    an installed package or tograph): their attributes are Python state a trace reads
    (``Holder.SCALE``, ``cfg.scale`` set on the class, ``self.EPS`` of a module)."""
    found = _USER_CLASSES.get(cls)
    if found is None:
        found = tuple(c for c in getattr(cls, "__mro__", ()) if _user_class(c))
        if len(_USER_CLASSES) < 10_000:
            _USER_CLASSES[cls] = found
    return found


def _user_class(c) -> bool:
    import sys
    name = getattr(c, "__module__", None) or "builtins"
    if name == "builtins" or name.split(".")[0] in ("runtime", "transpiler", "torch"):
        return False
    file = getattr(sys.modules.get(name), "__file__", None)
    return file is None and name == "__main__" or file is not None and not _library(file)


def _class_fp(cls, depth: int, walk: _Walk):
    """The fingerprint of the attributes set on ``cls`` and its user base classes (not
    dunders): methods by identity, values as anywhere else. Once per class per walk."""
    found = walk.classes.get(id(cls))
    if found is None and walk.inputs is not None and walk.inputs.record:
        return ()                   # (finding slots: instance data only, classes unread)
    if found is None:
        inputs, walk.inputs = walk.inputs, None     # (a class's tensors: by identity)
        try:
            return _class_fp_walk(cls, depth, walk)
        finally:
            walk.inputs = inputs
    return found


def _class_fp_walk(cls, depth: int, walk: _Walk):
    walk.classes[id(cls)] = ()            # (a class attribute holding an instance)
    found = tuple((c.__qualname__, tuple(
        (k, _unread_fp(x, depth, walk) if walk.names is not None and
         k not in walk.names and k not in _implicit_names(cls)
         else _fp(x, depth, walk))
        for k, x in c.__dict__.items()
        if not (k.startswith("__") and k.endswith("__"))))
        for c in user_classes(cls))
    walk.classes[id(cls)] = found
    if walk.seen is not None:
        for c in user_classes(cls):
            walk.seen.walked_class(c)
    if walk.containers is not None:
        for c in user_classes(cls):
            walk.containers.append((c, _PutBack(_class_restorer(c))))
    return found


_IMPLICIT: Dict[type, frozenset] = {}


def _implicit_names(cls) -> frozenset:
    """The names (and string constants) used by the properties and dunder methods of
    ``cls``'s user classes: code that runs on an attribute access or an operator without
    the converter seeing it, so what it reads counts as read by the trace."""
    found = _IMPLICIT.get(cls)
    if found is None:
        names: Set[str] = set()
        for c in user_classes(cls):
            for k, x in c.__dict__.items():
                fns = (x.fget, x.fset, x.fdel) if isinstance(x, property) else \
                    (getattr(x, "func", None),) if isinstance(x, functools.cached_property) \
                    else (x,) if k.startswith("__") and k.endswith("__") else ()
                for fn in fns:
                    code = getattr(fn, "__code__", None)
                    if code is not None:
                        names.update(names_used(code), strings_used(code))
        found = frozenset(names)
        if len(_IMPLICIT) < 10_000:
            _IMPLICIT[cls] = found
    return found


def _unread_fp(x, depth: int, walk: _Walk):
    """A class attribute the traced code never names: fingerprinted, nothing past the
    depth beneath it counted (``guard_print``)."""
    walk.library += 1
    try:
        return _fp(x, depth, walk)
    finally:
        walk.library -= 1


def _class_restorer(c):
    """Puts back the attributes set on class ``c`` (not dunders) as they are now."""
    saved = {k: x for k, x in c.__dict__.items() if not (k.startswith("__") and k.endswith("__"))}

    def put_back():
        for k in [k for k in c.__dict__ if k not in saved and
                  not (k.startswith("__") and k.endswith("__"))]:
            delattr(c, k)
        for k, x in saved.items():
            if c.__dict__.get(k, _EMPTY) is not x:
                setattr(c, k, x)
    return put_back


def _key(k):
    return k if isinstance(k, _ATOMS + (float,)) else ("id", id(k))


class _PutBack:
    """A recorded state that puts itself back (``builtin_state.restorer``)."""
    __slots__ = ("put_back",)

    def __init__(self, put_back):
        self.put_back = put_back


def restore(containers: List[Tuple[Any, Any]]) -> None:
    """Put back the shallow contents recorded by ``fingerprint(..., containers=...)``,
    innermost first (so an outer one's copy wins where both recorded the same object)."""
    for obj, copy in reversed(containers):
        if isinstance(copy, _PutBack):
            copy.put_back()
        elif isinstance(obj, (list, dict, set)):
            put_back(obj, copy)
        else:
            attrs = obj.__dict__       # compared by identity: == on tensors is elementwise
            if attrs.keys() != copy.keys() or any(attrs[k] is not v for k, v in copy.items()):
                attrs.clear()
                attrs.update(copy)


# --------------------------------------------------------------------------- reach
class Root:
    """One value a function can name: ``path`` is the chain of (code, name) from the
    function to it (``loop_body`` names ``bump``, whose cell is ``n``)."""
    __slots__ = ("path", "cell", "namespace", "value", "print")

    def __init__(self, path, value, cell=None, namespace=None):
        self.path, self.value, self.cell, self.namespace = path, value, cell, namespace
        self.print = None

    def current(self):
        if self.cell is not None:
            try:
                return self.cell.cell_contents
            except ValueError:
                return _EMPTY
        return self.namespace.get(self.path[-1][1], _EMPTY)

    def describe(self, where: str = "") -> str:
        """``'cm.enters'``, ``global 'LOG'``, ``'n' (reached through bump)``."""
        names = [name for code, name in self.path if not _library(code.co_filename)] or \
            [name for _, name in self.path]
        kind = "global " if self.namespace is not None else ""
        text = f"{kind}'{names[-1]}{where}'"
        return text if len(names) == 1 else \
            f"{text} (reached through {' -> '.join(names[:-1])})"


_EMPTY = object()


def reach(fn, limit: int = 200) -> List[Root]:
    """The closure cells and named globals that ``fn`` (and the functions they hold, to a
    bounded number) can reach; modules and classes are left out."""
    roots: List[Root] = []
    seen: Set[int] = set()
    _reach(fn, (), roots, seen, limit)
    return roots


def _function_of(value):
    if isinstance(value, types.MethodType):
        return value.__func__, value.__self__
    if isinstance(value, functools.partial):
        return value.func, None
    if isinstance(value, types.FunctionType):
        return value, None
    return None, None


def _reach(fn, path, roots: List[Root], seen: Set[int], limit: int) -> None:
    fn, owner = _function_of(fn)
    if fn is None or id(fn) in seen or len(seen) >= limit:
        return
    seen.add(id(fn))
    code = fn.__code__
    if owner is not None:
        roots.append(Root(path + ((code, "self"),), owner, cell=_FixedCell(owner)))
    library = _library(code.co_filename)
    for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
        try:
            value = cell.cell_contents
        except ValueError:
            value = _EMPTY
        here = path + ((code, name),)
        if not library:             # our wrappers' own cells are not the user's state
            roots.append(Root(here, value, cell=cell))
        _reach(value, here, roots, seen, limit)
        if library and type(value) is tuple:    # (``and``/``or``'s operand functions)
            for item in value:
                _reach(item, here, roots, seen, limit)
    if library:
        return
    ns = fn.__globals__
    for name in names_used(code):
        if name not in ns:
            continue
        value = ns[name]
        here = path + ((code, name),)
        if isinstance(value, (types.ModuleType, type, types.BuiltinFunctionType)):
            continue
        roots.append(Root(here, value, namespace=ns))
        _reach(value, here, roots, seen, limit)


class _FixedCell:
    """The object a bound method belongs to, held like a cell that never changes."""
    __slots__ = ("cell_contents",)

    def __init__(self, value):
        self.cell_contents = value


def _user_code(fn, depth: int = 3):
    """The code of ``fn``, or of the user function a wrapper of ours holds."""
    fn, _ = _function_of(fn)
    if fn is None:
        return None
    if not _library(fn.__code__.co_filename):
        return fn.__code__
    for cell in (fn.__closure__ or ()) if depth > 0 else ():
        try:
            code = _user_code(cell.cell_contents, depth - 1)
        except ValueError:
            continue
        if code is not None:
            return code
    return None


def _library(filename: str) -> bool:
    from .source_info import _is_library
    return _is_library(filename)


def names_used(code) -> List[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if inspect.iscode(const):
            names.update(names_used(const))
    return sorted(names)


def strings_used(code) -> Set[str]:
    """The string constants of ``code`` and the code nested in it (``getattr(obj, "x")``
    names ``x``)."""
    found = {c for c in code.co_consts if isinstance(c, str)}
    for const in code.co_consts:
        if inspect.iscode(const):
            found |= strings_used(const)
    return found


def line_naming(code, name: str) -> Optional[int]:
    """The first line of ``code`` that uses ``name``; else of the code nested in it (a
    loop body defined in a branch: the line inside it, not the ``for`` that passes the
    name on to it); else the line that passes it on."""
    uses, passes = [], []
    for instr in dis.get_instructions(code):
        if instr.argval == name and instr.opname.startswith(("LOAD_", "STORE_", "DELETE_")) \
                and instr.positions is not None and instr.positions.lineno is not None:
            (passes if instr.opname == "LOAD_CLOSURE" else uses).append(instr.positions.lineno)
    if uses:
        return min(uses)
    nested = [line_naming(c, name) for c in code.co_consts if inspect.iscode(c)]
    nested = [line for line in nested if line is not None]
    return min(nested) if nested else min(passes) if passes else None


class Watch:
    """Fingerprints of what ``fn`` can reach, to compare after running it; ``held``:
    (parameter name, value) of objects passed to it that it may change (a set, an
    iterator, a numpy array a region gets as state)."""

    def __init__(self, fn, carried: Iterable[Any] = (), held: Iterable[Tuple[str, Any]] = ()):
        self.carried = {id(v) for v in carried}
        self.roots = reach(fn)
        code = _user_code(fn)
        if code is not None:
            self.roots += [Root(((code, name),), value, cell=_FixedCell(value))
                           for name, value in held]
        self.containers: list = []
        for root in self.roots:
            root.print = fingerprint(root.value, carried=self.carried,
                                     containers=self.containers)

    def changed(self) -> Optional[Root]:
        """The first root whose binding or contents differ now, or None."""
        for root in self.roots:
            now = root.current()
            if now is not root.value:
                return root
            if fingerprint(now, carried=self.carried) != root.print:
                return root
        return None

    def restore(self) -> None:
        for root in self.roots:
            if root.cell is not None and not isinstance(root.cell, _FixedCell) \
                    and root.value is not _EMPTY:
                root.cell.cell_contents = root.value
            elif root.namespace is not None and root.value is not _EMPTY:
                root.namespace[root.path[-1][1]] = root.value
        restore([(o, c) for o, c in self.containers if id(o) not in self.carried])


def difference(before, after) -> str:
    """Where two fingerprints first differ, as a Python access path (``.log``, ``[2]``,
    ``[0].best``: into a list's items and an object's attributes)."""
    if not (isinstance(before, tuple) and isinstance(after, tuple) and len(before) >= 2
            and len(after) >= 2 and before[0] == after[0] and isinstance(before[0], type)):
        return ""
    a, b = before[1], after[1]
    if issubclass(before[0], (list, tuple)):        # (cls, length, items)
        if len(before) == len(after) == 3 and a == b and \
                isinstance(before[2], tuple) and isinstance(after[2], tuple):
            for i, (x, y) in enumerate(zip(before[2], after[2])):
                if x != y:
                    return f"[{i}]" + difference(x, y)
        return ""
    if isinstance(a, tuple) and isinstance(b, tuple) and all(
            isinstance(x, tuple) and len(x) == 2 for x in a + b):
        left, right = dict(a), dict(b)
        for k in list(left) + [k for k in right if k not in left]:
            if left.get(k, _EMPTY) != right.get(k, _EMPTY):
                step = f".{k}" if isinstance(k, str) and k.isidentifier() and \
                    not issubclass(before[0], dict) else f"[{k!r}]"
                if k in left and k in right:
                    return step + difference(left[k], right[k])
                return step
    return ""
