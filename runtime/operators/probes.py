"""``tg.probe(name, value, loop)``: what converted code calls after binding a probed
variable (``f.probe(*args, names=[...])``); ``tg.probe(None, None, loop)`` starts a
loop body (a tick: see ``runtime.probe_log``). A Python value is recorded at once; while a
graph is being traced, a ``probe_value`` node records the run-time value on every run
(inside a loop body: on every iteration); a list grown in a tensor loop is recorded as
its stacked tensor. A value a graph cannot carry (any other object) is recorded as it was
seen while tracing.
"""
from __future__ import annotations

from .. import graph_ops
from ..probe_log import record
from ..symbolic import current_graph, dispatch_record
from ..tensor_list import TensorList


def probe(name, value, loop) -> None:
    if isinstance(value, TensorList):        # a list grown in a tensor loop: its stack
        value = value.stack
    if current_graph() is None or not _graph_value(value):
        record(name, value, loop)
        return None
    dispatch_record(graph_ops.probe_value, (name, value, loop), {})
    return None


def _graph_value(value) -> bool:
    """Tensors (symbolic or not), numbers, and tuples/lists/dicts of them."""
    import torch
    if isinstance(value, (torch.Tensor, bool, int, float, type(None))):
        return True
    if isinstance(value, (tuple, list)) and type(value) in (tuple, list):
        return all(_graph_value(v) for v in value)
    if isinstance(value, dict) and type(value) is dict:
        return all(_graph_value(v) for v in value.values())
    return False
