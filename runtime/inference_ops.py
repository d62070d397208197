"""Ops traced inside ``torch.inference_mode()``: each one runs in inference mode when the
graph runs, and what eager says of its result (``is_inference()``) is known.

In eager, an op run in inference mode records no autograd history (grad mode is off in
it) and makes an *inference tensor*: ``is_inference()`` is True, a later in-place write to
it outside the mode raises, and autograd refuses to save it for backward. A view keeps
its base's kind (a view of a parameter taken in the mode is a normal tensor; a view of an
inference tensor taken outside it is an inference tensor). A graph has no such mode of
its own, so an op recorded while inference mode differs from the call's (a ``with
torch.inference_mode():`` region, ``@torch.inference_mode()`` on a called helper, an
``inference_mode(False)`` region inside one) becomes a node whose target is an
``InferenceOp``: the original function called inside ``torch._C._InferenceMode(mode)``.
Its result is eager's: the same values, an inference tensor where eager's is one, no
history. The caller's own mode is part of a call's signature (``tensor_state.call_modes``),
so every other op runs in it as eager's do.

- **Opaque to the optimizer**: the node's op is ``inference_<name>`` (in-place ops keep a
  trailing ``_``), which no rewrite, fusion or memory plan knows: nothing fuses it, writes
  its result into a planned buffer or reuses its result's buffer (a write into an
  inference tensor outside the mode would raise). Shapes and dtypes are the plain op's.
- **Which values are inference tensors** is recorded on each node (``KEY``: True, False,
  or None where it depends on whether a may-be-view op copied); ``t.is_inference()`` of a
  traced value is answered from it (``tensor_state``), and refused where it is None or the
  value is an argument's (the caller's tensor's kind is not part of the signature).
- **Eager's errors**: an in-place write outside the mode to a value made in it, and an op
  recorded by autograd (grad mode on, an input requiring grad) that reads one, are checked
  on real tensors of the same shapes and kinds: where eager raises (its text: "Inplace
  update to inference tensor outside InferenceMode", "Inference tensors cannot be saved
  for backward") the trace raises that error as the user's own (in both modes, after
  eager ran up to it: ``transpiler.api``); where it does not (``w + t``, ``torch.cat``,
  ``torch.where``: the op saves no inference tensor), the op is recorded as an opaque
  ``normal_<name>`` node (an ``InferenceOp`` in the call's own mode), so no fused kernel,
  which might save what eager's op does not, takes it in; where it cannot be checked (a
  branch or loop body, a run-time size), the call falls back naming the line. A view taken in the mode
  of a tensor that requires grad is refused too (eager's view requires grad with no
  history, which the trace's flags do not follow).
- **Autograd and optimizer effects** (``loss.backward()``, ``opt.step()``) recorded in a
  mode other than the call's are refused: eager would run them in the mode (optimizer
  state made there would be inference tensors).
- **Python work is not run in the mode**: stand-ins for Python numbers (``t.item()``:
  ``item_values``; arithmetic on them, a carried counter's ``steps[0] += 1``), a meter's
  deferred update, a logged list's appends and kept state's reads and writes
  (``_PYTHON_STATE``) stay normal tensors: eager's numbers have no mode, and a later
  loss multiplied by one must not meet an inference tensor.

Module state: ``_STARTS`` holds the caller's mode per running trace, per thread;
``_WRAPPED`` is shared (a race makes at most a second equal ``InferenceOp``, harmless).
"""
from __future__ import annotations

import threading
from typing import Dict, Optional, Tuple

import torch

from .errors import GraphError
from .ops import is_inplace, op_name
from .source_info import format_location
from .views import VIEW_OPS

KEY = "inference"       # node.attrs: is the value an inference tensor (True/False/None)
_WRAPPED: Dict[Tuple, "InferenceOp"] = {}
_STARTS = threading.local()
_EFFECT_MODULES = ("runtime.autograd_effects", "runtime.scaler_effects")


class InferenceOp:
    """``func`` run inside ``torch._C._InferenceMode(mode)`` (what ``inference_mode``'s
    ``__enter__``/``__exit__`` do, without its Python wrapper)."""

    __slots__ = ("func", "mode", "__name__", "__qualname__", "__weakref__")

    def __init__(self, func, mode: bool, inplace: bool = False):
        self.func = func
        self.mode = mode
        name = f"inference_{op_name(func)}" if mode else f"normal_{op_name(func)}"
        if inplace and not name.endswith("_"):
            name += "_"
        self.__name__ = self.__qualname__ = name

    def __call__(self, *args, **kwargs):
        with torch._C._InferenceMode(self.mode):
            return self.func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<inference_mode({self.mode}) {op_name(self.func)}>"

    def __reduce__(self):
        return (wrapped, (self.func, self.mode, self.__name__.endswith("_")))


def wrapped(func, mode: bool, inplace: bool = False) -> InferenceOp:
    """The one ``InferenceOp`` of ``func`` in ``mode`` (one object: CSE and the shape cache
    key on it)."""
    key = (func, mode, inplace)
    op = _WRAPPED.get(key)
    if op is None:
        op = _WRAPPED[key] = InferenceOp(func, mode, inplace)
    return op


def trace_started(on: bool) -> None:
    """Around a trace (``tensor_state.watching_modes``): push (``on``) or pop the caller's
    inference mode."""
    stack = _STARTS.__dict__.setdefault("stack", [])
    if on:
        mode = torch.is_inference_mode_enabled()
        stack.append([mode, mode])      # (the caller's mode; whether any op ran in it)
    elif stack:
        stack.pop()


def _call_mode() -> Optional[bool]:
    stack = getattr(_STARTS, "stack", None)
    return stack[-1][0] if stack else None


def _made_any() -> bool:
    """Whether this trace may hold an inference tensor it made (the call's mode is on, or
    an op was recorded in a region): else the checks have nothing to look at."""
    stack = getattr(_STARTS, "stack", None)
    return bool(stack) and stack[-1][1]


def flag_of(value) -> Optional[bool]:
    """Whether ``value`` is an inference tensor, as eager would say: a traced value's
    recorded kind (False where nothing was recorded: made before any region), a real
    tensor's own; None where unknown."""
    if not isinstance(value, torch.Tensor):
        return False
    node = getattr(value, "_node", None)
    if node is None:
        with torch._C.DisableTorchFunction():
            return bool(value.is_inference())
    return node.attrs.get(KEY, False)


# targets that read or write Python state (a carried number or tensor, a logged list, a
# meter): what they make stands for a Python number or is the object kept, of no mode
_PYTHON_STATE = frozenset(("runtime.carried_numbers", "runtime.carried_tensors",
                           "runtime.appended_lists", "runtime.deferred_calls",
                           "runtime.module_numbers", "runtime.training_attributes"))


def _python_work(func, args, kwargs) -> bool:
    """Whether ``func`` stands for Python work rather than tensor work: a target of
    ``_PYTHON_STATE``, or arithmetic on stand-ins for Python numbers only (``step + 1``
    of a carried count, ``loss.item() * 2``): eager's numbers have no mode."""
    if (getattr(func, "__module__", None) or "") in _PYTHON_STATE:
        return True
    from .introspection import kind_of
    tensors = _tensors(args, kwargs)
    return bool(tensors) and all(getattr(t, "_node", None) is not None and
                                 kind_of(t) is not None for t in tensors)


def answer(t) -> Optional[bool]:
    """``t.is_inference()`` of a traced value; None where a trace cannot say (an
    argument's, or a may-be-view's of a value of the other kind): the caller refuses."""
    node = t._node
    if node.op == "placeholder":
        return None
    return node.attrs.get(KEY, None)


def merge(values) -> Optional[bool]:
    """The kind of a value that is one of ``values`` (a cond's paths, a loop's entry and
    exit): None where they differ."""
    flags = {flag_of(v) for v in values}
    return flags.pop() if len(flags) == 1 else None


def target_for(func, target, args, kwargs, location):
    """What a node of ``func`` recorded now should call: ``target`` (``func`` or its
    autocast form), or its ``InferenceOp`` where the inference mode now is not the call's
    (autograd and optimizer effects refused there)."""
    start = _call_mode()
    if start is None:
        return target
    mode = torch.is_inference_mode_enabled()
    inplace = is_inplace(func, kwargs)
    opaque, _STARTS.opaque = getattr(_STARTS, "opaque", None), None
    if opaque == (func, id(args), id(kwargs)):  # (check: eager's op reads an inference
        return wrapped(target, mode, inplace)   # tensor under autograd without error)
    if mode == start or _python_work(func, args, kwargs):
        return target
    if mode:
        _STARTS.stack[-1][1] = True
    if (getattr(func, "__module__", None) or "") in _EFFECT_MODULES:
        raise _error(location, f"{op_name(func)} in inference mode (torch.inference_mode) "
                     "differing from the call's: eager runs autograd and the optimizer in "
                     "it")
    return wrapped(target, mode, inplace)


def note(node, func, args, kwargs) -> None:
    """Record on ``node`` whether its result is an inference tensor (``KEY``)."""
    if node.meta is None or _call_mode() is None:
        return
    mode = torch.is_inference_mode_enabled()
    if mode and _python_work(func, args, kwargs):
        flag = False
    elif is_inplace(func, kwargs):
        target = kwargs.get("out") if kwargs.get("out") is not None else \
            (args[0] if args else None)
        flag = flag_of(target)
    elif op_name(func) in VIEW_OPS and args and isinstance(args[0], torch.Tensor):
        base = flag_of(args[0])
        flag = mode if base == mode else None   # (reshape, to, contiguous may copy)
    else:
        flag = mode
    node.attrs[KEY] = flag


def _tensors(args, kwargs):
    from torch.utils import _pytree as pytree
    return [v for v in pytree.tree_leaves((args, kwargs)) if isinstance(v, torch.Tensor)]


# ----------------------------------------------------------------------- eager's errors
_NO_HISTORY_VIEWS = frozenset({"detach", "requires_grad_", "data"})


def check(func, args, kwargs, graph, location) -> None:
    """Before recording ``func``: eager's error where its op fails on an inference tensor
    (outside inference mode), and a refusal for a view taken in inference mode of a tensor
    that requires grad (eager's view requires grad with no history: a trace's flags
    would say otherwise)."""
    if _call_mode() is None:
        return
    if not torch.is_inference_mode_enabled():
        if not _made_any():
            return
        _check_outside(func, args, kwargs, is_inplace(func, kwargs), graph, location)
        return
    from . import grad_flags
    if op_name(func) in VIEW_OPS and op_name(func) not in _NO_HISTORY_VIEWS and args and \
            isinstance(args[0], torch.Tensor) and flag_of(args[0]) is not True and \
            grad_flags.grad_of(args[0]) is not False:
        raise _error(location, f"{op_name(func)} in inference mode of a tensor that requires "
                     "grad: eager's view requires grad with no history, which a trace's "
                     "flags do not follow")


def _check_outside(func, args, kwargs, inplace, graph, location) -> None:
    """Outside inference mode: an in-place write to an inference tensor, or an op autograd
    records that reads one, fails in eager as a real op on such tensors shows."""
    tensors = _tensors(args, kwargs)
    flags = [flag_of(t) for t in tensors]
    if True not in flags and None not in flags:
        return
    from . import grad_flags
    if inplace:
        target = kwargs.get("out") if kwargs.get("out") is not None else args[0]
        if flag_of(target) is False:
            inplace = False
    records = torch.is_grad_enabled() and any(grad_flags.grad_of(t) is not False
                                               for t in tensors)
    if not inplace and not records:
        return
    checked, eager = _eager_error(func, args, kwargs, graph)
    if eager is not None:
        eager.add_note(f"{format_location(location)}: {op_name(func)} (found while tracing)")
        eager._tograph_user_error = True
        eager.location = location
        raise eager
    if checked and not inplace:         # eager's op saves no inference tensor: the same
        _STARTS.opaque = (func, id(args), id(kwargs))   # op, recorded opaque (target_for)
        return
    what = "an in-place write to" if inplace else "autograd recording an op on"
    raise _error(location, f"{what} a tensor made in inference mode (torch.inference_mode): "
                 "eager may raise here, and a graph's kernels would not do as eager's op")


def _eager_error(func, args, kwargs, graph) -> Tuple[bool, Optional[Exception]]:
    """(checked, the RuntimeError eager's op raises on real tensors of these shapes, kinds
    and requires_grad flags, or None). Not checked: in a branch or loop body (eager may
    not run it), a size known only at run time, a kind unknown, another failure."""
    if graph.parent is not None:
        return False, None
    from torch.utils import _pytree as pytree
    from . import grad_flags
    checkable = [True]

    def real(v):
        if not isinstance(v, torch.Tensor):
            return v
        node = getattr(v, "_node", None)
        if node is None:
            with torch._C.DisableTorchFunction():
                shape, dtype = tuple(v.shape), v.dtype
        else:
            meta = node.meta
            if meta is None or not getattr(meta, "is_static", False):
                checkable[0] = False
                return v
            shape, dtype = tuple(meta.shape), meta.dtype
        flag, grad = flag_of(v), grad_flags.grad_of(v)
        if flag is None or grad is None:
            checkable[0] = False
            return v
        with torch._C._InferenceMode(flag):
            t = torch.zeros(shape, dtype=dtype)
        return t.requires_grad_() if grad and not flag else t

    with torch._C.DisableTorchFunction():
        real_args, real_kwargs = pytree.tree_map(real, (args, kwargs))
        if not checkable[0]:
            return False, None
        try:
            func(*real_args, **real_kwargs)
        except RuntimeError as e:
            return ("nference" in str(e)), (e if "nference" in str(e) else None)
        except Exception:       # noqa: BLE001 - another failure: not this check's
            return False, None
    return True, None


def _error(location, why: str) -> GraphError:
    error = GraphError(f"{format_location(location)}: {why}")
    error.location = location
    return error
