"""Python arithmetic on number stand-ins that raises, or rounds, where torch's would not.

A ``.item()`` value (or ``int(t)``, ``float(t)``) is a 0-d graph value standing for a
Python number. For most arithmetic torch's op on it is Python's, but not where Python
raises or takes another sign:

    tp / (tp + fp)          # eager: ZeroDivisionError (an ``except`` may catch it); torch: nan
    n // d, n % d           # eager: ZeroDivisionError; torch: RuntimeError('ZeroDivisionError')
    v ** 2                  # v = 1e308: eager OverflowError; torch inf
    divmod(1.0, -0.5)       # eager (-2.0, -0.0): the remainder takes the divisor's sign;
                            # torch.remainder gives 0.0
    int(v * 1e20)           # eager 300000000000000000000; torch's int64 wraps

Those ops, where the operands may make them raise or differ (a divisor that may be zero,
a float ``%``, a float ``**`` whose operands' bounds are not known to stay finite and
real, ``int()`` of a float), are recorded as ``checked_number`` / ``checked_int_of``:
when the graph runs they compute Python's own result on the exact numbers, raising
Python's exception (type and text) at the user's line; an enclosing ``try`` whose handler
would catch it refuses the trace (``operators.effects.note_staged_error``). Where Python's
result is something a stand-in cannot be (an int past int64, a complex power), they raise
``IntOverflow``: an effect-free call runs eagerly instead (``int_overflow``).

Ops on tensors, and number ops that cannot fault (a division by a non-zero constant or a
bounded non-zero value, a run-time size as the divisor), keep torch's op and pay nothing.
"""
from __future__ import annotations

import contextlib
import math
from typing import Optional

import torch

from . import int_overflow
from .graph_ops import register
from .introspection import _PYTHON_OPS, kind_of
from .threads import PerThreadList

_DTYPES = {"int": torch.int64, "float": torch.float64, "bool": torch.bool}
_CLASSES = {"int": int, "float": float, "bool": bool}
_DIVIDE = frozenset({"truediv", "div", "floordiv", "floor_divide", "mod", "remainder"})
_RDIVIDE = frozenset({"rtruediv", "rdiv", "rfloordiv", "rmod"})
_MODS = frozenset({"mod", "remainder", "rmod"})
_POWERS = frozenset({"pow", "rpow"})
# ``divmod(a, b)`` is ``a // b, a % b`` on stand-ins; Python's error text is divmod's own
_PARTS = {"floordiv": "divmod_q", "floor_divide": "divmod_q", "mod": "divmod_r",
          "remainder": "divmod_r", "rfloordiv": "rdivmod_q", "rmod": "rdivmod_r"}
_OPS = {**_PYTHON_OPS,
        "divmod_q": lambda a, b: divmod(a, b)[0], "divmod_r": lambda a, b: divmod(a, b)[1],
        "rdivmod_q": lambda a, b: divmod(b, a)[0], "rdivmod_r": lambda a, b: divmod(b, a)[1]}
_IN_DIVMOD = PerThreadList([0])     # (per thread) inside ``divmod_parts``


@contextlib.contextmanager
def divmod_parts():
    """Around ``k // d, k % d`` computing ``divmod(k, d)`` of a stand-in."""
    _IN_DIVMOD[0] += 1
    try:
        yield
    finally:
        _IN_DIVMOD[0] -= 1


def record(name: str, args, kind: Optional[str], location) -> Optional[tuple]:
    """``(checked_number, args)`` to record instead of ``name``'s op on number stand-ins
    and Python numbers whose Python result is ``kind``; None when torch's op is exact."""
    if kind not in _DTYPES or not 1 <= len(args) <= 2:
        return None
    kinds = tuple(kind_of(a) for a in args)
    if any(k not in _DTYPES for k in kinds):
        return None
    if name in _DIVIDE or name in _RDIVIDE:
        if len(args) != 2:
            return None
        divisor = args[1] if name in _DIVIDE else args[0]
        if not (_may_be_zero(divisor) or (kind == "float" and name in _MODS)):
            return None
        error = ZeroDivisionError
    elif name in _POWERS:
        if kind != "float" or len(args) != 2 or _finite_power(name, args):
            return None
        error = OverflowError
    else:
        return None
    from .operators.effects import note_staged_error
    note_staged_error(error)
    file, line = location if location is not None else ("<unknown>", 0)
    if _IN_DIVMOD[0]:
        name = _PARTS.get(name, name)
    return checked_number, (name, file, line, kinds, kind) + tuple(args)


def _bounds(value):
    if type(value) is float:
        return (value, value) if math.isfinite(value) else None
    return int_overflow._bound_of(value)


def _may_be_zero(divisor) -> bool:
    if type(divisor) in (int, float, bool):
        return divisor == 0
    node = divisor._node
    if getattr(node.target, "__name__", "") in ("dim_size", "numel"):
        return False        # (a run-time size: torch's own error, loud, if it is 0)
    bounds = _bounds(divisor)
    return bounds is None or bounds[0] <= 0 <= bounds[1]


def _finite_power(name: str, args) -> bool:
    """Python's float power is finite and real for all operands within their bounds."""
    bounds = [_bounds(a) for a in args]
    if None in bounds:
        return False
    base, power = bounds if name == "pow" else bounds[::-1]
    if base[0] <= 0 <= base[1] and power[0] < 0:
        return False                    # (0.0 ** -1: ZeroDivisionError)
    if base[0] < 0 and not (power[0] == power[1] and float(power[0]).is_integer()):
        return False                    # (a negative base's fractional power: complex)
    try:
        corners = [float(b) ** p for b in base for p in power]
    except (ArithmeticError, ValueError):
        return False
    return all(type(c) is float and math.isfinite(c) for c in corners) and power[0] >= 0


def _python(value, kind: str):
    return _CLASSES[kind](value) if isinstance(value, torch.Tensor) else value


def _device(args):
    return next((a.device for a in args if isinstance(a, torch.Tensor)), None)


def rerun(message: str, file: str = "", line: int = 0):
    """The error saying Python's number cannot be the graph's (an effect-free call then
    runs eagerly: ``int_overflow``)."""
    return int_overflow.IntOverflow(f"{file}:{line}: {message}" if file else message,
                                    file, line)


def raise_python(e: BaseException, file: str = "", line: int = 0):
    """Raise Python's own error ``e`` from a graph op: its type and text are eager's (the
    executor notes the node's line)."""
    e._tograph_exact = True
    if file:
        e.add_note(f"{file}:{line}: raised by Python arithmetic on numbers the graph "
                   f"computed")
    raise e


@register
def checked_number(name: str, file: str, line: int, kinds: tuple, kind: str, *args):
    """Python's ``name`` on the numbers ``args`` stand for (``kinds``), as a 0-d tensor of
    ``kind``'s dtype; Python's exception where Python raises."""
    if any(isinstance(a, torch.Tensor) and a.is_meta for a in args):
        return torch.empty((), dtype=_DTYPES[kind], device="meta")
    try:
        value = _OPS[name](*[_python(a, k) for a, k in zip(args, kinds)])
    except (ArithmeticError, ValueError) as e:
        raise_python(e, file, line)
    if type(value).__name__ != kind:
        raise rerun(f"a Python number computed in the graph ({name}) is a "
                     f"{type(value).__name__}, not the {kind} the graph holds", file, line)
    if kind == "int" and not int_overflow._LOW <= value <= int_overflow._HIGH:
        int_overflow._raise(name, file, line)
    return torch.tensor(value, dtype=_DTYPES[kind], device=_device(args))


_BASE = {"divmod_q": "floordiv", "divmod_r": "mod", "rdivmod_q": "rfloordiv",
         "rdivmod_r": "rmod"}


def unchecked_number(name: str, file: str, line: int, kinds: tuple, kind: str, *args):
    """``checked_number`` as torch's op (an exported program has no Python to raise
    from or fall back to: torch's nan, inf and signs)."""
    cast = [a.to(_DTYPES[kind]) if isinstance(a, torch.Tensor) else a for a in args]
    return _PYTHON_OPS[_BASE.get(name, name)](*cast)


def unchecked_int_of(file: str, line: int, x):
    """``checked_int_of`` as torch's cast (exported programs: int64 wraps)."""
    return x.to(torch.int64)


@register
def checked_int_of(file: str, line: int, x):
    """``int(x)`` of a float ``x`` as Python's: truncated; ``OverflowError`` for an
    infinity, ``ValueError`` for NaN (Python's texts); past int64 ``IntOverflow``."""
    result = x.to(torch.int64)
    if x.is_meta:
        return result
    try:
        value = int(float(x))
    except (ArithmeticError, ValueError) as e:
        raise_python(e, file, line)
    if not int_overflow._LOW <= value <= int_overflow._HIGH:
        raise rerun(f"int() of a float computed in the graph is past int64 ({value}): "
                     f"eager's Python int holds it, the graph's int64 would wrap", file, line)
    return result


def int_of(x, location):
    """``int(x)`` of a traced value (a float stand-in or tensor: checked)."""
    from .symbolic import dispatch_record
    if not x.dtype.is_floating_point:
        return x.to(torch.int64)
    from .operators.effects import note_staged_error
    note_staged_error(OverflowError)
    note_staged_error(ValueError)
    file, line = location if location is not None else ("<unknown>", 0)
    return dispatch_record(checked_int_of, (file, line, x), {})


int_overflow.RERUNS.update({checked_number, checked_int_of})
