"""C for fused groups that reduce along the last dimension (layernorm, softmax): row programs.

Each row ``o`` of an ``outer x inner`` iteration space runs a few loops over ``j``:

    vec value   one per element (shape ``S``)
    row value   one per row (shape ``S[:-1] + (1,)``): a reduction's result, a per-row
                input, or pointwise math on those
    reduction   ``sum``/``mean``/``amax``/``amin`` of a vec value over the row

A vec value can use a row value only after the loop that reduced it, so the steps fall
into phases: loop ``p`` computes the vec values of phase ``p`` (recomputing cheap inputs
rather than storing them) and accumulates the reductions of phase ``p``; row values are
computed between loops. Sums accumulate in the value type, as torch's do (a double sum
would round differently from eager, and flip ties such as ``a.sum() > b.sum()``);
``amax``/``amin`` are exact and propagate NaN as torch does. ``dsum`` (backward
kernels only, ``rows_backward``) accumulates in double: a gradient's row sum (``sum(dy *
y)``) then carries only eager's own rounding, where a float sum over 1000 elements was
measured 10x further from eager's. Rows run in parallel above ``parallel_min`` elements.
"""
from __future__ import annotations

from typing import Dict, List, Set

from .codegen import CTYPES, KernelSpec, _operand

_ACC = {"sum": ("T", "0", "+"), "mean": ("T", "0", "+"), "dsum": ("double", "0", "+"),
        "amax": ("T", "(T)-INFINITY", "max"), "amin": ("T", "(T)INFINITY", "min")}


def _phases(spec: KernelSpec):
    """(phase of each vec step, loop of each reduction, row-ready index of each row step)."""
    phase: Dict[int, int] = {}
    ready: Dict[int, int] = {}       # row step k: computed after loop ready[k] (-1: before)
    for k, step in enumerate(spec.steps):
        vec_ops = [op.value for op in step.operands if op.kind == "v" and op.value in phase]
        row_ops = [op.value for op in step.operands if op.kind == "v" and op.value in ready]
        in_vec = any(op.kind == "in" and spec.inputs[op.value][1] in ("full", "inner")
                     for op in step.operands)
        p = max([phase[v] for v in vec_ops] + [ready[v] + 1 for v in row_ops] + [0])
        if step.reduce:
            ready[k] = p                              # reduced in loop p
        elif step.row and not vec_ops and not in_vec:
            ready[k] = max([ready[v] for v in row_ops] + [-1])
        else:
            phase[k] = p
    return phase, ready


def _needed(spec: KernelSpec, roots: List[int], phase: Dict[int, int]) -> List[int]:
    seen: Set[int] = set()
    stack = list(roots)
    while stack:
        k = stack.pop()
        if k in seen or k not in phase:
            continue
        seen.add(k)
        stack.extend(op.value for op in spec.steps[k].operands if op.kind == "v")
    return sorted(seen)


def function(spec: KernelSpec, name: str, parallel: bool) -> str:
    T = CTYPES[spec.dtype]
    phase, ready = _phases(spec)
    loops = max(list(phase.values()) + [p for k, p in ready.items()
                                        if spec.steps[k].reduce] + [0]) + 1
    params = [f"const {CTYPES[dt]} *restrict in{k}" for k, (dt, _) in enumerate(spec.inputs)]
    params += [f"{CTYPES[dt]} *restrict out{k}" for k, (_, dt) in enumerate(spec.outputs)]
    params += ["int64_t outer", "int64_t inner", "int nthreads", "int64_t parallel_min"]
    lines = [f"void {name}({', '.join(params)}) {{", f"#define T {T}"]
    for k, (dt, mode) in enumerate(spec.inputs):
        if mode == "scalar":
            lines.append(f"  const T s{k} = (T)in{k}[0];")
    if parallel:
        lines.append("#pragma omp parallel for num_threads(nthreads) schedule(static) "
                     "if(nthreads > 1 && outer > 1 && outer * inner >= parallel_min)")
    lines.append("  for (int64_t o = 0; o < outer; o++) {")
    for k, (dt, mode) in enumerate(spec.inputs):
        if mode == "outer":
            lines.append(f"    const T a{k} = (T)in{k}[o];")
    outputs = list(enumerate(spec.outputs))
    lines += _row_steps(spec, ready, -1, outputs)
    for p in range(loops):
        reductions = [k for k, q in ready.items() if spec.steps[k].reduce and q == p]
        vec_outs = [(n, v) for n, (v, _) in outputs if phase.get(v) == p]
        roots = [spec.steps[k].operands[0].value for k in reductions
                 if spec.steps[k].operands[0].kind == "v"] + [v for _, v in vec_outs]
        body_steps = _needed(spec, roots, phase)
        if not reductions and not vec_outs:
            continue
        clauses = []
        for k in reductions:
            acc_t, init, op = _ACC[spec.steps[k].reduce]
            lines.append(f"    {acc_t} acc{k} = {init};")
            clauses.append(f"reduction({op}:acc{k})")
            if op in ("max", "min"):
                lines.append(f"    int nan{k} = 0;")
                clauses.append(f"reduction(|:nan{k})")
        lines.append("#pragma omp simd " + " ".join(clauses))
        lines.append("    for (int64_t j = 0; j < inner; j++) {")
        lines.append("      const int64_t i = o * inner + j;")
        used_inputs = {op.value for k in body_steps for op in spec.steps[k].operands
                       if op.kind == "in"} | {op.value for k in reductions
                                               for op in spec.steps[k].operands
                                               if op.kind == "in"}
        for k in sorted(used_inputs):
            mode = spec.inputs[k][1]
            if mode in ("full", "inner"):
                lines.append(f"      const T a{k} = (T)in{k}[{'i' if mode == 'full' else 'j'}];")
        for k in body_steps:
            step = spec.steps[k]
            args = [_operand(op, T, spec) for op in step.operands]
            lines.append(f"      const T v{k} = (T)({step.template.format(*args)});")
        for k in reductions:
            x = _operand(spec.steps[k].operands[0], T, spec)
            how = spec.steps[k].reduce
            if how in ("sum", "mean", "dsum"):
                lines.append(f"      acc{k} += {x};")
            else:
                cmp = ">" if how == "amax" else "<"
                lines.append(f"      acc{k} = {x} {cmp} acc{k} ? {x} : acc{k};")
                lines.append(f"      nan{k} |= ({x} != {x});")
        for n, v in vec_outs:
            lines.append(_store(n, spec.outputs[n][1], f"v{v}", "i"))
        lines.append("    }")
        for k in reductions:
            how = spec.steps[k].reduce
            value = {"sum": f"acc{k}", "dsum": f"(T)acc{k}",
                     "mean": f"(acc{k} / (T)inner)"}.get(how, f"(nan{k} ? (T)NAN : acc{k})")
            lines.append(f"    const T v{k} = {value};")
        lines += _row_steps(spec, ready, p, outputs)
    lines += ["  }", "#undef T", "}", ""]
    return "\n".join(lines)


def _row_steps(spec: KernelSpec, ready: Dict[int, int], after: int, outputs) -> List[str]:
    """Row values computable after loop ``after`` (reductions are emitted by the loop), and
    the row outputs among them and among that loop's reductions."""
    T = CTYPES[spec.dtype]
    lines = []
    for k, step in enumerate(spec.steps):
        if ready.get(k) != after:
            continue
        if not step.reduce:
            args = [_operand(op, T, spec) for op in step.operands]
            lines.append(f"    const T v{k} = (T)({step.template.format(*args)});")
        for n, (v, dt) in outputs:
            if v == k:
                lines.append(_store(n, dt, f"v{k}", "o"))
    return lines


def _store(n: int, dtype: str, value: str, index: str) -> str:
    if dtype == "bool":
        return f"      out{n}[{index}] = ({value} != 0);"
    return f"      out{n}[{index}] = ({CTYPES[dtype]}){value};"
