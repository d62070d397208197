"""The front door: ``to_graph``, ``to_code``; where converted code meets ``runtime``'s tracing.

    @to_graph
    def f(x, n): ...
    f(x, 3)          # convert once, trace once per input signature, optimize, execute
    f.graph(x, 3)    # the traced Graph for that signature

Conversion (source to source) happens once per function. Each new input signature
(tensor shapes, dtypes, requires_grad; Python argument values) is traced into a graph:
tensors become placeholders, Python values are specialized. If conversion or tracing
fails, the function runs eagerly with one ``FallbackWarning`` naming the reason and the
user's ``file:line``; ``strict=True`` raises ``ConversionError`` instead.
"""
from __future__ import annotations

import collections
import functools
import gc
import inspect
import operator
import os
import time
import types

import weakref
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.utils._pytree as pytree

import runtime
from runtime import operators as tg
from runtime import control_flow, path_values, region_state, subgraphs, tensor_state, trace_reads
from runtime import appended_lists, argument_grads, argument_objects, autograd_effects
from runtime import carried_numbers, returned_numbers
from runtime import library_compiling, training_attributes, try_replays
from . import appended_arguments
from runtime import module_modes, module_numbers, module_writes
from runtime.transformer_forwards import forward_of as _staged_forward
from runtime.errors import GraphError
from runtime.int_overflow import IntOverflow
from runtime.module_flags import TrainingFlags
from runtime.options import options
from runtime.operators import module_hooks, traced_hooks
from runtime.operators.module_hooks import backward_hooked
from runtime.executor import Unstack, located, lower
from runtime.graph import Node, iter_nodes, map_structure
from runtime.meta import TensorMeta, meta_empty
from runtime.shape_inference import strict_dims
from runtime.operators import state_aliases
from runtime.operators.iterables import TensorList
from runtime.operators.special_values import Undefined, UndefinedReturn
from runtime.operators.text import DeferredText
from runtime.outputs import ArgRef, reachable, resolve_arguments, template
from runtime.python_state import is_tensor
from runtime.source_info import (library_file, location_of_traceback, reentered_call_site,
                                 register_source_map, user_location)
from runtime import views
from runtime.symbolic import current_graph, tracing, wrap_node
from runtime.tensor_list import take_converted
from runtime.threads import TRACE_LOCK, PerThreadList

from . import caller_frames, fallback_retry
from .random_state import RandomState
from . import (argument_aliases, argument_offsets, call_entry, conversion, held_arguments,
               lazy_init, method_binding, trace_log)
from . import unread_numbers, user_errors
from .call_entry import MISS as _MISS
from .data_parallel import convert_wrapped_module, is_distributed_data_parallel
from .errors import ConversionError
from .run_eagerly import _EAGERLY
from .side_effects import Snapshot, module_hooks as tree_hooks
from .dynamic_shapes import DynamicShapes, argument_leaves
from .hot_shapes import HotShapes
from .retracing import (_GRAD_MODE, CacheLimitWarning, RetracingWarning, Retraces,  # noqa: F401
                        _is_call_modes, _mode, describe_change as _describe_change,
                        warn_at_caller, warn_cache_limit)
from .signature_cache import INLINE, SignatureCache


class FallbackWarning(UserWarning):
    """A function could not be converted or traced and ran eagerly instead."""


# --------------------------------------------------------------------------- conversion
# (function, probed names) -> its converted function (a method's is bound to its object
# per lookup), for the trace being made: emptied when a trace ends (``_trace_graph``), so
# no table keeps a function, its globals or its generated code after its last trace (a
# weak key would not do: the converted function holds the globals, which hold the key)
_CONVERTED: Dict[Any, Any] = {}


def _origin(fn) -> Tuple[Optional[str], Optional[int]]:
    target = inspect.unwrap(getattr(fn, "__func__", fn))
    code = getattr(target, "__code__", None)
    return (code.co_filename, code.co_firstlineno) if code is not None else (None, None)


def convert_function(fn, probed=()):
    """The converted version of a user function (cached), with its source map registered.
    ``probed``: variable names whose values ``tg.probe`` records (``f.probe``)."""
    func, owner = (fn.__func__, fn.__self__) if inspect.ismethod(fn) else (fn, None)
    key = (func, tuple(probed))
    try:
        run = _CONVERTED.get(key)
    except TypeError:               # (unhashable: converted on every call)
        run, key = None, None
    if run is None:
        run = _converted(func, key[1] if key else tuple(probed))
        if key is not None:
            _CONVERTED[key] = run
    return run if owner is None else types.MethodType(run, owner)



def _converted(fn, probed):
    """``convert_function``'s work: convert, register the source map for as long as the
    generated code lives, and hide ``UndefinedReturn``."""
    converted = conversion.convert(fn, {"tg": tg}, probed, cache_dir=options.cache_dir and
                                   os.path.join(options.cache_dir, "converted"))
    inner = converted.fn
    register_source_map(converted.filename, converted.line_map, owner=inner.__code__,
                        hidden=converted.hidden)

    @functools.wraps(inner)
    def run(*args, **kwargs):
        result = inner(*args, **kwargs)
        return None if isinstance(result, UndefinedReturn) else result
    run.__tograph_source__ = converted.source
    run.__tograph_line_map__ = converted.line_map     # generated line -> (user file, line)
    return run


_CALLED = PerThreadList()     # user functions converted while this thread's trace ran


def _with_called(snapshot: Snapshot) -> Snapshot:
    """``snapshot`` with the globals and closures of the helpers this trace called."""
    for fn in list(_CALLED):
        snapshot.include(fn)
    return snapshot


def _made_by_converted_code(fn) -> bool:
    """Whether ``fn`` was defined inside converted code (a branch or loop body, a
    comprehension, a user's nested function): made while the call ran, so its closure
    holds the call's own locals, not state from before the call."""
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    return code is not None and code.co_filename.startswith("<tograph generated")


_WATCHING = PerThreadList()   # the side-effect snapshot of the trace this thread runs


def _recursive_converter(fn):
    """How ``tg.call`` converts a user function it meets; None when there is no source."""
    _CALLED.append(fn)
    if _WATCHING and not _made_by_converted_code(fn):
        _WATCHING[-1].include_new(getattr(fn, "__func__", fn))   # (what its globals and
        # closure hold changing is the call's change too; a method's object is not taken
        # here: the call may have made it)
    if _made_by_converted_code(fn):
        return None                      # defined inside converted code: converted already
    try:
        return convert_function(fn)
    except ConversionError as e:
        if "source" in e.reason.lower() and "not" in e.reason.lower():
            return None
        raise
    except (OSError, TypeError):
        return None


tg.set_converter(_recursive_converter)


def _python_function(fn):
    """The Python function to convert for ``fn`` (a function, method, lambda or Module; a
    ``functools.partial``'s function; a callable object's ``__call__``; a staticmethod's
    function). A built-in or C function is returned as is (``_has_source`` says no)."""
    if isinstance(fn, GraphFunction):
        fn = fn.python_function
    if isinstance(fn, _module_wrapper()):
        fn = fn.original_module
    if isinstance(fn, functools.partial):
        return _python_function(fn.func)
    if isinstance(fn, (staticmethod, classmethod)):
        return fn.__func__
    if isinstance(fn, torch.nn.Module):     # (torch.nn.Transformer* fast paths: see there)
        return _staged_forward(fn) or fn.forward
    if not isinstance(fn, (type, functools.partial)) and not inspect.isroutine(fn) and \
            callable(fn) and inspect.isroutine(getattr(type(fn), "__call__", None)):
        call = fn.__call__
        if getattr(getattr(call, "__func__", call), "__code__", None) is not None:
            return call
    return fn


def _has_source(fn) -> bool:
    """Whether ``fn`` (as ``_python_function`` gives it) is Python code we can convert."""
    return getattr(getattr(fn, "__func__", fn), "__code__", None) is not None


def to_code(fn) -> str:
    """The readable Python source that ``to_graph`` generates for ``fn``."""
    return conversion.to_source(_python_function(fn))


# --------------------------------------------------------------------------- signatures
def _leaf_key(v):
    if isinstance(v, torch.Tensor):
        # strides too: a trace answers stride()/is_contiguous() from them (runtime.tensor_state);
        # the storage offset only once a trace reads it (argument_offsets)
        return ("T", tuple(v.shape), v.dtype, v.requires_grad, v.device.type, _layout(v),
                type(v), bool(v.__dict__))
    if isinstance(v, float) and not v:
        return (float, repr(v))             # -0.0 and 0.0 differ (copysign, 1/x)
    if isinstance(v, (bool, int, float, complex, str, bytes, type(None))):
        return (type(v), v)
    if isinstance(v, torch.nn.Module):
        return ("M", id(v), v.training)
    try:
        hash(v)
        return (type(v), v)
    except TypeError:
        return ("O", id(v))


_SCALARS = (int, float, bool, str, type(None))
_TENSOR = torch.Tensor


def _layout(t):
    """A tensor's strides (None for a layout without strides)."""
    try:
        return t.stride()
    except RuntimeError:            # sparse and other layouts without strides
        return None


def _flat_key(args):
    """A cheap signature for calls whose arguments are all CPU tensors and Python scalars
    (no containers): None when the full signature is needed."""
    key = ()
    try:
        for a in args:
            cls = a.__class__
            if cls is _TENSOR or (cls not in _SCALARS and isinstance(a, torch.Tensor)):
                if not a.is_cpu:
                    return None
                key += (cls, a.shape, a.dtype, a.requires_grad, a.stride(),
                        bool(a.__dict__))                   # the layout, as _layout
            elif cls in _SCALARS:
                key += (cls, a if cls is not float or a else repr(a))    # -0.0 is not 0.0
            else:
                return None
    except RuntimeError:            # a layout without strides (sparse): the full signature
        return None
    return key


_TRAINING = operator.attrgetter("training")
_aliases = argument_aliases.pattern


def _flat_call_key(args, kwargs):
    """``_flat_key`` of a call with keyword arguments, which flatten after the positional
    ones in the order given (the names are part of the key): None when the full
    signature is needed."""
    key = _flat_key(args)
    rest = _flat_key(kwargs.values()) if key is not None else None
    return None if rest is None else key + (tuple(kwargs),) + rest


def _fn_name(fn) -> str:
    name = getattr(fn, "__name__", "graph")
    return name if name.isidentifier() else "graph"


def signature_of(args, kwargs, held=frozenset(), appended=None):
    flat, spec = held_arguments.flatten(args, kwargs, held)    # (held: kept whole)
    if appended:        # (lists it appends numbers to: one marker, the call's in a cell)
        flat = appended.replace(args, kwargs, flat)
    flat = argument_objects.extend(flat)   # (+ the tensors argument objects hold)
    key = (spec,) + tuple(_leaf_key(v) for v in flat)   # TreeSpec hashes
    found = getattr(flat, "found", None)
    key += argument_aliases.key(flat)      # which tensor leaves are one object (f(x, x))
    return (key if found is None else key + (found.key,)), flat, spec


_call_modes = tensor_state.call_modes



# --------------------------------------------------------------------------- entries
class _Traced:
    """One input signature's graph, compiled; calling it runs the graph. ``guard``: the
    Python state the trace read, which must still hold for the graph to be reused.
    ``executable.fn`` takes every flattened argument (Python values are ignored) and
    returns the output structure."""

    def __init__(self, graph, optimized, executable, guard, inputs, outputs):
        self.graph = graph
        self.optimized = optimized
        self.executable = executable
        self.inputs, self.outputs = inputs, outputs    # how ``optimized`` was lowered
        self.fn = executable.fn
        # (result, writes to argument objects: runtime.argument_objects) when it writes
        self.writes = bool(getattr(graph, "argument_writes", 0))
        # writes a tensor argument in place: no flat fast key (the ordinary path's key says
        # which arguments share storage; its entry function checks: ``argument_aliases``)
        self.writes_inputs = bool(getattr(graph, "mutated_inputs", None))
        self.argument_refs = any(isinstance(v, ArgRef) for v in _walk_structure(
            outputs[0] if self.writes else outputs))
        self.holds = guard.compile_check()
        self.explain_guard = guard.explainer()     # which check failed: tograph.guards
        self.arguments_hold = guard.arguments_check()    # None: no object arguments

    def __call__(self, flat):
        try:
            return self.fn(*flat)
        except Exception as e:
            raise located(e, exact=True) from e


def _holds(entry, flat) -> bool:
    """Whether ``entry`` is a graph whose guards hold for a call on ``flat``."""
    return isinstance(entry, _Traced) and entry.holds() and \
        (entry.arguments_hold is None or entry.arguments_hold(flat))


# what a trace may read of a tensor argument beyond its key, and the signature the keys add
# from then on: its .grad (runtime.argument_grads), its storage_offset() (argument_offsets)
_READS = ((argument_grads.depends, argument_grads.signature),
          (tensor_state.reads_offsets, argument_offsets.signature))


class _Fallback:
    """A signature whose trace failed: calls run the Python function. ``retry``: when a
    later call traces it again (``transpiler.fallback_retry``), or None: never."""

    def __init__(self, reason: str, filename=None, lineno=None, retry=None):
        self.reason, self.filename, self.lineno = reason, filename, lineno
        self.retry = retry
        self.ran = None         # the call that made it, run eagerly (user_errors.Outcome)


# --------------------------------------------------------------------------- GraphFunction
def _function_attribute(graph_function, name: str):
    if graph_function._partial is not None:
        raise AttributeError(f"'functools.partial' object has no attribute '{name}'")
    return getattr(graph_function._fn, name)


class GraphFunction:
    """A converted function: callable like the original, traced per input signature."""

    def __init__(self, fn, strict: bool = False, probed: Tuple[str, ...] = (), dynamic=None,
                 cache_limit: Optional[int] = None):
        # a partial's bound arguments become ordinary arguments of each call (tensors
        # among them are graph inputs, not constants): see _call
        self._partial = (fn.args, fn.keywords) if isinstance(fn, functools.partial) else None
        if isinstance(fn, functools.partial):
            fn = fn.func
        self._static = isinstance(fn, staticmethod)     # a class attribute binds to nothing
        if self._static:
            fn = fn.__func__
        self._fn = fn
        self._strict = strict
        self._probed = tuple(sorted(set(probed)))    # f.probe: names tg.probe records
        # signature -> entry, bounded, least recently used evicted (transpiler.signature_cache)
        self._cache_limit = cache_limit
        self._entries = SignatureCache(cache_limit)
        self._retraces = Retraces()                 # why it traced: RetracingWarning
        self._leaf_names: List[str] = []            # the last trace's (for cache_info)
        self._held: frozenset = frozenset()     # list/dict arguments changed in place: whole
        self._served: frozenset = frozenset()   # (id(module), name) read when the graph runs
        self._keyed: tuple = ()     # signatures keys add once a trace read them (_READS)
        self._unread = None     # its unread number arguments (transpiler.unread_numbers)
        self._appended = appended_arguments.AppendedArguments()     # (list arguments)

        self._history: List[Any] = self._retraces.history
        self._bound = weakref.WeakKeyDictionary()     # __slots__ objects, classes (method_binding)
        target = _python_function(fn)
        try:
            functools.update_wrapper(self, target)
        except (AttributeError, TypeError):
            pass
        self._param_names = _param_names(target)
        self._no_source = None if _has_source(target) else \
            (f"{getattr(target, '__name__', None) or type(target).__name__} is a built-in or "
             f"C function: it has no Python source to convert")
        try:
            self._arguments = inspect.signature(target, follow_wrapped=False)
        except (TypeError, ValueError):
            self._arguments = None
        owner = fn if isinstance(fn, torch.nn.Module) else getattr(fn, "__self__", None)
        self._module = owner if isinstance(owner, torch.nn.Module) else None
        self._submodules = list(self._module.modules()) if self._module is not None else []
        self._training = TrainingFlags(self._module) if self._module is not None else None
        self._fast = self._entries.fast     # flat positional key -> entry (the same cache)
        self._dynamic = DynamicShapes(dynamic)      # to_graph(fn, dynamic=...)
        self._hot = HotShapes()         # a size a dynamic graph serves often: traced static
        self._probing: Dict[Any, "GraphFunction"] = {}   # probed names -> probing copy
        self._retried: Optional[_Fallback] = None     # the fallback being traced again

    # -- descriptor: @to_graph on a method in a class body
    def __get__(self, obj, objtype=None):
        if isinstance(self._fn, classmethod):       # bound to the class, as eagerly
            obj, objtype = None, objtype if objtype is not None else type(obj)
        elif obj is None or self._static:
            return self
        # kept in the object, freed with it (transpiler.method_binding)
        return method_binding.bound(self, objtype if obj is None else obj, self._bound,
                                    lambda: GraphFunction(
                                        self._fn.__get__(obj, objtype), self._strict,
                                        self._probed, self._dynamic.option, self._cache_limit))

    @property
    def python_function(self):
        return self._fn

    # what code reads of a function (a decorator logging ``fn.__code__.co_varnames``):
    # the original's, as through ``functools.wraps``; a partial's and a module's have none
    __code__ = property(lambda self: _function_attribute(self, "__code__"))
    __defaults__ = property(lambda self: _function_attribute(self, "__defaults__"))
    __kwdefaults__ = property(lambda self: _function_attribute(self, "__kwdefaults__"))
    __globals__ = property(lambda self: _function_attribute(self, "__globals__"))
    __closure__ = property(lambda self: _function_attribute(self, "__closure__"))

    # -- calling
    def _signature(self, args, kwargs):
        key, flat, spec = signature_of(args, kwargs, self._held, self._appended)
        if self._unread is None:            # numbers its source never reads: by type
            self._unread = (unread_numbers.of(_python_function(self._fn))
                            if self._no_source is None else None) or ()
        if self._unread and not (self._fn is self._module and _call_hooks(self._fn)):
            key = self._unread.key(key, args, kwargs, flat, self._held)
        if self._module is not None:          # train/eval changes dropout, batch norm...
            self._submodules = list(self._module.modules())
            key = key + (tuple(map(_TRAINING, self._submodules)),)
        # a trace applies no_grad/enable_grad and answers requires_grad in the ambient mode;
        # it runs ops as the caller's autocast state and default dtype make them behave
        for sign in self._keyed:
            key = key + sign(flat)
        return key + (_call_modes(), _GRAD_MODE[torch.is_grad_enabled()]), flat, spec

    def __call__(self, *args, **kwargs):
        return self._called(args, kwargs)

    def _called(self, args: tuple, kwargs: dict):
        """``self(*args, **kwargs)`` (``ToGraphModule`` calls it so, its arguments packed)."""
        try:
            if self._partial is not None:
                args, kwargs = self._partial[0] + args, {**self._partial[1], **kwargs}
            if _EAGERLY[0]:                         # run_eagerly(True): the original Python
                return caller_frames.call(self._fn, args, kwargs)
            if current_graph() is not None and callable(self._fn):    # called by a function
                return tg.call(self._fn, *args, **kwargs)   # being traced: traced inline there
            for enter in self._entries.inline:      # a signature's call as one function
                out = enter(args, kwargs)           # (transpiler.call_entry)
                if out is not _MISS:
                    return out
            keyed, named, unread = args, kwargs, ()     # (unread numbers: by type)
            if self._unread and self._fn is not self._module:
                keyed, named, unread = self._unread.fast(args, kwargs)
            fast = _flat_key(keyed) if not kwargs else _flat_call_key(keyed, named)
            if fast is not None:                   # the fast path: flat arguments
                fast += unread
                fast += (torch.is_grad_enabled(), _call_modes(),
                         _aliases(args if not kwargs else args + tuple(kwargs.values())))
                if self._module is not None:
                    fast += self._training()        # (read again when the tree changed)
                for sign in self._keyed:
                    fast += sign(args if not kwargs else args + tuple(kwargs.values()))
                entry = self._fast.get(fast)
                if entry is not None:
                    cache = self._entries           # a hit: counted, and stamped for LRU
                    if entry.__class__ is _Fallback:
                        if entry.retry is not None and entry.retry.due():
                            return self._call(args, kwargs, fast)   # (traced again there)
                        entry.used = cache.hits = cache.hits + 1
                        return caller_frames.call(self._fn, args, kwargs)
                    if entry.holds():
                        entry.used = cache.hits = cache.hits + 1
                        if entry.__class__ is _Traced and len(cache.inline) < INLINE:
                            self._inline(entry, args, kwargs)
                        try:
                            return entry.fn(*args, *kwargs.values()) if kwargs else \
                                entry.fn(*args)
                        except Exception as e:
                            raise located(e, exact=True) from e
            return self._call(args, kwargs, fast)
        except IntOverflow as e:        # a Python int past int64 (runtime.int_overflow)
            return self._overflowed(e, args, kwargs)
        except Exception as e:          # raised in a try whose handler may catch it
            replay = try_replays.replay_of(e)
            if replay is None:
                raise
            return self._replayed(e, replay, args, kwargs)

    def _replayed(self, e, replay, args: tuple, kwargs: dict):
        """The graph raised inside a ``try`` whose handler may catch it: the call runs
        eagerly, from the generator state the run started from (``runtime.try_replays``)."""
        (file, line), state = replay
        try_replays.restore(state)
        return self._rerun_eagerly(e, file, line, f"the graph raised {type(e).__name__} "
                                   f"inside a try whose handler may catch it (found when "
                                   f"the graph ran)", args, kwargs)

    def _overflowed(self, e, args: tuple, kwargs: dict):
        """The graph's Python int left int64: an effect-free graph's call runs eagerly;
        other graphs raise the error."""
        if not e.rerun:
            raise e
        return self._rerun_eagerly(e, e.file, e.line, f"{str(e).split(': ', 1)[-1]} (found "
                                   f"when the graph ran)", args, kwargs)

    def _rerun_eagerly(self, e, file, line, reason: str, args: tuple, kwargs: dict):
        """A run of the graph found ``reason`` at the user's ``file:line``: the call runs
        eagerly with a FallbackWarning (strict: ``ConversionError``)."""
        if self._strict:
            raise ConversionError(reason, file, line) from e
        warn_at_caller(FallbackWarning(f"{file}:{line}: {reason} -- running "
                                       f"{getattr(self, '__name__', 'the function')} "
                                       f"eagerly"))
        return caller_frames.call(self._fn, args, kwargs)

    def _call(self, args, kwargs, fast=None):
        if self._no_source is not None:
            return self._run_without_source(args, kwargs)
        key, flat, spec = self._signature(args, kwargs)
        entry = self._entries.get(key)
        retried = None
        if entry.__class__ is _Fallback and entry.retry is not None and entry.retry.due():
            retried = entry             # the state its reason wrote changed: trace again
            del self._entries[key]
            entry = None
        if entry is not None and not isinstance(entry, _Fallback) and not (
                entry.holds() and (entry.arguments_hold is None or entry.arguments_hold(flat))):
            trace_log.guard_failed(self, entry, flat)
            entry = None              # a global, closure value or attribute it read changed
        if entry is None:
            if not self._binds(args, kwargs):
                # the plain call's own TypeError, raised before its body runs (no
                # fallback warning, nothing cached)
                return _python_function(self._fn)(*args, **kwargs)
            held, keyed, unread = self._held, self._keyed, self._unread
            self._retried = retried
            try:
                entry = self._dynamic_entry(key, args, kwargs, flat, spec) or \
                    self._build(key, args, kwargs, flat, spec)
            finally:
                self._retried = None
            if self._keyed is not keyed or self._unread is not unread:
                fast = None             # (keys hold more of the arguments now)
            if self._held is not held:      # the trace held a list/dict argument whole
                self._entries.drop_inline()     # (entry functions flatten it: none now)
                key, flat, spec = self._signature(args, kwargs)
            # a size the dynamic graph served often: static (hot_shapes; None: keep it)
            if self._hot.due(entry, flat, self._entries.limit):
                entry = self._build(key, args, kwargs, flat, spec, promoted=True) or entry
        else:
            self._entries.hit(entry)
        if fast is not None and not getattr(entry, "writes_inputs", False):
            self._entries.link_fast(fast, entry)    # (a writing graph: storage in the key)
        if entry.__class__ is _Traced:
            self._inline(entry, args, kwargs)
        if isinstance(entry, _Fallback):
            ran, entry.ran = entry.ran, None
            return ran.result if ran is not None else caller_frames.call(self._fn, args, kwargs)
        if entry.writes:                # to argument objects (a KV cache grown)
            out, writes = entry(flat)
            argument_objects.write_back(flat.found, writes)
            return resolve_arguments(out, args, kwargs) if entry.argument_refs else out
        if entry.argument_refs:         # a list/dict the caller passed in, returned
            return resolve_arguments(entry(flat), args, kwargs)
        return entry(flat)

    def _inline(self, entry, args, kwargs) -> None:
        """Serve calls like this one, with ``entry``, by a generated entry function first
        (``transpiler.call_entry``; not for a partial's or held arguments, nor where keys
        hold the arguments' gradients or storage offsets)."""
        if self._partial is None and not self._held and not self._keyed:
            enter = call_entry.build(entry, args, kwargs, self._entries, self._training)
            if enter is not None:
                self._entries.add_inline(enter)

    def _dynamic_entry(self, key, args, kwargs, flat, spec) -> Optional[_Traced]:
        """The graph with dynamic dimensions that serves this call (``dynamic_shapes``):
        traced before, or now; None: trace the call's own signature, static."""
        plan = self._dynamic.plan(key, flat, lambda: argument_leaves(self._param_names,
                                                                     args, kwargs))
        if plan is None:
            return None
        for wider in plan.reuse:
            entry = self._entries.get(wider)
            if _holds(entry, flat):
                self._entries.hit(entry)
                return entry
        entry = self._entries.get(plan.key)
        if _holds(entry, flat):
            self._entries.hit(entry)
            return entry

        entry = self._build(plan.key, args, kwargs, flat, spec, dynamic=plan.dims)
        if entry is None:
            plan = self._dynamic.refuse(plan, key, flat)    # (the batch dims alone, or None)
            entry = self._entries.get(plan.key) if plan is not None else None
            if plan is not None and not _holds(entry, flat):
                entry = self._build(plan.key, args, kwargs, flat, spec, dynamic=plan.dims)
                if entry is None:
                    self._dynamic.refuse(plan, key, flat)
        if entry is not None:
            self._dynamic.traced(plan)
            if self._dynamic.option is None:    # automatic: hot sizes get static graphs;
                self._hot.watch(entry, plan.dims, self._entries)   # dynamic=...: one graph
        return entry

    def _binds(self, args, kwargs) -> bool:
        """Whether the arguments fit the function's parameters."""
        if self._arguments is None:
            return True
        try:
            self._arguments.bind(*args, **kwargs)
        except TypeError:
            return False
        return True

    def _run_without_source(self, args, kwargs):
        """A built-in or C function: strict mode refuses, the default runs it as it is and
        says so once."""
        file, line = user_location() or (None, None)
        if self._strict:
            trace_log.fell_back(self, self._no_source, file, line, True)
            raise ConversionError(self._no_source, file, line)
        if not self._entries:
            trace_log.fell_back(self, self._no_source, file, line, False)
            self._store(None, _Fallback(self._no_source, file, line))

            warn_at_caller(FallbackWarning(f"{file}:{line}: {self._no_source} -- running it "
                                           f"as it is"))
        return caller_frames.call(self._fn, args, kwargs)

    def graph(self, *args, **kwargs) -> "runtime.Graph":
        """The graph traced for this input signature, before optimization."""
        key, flat, spec = self._signature(args, kwargs)
        entry = self._entries.get(key)
        if entry is None:
            entry = self._build(key, args, kwargs, flat, spec, fallback_ok=False)
        if isinstance(entry, _Fallback):
            raise ConversionError(entry.reason, entry.filename, entry.lineno)
        return entry.graph

    def explain(self, *args, **kwargs):
        """Per source line, what tracing these arguments did (``cond``/``while`` node,
        Python specialization, fallback) and the retrace history: an ``Explanation``."""
        from .debugging.explain import explain
        return explain(self, args, kwargs)

    def probe(self, *args, names, **kwargs):
        """The values of the variables ``names`` in a converted run on these arguments
        (loop variables: one per iteration, stacked): a ``Probes`` dict, ``.result``
        holding the function's result."""
        from .debugging.probe import probe
        return probe(self, args, kwargs, names)

    def get_concrete(self, *args, **kwargs) -> _Traced:
        """The compiled entry (graph, optimized graph, executable) for this signature."""
        self.graph(*args, **kwargs)
        return self._entries[self._signature(args, kwargs)[0]]

    # -- tracing
    def _build(self, key, args, kwargs, flat, spec, *more, **options):
        """``_build_entry`` holding the trace lock (``runtime.threads``): traces run one at
        a time, and a thread that waited while another traced this signature takes its
        entry instead of tracing it again (cached calls take no lock)."""
        with TRACE_LOCK:
            entry = self._entries.get(key)
            if isinstance(entry, _Fallback) or _holds(entry, flat):
                self._entries.hit(entry)
                return entry
            return self._build_entry(key, args, kwargs, flat, spec, *more, **options)

    def _build_entry(self, key, args, kwargs, flat, spec, fallback_ok=True, dynamic=None,
                     promoted=False):
        """Trace, optimize and lower a signature's entry (a ``_Fallback`` when that fails;
        with ``dynamic`` dims ({flat leaf index: dims}) or ``promoted`` (a size a dynamic
        graph serves, traced static: ``hot_shapes``), None instead: no fallback)."""
        cached = self._entries.get(key)
        self._leaf_names = _leaf_names(self._param_names, args, kwargs, len(flat), self._held)
        trace_log.tracing(self, key, self._history, cached, flat, dynamic)
        self._entries.misses += 1
        self._retraces.note(self, self._leaf_names, key, cached, flat, dynamic or promoted)
        collecting = gc.isenabled()
        if collecting:              # building makes many objects, few cycles: collecting
            gc.disable()            # them meanwhile (a full pass per few thousand) is waste
        # what the trace draws is put back: the graph, or eager, draws from the call's state
        state = RandomState.take(flat, self._submodules)
        ran = user_errors.NOT_RUN       # (an eager run of this call after its trace failed)
        try:
            start = time.perf_counter()
            asked = library_compiling.asked()
            try:
                entry = self._trace(args, kwargs, flat, spec, dynamic)
            except Exception as first:
                entry = self._trace_as_eager(first, asked, state, args, kwargs, flat, spec,
                                             dynamic)
            finally:
                state.restore()
            entry.build_s = time.perf_counter() - start     # (hot_shapes' budget)
        except Exception as e:
            if isinstance(e, held_arguments.Changed) and not (dynamic or promoted):
                self._held = self._held | e.positions      # trace again, them held whole
                self._appended.add(getattr(e, "appended", ()))     # (numbers appended)
                key, flat, spec = self._signature(args, kwargs)
                return self._build_entry(key, args, kwargs, flat, spec, fallback_ok)
            if dynamic or promoted:
                trace_log.dynamic_refused(self, e)
                return None             # the call is traced static instead (dynamic_shapes)
            if getattr(e, "_tograph_user_error", False):
                # checked: eager fails the same way (shape inference). Eager runs up to its
                # error, so what it does before (BatchNorm counting the batch) happens too;
                # the error raised is the traced one (eager's text, the user's line in a note)
                ran = user_errors.run_eagerly(self._fn, args, kwargs, e)
                if ran.error is not None:
                    raise
                e = user_errors.misjudged(e)    # eager ran through: a fallback, its result
            reason = _reason(e, self._fn)
            file, line = _location(e, self._fn)
            if file and library_file(file) and user_location():   # (torch's own line: the
                reason = f"{reason} (at {file}:{line})"         # user's call is named)
                file, line = user_location()
            trace_log.fell_back(self, reason, file, line, self._strict or not fallback_ok)
            if self._strict or not fallback_ok:
                if isinstance(e, ConversionError):
                    raise
                if not isinstance(e, GraphError):
                    self._fn(*args, **kwargs)   # eager's own error, if it has one, as eager raises it
                raise ConversionError(reason, file, line) from e
            previous = self._retried
            retry = fallback_retry.after(reason, previous, lambda: self._state_now(args, kwargs))
            if not isinstance(e, (ConversionError, GraphError)):    # the user's own error?
                ran = user_errors.run_eagerly(self._fn, args, kwargs, e)
            if not ran.raised_same and fallback_retry.warns(reason, previous):
                warn_at_caller(FallbackWarning(f"{file}:{line}: {reason} -- running "
                                               f"{getattr(self, '__name__', 'the function')} "
                                               f"eagerly"))
            entry = _Fallback(reason, file, line, retry)
        finally:
            del _CALLED[:]              # (the guard has them: no table keeps them after)
            if collecting:
                gc.enable()
        if ran.raised_same:     # eager raised it too: its error, no fallback (user_errors)
            raise ran.error
        if not isinstance(entry, _Fallback):
            trace_log.traced(self, entry)
            added = tuple(sign for reads, sign in _READS
                          if sign not in self._keyed and reads(entry.graph))
            if added:                   # it read those of an argument: keyed on them
                self._keyed += added
                self._entries.drop_inline()
                key = self._signature(args, kwargs)[0]
            if self._unread and unread_numbers.changed(self._unread,
                                                       _python_function(self._fn)):
                self._unread = None     # (a callee it passes numbers to is another now:
                if dynamic or promoted:     # keyed as the trace met it; a dynamic graph's
                    return entry            # key has no other form: the next call traces)
                key = self._signature(args, kwargs)[0]
            entry.unread = unread_numbers.masked(key)   # (leaves any value of whose
                                                        # type it serves: call_entry)
        self._store(key, entry)
        if ran.error is not None:       # (this call ran eagerly already: its error, its
            raise ran.error             # result, the call not run twice)
        if ran.ran:
            entry.ran = ran
        return entry

    def _state_now(self, args, kwargs) -> Snapshot:
        """The Python state a call reaches, now: the function's, and that of the helpers
        its last trace met (what a fallback's retry watches: ``fallback_retry``)."""
        return _with_called(Snapshot.take(_python_function(self._fn), args, kwargs))

    def _store(self, key, entry) -> None:
        """Cache a new entry (counted); the first eviction for the limit warns once."""
        cache = self._entries
        if isinstance(entry, _Fallback):
            cache.fallbacks += 1
        else:
            cache.traces += 1
        evictions = cache.evictions
        if cache.put(key, entry):
            warn_cache_limit(self, cache.limit)
        if cache.evictions != evictions:
            trace_log.evicted(self, cache.evictions - evictions, cache)

    def cache_info(self):
        """Counts of this function's signature cache (``transpiler.signature_cache``):
        traces, hits, misses, evictions, fallbacks, entries, limit, and dynamic_dims
        ({argument name: dims traced dynamic}, ``transpiler.dynamic_shapes``)."""
        names = self._leaf_names
        return self._entries.info({names[i] if i < len(names) else f"input{i}": tuple(dims)
                                   for i, dims in self._dynamic.dims().items()})


    def trace_graph(self, args, kwargs=None, dynamic=None):
        """A fresh graph traced for these arguments (not cached, not optimized), with
        ``dynamic`` ({flat leaf index: dims}) dimensions of the tensor inputs left
        dynamic: any use of such a size is a graph value, never a Python int, so the graph
        serves every size (what export needs). Returns (graph, output structure)."""
        kwargs = kwargs or {}
        key, flat, spec = self._signature(args, kwargs)
        flat = flat[:spec.num_leaves]   # (argument objects' tensors: constants, no write-back)
        state = RandomState.take(flat, self._submodules)
        with TRACE_LOCK:
            try:
                graph, structure, _ = self._trace_graph(args, kwargs, flat, spec, dynamic or {})
            finally:
                del _CALLED[:]
                state.restore()
        return graph, structure


    def _trace_as_eager(self, first, asked, state, args, kwargs, flat, spec, dynamic):
        """The trace failed after library code was told ``is_compiling()`` is True (a path
        some libraries only run under torch.compile: a mask left None): trace once more
        with eager's answer (``runtime.library_compiling``); the first error if that fails
        too."""
        if library_compiling.asked() == asked or isinstance(first, held_arguments.Changed) \
                or getattr(first, "_tograph_user_error", False):
            raise first
        state.restore()
        with library_compiling.as_eager():
            try:
                return self._trace(args, kwargs, flat, spec, dynamic)
            except Exception:   # noqa: BLE001 - the first trace's reason is the one said
                raise first from first.__cause__

    def _trace(self, args, kwargs, flat, spec, dynamic=None) -> _Traced:
        if dynamic:      # the sizes it serves: what the ops' shapes follow must be proven
            with strict_dims():
                return self._trace_with(args, kwargs, flat, spec, dynamic)
        return self._trace_with(args, kwargs, flat, spec, None)

    def _trace_with(self, args, kwargs, flat, spec, dynamic) -> _Traced:
        graph, structure, target = self._trace_graph(args, kwargs, flat, spec, dynamic or {},
                                                     sized_examples=True)
        refused = try_replays.refusal(graph)    # (a try whose handler may catch a run's
        if refused is not None:                 # error: only a graph without effects)
            raise GraphError(refused)
        trace_log.traced_graph(target, graph)
        optimized = graph.optimize()
        env = {id(a): b for a, b in zip(iter_nodes(graph.outputs),
                                        iter_nodes(optimized.outputs))}
        outputs = map_structure(structure, lambda v: isinstance(v, (Node, Unstack)),
                                lambda v: returned_numbers.output(v, env))
        params = iter(optimized.inputs)
        repeats = argument_aliases.earlier(flat)    # (one tensor passed twice: one input)
        inputs = [next(params) if isinstance(v, torch.Tensor) and i not in repeats else None
                  for i, v in enumerate(flat)]
        executable = lower(optimized, inputs, outputs, name=_fn_name(target))
        executable.fn = try_replays.replaying(executable.fn, graph)
        guard = _with_called(Snapshot.take(target, (), {}))
        guard.module_writes(list(getattr(graph, "module_writes", ())) +   # (and counters)
                            module_numbers.guarded(graph.carried_slots))
        guard.watch_arguments(flat)
        guard.dict_writes(getattr(graph, "dict_writes", ()))
        if getattr(flat, "found", None) is not None:
            guard.argument_holders([c for c, _ in flat.found.holders])
        guard.watch_reads(getattr(graph, "tensor_reads", None),
                          [n.attrs["value"] for n in graph.walk() if n.op == "constant"
                           and isinstance(n.attrs.get("value"), torch.Tensor)])
        guard.release(autograd_effects.owners(graph),   # (opt, sched: read when it runs)
                      getattr(graph, "served_attributes", {}),
                      getattr(graph, "read_attributes", {}))
        guard.carry(graph.carried_slots)     # (runtime.carried_numbers: not compared)
        trace_log.guard_built(target, guard)
        return _Traced(graph, optimized, executable, guard, inputs, outputs)

    def _trace_graph(self, args, kwargs, flat, spec, dynamic, sized_examples=False,
                     set_up=False, carry=None):
        """``sized_examples``: shape inference runs dynamic dims at the call's own sizes
        (else at 2: an export's example may have size 1, which broadcasts). ``set_up``:
        a retrace after a one-time set-up kept (``lazy_init``)."""
        target = _python_function(self._fn)
        around = isinstance(self._fn, torch.nn.Module) and _call_hooks(self._fn)
        if around and not module_hooks.forward_hooks_only(self._fn):
            raise GraphError(f"{type(self._fn).__name__} has backward or always-called "
                             f"hooks (its own or torch's global ones), which calling it runs "
                             f"around forward; the graph is of forward only")
        hooked = [name for name, m in self._fn.named_modules() if backward_hooked(m)] \
            if isinstance(self._fn, torch.nn.Module) else []
        if hooked:
            raise GraphError(f"submodule {hooked[0]!r} has backward hooks, which autograd "
                             f"runs on its gradients; a graph of the forward cannot call them")
        converted = convert_function(target, self._probed)
        if around:      # its forward hooks (and pre-hooks) traced around it, in call order
            converted = module_hooks.hooked_call(self._fn, converted, tg.call)
        graph = runtime.Graph(name=getattr(target, "__name__", "graph"))
        names = _leaf_names(self._param_names, args, kwargs, len(flat))
        sym = []
        repeats = argument_aliases.earlier(flat)    # f(x, x): ``a is b`` as in the call
        for index, (value, name) in enumerate(zip(flat, names)):
            if index in repeats:
                sym.append(sym[repeats[index]])
            elif self._appended.serves(index):
                sym.append(self._appended.stand_in(index, name))
            elif isinstance(value, torch.Tensor):
                meta = TensorMeta.of(value)
                example = None
                if dynamic.get(index):
                    if sized_examples:
                        example = meta_empty(meta.shape, meta.dtype)
                    meta = TensorMeta(tuple(None if d in dynamic[index] else size
                                            for d, size in enumerate(meta.shape)), meta.dtype)
                node = graph.placeholder(meta, name=name)
                node.attrs["requires_grad"] = value.requires_grad    # see runtime.grad_flags
                sym.append(wrap_node(node, example if example is not None else
                                     tensor_state.argument_example(value, meta, name)))
                tensor_state.note_argument(node, value)
            else:
                sym.append(value)
        sargs, skwargs = pytree.tree_unflatten(sym[:spec.num_leaves], spec)
        snapshot = Snapshot.take(target, sargs, skwargs)   # what the trace really receives
        snapshot.include_new(target)        # (what it keeps across calls: function_state)
        numbers = carried_numbers.candidates(*snapshot.bindings())
        for fn in carry[1] if carry is not None else ():   # (helpers the first trace met:
            snapshot.include_new(fn)                        # their globals before the call)
        graph.carried_slots = carry[0] if carry is not None else []     # (for the guard)
        found = getattr(flat, "found", None)     # argument objects: placeholders installed
        installed = argument_objects.Installed(found, sym) if found is not None else None
        reached = [v for v in [self._module] + snapshot.roots()    # (a model it calls too)
                   if isinstance(v, torch.nn.Module)]
        watch = module_writes.Watch(reached, self._served)
        passed = [v for v in [*sargs, *skwargs.values()] if isinstance(v, torch.nn.Module)]
        dicts = module_writes.DictWatch([h for m in reached + passed for h in tree_hooks(m)])
        take_converted()
        del _CALLED[:]
        touched = len(region_state.TOUCHED)
        raised, copies = subgraphs.escaped(), control_flow.copies_mark()
        identities = path_values.identities_mark()
        try:          # (what the trace noted of path-chosen identities ends with it)
            try:
                with tracing(graph), trace_reads.recording() as reads, \
                        state_aliases.arguments(list(zip(self._param_names, sargs)) +
                                                list(skwargs.items())), \
                        state_aliases.existing(snapshot.labelled_roots()), \
                        training_attributes.served(graph, snapshot.roots() +
                                                   pytree.tree_leaves((sargs, skwargs))), \
                        carried_numbers.serving(graph.carried_slots):
                    graph.tensor_reads = reads      # what it asked of real tensors: guarded
                    _WATCHING.append(snapshot)
                    try:
                        watch.serve(_record)
                        with traced_hooks.converted(reached + passed):    # (torch's
                            out = converted(*sargs, **skwargs)    # modules' hooks too)
                        stored = watch.writes(graph)    # (tensors set on modules: put back)
                        again = module_writes.read_first(graph, stored, watch)
                        items = dicts.writes(graph)     # (and in a hook's dict)
                        module_writes.refuse_read_items(graph, items)
                        module_writes.record_writes(() if again else stored + items, _record)
                    finally:
                        _WATCHING.pop()
                        module_modes.restore(graph)     # (the graph's run sets them)
            except BaseException as e:
                watch.restore()
                dicts.restore()
                if installed is not None:
                    installed.restore()
                control_flow.copies_changed(copies)
                region_state.untouch(touched)
                snapshot.restore()
                held = held_arguments.reached(e, sargs, skwargs, self._held)
                if held:        # a region changes a list/dict argument: trace it held
                    raise held_arguments.Changed(str(e), held) from e
                raise
            if again:   # an old tensor read before its name is rebound: read when it runs
                if installed is not None:
                    installed.restore()
                region_state.untouch(touched)
                snapshot.restore()
                self._served = self._served | {(id(m), name) for m, name in again}
                return self._trace_graph(args, kwargs, flat, spec, dynamic, sized_examples,
                                         set_up, carry)
            graph.module_writes = module_writes.shaped(stored, graph.tensor_reads, watch.served)
            graph.dict_writes = module_writes.shaped(items, graph.tensor_reads)
            writes = installed.writes() if installed is not None else ()
            counted = installed.refused(writes) if writes else None
            if counted is not None:
                raise GraphError(f"the function mutates argument {names[counted[0]]!r} (its "
                                 f"{counted[1]}: a number or text the graph would set to the "
                                 f"value of its trace on every call)")
            caught = subgraphs.escaped_since(raised)
            refused = control_flow.copies_changed(copies)     # (asked always: it forgets them)
            if caught is not None:
                refused = (f"{caught} was caught while tracing (by a with statement's __exit__ "
                           f"or an except): whether that path raises is known only when the "
                           f"graph runs")
            if refused is not None:
                region_state.untouch(touched)
                snapshot.restore()
                raise GraphError(refused)
            changed = snapshot.changes()
            seen = snapshot.sees(take_converted())
            if seen and not changed:
                changed = (f"the function appends to {seen} in tensor-dependent control flow, "
                           f"a list the caller can see")
            if changed and not set_up and installed is None and lazy_init.kept(snapshot):
                try:        # a library's one-time set-up: kept if a retrace changes nothing
                    return self._trace_graph(args, kwargs, flat, spec, dynamic,
                                             sized_examples, set_up=True)
                except BaseException:
                    snapshot.restore()
                    raise
            slots = carried_numbers.rebound(numbers + snapshot.numbers_before() +
                                            carried_numbers.candidates(*snapshot.bindings()[:2])
                                            ) if changed else None  # (helpers' bindings too)
            if slots and carry is not None:     # (set only once the served ones were:
                slots = carry[0] + slots        # ``if (state.step + 1) % k == 0:``)
            carried_failed = None
            if slots:           # a counter rebound (``nonlocal step; step += 1``): carried
                snapshot.restore()
                try:
                    return self._trace_graph(args, kwargs, flat, spec, dynamic,
                                             sized_examples, set_up,
                                             carry=(slots, list(_CALLED)))
                except Exception as e:  # noqa: BLE001 - the first trace's reason is said
                    snapshot.restore()
                    if isinstance(e, appended_lists.ReadError) or \
                            getattr(e, "names_its_line", False):
                        raise           # (but a read of a list it appends to: that line;
                        # an effect the counter's branch cannot stage: module_modes)
                    carried_failed = e  # (and why carrying it failed: said too)
            if changed:
                held = held_arguments.changed(snapshot, sargs, skwargs, self._held)
                grown = appended_arguments.appended(args, kwargs, sargs, skwargs, held)
                snapshot.restore()
                if held:
                    error = held_arguments.Changed(changed, held)
                    error.appended = grown      # (lists grown by numbers: transpiler.
                    raise error                 # appended_arguments)
                error = GraphError(f"{changed} (a Python side effect that a graph cannot repeat "
                                   f"on every call)"
                                   f"{_carry_failure(carried_failed, changed, self._fn)}")
                error.location = getattr(snapshot, "changed_line", None) or \
                    _assignment_line(target, changed) or next(
                    filter(None, (_assignment_line(hook, changed) for m in reached
                                  for hook in tree_hooks(m))), None) or (
                    _assignment_line(snapshot.changed_owner, changed)
                    if getattr(snapshot, "changed_owner", None) is not None else None)
                raise error
            existed = _existed(snapshot, sargs, skwargs)
            shared = region_state.shared_touched(touched, existed, argument_objects.written(
                installed) | carried_numbers.attributes(graph.carried_slots))
            if shared is not None:
                snapshot.restore()
                raise GraphError(f"a tensor-dependent region changes {shared} of an object that "
                                 f"existed before the call (a Python side effect that a graph "
                                 f"cannot repeat on every call)")
            graph.mutated_inputs = [(name, views.storage(v).written) for v, name in
                                    zip(sym, names) if isinstance(v, torch.Tensor) and
                                    views.storage(v) is not None and views.storage(v).written]
            if graph.mutated_inputs and argument_aliases.shared(flat):    # (x[:4], x[1:])
                snapshot.restore()
                argument_aliases.refuse_shared_writes(graph, flat, names)
            structure = _output_structure(graph, out, existed, _argument_paths(sargs, skwargs))
            if writes:
                structure = (structure, _write_structure(graph, out, writes, existed,
                                                         installed.references()))
                graph.argument_writes = len(writes)
            graph.outputs = map_structure(structure, lambda v: isinstance(v, Unstack),
                                          lambda v: v.node)
            return graph, structure, target
        finally:
            if installed is not None:
                installed.restore()
            path_values.forget_identities(identities)
            _CONVERTED.clear()          # (see _CONVERTED: kept for one trace only)

    def __repr__(self) -> str:
        return f"<to_graph {getattr(self, '__qualname__', self._fn)!r}>"


def _record(fn, args):
    """A node calling ``fn(*args)`` in the graph being traced."""
    from runtime.symbolic import dispatch_record
    return dispatch_record(fn, args, {})


def _call_hooks(module) -> bool:
    """Whether calling ``module`` runs hooks around ``forward`` (its own or torch's global
    ones, as ``nn.Module.__call__`` does). The guard (``runtime.module_state``) watches
    these dicts' keys, so a hook added after a trace means tracing again, and refusing."""
    from runtime.module_state import HOOK_DICTS, global_hooks
    return any(getattr(module, name, None) for name in HOOK_DICTS) or \
        any(global_hooks())


def _existed(snapshot, args, kwargs):
    """``existed(obj)``: whether ``obj`` was reachable before the call (from the
    arguments, the globals and closures of the functions traced, the method's object).
    The walk is made on first use only: most results hold no object."""
    found = []

    def existed(obj) -> bool:
        if not found:
            # the arguments' leaves: their tuples, lists, dicts, OrderedDicts were
            # rebuilt for the trace (what the trace returns of them is no caller's object)
            roots = snapshot.roots() + pytree.tree_leaves((args, kwargs))
            for fn in _CALLED:          # (not a method's object: the call may have made it)
                if not _made_by_converted_code(fn):
                    roots += Snapshot.take(getattr(fn, "__func__", fn), (), {}).roots()
            found.append({id(v) for v in reachable(roots)})
        return id(obj) in found[0]
    return existed


def _walk_structure(value):
    """The values in an output structure's tuples, lists and dicts, and in the parts of
    its ``Rebuild`` markers (``template`` puts an ``ArgRef`` there only as an option that
    ``_pick_container`` hands back in place: a path's own argument list)."""
    if isinstance(value, (tuple, list)):
        for v in value:
            yield from _walk_structure(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _walk_structure(v)
    else:
        yield value


_PYTREE_CONTAINERS = (list, dict, collections.OrderedDict, collections.defaultdict,
                      collections.deque)


def _argument_paths(sargs, skwargs) -> Dict[int, tuple]:
    """The id of each list/dict the trace received in place of one the caller passed (the
    pytree rebuilt it) -> its path in the call's ``(args, kwargs)``."""
    paths: Dict[int, tuple] = {}

    def walk(v, path):
        kind = type(v)
        if kind in _PYTREE_CONTAINERS or kind in appended_arguments.SERVED:
            paths[id(v)] = path     # (or a list appended to: transpiler.appended_arguments)
        if kind is tuple or kind is list or kind is collections.deque or \
                isinstance(v, tuple) and hasattr(v, "_fields"):
            for i, x in enumerate(v):
                walk(x, path + (i,))
        elif kind in _PYTREE_CONTAINERS:
            for k, x in v.items():
                walk(x, path + (k,))
    walk((tuple(sargs), skwargs), ())
    return paths


def _output_structure(graph, out, existed=lambda obj: False, arguments=None):
    """The graph outputs for a traced result: nodes for symbolic tensors, values as is,
    ``Unstack`` markers for lists grown in tensor loops, ``Rebuild`` markers for objects
    made by the call (``runtime.outputs``: a fresh object of the same class on each call)."""
    from runtime.symbolic import building, to_node

    def leaf(v):
        if isinstance(v, UndefinedReturn):
            return None
        if isinstance(v, Undefined):
            raise GraphError(f"the result holds variable {v.name!r}, which is not defined")
        if isinstance(v, TensorList):
            return Unstack(leaf(v.unstacked()))
        if isinstance(v, DeferredText):
            raise GraphError("the result holds text made from a traced tensor's value (an "
                             "f-string, str() or format of it), which is known only when "
                             "the graph runs")
        with building(graph):
            return to_node(graph, v)
    special = (UndefinedReturn, Undefined, TensorList, torch.Tensor, DeferredText)
    paths = arguments or {}
    return template(out, lambda v: isinstance(v, special), leaf, existed,
                    lambda v: paths.get(id(v)))


def _write_structure(graph, out, writes, existed, holders):
    """The output structure of what the call wrote to argument objects (``writes``:
    (holder index, kind, new items), ``runtime.argument_objects``): the holders referred
    to by place (``holders``: their ids -> ``ArgRef`` paths). An object the call made that
    the result holds too would come back as two objects: refused."""
    made = {id(v) for v in reachable([w[2] for w in writes]) if not existed(v) and
            not isinstance(v, _ATOM_TYPES) and not is_tensor(v)}
    if made and any(id(v) in made for v in reachable([out])):
        raise GraphError("an object the call makes is both returned and stored in an "
                         "argument object; it cannot be rebuilt as one object on each call")
    return _output_structure(graph, tuple(writes), existed, holders)


_ATOM_TYPES = (int, float, complex, str, bytes, bool, type(None))


def _param_names(fn) -> List[str]:
    try:
        return list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return []


def _leaf_names(params: List[str], args, kwargs, n: int, held=frozenset()) -> List[str]:
    """Readable placeholder names: the parameter name, with an index inside containers."""
    names = []
    for i, a in enumerate(args):
        base = params[i] if i < len(params) else f"arg{i}"
        count = held_arguments.leaf_count(a, i in held)
        names += [base] if count == 1 else [f"{base}_{j}" for j in range(count)]
    for k, v in kwargs.items():
        count = held_arguments.leaf_count(v, k in held)
        names += [k] if count == 1 else [f"{k}_{j}" for j in range(count)]
    return (names + [f"input{i}" for i in range(len(names), n)])[:n]


_MUTATORS = frozenset({"append", "extend", "insert", "pop", "remove", "clear", "update",
                       "setdefault", "add", "discard", "sort", "reverse", "popitem"})


def _changed_name(fn, change: str) -> Optional[str]:
    """The variable a side-effect message is about: a global, nonlocal or closure
    variable, a parameter (``argument #i``), or ``self`` for the method's object."""
    import re
    named = re.search(r"(?:global|nonlocal variable|closure variable|parameter|function) "
                      r"'(\w+)'", change)
    if named:
        return named.group(1)
    params = _param_names(inspect.unwrap(getattr(fn, "__func__", fn)))
    numbered = re.search(r"mutates argument #(\d+)", change)
    if numbered:
        index = int(numbered.group(1)) + (1 if getattr(fn, "__self__", None) is not None
                                           else 0)
        return params[index] if index < len(params) else None
    if "object the method belongs to" in change and params:
        return params[0]
    return None


def _touches(node, name: str) -> bool:
    """Whether a statement or call rebinds or mutates ``name`` (``name = ...``,
    ``name[i] = ...``, ``name.a = ...``, ``name += ...``, ``name.append(...)``,
    ``name.add_(...)``)."""
    import ast

    def base(target):
        while isinstance(target, (ast.Attribute, ast.Subscript)):
            target = target.value
        return isinstance(target, ast.Name) and target.id == name
    if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return any(base(t) for t in targets)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        attr = node.func.attr
        return base(node.func.value) and (attr in _MUTATORS or
                                          (attr.endswith("_") and not attr.endswith("__")))
    return False


def _assignment_line(fn, change: str) -> Optional[Tuple[str, int]]:
    """The first line of ``fn`` that assigns or mutates what a side-effect message names
    (the line to change), or None."""
    import ast
    import textwrap
    name = _changed_name(fn, change)
    if name is None:
        return None
    try:
        target = inspect.unwrap(getattr(fn, "__func__", fn))
        lines, first = inspect.getsourcelines(target)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError):
        return None
    hits = [n.lineno for n in ast.walk(tree) if _touches(n, name)]
    if not hits:
        return None
    return inspect.getsourcefile(target) or target.__code__.co_filename, first + min(hits) - 1


def _location(e: Exception, fn) -> Tuple[Optional[str], Optional[int]]:
    """The user's file and line an error is about: its own, the recursive call for a
    ``RecursionError``, the innermost user frame it passed through, else where ``fn`` is
    defined."""
    if isinstance(e, ConversionError) and e.filename:
        return e.filename, e.lineno
    loc = getattr(e, "location", None)
    if loc:
        return loc
    text = str(e)
    head = text.split(": ", 1)[0]
    if ":" in head:
        file, _, line = head.rpartition(":")
        if line.isdigit():
            return file, int(line)
    if isinstance(e, RecursionError):
        loc = reentered_call_site(e.__traceback__)
        if loc:
            return loc
    return location_of_traceback(e.__traceback__) or _origin(_python_function(fn))


_PLAIN = (ConversionError, GraphError, NotImplementedError, UnboundLocalError)


def _carry_failure(e: Optional[Exception], changed: str, fn) -> str:
    """Why the trace that carried the changed number as a graph value failed (``e``), as
    the end of the refusal's text: the construct that keeps the number from converting."""
    if e is None:
        return ""
    reason = _reason(e, fn)
    if reason.startswith(changed):
        return ""       # (the same change again: nothing more to say)
    file, line = _location(e, fn)
    where = f"{file}:{line}: " if file else ""
    return f"; nor can the number be carried as a graph value: {where}{reason}"


def _reason(e: Exception, fn) -> str:
    """The error's text without a leading ``file:line:`` (that is kept apart); the
    error's type named when it is not one of ours that explains itself."""
    if isinstance(e, ConversionError):
        return e.reason
    if isinstance(e, RecursionError):
        return ("recursion did not end while tracing: a recursive call whose depth depends "
                "on a tensor value (under a tensor `if`, whose both branches are traced) "
                "cannot end at trace time")
    text = str(e) or type(e).__name__
    file, line = _location(e, fn)
    prefix = f"{file}:{line}: "
    text = text[len(prefix):] if text.startswith(prefix) else text
    return text if isinstance(e, _PLAIN) else f"tracing failed with {type(e).__name__}: {text}"


# --------------------------------------------------------------------------- to_graph
_DECORATOR = object()     # to_graph(strict=...) without a function: the decorator form


def to_graph(fn=_DECORATOR, *, strict: bool = False, dynamic=None,
             cache_limit: Optional[int] = None):
    """Convert ``fn`` (function, lambda, bound method or ``nn.Module``) to a graph function;
    for an ``nn.Module``, an ``nn.Module`` wrapping it (``transpiler.module_wrapper``).

    Works as ``@to_graph``, ``to_graph(fn)``, ``to_graph(fn, strict=True)`` and
    ``@to_graph(strict=True)``. ``dynamic``: which input dimensions one graph serves at
    every size (``transpiler.dynamic_shapes``): None, automatic (a dimension seen with a
    second size); False, none; True, all; ``{"x": [0], 1: 0}``, by argument name or position.
    ``cache_limit``: the most input signatures it keeps traced (least recently used
    dropped; default ``TOGRAPH_CACHE_LIMIT`` or 64: ``transpiler.signature_cache``).
    """
    if fn is _DECORATOR:
        return lambda f: to_graph(f, strict=strict, dynamic=dynamic, cache_limit=cache_limit)
    if isinstance(fn, GraphFunction):
        return fn if _same_options(fn, strict, dynamic, cache_limit) else \
            GraphFunction(fn.python_function, strict, dynamic=dynamic, cache_limit=cache_limit)
    wrapper = _module_wrapper()
    if isinstance(fn, wrapper):                 # to_graph(to_graph(m)): not wrapped twice
        return fn if _same_options(fn.graph_function, strict, dynamic, cache_limit) else \
            wrapper(fn.original_module, strict, dynamic, cache_limit)
    if is_distributed_data_parallel(fn):    # DDP's forward stays eager, its module a graph
        return convert_wrapped_module(fn, lambda m: to_graph(
            m, strict=strict, dynamic=dynamic, cache_limit=cache_limit))
    if isinstance(fn, torch.nn.Module):         # an nn.Module wrapping fn (module_wrapper)
        return wrapper(fn, strict, dynamic, cache_limit)
    if not callable(fn) and not isinstance(fn, (staticmethod, classmethod)):
        raise TypeError(f"to_graph needs a function or nn.Module, got {type(fn).__name__}")
    return GraphFunction(fn, strict, dynamic=dynamic, cache_limit=cache_limit)


def _same_options(fn: GraphFunction, strict: bool, dynamic, cache_limit=None) -> bool:
    option = fn._dynamic.option
    return fn._strict == strict and type(option) is type(dynamic) and option == dynamic \
        and fn._cache_limit == cache_limit



def graph_function(fn) -> GraphFunction:
    """The ``GraphFunction`` that runs ``fn``: ``fn`` itself, a ``to_graph(module)``
    wrapper's, or a new one (the debugging tools take any of these)."""
    if isinstance(fn, GraphFunction):
        return fn
    fn = to_graph(fn) if not isinstance(fn, _module_wrapper()) else fn
    return fn.graph_function if isinstance(fn, _module_wrapper()) else fn


def _module_wrapper():
    """``ToGraphModule`` (its module imports this one: imported on first use)."""
    from .module_wrapper import ToGraphModule
    return ToGraphModule

