"""Ops traced while CPU autocast is on: each one runs under autocast when the graph runs.

``torch.autocast("cpu", dtype=...)`` casts an op's inputs inside torch's dispatcher, by
per-op rules (products to the low dtype, losses and reductions to float32, ``cat`` to the
widest) that also reach the ops a composite function calls. A graph cannot apply those
rules itself, so an op recorded while autocast is on (a ``with torch.autocast`` region in
the traced code, or a call made under autocast) becomes a node whose target is an
``AutocastOp``: the original function called inside ``torch.autocast`` with the trace's
autocast dtype. Its result is eager's bit for bit, gradients included (autograd records
the casts as eager's run does).

- **Dtypes at trace time**: autocast does not act on ``meta`` tensors, so the output's
  shape and dtype come from running the op on fake CPU tensors (``FakeTensorMode``) under
  autocast; results are cached by ``shape_inference`` like other ops (keyed on the
  ``AutocastOp``: its function, dtype and cache flag). An op whose inputs only autocast's
  casts reconcile (sdpa of float32 q, k and a bf16 v; a conv of a bf16 input with a
  float32 bias) fails on meta tensors: ``infer`` then takes the ``AutocastOp``'s result.
  Data-dependent sizes (``masked_select``) come out symbolic; ``ctc_loss`` (no fake
  kernel) is inferred in float32, as autocast runs it.
- **Opaque to the optimizer**: the node's op is ``autocast_<name>``, which no rewrite,
  fusion or memory plan knows, so none changes how it computes (a fused C kernel would
  compute in its own dtype). Constant folding calls the target itself, autocast included.
- **Not wrapped**: views and other ops that may return their input (``views.VIEW_OPS``:
  autocast leaves them alone, and the memory planner must see what they alias), in-place
  ops (autocast has no rules for them), the runtime's own targets (``graph_ops``, the
  training effects) and questions that return Python values.

The autocast state is read at each recorded op (the traced ``with`` really switches it,
as ``no_grad`` does), so nested regions, ``enabled=False`` inside a region and
``@torch.autocast`` on a called function follow eager. Only CPU autocast acts on the CPU
tensors a graph holds; its dtype and whether its cast cache is on are part of a call's
signature (``call_mode``, ``tensor_state``).

- **The cast cache**: inside one region eager casts a float32 leaf requiring grad once
  and reuses the cast, so the gradients of its uses sum in the low dtype; a graph's ops
  each run in their own autocast. A parameter's cast by a low-precision op becomes a node
  of its own that the region's later ops share (exact); what cannot share it (a first
  cast in a loop body, an argument leaf, a composite function's second cast) falls back
  while autograd records, naming the line; under the caller's region torch's cache spans
  the graph's ops, as eager's (see below).
- Graphs holding ``AutocastOp`` nodes are not saved (``graph.save``) or exported.
"""
from __future__ import annotations

import threading
from typing import Dict, Tuple

import torch

from . import graph_ops
from .errors import GraphError
from .meta import TensorMeta
from .ops import is_inplace, op_name
from .source_info import format_location
from .views import VIEW_OPS

_WRAPPED: Dict[Tuple, "AutocastOp"] = {}
# ops fake tensors cannot size (``shape_inference._META_RULES``) that CPU autocast runs in
# float32 (its fp32 list): inferred as the op on float32 inputs
_FLOAT32_OPS = {torch.nn.functional.ctc_loss}
_LOCAL = threading.local()


class AutocastOp:
    """``func`` run inside ``torch.autocast("cpu", dtype=dtype, cache_enabled=cache)``
    (what ``autocast.__enter__``/``__exit__`` do, without their Python checks)."""

    __slots__ = ("func", "dtype", "cache", "__name__", "__qualname__", "__weakref__")

    def __init__(self, func, dtype: torch.dtype, cache: bool = True):
        self.func = func
        self.dtype = dtype
        self.cache = cache
        self.__name__ = self.__qualname__ = f"autocast_{op_name(func)}"

    def __call__(self, *args, **kwargs):
        if _any_meta((args, kwargs)):
            return self._infer(args, kwargs)
        on, dtype = torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")
        cache = torch.is_autocast_cache_enabled()
        torch.set_autocast_enabled("cpu", True)
        torch.set_autocast_dtype("cpu", self.dtype)
        torch.autocast_increment_nesting()
        torch.set_autocast_cache_enabled(self.cache)
        try:
            return self.func(*args, **kwargs)
        finally:
            if torch.autocast_decrement_nesting() == 0:
                torch.clear_autocast_cache()
            torch.set_autocast_enabled("cpu", on)
            torch.set_autocast_dtype("cpu", dtype)
            torch.set_autocast_cache_enabled(cache)

    def _infer(self, args, kwargs):
        """The op on fake CPU tensors like the meta ones given, under autocast; meta
        tensors back (shape inference's calling convention)."""
        from torch._subclasses.fake_tensor import (DataDependentOutputException,
                                                   DynamicOutputShapeException)
        if self.func in _FLOAT32_OPS:
            from .shape_inference import infer
            return infer(self.func, *_map((args, kwargs), _as_float32)).example
        mode = _fake_mode()
        with torch._C.DisableTorchFunction():
            with mode:
                fargs, fkwargs = _map((args, kwargs), _fake_of)
            try:
                with mode, torch.autocast("cpu", dtype=self.dtype, cache_enabled=self.cache):
                    out = self.func(*fargs, **fkwargs)
            except (DynamicOutputShapeException, DataDependentOutputException) as e:
                # a size that depends on data (masked_select, nonzero): shape inference
                # runs the op again on fake tensors with symbolic sizes (``_fake_infer``)
                raise NotImplementedError(str(e)) from e
            return _map(out, _meta_of)

    def __repr__(self) -> str:
        return f"<autocast({self.dtype}) {op_name(self.func)}>"

    def __reduce__(self):
        return (wrapped, (self.func, self.dtype, self.cache))


def wrapped(func, dtype: torch.dtype, cache: bool = True) -> AutocastOp:
    """The one ``AutocastOp`` of ``func`` at ``dtype`` and cache flag (one object: CSE
    and the shape cache key on it)."""
    key = (func, dtype, cache)
    op = _WRAPPED.get(key)
    if op is None:
        op = _WRAPPED[key] = AutocastOp(func, dtype, cache)
    return op


_OWN = graph_ops.__name__.rsplit(".", 1)[0] + "."     # the runtime's own node targets


def active_dtype():
    """CPU autocast's dtype while it is on, else None."""
    if not torch.is_autocast_enabled("cpu"):
        return None
    return torch.get_autocast_dtype("cpu")


def call_mode():
    """The autocast part of a call's signature (``tensor_state.call_modes``): the dtype, or
    False when off; with ``"uncached"`` when autocast's cast cache is disabled (by the
    caller's ``cache_enabled=False``: its region's casts then do not span the graph's ops,
    and regions inside inherit the flag)."""
    dtype = active_dtype() or False
    return dtype if torch.is_autocast_cache_enabled() else (dtype, "uncached")


def target_for(func, args, kwargs, meta):
    """What a node recorded now should call: ``func`` itself, or its ``AutocastOp`` when
    CPU autocast is on and ``func`` is an op it may change (``meta``: the output's
    metadata without autocast; None for a Python answer)."""
    dtype = active_dtype()
    if dtype is None:
        _left_region()
        return func
    if meta is None or not _wraps(func, kwargs):
        return func
    return wrapped(func, dtype, torch.is_autocast_cache_enabled())


def _wraps(func, kwargs) -> bool:
    """Whether autocast may change what ``func`` computes (see the module's docstring)."""
    return not (isinstance(func, AutocastOp) or
                (getattr(func, "__module__", None) or "").startswith(_OWN) or
                op_name(func) in VIEW_OPS or is_inplace(func, kwargs))


def infer(func, args, kwargs):
    """``shape_inference.infer`` of an op about to be recorded. Under autocast, an op whose
    inputs only autocast's casts reconcile (``sdpa`` of float32 query and key and a bf16
    value, a conv of a bf16 input with a float32 bias) fails on meta tensors, which
    autocast leaves alone: then its ``AutocastOp``'s result (``Casting``), else the
    op's own error."""
    from .shape_inference import infer as infer_op
    try:
        return infer_op(func, args, kwargs)
    except Exception as error:
        dtype = active_dtype()
        if dtype is None or not _wraps(func, kwargs):
            raise
        try:
            result = infer_op(wrapped(func, dtype, torch.is_autocast_cache_enabled()),
                              args, kwargs)
        except Exception:  # noqa: BLE001 - the op's own error is the one to report
            raise error from None
        return Casting(result)


class Casting:
    """The result autocast gives an op that fails without autocast's casts."""

    __slots__ = ("inferred",)

    def __init__(self, inferred):
        self.inferred = inferred

    @property
    def meta(self):
        return self.inferred.meta

    @property
    def example(self):
        return self.inferred.example


def recorded(func, args, kwargs, result, location):
    """(target, inferred result, arguments) of a node about to be recorded: ``func`` and
    ``result`` as they are, or under autocast its ``AutocastOp`` and the result autocast
    gives; the arguments are None, or ``(args, kwargs)`` with a parameter replaced by its
    cast that autocast's cache shares (see below)."""
    target = target_for(func, args, kwargs, result.meta)
    if target is func:
        return func, result, None
    if isinstance(result, Casting):         # (autocast's result already: ``infer``)
        shared = _note_casts(func, args, kwargs, location) \
            if _cast_low(args, kwargs, result.meta) else None
        return target, result.inferred, shared
    from .shape_inference import infer
    try:
        inferred = infer(target, args, kwargs)
    except Exception as e:
        error = GraphError(f"{format_location(location)}: {op_name(func)} under "
                           f"torch.autocast: the result's dtype and shape could not be "
                           f"inferred ({type(e).__name__}: {e})")
        error.location = location
        raise error from e
    if not _consistent(result.meta, inferred.meta):
        error = GraphError(f"{format_location(location)}: {op_name(func)} under "
                           f"torch.autocast: the result's dtype and shape could not be "
                           f"inferred (on fake tensors it gives other shapes or integer "
                           f"dtypes: {inferred.meta} for {result.meta})")
        error.location = location
        raise error
    shared = _note_casts(func, args, kwargs, location) \
        if _lowered(result.meta, inferred.meta) else None
    return target, inferred, shared


def _consistent(plain, autocast) -> bool:
    """Whether autocast's inferred result differs from the plain one only as autocast can:
    floating dtypes (a fake kernel that guesses data-dependent sizes would differ more)."""
    plains = plain if isinstance(plain, tuple) else (plain,)
    casts = autocast if isinstance(autocast, tuple) else (autocast,)
    if len(plains) != len(casts):
        return False
    for a, b in zip(plains, casts):
        if not isinstance(a, TensorMeta) or not isinstance(b, TensorMeta):
            if type(a) is not type(b):
                return False
            continue
        if a.shape is not None and b.shape is not None and (
                len(a.shape) != len(b.shape) or
                any(x != y for x, y in zip(a.shape, b.shape) if x is not None and y is not None)):
            return False
        if a.dtype != b.dtype and not (a.dtype.is_floating_point and b.dtype.is_floating_point):
            return False
    return True


# ----------------------------------------------------------------------- the cast cache
# Inside an autocast region eager casts a float32 leaf that requires grad (a parameter)
# once and reuses the cast for every op of the region (autocast's cache, cleared when the
# outermost region exits): the gradients of its uses are summed in the low dtype. A graph
# runs each op in its own autocast, so each use would cast anew and sum the gradients in
# float32 -- other bits. So the first op of a region that casts a parameter (a real leaf
# tensor, not an argument) to the low dtype, where that op is one of autocast's
# low-precision ops (``_CASTS_ALL``: it casts every floating input, nothing else), is given
# the cast as a node of its own (``p.to(dtype)``: autocast's ``cached_cast`` is that call),
# and later ops of the region take the same node, in the graph of the first or in one
# nested in it (a loop body reusing the cast made before the loop, as eager's cache does).
# A leaf cast first in a loop body, cast again by another op (a composite function, a
# branch's cast used after the branch), or an argument leaf cast twice is refused while
# autograd records, naming the line. A region the caller opened around the call keeps
# torch's own cache across the ops, as eager's.
_F = torch.nn.functional
_CASTS_ALL = frozenset({
    _F.linear, _F.conv1d, _F.conv2d, _F.conv3d, _F.conv_transpose1d, _F.conv_transpose2d,
    _F.conv_transpose3d, _F.scaled_dot_product_attention,
    torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.mm, torch.Tensor.mm,
    torch.bmm, torch.Tensor.bmm, torch.addmm, torch.Tensor.addmm, torch.baddbmm,
    torch.Tensor.baddbmm, torch.addbmm, torch.Tensor.addbmm, torch.conv1d, torch.conv2d,
    torch.conv3d})
_STARTS = threading.local()


def trace_started(on: bool) -> None:
    """Around a trace (``tensor_state.watching_modes``): push (``on``) or pop the autocast
    nesting the caller holds."""
    stack = _STARTS.__dict__.setdefault("stack", [])
    if on:
        stack.append(_nesting())
    elif stack:
        stack.pop()


def _nesting() -> int:
    depth = torch.autocast_increment_nesting()
    torch.autocast_decrement_nesting()
    return depth - 1


def _left_region() -> None:
    """An op recorded with autocast off: if no region is open (nesting 0), the next op
    under autocast starts a new one (eager's cache was cleared in between)."""
    stack = getattr(_STARTS, "stack", None)
    if not stack or stack[-1] > 0:
        return
    from .symbolic import current_graph
    graph = current_graph()
    if graph is not None and "_autocast_region" in graph.root.__dict__ and _nesting() == 0:
        epoch, _ = graph.root._autocast_region
        graph.root._autocast_region = (epoch, 0)


def _lowered(plain, autocast) -> bool:
    """Whether autocast made a float32 result low precision (the op cast its inputs)."""
    plains = plain if isinstance(plain, tuple) else (plain,)
    casts = autocast if isinstance(autocast, tuple) else (autocast,)
    return any(getattr(a, "dtype", None) == torch.float32 and
               getattr(b, "dtype", None) in (torch.bfloat16, torch.float16)
               for a, b in zip(plains, casts))


def _cast_low(args, kwargs, meta) -> bool:
    """For an op that fails without autocast: whether autocast may have cast a float32
    input to the low dtype (a low-precision result and a float32 input; may say yes where
    it did not, which costs a refusal of a second cast, never a fault)."""
    from .graph import find_leaves
    metas = meta if isinstance(meta, tuple) else (meta,)
    if not any(getattr(m, "dtype", None) in (torch.bfloat16, torch.float16) for m in metas):
        return False
    with torch._C.DisableTorchFunction():
        return any(t.dtype == torch.float32 for t in
                   find_leaves((args, kwargs), lambda v: isinstance(v, torch.Tensor)))


def _note_casts(func, args, kwargs, location):
    """Note the parameters an op of a region casts to the low dtype; None, or the op's
    ``(args, kwargs)`` with them replaced by the region's one cast of each."""
    from . import tensor_state
    from .graph import find_leaves
    from .symbolic import current_graph
    stack = getattr(_STARTS, "stack", None)
    graph = current_graph()
    if not stack or stack[-1] > 0 or graph is None or not torch.is_grad_enabled() or \
            not torch.is_autocast_cache_enabled():
        return None
    root = graph.root
    nesting = _nesting()
    region = root.__dict__.get("_autocast_region", (0, 0))
    if nesting > 0 and region[1] == 0:
        region = (region[0] + 1, nesting)
    root._autocast_region = (region[0], nesting)
    casts = root.__dict__.setdefault("_autocast_casts", {})
    repeated = _in_loop(graph)
    shares = func in _CASTS_ALL
    seen, shared = set(), {}    # (one op's two uses of a leaf share its cast, as eager's)
    for t in find_leaves((args, kwargs), lambda v: isinstance(v, torch.Tensor)):
        node = getattr(t, "_node", None)
        key = (region[0], id(t) if node is None else id(node))
        if key in seen or not _cacheable(t, tensor_state):
            continue
        seen.add(key)
        first = casts.get(key)
        if first is None and shares and node is None and not repeated:
            first = casts[key] = (location, t, _cast_node(t), graph)  # (t kept: its id)
        elif first is None and not repeated:
            casts[key] = (location, t, None, graph)
            continue
        if first is None or first[2] is None or not shares or not _within(graph, first[3]) \
                or first[2].dtype != torch.get_autocast_dtype("cpu"):
            error = GraphError(
                f"{format_location(location)}: a float32 leaf that requires grad is cast "
                f"by torch.autocast {'in a loop body' if first is None else 'a second time in one region'}"
                f" (first at {format_location((first or (location,))[0])}): eager "
                f"reuses one cached cast, whose gradients sum in the low dtype, where a "
                f"graph casts per op")
            error.location = location
            raise error
        shared[id(t)] = first[2]
    if not shared:
        return None
    return _map((args, kwargs), lambda v: shared.get(id(v), v))


def _cast_node(t):
    """``t.to(dtype)`` recorded as a node: autocast's cached cast of a parameter."""
    from . import inference_warnings
    from .symbolic import dispatch_record
    noted = inference_warnings.noted()      # (the op being recorded keeps its own note)
    cast = dispatch_record(torch.Tensor.to, (t, torch.get_autocast_dtype("cpu")), {})
    if noted:
        inference_warnings.note()
    return cast


def _within(graph, outer) -> bool:
    """Whether ``graph`` is ``outer`` or nested in it."""
    while graph is not None:
        if graph is outer:
            return True
        graph = graph.parent
    return False


def _cacheable(t, tensor_state) -> bool:
    """Whether autocast's cache would hold ``t``'s cast: a float32 leaf requiring grad
    (a traced value whose flags only the run knows counts as one)."""
    from .grad_flags import grad_of
    with torch._C.DisableTorchFunction():
        if t.dtype != torch.float32:
            return False
        if getattr(t, "_node", None) is None:
            return t.requires_grad and t.is_leaf and not t._is_view()
    return grad_of(t) is not False and tensor_state.leaf_of(t) is not False


def _in_loop(graph) -> bool:
    while graph is not None and graph.parent is not None:
        if graph.name not in ("then", "else"):
            return True
        graph = graph.parent
    return False


# ----------------------------------------------------------------------- fake tensors
def _fake_mode():
    mode = getattr(_LOCAL, "mode", None)
    if mode is None:
        from torch._subclasses.fake_tensor import FakeTensorMode
        mode = _LOCAL.mode = FakeTensorMode(allow_non_fake_inputs=False)
    return mode


def _any_meta(value) -> bool:
    if isinstance(value, torch.Tensor):
        return value.is_meta
    if isinstance(value, (tuple, list)):
        return any(_any_meta(v) for v in value)
    if isinstance(value, dict):
        return any(_any_meta(v) for v in value.values())
    return False


def _fake_of(t: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device="cpu")


def _meta_of(t: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype,
                               device="meta")


def _as_float32(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.float32) if t.is_floating_point() else t


def _map(value, fn):
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, tuple):
        items = [_map(v, fn) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else \
            (tuple(items) if type(value) is tuple else type(value)(items))
    if isinstance(value, list):
        return [_map(v, fn) for v in value]
    if isinstance(value, dict):
        return {k: _map(v, fn) for k, v in value.items()}
    return value
