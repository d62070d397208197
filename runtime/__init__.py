"""tograph runtime: the graph IR, symbolic tracing, control flow ops, executor, TF1-style API.

    import torch, runtime
    a = runtime.placeholder(torch.float32, shape=(2, 2), name="input_a")
    b = runtime.constant([[1.0, 2.0], [3.0, 4.0]], name="const_b")
    c = torch.matmul(a, b)
    with runtime.Session() as sess:
        sess.run(c, feed_dict={a: [[2.0, 0.0], [0.0, 2.0]]})

This package never imports ``transpiler``.
"""
from .control_flow import cond
from .while_loop import while_loop
from .errors import (BranchMismatchError, FeedError, GraphError, GraphLoadError,
                     TracingError)
from .graph import Graph, Node
from .logs import set_logs       # TOGRAPH_LOGS, read at import: see runtime.logs
from .meta import TensorMeta
from .serialize import load
from .session import (Session, constant, get_default_graph, placeholder,
                      reset_default_graph)
from .symbolic import SymbolicTensor, is_symbolic
from .verifier import verify

__all__ = [
    "BranchMismatchError", "FeedError", "Graph", "GraphError", "GraphLoadError", "Node",
    "Session", "SymbolicTensor", "TensorMeta", "TracingError", "cond", "constant",
    "get_default_graph", "is_symbolic", "load", "placeholder", "reset_default_graph",
    "set_logs", "verify", "while_loop",
]
