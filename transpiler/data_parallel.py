"""``to_graph(ddp)``: a ``DistributedDataParallel`` module's module converted in place, DDP's
own forward left eager.

DDP's ``forward`` is per-call machinery, not a computation to trace once: it broadcasts
buffers from rank 0, rebuilds buckets after the first iteration, runs forward and comm
hooks, and hands the call's outputs to the reducer (``prepare_for_backward``), which walks
their autograd graph to find the parameters this call did not use
(``find_unused_parameters=True``). A graph traced through it would do all that once, at
trace time, with symbolic tensors. So ``to_graph(ddp)`` converts what DDP wraps instead:
``ddp.module`` becomes ``to_graph(ddp.module)`` (``transpiler.module_wrapper``: the same
parameters, buffers and submodules under the same names, so the reducer's buckets and the
autograd hooks it put on the parameters stay as they are, and ``ddp.state_dict()`` keeps
its ``module.`` keys) and ``ddp`` itself is returned: its forward runs eagerly around the
graph, exactly as ``DistributedDataParallel(to_graph(module))`` does. The graph's outputs
carry autograd's own graph back to each parameter the call used, so the reducer's hooks
fire as gradients become ready and bucketed all-reduce overlaps the backward as in eager.

``torch.nn.DataParallel`` is not converted this way: it replicates its module per device
on every call (``replicate``), which would copy the wrapper but not the module behind its
graph; ``to_graph`` wraps it as any other module.
"""
from __future__ import annotations

from typing import Callable

import torch


def is_distributed_data_parallel(module) -> bool:
    """Whether ``module`` is a ``DistributedDataParallel`` (a subclass included)."""
    if not torch.distributed.is_available():
        return False
    return isinstance(module, torch.nn.parallel.DistributedDataParallel)


def convert_wrapped_module(ddp, convert: Callable[[torch.nn.Module], torch.nn.Module]):
    """``ddp`` with ``ddp.module`` replaced by ``convert(ddp.module)``; ``ddp`` returned."""
    converted = convert(ddp.module)
    if converted is not ddp.module:
        ddp.module = converted          # nn.Module.__setattr__: the submodule named "module"
    return ddp
