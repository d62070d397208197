"""Build generated C source into a shared object, cached on disk by content.

    lib = build(source, name="fused_add")      # ctypes.CDLL; KernelBuildError on failure
    lib.fused_add.argtypes = [...]

Flags: ``FLAGS`` (+ ``GCC_FLAGS`` for gcc, + ``-fopenmp`` when ``OPENMP``), linked with
``LIBS``. Never
``-ffast-math``: NaN/Inf must behave as in torch. Vector math comes from glibc's libmvec: a
source declares the libm functions it uses so that gcc may call their vector variants::

    #pragma omp declare simd notinbranch
    float tanhf(float);

Parallel loops (``OPENMP``): True when torch has loaded GNU OpenMP under its standard name
``libgomp.so.1``. Kernels are then built with ``-fopenmp``, and the dynamic loader binds
their ``libgomp.so.1`` to the copy torch already mapped (matched by SONAME), so one OpenMP
runtime serves both; a second runtime in one process was measured up to 10x slower. When
False, ``-fopenmp-simd`` keeps only the ``simd`` half of every pragma: the same source
runs on one thread. Codegen may therefore always write::

    void k(const float *restrict a, float *restrict out, int64_t n, int nthreads) {
      #pragma omp parallel for simd schedule(static) num_threads(nthreads) if(n >= 32768)
      for (int64_t i = 0; i < n; i++) out[i] = ...;
    }

and pass ``torch.get_num_threads()`` as ``nthreads``: without the ``num_threads`` clause the
team size is the calling thread's OpenMP setting, which torch sets only in its own threads.
The ``if`` clause keeps small tensors off the fork/join. Stick to ``parallel for`` with a
static schedule: torch's libgomp may predate newer OpenMP entry points (torch 2.13's stops
at GOMP_5.0), and a kernel needing one fails to load (KernelBuildError).

Cache: ``<options.cache_dir>/kernels/<key>.so`` (and ``<key>.c`` to read), key = sha256 of
source, flags, compiler identity, ``cpu_key()`` (``-march=native`` ties a binary to the CPU)
and ``FORMAT_VERSION``. Each ``.so`` ends in a trailer (sha256 of the ELF bytes + magic),
checked before dlopen: a damaged entry is rebuilt, never mapped (dlopen of garbage raises
OSError, but dlopen of a truncated ELF dies of SIGBUS). Builds write a temporary file in the
same directory and ``os.replace`` it, so processes compiling one kernel at once all
succeed. An unwritable cache directory falls back to a per-process temporary directory.
"""
from __future__ import annotations

import atexit
import ctypes
import functools
import hashlib
import logging
import os
import platform
import shlex
import shutil
import subprocess
import tempfile
import threading
import time

import torch  # noqa: F401  -- maps torch's libgomp before any kernel asks for libgomp.so.1

from .. import logs
from ..options import options

# -fno-trapping-math lets gcc if-convert NaN-aware selects (relu, clamp) into vector blends
# (values unchanged: only FP exception flags are given up); -ffp-contract=off keeps a*b+c
# rounded twice, as torch's separate ops round it.
FLAGS = ("-O3", "-march=native", "-fopenmp-simd", "-fno-math-errno", "-fno-trapping-math",
         "-ffp-contract=off", "-fPIC", "-shared", "-std=c11")
LIBS = ("-lmvec", "-lm")
FORMAT_VERSION = 1              # bump when the cache layout or trailer changes
COMPILE_TIMEOUT_S = 120

_MAGIC = b"TGKERNEL"            # trailer: sha256(elf bytes) + _MAGIC, appended to the .so
_TRAILER = 32 + len(_MAGIC)


class KernelBuildError(RuntimeError):
    """No compiler, compiler disabled, compilation failed, or the result would not load."""


# ---------------------------------------------------------------- the process's environment

def _openmp_runtime() -> str | None:
    """Path of the GNU OpenMP runtime already mapped into this process, or None.

    Only ``libgomp.so.1`` counts: a vendored copy under another name (``libgomp-1a2b.so.1``)
    would not satisfy a kernel's ``libgomp.so.1``, and the system copy would load beside it."""
    try:
        with open("/proc/self/maps") as maps:
            lines = maps.read().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and os.path.basename(parts[5]) == "libgomp.so.1":
            return parts[5]
    return None


OPENMP: bool = _openmp_runtime() is not None


@functools.lru_cache(maxsize=None)
def _compiler(cc: str) -> tuple[tuple[str, ...], str] | None:
    """(argv, identity) of the compiler named by ``cc`` ("" = gcc, then cc), or None.

    Identity is the resolved path and the first line of ``--version``, then ``| gnu`` for
    GNU's compiler (whatever its name: Debian's ``cc`` is gcc); run once per process per
    ``cc``."""
    candidates = [shlex.split(cc)] if cc else [["gcc"], ["cc"]]
    for argv in candidates:
        path = shutil.which(argv[0]) if argv else None
        if path is None:
            continue
        argv = [path, *argv[1:]]
        try:
            done = subprocess.run([*argv, "--version"], capture_output=True, text=True,
                                  timeout=30)
        except (OSError, subprocess.SubprocessError):
            continue
        if done.returncode == 0:
            version = (done.stdout.splitlines() or [""])[0]
            gnu = "Free Software Foundation" in done.stdout and "clang" not in done.stdout
            return tuple(argv), f"{' '.join(argv)} | {version}" + (" | gnu" if gnu else "")
    return None


def compiler_available() -> bool:
    """Whether ``build`` can run: ``options.compiler`` is on and a C compiler exists."""
    return bool(options.compiler) and _compiler(options.cc) is not None


@functools.lru_cache(maxsize=None)
def cpu_key() -> str:
    """The CPU a ``-march=native`` binary is tied to: model name and feature flags."""
    fields = {}
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if not line.strip():
                    break                               # first processor only
                name, _, value = line.partition(":")
                fields[name.strip()] = value.strip()
    except OSError:
        pass
    keep = ("vendor_id", "model name", "flags", "CPU implementer", "CPU part", "Features")
    described = "\n".join(f"{k}: {fields[k]}" for k in keep if k in fields)
    return described or f"{platform.machine()} {platform.processor()}"


# gcc only: no vectorized copy of a loop's remainder (at most 7 floats, left to the scalar
# loop): gcc compiles each kernel body once less, measured 0.34 s -> 0.24 s for a
# 400-op kernel (the 100-step loop), the cold first call's largest cost
GCC_FLAGS = ("--param=vect-epilogues-nomask=0",)


def _flags(identity: str = "") -> tuple[str, ...]:
    """``FLAGS`` for the compiler ``identity`` names (``_compiler``'s second value)."""
    gnu = identity.endswith(" | gnu")
    return FLAGS + (GCC_FLAGS if gnu else ()) + (("-fopenmp",) if OPENMP else ())


# ---------------------------------------------------------------- cache directory

_dirs: dict[str, str] = {}      # options.cache_dir -> the kernel directory actually used


def _usable(directory: str) -> bool:
    try:
        os.makedirs(directory, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            return True
    except OSError:
        return False


@functools.lru_cache(maxsize=None)
def _fallback_dir() -> str:
    directory = tempfile.mkdtemp(prefix="tograph-kernels-")
    atexit.register(shutil.rmtree, directory, True)
    return directory


def _kernel_dir() -> str:
    root = options.cache_dir
    if root not in _dirs:
        wanted = os.path.join(root, "kernels") if root else ""
        _dirs[root] = wanted if wanted and _usable(wanted) else _fallback_dir()
    return _dirs[root]


# ---------------------------------------------------------------- build and load

_loaded: dict[str, ctypes.CDLL] = {}          # cache path -> library, this process
_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


def _key(source: str, flags: tuple[str, ...], identity: str) -> str:
    parts = [f"tograph-kernel-v{FORMAT_VERSION}", identity, " ".join(flags + LIBS),
             cpu_key(), source]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _intact(path: str) -> bool:
    """The file exists and its trailer matches its ELF bytes."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return False
    body, digest, magic = data[:-_TRAILER], data[-_TRAILER:-len(_MAGIC)], data[-len(_MAGIC):]
    return (len(data) > _TRAILER and magic == _MAGIC
            and hashlib.sha256(body).digest() == digest)


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


def _temp_beside(path: str) -> str:
    """A new empty file in ``path``'s directory, to be renamed onto ``path`` when complete."""
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".", suffix=".tmp",
                               dir=os.path.dirname(path))
    os.close(fd)
    return tmp


def _compile(argv: tuple[str, ...], flags: tuple[str, ...], source: str, so_path: str,
             name: str) -> None:
    """Compile into a temporary file beside ``so_path``, add the trailer, then rename.

    The source is kept beside it as ``<key>.c`` (also renamed into place), so compiler
    messages point at a file one can open."""
    c_path = so_path[:-3] + ".c"
    tmp = _temp_beside(c_path)
    try:
        with open(tmp, "w") as f:
            f.write(source)
        os.replace(tmp, c_path)
    except BaseException:
        _remove(tmp)
        raise
    tmp = _temp_beside(so_path)
    command = [*argv, *flags, "-pipe", c_path, "-o", tmp, *LIBS]
    if logs.kernels.isEnabledFor(logging.DEBUG):
        logs.kernels.debug("kernel %s: %s", name, shlex.join(command))
    try:
        try:
            done = subprocess.run(command, capture_output=True, text=True,
                                  timeout=COMPILE_TIMEOUT_S)
        except (OSError, subprocess.SubprocessError) as e:
            raise KernelBuildError(f"could not run the C compiler for kernel {name!r}: {e}\n"
                                   f"command: {shlex.join(command)}") from e
        if done.returncode != 0:
            raise KernelBuildError(
                f"the C compiler failed on kernel {name!r} (exit {done.returncode}); "
                f"source kept in {c_path}\ncommand: {shlex.join(command)}\n"
                f"{done.stderr.strip()}")
        with open(tmp, "rb+") as f:
            body = f.read()
            f.write(hashlib.sha256(body).digest() + _MAGIC)
        os.replace(tmp, so_path)
    except BaseException:
        _remove(tmp)
        raise


def _load(path: str) -> ctypes.CDLL | None:
    """The library at ``path`` if it is intact and loads; otherwise remove it, None.

    dlopen of garbage raises OSError, but a truncated ELF kills the process with SIGBUS
    inside dlopen (measured): the trailer check keeps such a file from being mapped."""
    if not os.path.exists(path):
        return None
    if _intact(path):
        try:
            return ctypes.CDLL(path)
        except OSError:
            pass
    _remove(path)
    return None


def _locate(source: str, name: str) -> tuple[tuple[str, ...], tuple[str, ...], str]:
    """(compiler argv, flags, cache key) for ``source``; KernelBuildError if no compiler."""
    if not options.compiler:
        raise KernelBuildError(f"kernel {name!r}: the C compiler is disabled "
                               "(options.compiler is False, TOGRAPH_NO_COMPILER=1)")
    found = _compiler(options.cc)
    if found is None:
        tried = repr(options.cc) if options.cc else "gcc, cc"
        raise KernelBuildError(f"kernel {name!r}: no C compiler found (tried {tried})")
    argv, identity = found
    flags = _flags(identity)
    return argv, flags, _key(source, flags, identity)


def build(source: str, name: str = "kernel") -> ctypes.CDLL:
    """Compile C ``source`` into a shared library and load it; cached by content.

    Raises KernelBuildError (with the compiler's message) when the compiler is disabled
    or missing, compilation fails, or the built library will not load; callers fall back
    to torch ops."""
    argv, flags, key = _locate(source, name)
    directory = _kernel_dir()
    memo = os.path.join(directory, key)     # per cache directory: a new one starts cold
    lib = _loaded.get(memo)
    if lib is not None:
        logs.kernels.debug("kernel %s: loaded already (key %.12s)", name, key)
        return lib
    with _locks_guard:
        lock = _locks.setdefault(key, threading.Lock())
    with lock:
        if memo in _loaded:
            return _loaded[memo]
        try:
            so_path = memo + ".so"
            lib = _load(so_path)
            if lib is None:
                start = time.perf_counter()
                _compile(argv, flags, source, so_path, name)
                lib = ctypes.CDLL(so_path)
                logs.kernels.info("kernel %s: cache miss, compiled in %.2f s (key %.12s, %s)",
                                  name, time.perf_counter() - start, key, so_path)
            else:
                logs.kernels.info("kernel %s: cache hit on disk (key %.12s, %s)", name, key,
                                  so_path)
        except OSError as e:        # will not load, or the cache directory failed us
            raise KernelBuildError(f"kernel {name!r}: {e}") from e
        _loaded[memo] = lib
        return lib
