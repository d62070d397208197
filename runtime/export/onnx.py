"""``to_onnx``: a graph (or a converted function) as an ONNX model with ``If`` and ``Loop``
nodes, checked with ``onnx.checker`` (optional extra ``onnx``: onnx, onnxruntime,
onnxscript).

The graph is first exported with ``to_torch_export`` (``torch.cond``/``torch.while_loop``),
then translated by torch's ONNX exporter, which maps ``cond`` to ``If`` and
``while_loop`` to ``Loop``. An op with no ONNX mapping raises ``ExportError`` naming the
op and the user's line. Python numbers among the outputs become 0-d tensors. Inputs are named after the function's tensor arguments (or the
graph's placeholders); dynamic dimensions stay symbolic in the model's input shapes.
"""
from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import traceback
from typing import Any, Optional, Sequence

from .torch_export import ExportError, export_program, node_of_trace
from ..source_info import format_location

# how torch's ONNX exporter names the op it could not translate, most precise first
_FAILED_OP = (re.compile(r"No ONNX function found for <OpOverload\(op='\w+\.(\w+)'"),
              re.compile(r"target=torch\.ops\.\w+\.(\w+)\."),
              re.compile(r"(?:aten|prims)(?:\.|::)(\w+)"))


def _require_onnx():
    try:
        import onnx          # noqa: F401
        import onnxscript     # noqa: F401
    except ImportError as e:
        raise ImportError(f"to_onnx needs the optional extra 'onnx' (pip install "
                          f"'tograph[onnx]': onnx, onnxscript, onnxruntime): {e}") from None


def _unmapped(ep, error: BaseException) -> ExportError:
    """The error for an op the ONNX exporter could not translate, at the user's line."""
    text = "".join(traceback.format_exception(error))
    names = next((set(p.findall(text)) for p in _FAILED_OP if p.search(text)), set())
    names.discard("default")
    for module in ep.graph_module.modules():
        for fx_node in getattr(getattr(module, "graph", None), "nodes", ()):
            target = str(getattr(fx_node, "target", ""))
            if fx_node.op == "call_function" and any(n in target for n in names):
                node = _inner(node_of_trace(fx_node.meta.get("stack_trace", "")), names)
                where = format_location(node.location) + ": " if node is not None else ""
                op = f"{node.op!r} (aten {target})" if node is not None else f"aten {target}"
                return ExportError(f"{where}op {op} has no ONNX mapping; it cannot be "
                                   f"exported to ONNX (torch.export/.pt2 can carry it)")
    plain = re.sub(r"\x1b\[[0-9;]*m", "", str(error)).strip()
    first = plain.splitlines()[0] if plain else type(error).__name__
    return ExportError(f"ONNX export failed: {first}")


def _inner(node, names):
    """Inside a branch or loop body the trace ends at the ``cond``/``while`` call: the node
    of the failing op is the one in its subgraphs with the op's name."""
    if node is None or not node.subgraphs:
        return node
    for sub in node.subgraphs:
        for inner in sub.walk():
            if inner.op in names or any(inner.op in n or n in inner.op for n in names
                                        if len(inner.op) > 2):
                return inner
    return node


def to_onnx(source, path, example_args: Sequence[Any] = (), example_kwargs=None,
            dynamic="auto", opset: Optional[int] = None) -> str:
    """Write ``source`` (a ``runtime.Graph`` or ``@to_graph`` function) as an ONNX model
    to ``path``; returns the path. See ``to_torch_export`` for ``dynamic``."""
    _require_onnx()
    import onnx
    import torch
    ep, names = export_program(source, example_args, example_kwargs, dynamic,
                               numbers_as_tensors=True)
    quiet = io.StringIO()
    registry_log = logging.getLogger("torch.onnx._internal.exporter._registration")
    level = registry_log.level
    registry_log.setLevel(logging.ERROR)      # "torchvision is not installed", per op
    try:
        with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
            program = torch.onnx.export(ep, tuple(), dynamo=True, opset_version=opset,
                                        optimize=False,    # its inliner breaks nested If
                                        input_names=names)
    except Exception as e:
        raise _unmapped(ep, e) from e
    finally:
        registry_log.setLevel(level)
    program.save(os.fspath(path))
    onnx.checker.check_model(os.fspath(path), full_check=True)
    return os.fspath(path)

