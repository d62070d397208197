"""A method of a Python meter called with a traced number, run by the graph with the
run's numbers: timm's and the PyTorch ImageNet example's ``losses.update(loss.item(),
input.size(0))``, a fairseq-style ``meter.update(val, n)``.

Tracing such a method runs its Python on stand-ins (``loss.item()`` is a graph value):
``self.avg = self.sum / self.count if self.count else 0`` then asks ``bool()`` of a
graph value (an error in a library's unconverted code, a branch whose paths hold a float
and an int in the user's), and its writes to the meter are a Python side effect the
graph would not repeat. When the call's result cannot matter and the meter holds only
numbers, the call is not traced: an effect node calls the real method when the graph
runs, in its place among the step's other effects, with each stand-in's number of that
run (an int or float, as eager passes it). The meter's numbers are then graph state
(``carried_numbers``): what the traced code reads of them after the call is read when
the graph runs, and the guard holds their kinds, not their values.

A method call is deferred only when all of these hold, else it is traced as before:
- its object is a plain user object (``carried_numbers.plain``) whose attributes are all
  Python ints and floats (a list, a string or a tensor there could be changed by the
  call behind the trace's back);
- at least one argument stands for a number, and the others are Python numbers,
  strings, bools or None (no tensor);
- the method is a Python function that never returns a value or yields, and the globals
  it reads are builtins or modules (nothing else it could change);
- the call is traced in the function's own graph, not in a tensor branch or loop body.
"""
from __future__ import annotations

import ast
import builtins
import contextlib
import copy
import inspect
import io
import textwrap
import types
from typing import Any, Optional

from . import carried_numbers
from .autograd_effects import Held
from .graph_ops import effect
from .introspection import NUMBER_KINDS, kind_of

NOT_DEFERRED = object()
_PYTHON_VALUES = (int, float, str, bool, type(None))
_LIMIT = 32          # attributes of a meter


@effect
def call_later(target: Held, kinds: tuple, names: tuple, *values) -> None:
    """``target.obj(*args, **kwargs)`` (a bound method) when the graph runs: ``values`` are the
    positional then keyword (``names``) arguments; a value whose ``kinds`` entry is a
    number kind is a 0-d tensor standing for that Python number."""
    args = [NUMBER_KINDS[k](v.item()) if k is not None else v for v, k in zip(values, kinds)]
    split = len(args) - len(names)
    target.obj(*args[:split], **dict(zip(names, args[split:])))


def _kind(value) -> Optional[str]:
    """"int" or "float" for a Python number or a graph value standing for one."""
    if type(value) in (int, float):
        return type(value).__name__
    kind = kind_of(value) if isinstance(value, _tensor_type()) else None
    return kind if kind in ("int", "float") else None


def _numbers_only(obj) -> bool:
    attrs = vars(obj)
    return 0 < len(attrs) <= _LIMIT and all(_kind(v) is not None for v in attrs.values())


def _returns_nothing(fn) -> bool:
    """Whether the Python function ``fn`` has no ``return <value>``, ``yield`` or
    ``await``, and reads no global but builtins and modules."""
    if not isinstance(fn, types.FunctionType) or fn.__code__.co_freevars:
        return False
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return False
    for node in ast.walk(tree):
        if isinstance(node, (ast.Yield, ast.YieldFrom, ast.Await, ast.Lambda)) or \
                isinstance(node, ast.Return) and node.value is not None and not (
                    isinstance(node.value, ast.Constant) and node.value.value is None):
            return False
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node is not \
                tree.body[0]:
            return False
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            return False
    for name in _global_names(fn.__code__):
        value = fn.__globals__.get(name, getattr(builtins, name, None))
        if not (isinstance(value, types.ModuleType) or hasattr(builtins, name) and
                name not in fn.__globals__):
            return False
    return True


def _global_names(code) -> set:
    import dis
    return {ins.argval for ins in dis.get_instructions(code)
            if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME")}


def _argument_kinds(values) -> Optional[tuple]:
    """Each argument's number kind (None: a Python value passed as it is); None when one
    is neither a stand-in for a number nor a plain Python value."""
    kinds = []
    for v in values:
        kind = _kind(v) if isinstance(v, _tensor_type()) else None
        if kind is not None:
            kinds.append(kind)
        elif type(v) in _PYTHON_VALUES:
            kinds.append(None)
        else:
            return None
    return tuple(kinds)


def _tensor_type():
    import torch
    return torch.Tensor


def deferred_call(f, args, kwargs) -> Any:
    """``None`` after recording a ``call_later`` node for ``f(*args, **kwargs)`` when the
    call qualifies (the module docstring), else ``NOT_DEFERRED``."""
    from .symbolic import current_graph, dispatch_record
    obj = getattr(f, "__self__", None)
    graph = current_graph()
    if obj is None or not isinstance(f, types.MethodType) or graph is None or \
            graph.parent is not None or not carried_numbers.SERVED or \
            not carried_numbers.plain(obj) or not _numbers_only(obj):
        return NOT_DEFERRED
    values = tuple(args) + tuple(kwargs.values())
    kinds = _argument_kinds(values)
    if kinds is None or all(k is None for k in kinds) or not _returns_nothing(f.__func__):
        return NOT_DEFERRED
    after = _kinds_after(f, obj, args, kwargs, kinds)
    if after is None:
        return NOT_DEFERRED
    carried_numbers.serve_attributes(obj, graph)
    carried_numbers.around_python(lambda: dispatch_record(
        call_later, (Held(f), kinds, tuple(kwargs)) + values, {}), after)
    return None


def _kinds_after(f, obj, args, kwargs, kinds) -> Optional[dict]:
    """The number kinds of ``obj``'s attributes after the call, {(id(obj), name): kind},
    found by calling the method on a copy of ``obj`` with example numbers of the
    arguments' kinds (1 and 1.0; its prints go nowhere); None when that raises or leaves
    an attribute that is not an int or a float (the call is then traced as before)."""
    example = copy.copy(obj)
    for name, v in vars(obj).items():       # (a carried number: an example of its kind)
        vars(example)[name] = NUMBER_KINDS[_kind(v)](1) if type(v) not in (int, float) else v
    values = [NUMBER_KINDS[k](1) if k is not None else v
              for v, k in zip(tuple(args) + tuple(kwargs.values()), kinds)]
    split = len(args)
    try:
        with contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            f.__func__(example, *values[:split], **dict(zip(kwargs, values[split:])))
    except Exception:   # noqa: BLE001 - not deferred: traced as before
        return None
    if not _numbers_only(example):
        return None
    return {(id(obj), name): "int" if type(v) is int else "float"
            for name, v in vars(example).items()}
