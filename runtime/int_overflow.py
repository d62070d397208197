"""Python ints past int64: a graph value standing for a Python int is a 0-d int64 tensor,
exact only while no value leaves int64. Python's int does not wrap:

    k = 1
    while x.sum() > 0:          # k * 1000 ten times: eager 10**30, an int64 5076944270305263616
        k = k * 1000
        x = x - 1

So Python arithmetic on int stand-ins that can leave int64 (``+ - * ** <<``, unary ``-``
and ``abs``) is recorded as ``checked_int``: the same torch op, and when the graph runs,
the exact Python result compared with int64's range. Outside it the op raises
``IntOverflow`` (an ``OverflowError``) naming the user's line; a converted function whose
graph has no effects (no print, no in-place write, no random draw, ...) then runs the call
eagerly with a ``FallbackWarning`` (strict mode: ``ConversionError``), since nothing the
graph did is visible; a graph with effects raises the error (never a wrapped number).

Ints known to stay small pay no check (``bound``): Python ints, run-time sizes
(``dim_size``/``numel``: under 2**48), a staged ``range`` index (its range's bounds), items
of ``randint`` (``value_bounds``), and arithmetic on those whose result's bounds fit.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch

from . import value_bounds
from .graph_ops import register
from .introspection import _PYTHON_OPS

_LOW, _HIGH = -(1 << 63), (1 << 63) - 1
SIZE_HIGH = 1 << 48                 # a tensor's size or element count is below this
BOUND = "int_bound"                 # node attr: (low, high) known statically

_OPS = {name: _PYTHON_OPS[name]
        for name in ("add", "radd", "sub", "rsub", "mul", "rmul", "pow", "rpow", "neg", "abs",
                     "lshift", "rlshift")}


# ``n + k``/``n - k`` with ``|k| <= SIZE_HIGH`` (a step counter's ``+= 1``, a cache length plus
# a size, a padding length) is not checked: it leaves int64 only when ``n`` is already
# within 2**48 of its edge, which no counter or size reaches; a product or power that
# brought ``n`` there is checked itself. (Checking every offset made sizes that the graph
# computes from a counter (``kv_length = past + 1``, ``pad(mask, (0, kv_length - n))`` in
# a decoding loop) opaque to shape inference.)
_SHIFTS = frozenset({"add", "radd", "sub", "rsub"})


class IntOverflow(OverflowError):
    """A Python int a graph value stands for left int64 when the graph ran (eager's int
    would not have wrapped). ``file``/``line``: the user's line; ``rerun``: the graph has
    no effects, so running the call eagerly instead is exact."""

    def __init__(self, message: str, file: str = "", line: int = 0):
        super().__init__(message)
        self.file, self.line, self.rerun = file, line, False
        self._tograph_located = True    # (the executor keeps this text and class)


def checks(name: str) -> bool:
    """Whether ``name``'s int result may need a check."""
    return name in _OPS


def _bound_of(value) -> Optional[Tuple[int, int]]:
    if type(value) is int or type(value) is bool:
        return int(value), int(value)
    node = getattr(value, "_node", None) if isinstance(value, torch.Tensor) else None
    if node is None:
        return None
    known = node.attrs.get(BOUND)
    if known is not None:
        return known
    if getattr(node.target, "__name__", "") in ("dim_size", "numel"):
        return 0, SIZE_HIGH
    try:
        return value_bounds.bounds(node)
    except Exception:       # noqa: BLE001 - no proof: checked
        return None


def _result_bound(name: str, bounds) -> Optional[Tuple[int, int]]:
    fn = _OPS[name]
    if name in ("pow", "rpow", "lshift", "rlshift"):
        exponent = bounds[1] if name in ("pow", "lshift") else bounds[0]
        if exponent[0] < 0 or exponent[1] > 64:
            return None
    try:
        corners = [fn(*c) for c in _corners(bounds)]
    except (ArithmeticError, ValueError):
        return None
    if name in ("pow", "rpow", "abs"):     # not monotonic in the base: add 0 and the
        corners.append(0)                   # extremes' magnitudes
        corners += [abs(c) for c in corners] + [-abs(c) for c in corners]
    if any(type(c) is not int for c in corners):
        return None
    return min(corners), max(corners)


def _corners(bounds):
    if len(bounds) == 1:
        return [(b,) for b in bounds[0]]
    return [(a, b) for a in bounds[0] for b in bounds[1]]


def record(name: str, args, location) -> Optional[tuple]:
    """``(checked_int, args)`` to record instead of the op ``name`` whose result stands
    for a Python int; None when the operands' bounds keep the result within int64 (the
    result's node then gets its bound: ``mark_bound``)."""
    if name not in _OPS or not 1 <= len(args) <= 2:
        return None
    bounds = [_bound_of(a) for a in args]
    if None not in bounds:
        result = _result_bound(name, bounds)
        if result is not None and _LOW <= result[0] and result[1] <= _HIGH:
            return ("bounded", result)
    if name in _SHIFTS and any(b is not None and -SIZE_HIGH <= b[0] and b[1] <= SIZE_HIGH
                               for b in bounds):
        return None             # (an offset: see _SHIFTS)
    file, line = location if location is not None else ("<unknown>", 0)
    return (checked_int, (name, file, line) + tuple(args))


def mark_bound(value, low: int, high: int) -> None:
    """``value`` (a graph int) always lies in ``[low, high]``."""
    node = getattr(value, "_node", None) if isinstance(value, torch.Tensor) else None
    if node is not None and low <= high:
        node.attrs[BOUND] = (low, high)


def _exact(v):
    return int(v) if isinstance(v, torch.Tensor) else v


# graph targets that may raise IntOverflow (``number_checks`` adds its own)
RERUNS = set()


@register
def checked_int(name: str, file: str, line: int, *args):
    """``name``'s op on ``args`` (int stand-ins and Python numbers), raising
    ``IntOverflow`` where Python's exact int result is outside int64."""
    fn = _OPS[name]
    result = fn(*args)
    if any(isinstance(a, torch.Tensor) and a.is_meta for a in args) or \
            not isinstance(result, torch.Tensor) or result.is_floating_point():
        return result
    exact = [_exact(a) for a in args]
    if name in ("pow", "rpow", "lshift", "rlshift"):
        base, power = exact if name in ("pow", "lshift") else exact[::-1]
        if power > 64 and base not in (-1, 0, 1):
            _raise(name, file, line)
        if power < 0:           # (Python: a float, or "negative shift count")
            _raise(name, file, line, "a negative exponent or shift")
    value = fn(*exact)
    if type(value) is int and not _LOW <= value <= _HIGH:
        _raise(name, file, line)
    return result


def _raise(name: str, file: str, line: int, what: str = "") -> None:
    raise IntOverflow(f"{file}:{line}: a Python int computed in the graph ({name}) left "
                      f"int64{' (' + what + ')' if what else ''}: eager's Python int does "
                      f"not wrap, the graph's int64 stand-in would", file, line)


def rerun_on_overflow(fn, graph):
    """``fn`` (a compiled graph holding ``checked_int``) whose ``IntOverflow`` says
    whether the call may run eagerly instead: the graph has no effect nodes."""
    pure = _no_visible_effects(graph)

    def run(*args):
        try:
            return fn(*args)
        except IntOverflow as e:
            e.rerun = pure
            raise
    return run


def _no_visible_effects(graph, allowed=None) -> bool:
    """No node of ``graph`` has an effect the caller could see: in-place writes into
    tensors the graph made itself (``i += 1`` on a ``torch.tensor(0)`` counter, through a
    loop's carried values; memory planning's ``out=`` buffers) and grad-mode switches
    (restored by the executor when the graph raises) are not such effects, nor nodes
    ``allowed(node)`` accepts (the caller undoes them)."""
    from .ops import is_impure, is_inplace
    owners = {id(sub): n for n in graph.walk() for sub in n.subgraphs}
    for n in graph.walk():
        if not callable(n.target) or n.attrs.get("planned_out") or n.op == "set_grad_enabled" \
                or not is_impure(n.target, n.kwargs, n.args):
            continue
        if allowed is not None and allowed(n):
            continue
        if is_inplace(n.target, n.kwargs) and n.args and _made_here(n.args[0], owners):
            continue
        return False
    return True


def _made_here(value, owners) -> bool:
    """``value``'s storage is one the graph allocated (a fresh op's result, followed back
    through in-place ops and a ``while`` body's carried inputs); False when unsure."""
    from .ops import is_inplace
    from .passes.rewrite import FRESH
    for _ in range(64):
        if not hasattr(value, "op"):
            return False
        if value.op == "placeholder":
            owner = owners.get(id(value.graph))
            if owner is None or owner.op != "while":
                return False            # (an argument; a cond's operand: unsure)
            value = owner.args[value.graph.inputs.index(value)]
        elif callable(value.target) and is_inplace(value.target, value.kwargs) and value.args:
            value = value.args[0]
        else:
            return value.op in FRESH and "out" not in value.kwargs
    return False


def holds_checks(graph) -> bool:
    return any(n.target is t for n in graph.walk() for t in RERUNS)


RERUNS.add(checked_int)
