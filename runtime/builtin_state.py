"""The observable state of objects that keep it outside a ``__dict__``.

``python_state.fingerprint`` compares plain objects by their ``__dict__``; many objects a
program changes hold their state in C instead: an iterator's position, a generator's
frame, ``itertools.count``'s next value, a numpy array's bytes, a ``StringIO``'s text, a
``deque``'s items, the slots of a class with ``__slots__``. ``state_of(value)`` gives
that state as a tuple of atoms and of inner objects for the fingerprint to walk (an
``enumerate``'s inner iterator, a generator's local variables), or None for an object
it does not know (compared by identity).

``restorer(value)`` gives a function putting back the state ``value`` holds now, where
that can be done (a list iterator's index, an array's bytes, a buffer's text), so that
a trace that changed it and falls back leaves it as the eager run must find it.

Torch-free, and numpy is used only when the program has imported it.
"""
from __future__ import annotations

import array
import collections
import functools
import io
import sys
import types
from typing import Callable, Optional, Tuple

from .plain_containers import elements, list_copy
from .plain_containers import put_back as put_items_back

_BYTES_KEPT = 1 << 16      # arrays larger than this are compared by a digest of their bytes
_GENERATORS = (types.GeneratorType, types.CoroutineType, types.AsyncGeneratorType)


@functools.lru_cache(maxsize=4096)
def slot_names(cls) -> Tuple[str, ...]:
    """The names of the ``__slots__`` of ``cls`` and its bases (private names mangled)."""
    names = []
    for c in cls.__mro__:
        slots = c.__dict__.get("__slots__", ())
        for s in (slots,) if isinstance(slots, str) else slots:
            if s in ("__dict__", "__weakref__"):
                continue
            names.append(f"_{c.__name__.lstrip('_')}{s}" if s.startswith("__") and
                         not s.endswith("__") else s)
    return tuple(names)


_MISSING = ("<unset>",)


def state_of(v) -> Optional[tuple]:
    """``v``'s state outside its ``__dict__`` (see the module docstring), or None."""
    cls = type(v)
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(v, (numpy.ndarray, numpy.generic)):
        return _array(v, numpy)
    if isinstance(v, (range, slice)):
        return (v.start, v.stop, v.step)
    if isinstance(v, (io.StringIO, io.BytesIO)):
        return ("closed",) if v.closed else (v.getvalue(), v.tell())
    if isinstance(v, io.IOBase):
        return _stream(v)
    if isinstance(v, collections.deque):        # (not a subclass's own methods)
        return (v.maxlen, tuple(elements(v)))
    if isinstance(v, array.array):
        return (v.typecode, v.tobytes())
    if isinstance(v, _GENERATORS):
        return _generator(v)
    if hasattr(cls, "__next__") and not hasattr(v, "__dict__"):
        return _iterator(v)
    slots = slot_names(cls) if not hasattr(v, "__dict__") else ()
    if slots:
        return tuple((name, getattr(v, name, _MISSING)) for name in slots)
    return None


def _array(v, numpy) -> tuple:
    if v.dtype.hasobject:
        return (v.shape, "O", tuple(v.ravel().tolist()))
    data = v.tobytes()
    if len(data) > _BYTES_KEPT:
        import hashlib
        data = hashlib.blake2b(data, digest_size=16).digest()
    return (getattr(v, "shape", ()), v.dtype.str, data)


def _stream(v) -> Optional[tuple]:
    """A file's position (where it can tell): what a write or a read moves."""
    try:
        if v.closed:
            return ("closed",)
        return ("at", v.tell()) if v.seekable() else None
    except (OSError, ValueError, AttributeError):
        return None


def _generator(g) -> tuple:
    """Where a generator is suspended and what its locals hold (a ``for`` inside it over
    a list keeps its iterator on the frame's stack, out of sight: its loop variable shows
    the step, unless the items repeat)."""
    frame = getattr(g, "gi_frame", None) or getattr(g, "cr_frame", None) or \
        getattr(g, "ag_frame", None)
    if frame is None:
        return ("done",)
    running = getattr(g, "gi_running", None) or getattr(g, "cr_running", None)
    inner = getattr(g, "gi_yieldfrom", None) or getattr(g, "cr_await", None)
    return (frame.f_lasti, bool(running), dict(frame.f_locals), inner)


def _iterator(it) -> Optional[tuple]:
    """A C iterator's position: what its ``__reduce__`` gives (the list and index of a
    list iterator, ``count``'s next value, an ``enumerate``'s counter and inner iterator),
    else its ``repr`` where that shows state, else its length hint."""
    # (itertools' __reduce__ warns from 3.12 on: not asked there, and no catch_warnings,
    # whose exit resets every module's once-per-location warning registry)
    if not (sys.version_info >= (3, 12) and type(it).__module__ == "itertools"):
        try:
            reduced = it.__reduce__()
            if isinstance(reduced, tuple) and len(reduced) >= 2:
                return reduced[1:]
        except Exception:  # noqa: BLE001 -- a C object that cannot be reduced
            pass
    text = repr(it)
    if " at 0x" not in text:
        return ("repr", text)
    hint = getattr(it, "__length_hint__", None)
    if hint is not None:
        try:
            return ("left", hint())
        except Exception:  # noqa: BLE001
            return None
    return None


def restorer(v) -> Optional[Callable[[], None]]:
    """A function putting ``v``'s current state back, or None where it cannot be put
    back (a generator's frame, ``count``) or needs nothing (an immutable value)."""
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(v, numpy.ndarray):
        if not v.flags.writeable:
            return None
        saved = v.copy()
        return lambda: numpy.copyto(v, saved)
    if isinstance(v, (io.StringIO, io.BytesIO)) and not v.closed:
        text, at = v.getvalue(), v.tell()

        def put_back():
            if not v.closed:
                v.seek(0)
                v.truncate()
                v.write(text)
                v.seek(at)
        return put_back
    if isinstance(v, collections.deque):
        items = list_copy(v)
        return lambda: put_items_back(v, items)
    if isinstance(v, array.array):
        saved = v.tobytes()

        def put_back():
            del v[:]
            v.frombytes(saved)
        return put_back
    if not hasattr(v, "__dict__") and hasattr(type(v), "__setstate__") and \
            hasattr(type(v), "__next__") and not isinstance(v, _GENERATORS):
        state = _iterator(v)
        if state is not None and len(state) == 2 and isinstance(state[1], int):
            index = state[1]        # (a list, tuple, range or str iterator: its index)
            return lambda: v.__setstate__(index)
    slots = state_of(v) if not hasattr(v, "__dict__") and slot_names(type(v)) else None
    if slots:
        def put_back():
            for name, value in slots:
                if value is _MISSING:
                    if hasattr(v, name):
                        object.__delattr__(v, name)
                else:
                    object.__setattr__(v, name, value)
        return put_back
    return None
