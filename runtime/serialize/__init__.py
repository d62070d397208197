"""Save and load graphs: one self-contained file, no pickle, no code run when loading.

File layout (all integers little-endian)::

    b"TOGRAPH\\0"  u32 version  u32 flags(0)  u64 json_length   -- 24-byte header
    JSON document (UTF-8, json_length bytes)                   -- the graph tree
    tensor data (raw little-endian bytes of every constant tensor, back to back)

The JSON document is ``{"format", "version", "graph", "tensors", "data_bytes"}``. A graph
is ``{"name", "nodes", "outputs", "captures"}``; a node is ``{"name", "op", "target",
"args", "kwargs", "attrs", "meta", "location", "impure", "subgraphs"}``. Values are JSON
scalars (str, int, finite float, bool, null), arrays for lists, and one-key tagged
objects for everything else: ``{"tuple": [...]}``, ``{"dict": [[k, v], ...]}``,
``{"slice": [start, stop, step]}``, ``{"ellipsis": null}``, ``{"float": "nan"}``,
``{"complex": [re, im]}``, ``{"dtype": "float32"}``, ``{"device": "cpu"}``,
``{"layout": "strided"}``, ``{"memory_format": "contiguous_format"}``,
``{"pytype": "float"}``, ``{"namedtuple": [type name, [fields], [items]]}``,
``{"node": name}`` (a value of the same graph) and ``{"tensor": index}``. A tensor entry
records dtype, shape, requires_grad, whether it was a Parameter, and its byte range in the
data section.

A node's target is saved as a qualified name ("torch.matmul", "torch.Tensor.__add__",
"torch.Tensor.T.__get__", "runtime.graph_ops.dim_size"). Loading resolves names only
through an allow-list: the operations torch's ``__torch_function__`` protocol reports
(``torch.overrides``), less a few that call Python callables or unpickle, plus the
functions in ``runtime.graph_ops.REGISTRY``. Nothing is imported or looked up by an
arbitrary name, and a loaded graph is checked (structure, then ``verify``) before it is
returned: a malformed, truncated or tampered file raises ``GraphLoadError``.
"""
from .reader import load, loads
from .targets import resolve_target, target_name
from .writer import dumps, save

__all__ = ["dumps", "load", "loads", "resolve_target", "save", "target_name"]
