"""tograph's transpiler: Python source with tensor control flow -> graph-building code.

    from transpiler import to_graph, to_code, ConversionError, FallbackWarning
    from transpiler import compare, run_eagerly       # debugging: see transpiler.debugging

Importing the package imports neither torch nor ``runtime``: the names that need them
(``to_graph``, ``compare``, ...) load their module on first use (``__getattr__`` below), so
``tograph --help`` and the torch-free AST layers start fast.
"""
from typing import TYPE_CHECKING

from .errors import ConversionError
from .run_eagerly import run_eagerly, running_eagerly

_LAZY = {   # name -> the module that holds it (imported, with torch, on first use)
    "FallbackWarning": "api", "GraphFunction": "api", "RetracingWarning": "api",
    "to_code": "api", "to_graph": "api", "ToGraphModule": "module_wrapper",
    "compare": "debugging.compare",
}

__all__ = ["ConversionError", "FallbackWarning", "GraphFunction", "RetracingWarning",
           "ToGraphModule", "compare", "run_eagerly", "running_eagerly", "to_code", "to_graph"]


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


if TYPE_CHECKING:       # for type checkers and editors: the names as eager imports
    from .api import FallbackWarning, GraphFunction, RetracingWarning, to_code, to_graph
    from .debugging.compare import compare
    from .module_wrapper import ToGraphModule
