"""A loop of kernel calls run in C: no Python and no ctypes call per step.

``KernelLoop`` and ``KernelWhile`` (``kernels/loop.py``) call one compiled kernel per step
on precomputed addresses. Each such call from Python is a ctypes call (about 1-3 us: the
whole step of a small RNN), so a 50-step loop paid its Python loop and 50 ctypes calls.
This module's small C library takes the kernel's function pointer and the pointer list and
runs the steps itself:

    counted(fn, n, ptrs, rows, vars, start, count, step, bufs, tail, turn)
        for each of ``count`` steps (counter ``i = start + s * step``): point each row
        slot at ``base + i * stride``, write the kernel into ``bufs[turn]``, point the
        loop variable's slots at it, flip ``turn``;
    while_(test, tn, tptrs, tvars, body, bn, bptrs, bvars, bufs, ttail, btail, turn, max)
        the same while ``test`` (a kernel's ``_test`` function: its one bool, returned)
        is true, at most ``max`` steps; returns the steps run and whether the test ended it.

Kernels are called through a function type of their arity (pointer arguments, then the
sizes ``outer, inner, nthreads, parallel_min``) chosen by a switch, up to ``MAX_POINTERS``
pointers; the kernels' parameters are typed ``const float *`` etc. where the switch says
``void *``: the same argument passing on every ABI tograph builds for (x86-64 System V,
AArch64). Steps are run in chunks of at most ``CHUNK`` so a long loop still returns to
Python (Ctrl-C) between chunks. Without a compiler (or a failed build) ``available()`` is
False and the callers keep their Python loops. The library is built once per process
(under a lock) on first use and cached on disk like the kernels.
"""
from __future__ import annotations

import ctypes
from typing import List, Optional, Sequence, Tuple

from .built_once import built_once

MAX_POINTERS = 24           # kernel arguments that are pointers (inputs and output)
CHUNK = 1 << 14             # steps per C call: a long loop returns to Python in between


def _source() -> str:
    def params(n: int) -> str:
        return ", ".join(["P"] * n + ["int64_t", "int64_t", "int", "int64_t"])

    def args(n: int) -> str:
        return ", ".join([f"p[{k}]" for k in range(n)] + ["t[0]", "t[1]", "(int)t[2]", "t[3]"])
    body_cases = "\n".join(
        f"    case {n}: ((void (*)({params(n)}))fn)({args(n)}); return;"
        for n in range(1, MAX_POINTERS + 1))
    test_cases = "\n".join(
        f"    case {n}: return ((int (*)({params(n)}))fn)({args(n)});"
        for n in range(1, MAX_POINTERS + 1))
    return f"""#include <stdint.h>
#define P void *

static void call_body(void *fn, int n, void **p, const int64_t *t) {{
  switch (n) {{
{body_cases}
  }}
}}

static int call_test(void *fn, int n, void **p, const int64_t *t) {{
  switch (n) {{
{test_cases}
  }}
  return 0;
}}

/* ``count`` steps of ``fn`` (n pointers, the last its output); rows: (slot, base, bytes per
   counter step) triples; returns the turn after the last step. */
int tg_loop_counted(void *fn, int n, void **p, const int64_t *rows, int n_rows,
                    const int64_t *vars, int n_vars, int64_t start, int64_t count,
                    int64_t step, void **bufs, const int64_t *t, int turn) {{
  for (int64_t s = 0; s < count; s++) {{
    const int64_t i = start + s * step;
    for (int r = 0; r < n_rows; r++)
      p[rows[3 * r]] = (char *)(intptr_t)rows[3 * r + 1] + i * rows[3 * r + 2];
    p[n - 1] = bufs[turn];
    call_body(fn, n, p, t);
    for (int v = 0; v < n_vars; v++) p[vars[v]] = bufs[turn];
    turn ^= 1;
  }}
  return turn;
}}

/* Up to ``max_steps`` steps of ``body`` while ``test`` is true; ``state[0]``: the turn,
   ``state[1]`` set to 1 when the test ended the loop; returns the steps run. */
int64_t tg_loop_while(void *test, int tn, void **tp, const int64_t *tvars, int n_tvars,
                      const int64_t *tt, void *body, int bn, void **bp,
                      const int64_t *bvars, int n_bvars, const int64_t *bt, void **bufs,
                      int64_t *state, int64_t max_steps) {{
  int turn = (int)state[0];
  int64_t s = 0;
  state[1] = 0;
  for (; s < max_steps; s++) {{
    if (!call_test(test, tn, tp, tt)) {{ state[1] = 1; break; }}
    bp[bn - 1] = bufs[turn];
    call_body(body, bn, bp, bt);
    for (int v = 0; v < n_tvars; v++) tp[tvars[v]] = bufs[turn];
    for (int v = 0; v < n_bvars; v++) bp[bvars[v]] = bufs[turn];
    turn ^= 1;
  }}
  state[0] = turn;
  return s;
}}
"""


_I64 = ctypes.c_int64
_PTR = ctypes.c_void_p


def _bind(lib):
    counted = lib.tg_loop_counted
    counted.argtypes = [_PTR, ctypes.c_int, _PTR, _PTR, ctypes.c_int, _PTR,
                        ctypes.c_int, _I64, _I64, _I64, _PTR, _PTR, ctypes.c_int]
    counted.restype = ctypes.c_int
    whiles = lib.tg_loop_while
    whiles.argtypes = [_PTR, ctypes.c_int, _PTR, _PTR, ctypes.c_int, _PTR,
                       _PTR, ctypes.c_int, _PTR, _PTR, ctypes.c_int, _PTR,
                       _PTR, _PTR, _I64]
    whiles.restype = _I64
    return counted, whiles, lib


# (counted, while, library) C functions, or None (Python loops), built on first use
_functions = built_once("tg_loop_driver", _source, _bind)


def available(pointers: int) -> bool:
    """Whether a kernel with ``pointers`` pointer arguments can be driven from C."""
    return pointers <= MAX_POINTERS and _functions() is not None


def address(c_function) -> int:
    """The address of a ctypes function."""
    return ctypes.cast(c_function, _PTR).value


def _array(kind, values: Sequence[int]):
    return (kind * max(1, len(values)))(*values)


def counted(fn: int, ptrs: List[int], rows: Sequence[Tuple[int, int, int]],
            slots: Sequence[int], steps: range, buffers: Tuple[int, int],
            tail: Sequence[int]) -> int:
    """Run ``fn`` for each counter value of ``steps`` (as ``KernelLoop``'s Python loop);
    ``ptrs``: its pointer arguments with a last slot for the output. Returns the index of
    the buffer written last (``steps`` must not be empty)."""
    c_counted = _functions()[0]
    p = _array(_PTR, ptrs)
    flat = [v for r in rows for v in r]
    c_rows, c_vars = _array(_I64, flat), _array(_I64, slots)
    c_bufs, c_tail = _array(_PTR, buffers), _array(_I64, tail)
    turn = 0
    for s in range(0, len(steps), CHUNK):
        part = steps[s:s + CHUNK]
        turn = c_counted(fn, len(ptrs), p, c_rows, len(rows), c_vars, len(slots),
                         part.start, len(part), part.step, c_bufs, c_tail, turn)
    return turn ^ 1


def while_(test: int, tptrs: List[int], tslots: Sequence[int], ttail: Sequence[int],
           body: int, bptrs: List[int], bslots: Sequence[int], btail: Sequence[int],
           buffers: Tuple[int, int], limit: Optional[int] = None) -> Tuple[Optional[int], int]:
    """``while test: body`` (as ``KernelWhile``'s Python loop), at most ``limit`` steps when
    given; ``bptrs`` has a last slot for the body's output. Returns the index of the buffer
    written last (None when the body never ran) and the number of steps run."""
    c_while = _functions()[1]
    tp, bp = _array(_PTR, tptrs), _array(_PTR, bptrs)
    tv, bv = _array(_I64, tslots), _array(_I64, bslots)
    tt, bt = _array(_I64, ttail), _array(_I64, btail)
    c_bufs = _array(_PTR, buffers)
    state = _array(_I64, (0, 0))
    ran = 0
    while limit is None or ran < limit:
        most = CHUNK if limit is None else min(CHUNK, limit - ran)
        ran += c_while(test, len(tptrs), tp, tv, len(tslots), tt, body, len(bptrs), bp, bv,
                       len(bslots), bt, c_bufs, state, most)
        if state[1]:
            break
    return (None if ran == 0 else state[0] ^ 1), ran
