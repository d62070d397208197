"""Warnings about building and caching kernels, each given once per process per subject.

    warn_once(("cache-dir", path), f"tograph: the kernel cache {path} ...")

A server compiles kernels for weeks: a broken compiler, an unusable cache directory or a bad
cache entry is said once, naming the command or path (the subject), and the kernels still
run (as torch ops, or from another directory). Repeats go to the ``tograph.kernels`` log at
INFO. The set of subjects said is shared by all threads, under a lock.
"""
from __future__ import annotations

import logging
import threading
import warnings
from typing import Hashable

log = logging.getLogger("tograph.kernels")

_said: set = set()
_guard = threading.Lock()


class KernelWarning(RuntimeWarning):
    """Kernels could not be compiled or cached as configured; results are unchanged."""


def warn_once(subject: Hashable, message: str, stacklevel: int = 3) -> bool:
    """Warn ``message`` (a KernelWarning) unless ``subject`` was warned about already in
    this process; True when it warned."""
    with _guard:
        first = subject not in _said
        _said.add(subject)
    if first:
        warnings.warn(message, KernelWarning, stacklevel=stacklevel)
    else:
        log.info("%s", message)
    return first
