"""Where in the user's source a graph operation came from.

The location of an operation is the innermost stack frame that belongs to user code:
frames inside ``runtime/``, ``transpiler/`` and ``torch`` are skipped. Frames of generated
(converted) code are mapped back to the user's file and line through source maps that the
code generator registers here.
"""
from __future__ import annotations

import linecache
import os
import sys
import weakref

from typing import Dict, FrozenSet, Optional, Tuple

Location = Tuple[str, int]

_PKG_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_SKIP_DIRS = tuple(
    os.path.join(_PKG_ROOT, d) + os.sep for d in ("runtime", "transpiler")
)
_TORCH_DIR = None
_STDLIB = os.path.dirname(os.__file__) + os.sep
_SOURCE_MAPS: Dict[str, Dict[int, Location]] = {}
_HIDDEN: Dict[str, FrozenSet[str]] = {}     # generated file -> its functions no eager frame


def register_source_map(filename: str, line_map: Dict[int, Location], owner=None,
                        hidden: FrozenSet[str] = frozenset()) -> None:
    """Declare that lines of generated file ``filename`` come from user locations.
    ``owner``: the object the generated code lives as long as (its code object): when it
    is freed, so are the map and the file's ``linecache`` text (``forget``). ``hidden``:
    the names of the functions the file's converters made up that eager has no frame of
    (a loop's or a branch's body: ``generated_scope``)."""
    if owner is not None and filename in _SOURCE_MAPS:
        return                      # registered already, with its owner
    _SOURCE_MAPS[filename] = dict(line_map)
    if hidden:
        _HIDDEN[filename] = frozenset(hidden)
    _LIBRARY.pop(filename, None)
    if owner is not None:
        weakref.finalize(owner, forget, filename)


def forget(filename: str) -> None:
    """Drop what is kept for generated file ``filename``: its source map, its
    ``linecache`` text, what ``_is_library`` noted of it."""
    _SOURCE_MAPS.pop(filename, None)
    _HIDDEN.pop(filename, None)
    _LIBRARY.pop(filename, None)
    linecache.cache.pop(filename, None)


def generated_scope(code) -> bool:
    """Whether ``code`` is a function converters made up (a loop's or a branch's body):
    its frames are part of the frame of the function around it, as eager runs it."""
    return code.co_name in _HIDDEN.get(code.co_filename, ())


def map_location(filename: str, lineno: int) -> Optional[Location]:
    """The user location of a generated line, or the location itself for user files."""
    line_map = _SOURCE_MAPS.get(filename)
    if line_map is not None:
        return line_map.get(lineno)
    return (filename, lineno)


_LIBRARY: Dict[str, bool] = {}      # filename -> _is_library (files with no source map)


def _is_library(filename: str) -> bool:
    known = _LIBRARY.get(filename)
    if known is not None:
        return known
    if filename in _SOURCE_MAPS:
        return False
    result = _is_library_uncached(filename)
    if len(_LIBRARY) < 100_000:
        _LIBRARY[filename] = result
    return result


def _is_library_uncached(filename: str) -> bool:
    global _TORCH_DIR
    if _TORCH_DIR is None:
        import torch
        _TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
    if filename in _SOURCE_MAPS:
        return False
    if filename.startswith("<") and filename not in _SOURCE_MAPS:
        return filename.startswith("<frozen") or filename == "<string>"
    if filename.startswith(_SKIP_DIRS) or filename.startswith(_TORCH_DIR):
        return True
    return filename.startswith(_STDLIB) and "site-packages" not in filename


def library_file(filename: str) -> bool:
    """Whether ``filename`` is torch's, the standard library's or tograph's own: a location
    there (a converted ``Sequential.forward``'s line) is not the user's."""
    return _is_library(filename)


def user_location(skip: int = 1) -> Optional[Location]:
    """The innermost user (or converted-user) frame on the stack, as (file, line)."""
    frame = sys._getframe(skip)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not _is_library(filename):
            loc = map_location(filename, frame.f_lineno)
            if loc is not None:
                return loc
        frame = frame.f_back
    return None


def location_of_traceback(tb) -> Optional[Location]:
    """The innermost user location in a traceback (for errors raised while running)."""
    found = None
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if not _is_library(filename):
            loc = map_location(filename, tb.tb_lineno)
            if loc is not None:
                found = loc
        tb = tb.tb_next
    return found


def reentered_call_site(tb) -> Optional[Location]:
    """In a traceback through converted code, the user location of the call that first
    re-enters a converted function already on the stack (a recursive call), or None."""
    seen = set()
    previous = None
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if filename in _SOURCE_MAPS:
            code = tb.tb_frame.f_code
            if code in seen and previous is not None:
                return previous
            seen.add(code)
            previous = map_location(filename, tb.tb_lineno) or previous
        tb = tb.tb_next
    return None


def format_location(loc: Optional[Location]) -> str:
    return "<unknown location>" if loc is None else f"{loc[0]}:{loc[1]}"
