"""``math`` functions of traced numbers in converted code (``tg.call`` routes here).

A learning-rate schedule written by hand (nanoGPT's ``get_lr``:
``0.5 * (1.0 + math.cos(math.pi * ratio))``) computes on the step counter, which in a
traced training step is a graph value standing for a Python number (``sched.last_epoch``,
``opt.param_groups[0]["lr"]``, ``int(t)``, a tensor argument). Eagerly ``math.cos`` takes
``float()`` of such a value and computes in C doubles; torch's own ``cos`` on a float64
tensor differs from it in the last bit for some inputs, which an lr would carry into every
parameter. So the call is a ``python_math`` node that calls the ``math`` function itself
on the run-time numbers (``.item()``: the int or float each stands for): eager's value, to
the bit. Its result stands for a float (``floor``/``ceil``/``trunc``: an int; ``isnan``
and friends: a bool) and carries no gradient, as a Python number does. ``math.isclose``
(its ``rel_tol``/``abs_tol`` keywords too) is one bool node; ``math.modf`` and
``math.frexp``, whose result is a tuple, are one node per item (``_PARTS``).

Only a 0-d traced value (a number's stand-in, or a 0-d tensor: ``math`` takes its
``float()``) among the arguments, and the functions listed, are staged; other ``math``
calls of traced values raise as before (``float()`` of a traced tensor: the call falls
back naming the line).
"""
from __future__ import annotations

import math

import torch

from .. import int_overflow, number_checks
from ..introspection import mark
from ..source_info import user_location
from ..symbolic import contains_symbolic, dispatch_record, is_symbolic
from .effects import note_staged_error

NOT_MATH = object()
_FLOAT = {"cos", "sin", "tan", "acos", "asin", "atan", "atan2", "cosh", "sinh", "tanh",
          "acosh", "asinh", "atanh", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p",
          "sqrt", "pow", "fabs", "hypot", "copysign", "fmod", "radians", "degrees", "erf",
          "erfc", "gamma", "lgamma", "cbrt", "remainder"}
_INT = {"floor", "ceil", "trunc"}
_BOOL = {"isnan", "isinf", "isfinite"}
_PARTS = {"modf": ("float", "float"), "frexp": ("float", "int")}   # tuple results
_SPELLED = {        # (what python_math calls for the names math has no function of)
    "isclose": lambda a, b, rel_tol, abs_tol: math.isclose(a, b, rel_tol=rel_tol,
                                                           abs_tol=abs_tol),
    **{f"{name}[{i}]": (lambda i, f: lambda x: f(x)[i])(i, getattr(math, name))
       for name, kinds in _PARTS.items() for i in range(len(kinds))}}
_KINDS = {**{n: "float" for n in _FLOAT}, **{n: "int" for n in _INT},
          **{n: "bool" for n in _BOOL}, "isclose": "bool",
          **{f"{name}[{i}]": kind for name, kinds in _PARTS.items()
             for i, kind in enumerate(kinds)}}
_ISCLOSE = {"rel_tol": 1e-09, "abs_tol": 0.0}       # (its keyword-only defaults)
_DTYPES = {"float": torch.float64, "int": torch.int64, "bool": torch.bool}


def python_math(name: str, file: str, line: int, *args) -> torch.Tensor:
    """``math.<name>(*args)`` on the numbers the 0-d tensors among ``args`` hold, as a 0-d
    tensor of the result's kind (``file``/``line``: the call's, for its errors)."""
    kind = _KINDS[name]
    if any(isinstance(a, torch.Tensor) and a.is_meta for a in args):
        return torch.empty((), dtype=_DTYPES[kind], device="meta")
    try:
        value = _SPELLED.get(name, getattr(math, name, None))(
            *[a.item() if isinstance(a, torch.Tensor) else a for a in args])
    except (ArithmeticError, ValueError) as e:     # math range/domain errors, as eager's
        number_checks.raise_python(e)
    if kind == "int" and not -(1 << 63) <= value < (1 << 63):
        raise number_checks.rerun(f"math.{name}() of a number the graph computed is past "
                                  f"int64 ({value}): eager's Python int holds it", file, line)
    return torch.tensor(value, dtype=_DTYPES[kind])


def math_call(f, args, kwargs):
    """``f(*args)`` as a graph value when ``f`` is one of ``math``'s functions above and
    an argument is a traced 0-d value; ``NOT_MATH`` otherwise."""
    name = getattr(f, "__name__", None)
    if name not in _KINDS and name not in _PARTS or getattr(math, name, None) is not f or \
            not contains_symbolic((args, kwargs)):
        return NOT_MATH
    if name == "isclose":       # (keywords: as positional arguments, in their order)
        if len(args) != 2 or set(kwargs) - set(_ISCLOSE):
            return NOT_MATH
        args = tuple(args) + tuple(kwargs.get(k, d) for k, d in _ISCLOSE.items())
    elif kwargs:
        return NOT_MATH
    if any(is_symbolic(a) and a.dim() != 0 or not is_symbolic(a) and
           not isinstance(a, (int, float)) for a in args):
        return NOT_MATH
    note_staged_error(OverflowError)    # (math.exp(1000): an enclosing try refuses)
    if name in _PARTS:
        return tuple(_staged(f"{name}[{i}]", args) for i in range(len(_PARTS[name])))
    return _staged(name, args)


def _staged(name: str, args) -> torch.Tensor:
    """One ``python_math`` node of ``name`` (a key of ``_KINDS``), marked as its kind."""
    with torch.no_grad():
        out = dispatch_record(python_math, (name,) + (user_location() or ("<unknown>", 0))
                              + tuple(args), {})
    kind = _KINDS[name]
    mark(out, kind)
    if kind == "int":
        out._node.attrs["python_int"] = True
    return out


int_overflow.RERUNS.add(python_math)     # (an int past int64: the call runs eagerly)
