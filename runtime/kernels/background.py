"""Kernels compiled in a background thread while the first calls run their torch ops.

    background.submit(job, kernels, bind)   # compile job in the worker; bind(lib) when done
    background.swap(kernel, namespace, name, predicate)  # lowered code: patch when bound
    background.wait(timeout=None) -> bool    # every submitted build done (True) or not

A cold first call would otherwise wait for the C compiler (0.3-1 s for a transformer's
kernels). With ``options.kernel_build == "background"`` (the default; ``TOGRAPH_KERNEL_BUILD=
sync`` turns it off) ``library.build_kernels`` binds a kernel at once only when its library
is loaded already or on disk; otherwise the kernels are marked ``building`` and the build
is queued to one worker thread (one compiler process at a time: the machine's other cores
run the calls). Until then a fused kernel runs its group as torch ops (``torch_fn``, the
path it takes without a compiler: equal to eager); when the library is built the worker
binds the kernels and patches the generated code of every graph lowered meanwhile, so
later calls pay nothing for the swap:

- The executor names each ``building`` kernel it calls through a global of the lowered
  module, and registers that global with ``swap``; once bound, the global becomes the
  kernel's generated launcher (or, for a loop or branch test, its ``predicate`` returning
  a Python bool). Rebinding a module global is atomic: a call running at that moment
  uses either function, both right.
- ``swap`` and the binding take one lock, so a graph lowered just after the build
  finished is patched at once.

A build that fails warns as a synchronous one does (``library``); its kernels stay on
torch ops. At exit, queued builds are dropped and the running one is waited for (its
result is cached for the next process). A forked child starts its own worker for the
builds still pending.
"""
from __future__ import annotations

import atexit
import collections
import os
import threading
from typing import Callable, Deque, List, Optional, Tuple

from .. import logs

_lock = threading.Lock()
_idle = threading.Condition(_lock)
_queue: Deque[Tuple[object, list, Callable]] = collections.deque()
_running = [0]                       # builds taken by the worker and not finished
_worker: List[Optional[threading.Thread]] = [None]
_closing = [False]
WORKER_NAME = "tograph-kernel-build"    # the worker thread's name (its compilers run niced)


def submit(job, kernels: list, bind: Callable) -> None:
    """Compile ``job`` (``compiler.Job``) in the worker, then ``bind(library or None)``
    (None: the build failed and was reported) and apply the swaps of ``kernels``."""
    for k in kernels:
        k.building = True
        k._swaps = []
    with _lock:
        _queue.append((job, kernels, bind))
        if _worker[0] is None or not _worker[0].is_alive():
            _worker[0] = threading.Thread(target=_work, name=WORKER_NAME,
                                          daemon=True)
            _worker[0].start()


def swap(kernel, namespace: dict, name: str, predicate: bool) -> None:
    """Make ``namespace[name]`` the launcher (``predicate``: the predicate, when it has
    one) of ``kernel`` once it is bound; at once if it is bound already."""
    with _lock:
        if getattr(kernel, "building", False):
            kernel._swaps.append((namespace, name, predicate))
            return
    _patch(kernel, namespace, name, predicate)


def pending() -> int:
    """Builds queued or running."""
    with _lock:
        return len(_queue) + _running[0]


def wait(timeout: Optional[float] = None) -> bool:
    """Wait until every build submitted so far is done (bound or failed); False when
    ``timeout`` seconds passed first."""
    with _idle:
        return _idle.wait_for(lambda: not _queue and not _running[0], timeout)


def _patch(kernel, namespace: dict, name: str, predicate: bool) -> None:
    fn = (kernel.predicate if predicate else None) or kernel.launcher
    namespace[name] = fn


def _work() -> None:
    from . import compiler
    while True:
        with _lock:
            if not _queue or _closing[0]:
                _worker[0] = None
                _idle.notify_all()
                return
            job, kernels, bind = _queue.popleft()
            _running[0] += 1
        library = None
        try:
            library = compiler.build_job(job)
        except compiler.KernelBuildError as e:
            _report(e, len(kernels))
        except Exception as e:  # noqa: BLE001 -- a worker must not die with builds queued
            logs.kernels.info("background kernel build failed: %r", e)
        try:
            if library is not None:
                bind(library)
        finally:
            with _lock:
                swaps = []
                for k in kernels:
                    swaps += [(k, *s) for s in k._swaps]
                    k._swaps = []
                    k.building = False
                for kernel, namespace, name, predicate in swaps:
                    _patch(kernel, namespace, name, predicate)
                _running[0] -= 1
                _idle.notify_all()


def _report(error, count: int) -> None:
    from .library import report_failure
    report_failure(error, count, stacklevel=1)


def _at_exit() -> None:
    """Drop the builds not started; wait for the one running (cached for next time)."""
    with _lock:
        _closing[0] = True
        dropped = list(_queue)
        _queue.clear()
    for _, kernels, _ in dropped:
        for k in kernels:
            k.building = False
    wait()


def _after_fork() -> None:
    """The child has no worker: forget the parent's lock state and build what was pending
    in a worker of its own."""
    global _lock, _idle
    _lock = threading.Lock()
    _idle = threading.Condition(_lock)
    _worker[0] = None
    _running[0] = 0             # (the parent's running build is its own: those kernels
    if _queue:                  # stay on torch ops here)
        _worker[0] = threading.Thread(target=_work, name=WORKER_NAME, daemon=True)
        _worker[0].start()


atexit.register(_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
