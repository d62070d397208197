"""A fused kernel under autograd: one ``torch.autograd.Function`` node per call.

Generic part (any fused kernel: elementwise here, row kernels may reuse it)::

    recipe = Recipe(run, saved, differentiable, backward, replay)
    outputs = apply(recipe, xs)      # a tensor, or a tuple when ``run`` returns one

- ``run(*xs)``: the forward (the C kernel), called with grad mode off.
- ``saved``: indices of ``xs`` the backward reads (saved with ``save_for_backward``, so an
  in-place change of one before ``backward()`` raises as in eager).
- ``differentiable``: per output, whether it carries a gradient (others are marked
  non-differentiable: ``requires_grad`` False, as eager gives for a comparison or a
  ``where`` whose branches need no gradient).
- ``backward(saved)``: ``saved`` is a ``Saved`` (inputs at their positions, None for
  those not saved; every input's shape and dtype; the incoming gradients, zeros for unused
  outputs; ``needs`` per input); returns per input its gradient (shaped and typed like the
  input) or None, or returns None as a whole to have ``replay`` serve this call.
- ``replay(*xs)``: the group's torch ops (a tuple of outputs). Used for double backward
  (``create_graph=True``: the backward then runs these ops under autograd, so higher
  derivatives are eager's) and when ``backward`` cannot run (its kernel failed to build).
  Inputs that were not saved are passed as zeros (the first-order gradients do not read
  them; second-order terms through them are zero).

Elementwise part: ``elementwise_call(kernel, xs)`` for a ``FusedKernel`` whose backward
``pointwise_backward.plan`` can write; None when it cannot (the caller runs torch ops).
Backward kernels are built lazily, at the first backward that needs one, all those pending
in one translation unit (one compiler run; cached on disk like the forward kernels).
"""
from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

from .. import logs
from . import codegen, compiler, rows
from .pointwise_backward import MACROS, BackwardPlan, plan as backward_plan
from .planned_node import Planned, to_input_shape


@dataclass(frozen=True)
class Recipe:
    run: Callable
    saved: Tuple[int, ...]
    differentiable: Tuple[bool, ...]
    backward: Callable
    replay: Callable


@dataclass
class Saved:
    inputs: List[Optional[torch.Tensor]]
    shapes: List[torch.Size]
    dtypes: List[torch.dtype]
    grads: List[torch.Tensor]
    needs: Tuple[bool, ...]


class _FusedNode(torch.autograd.Function):
    @staticmethod
    def forward(ctx, recipe: Recipe, *xs):
        out = recipe.run(*xs)
        outs = out if isinstance(out, tuple) else (out,)
        ctx.recipe = recipe
        ctx.meta = ([x.shape for x in xs], [x.dtype for x in xs])
        ctx.save_for_backward(*[xs[i] for i in recipe.saved])
        fixed = [o for o, d in zip(outs, recipe.differentiable) if not d]
        if fixed:
            ctx.mark_non_differentiable(*fixed)
        return out

    @staticmethod
    def backward(ctx, *grads):
        recipe: Recipe = ctx.recipe
        shapes, dtypes = ctx.meta
        inputs: List[Optional[torch.Tensor]] = [None] * len(shapes)
        for i, x in zip(recipe.saved, ctx.saved_tensors):
            inputs[i] = x
        saved = Saved(inputs, shapes, dtypes, list(grads), tuple(ctx.needs_input_grad[1:]))
        result = None if torch.is_grad_enabled() else recipe.backward(saved)
        if result is None:
            result = _replay(recipe, saved)
        return (None,) + tuple(result)


def apply(recipe: Recipe, xs: Sequence[torch.Tensor]):
    """Run ``recipe`` on ``xs`` as one autograd node."""
    return _FusedNode.apply(recipe, *xs)


def _replay(recipe: Recipe, saved: Saved) -> List[Optional[torch.Tensor]]:
    """The gradients by the group's torch ops under autograd (double backward, or a
    backward kernel that could not be built)."""
    with torch.enable_grad():
        xs = [x if x is not None else
              torch.zeros(s, dtype=dt).requires_grad_(need and dt.is_floating_point)
              for x, s, dt, need in zip(saved.inputs, saved.shapes, saved.dtypes, saved.needs)]
        outs = recipe.replay(*xs)
        outs = outs if isinstance(outs, tuple) else (outs,)
        pairs = [(o, g) for o, g, d in zip(outs, saved.grads, recipe.differentiable)
                 if d and o.requires_grad]
        wanted = [i for i, need in enumerate(saved.needs) if need]
        if not pairs or not wanted:
            return [None] * len(xs)
        got = torch.autograd.grad([o for o, _ in pairs], [xs[i] for i in wanted],
                                  [g for _, g in pairs], allow_unused=True,
                                  create_graph=torch.is_grad_enabled())
    result: List[Optional[torch.Tensor]] = [None] * len(xs)
    for i, g in zip(wanted, got):
        result[i] = g
    return result


# ----------------------------------------------------------------------- elementwise
def elementwise_call(kernel, xs: Sequence[torch.Tensor]):
    """``kernel(*xs)`` as one autograd node with a generated backward kernel, or None
    when its backward cannot be generated (a step without a derivative rule, a row or
    gemm kernel) or under torch.func transforms (grad, vmap, jvp: they need an autograd
    Function with setup_context and vmap rules; the torch ops serve them)."""
    if torch._C._are_functorch_transforms_active():
        return None
    needs = tuple(x.requires_grad for x in xs)
    recipes: Dict[tuple, Optional[Recipe]] = kernel.__dict__.setdefault("_recipes", {})
    recipe = recipes.get(needs, False)
    if recipe is False:
        recipe = recipes[needs] = _elementwise_recipe(kernel, needs)
        if recipe is not None and Planned.fits(kernel, recipe):   # static shapes: the
            recipe = recipes[needs] = Planned(kernel, recipe, xs)  # per-call work done once
    if type(recipe) is Planned:
        result = recipe(xs)
        if result is not None:
            return result
        recipe = recipe.recipe
    return None if recipe is None else _FusedNode.apply(recipe, *xs)


def _elementwise_recipe(kernel, needs) -> Optional[Recipe]:
    if kernel.spec.gemm:        # a product first: its torch ops (a node measured slower:
        return None             # 0.63-0.66x eager against 0.84-0.90x, fwd+bwd, 1 thread)
    if kernel.spec.rows:                  # a row program: rows_backward (row kernels)
        from .rows_backward import plan as rows_plan
        plan = rows_plan(kernel.spec, needs, kernel._row_shape == ())
    else:
        plan = backward_plan(kernel.spec, needs)
    if plan is None:
        return None
    if plan.kernel is not None:
        _Built.want(plan.kernel)
    # the general call, not the launcher: a large launcher output is recycled once no
    # Python reference holds it, which would overwrite it under a later op's saved copy
    return Recipe(kernel.__call__, plan.saved, plan.differentiable,
                  _ElementwiseBackward(kernel, plan), kernel.torch_fn)


class _ElementwiseBackward:
    def __init__(self, kernel, plan: BackwardPlan):
        self.kernel, self.plan = kernel, plan
        self.dtype = {"float32": torch.float32, "float64": torch.float64}[kernel.spec.dtype]
        self.parallel_min = max(4096, 262144 // max(1, plan.kernel.cost())) \
            if plan.kernel is not None else 0
        self.fn: Optional[Callable] = None     # the built kernel, once found (a spec's
        #                                        hash walks all its steps: ~30 us a call)

    def __call__(self, saved: Saved) -> Optional[List[Optional[torch.Tensor]]]:
        plan, kernel = self.plan, self.kernel
        shape = torch.Size(kernel._out_shape) if kernel._out_shape is not None else \
            _space(saved.shapes)
        outs: List[torch.Tensor] = []
        if plan.kernel is not None:
            fn = self.fn = self.fn or _Built.function(plan.kernel)
            if fn is None:
                return None
            keep = []
            for i in plan.saved:
                x = saved.inputs[i]
                if kernel._in_shapes[i] is None and x.shape != shape:   # a dynamic size
                    x = x.expand(shape)
                keep.append(x.contiguous())
            keep += [saved.grads[o].contiguous() for o in plan.grads]
            outs = [torch.empty(kernel._row_shape if row else shape, dtype=self.dtype)
                    for row in plan.kernel.output_rows]      # (row: a per-row input's)
            outer, inner = _sizes(shape, kernel._split)
            fn(*[t.data_ptr() for t in keep], *[o.data_ptr() for o in outs], outer, inner,
               torch.get_num_threads(), self.parallel_min)
        result: List[Optional[torch.Tensor]] = []
        for i, source in enumerate(plan.sources):
            if source is None:
                result.append(None)
                continue
            g = outs[source[1]] if source[0] == "k" else saved.grads[source[1]]
            if g.shape != saved.shapes[i]:
                g = to_input_shape(g, saved.shapes[i])        # a broadcast input
            result.append(g.to(saved.dtypes[i]))
        return result


def _space(shapes) -> torch.Size:
    from .launch import broadcast_shape
    return torch.Size(broadcast_shape(shapes))


def _sizes(shape, split: int):
    outer = 1
    for d in shape[:split]:
        outer *= d
    inner = 1
    for d in shape[split:]:
        inner *= d
    return outer, inner


class _Built:
    """Backward kernels by spec: built in batches (every spec wanted so far and not yet
    built, one compiler run), bound on first use; None for a spec whose build failed."""

    _lock = threading.Lock()
    _functions: Dict[codegen.KernelSpec, Optional[Callable]] = {}
    _pending: Dict[codegen.KernelSpec, None] = {}

    @classmethod
    def want(cls, spec) -> None:
        with cls._lock:
            if spec not in cls._functions:
                cls._pending[spec] = None

    @classmethod
    def function(cls, spec) -> Optional[Callable]:
        fn = cls._functions.get(spec, False)
        if fn is not False:
            return fn
        with cls._lock:
            if spec not in cls._functions:
                cls._pending[spec] = None
                batch = list(cls._pending)
                cls._pending.clear()
                cls._functions.update(zip(batch, _build(batch)))
            return cls._functions[spec]


def _build(specs: List[codegen.KernelSpec]) -> List[Optional[Callable]]:
    from .library import vector_math
    names = [f"tg_backward_{k}" for k in range(len(specs))]
    head = "#include <omp.h>\n" if compiler.OPENMP else ""
    source = head + codegen.prelude(vector_math()) + MACROS + "\n" + "\n".join(
        (rows.function if spec.rows else codegen.function)(spec, name, compiler.OPENMP)
        for spec, name in zip(specs, names))
    try:
        library = compiler.build(source, name="graph_backward")
    except compiler.KernelBuildError as e:
        logs.kernels.info("%d backward kernel(s) replay torch ops: %s", len(specs), e)
        return [None] * len(specs)
    fns = []
    for spec, name in zip(specs, names):
        fn = getattr(library, name)
        n = len(spec.inputs) + len(spec.outputs)
        fn.argtypes = [ctypes.c_void_p] * n + [ctypes.c_int64, ctypes.c_int64, ctypes.c_int,
                                               ctypes.c_int64]
        fn.restype = None
        fns.append(fn)
    _LIBRARIES.append(library)           # keep the shared object loaded
    return fns


_LIBRARIES: List[ctypes.CDLL] = []
