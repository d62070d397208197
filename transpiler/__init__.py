"""tograph's transpiler: Python source with tensor control flow -> graph-building code.

    from transpiler import to_graph, to_code, ConversionError, FallbackWarning
"""
from .api import FallbackWarning, GraphFunction, RetracingWarning, to_code, to_graph
from .errors import ConversionError

__all__ = ["ConversionError", "FallbackWarning", "GraphFunction", "RetracingWarning",
           "to_code", "to_graph"]
