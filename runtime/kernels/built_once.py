"""A C library built on first use, once per process: ``built_once(name, source, bind)`` is a
function returning ``bind(library)`` -- the library's functions with their ctypes
signatures set -- or None where no C compiler is found or the build (or ``bind``) fails,
so the caller takes its Python / torch path. Threads share the one build."""
from __future__ import annotations

import threading
from typing import Callable, Optional, TypeVar

T = TypeVar("T")


def built_once(name: str, source: Callable[[], str],
               bind: Callable[[object], T]) -> Callable[[], Optional[T]]:
    done: list = []             # [bind's result] or [None], once built
    lock = threading.Lock()

    def functions() -> Optional[T]:
        if not done:
            with lock:
                if not done:
                    fns = None
                    try:
                        from .compiler import build, compiler_available
                        if compiler_available():
                            fns = bind(build(source(), name=name))
                    except Exception:   # no compiler, a failed build: the caller's fallback
                        fns = None
                    done.append(fns)
        return done[0]

    return functions
