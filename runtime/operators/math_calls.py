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
and friends: a bool) and carries no gradient, as a Python number does.

Only a 0-d traced value (a number's stand-in, or a 0-d tensor: ``math`` takes its
``float()``) among the arguments, and the functions listed, are staged; other ``math``
calls of traced values raise as before (``float()`` of a traced tensor: the call falls
back naming the line).
"""
from __future__ import annotations

import math

import torch

from ..introspection import mark
from ..symbolic import contains_symbolic, dispatch_record, is_symbolic

NOT_MATH = object()
_FLOAT = {"cos", "sin", "tan", "acos", "asin", "atan", "atan2", "cosh", "sinh", "tanh",
          "acosh", "asinh", "atanh", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p",
          "sqrt", "pow", "fabs", "hypot", "copysign", "fmod", "radians", "degrees", "erf",
          "erfc", "gamma", "lgamma", "cbrt", "remainder"}
_INT = {"floor", "ceil", "trunc"}
_BOOL = {"isnan", "isinf", "isfinite"}
_KINDS = {**{n: "float" for n in _FLOAT}, **{n: "int" for n in _INT},
          **{n: "bool" for n in _BOOL}}
_DTYPES = {"float": torch.float64, "int": torch.int64, "bool": torch.bool}


def python_math(name: str, *args) -> torch.Tensor:
    """``math.<name>(*args)`` on the numbers the 0-d tensors among ``args`` hold, as a 0-d
    tensor of the result's kind."""
    kind = _KINDS[name]
    if any(isinstance(a, torch.Tensor) and a.is_meta for a in args):
        return torch.empty((), dtype=_DTYPES[kind], device="meta")
    value = getattr(math, name)(*[a.item() if isinstance(a, torch.Tensor) else a
                                  for a in args])
    return torch.tensor(value, dtype=_DTYPES[kind])


def math_call(f, args, kwargs):
    """``f(*args)`` as a graph value when ``f`` is one of ``math``'s functions above and
    an argument is a traced 0-d value; ``NOT_MATH`` otherwise."""
    name = getattr(f, "__name__", None)
    if name not in _KINDS or getattr(math, name, None) is not f or kwargs or \
            not contains_symbolic(args):
        return NOT_MATH
    if any(is_symbolic(a) and a.dim() != 0 or not is_symbolic(a) and
           not isinstance(a, (int, float)) for a in args):
        return NOT_MATH
    with torch.no_grad():
        out = dispatch_record(python_math, (name,) + tuple(args), {})
    kind = _KINDS[name]
    mark(out, kind)
    if kind == "int":
        out._node.attrs["python_int"] = True
    return out
