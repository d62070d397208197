"""The line that sets the attribute a refused side effect changed.

    def epoch(x, y):                          class EarlyStopper:
        ...                                       def early_stop(self, loss):
        stop = stopper.early_stop(loss)               ...
                                                      self.status = "worse"    # <- named

When a trace changes an object it keeps across calls (``the function mutates closure
variable 'stopper'``) the fallback names the line to change. The function's own lines
name only ``stopper``; the write itself is often in a method or helper it calls, where
the object is ``self``. ``store_line`` finds, in the code of the functions the trace met
(the converted function first) and then of the object's methods (code run eagerly is
not met), the first instruction that stores one of the changed attributes
(``self.status = ...``, ``self.counter += 1``).
"""
from __future__ import annotations

import dis
import inspect
import re
from typing import Iterable, List, Optional, Tuple

from runtime.region_numbers import number
from runtime.source_info import _is_library


def changed_keys(before, after, obj=None) -> List[str]:
    """The attribute names whose values two shallow prints (``("obj", ((name, id),
    ...))``) of ``obj`` hold differently; first those that now hold no number (a number,
    or a graph value standing for one, may be a counter the graph carries: the reason is
    more likely the other)."""
    if not (isinstance(before, tuple) and isinstance(after, tuple) and
            before[:1] == after[:1] == ("obj",)):
        return []
    a, b = dict(before[1]), dict(after[1])
    keys = [k for k in list(a) + [k for k in b if k not in a] if a.get(k) != b.get(k)]
    held = getattr(obj, "__dict__", None) or {}
    return sorted(keys, key=lambda k: number(held.get(k)))


def path_keys(where: str) -> List[str]:
    """The last attribute name of an access path (``.meter.count`` -> ``count``)."""
    names = re.findall(r"\.(\w+)", where or "")
    return names[-1:]


def method_codes(obj) -> list:
    """The code of the functions defined by the classes of ``obj`` (its methods; those of
    builtins and torch not), ``__init__`` last (it sets every attribute); [] for None."""
    if obj is None or isinstance(obj, type):
        return []
    found = [f for klass in type(obj).__mro__
             if klass.__module__.split(".")[0] not in ("builtins", "torch", "types")
             for f in vars(klass).values() if inspect.isfunction(f)]
    return [f.__code__ for f in sorted(found, key=lambda f: f.__name__ == "__init__")]


def installed(code) -> bool:
    """Code of torch, the standard library or an installed package (site-packages): not
    the user's line to change."""
    return _is_library(code.co_filename) or any(
        part in code.co_filename for part in ("/site-packages/", "/dist-packages/"))


def store_line(codes: Iterable, names) -> Optional[Tuple[str, int]]:
    """(file, line) of the first ``STORE_ATTR`` in ``codes`` (and the code nested in them)
    of the first of ``names`` stored there, or None."""
    codes = list(codes)
    for name in names:
        found = _store(codes, name)
        if found is not None:
            return found
    return None


def _store(codes, name: str) -> Optional[Tuple[str, int]]:
    return first_instruction(codes, lambda i: i.opname == "STORE_ATTR" and i.argval == name)


def first_instruction(codes, test) -> Optional[Tuple[str, int]]:
    """(file, line) of the first instruction of ``codes`` (and the code nested in them)
    for which ``test(instruction)`` holds, or None."""
    for code in codes:
        for instr in dis.get_instructions(code):
            if test(instr):
                line = getattr(instr.positions, "lineno", None) or instr.starts_line
                if line:
                    return code.co_filename, line
        nested = first_instruction([c for c in code.co_consts if inspect.iscode(c)], test)
        if nested is not None:
            return nested
    return None
