"""Python values chosen by a tensor condition.

    r.tag = "init"
    if x.sum() > 0:
        r.tag = "pos"        # a str on one path, another str on the other
    return r             # the caller gets "pos" or "init", as the run goes

A Python value that the two branches of a ``cond`` leave different (two strings, ``None``
and a string, an int and a float) cannot be a tensor. It leaves the ``cond`` as a
``PathValue``: a 0-d int64 graph output (which option the run took) and the options. A
result holding one is rebuilt on each call with the option the run took
(``runtime.outputs``). Used while tracing -- compared, printed, hashed, tested, passed to
a function that is not converted, even asked its class -- it raises ``GraphError``, so
the call falls back: its value is known only when the graph runs. Python's ``is`` cannot
be intercepted, so no PathValue is made while converted code that compares with ``is``
is being traced (see ``allowed``), and none flows into converted code that does.

A loop's Python values would need every iteration's options; the one loop value carried
is a list its body grows by the same plain items each iteration (``RepeatValue``).

A list value (a PathValue whose options are lists, a RepeatValue) still takes ``append``
and ``extend`` of plain values while tracing -- the next ``with cm:`` logging its exit:
every option gets the items (whichever list the run took has them), as a new value that
replaces it in its one holder (``region_state.regrow``), so a later region that appends
carries the change like any other; a cond may choose among lists a loop grew (a
RepeatValue option, its count brought out of the branch that grew it: ``_lift``).
"""
from __future__ import annotations

import dis
import sys
import weakref
from typing import Dict, List, Tuple

import torch

from .constant_keys import same_constant
from .errors import GraphError
from .subgraphs import _leaf_meta, _is_plain
from .symbolic import building
from .threads import PerThreadList

_NUMBERS = (bool, int, float)
MADE = [0]      # PathValues ever made: until one is, calls need no check


class PathValue:
    """One of ``options``; which one is known when the graph runs (``index``)."""

    __slots__ = ("index", "options")
    __tograph_trace_only__ = True       # (``Graph.add_node`` refuses it as an argument)

    def __init__(self, index, options: tuple):
        object.__setattr__(self, "index", index)
        object.__setattr__(self, "options", options)

    def _refuse(self, *args, **kwargs):
        raise GraphError(
            f"a Python value that tensor-dependent control flow chose ({self._what()}) is "
            f"used while tracing; its value is known only when the graph runs")

    def _what(self) -> str:
        return f"one of {', '.join(_short(o) for o in self.options)}"

    __bool__ = __str__ = __repr__ = __format__ = __hash__ = _refuse
    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _refuse
    __len__ = __iter__ = __contains__ = __getitem__ = __call__ = _refuse
    __setitem__ = __delitem__ = _refuse
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __mod__ = _refuse
    __truediv__ = __rtruediv__ = __floordiv__ = __neg__ = __int__ = __float__ = _refuse
    __index__ = __setattr__ = __reduce__ = __reduce_ex__ = __copy__ = __deepcopy__ = _refuse
    __pow__ = __rpow__ = __rfloordiv__ = __rmod__ = __divmod__ = __rdivmod__ = _refuse
    __pos__ = __abs__ = __invert__ = __round__ = __trunc__ = __floor__ = __ceil__ = _refuse
    __and__ = __rand__ = __or__ = __ror__ = __xor__ = __rxor__ = _refuse
    __lshift__ = __rlshift__ = __rshift__ = __rrshift__ = __matmul__ = __rmatmul__ = _refuse
    __complex__ = _refuse

    def __getattr__(self, name):        # a method of the value (``log.append``)
        if name.startswith("_"):
            raise AttributeError(name)
        if name in ("append", "extend") and self._grows():
            return lambda value: self._grow([value] if name == "append" else value)
        self._refuse()

    def _grows(self) -> bool:
        """A list that may take appends while tracing: every option is a list."""
        return type(self) is PathValue and all(
            type(o) is list or isinstance(o, RepeatValue) for o in self.options)

    def _grow(self, items) -> None:
        """``append``/``extend`` of plain values: every option gets them (the list the
        run takes has them, whichever it is), as a new value its one holder (``cm.log``)
        gets (``region_state.regrow``: a region that appends carries the change)."""
        if isinstance(items, PathValue) or not isinstance(items, (list, tuple)) or \
                not all(_is_plain(v) for v in items):
            self._refuse()
        from .region_state import regrow
        regrow(self, self._with(tuple(items)))
        MADE[0] += 1

    def _with(self, items: tuple) -> "PathValue":
        return PathValue(self.index, tuple(
            o._with(items) if isinstance(o, RepeatValue) else list(o) + list(items)
            for o in self.options))

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        for v in list(args) + list((kwargs or {}).values()):
            if isinstance(v, PathValue):
                v._refuse()
        return NotImplemented


class RepeatValue(PathValue):
    """The list ``before + pattern * index`` (a list a tensor loop's body appends the same
    plain items to on every iteration: ``index`` counts the iterations the run takes).
    Refused when used while tracing, like every PathValue; ``runtime.outputs`` makes a
    fresh list of it on each call. ``options``: before, pattern and, once appended to
    after the loop, the suffix (``before + pattern * index + suffix``)."""

    __slots__ = ()

    def _what(self) -> str:
        before, pattern, suffix = self._parts()
        return f"the list {_short(list(before))} + {_short(list(pattern))} * iterations" + \
            (f" + {_short(list(suffix))}" if suffix else "")

    def _parts(self) -> tuple:
        return tuple(self.options) + ((),) * (3 - len(self.options))

    def _grows(self) -> bool:
        return True

    def _with(self, items: tuple) -> "RepeatValue":
        before, pattern, suffix = self._parts()
        return RepeatValue(self.index, (before, pattern, tuple(suffix) + items))

    def build(self, count) -> list:
        before, pattern, suffix = self._parts()
        return list(before) + list(pattern) * int(count) + list(suffix)


class PathChoice(PathValue):
    """A container whose structure depends on the path: ``options[index]``, where
    ``options`` are the two paths' containers (their tensors: outputs of the ``cond``, a
    zero placeholder on the path that did not build them). Made by ``path_structures``;
    refused when used while tracing; ``runtime.outputs`` rebuilds the chosen one per call."""

    __slots__ = ()

    def _what(self) -> str:
        first, second = (_shape(o) for o in self.options)
        return f"{first} on one path and {second} on the other"


def _shape(value) -> str:
    if isinstance(value, dict):
        return f"a {type(value).__name__} with keys {_short(list(value))}"
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)}"
    return f"a {type(value).__name__}"


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 20 else text[:17] + "..."


def _choosable(v, graph=None) -> bool:
    if isinstance(v, RepeatValue):      # an option whole, in a cond (``graph``): its
        return graph is not None        # count an index of its own (``_lift``)
    if isinstance(v, PathChoice):
        return False        # (a pytree node)
    return isinstance(v, PathValue) or (_leaf_meta(v) is None and _is_plain(v))


def _options(v) -> tuple:
    """The options a cond's value brings to its choice: a PathValue's, or itself."""
    return v.options if type(v) is PathValue else (v,)


def _same(a, b) -> bool:
    return same_constant(a, b)


class _Lift:
    """An option of a cond's choice that is a list a loop in one branch grew: its count
    leaves the cond as an output of its own (at ``position``; 0 on the other path)."""
    __slots__ = ("position", "options")

    def __init__(self, position: int, options: tuple):
        self.position, self.options = position, options


class _Chosen(dict):
    """{leaf position: options} of ``choose``; ``size``: the leaves before the counts
    ``_Lift`` added."""
    size = 0


def _lift(options: tuple, side: int, graphs, then_out: list, else_out: list):
    """``options`` with each RepeatValue whose count the cond's graph cannot see (a loop
    in the branch ``side`` grew it) as a ``_Lift``, its count appended to that side's
    leaves (0 to the other's)."""
    from .region_state import _in_scope
    counts, out = [], []
    for o in options:
        if isinstance(o, RepeatValue) and not _in_scope(o.index, graphs[2]):
            counts.append(o.index)
            o = _Lift(len(then_out) + len(counts) - 1, o.options)
        out.append(o)
    for count in counts:
        then_out.append(count if side == 0 else 0)
        else_out.append(0 if side == 0 else count)
    return tuple(out)


def choose(then_g, then_out: list, else_g, else_out: list) -> Dict[int, tuple]:
    """Where the branches leave two different Python values (``_merge_leaf`` could make
    no tensor of them), put an option index in their place (then: 0.., else: after the
    then options), in place in the lists; returns {leaf position: options}. A list a
    loop in a branch grew (a ``RepeatValue`` option) brings its count as a leaf of its
    own, appended to the lists."""
    found = _Chosen()
    found.size = len(then_out)
    graphs = (then_g, else_g, then_g.parent)
    for i in range(found.size):
        a, b = then_out[i], else_out[i]
        if not (_choosable(a, then_g.parent) and _choosable(b, then_g.parent)) or (
                not isinstance(a, PathValue) and not isinstance(b, PathValue) and
                (_same(a, b) or (isinstance(a, _NUMBERS) and type(a) is type(b)))):
            continue
        if not allowed() or not (_seen(_options(a), then_g) and _seen(_options(b), else_g)):
            continue
        first = _lift(_options(a), 0, graphs, then_out, else_out)
        second = _lift(_options(b), 1, graphs, then_out, else_out)
        then_out[i] = a.index if type(a) is PathValue else 0
        if type(b) is PathValue:
            with building(else_g):
                else_out[i] = b.index + len(first)
        else:
            else_out[i] = len(first)
        found[i] = first + second
    return found


def _seen(options: tuple, graph) -> bool:
    """Every RepeatValue option's count is a value of the branch ``graph`` or around it."""
    from .region_state import _in_scope
    return all(_in_scope(o.index, graph) for o in options if isinstance(o, RepeatValue))


def wrap(leaves: list, found: Dict[int, tuple]) -> list:
    """The ``cond``'s results with PathValues where ``choose`` put indices (and lifted
    counts: the leaves after ``size`` are taken off)."""
    for i, options in found.items():
        options = tuple(RepeatValue(leaves[o.position], o.options) if isinstance(o, _Lift)
                        else o for o in options)
        leaves[i] = PathValue(leaves[i], options)
        MADE[0] += 1
    del leaves[getattr(found, "size", len(leaves)):]
    return leaves


# --------------------------------------------------------------------------- `is`
_COMPARES_IDENTITY = weakref.WeakKeyDictionary()     # code -> bool (generated code is freed)



def compares_identity(code) -> bool:
    """Whether ``code`` (or code nested in it) uses ``is``/``is not`` or builds a PathValue
    check we cannot see (cached per code object)."""
    hit = _COMPARES_IDENTITY.get(code)
    if hit is None:
        hit = any(ins.opname == "IS_OP" for ins in dis.get_instructions(code)) or any(
            compares_identity(c) for c in code.co_consts if hasattr(c, "co_code"))
        _COMPARES_IDENTITY[code] = hit
    return hit


# --------------------------------------------------------------------------- identity
_IDENTITIES = PerThreadList()   # (per thread) (copy, index, options): see ``note_identity``


def note_identity(copy, index, options: tuple) -> None:
    """``copy`` (a ``cond``'s rebuilt list or dict) stands for a different object on each
    path: ``options`` (then's, else's; None: the copy itself, a container the path made),
    ``index`` (0-d graph output) says which path ran. A result holding ``copy`` hands back
    that path's object per call (``runtime.outputs``)."""
    _IDENTITIES.append((copy, index, options))


def identity_choice(value):
    """``(index, options)`` noted for ``value`` (``note_identity``), or None."""
    for copy, index, options in _IDENTITIES:
        if copy is value:
            return index, options
    return None


def identities_mark() -> int:
    return len(_IDENTITIES)


def forget_identities(mark: int) -> None:
    """Forget what ``note_identity`` noted since ``mark`` (a trace is done with them)."""
    del _IDENTITIES[mark:]


def allowed() -> bool:
    """A PathValue may be made: converted code is being traced (its result is rebuilt
    per call; ``runtime.cond`` called as such keeps its mismatch error) and none of it on
    the stack compares with ``is``."""
    frame = sys._getframe(1)
    converted = False
    while frame is not None:
        code = frame.f_code
        if code.co_filename.startswith("<tograph generated"):
            if compares_identity(code):
                return False
            converted = True
        frame = frame.f_back
    return converted


def check_call(fn, args: tuple, kwargs: dict, converted: bool) -> None:
    """Before a call while tracing: a PathValue given to code that is not converted (a
    builtin like ``isinstance``, a library), or to converted code that compares with
    ``is``, is refused."""
    if not MADE[0]:
        return
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    if not converted or code is None:
        values = [v for v in list(args) + list(kwargs.values()) if isinstance(v, PathValue)]
    elif compares_identity(code):
        values = holds_path_values((args, kwargs))
    else:
        return
    if values:
        values[0]._refuse()


def holds_path_values(value, limit: int = 1000) -> List[PathValue]:
    """The PathValues directly in ``value`` (lists, tuples, dicts, object attributes)."""
    found: List[PathValue] = []
    stack: List[Tuple[object, int]] = [(value, 0)]
    seen = set()
    while stack and len(seen) < limit:
        v, depth = stack.pop()
        if id(v) in seen or depth > 4 or isinstance(v, torch.Tensor):
            continue
        seen.add(id(v))
        if isinstance(v, PathValue):
            found.append(v)
        elif isinstance(v, (list, tuple)):
            stack.extend((x, depth + 1) for x in v)
        elif isinstance(v, dict):
            stack.extend((x, depth + 1) for x in v.values())
        elif isinstance(getattr(v, "__dict__", None), dict):
            stack.extend((x, depth + 1) for x in vars(v).values())
    return found
