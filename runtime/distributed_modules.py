"""torch.distributed's data-parallel modules called while a graph is traced: refused.

``DistributedDataParallel``'s forward, ``FullyShardedDataParallel``'s and the hooks that
``fully_shard`` (FSDP2) puts on a module are per-call machinery, not a computation: DDP
hands each call's outputs to its reducer (``prepare_for_backward``), without which the
reducer's gradient hooks all-reduce nothing; FSDP gathers the sharded parameters before
forward and frees them after. A trace would run that once, with symbolic tensors, and the
graph would run none of it on later calls: the gradients would silently stay each rank's
own. So calling such a module (or its ``forward``) while tracing raises ``GraphError``: the
converted function runs eagerly (default mode, one ``FallbackWarning``) or raises
``ConversionError`` (strict). What converts is the module inside:
``DistributedDataParallel(to_graph(m))``, or ``to_graph(ddp)``, which does that in place
(``transpiler.data_parallel``); for FSDP2, ``fully_shard(to_graph(m))`` (its hooks run on
the wrapper, eagerly around the graph; per-layer ``fully_shard`` of submodules inside a
converted module is refused here).
"""
from __future__ import annotations

import sys

from .errors import GraphError
from .source_info import format_location, user_location

# (module, class): looked up only once that module is imported (nothing to refuse before)
_WRAPPERS = (("torch.nn.parallel.distributed", "DistributedDataParallel"),
             ("torch.distributed.fsdp", "FullyShardedDataParallel"),
             ("torch.distributed.fsdp", "FSDPModule"))


def _distributed_class(obj):
    for module, name in _WRAPPERS:
        cls = getattr(sys.modules.get(module), name, None)
        if cls is not None and isinstance(obj, cls):
            return name
    return None


def refuse_distributed_module(f) -> None:
    """Raise ``GraphError`` when ``f`` is a data-parallel module or one of its methods."""
    name = _distributed_class(f) or _distributed_class(getattr(f, "__self__", None))
    if name is None:
        return
    location = user_location()
    error = GraphError(
        f"{format_location(location)}: calls a data-parallel module ({name}) while "
        f"tracing: its forward runs per call (gradient all-reduce set-up, parameter "
        f"gathering) and a graph would run it once; call it outside the converted function, "
        f"or convert the module it wraps (DistributedDataParallel(to_graph(module)), "
        f"to_graph(ddp), fully_shard(to_graph(module)))")
    error.location = location
    raise error
