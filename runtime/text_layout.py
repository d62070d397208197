"""Text rendered when a graph runs: what ``print``, f-strings, ``str.format``, ``%`` and
``str``/``repr`` of tensors produce, built from the run-time values.

A layout is data (it is saved with the graph): a tuple of parts, each a literal ``str`` or
a field ``(index, how, spec, kind)``: ``values[index]``, read as a Python number of
``kind`` ("int", "float", "bool"; "" for as it is; ``(container, item kinds)`` for a
list/tuple/dict/``torch.Size`` holding such numbers), then rendered as Python renders it:
``how`` "" -> ``format(v, spec)``; "s"/"r"/"a" -> ``format(str/repr/ascii(v), spec)``
(an f-string's ``!s``, ``print``'s ``str``); "%" -> ``spec % (v,)`` (``spec`` one printf
conversion such as ``"%.3f"``).
"""
from __future__ import annotations

import struct

import torch

_CONVERSIONS = {"s": str, "r": repr, "a": ascii}


def _float32_text_value(x: float) -> float:
    """The Python float a float32 stand-in prints as: the shortest decimal that reads back
    as the same float32 (``0.1``, not ``0.10000000149011612``)."""
    target = struct.unpack("f", struct.pack("f", x))[0]
    for digits in range(1, 10):
        shortest = float(f"{x:.{digits}g}")
        if struct.unpack("f", struct.pack("f", shortest))[0] == target:
            return shortest
    return x


def as_number(value, kind):
    """A 0-d tensor standing for a Python number, as that number; ``kind`` ("list",
    "tuple" or "dict", item kinds): a container holding such tensors, rebuilt."""
    if not kind:
        return value
    if isinstance(kind, tuple):
        container, kinds = kind
        if container == "dict":
            return {k: as_number(v, c) for (k, v), c in zip(value.items(), kinds)}
        items = [as_number(v, c) for v, c in zip(value, kinds)]
        if container == "size":                 # x.shape with a run-time dimension
            return torch.Size(items)
        return items if container == "list" else tuple(items)
    if kind == "int":
        return int(value)
    if kind == "bool":
        return bool(value)
    number = float(value)
    return _float32_text_value(number) if str(value.dtype) == "torch.float32" else number


def render_field(value, how: str, spec: str, kind: str = "") -> str:
    value = as_number(value, kind)
    if how == "%":
        return spec % (value,)
    if how:
        value = _CONVERSIONS[how](value)
    return format(value, spec)


def render(parts, values) -> str:
    """The text of a layout's ``parts`` for the run-time ``values``."""
    return "".join(p if isinstance(p, str) else render_field(values[p[0]], *p[1:])
                   for p in parts)
