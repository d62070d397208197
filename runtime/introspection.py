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

import operator
from typing import Optional

import torch

from .errors import GraphError

# node.attrs[KEY]: the Python number a 0-d graph value stands for on every path ("int",
# "float", "bool"), or "mixed" when it is a number on some paths and a tensor on others
# (its type is known only at run time). Set where such values are made: a branch or loop
# merging a Python number (``control_flow``, ``while_loop``), ``int()``/``float()``/
# ``bool()`` of a tensor, Python arithmetic on stand-ins (``arithmetic_kind``).
KEY = "python_number"
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


def kind_of(value) -> Optional[str]:
    """The Python number kind ``value`` is or stands for (a Python number's own type, a
    graph value's mark); None for a tensor or anything else."""
    node = getattr(value, "_node", None) if isinstance(value, torch.Tensor) else None
    if node is not None:
        return number_kind(node.attrs)
    for name, kind in NUMBER_KINDS.items():
        if type(value) is kind:
            return name
    return None


def merged_kind(kinds) -> Optional[str]:
    """The kind of a value that is one of ``kinds`` depending on the path taken: the
    common kind, or "mixed" when paths disagree (a tensor on one, a number on another)."""
    kinds = set(kinds)
    if not kinds:
        return None
    return next(iter(kinds)) if len(kinds) == 1 else MIXED


def mark(value, kind: Optional[str]) -> None:
    """Record on a graph value's node the Python number it stands for."""
    node = getattr(value, "_node", None) if isinstance(value, torch.Tensor) else None
    if node is not None and kind is not None:
        node.attrs[KEY] = kind


_SAMPLES = {"int": 3, "float": 3.0, "bool": True}
_PYTHON_OPS = {
    "add": operator.add, "radd": lambda a, b: b + a, "sub": operator.sub,
    "rsub": lambda a, b: b - a, "mul": operator.mul, "rmul": lambda a, b: b * a,
    "truediv": operator.truediv, "div": operator.truediv, "rtruediv": lambda a, b: b / a,
    "rdiv": lambda a, b: b / a, "floordiv": operator.floordiv,
    "rfloordiv": lambda a, b: b // a, "mod": operator.mod, "rmod": lambda a, b: b % a,
    "floor_divide": operator.floordiv, "remainder": operator.mod,
    "neg": operator.neg, "pos": operator.pos, "positive": operator.pos, "abs": abs,
    "invert": operator.invert,
    "lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge,
    "eq": operator.eq, "ne": operator.ne, "pow": operator.pow, "rpow": lambda a, b: b ** a,
    "lshift": operator.lshift, "rlshift": lambda a, b: b << a, "rshift": operator.rshift,
    "rrshift": lambda a, b: b >> a, "and": operator.and_, "or": operator.or_,
    "ror": lambda a, b: b | a, "xor": operator.xor, "rxor": lambda a, b: b ^ a,
}       # (not "rand": torch.rand(n, m) has that name too)


# in-place operators on a Python number's stand-in: Python rebinds (``k += 1``, which
# torch dispatches as ``add_``)
REBINDING_OPS = {
    **{getattr(torch.Tensor, f"__i{name}__"): getattr(torch.Tensor, f"__{name}__")
       for name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow")},
    **{getattr(torch.Tensor, name + "_"): getattr(torch.Tensor, name)
       for name in ("add", "sub", "mul", "div", "floor_divide", "remainder", "pow")}}


def arithmetic_kind(name: str, args) -> Optional[str]:
    """The kind of Python arithmetic's result on stand-ins and Python numbers (``k + 1``
    is an int, ``acc * 0.5`` a float, ``k > 2`` a bool); None when a tensor operand (or
    an op Python numbers do not have) makes it a tensor."""
    fn = _PYTHON_OPS.get(name)
    if fn is None or not any(isinstance(a, torch.Tensor) for a in args):
        return None
    kinds = [kind_of(a) for a in args]
    if None in kinds:
        return None
    if MIXED in kinds:
        return MIXED
    if name in ("pow", "rpow"):     # (an int's power of a negative int is a float)
        samples = [a if type(a) in (int, float) else _SAMPLES[k] for a, k in zip(args, kinds)]
        try:
            return type(fn(*samples)).__name__
        except (ArithmeticError, ValueError):
            return None
    try:
        return type(fn(*[_SAMPLES[k] for k in kinds])).__name__
    except TypeError:               # (a float's shift: torch's own error, or a tensor's)
        return None


def python_class(attrs: dict, where: str):
    """``type(x)`` of a value whose node has ``attrs`` (``where``: the user's line)."""
    kind = number_kind(attrs)
    if kind is None:
        return attrs.get("tensor_class", torch.Tensor)     # an nn.Parameter argument
    if kind == MIXED:
        raise GraphError(
            f"{where}: the type of this value depends on the path taken at run time (a "
            f"Python number on one path of tensor-dependent control flow, a tensor on "
            f"another); a graph cannot answer type() or isinstance() for it")
    return NUMBER_KINDS[kind]


class RunTimeSize(tuple):
    """``x.shape`` / ``x.size()`` with a dimension known only at run time: a tuple of ints
    and graph values (a ``torch.Size`` cannot hold those). It answers ``type()``,
    ``isinstance`` and its printed text as the ``torch.Size`` it stands for, and becomes
    one when built again from real sizes (the executor's ``RunTimeSize((...))``)."""

    def __new__(cls, items=()):
        items = list(items)
        if all(isinstance(i, int) or (isinstance(i, torch.Tensor) and not hasattr(i, "_node")
                                      and i.dim() == 0 and not i.is_floating_point())
               for i in items):
            return torch.Size([int(i) for i in items])
        return super().__new__(cls, items)

    def __repr__(self):
        from .size_text import native_text      # (an f-string in code not converted)
        from .symbolic import current_graph
        graph = current_graph()
        text = native_text(self, graph) if graph is not None else None
        return text if text is not None else tuple.__repr__(self)

    __str__ = __repr__

    # a slice, sum or repeat of a torch.Size is a torch.Size (``x.shape[1:]``,
    # ``x.shape[:1] + (3,)``), printed and compared as one
    def __getitem__(self, index):
        got = tuple.__getitem__(self, index)
        return RunTimeSize(got) if isinstance(index, slice) else got

    def __add__(self, other):
        if not isinstance(other, tuple):
            return NotImplemented
        return RunTimeSize(tuple(self) + tuple(other))

    def __radd__(self, other):
        if not isinstance(other, tuple):
            return NotImplemented
        return RunTimeSize(tuple(other) + tuple(self))

    def __mul__(self, n):
        got = tuple.__mul__(self, n)
        return got if got is NotImplemented else RunTimeSize(got)

    __rmul__ = __mul__


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
