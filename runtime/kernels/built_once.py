"""A C library built on first use, once per process: ``built_once(name, source, bind)`` is a
function returning ``bind(library)`` -- the library's functions with their ctypes
signatures set -- or None where no C compiler is found or the build (or ``bind``) fails,
so the caller takes its Python / torch path. Threads share the one build.

With ``background=True`` and ``options.kernel_build == "background"`` a library that is not
on disk yet is compiled by ``background``'s worker: the function returns None (the caller's
torch path) until the build is bound, so a cold first call does not wait for the compiler."""
from __future__ import annotations

import threading
from typing import Callable, Optional, TypeVar

T = TypeVar("T")


def built_once(name: str, source: Callable[[], str], bind: Callable[[object], T],
               background: bool = False) -> Callable[[], Optional[T]]:
    done: list = []             # [bind's result] or [None], once built
    queued: list = []           # [True] once handed to the background worker
    lock = threading.Lock()

    def bound(library) -> None:             # the worker's build, done
        try:
            fns = bind(library)
        except Exception:
            fns = None
        with lock:
            if not done:
                done.append(fns)

    def functions() -> Optional[T]:
        if not done:
            if queued:
                return None
            with lock:
                if not done and not queued and background and _queue_build(name, source,
                                                                          bound):
                    queued.append(True)
                if not done and not queued:
                    from .compiler import build, compiler_available
                    if not compiler_available():
                        return None     # asked again later: options.compiler may change
                    try:
                        fns = bind(build(source(), name=name))
                    except Exception:   # a failed build: the caller's fallback
                        fns = None
                    done.append(fns)
        return done[0] if done else None

    return functions


def _queue_build(name: str, source: Callable[[], str], bound: Callable) -> bool:
    """True when the library is not on disk and its build went to the background worker
    (which calls ``bound(library)`` when it is built); False: build it here, now."""
    from ..options import options
    if options.kernel_build != "background":
        return False
    from . import background, compiler
    try:
        if not compiler.compiler_available():
            return False
        job = compiler.job(source(), name=name)
        if compiler.build_job(job, cached_only=True) is not None:
            return False                # on disk: loading it here costs little
    except Exception:
        return False
    background.submit(job, [], bound)
    return True
