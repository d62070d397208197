"""C source for fused elementwise kernels: one ``KernelSpec`` in, one C function out.

A kernel walks its iteration space as ``outer x inner`` (row-major) and reads each input
in one of four ways, fixed when the graph is optimized:

    full    x[i]      same shape as the result
    inner   x[j]      broadcast along leading dims (a bias row)
    outer   x[o]      broadcast along trailing dims (a per-row value)
    scalar  x[0]      one element

A kernel may also begin with a small matrix product (``KernelSpec.gemm``, made by
``passes/gemm_epilogue.py``): the input in slot ``a`` is the left matrix ``A`` (M x K,
mode ``gemm``), another input the right one ``B`` (K x N, mode ``gemm_b``), and each row
``o`` first sums ``acc[j] = A[o,:] . B[:,j]`` (fused multiply-adds in k order); slot ``a``
then reads as ``acc[j]``, plus ``C[o,j]`` when the product was an ``addmm``. The rest of
the group runs on those values as an epilogue, so the product never goes to memory.

Every value is computed in the group's float type ``T`` (bools as 0/1), then stored as its
output's C type. A flat kernel (no inner/outer input) runs one ``omp simd`` loop over
``outer*inner`` elements. Work above ``parallel_min`` runs on ``nthreads`` threads when the
compiler gives us OpenMP (see ``compiler.OPENMP``); small work stays on one thread.

libm functions are declared ``omp declare simd notinbranch`` so gcc calls glibc's vector
versions (libmvec) with NaN/Inf intact; the set comes from ``library.vector_math()``.
Groups that reduce along the last dimension are written by ``rows.py`` instead.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, List, Optional, Sequence, Tuple

CTYPES = {"float32": "float", "float64": "double", "bool": "unsigned char",
          "int64": "int64_t", "int32": "int32_t", "int16": "int16_t", "int8": "int8_t",
          "uint8": "uint8_t"}
MODES = ("full", "inner", "outer", "scalar", "gemm", "gemm_b")


def read_mode(s, shape, split) -> Optional[str]:
    """How an input of static shape ``s`` is read over the iteration space ``shape`` seen
    as ``outer x inner`` at ``split`` (one of the first four ``MODES``), or None when it
    does not broadcast that way."""
    s = (1,) * (len(shape) - len(s)) + tuple(s) if len(s) <= len(shape) else None
    if s is None:
        return None
    if all(d == 1 for d in s):
        return "scalar"
    if s == tuple(shape):
        return "full"
    if all(d == 1 for d in s[:split]) and s[split:] == tuple(shape[split:]):
        return "inner"
    if s[:split] == tuple(shape[:split]) and all(d == 1 for d in s[split:]):
        return "outer"
    return None


# libm functions the table uses: C name stem -> (float name, double name)
_LIBM = ["exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "sin", "cos", "tan",
         "asin", "acos", "atan", "sinh", "cosh", "tanh", "erf", "floor", "ceil", "trunc",
         "rint", "fabs", "pow"]
_VECTOR_ONLY_IF_AVAILABLE = {"exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin",
                             "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh",
                             "erf", "pow"}

_GENERIC = "\n".join(
    f"#define m_{stem}(x) _Generic((x), float: {stem}f, default: {stem})(x)"
    for stem in ["exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "sin", "cos",
                 "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "erf", "floor",
                 "ceil", "trunc"])

PRELUDE_TAIL = _GENERIC + r"""
#define m_fma(a, b, c) _Generic((a), float: __builtin_fmaf, default: __builtin_fma)((a), (b), (c))
#define m_round(x) _Generic((x), float: rintf, default: rint)(x)
#define m_abs(x) _Generic((x), float: fabsf, default: fabs)(x)
#define m_pow(x, y) _Generic((x), float: powf, default: pow)((x), (y))
#define m_relu(x) ((x) < 0 ? (T)0 : (x))
#define m_sigmoid(x) ((T)1 / ((T)1 + m_exp(-(x))))
#define m_silu(x) ((x) / ((T)1 + m_exp(-(x))))
#define m_softplus(x, b, t) ((x) * (b) > (t) ? (x) : m_log1p(m_exp((x) * (b))) / (b))
#define m_mish(x) ((x) * m_tanh(m_log1p(m_exp(x))))
#define m_gelu(x) ((T)0.5 * (x) * ((T)1 + m_erf((x) * (T)0.70710678118654752440)))
#define m_gelu_tanh(x) ((T)0.5 * (x) * ((T)1 + m_tanh((T)0.79788456080286535588 * \
    ((x) + (T)0.044715 * (x) * (x) * (x)))))
#define m_clamp_min(x, lo) ((x) < (lo) ? (T)(lo) : (x))
#define m_clamp_max(x, hi) ((x) > (hi) ? (T)(hi) : (x))
#define m_clamp(x, lo, hi) m_clamp_max(m_clamp_min((x), (lo)), (hi))
#define m_hardsigmoid(x) (m_clamp((x) + (T)3, (T)0, (T)6) / (T)6)
#define m_maximum(a, b) (((a) > (b) || (a) != (a)) ? (a) : (b))
#define m_minimum(a, b) (((a) < (b) || (a) != (a)) ? (a) : (b))
"""


def prelude(vector_names: Iterable[str]) -> str:
    """Includes, vector declarations of the libm functions that have them, and helpers."""
    lines = ["#include <math.h>", "#include <stdint.h>",
             "#if defined(__AVX2__) && defined(__FMA__)", "#include <immintrin.h>", "#endif", ""]
    vec = set(vector_names)
    for stem in _LIBM:
        for name, ctype in ((stem + "f", "float"), (stem, "double")):
            if stem in _VECTOR_ONLY_IF_AVAILABLE and name in vec:
                params = f"{ctype}, {ctype}" if stem == "pow" else ctype
                lines.append("#pragma omp declare simd notinbranch")
                lines.append(f"{ctype} {name}({params});")
    return "\n".join(lines) + "\n" + PRELUDE_TAIL


@dataclass(frozen=True)
class Operand:
    kind: str        # "in" (input index), "v" (value index), "c" (literal number)
    value: object


@dataclass(frozen=True)
class Step:
    template: str
    operands: Tuple[Operand, ...]
    reduce: str = ""     # "sum"/"mean"/"amax"/"amin": a reduction over the last dim
    row: bool = False    # a per-row value (shape S[:-1] + (1,)) in a row program


@dataclass(frozen=True)
class KernelSpec:
    """What one fused kernel computes: hashable, torch-free, the key of its C source."""

    dtype: str                            # the float type values are computed in
    inputs: Tuple[Tuple[str, str], ...]   # (dtype, mode) per input tensor
    steps: Tuple[Step, ...]               # value k = steps[k] over inputs/values/literals
    outputs: Tuple[Tuple[int, str], ...]  # (value index, dtype) per output
    # a matrix product first: (slot of A, input index of B, of C or -1, K[, N]); () for none
    gemm: Tuple[int, ...] = ()

    @property
    def flat(self) -> bool:
        return not self.gemm and all(mode in ("full", "scalar") for _, mode in self.inputs)

    @property
    def rows(self) -> bool:
        """A row program (``rows.py``): some step reduces or is per row."""
        return any(step.reduce or step.row for step in self.steps)

    def cost(self) -> int:
        """Rough work per element: transcendental calls count more than arithmetic."""
        work = sum(1 + 8 * step.template.count("m_") for step in self.steps)
        return work + (2 * self.gemm[3] if self.gemm else 0)

    @property
    def output_rows(self) -> Tuple[bool, ...]:
        """Per output: whether it is a per-row value (shape ``S[:-1] + (1,)``)."""
        return tuple(self.steps[v].reduce != "" or self.steps[v].row for v, _ in self.outputs)


def literal(value, ctype: str) -> str:
    """A Python number as a C literal of type ``ctype`` (inf and nan spelled out)."""
    value = float(value) if not isinstance(value, bool) else float(int(value))
    if math.isnan(value):
        return "((T)NAN)"
    if math.isinf(value):
        return "((T)INFINITY)" if value > 0 else "((T)-INFINITY)"
    text = repr(value)
    return f"{text}f" if ctype == "float" else text


def function(spec: KernelSpec, name: str, parallel: bool) -> str:
    """The C function ``name(inputs..., outputs..., outer, inner, nthreads, parallel_min)``."""
    T = CTYPES[spec.dtype]
    params = [f"const {CTYPES[dt]} *restrict in{k}" for k, (dt, _) in enumerate(spec.inputs)]
    params += [f"{CTYPES[dt]} *restrict out{k}" for k, (_, dt) in enumerate(spec.outputs)]
    names = [f"in{k}" for k in range(len(spec.inputs))] + \
        [f"out{k}" for k in range(len(spec.outputs))]
    scalars = [f"    const T s{k} = (T)in{k}[0];" for k, (_, mode) in enumerate(spec.inputs)
               if mode == "scalar"]
    index = {"full": "i", "inner": "j", "outer": "o"}
    reads = "".join(f"        const T a{k} = (T)in{k}[{index[mode]}];\n"
                    for k, (dt, mode) in enumerate(spec.inputs) if mode in index)
    inner_loop = reads + _gemm_read(spec) + _body(spec)
    # The loop lives once, in ``name_range`` over [lo, hi) (of elements for a flat kernel,
    # of rows otherwise); the entry runs it on one thread or splits it over ``nthreads``.
    if spec.flat:
        loop = ["#pragma omp simd", "    for (int64_t i = lo; i < hi; i++) {", inner_loop,
                "    }"]
        extent, align = "outer * inner", 16
    else:
        loop = ["    for (int64_t o = lo; o < hi; o++) {"] + _gemm_row(spec) + [
                "#pragma omp simd",
                "      for (int64_t j = 0; j < inner; j++) {",
                "        const int64_t i = o * inner + j;", _indent(inner_loop, 2),
                "      }", "    }"]
        extent, align = "outer", 1
    lines = [f"static void {name}_range({', '.join(params)}, int64_t inner, int64_t lo, "
             f"int64_t hi) {{", f"#define T {T}"] + scalars + loop + ["#undef T", "}", ""]
    call = ", ".join(names + ["inner"])
    lines += [f"void {name}({', '.join(params)}, int64_t outer, int64_t inner, int nthreads, "
              f"int64_t parallel_min) {{", f"    const int64_t n = {extent};"]
    if parallel:
        lines += ["    if (nthreads > 1 && n > 1 && outer * inner >= parallel_min) {",
                  "#pragma omp parallel num_threads(nthreads)",
                  "        {",
                  "            const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();",
                  f"            const int64_t chunk = ((n + nt - 1) / nt + {align - 1}) "
                  f"/ {align} * {align};",
                  "            const int64_t lo = t * chunk, hi = lo + chunk < n ? lo + chunk : n;",
                  f"            if (lo < hi) {name}_range({call}, lo, hi);",
                  "        }",
                  "        return;",
                  "    }"]
    lines += [f"    {name}_range({call}, 0, n);", "}", ""]
    return "\n".join(lines)


def _gemm_row(spec: KernelSpec) -> List[str]:
    """The row's matrix product into ``acc`` (nothing without one)."""
    if not spec.gemm:
        return []
    a, b, _, k = spec.gemm[:4]
    n = str(spec.gemm[4]) if len(spec.gemm) > 4 else "inner"
    if n != "inner" and spec.dtype == "float32" and spec.inputs[b][0] == "float32" and \
            int(n) % 8 == 0:
        return _gemm_row_avx(a, b, k, int(n))
    return [f"      T acc[{n}];",
            "#pragma omp simd",
            f"      for (int64_t j = 0; j < {n}; j++) acc[j] = (T)0;",
            f"      for (int64_t k = 0; k < {k}; k++) {{",
            f"        const T x = (T)in{a}[o * {k} + k];",
            f"        const {CTYPES[spec.inputs[b][0]]} *restrict row = in{b} + k * {n};",
            "#pragma omp simd",
            f"        for (int64_t j = 0; j < {n}; j++) acc[j] = m_fma(x, (T)row[j], acc[j]);",
            "      }"]


def _gemm_row_avx(a: int, b: int, k: int, n: int) -> List[str]:
    """The row product with its accumulators in AVX registers (a block of up to 8 vectors
    of 8 floats across the whole k loop), where the compiler kept an array of them in
    memory: each k step then waited on a load and a store per vector. The same fused
    multiply-adds in the same k order as the portable loop, which serves other targets."""
    width = max(v for v in range(1, 9) if (n // 8) % v == 0)     # vectors per block
    regs = [f"c{v}" for v in range(width)]
    lines = [f"      T acc[{n}];",
             "#if defined(__AVX2__) && defined(__FMA__)",
             f"      for (int64_t jb = 0; jb < {n}; jb += {8 * width}) {{",
             "        __m256 " + ", ".join(f"{r} = _mm256_setzero_ps()" for r in regs) + ";",
             f"        for (int64_t k = 0; k < {k}; k++) {{",
             f"          const __m256 x = _mm256_broadcast_ss(in{a} + o * {k} + k);",
             f"          const float *restrict row = in{b} + k * {n} + jb;"]
    lines += [f"          {r} = _mm256_fmadd_ps(x, _mm256_loadu_ps(row + {8 * v}), {r});"
              for v, r in enumerate(regs)]
    lines += ["        }"]
    lines += [f"        _mm256_storeu_ps(acc + jb + {8 * v}, {r});" for v, r in enumerate(regs)]
    lines += ["      }", "#else",
              "#pragma omp simd",
              f"      for (int64_t j = 0; j < {n}; j++) acc[j] = (T)0;",
              f"      for (int64_t k = 0; k < {k}; k++) {{",
              f"        const T x = (T)in{a}[o * {k} + k];",
              f"        const float *restrict row = in{b} + k * {n};",
              "#pragma omp simd",
              f"        for (int64_t j = 0; j < {n}; j++) acc[j] = m_fma(x, row[j], acc[j]);",
              "      }", "#endif"]
    return lines


def _gemm_read(spec: KernelSpec) -> str:
    if not spec.gemm:
        return ""
    a, _, c, _ = spec.gemm[:4]
    term = f"a{c} + " if c >= 0 and spec.inputs[c][1] != "scalar" else \
        (f"s{c} + " if c >= 0 else "")
    return f"        const T a{a} = {term}acc[j];\n"


def _indent(text: str, n: int) -> str:
    return "\n".join((" " * n + line) if line else line for line in text.split("\n"))


def _body(spec: KernelSpec) -> str:
    T = CTYPES[spec.dtype]
    out: List[str] = []
    for k, step in enumerate(spec.steps):
        args = [_operand(op, T, spec) for op in step.operands]
        out.append(f"        const T v{k} = (T)({step.template.format(*args)});")
    for k, (value, dt) in enumerate(spec.outputs):
        if dt == "bool":
            out.append(f"        out{k}[i] = (v{value} != 0);")
        else:
            out.append(f"        out{k}[i] = ({CTYPES[dt]})v{value};")
    return "\n".join(out)


def _operand(op: Operand, T: str, spec: KernelSpec) -> str:
    if op.kind == "in":
        return f"s{op.value}" if spec.inputs[op.value][1] == "scalar" else f"a{op.value}"
    if op.kind == "v":
        return f"v{op.value}"
    return literal(op.value, T)


def unit(specs: Sequence[Tuple[KernelSpec, str]], vector_names: Iterable[str],
         parallel: bool) -> str:
    """One C translation unit holding several kernels (one compiler run per graph)."""
    from . import rows
    head = "#include <omp.h>\n" if parallel else ""
    return head + prelude(vector_names) + "\n" + "\n".join(
        (rows.function if spec.rows else function)(spec, name, parallel) + _test(spec, name)
        for spec, name in specs)


def _test(spec: KernelSpec, name: str) -> str:
    """For a kernel with one bool output: ``int name_test(inputs..., sizes)``, which runs
    it into a local byte and returns it, so a one-element result (a loop test) comes back
    as a number instead of through a tensor (``FusedKernel.predicate``)."""
    if len(spec.outputs) != 1 or spec.outputs[0][1] != "bool":
        return ""
    params = [f"const {CTYPES[dt]} *restrict in{k}" for k, (dt, _) in enumerate(spec.inputs)]
    names = [f"in{k}" for k in range(len(spec.inputs))]
    return "\n".join([
        f"int {name}_test({', '.join(params)}, int64_t outer, int64_t inner, int nthreads, "
        f"int64_t parallel_min) {{",
        "    unsigned char result = 0;",
        f"    {name}({', '.join(names)}, &result, outer, inner, nthreads, parallel_min);",
        "    return result;",
        "}", ""])
