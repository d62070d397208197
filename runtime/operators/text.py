"""Text of traced values in converted code: f-strings, ``str.format``, ``%``, ``str``,
``repr``, ``format``, and Python numbers standing as 0-d graph values.

Python semantics: with no traced value among the operands, each operator computes exactly
the ``str`` Python computes. Staged semantics: the text of a tensor is known only when the
graph runs, so it becomes a ``DeferredText`` (literal parts and fields), which ``print``
and ``assert`` messages render on every run (``runtime.text_layout``). Any other use of it
as a ``str`` (a dict key, a comparison, a library call) raises ``GraphError`` naming the
user's line: the call falls back to eager.

A field's value is a symbolic tensor or a structure holding some; a graph value that stands
for a Python number (``runtime.introspection``) is rendered as that number (``1``, not
``tensor(1)``); one whose type depends on the path taken is refused.
"""
from __future__ import annotations

import _string
import re
import string
from typing import Any, List, Tuple

import torch

from ..errors import GraphError
from ..introspection import MIXED, RunTimeSize, number_kind
from ..outputs import reachable
from ..source_info import format_location, user_location
from ..symbolic import SymbolicTensor, contains_symbolic

_HOW = {-1: "", "": "", "s": "s", "r": "r", "a": "a"}


class Field:
    """One formatted operand: ``value`` (holding symbolic tensors), rendered at run time."""
    __slots__ = ("value", "how", "spec")

    def __init__(self, value, how: str, spec: str):
        self.value, self.how, self.spec = value, how, spec


def _refuse(what: str) -> GraphError:
    return GraphError(
        f"{format_location(user_location())}: {what} of text made from a tensor's value: "
        f"that text is known only when the graph runs; a graph can print it (print, an "
        f"assert message) but not use it as a Python str")


class DeferredText:
    """Text whose fields are known only when the graph runs (see the module docstring)."""
    __slots__ = ("parts",)
    __tograph_describe__ = ("text made from a tensor's value, known only when the graph "
                            "runs (a graph can print such text, not carry it as a str)")

    def __init__(self, parts):
        self.parts: Tuple = tuple(parts)

    def __add__(self, other):
        if isinstance(other, (str, DeferredText)):
            return _text(list(self.parts) + _parts(other))
        return NotImplemented

    def __radd__(self, other):
        if isinstance(other, str):
            return _text([other] + list(self.parts))
        return NotImplemented

    def __repr__(self):
        return "<text known when the graph runs>"

    def __str__(self):
        raise _refuse("str()")

    def __format__(self, spec):
        raise _refuse("formatting")

    def __bool__(self):
        raise _refuse("the truth value")

    def __len__(self):
        raise _refuse("len()")

    def __eq__(self, other):
        raise _refuse("comparing")

    __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __eq__

    def __hash__(self):
        raise _refuse("hashing (a dict key, a set member)")

    def __iter__(self):
        raise _refuse("iterating")

    def __getattr__(self, name):
        if name.startswith("__"):   # the runtime's own marks, ``__dict__``: it has none
            raise AttributeError(name)   # (a str has no ``__dict__``: looked at as state)
        raise _refuse(f"str.{name}")


def _parts(text) -> list:
    return list(text.parts) if isinstance(text, DeferredText) else [text]


def _text(parts: list):
    """A ``str`` when every part is known now, else a DeferredText (adjacent literals joined)."""
    merged: List[Any] = []
    for p in parts:
        if isinstance(p, str) and merged and isinstance(merged[-1], str):
            merged[-1] += p
        elif not (isinstance(p, str) and not p):
            merged.append(p)
    if all(isinstance(p, str) for p in merged):
        return "".join(merged)
    return DeferredText(merged)


def _known_spec(spec) -> str:
    if isinstance(spec, DeferredText):
        raise _refuse("a format spec")
    return spec


def refuse_traced_objects(value) -> None:
    """GraphError if ``value`` (an operand of text, or a printed value) is or holds, inside
    lists, tuples and dicts, an object (a dataclass, a namedtuple, a dict subclass) that
    holds traced tensors: its own ``__str__``/``__repr__`` would format their symbolic
    stand-ins now, or run on the graph's copy of it (a plain dict) later."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, (SymbolicTensor, DeferredText, torch.Tensor, str, int, float)) or \
                v is None:
            continue
        if type(v) in (list, tuple, dict, RunTimeSize):       # (a namedtuple: an object)
            stack.extend(v.values() if type(v) is dict else v)
            continue
        if any(isinstance(w, SymbolicTensor) for w in reachable([v], limit=2000)):
            raise GraphError(
                f"{format_location(user_location())}: the text of a {type(v).__name__} "
                f"object holding traced tensors: its own __str__/__repr__ would format "
                f"their stand-ins while tracing, not the values of each run")


def _field(value, how: str, spec) -> Any:
    """The part for one operand: its text now for a Python value, else a Field."""
    spec = _known_spec(spec)
    refuse_traced_objects(value)
    if isinstance(value, DeferredText):
        if (how in ("", "s") and not spec) or (how == "%" and spec == "%s"):
            return value
        raise _refuse("formatting")
    if not contains_symbolic(value):
        if how == "%":
            return spec % (value,)
        return format({"": lambda v: v, "s": str, "r": repr, "a": ascii}[how](value), spec)
    if isinstance(value, SymbolicTensor):
        _check_text(value, number_kind(value._node.attrs), how, spec)
    return Field(value, how, spec)


def _check_text(value, kind, how: str, spec: str) -> None:
    """Refuse text a graph cannot make exactly as Python would."""
    if kind == MIXED:
        raise GraphError(
            f"{format_location(user_location())}: the text of this value depends on the "
            f"path taken at run time (a Python number on one path of tensor-dependent "
            f"control flow, a tensor on another)")
    if kind == "float" and value._node.meta.dtype == torch.float32 and \
            not _few_digits(how, spec):
        raise GraphError(
            f"{format_location(user_location())}: the text of a Python float carried "
            f"through tensor-dependent control flow: the graph holds it as a float32, so "
            f"all its digits could differ from Python's double (a format with a precision "
            f"of at most 6 digits, e.g. f'{{v:.4f}}', converts)")


def kind_template(value, item: bool = False):
    """How to read a printed value at run time: a number kind for a Python number's
    stand-in, ("list"/"tuple"/"dict", item templates) for a container holding one, ""
    for as it is (Python prints container items with repr: all digits)."""
    if isinstance(value, SymbolicTensor):
        kind = number_kind(value._node.attrs)
        if item:
            _check_text(value, kind, "r", "")
        return kind or ""
    if type(value) in (list, tuple, dict, RunTimeSize):
        items = list(value.values()) if type(value) is dict else list(value)
        kinds = tuple(kind_template(v, True) for v in items)
        if any(kinds) or type(value) is RunTimeSize:     # (a shape stays a torch.Size)
            return ("size" if type(value) is RunTimeSize else type(value).__name__, kinds)
    if type(value) is torch.Size:       # (a graph holds a static shape as a tuple)
        return ("size", ("",) * len(value))
    return ""


_PRECISION = re.compile(r"\.(\d+)[eEfFgG%]?$")


def _few_digits(how: str, spec: str) -> bool:
    """Whether a float32 is rendered with few enough digits to read as Python's double."""
    if how == "%":
        if spec[-1] not in "eEfFgG":
            return False
        found = re.search(r"\.(\d+)", spec)
        return found is None or int(found.group(1)) <= 6
    found = _PRECISION.search(spec) if how == "" else None
    return found is not None and int(found.group(1)) <= 6


# --------------------------------------------------------------------------- builders
def fstring(*parts):
    """An f-string: literal ``str`` parts and ``(value, conversion, spec)`` fields."""
    out: List[Any] = []
    for p in parts:
        if isinstance(p, str):
            out.append(p)
        else:
            value, how, spec = p
            out.extend(_parts(_field(value, _HOW[how], spec)))
    return _text(out)


def text_of(value, how: str = "s", spec: str = ""):
    """``str(value)`` (how "s"), ``repr`` ("r"), ``ascii`` ("a"), ``format(value, spec)``
    (how "") of a value holding symbolic tensors."""
    return _text(_parts(_field(value, how, spec)))


def format_method(template: str, args, kwargs):
    """``template.format(*args, **kwargs)`` with symbolic operands."""
    counter = [0]
    return _text(_expand(template, args, kwargs, counter, 2))


def _expand(template: str, args, kwargs, counter, depth: int) -> list:
    formatter = string.Formatter()
    out: List[Any] = []
    for literal, name, spec, conversion in formatter.parse(template):
        if literal:
            out.append(literal)
        if name is None:
            continue
        first, _ = _split_field(name)
        if first == "":
            if counter[0] is None:
                raise ValueError("cannot switch from manual field specification to "
                                 "automatic field numbering")
            name = f"{counter[0]}{name}"
            counter[0] += 1
        elif isinstance(first, int):
            if counter[0]:
                raise ValueError("cannot switch from automatic field numbering to manual "
                                 "field specification")
            counter[0] = None
        value, _ = formatter.get_field(name, args, kwargs)
        if depth <= 0:
            raise ValueError("Max string recursion exceeded")
        spec_text = _text(_expand(spec, args, kwargs, counter, depth - 1)) if spec else ""
        out.extend(_parts(_field(value, _HOW[conversion or ""], spec_text)))
    return out


def _split_field(name: str):
    return _string.formatter_field_name_split(name)


_PRINTF = re.compile(r"%(?:\((?P<key>[^)]*)\))?(?P<body>[#0\- +]*(?:\*|\d+)?(?:\.(?:\*|\d+))?"
                     r"[hlL]?(?P<type>[diouxXeEfFgGcrsa%]))")


def percent(template, values):
    """``template % values`` (``template`` a str literal in the user's code)."""
    if not isinstance(template, str) or not contains_symbolic(values):
        return template % values
    mapping = values if isinstance(values, dict) else None
    items = list(values) if type(values) is tuple else [values]
    out: List[Any] = []
    pos = used = 0
    for m in _PRINTF.finditer(template):
        out.append(template[pos:m.start()])
        pos = m.end()
        body = m.group("body")
        if m.group("type") == "%" and m.group("key") is None:
            out.append("%")
            continue
        if "*" in body:
            raise _refuse("a '*' width or precision")
        if m.group("key") is not None:
            if mapping is None:
                raise TypeError("format requires a mapping")
            value = mapping[m.group("key")]
        else:
            if used >= len(items):
                raise TypeError("not enough arguments for format string")
            value, used = items[used], used + 1
        out.extend(_parts(_field(value, "%", "%" + body)))
    out.append(template[pos:])
    if mapping is None and used < len(items):
        raise TypeError("not all arguments converted during string formatting")
    return _text(out)


def join_text(sep: str, items):
    """``sep.join(items)`` where some items are DeferredText."""
    out: List[Any] = []
    for i, item in enumerate(items):
        if not isinstance(item, (str, DeferredText)):
            raise TypeError(f"sequence item {i}: expected str instance, "
                            f"{type(item).__name__} found")
        if i:
            out.append(sep)
        out.extend(_parts(item))
    return _text(out)


# --------------------------------------------------------------------------- layouts
def layout(texts) -> Tuple[tuple, tuple]:
    """(values, layout) for ``runtime.graph_ops``: one part tuple per text in ``texts``
    (each a ``str``, a DeferredText, or a value printed with ``str``)."""
    values: List[Any] = []
    entries = []
    for text in texts:
        if not isinstance(text, DeferredText):
            text = text_of(text, "s") if contains_symbolic(text) else str(text)
        parts = []
        for p in _parts(text):
            if isinstance(p, str):
                parts.append(p)
                continue
            parts.append((len(values), p.how, p.spec, kind_template(p.value)))
            values.append(p.value)
        entries.append(tuple(parts))
    return tuple(values), tuple(entries)


def needs_layout(values) -> bool:
    """Whether printing ``values`` needs run-time text (not the values as they are)."""
    return any(isinstance(v, DeferredText) or (contains_symbolic(v) and kind_template(v))
               for v in values)
