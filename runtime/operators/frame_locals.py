"""``tg.frame_locals``: what ``locals()``, ``vars()`` or ``dir()`` (no arguments) give in
converted code (see ``transpiler.converters.frame_locals``): the caller's frame's
variables among the user function's own names, bound ones only, in CPython's order
(``dir()``: their names, sorted). The converted code's own names (``tg``, placeholders
of variables not bound yet) are left out. Called from another frame than the converted
function's (a branch's or loop body's function, a lambda, a nested ``def``), the frame
holds other names: refused (GraphError), so the call runs eagerly."""
from __future__ import annotations

import builtins
import sys

from ..errors import GraphError
from ..source_info import format_location, user_location
from .special_values import UndefinedReturn, Unread, _Unbound

_READERS = (builtins.locals, builtins.vars, builtins.dir)
_NOT_BOUND = (_Unbound, UndefinedReturn, Unread)


def frame_locals(reader, names, scope):
    if not builtins.any(reader is r for r in _READERS):
        return reader()                 # (the name means the user's own function)
    frame = sys._getframe(1)
    if names is None or frame.f_code.co_name != scope:
        location = user_location()
        error = GraphError(f"{format_location(location)}: `{reader.__name__}()` inside a "
                           f"converted branch, loop, comprehension, lambda or nested function "
                           f"reads a generated function's frame, not the user's")
        error.location = location
        raise error
    found = frame.f_locals
    bound = {n: found[n] for n in names if n in found and not isinstance(found[n], _NOT_BOUND)}
    return sorted(bound) if reader is builtins.dir else bound
