"""tograph's transpiler: Python source with tensor control flow -> graph-building code.

    from transpiler import to_graph, to_code, ConversionError, FallbackWarning
    from transpiler import compare, run_eagerly       # debugging: see transpiler.debugging
"""
from .api import FallbackWarning, GraphFunction, RetracingWarning, to_code, to_graph
from .debugging.compare import compare
from .errors import ConversionError
from .module_wrapper import ToGraphModule
from .run_eagerly import run_eagerly, running_eagerly

__all__ = ["ConversionError", "FallbackWarning", "GraphFunction", "RetracingWarning",
           "ToGraphModule", "compare", "run_eagerly", "running_eagerly", "to_code", "to_graph"]
