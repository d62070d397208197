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
and ``FORMAT_VERSION``; a read-only or unusable directory is handled by ``cache_dirs``
(read-only: used as it is, new entries in a per-user fallback). Each ``.so`` ends in a
trailer: the key it was built for and sha256 of key and ELF bytes, then a magic, checked
before dlopen against the file's own name: a damaged entry, or an intact one of another key
copied over it, is discarded (one ``KernelWarning`` per path) and rebuilt, never mapped
(dlopen of garbage raises OSError, but dlopen of a truncated ELF dies of SIGBUS). Builds
write a temporary file in the same directory and ``os.replace`` it, so no reader sees half a
file; a process builds under the entry's lock file (``build_lock``), so processes wanting
one kernel at once compile it once, and threads under a per-key lock. A missing or failing
compiler gives one ``KernelWarning`` per command (``library.build_kernels``); the kernels
run as torch ops.
"""
from __future__ import annotations

import ctypes
import dataclasses
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
from . import background, build_lock, cache_dirs
from .notices import warn_once

# -fno-trapping-math lets gcc if-convert NaN-aware selects (relu, clamp) into vector blends
# (values unchanged: only FP exception flags are given up); -ffp-contract=off keeps a*b+c
# rounded twice, as torch's separate ops round it. -fno-builtin-{sin,cos}[f]: gcc merges a
# sin(x) and a cos(x) of one x (a backward kernel recomputing sin's forward next to its
# derivative) into one scalar sincosf call, which stops the loop vectorizing (loop_100's
# backward at 65537 elements: 99 scalar sincosf per element, 4x eager's time); not builtins,
# they stay separate calls of their declared vector versions (libmvec).
FLAGS = ("-O3", "-march=native", "-fopenmp-simd", "-fno-math-errno", "-fno-trapping-math",
         "-ffp-contract=off", "-fno-builtin-sinf", "-fno-builtin-cosf", "-fno-builtin-sin",
         "-fno-builtin-cos", "-fPIC", "-shared", "-std=c11")
LIBS = ("-lmvec", "-lm")
FORMAT_VERSION = 2              # bump when the cache layout or trailer changes
COMPILE_TIMEOUT_S = 120
LOCK_TIMEOUT_S = COMPILE_TIMEOUT_S + 30     # then a waiter builds the kernel itself

# trailer appended to the .so: sha256(key + elf bytes), the key (64 hex digits), _MAGIC
_MAGIC = b"TGKERNEL"
_KEY_LEN = 64
_TRAILER = 32 + _KEY_LEN + len(_MAGIC)


class KernelBuildError(RuntimeError):
    """No compiler, compiler disabled, compilation failed, or the result would not load.

    ``subject``: what failed, when it would fail again for every kernel (the compiler
    command, the cache directory), so that it is reported once, not once per graph; None
    for failures of one kernel."""

    def __init__(self, message: str, subject: str | None = None):
        super().__init__(message)
        self.subject = subject


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


def _compiler(cc: str) -> tuple[tuple[str, ...], str] | None:
    """(argv, identity) of the compiler named by ``cc`` ("" = gcc, then cc), or None.

    Identity is the resolved path and the first line of ``--version``, then ``| gnu`` for
    GNU's compiler (whatever its name: Debian's ``cc`` is gcc); run once per process per
    ``cc``."""
    found = _probe_compiler(cc)
    return None if isinstance(found, str) else found


@functools.lru_cache(maxsize=None)
def _probe_compiler(cc: str) -> tuple[tuple[str, ...], str] | str:
    """``_compiler``'s answer, or why there is none (a sentence naming the command)."""
    candidates = [shlex.split(cc)] if cc else [["gcc"], ["cc"]]
    problems = []
    for argv in candidates:
        path = shutil.which(argv[0]) if argv else None
        if path is None:
            problems.append(f"{argv[0] if argv else cc!r} was not found")
            continue
        argv = [path, *argv[1:]]
        try:
            done = subprocess.run([*argv, "--version"], capture_output=True, text=True,
                                  timeout=30)
        except (OSError, subprocess.SubprocessError) as e:
            problems.append(f"'{shlex.join(argv)} --version' could not run ({e})")
            continue
        if done.returncode == 0:
            version = (done.stdout.splitlines() or [""])[0]
            gnu = "Free Software Foundation" in done.stdout and "clang" not in done.stdout
            return tuple(argv), f"{' '.join(argv)} | {version}" + (" | gnu" if gnu else "")
        said = (done.stderr.strip() or done.stdout.strip()).splitlines()
        problems.append(f"'{shlex.join(argv)} --version' exited {done.returncode}"
                        + (f": {said[0]}" if said else ""))
    which = f"CC={cc!r}" if cc else "gcc, then cc"
    return f"no C compiler ({which}): {'; '.join(problems)}"


def compiler_available() -> bool:
    """Whether ``build`` can run: ``options.compiler`` is on and a C compiler exists."""
    return bool(options.compiler) and _compiler(options.cc) is not None


def warn_if_unavailable() -> None:
    """One KernelWarning per process per ``CC`` when the compiler is on but none works
    (missing, or ``--version`` fails); silent when the user turned compiling off."""
    if not options.compiler:
        return
    problem = _probe_compiler(options.cc)
    if isinstance(problem, str):
        warn_once(("cc", options.cc),
                  f"tograph: {problem}. Fused kernels run as torch ops (same results, "
                  f"slower); set CC to a working C compiler, or TOGRAPH_NO_COMPILER=1 to "
                  f"turn compiling off.")


@functools.lru_cache(maxsize=None)
def cpu_fields() -> dict:
    """The first processor's ``/proc/cpuinfo`` fields (empty where there is none)."""
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
    return fields


@functools.lru_cache(maxsize=None)
def cpu_key() -> str:
    """The CPU a ``-march=native`` binary is tied to: model name and feature flags."""
    fields = cpu_fields()
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


# ---------------------------------------------------------------- build and load

_loaded: dict[str, ctypes.CDLL] = {}          # cache path -> library, this process
_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


def _key(source: str, flags: tuple[str, ...], identity: str) -> str:
    parts = [f"tograph-kernel-v{FORMAT_VERSION}", identity, " ".join(flags + LIBS),
             cpu_key(), source]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _trailer(body: bytes, key: str) -> bytes:
    """What ends the entry of ``key`` whose ELF bytes are ``body``."""
    named = key.encode("ascii")
    assert len(named) == _KEY_LEN
    return hashlib.sha256(named + body).digest() + named + _MAGIC


def _problem(path: str) -> str | None:
    """None when the file's trailer matches its ELF bytes and names the key the file is
    named for (``<key>.so``); otherwise what is wrong with it."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        return f"cannot be read ({e.strerror or e})"
    if len(data) <= _TRAILER or not data.endswith(_MAGIC):
        return "is damaged (no trailer: truncated or not a kernel)"
    body, trailer = data[:-_TRAILER], data[-_TRAILER:]
    named = trailer[32:32 + _KEY_LEN]
    key = os.path.basename(path)[:-len(".so")]
    if named != key.encode("ascii", "replace"):
        return (f"holds the kernel of another key ({named[:12].decode('ascii', 'replace')}"
                f"...), not its own ({key[:12]}...)")
    if trailer != _trailer(body, key):
        return "is damaged (checksum mismatch)"
    return None


def _intact(path: str) -> bool:
    """The file exists, is whole and is the kernel of the key it is named for."""
    return _problem(path) is None


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


def _background_priority() -> tuple[str, ...]:
    """``nice -n 10`` for a compiler the background worker starts: on a machine with as
    many busy threads as cores (torch's own, running the first calls on their torch ops),
    a compiler at the same priority took its share of them and stretched those calls (a
    cold LLaMA first call: 1.0 s of the caller's CPU, 1.6 s wall); at a lower priority it
    uses the idle time. A synchronous build, which the caller waits for, keeps its
    priority."""
    if threading.current_thread().name != background.WORKER_NAME:
        return ()
    nice = shutil.which("nice")
    return (nice, "-n", "10") if nice else ()


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
    command = [*_background_priority(), *argv, *flags, "-pipe", c_path, "-o", tmp, *LIBS]
    if logs.kernels.isEnabledFor(logging.DEBUG):
        logs.kernels.debug("kernel %s: %s", name, shlex.join(command))
    try:
        try:
            done = subprocess.run(command, capture_output=True, text=True,
                                  timeout=COMPILE_TIMEOUT_S)
        except (OSError, subprocess.SubprocessError) as e:
            raise KernelBuildError(f"could not run the C compiler for kernel {name!r}: {e}\n"
                                   f"command: {shlex.join(command)}", argv[0]) from e
        if done.returncode != 0:
            raise KernelBuildError(
                f"the C compiler failed on kernel {name!r} (exit {done.returncode}); "
                f"source kept in {c_path}\ncommand: {shlex.join(command)}\n"
                f"{done.stderr.strip()}", argv[0])
        with open(tmp, "rb+") as f:
            body = f.read()
            f.write(_trailer(body, os.path.basename(so_path)[:-len(".so")]))
        os.replace(tmp, so_path)
    except BaseException:
        _remove(tmp)
        raise


def _load(path: str) -> ctypes.CDLL | None:
    """The library at ``path`` if it is intact, its own key's, and loads; otherwise None,
    the file removed (where the directory allows) and one KernelWarning per path.

    dlopen of garbage raises OSError, but a truncated ELF kills the process with SIGBUS
    inside dlopen (measured): the trailer check keeps such a file from being mapped."""
    if not os.path.exists(path):
        return None
    problem = _problem(path)
    if problem is None:
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            problem = f"does not load ({str(e).replace(path + ': ', '')})"
    _remove(path)
    warn_once(("entry", path), f"tograph: the kernel cache entry {path} {problem}; "
                               f"it is not used, the kernel is built again")
    return None


def _locate(source: str, name: str) -> tuple[tuple[str, ...], tuple[str, ...], str]:
    """(compiler argv, flags, cache key) for ``source``; KernelBuildError if no compiler."""
    if not options.compiler:
        raise KernelBuildError(f"kernel {name!r}: the C compiler is disabled "
                               "(options.compiler is False, TOGRAPH_NO_COMPILER=1)")
    found = _probe_compiler(options.cc)
    if isinstance(found, str):
        raise KernelBuildError(f"kernel {name!r}: {found}")
    argv, identity = found
    flags = _flags(identity)
    return argv, flags, _key(source, flags, identity)


def build(source: str, name: str = "kernel") -> ctypes.CDLL:
    """Compile C ``source`` into a shared library and load it; cached by content.

    Raises KernelBuildError (with the compiler's message) when the compiler is disabled
    or missing, compilation fails, or the built library will not load; callers fall back
    to torch ops."""
    return build_job(job(source, name))


@dataclasses.dataclass(frozen=True)
class Job:
    """A build with what it needs from ``options`` resolved (compiler, flags, cache
    places): ``build_job`` may run it in another thread, whatever the options are then."""
    argv: tuple
    flags: tuple
    key: str
    where: cache_dirs.Places
    source: str
    name: str


def job(source: str, name: str = "kernel") -> Job:
    """The build of ``source`` under the current options; KernelBuildError if no compiler."""
    argv, flags, key = _locate(source, name)
    return Job(argv, flags, key, cache_dirs.places(options.cache_dir), source, name)


def build_job(job: Job, cached_only: bool = False) -> ctypes.CDLL | None:
    """``build`` of a ``Job``; with ``cached_only``, None instead of compiling (the
    library when this process or the disk cache has it)."""
    argv, flags, key, where, source, name = (job.argv, job.flags, job.key, job.where,
                                             job.source, job.name)
    memo = os.path.join(where.write, key)   # per cache directory: a new one starts cold
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
            lib = _find(where.read, key, name)
            if lib is None and cached_only:
                return None
            if lib is None:
                so_path = memo + ".so"
                with build_lock.held(memo + ".lock", LOCK_TIMEOUT_S):
                    lib = _find((where.write,), key, name)    # built while we waited?
                    if lib is None:
                        start = time.perf_counter()
                        _compile(argv, flags, source, so_path, name)
                        lib = ctypes.CDLL(so_path)
                        logs.kernels.info(
                            "kernel %s: cache miss, compiled in %.2f s (key %.12s, %s)",
                            name, time.perf_counter() - start, key, so_path)
        except OSError as e:        # will not load, or the cache directory failed us
            raise KernelBuildError(f"kernel {name!r}: {e}", where.write) from e
        _loaded[memo] = lib
        return lib


def _find(directories: tuple[str, ...], key: str, name: str) -> ctypes.CDLL | None:
    """The first good entry of ``key`` in ``directories``, loaded; None when there is none."""
    for directory in directories:
        so_path = os.path.join(directory, key + ".so")
        lib = _load(so_path)
        if lib is not None:
            logs.kernels.info("kernel %s: cache hit on disk (key %.12s, %s)", name, key,
                              so_path)
            return lib
    return None
