"""Calling a fused kernel: the C function when it is built and usable, else torch ops.

``FusedKernel(*tensors)`` returns the group's output (a tuple when it has several). It runs
the same group as plain torch ops (``torch_fn``, lowered from the group's own nodes) when no
compiled kernel is bound (no compiler, ``TOGRAPH_NO_COMPILER``, a failed build). When
autograd needs the graph (grad mode on and an input requires grad) the group runs as one
autograd node (``autograd_node``): the same C kernel forward, a generated C backward
(``pointwise_backward``); groups whose backward cannot be generated (an op without a
derivative rule, a row or gemm kernel) run as torch ops. Tensors on another device (a
graph traced for CUDA inputs) take the torch path too: the C kernels read CPU memory only.

The C path checks each input's shape against the one the kernel was specialized for and
takes contiguous inputs only (a non-contiguous one, such as a transposed view, runs the
torch ops, whose result has the layout eager gives it; the C kernel's is contiguous); an
input whose shape is only known at run time (a dynamic dimension) is broadcast to the
result and copied, so a kernel is never fed memory it does not expect.
"""
from __future__ import annotations

import ctypes
import math
import sys
from typing import Callable, List, Optional, Sequence

import torch

from .codegen import KernelSpec

DTYPES = {"float32": torch.float32, "float64": torch.float64, "bool": torch.bool}
LARGE_BYTES = 4 << 20      # outputs this large are recycled between calls (``_Recycler``)


class FusedKernel:
    """One fused elementwise group, callable on its input tensors."""

    building = False        # its library compiles in the background (kernels.background)

    def __init__(self, spec: KernelSpec, name: str, torch_fn: Callable,
                 in_shapes: Sequence[Optional[tuple]], shape: Optional[tuple],
                 split: int, ops: Sequence[str], row_shape: Optional[tuple] = None):
        self.spec = spec
        self.name = name
        self.torch_fn = torch_fn
        self.ops = list(ops)                 # the fused op names, for listings
        self.source: Optional[str] = None    # the C translation unit it was built in
        self._in_shapes = [tuple(s) if s is not None else None for s in in_shapes]
        self._out_shape = shape              # iteration space; None: known only at run time
        self._split = split                  # outer = prod(shape[:split])
        self._row_outputs = spec.output_rows  # per-row outputs have shape row_shape
        self._row_shape = row_shape
        self._out_dtypes = [DTYPES[dt] for _, dt in spec.outputs]
        self._single = len(spec.outputs) == 1
        # only bool (or integer) results: autograd has nothing to record (a loop test), so
        # the C path serves it even when an input requires grad
        self._differentiable = any(dt.is_floating_point for dt in self._out_dtypes)
        self._c = None
        self._test_c = None                     # name_test: the one bool, returned
        self._fast: Optional[Callable] = None   # the generated launcher, made on first use
        self._predicate: Optional[Callable] = None
        self._parallel_min = max(4096, 262144 // max(1, spec.cost()))
        # a max/min over an empty row is an error in eager (no identity): such a call runs
        # the torch ops, which raise it, where the C loop would give -inf/inf
        self._empty_raises = any(step.reduce in ("amax", "amin") for step in spec.steps)
        self.__name__ = name

    # ---------------------------------------------------------------- binding
    def bind(self, library: ctypes.CDLL, source: str) -> None:
        fn = getattr(library, self.name)
        n = len(self.spec.inputs) + len(self.spec.outputs)
        fn.argtypes = [ctypes.c_void_p] * n + [ctypes.c_int64, ctypes.c_int64, ctypes.c_int,
                                               ctypes.c_int64]
        fn.restype = None
        test = getattr(library, self.name + "_test", None) if self._single and \
            self._out_dtypes[0] == torch.bool else None
        if test is not None:
            test.argtypes = fn.argtypes[:len(self.spec.inputs)] + fn.argtypes[n:]
            test.restype = ctypes.c_int
        self._test_c = test
        self._library = library              # keep the shared object loaded
        self.source = source
        self._c = fn        # last: bound by a background build while other threads call

    @property
    def compiled(self) -> bool:
        return self._c is not None

    def _launchable(self) -> bool:
        """Compiled, over static shapes: a generated launcher can serve it."""
        return self._c is not None and self._out_shape is not None and \
            None not in self._in_shapes and not self._empty_rows(self._out_shape)

    def _empty_rows(self, shape) -> bool:
        """A max/min reduction over rows of no elements (eager raises; see __init__)."""
        return self._empty_raises and _sizes(shape, self._split)[1] == 0

    @property
    def launcher(self) -> Callable:
        """The function the executor calls: for a compiled kernel over static shapes, a
        generated one with the checks unrolled and the sizes baked in (a call costs about
        one ctypes call); otherwise the general ``__call__``."""
        if not self._launchable():
            return self
        if self._fast is None:
            self._fast = _generate_launcher(self)
        return self._fast

    @property
    def predicate(self) -> Optional[Callable]:
        """For a launchable kernel whose one output is a single bool (a loop test): a
        generated function returning it as a Python bool (no tensor made, no ``bool()``
        of one); None otherwise. Its slow path is ``bool()`` of the general call."""
        if not self._launchable() or self._test_c is None or not self._single:
            return None
        shape = self._row_shape if self._row_outputs[0] else self._out_shape
        if math.prod(shape) != 1:
            return None
        if self._predicate is None:
            self._predicate = _generate_launcher(self, predicate=True)
        return self._predicate

    def share_launcher(self, launchers: dict) -> None:
        """Use the launcher of an equal kernel in ``launchers`` (same C function and
        shapes: one generated function serves every step of an unrolled loop), else
        make one and offer it."""
        if not self._launchable():
            return
        key = (self.name, tuple(self._in_shapes), self._out_shape, self._split,
               self._row_shape)
        if key not in launchers:
            launchers[key] = self.launcher
        self._fast = launchers[key]

    # ---------------------------------------------------------------- calling
    def __call__(self, *xs, out=None):
        plain = self._c is not None and all(x.is_cpu and x.is_contiguous() for x in xs)
        if plain and self._empty_raises:
            plain = not self._empty_rows(self._out_shape if self._out_shape is not None else
                                         broadcast_shape([x.shape for x in xs]))
        if not plain or (self._differentiable and torch.is_grad_enabled() and
                         any(x.requires_grad for x in xs)):
            # no kernel, another device, autograd, or an input whose layout eager's result
            # would follow (a transposed view): torch ops give eager's strides; under
            # autograd, one node with a generated backward kernel where it can be written
            if plain:                       # (so autograd records)
                result = _autograd_call(self, xs)
                if result is not None:
                    return result
            result = self.torch_fn(*xs)
            return result[0] if self._single else result
        shape = self._out_shape
        if shape is None:       # (a run-time size: a growing loop's state)
            shape = broadcast_shape([x.shape for x in xs])
        keep: List[torch.Tensor] = []
        ptrs = []
        for x, want in zip(xs, self._in_shapes):
            if want is None:
                if x.shape != shape:
                    x = x.expand(shape)
            elif x.shape != want:
                raise RuntimeError(f"fused kernel {self.name} was built for an input of shape "
                                   f"{list(want)}, got {list(x.shape)}")
            if not x.is_contiguous():
                x = x.contiguous()
            keep.append(x)
            ptrs.append(x.data_ptr())
        shapes = [self._row_shape if row else shape for row in self._row_outputs]
        if out is not None and self._single and out.shape == shapes[0] and \
                out.dtype == self._out_dtypes[0] and out.is_contiguous():
            outs = [out]
        else:
            outs = [torch.empty(s, dtype=dt) for s, dt in zip(shapes, self._out_dtypes)]
        outer, inner = _sizes(shape, self._split)
        self._c(*ptrs, *[o.data_ptr() for o in outs], outer, inner,
                torch.get_num_threads(), self._parallel_min)
        return outs[0] if self._single else tuple(outs)

    def __repr__(self) -> str:
        how = "C" if self._c is not None else "torch"
        return f"<fused {self.name} ({how}): {' -> '.join(self.ops)}>"


def _autograd_call(kernel: FusedKernel, xs):
    """``autograd_node.elementwise_call``, imported at the first call (it imports this
    module), then bound in its place: an import statement per call cost several us."""
    global _autograd_call
    from .autograd_node import elementwise_call
    _autograd_call = elementwise_call
    return elementwise_call(kernel, xs)


def broadcast_shape(shapes) -> tuple:
    """``torch.broadcast_shapes`` for concrete sizes, in a few microseconds (torch's goes
    through its symbolic-shape reference, ~0.4 ms a call: a third of a decoding step)."""
    first = tuple(shapes[0])
    if all(tuple(s) == first for s in shapes):
        return first
    ndim = max(len(s) for s in shapes)
    out = [1] * ndim
    for s in shapes:
        for i, d in enumerate(s, ndim - len(s)):
            if d != 1:
                if out[i] != 1 and out[i] != d:
                    return tuple(torch.broadcast_shapes(*shapes))   # torch's own error
                out[i] = d
    return tuple(out)


def _storage_users(t: torch.Tensor) -> int:
    return torch._C._storage_Use_Count(t.untyped_storage()._cdata)


class _Recycler:
    """The last large output of a launcher, kept to be written again by the next call once
    the caller has let go of it: no Python reference besides ours and no other tensor,
    view or array on its storage. It saves a fresh allocation and its page faults (as a
    caching allocator would); a caller still holding the result never sees it change."""

    def __init__(self, shape, dtype):
        self.shape, self.dtype, self.spare = shape, dtype, None

    def take(self) -> torch.Tensor:
        spare, self.spare = self.spare, None
        # references: ``spare`` and getrefcount's argument; storage: the tensor and the
        # storage object ``untyped_storage()`` returns
        if spare is not None and sys.getrefcount(spare) == 2 and _storage_users(spare) == 2:
            return spare
        return torch.empty(self.shape, dtype=self.dtype)


def _sizes(shape, split: int):
    """(outer, inner): the iteration space ``shape`` seen as a matrix split at ``split``."""
    return math.prod(shape[:split]), math.prod(shape[split:])


def _generate_launcher(kernel: FusedKernel, predicate: bool = False) -> Callable:
    n = len(kernel.spec.inputs)
    xs = [f"x{k}" for k in range(n)]
    shape = kernel._out_shape
    out_shape = kernel._row_shape if kernel._row_outputs[0] else tuple(shape)
    outer, inner = _sizes(shape, kernel._split)
    large = math.prod(out_shape) * kernel._out_dtypes[0].itemsize >= LARGE_BYTES
    recycler = _Recycler(out_shape, kernel._out_dtypes[0])
    env = {"_grad": torch.is_grad_enabled, "_slow": kernel.__call__, "_c": kernel._c,
           "_test": kernel._test_c,
           "_empty": torch.empty, "_dtype": kernel._out_dtypes[0], "_nt": torch.get_num_threads,
           "_oshape": out_shape, "_rec": recycler}
    checks = []
    for k, want in enumerate(kernel._in_shapes):
        env[f"_s{k}"] = torch.Size(want)
        checks.append(f"x{k}.shape != _s{k} or not x{k}.is_contiguous() or not x{k}.is_cpu")
    grads = " or ".join(f"{x}.requires_grad" for x in xs) if kernel._differentiable else ""
    grads = grads or "False"
    ptrs = "".join(f"{x}.data_ptr(), " for x in xs)
    guard = f"    if ({grads}) and _grad() or {' or '.join(checks) or 'False'}:"
    if not kernel._single:
        return _generate_multi_launcher(kernel, env, xs, guard, ptrs, outer, inner)
    if predicate:
        source = "\n".join([
            f"def test({', '.join(xs)}):", guard,
            f"        return bool(_slow({', '.join(xs)}))",
            f"    return _test({ptrs}{outer}, {inner}, _nt(), {kernel._parallel_min}) != 0"])
        exec(compile(source, f"<tograph-test-{kernel.name}>", "exec"), env)  # noqa: S102
        return env["test"]
    source = "\n".join([
        f"def launch({', '.join(xs + ['out=None'])}):",
        guard,
        f"        return _slow({', '.join(xs)}, out=out)",
        "    if out is None or out.shape != _oshape or out.dtype != _dtype or "
        "not out.is_contiguous():",
        "        out = _rec.spare = _rec.take()" if large
        else "        out = _empty(_oshape, dtype=_dtype)",
        f"    _c({ptrs}out.data_ptr(), {outer}, {inner}, _nt(), {kernel._parallel_min})",
        "    return out",
    ])
    exec(compile(source, f"<tograph-launch-{kernel.name}>", "exec"), env)  # noqa: S102
    return env["launch"]


def _generate_multi_launcher(kernel: FusedKernel, env: dict, xs, guard: str, ptrs: str,
                             outer: int, inner: int) -> Callable:
    """The launcher of a kernel with several outputs (a residual add and the norm of its
    sum): each output allocated, one C call, the tuple returned."""
    outs = []
    for k, (row, dtype) in enumerate(zip(kernel._row_outputs, kernel._out_dtypes)):
        env[f"_oshape{k}"] = kernel._row_shape if row else tuple(kernel._out_shape)
        env[f"_dtype{k}"] = dtype
        outs.append(f"o{k}")
    source = "\n".join([
        f"def launch({', '.join(xs)}):",
        guard,
        f"        return _slow({', '.join(xs)})",
        *[f"    o{k} = _empty(_oshape{k}, dtype=_dtype{k})" for k in range(len(outs))],
        f"    _c({ptrs}{''.join(o + '.data_ptr(), ' for o in outs)}{outer}, {inner}, _nt(), "
        f"{kernel._parallel_min})",
        f"    return ({', '.join(outs)},)",
    ])
    exec(compile(source, f"<tograph-launch-{kernel.name}>", "exec"), env)  # noqa: S102
    return env["launch"]
