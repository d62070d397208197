"""Guard reads done in C: dict version tags and closure cells, many in one call.

Guards (``module_state``, ``guard_tags``) compare the version tag (PEP 509) of every dict
a trace read -- a module's ``__dict__``, ``_parameters``, ``_buffers``, ``_modules``, its
config's ``__dict__``, the globals it named: 230 dicts for GPT-2 tiny, 520 for T5 -- and
what each closure cell it read holds (``Bindings``: 69 cells for GPT-2). Read in Python
(``tuple(map(dict_version, dicts)) == recorded``) that is cheap in a loop (~10 µs), but a
call's guard runs right after the previous call's graph pushed those dicts, cells, int
objects and tuples out of the cache: measured after a graph run, GPT-2's guards took
~250 µs, a quarter of its call. Here each check is one C call over two flat arrays (the
objects' addresses and the recorded words), every object's header prefetched first.

``Words`` compares one machine word per object, at a fixed offset in its C struct:
``DictVersions`` the dict's ``ma_version_tag``, ``CellRefs`` the cell's ``ob_ref`` (by
identity, as ``is``). The offsets are checked once against Python's own answers on live
objects (``dict_version``, ``cell_contents``); where they differ (another Python build),
the C compiler is missing or the small library is not built yet (it builds in the
background), ``unchanged`` is None and the caller takes its Python comparison. The
objects (and the cells' recorded values) are kept alive by the caller or here, so an
address is never reused while compared.
"""
from __future__ import annotations

import ctypes
import sys
from typing import Optional, Sequence

from .kernels.built_once import built_once

try:                                    # CPython's dict version tag (PEP 509), as torch
    from torch._C._dynamo.guards import dict_version as _dict_version   # reads it
except ImportError:                     # pragma: no cover - another torch / Python
    _dict_version = None

_WORD = ctypes.sizeof(ctypes.c_void_p)
_HEAD = 2 * _WORD                       # PyObject_HEAD: refcount, type
_TAG = _HEAD + ctypes.sizeof(ctypes.c_ssize_t)  # PyDictObject: head, ma_used, ma_version_tag
_REF = _HEAD                            # PyCellObject: head, ob_ref

_SOURCE = """
#include <stdint.h>
int words_unchanged(const char *const *objects, const uint64_t *words, long n, long offset) {
    for (long i = 0; i < n; i++) __builtin_prefetch(objects[i] + offset);
    for (long i = 0; i < n; i++)
        if (*(const uint64_t *)(objects[i] + offset) != words[i]) return 0;
    return 1;
}
"""


def _bind(library):
    # no argtypes: each ``Words`` passes its two arrays and two ``c_long``s made once, which
    # ctypes hands over as they are (0.2 us a call; converting four arguments through
    # argtypes took 0.5 us more, the whole check for a small module's guard)
    fn = library["words_unchanged"]
    fn.restype = ctypes.c_int
    return fn if _layout_is_known() else None


def _word(obj, offset: int) -> int:
    return ctypes.c_uint64.from_address(id(obj) + offset).value


def _layout_is_known() -> bool:
    """Whether tags and cell contents sit at ``_TAG`` / ``_REF`` here (compared with
    Python's answers on dicts of several sizes, before and after a change, and cells)."""
    if _dict_version is None or sys.implementation.name != "cpython" or _WORD != 8:
        return False
    samples = [{}, {"a": 1}, dict.fromkeys(range(50)), {"a": 1}.copy()]
    samples[1]["b"] = 2
    value = object()
    cell = (lambda: value).__closure__[0]
    return all(_word(d, _TAG) == _dict_version(d) for d in samples) and \
        _word(cell, _REF) == id(value)


_checker = built_once("c_guards", lambda: _SOURCE, _bind, background=True)


class Words:
    """``objects`` each holding ``words`` at ``offset`` (kept: see the module's doc)."""
    __slots__ = ("objects", "words", "offset", "_call")

    def __init__(self, objects: Sequence, words: Sequence[int], offset: int):
        self.objects, self.words, self.offset = tuple(objects), tuple(words), offset
        self._call = None           # (the C check, its arguments), once it is built

    def unchanged(self) -> Optional[bool]:
        """Whether every object still holds its word; None: not known here (no C)."""
        call = self._call
        if call is None:
            check = _checker()
            if check is None:
                return None
            n = len(self.objects)
            call = self._call = (check, ((ctypes.c_void_p * max(n, 1))(*map(id, self.objects)),
                                         (ctypes.c_uint64 * max(n, 1))(*self.words),
                                         ctypes.c_long(n), ctypes.c_long(self.offset)))
        return call[0](*call[1]) == 1


class DictVersions(Words):
    """The recorded version tags of ``dicts`` (by default, their tags now)."""
    __slots__ = ()

    def __init__(self, dicts: Sequence[dict], versions: Optional[Sequence[int]] = None):
        dicts = tuple(dicts)
        super().__init__(dicts, tuple(map(_dict_version, dicts)) if versions is None
                         else versions, _TAG)

    def unchanged(self) -> bool:
        call = self._call
        if call is not None:            # (Words.unchanged's C call, one frame fewer)
            return call[0](*call[1]) == 1
        same = Words.unchanged(self)
        return tuple(map(_dict_version, self.objects)) == self.words if same is None \
            else same

    def now(self) -> "DictVersions":
        """The same dicts with the tags they have now."""
        return DictVersions(self.objects)


class CellRefs(Words):
    """Whether each cell holds its recorded value (``empty``: recorded as empty), by
    identity; None where C cannot tell (the caller compares in Python)."""
    __slots__ = ("values",)

    def __init__(self, cells: Sequence, values: Sequence, empty):
        self.values = tuple(values)             # (kept alive: their ids are compared)
        super().__init__(cells, [0 if v is empty else id(v) for v in self.values], _REF)
