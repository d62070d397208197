"""Running the original function eagerly as its caller would have called it.

When a ``to_graph`` function runs its Python instead of a graph (a fallback, ``run_eagerly``),
the call comes from tograph's own frames (``GraphFunction.__call__`` and the functions behind
it), where eager's came from the user's line. What looks one frame up would see tograph:
``warnings.warn(..., stacklevel=2)`` and ``logger.info(..., stacklevel=2)`` would name
``transpiler/api.py``, ``sys._getframe(1)`` and ``inspect.stack()[1]`` its functions.

``call`` makes the call from a one-line function compiled as the caller's line: its file,
line, function name, qualified name and globals (so a warning's module, registry and the
filters matching them are the caller's too). One frame up from the function, user code sees
its caller's file, line and name, as eagerly; its locals are not the caller's, and frames
further up still pass through tograph.
"""
import sys
import types
from collections import OrderedDict

from runtime.source_info import _SKIP_DIRS

_CODES = OrderedDict()      # (file, line, name, qualname) -> code of a caller's line
_LIMIT = 1024


def call(fn, args: tuple, kwargs: dict):
    """``fn(*args, **kwargs)``, called from a frame standing for the nearest caller outside
    tograph (a plain call where there is none: called by the interpreter, no line)."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_SKIP_DIRS):
        frame = frame.f_back
    if frame is None or frame.f_lineno is None:
        return fn(*args, **kwargs)
    code, line, globals_ = frame.f_code, frame.f_lineno, frame.f_globals
    del frame                   # (no cycle through the caller's frame)
    stand_in = types.FunctionType(_line_code(code.co_filename, line, code.co_name,
                                             code.co_qualname), globals_)
    return stand_in(fn, args, kwargs)


def _line_code(filename: str, line: int, name: str, qualname: str) -> types.CodeType:
    key = (filename, line, name, qualname)
    code = _CODES.get(key)
    if code is None:
        source = "\n" * (line - 1) + "def _(fn, args, kwargs): return fn(*args, **kwargs)\n"
        module = compile(source, filename, "exec", dont_inherit=True)
        code = next(c for c in module.co_consts if isinstance(c, types.CodeType))
        code = code.replace(co_name=name, co_qualname=qualname)
        _CODES[key] = code
        if len(_CODES) > _LIMIT:
            _CODES.popitem(last=False)
    return code
