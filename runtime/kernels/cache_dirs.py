"""Where compiled kernels are read from and written to.

    where = places(options.cache_dir)      # Places(read=(dir, ...), write=dir)

The kernel directory is ``<cache_dir>/kernels`` (``TOGRAPH_CACHE_DIR``, default
``~/.cache/tograph``), created when missing. It is, depending on what this process may do
with it:

- writable: the one place, read and written;
- read-only (a pre-built cache in a container image, a read-only mount): its entries are
  loaded as they are, and new entries go to the user's fallback directory, which is also
  searched (first: an entry rebuilt there replaces a bad read-only one);
- unusable (a file, a path under a file, no permission to list or create it): the fallback
  directory alone.

The fallback is ``<tempdir>/tograph-<uid>/kernels`` (``tempfile.gettempdir()``: ``$TMPDIR``
or ``/tmp``), shared by this user's processes and kept between them; it is made ``0700`` and
used only when it is a real directory owned by this user that nobody else may write to.
Failing that, the process keeps its kernels in a directory of its own, removed at exit.
A read-only or unusable cache directory, and a fallback that is not the user's own, each
give one ``KernelWarning`` per process naming the path and where kernels go instead.
Choices are made once per cache directory per process (``_places`` and ``_fallbacks``, under
``_guard``).
"""
from __future__ import annotations

import atexit
import os
import shutil
import stat
import tempfile
import threading
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

from .notices import warn_once

FALLBACK_BASE: Optional[str] = None     # where the user fallback lives; None: the tempdir


@dataclass(frozen=True)
class Places:
    read: Tuple[str, ...]       # directories searched for an entry, in this order
    write: str                  # where new entries are built (one of ``read``)


_places: Dict[str, Places] = {}
_fallbacks: Dict[str, str] = {}
_guard = threading.Lock()


def places(cache_dir: str) -> Places:
    """The kernel directories for the cache root ``cache_dir`` ("" = no persistent cache)."""
    found = _places.get(cache_dir)
    if found is None:
        with _guard:
            found = _places.get(cache_dir)
            if found is None:
                found = _places[cache_dir] = _choose(cache_dir)
    return found


def _choose(cache_dir: str) -> Places:
    if not cache_dir:
        fallback = _fallback()
        return Places((fallback,), fallback)
    wanted = os.path.join(cache_dir, "kernels")
    state, reason = _probe(wanted)
    if state == "writable":
        return Places((wanted,), wanted)
    fallback = _fallback()
    if state == "read-only":
        warn_once(("cache-dir", wanted),
                  f"tograph: the kernel cache {wanted} is read-only ({reason}): its kernels "
                  f"are used as they are, new ones are written to {fallback}")
        return Places((fallback, wanted), fallback)
    warn_once(("cache-dir", wanted),
              f"tograph: the kernel cache directory {wanted} cannot be used ({reason}); "
              f"kernels are kept in {fallback} instead (TOGRAPH_CACHE_DIR chooses another "
              f"directory)")
    return Places((fallback,), fallback)


def _probe(directory: str) -> Tuple[str, str]:
    """("writable" | "read-only" | "unusable", why not writable)."""
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as e:
        if not os.path.isdir(directory):
            exists = os.path.lexists(directory)
            return "unusable", "it is not a directory" if exists else _strerror(e)
    if not os.access(directory, os.R_OK | os.X_OK):
        return "unusable", "no permission to read it"
    problem = _write_problem(directory)
    return ("writable", "") if problem is None else ("read-only", problem)


def _write_problem(directory: str) -> Optional[str]:
    """None when a file can be created in ``directory``, else why not."""
    try:
        with tempfile.TemporaryFile(dir=directory):
            return None
    except OSError as e:
        return _strerror(e)


def _strerror(e: OSError) -> str:
    return (e.strerror or str(e)).lower()


def _fallback() -> str:
    base = FALLBACK_BASE or tempfile.gettempdir()
    if base not in _fallbacks:
        _fallbacks[base] = _user_dir(base) or _process_dir(base)
    return _fallbacks[base]


def _user_dir(base: str) -> Optional[str]:
    """``<base>/tograph-<uid>/kernels`` when it is safely this user's own, else None."""
    top = os.path.join(base, f"tograph-{os.getuid()}")
    try:
        os.makedirs(top, mode=0o700, exist_ok=True)
        info = os.lstat(top)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or \
                info.st_mode & 0o022:
            warn_once(("cache-dir", top),
                      f"tograph: {top} is not a directory of this user's own (owner, "
                      f"permissions); kernels of this process are kept apart")
            return None
        kernels = os.path.join(top, "kernels")
        os.makedirs(kernels, mode=0o700, exist_ok=True)
    except OSError:
        return None
    return kernels if _write_problem(kernels) is None else None


def _process_dir(base: str) -> str:
    try:
        directory = tempfile.mkdtemp(prefix="tograph-kernels-", dir=base)
    except OSError:
        directory = tempfile.mkdtemp(prefix="tograph-kernels-")
    atexit.register(shutil.rmtree, directory, True)
    return directory
