"""Compile the fused kernels of one graph together and bind them.

All kernels of a graph (its subgraphs included) go into one C translation unit: one
compiler run per graph (cold) or one cache lookup (warm). Without a compiler the kernels
keep their torch path; a missing compiler, a compiler failing to build and a cache directory
failing to take the result each say so in one KernelWarning per process per command or
directory (with the compiler's message; later failures go to the ``tograph.kernels`` log),
and the graph still runs (as torch ops).
"""
from __future__ import annotations

import ctypes
import functools
import warnings
from typing import List

from .. import logs
from ..options import options
from . import codegen, compiler
from .launch import FusedKernel
from .notices import KernelWarning, warn_once

_VECTOR_STEMS = ["exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan",
                 "asin", "acos", "atan", "sinh", "cosh", "tanh", "erf", "pow"]
# glibc's vector ABI names, for every x86 ISA level gcc may pick with -march=native
_ISA_FLOAT = [("b", 4), ("c", 8), ("d", 8), ("e", 16)]
_ISA_DOUBLE = [("b", 2), ("c", 4), ("d", 4), ("e", 8)]


@functools.lru_cache(maxsize=None)
def vector_math() -> frozenset:
    """libm functions (``tanhf``, ``exp``...) that libmvec has vector versions of here."""
    try:
        lib = ctypes.CDLL("libmvec.so.1")
    except OSError:
        return frozenset()
    found = set()
    for stem in _VECTOR_STEMS:
        args = "vv" if stem == "pow" else "v"
        for name, isas in ((stem + "f", _ISA_FLOAT), (stem, _ISA_DOUBLE)):
            if all(hasattr(lib, f"_ZGV{isa}N{width}{args}_{name}") for isa, width in isas):
                found.add(name)
    return frozenset(found)


def source_for(specs) -> str:
    """The translation unit of ``(spec, function name)`` pairs."""
    return codegen.unit(list(specs), vector_math(), compiler.OPENMP)


def build_kernels(kernels: List[FusedKernel]) -> bool:
    """Compile and bind ``kernels``; False (they run as torch ops) when that is impossible.

    Kernels with equal specs share one C function (an unrolled loop makes the same kernel
    once per step), and those that also share shapes share one launcher."""
    if not kernels:
        return False
    if not compiler.compiler_available():
        compiler.warn_if_unavailable()
        logs.kernels.info("%d fused group(s) run as torch ops: no C compiler (or "
                          "options.compiler is off)", len(kernels))
        return False
    names = {}
    for k in kernels:
        k.name = k.__name__ = names.setdefault(k.spec, f"tg_kernel_{len(names)}")
    source = source_for(names.items())
    background = options.kernel_build == "background"
    try:
        if background:          # the library if it is built already, else None
            job = compiler.job(source, name="graph")
            library = compiler.build_job(job, cached_only=True)
        else:
            library = compiler.build(source, name="graph")
    except compiler.KernelBuildError as e:
        report_failure(e, len(kernels), stacklevel=3)
        return False
    if library is None:         # not built yet: the first calls run torch ops meanwhile
        from . import background as worker
        worker.submit(job, kernels, lambda lib: _bind(kernels, lib, source))
        return True
    _bind(kernels, library, source)
    return True


def _bind(kernels: List[FusedKernel], library, source: str) -> None:
    launchers = {}
    for k in kernels:
        k.bind(library, source)
        k.share_launcher(launchers)


def report_failure(e: "compiler.KernelBuildError", count: int, stacklevel: int) -> None:
    """A failed build: the log, and a KernelWarning (once per subject when it would fail
    for every kernel)."""
    logs.kernels.info("%d fused group(s) run as torch ops: %s", count, e)
    message = f"tograph: could not compile fused kernels, running them as torch ops: {e}"
    if e.subject is None:
        warnings.warn(message, KernelWarning, stacklevel=stacklevel)
    else:
        warn_once(("build", e.subject), message)
