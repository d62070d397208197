"""The random generators a call draws from, put back after its trace.

    state = RandomState.take(flat_arguments, modules)
    ...trace...                 # may draw: shape inference checking an op eagerly, a retrace
    state.restore()             # the generators as they were before the call

A trace draws no random number the call keeps: the graph draws them all when it runs, and
a fallback runs the Python function eagerly, which draws them itself. But a trace can
advance a generator on the way -- ``shape_inference.fails_eagerly`` runs an op that failed
on fakes (``scaled_dot_product_attention(dropout_p=0.5)`` under bf16 autocast) on real
zeros to confirm eager fails too, a one-time set-up or carried-number retrace traces the
call twice, a library call runs while traced. Then the eager rerun (or the graph) would
draw other numbers than eager's: other dropout masks, silently. So the front door takes
the state before every trace and restores it after, success or failure, before anything
runs for real. Taken: the global CPU generator, every CUDA device's generator when CUDA
is initialized (never initializing it), and the ``torch.Generator`` objects among the
call's arguments and its modules' attributes (one level).
"""
from __future__ import annotations

from typing import Iterable, List, Tuple

import torch


def _cuda_states():
    """Every CUDA generator's state, or None where CUDA was never initialized (asking
    would initialize it)."""
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    return torch.cuda.get_rng_state_all()


def _generators(values: Iterable, modules: Iterable) -> List[torch.Generator]:
    found, seen = [], set()
    candidates = list(values)
    for m in modules:
        candidates.extend(vars(m).values())
    for v in candidates:
        if isinstance(v, torch.Generator) and id(v) not in seen and \
                v is not torch.default_generator:
            seen.add(id(v))
            found.append(v)
    return found


class RandomState:
    """Generator states at one moment (see the module docstring)."""

    def __init__(self, cpu: torch.Tensor, cuda, generators: List[Tuple[torch.Generator,
                                                                          torch.Tensor]]):
        self.cpu, self.cuda, self.generators = cpu, cuda, generators

    @classmethod
    def take(cls, values: Iterable = (), modules: Iterable = ()) -> "RandomState":
        """The state now of the global generators and of the ``torch.Generator`` objects
        among ``values`` and the attributes of ``modules``."""
        return cls(torch.default_generator.get_state(), _cuda_states(),
                   [(g, g.get_state()) for g in _generators(values, modules)])

    def restore(self) -> None:
        """Every generator taken back to its state then. (Set, not compared first: a
        trace of a converted function may call another's, and a tensor op here would be
        traced.)"""
        torch.default_generator.set_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)
        for g, state in self.generators:
            g.set_state(state)
