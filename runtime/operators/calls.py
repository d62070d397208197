"""Calls in converted code: ``tg.call(f, *args, **kwargs)``.

User functions (and the ``forward`` of user ``nn.Module``s) are converted recursively
through the converter the front door registers, so their control flow is converted too;
calls into torch, numpy, the standard library and builtins run as they are. A few builtins
get graph meanings when an argument is symbolic: ``len``, ``range``, ``enumerate``,
``zip``, ``int``, ``float``, ``bool``, ``round``, ``min``, ``max``, ``print``; ``torch.stack`` and
``torch.cat`` accept lists built in tensor loops.
"""
from __future__ import annotations

import builtins
import contextlib
import functools
import inspect
import os
import sys
from typing import Callable, Optional

import torch

from .. import autograd_effects, deferred_calls, flag_arguments, item_values, list_reads
from .. import known_values, number_checks, tensor_of_items, tensor_state
from .. import library_compiling, transformer_forwards
from ..distributed_modules import refuse_distributed_module
from ..errors import GraphError
from ..introspection import RunTimeSize, mark, python_class
from ..path_values import check_call
from ..region_effects import refuse_unseen_call
from ..source_info import format_location, user_location
from ..symbolic import contains_symbolic, current_graph, is_symbolic
from . import (checkpoints, custom_functions, module_hooks, outside_iterators,
               torch_checks, torchscript_calls, truth_builtins)
from .effects import print_, suppress_traced, torch_assert
from .iterables import (SymbolicEnumerate, SymbolicRange, SymbolicReversed,
                        TensorList, is_symbolic_iterable, length_of, zip_of)
from .logical import ifexp
from .math_calls import NOT_MATH, math_call
from .messages import NOT_STAGED, staged_message
from .numpy_calls import NOT_NUMPY, numpy_call
from .rng_calls import NOT_RNG, rng_call, watch as watch_seed
from .scans import NOT_SCAN, scan_call
from .text import DeferredText, format_method, join_text, text_of

_CONVERTER: list = [None]          # fn -> converted fn, or None when it cannot be converted
_LIBRARY_ROOTS = ("torch", "numpy", "runtime", "transpiler", "builtins", "functools",
                  "typing", "collections", "itertools", "math", "operator", "abc", "copy",
                  "inspect", "contextlib", "enum", "dataclasses", "warnings", "_pytest",
                  "pytest", "hypothesis", "unittest", "random", "re", "json", "os", "sys")


def set_converter(converter: Optional[Callable]) -> None:
    """Register the function that converts user functions (the transpiler's front door)."""
    _CONVERTER[0] = converter


def _is_user_function(f) -> bool:
    if not (inspect.isfunction(f) or inspect.ismethod(f)):
        return False
    module = getattr(f, "__module__", None) or ""
    root = module.split(".")[0]
    if root in _LIBRARY_ROOTS or root in sys.stdlib_module_names:
        return False
    if inspect.ismethod(f):     # (a bound ``lru_cache`` wrapper has no code to convert)
        return inspect.isfunction(f.__func__)
    return getattr(f, "__code__", None) is not None


def _user_module_forward(f):
    if isinstance(f, torch.nn.Module):
        forward = type(f).forward
        if _is_user_function(forward) and not (f._forward_hooks or f._forward_pre_hooks or
                                                torch.nn.modules.module._global_forward_hooks or
                                                torch.nn.modules.module._global_forward_pre_hooks):
            return f.forward
    return None


def _max_min(pick_second, args, kwargs):
    """``max``/``min`` of symbolic values, with Python's semantics (returns an operand)."""
    if len(args) == 1:
        (items,) = args
        if is_symbolic(items) and not kwargs:
            return (items.max() if pick_second is _gt else items.min()) if items.dim() == 1 \
                else builtins.max(items)   # raises the same error Python would
        if is_symbolic(items):
            raise GraphError(f"{format_location(user_location())}: max/min with key= or "
                             f"default= over a traced tensor's rows")
        items = list(items)
    else:
        items = list(args)
    if kwargs and not (len(args) == 1 and items and set(kwargs) == {"default"}):
        return _max_min_keyed(pick_second, items, kwargs)   # (a default beside items: unused)
    best = items[0]
    for item in items[1:]:
        best = ifexp(pick_second(item, best), lambda item=item: item, lambda best=best: best)
    return best


def _max_min_keyed(pick_second, items, kwargs):
    """``max``/``min`` with ``key=``/``default=``: Python's own builtin on the real items, so
    the result is the element itself (``max(xs, key=k) is xs[i]``). A key whose value is
    traced (``t.item()``, ``float(t.sum())``) would choose the element when the graph runs,
    which a graph cannot do with identity kept: fall back."""
    key = kwargs.get("key")
    keys = [key(item) for item in items] if key is not None else items
    if contains_symbolic(keys):
        raise GraphError(f"{format_location(user_location())}: max/min picks an element by a "
                         f"tensor-valued key; the choice is made when the graph runs, and the "
                         f"element's identity cannot be kept")
    pick = builtins.max if pick_second is _gt else builtins.min
    if not items:
        return pick([], **kwargs)       # the default, or Python's own error
    return items[pick(range(len(items)), key=keys.__getitem__)]


def _gt(b, a):
    return b > a


def _lt(b, a):
    return b < a


def _int(x, *rest):
    return _number(number_checks.int_of(_scalar(x, ValueError, _ONE_ELEMENT),
                                        user_location()), "int") \
        if _unknown(x) and not rest else builtins.int(_known(x), *rest)


def _float(x):
    return _number(_scalar(x, ValueError, _ONE_ELEMENT).to(torch.float64), "float") \
        if _unknown(x) else builtins.float(_known(x))


def _bool(x):
    return _number(_scalar(x, RuntimeError, _AMBIGUOUS) != 0, "bool") if _unknown(x) else \
        builtins.bool(_known(x))


_ONE_ELEMENT = "only one element tensors can be converted to Python scalars"
_AMBIGUOUS = "Boolean value of Tensor with more than one value is ambiguous"


def _scalar(x, error: type, message: str):
    """``x`` as the one number ``int``/``float``/``bool`` reads (0-d); eager's error for a
    tensor of another element count (it would be the whole tensor, silently). A size
    known only when the graph runs is left to the op."""
    meta = x._node.meta if getattr(x, "_node", None) is not None else None
    shape = meta.shape if meta is not None else None
    if shape is None or builtins.any(d is None for d in shape) or shape == ():
        return x
    n = 1
    for d in shape:
        n *= d
    if n != 1:
        raise error(message)
    return x.reshape(())


def _unknown(x) -> bool:
    """A traced value whose number is known only when the graph runs (not one the graph
    fixes: ``int(lengths.max())`` of lengths made from Python ints, ``known_values``)."""
    return is_symbolic(x) and known_values.value(x) is None


def _known(x):
    return known_values.value(x) if is_symbolic(x) else x


def _number(value, kind: str):
    """``int(t)``/``float(t)``/``bool(t)``: a graph value standing for that Python number."""
    mark(value, kind)
    return value


def _stands_for(x):
    """The class of the value a traced value stands for (a tensor, or a Python number)."""
    return python_class(x._node.attrs, format_location(user_location()))


def _type(*args):
    """``type(x)`` of a traced value: the class of the value it stands for."""
    if len(args) == 1 and builtins.isinstance(args[0], RunTimeSize):
        return torch.Size
    return _stands_for(args[0]) if len(args) == 1 and is_symbolic(args[0]) else \
        builtins.type(*args)


def _isinstance(x, classes):
    """``isinstance`` as for the value ``x`` stands for (a Python number stand-in is not a
    tensor); ``classes`` may be a class, a tuple or a union, as for the builtin."""
    if builtins.isinstance(x, RunTimeSize):
        return builtins.issubclass(torch.Size, classes)
    return builtins.isinstance(x, classes) if not is_symbolic(x) else \
        builtins.issubclass(_stands_for(x), classes)


def _len(x):
    if is_symbolic(x) or isinstance(x, TensorList):
        return x.length() if isinstance(x, TensorList) else length_of(x)
    return builtins.len(x)


def _list(*args):
    """``list(L)`` and ``list(reversed(L))`` of a list built in a tensor loop: a copy of
    it (``L[:]``, ``L[::-1]``); anything else as Python's ``list`` makes it."""
    if len(args) == 1 and isinstance(args[0], TensorList):
        return args[0][:]
    if len(args) == 1 and type(args[0]) is SymbolicReversed and \
            isinstance(args[0].source, TensorList):
        return args[0].source[::-1]
    return builtins.list(*args)


def _sorted(x, *, key=None, reverse=False):
    """``sorted(L)`` of a list built in a tensor loop: a sorted copy (``L.sort()``'s
    rules: integers or bools, no key); anything else as Python sorts it."""
    if isinstance(x, TensorList):
        out = x.copy()
        out.sort(key=key, reverse=reverse)
        return out
    return builtins.sorted(x, key=key, reverse=reverse)


def _dim_of(args, kwargs) -> int:
    """The ``dim`` of ``torch.stack``/``torch.cat`` (``axis=`` is torch's alias for it)."""
    return args[0] if args else kwargs.get("dim", kwargs.get("axis", 0))


def _stack(tensors, *args, **kwargs):
    if isinstance(tensors, TensorList):
        dim = _dim_of(args, kwargs)
        tensors.nonempty(RuntimeError, "stack expects a non-empty TensorList")
        stack = tensors.stacked()
        return stack if dim == 0 else torch.movedim(stack, 0, dim)
    return torch.stack(tensors, *args, **kwargs)


def _cat(tensors, *args, **kwargs):
    if isinstance(tensors, TensorList):
        dim = _dim_of(args, kwargs)
        tensors.nonempty(ValueError, "torch.cat(): expected a non-empty list of Tensors")
        stack = tensors.stacked()
        d = dim if dim >= 0 else dim + stack.dim() - 1
        moved = torch.movedim(stack, 0, d)
        return moved.flatten(d, d + 1)
    return torch.cat(tensors, *args, **kwargs)


_SYMBOLIC_BUILTINS = {
    builtins.type: _type,
    builtins.isinstance: _isinstance,
    builtins.len: _len,
    builtins.range: lambda *a: SymbolicRange(*a),
    builtins.enumerate: lambda x, start=0: SymbolicEnumerate(x, start),
    builtins.zip: zip_of,
    builtins.reversed: lambda x: SymbolicReversed(x),
    builtins.list: _list,
    builtins.sorted: _sorted,
    builtins.int: _int,
    builtins.float: _float,
    builtins.bool: _bool,
    builtins.all: truth_builtins.all_of,
    builtins.any: truth_builtins.any_of,
    builtins.round: item_values.round_of,
    builtins.max: lambda *a, **k: _max_min(_gt, a, k),
    builtins.min: lambda *a, **k: _max_min(_lt, a, k),
    torch.stack: _stack,
    torch.cat: _cat,
    torch.concat: _cat,
}


_ITERATION_BUILTINS = {builtins.range, builtins.enumerate, builtins.zip, builtins.reversed}


def _has_symbolic(args, kwargs) -> bool:
    return any(is_symbolic_iterable(a) for a in args) or contains_symbolic(args) or \
        contains_symbolic(kwargs)


_NONDETERMINISTIC_MODULES = ("random", "numpy.random", "time", "secrets", "uuid", "datetime")


def _nondeterministic(f) -> bool:
    """A Python function whose result changes from call to call (random numbers, clocks)."""
    module = getattr(f, "__module__", None)
    if module is None and getattr(f, "__self__", None) is not None:
        module = type(f.__self__).__module__        # bound method of random.Random, ...
    module = module or ""
    return any(module == m or module.startswith(m + ".") for m in _NONDETERMINISTIC_MODULES) \
        or f is os.urandom or f is os.getpid


@functools.lru_cache(maxsize=None)
def _stack_readers():
    """Functions that read the interpreter's stack from where they are called: in converted
    code that is this module's ``call`` and the generated functions' frames, not the user's."""
    import traceback
    found = [sys._getframe, inspect.currentframe, inspect.stack, traceback.extract_stack,
             traceback.format_stack, traceback.print_stack, traceback.walk_stack]
    found += [f for f in (getattr(sys, "_getframemodulename", None),) if f is not None]
    return tuple(found)


def _text_call(f, args, kwargs):
    """``str``/``repr``/``ascii``/``format``, ``template.format(...)`` and
    ``sep.join(...)`` of traced values: text rendered when the graph runs. None: ``f`` is
    none of these, or no operand is traced (Python computes the str)."""
    how = next((h for g, h in _TEXT_OF if g is f), None)
    if how is not None:
        if kwargs or not 1 <= len(args) <= (2 if f is builtins.format else 1) or \
                not _traced_text(args[0]):
            return None
        return text_of(args[0], how, *args[1:])
    owner, name = getattr(f, "__self__", None), getattr(f, "__name__", None)
    if f is str.format and args and builtins.isinstance(args[0], str):
        owner, name, args = args[0], "format", args[1:]
    if not builtins.isinstance(owner, str):
        return None
    if name == "format" and (builtins.any(_traced_text(a) for a in args) or
                             builtins.any(_traced_text(v) for v in kwargs.values())):
        return format_method(owner, args, kwargs)
    if name == "join" and len(args) == 1 and not kwargs and \
            builtins.isinstance(args[0], (list, tuple)) and \
            builtins.any(builtins.isinstance(a, DeferredText) for a in args[0]):
        return join_text(owner, args[0])
    return None


def _traced_text(value) -> bool:
    return builtins.isinstance(value, DeferredText) or contains_symbolic(value)


_TEXT_OF = ((builtins.str, "s"), (builtins.repr, "r"), (builtins.ascii, "a"), (builtins.format, ""))


def _library_caller() -> bool:
    """Whether the converted code asking is an installed library's (site-packages), torch's
    own excepted: its ``is_compiling()`` branches are torch.compile's semantics, not eager's
    (``nn.TransformerEncoder`` skips its nested-tensor path there: other padded values)."""
    where = user_location()
    return where is not None and not where[0].startswith(_TORCH_DIR) and builtins.any(
        part in where[0] for part in ("/site-packages/", "/dist-packages/"))


_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep


def _compiling_queries() -> tuple:
    """torch's "is a compiler tracing this?" functions (some torch versions lack some)."""
    import torch._utils
    found = [torch.compiler.is_compiling, getattr(torch._utils, "is_compiling", None)]
    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is not None:
        found += [getattr(dynamo, "is_compiling", None),
                  getattr(getattr(dynamo, "external_utils", None), "is_compiling", None)]
    return tuple(q for q in found if q is not None)


def call(f, *args, **kwargs):
    """Call ``f`` as converted code should: converting user functions first.

    ``torch.compiler.is_compiling()`` asked by an installed library's code while tracing
    answers True, as under torch.compile: libraries (transformers' masks) use it to take the
    path written to be a graph instead of one that decides on tensor data in Python. The
    user's own code gets eager's answer (False): its result must stay eager's."""
    if current_graph() is not None and not args and not kwargs and \
            builtins.any(f is q for q in _compiling_queries()) and _library_caller():
        return library_compiling.answer()   # (False on a retrace after a failed trace)
    if current_graph() is not None and _nondeterministic(f):
        raise GraphError(f"{format_location(user_location())}: calls "
                         f"{getattr(f, '__qualname__', f)}(), a Python value that changes on "
                         f"every call; a graph would freeze the value seen while tracing")
    if current_graph() is not None and builtins.any(f is r for r in _stack_readers()):
        raise GraphError(f"{format_location(user_location())}: calls "
                         f"{getattr(f, '__qualname__', f)}(), which reads the interpreter's "
                         f"stack: converted code runs in generated frames, not the user's")
    if f is builtins.print:
        return print_(*args, **kwargs)
    if f is torch._assert and current_graph() is not None:
        return torch_assert(*args, **kwargs)
    if current_graph() is not None:
        checked = torch_checks.staged_check(f, args, kwargs)    # torch._check(n == 1)
        if checked is not torch_checks.NOT_CHECK:
            return checked
    said = staged_message(f, args, kwargs)      # sys.stdout.write, warnings.warn
    if said is not NOT_STAGED:
        return said
    if current_graph() is not None and (args or kwargs):
        text = _text_call(f, args, kwargs)
        if text is not None:
            return text
    if current_graph() is not None:
        refuse_distributed_module(f)    # DDP/FSDP: per-call machinery, not a graph
        tensor_state.refuse_mode_switch(f, args, kwargs)    # inference_mode(): its line
        result = numpy_call(f, args, kwargs)
        if result is not NOT_NUMPY:
            return result
        result = rng_call(f, args, kwargs)
        if result is not NOT_RNG:
            return result
        result = math_call(f, args, kwargs)      # math.cos(ratio) of a traced number
        if result is not NOT_MATH:
            return result
        result = scan_call(f, args, kwargs)      # associative_scan(combine_fn, xs, dim)
        if result is not NOT_SCAN:
            return result
        if f is contextlib.suppress and not kwargs:     # a try/except: pass (try_replays)
            return suppress_traced(*args)
        staged = autograd_effects.staged_call(f, args, kwargs)    # opt.step(), ...
        if staged is not autograd_effects.NOT_STAGED:
            return staged
        deferred = deferred_calls.deferred_call(f, args, kwargs)   # meter.update(loss.item())
        if deferred is not deferred_calls.NOT_DEFERRED:
            return deferred
        read = list_reads.builtin_read(f, args, kwargs)     # len(losses), sum(losses[-5:])
        if read is not list_reads.NOT_READ:
            return read
        made = tensor_of_items.tensor_of_list(f, args, kwargs)     # torch.tensor(keep, ...)
        if made is not tensor_of_items.NOT_MADE:
            return made
        refuse_unseen_call(f, args)     # a C object's method the effect watch cannot see
    special = _SYMBOLIC_BUILTINS.get(f) if _hashable(f) else None
    if special is not None:
        symbolic = any(is_symbolic_iterable(a) for a in args) if f in _ITERATION_BUILTINS \
            else _has_symbolic(args, kwargs) or truth_builtins.of_generator(f, args, kwargs)
        if symbolic:
            outside_iterators.refuse(f, args, kwargs)      # (any(data), zip(x, data))
            result = special(*args, **kwargs)
            outside_iterators.note_made(result, f, args, kwargs)
            return result
    if current_graph() is not None:
        f = torchscript_calls.unscripted(f, args, kwargs)   # (its Python original)
        ckpt = checkpoints.checkpointed(f, args, kwargs, call)     # use_reentrant=True
        if ckpt is not checkpoints.NOT_CHECKPOINT:
            return ckpt
        applied = custom_functions.applied(f, args, kwargs)     # its own backward
        if applied is not custom_functions.NOT_APPLIED:
            return applied
    if current_graph() is not None and isinstance(f, torch.nn.Module):
        module_hooks.refuse_backward_hooks((f,))
    target = _converted(f)
    check_call(f if target is f else target, args, kwargs, target is not f)
    if target is f and current_graph() is not None:
        outside_iterators.refuse(f, args, kwargs)      # next(data) of the caller's: before
        with watch_seed(f):
            try:
                result = f(*args, **kwargs)
                outside_iterators.note_made(result, f, args, kwargs)
                return result
            except TypeError:
                flags = flag_arguments.flags_in((None,) + args, kwargs)
                if not flags:   # (a run-time bool where torch needs a real one: per value)
                    raise
        path = ("arg", flags[0][1] - 1) if flags[0][0] == "arg" else flags[0]
        return flag_arguments.call_per_flag(lambda g, a, k: g(*a, **k), f, args, kwargs,
                                            path)
    return target(*args, **kwargs)


def _hashable(f) -> bool:
    try:
        hash(f)
        return True
    except TypeError:
        return False


def _converted(f):
    converter = _CONVERTER[0]
    if converter is None:
        return f
    forward = _user_module_forward(f)
    if forward is not None:
        return converter(forward) or f
    forward = transformer_forwards.called_forward(f, converter)     # (their fast paths)
    if forward is not None:
        hooked = module_hooks.hooked_call(f, forward, call)
        return hooked or (forward if module_hooks.forward_hooks_only(f) else f)
    if isinstance(f, torch.nn.Module) and _is_user_function(type(f).forward):
        forward = converter(f.forward)      # forward hooks around it: run as _call_impl does
        hooked = module_hooks.hooked_call(f, forward, call) if forward else None
        if hooked is not None:
            return hooked
    if _is_user_function(f):
        return converter(f) or f
    if not isinstance(f, type) and _is_user_function(getattr(type(f), "__call__", None)):
        return converter(f.__call__) or f     # (a callable object: EarlyStopping()(loss))
    if isinstance(f, functools.partial) and _is_user_function(f.func):
        inner = converter(f.func)
        return functools.partial(inner, *f.args, **f.keywords) if inner else f
    return f
