"""A loop's body and its next test in one pass over memory: ``KernelWhile``'s fused step.

``KernelWhile`` (``loop.py``) runs ``while test(var, ...): var = body(var, ...)`` as two
kernels per step: the body writes the new ``var``, then the test reads it back with the
captures to reduce it to one bool (Newton's ``max(|y*y - x| / x) > tol``). At a size that
does not fit in cache each step then streams ``var`` and the captures twice, and the test,
a whole-tensor reduction (``outer`` = 1), ran on one thread. When the test is

    pointwise math on (var, captures) -> amax/amin over every element -> math -> bool

and the body a flat pointwise kernel of the same iteration space, this module writes one
C function per loop that computes each element's new value, stores it and feeds it (as
stored: rounded to the output type) straight into the test's math and reduction: one pass
per step, and the test of the value just written comes out with it. Above
``parallel_min`` elements the pass is split over ``nthreads`` (torch's own libgomp, as the
other kernels), each thread reducing its part; the parts combine in C. ``amax``/``amin``
are exact in any order and keep NaN as torch does (a NaN anywhere makes the result NaN, so
``NaN > tol`` is False), so the test's results, the step count and every value written are
those of the two kernels. Sums (``sum``, ``mean``, a norm) would round differently when
split: such tests keep the two kernels.

    step = plan(test, test_roles, body, body_roles)   # a FusedStep, or None: not this form
    step.run(var, caps, limit)   # (final var, steps run), or None: not built / not usable

The library is compiled in the background on first use (``built_once``), the two kernels
serving meanwhile. Generated functions (``n``: elements):

    int  <name>_first(var, caps..., n, nthreads, parallel_min)       the test of ``var``
    int64_t <name>_loop(var, caps..., buf0, buf1, n, nthreads, parallel_min, max_steps,
                        state)    steps while the test holds, writing buf0/buf1 in turn
"""
from __future__ import annotations

import ctypes
import hashlib
import math
import threading
from typing import Dict, Optional, Sequence, Tuple

import torch

from .built_once import built_once
from .codegen import CTYPES, KernelSpec, Operand, literal

_REDUCE = {"amax": (">", "(T)-INFINITY"), "amin": ("<", "(T)INFINITY")}
_FLOAT_OUT = ("float32", "float64")
MAX_THREADS = 256           # per-thread partial results kept on the stack
CHUNK = 1 << 14             # steps per C call: a long loop returns to Python in between


def plan(test, test_roles: Sequence[Tuple], body, body_roles: Sequence[Tuple]):
    """The fused step of ``KernelWhile``'s two kernels, or None when they are not of the
    form above (static shapes of one iteration space, whole-tensor amax/amin test)."""
    ts, bs = test.spec, body.spec
    if not test._launchable() or not body._launchable() or not body._single or \
            body._row_outputs[0] or len(ts.outputs) != 1 or ts.outputs[0][1] != "bool":
        return None
    if ts.gemm or bs.gemm or not bs.flat or bs.outputs[0][1] not in _FLOAT_OUT or \
            ts.dtype != bs.dtype:       # (one ``T`` for the math macros of both)
        return None
    shape = tuple(body._out_shape)
    if tuple(test._out_shape) != shape or math.prod(shape[:test._split]) != 1:
        return None             # the test must reduce the whole tensor, in one row
    if any(mode not in ("full", "scalar") for _, mode in ts.inputs):
        return None
    for spec, roles in ((ts, test_roles), (bs, body_roles)):
        for (dt, mode), role in zip(spec.inputs, roles):
            if role[0] not in ("var", "capture") or (role[0] == "var" and mode != "full"):
                return None
            if role[0] == "var" and dt != bs.outputs[0][1]:
                return None
    if not _one_pass(ts):
        return None
    return FusedStep(test, list(test_roles), body, list(body_roles))


def _one_pass(spec: KernelSpec) -> bool:
    """Pointwise steps, then amax/amin reductions of them, then row math on the reduced
    values and one-element inputs only (a tolerance tensor), ending in the bool output."""
    reduced, row = set(), set()
    for k, step in enumerate(spec.steps):
        vs = {op.value for op in step.operands if op.kind == "v"}
        if step.reduce:
            if step.reduce not in _REDUCE or vs & (reduced | row) or \
                    step.operands[0].kind != "v":
                return False
            reduced.add(k)
        elif vs & (reduced | row):
            if not step.row or any(op.kind == "in" and spec.inputs[op.value][1] != "scalar"
                                   for op in step.operands):
                return False
            row.add(k)
        elif step.row:
            return False
    out = spec.outputs[0][0]
    return bool(reduced) and (out in row or out in reduced)


class FusedStep:
    """The fused step of one ``KernelWhile``: its C source and, once built, its runs."""

    def __init__(self, test, test_roles, body, body_roles):
        self.test, self.body = test, body
        self.test_roles, self.body_roles = test_roles, body_roles
        self.captures = sorted({r[1] for r in test_roles + body_roles if r[0] == "capture"})
        self.shape = tuple(body._out_shape)
        self.dtype = body._out_dtypes[0]
        self.parallel_min = max(4096, 262144 // max(1, test.spec.cost() + body.spec.cost()))
        self.name, self.source = source(test.spec, test_roles, body.spec, body_roles,
                                        self.captures)
        self._functions = _library(self.name, self.source, 1 + len(self.captures))

    def run(self, var: torch.Tensor, caps, limit: Optional[int]):
        """``(final var, steps run)``, or None where the library is not built (yet) or an
        input is not as the kernels were built for (the caller runs the two kernels)."""
        fns = self._functions()
        if fns is None:
            return None
        first, loop = fns
        cap_ptrs = [caps[c].data_ptr() for c in self.captures]
        n = math.prod(self.shape)
        sizes = (n, torch.get_num_threads(), self.parallel_min)
        if (limit is not None and limit <= 0) or not first(var.data_ptr(), *cap_ptrs, *sizes):
            return var, 0
        buffers = (torch.empty(self.shape, dtype=self.dtype),
                   torch.empty(self.shape, dtype=self.dtype))
        addresses = [b.data_ptr() for b in buffers]
        state = (ctypes.c_int64 * 2)(0, 0)       # (buffer written next, test ended it)
        ran, current = 0, var.data_ptr()
        while limit is None or ran < limit:
            most = CHUNK if limit is None else min(CHUNK, limit - ran)
            ran += loop(current, *cap_ptrs, *addresses, *sizes, most, state)
            current = addresses[state[0] ^ 1]
            if state[1]:
                break
        return buffers[state[0] ^ 1], ran


# generated source -> its ``built_once`` function; locked: loops may be made in two threads
_built: Dict[str, object] = {}
_built_lock = threading.Lock()


def _library(name: str, text: str, inputs: int):
    with _built_lock:
        if text not in _built:
            _built[text] = built_once(name, lambda: text, lambda lib: _bind(lib, name, inputs),
                                      background=True)
        return _built[text]


def _bind(lib, name: str, inputs: int):
    """(first, loop) with their ctypes signatures: ``inputs`` pointers (var, captures)."""
    first, loop = getattr(lib, name + "_first"), getattr(lib, name + "_loop")
    sizes = [ctypes.c_int64, ctypes.c_int, ctypes.c_int64]
    first.argtypes = [ctypes.c_void_p] * inputs + sizes
    loop.argtypes = [ctypes.c_void_p] * (inputs + 2) + sizes + [ctypes.c_int64,
                                                                ctypes.c_void_p]
    first.restype, loop.restype = ctypes.c_int, ctypes.c_int64
    return first, loop


# ---------------------------------------------------------------- C source

def source(ts: KernelSpec, test_roles, bs: KernelSpec, body_roles,
           captures) -> Tuple[str, str]:
    """(name, translation unit): prelude, the per-range pass (with and without the body),
    the test of one pass, ``name_first`` and ``name_loop``; ``name`` from its text's hash."""
    from . import compiler
    from .codegen import prelude
    from .library import vector_math
    parallel = compiler.OPENMP
    head = "#include <omp.h>\n" if parallel else ""
    name = "tg_while"       # renamed below, once the text is known
    out_t = CTYPES[bs.outputs[0][1]]
    cap_types = {}
    for spec, roles in ((ts, test_roles), (bs, body_roles)):
        for (dt, _), role in zip(spec.inputs, roles):
            if role[0] == "capture":
                cap_types[role[1]] = CTYPES[dt]
    params = [f"const {out_t} *restrict y"] + \
        [f"const {cap_types[c]} *restrict c{c}" for c in captures]
    args = ["y"] + [f"c{c}" for c in captures]
    reductions = [k for k, step in enumerate(ts.steps) if step.reduce]
    T = CTYPES[ts.dtype]
    parts = [head + prelude(vector_math()),
             _range(ts, test_roles, bs, body_roles, params, reductions, step=False),
             _range(ts, test_roles, bs, body_roles, params, reductions, step=True),
             _entry(ts, test_roles, params, args, reductions, T, out_t, parallel),
             _loop(params, args, out_t)]
    text = "\n".join(parts)
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    return f"tg_while_{digest}", text.replace(name, f"tg_while_{digest}")


def _name(op: Operand, prefix: str, spec: KernelSpec, T: str) -> str:
    if op.kind == "in":
        return f"{prefix}{'s' if spec.inputs[op.value][1] == 'scalar' else 'a'}{op.value}"
    if op.kind == "v":
        return f"{prefix}v{op.value}"
    return literal(op.value, T)


def _value(step, k: int, prefix: str, spec: KernelSpec, T: str) -> str:
    """The C line computing value ``k`` (``step``) of ``spec`` as ``<prefix>v<k>``."""
    args = [_name(op, prefix, spec, T) for op in step.operands]
    return f"  const {T} {prefix}v{k} = ({T})({step.template.format(*args)});"


def _read(role, mode: str) -> str:
    """An input's element: ``y`` (the loop variable) or capture ``c<k>``, at ``i``."""
    where = "y" if role[0] == "var" else f"c{role[1]}"
    return f"{where}[i]" if mode == "full" else f"{where}[0]"


def _range(ts, test_roles, bs, body_roles, params, reductions, step: bool) -> str:
    """``tg_while_pass`` (step: ``tg_while_step``) over elements [lo, hi): the test's
    reductions into ``part`` (one slot per reduction, then its NaN flags), after the body
    when ``step`` (the test then reads the value it stores)."""
    T, BT = CTYPES[ts.dtype], CTYPES[bs.dtype]
    out_t = CTYPES[bs.outputs[0][1]]
    name = "tg_while_step" if step else "tg_while_pass"
    sig = params + ([f"{out_t} *restrict out"] if step else []) + \
        ["int64_t lo", "int64_t hi", "double *restrict part"]
    lines = [f"static void {name}({', '.join(sig)}) {{"]
    pre = []
    loop = []
    if step:
        for k, ((_, mode), role) in enumerate(zip(bs.inputs, body_roles)):
            target = pre if mode == "scalar" else loop
            letter = "s" if mode == "scalar" else "a"
            target.append(f"  const {BT} b{letter}{k} = ({BT}){_read(role, mode)};")
        for k, s in enumerate(bs.steps):
            loop.append(_value(s, k, "b", bs, BT))
        loop.append(f"  out[i] = ({out_t})bv{bs.outputs[0][0]};")
    for k, ((_, mode), role) in enumerate(zip(ts.inputs, test_roles)):
        letter = "s" if mode == "scalar" else "a"
        if role[0] == "var" and step:
            loop.append(f"  const {T} t{letter}{k} = ({T})({out_t})bv{bs.outputs[0][0]};")
        else:
            (pre if mode == "scalar" else loop).append(
                f"  const {T} t{letter}{k} = ({T}){_read(role, mode)};")
    clauses = []
    for k in reductions:
        cmp, init = _REDUCE[ts.steps[k].reduce]
        pre += [f"  {T} acc{k} = {init};", f"  int nan{k} = 0;"]
        clauses += [f"reduction({'max' if cmp == '>' else 'min'}:acc{k})",
                    f"reduction(|:nan{k})"]
    for k, s in enumerate(ts.steps):
        if s.reduce:
            x = _name(s.operands[0], "t", ts, T)
            cmp = _REDUCE[s.reduce][0]
            loop += [f"  acc{k} = {x} {cmp} acc{k} ? {x} : acc{k};", f"  nan{k} |= ({x} != {x});"]
        elif not _after(ts, k, reductions):
            loop.append(_value(s, k, "t", ts, T))
    lines += [f"#define T {T}"] + pre + [f"#pragma omp simd {' '.join(clauses)}",
                                         "  for (int64_t i = lo; i < hi; i++) {"]
    lines += ["  " + line for line in loop] + ["  }"]
    lines += [f"  part[{j}] = (double)acc{k}; part[{len(reductions) + j}] = nan{k};"
              for j, k in enumerate(reductions)]
    lines += ["#undef T", "}", ""]
    return "\n".join(lines)


def _after(spec: KernelSpec, k: int, reductions) -> bool:
    """Whether step ``k`` is row math after the reductions."""
    todo, seen = [k], set()
    while todo:
        j = todo.pop()
        if j in reductions:
            return True
        if j in seen:
            continue
        seen.add(j)
        todo += [op.value for op in spec.steps[j].operands if op.kind == "v"]
    return False


def _entry(ts, test_roles, params, args, reductions, T, out_t, parallel: bool) -> str:
    """``tg_while_test(..., out or NULL, n, nthreads, parallel_min)``: one pass (with the body
    when ``out``), split over threads, its parts combined into the test's bool."""
    m = len(reductions)
    sig = params + [f"{out_t} *restrict out", "int64_t n", "int nthreads",
                    "int64_t parallel_min"]
    call = ", ".join(args)
    lines = [f"static int tg_while_test({', '.join(sig)}) {{", f"#define T {T}",
             f"  double parts[{MAX_THREADS}][{2 * m}];", "  int used = 1;"]
    run = (f"if (out) tg_while_step({call}, out, lo, hi, parts[t]); "
           f"else tg_while_pass({call}, lo, hi, parts[t]);")
    if parallel:
        lines += ["  if (nthreads > 1 && n >= parallel_min) {",
                  f"    if (nthreads > {MAX_THREADS}) nthreads = {MAX_THREADS};",
                  "#pragma omp parallel num_threads(nthreads)",
                  "    {",
                  "      const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();",
                  "      const int64_t chunk = ((n + nt - 1) / nt + 15) / 16 * 16;",
                  "      const int64_t lo = t * chunk < n ? t * chunk : n;",
                  "      const int64_t hi = lo + chunk < n ? lo + chunk : n;",
                  f"      {run}",
                  "      if (t == 0) used = (int)nt;",
                  "    }",
                  "  } else {"]
    else:
        lines.append("  {")
    lines += ["    const int64_t t = 0, lo = 0, hi = n;", f"    {run}", "  }"]
    for j, k in enumerate(reductions):
        cmp, init = _REDUCE[ts.steps[k].reduce]
        lines += [f"  T acc{k} = {init}; int nan{k} = 0;",
                  "  for (int t = 0; t < used; t++) {",
                  f"    const T p = (T)parts[t][{j}];",
                  f"    acc{k} = p {cmp} acc{k} ? p : acc{k}; nan{k} |= (int)parts[t][{m + j}];",
                  "  }",
                  f"  const T tv{k} = nan{k} ? (T)NAN : acc{k};"]
    lines += [f"  const T ts{k} = (T){_read(role, mode)};"           # (a tolerance tensor)
              for k, ((_, mode), role) in enumerate(zip(ts.inputs, test_roles))
              if mode == "scalar"]
    for k, s in enumerate(ts.steps):
        if not s.reduce and _after(ts, k, reductions):
            lines.append(_value(s, k, "t", ts, T))
    lines += [f"  return tv{ts.outputs[0][0]} != 0;", "#undef T", "}", ""]
    return "\n".join(lines)


def _loop(params, args, out_t) -> str:
    params = [p.replace(" *restrict ", " *") for p in params]   # y moves to each buffer
    caps = "".join(", " + p for p in params[1:])
    first_caps = "".join(", " + a for a in args[1:])
    return "\n".join([
        f"int tg_while_first({params[0]}{caps}, int64_t n, int nthreads, "
        "int64_t parallel_min) {",
        f"  return tg_while_test(y{first_caps}, 0, n, nthreads, parallel_min);",
        "}", "",
        "/* Up to max_steps steps while the test of the value written holds; state[0]: the",
        "   buffer written next (in and out), state[1] set to 1 when the test ended it. */",
        f"int64_t tg_while_loop({params[0]}{caps}, {out_t} *buf0, {out_t} *buf1, int64_t n, "
        "int nthreads, int64_t parallel_min, int64_t max_steps, int64_t *state) {",
        "  int64_t s = 0;",
        "  int turn = (int)state[0];",
        "  state[1] = 0;",
        "  while (s < max_steps) {",
        f"    {out_t} *out = turn ? buf1 : buf0;",
        f"    const int go = tg_while_test(y{first_caps}, out, n, nthreads, parallel_min);",
        "    y = out; turn ^= 1; s++;",
        "    if (!go) { state[1] = 1; break; }",
        "  }",
        "  state[0] = turn;",
        "  return s;",
        "}", ""])
