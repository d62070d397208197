"""What user code sees when it asks a traced value about itself.

A symbolic tensor stands for a plain ``torch.Tensor`` (or, when its node is marked so, for
a Python ``int``/``float``/``bool``: a size known only at run time, a staged ``range``
index, a Python number carried through tensor control flow). Questions about it answer as
for that value: ``type(x)``, ``x.__class__``, ``isinstance``, ``x.type()``. A value whose
type depends on the path taken at run time (a Python float on one path of a tensor ``if``,
a tensor on the other) refuses such questions with a ``GraphError`` naming the user's line,
so the call falls back to eager.

Also here: the legacy constructors whose meaning depends on their argument's *kind*
(``x.new(torch.Size([5, 8]))`` is an uninitialised 5x8 tensor, ``x.new([5, 8])`` holds the
data 5 and 8), rewritten into the equivalent ``torch.empty`` / ``torch.tensor`` call.

Torch-only: the symbolic-tensor layer calls these with a node's attributes.
"""
from __future__ import annotations

from typing import Optional

import torch

from .errors import GraphError

# node.attrs["python_number"]: the Python number a 0-d graph value stands for on every
# path ("int", "float", "bool"), or "mixed" when it is a number on some paths and a tensor
# on others (its type is known only at run time).
NUMBER_KINDS = {"int": int, "float": float, "bool": bool}
MIXED = "mixed"


def number_kind(attrs: dict) -> Optional[str]:
    """The Python number kind a node's value stands for ("int", "float", "bool",
    "mixed"), or None for a tensor."""
    kind = attrs.get("python_number")
    if kind is not None:
        return kind
    if attrs.get("python_int") or attrs.get("python_index"):
        return "int"
    return None


def kind_of_value(value, attrs: Optional[dict]) -> Optional[str]:
    """The number kind of a value meeting another at a merge: a Python number's own type,
    a graph value's mark (``attrs``), None for a tensor; "other" for anything else."""
    if attrs is not None:
        return number_kind(attrs)
    if isinstance(value, torch.Tensor):
        return None
    for name, kind in NUMBER_KINDS.items():
        if type(value) is kind:
            return name
    return "other"


def merged_kind(kinds) -> Optional[str]:
    """The mark for a value that is one of ``kinds`` depending on the path: the common
    kind, or "mixed" when paths disagree (a tensor on one, a number on another)."""
    kinds = set(kinds)
    if len(kinds) == 1:
        return next(iter(kinds))
    return MIXED


def python_class(attrs: dict, where: str):
    """``type(x)`` of a value whose node has ``attrs`` (``where``: the user's line)."""
    kind = number_kind(attrs)
    if kind is None:
        return torch.Tensor
    if kind == MIXED:
        raise GraphError(
            f"{where}: the type of this value depends on the path taken at run time (a "
            f"Python number on one path of tensor-dependent control flow, a tensor on "
            f"another); a graph cannot answer type() or isinstance() for it")
    return NUMBER_KINDS[kind]


def legacy_type(dtype: torch.dtype, args, kwargs, where: str):
    """``x.type(...)`` of a CPU tensor of ``dtype``: the type name (no argument), or the
    dtype to convert to (a name, a legacy tensor class or a dtype)."""
    with torch._C.DisableTorchFunction():
        probe = torch.empty(0, dtype=dtype).type(*args, **kwargs)
    if isinstance(probe, str):
        return probe
    if probe.device.type != "cpu":
        raise GraphError(f"{where}: .type() to a {probe.device.type} tensor type cannot be part "
                         f"of a CPU graph")
    return probe.dtype


def legacy_new(dtype: torch.dtype, args, kwargs):
    """``x.new(*args, **kwargs)`` as (function, args, kwargs) of the same meaning: sizes
    (ints, or one ``torch.Size``) make an uninitialised tensor, one other sequence is
    data, nothing is an empty 1-d tensor. None: another form, left to torch."""
    if set(kwargs) - {"device"}:
        return None
    options = {"dtype": dtype, **kwargs}
    if not args:
        return torch.empty, ((0,),), options
    if len(args) == 1 and isinstance(args[0], torch.Size):
        return torch.empty, (tuple(args[0]),), options
    if all(isinstance(a, int) and not isinstance(a, bool) for a in args):
        return torch.empty, (tuple(args),), options
    if len(args) == 1 and isinstance(args[0], (list, tuple)):
        return torch.tensor, (args[0],), options
    return None
