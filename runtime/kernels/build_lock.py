"""One builder per kernel across processes: an exclusive ``flock`` on ``<key>.lock``.

    with held(os.path.join(directory, key + ".lock"), timeout=LOCK_TIMEOUT_S):
        ...look for the entry again; build it only if still missing...

A process that finds the lock taken waits (polling) until the holder lets go, then finds the
holder's entry. A holder that dies releases its lock with its file descriptors, so a lock is
only ever stale when its holder hangs: after ``timeout`` seconds the waiter builds anyway
(one ``KernelWarning`` per lock file) -- harmless, since entries are renamed into place
whole and no reader sees half a file. The holder removes the lock file before unlocking; a
waiter that then gets the lock of the removed file sees that the path no longer names it and
locks the new one, so no lock files are left behind. Where a lock file cannot be made or
``flock`` is unsupported (some network file systems) nothing is locked: builds stay atomic,
only perhaps repeated. Threads of one process are kept apart by the caller's per-key lock.
"""
from __future__ import annotations

import contextlib
import os
import time
from typing import Iterator, Optional

from .notices import warn_once

try:
    import fcntl
except ImportError:             # not POSIX: no cross-process lock
    fcntl = None

POLL_S = 0.02


@contextlib.contextmanager
def held(path: str, timeout: float) -> Iterator[bool]:
    """Hold the lock file ``path`` (True), or nothing after ``timeout`` s or where locking is
    impossible (False); the body runs either way."""
    fd = _acquire(path, timeout)
    try:
        yield fd is not None
    finally:
        if fd is not None:
            _remove(path)
            os.close(fd)                # unlocks


def _acquire(path: str, timeout: float) -> Optional[int]:
    if fcntl is None:
        return None
    deadline = time.monotonic() + timeout
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError:
            return None
        try:
            if not _lock(fd, deadline):
                os.close(fd)
                warn_once(("lock", path),
                          f"tograph: waited {timeout:g} s for the kernel lock {path} (another "
                          f"process building the same kernel); building it here too")
                return None
            if _names(path, fd):
                return fd
        except OSError:                 # flock unsupported here
            os.close(fd)
            return None
        os.close(fd)                    # the holder removed that file: lock the new one


def _lock(fd: int, deadline: float) -> bool:
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(POLL_S)


def _names(path: str, fd: int) -> bool:
    """Whether ``path`` still names the file open as ``fd``."""
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path))
    except FileNotFoundError:
        return False


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass
