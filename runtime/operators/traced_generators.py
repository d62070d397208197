"""A ``torch.Generator`` made inside a converted call, as a state the graph threads through.

    g = torch.Generator().manual_seed(seed)      # sampling loops written elsewhere:
    while not done.all() and step < n:           # nanoGPT/HF-style ``multinomial`` with a
        tok = torch.multinomial(p, 1, generator=g)   # seeded generator of their own

Python semantics: the generator is an object whose hidden state each draw advances.
Staged semantics: while tracing, ``torch.Generator()`` gives a ``TracedGenerator`` whose
``state`` is a graph value (the generator's ``get_state()`` bytes); ``manual_seed(s)``
records ``seeded_generator_state(s)``, and each call given ``generator=g`` records
``draw_with_state(f, state, ...)``, which at run time draws from a fresh generator set to
that state and returns the draw and the advanced state (rebound on ``g``, so a loop
carries it as it carries any object's tensor attribute). Each run of the graph therefore
repeats eager's numbers for eager's seed. A generator object from outside the call (an
argument, a global) keeps its state outside the graph: it still falls back
(``rng_calls``), as do ``seed()``/``initial_seed()`` and in-place draws on a traced
generator.
"""
from __future__ import annotations

import torch

from .. import graph_ops
from ..errors import GraphError
from ..source_info import format_location, user_location
from ..symbolic import dispatch_record

_STATE_BYTES = torch.Generator().get_state().numel()


@graph_ops.register
def seeded_generator_state(seed=None) -> torch.Tensor:
    """The state of ``torch.Generator().manual_seed(seed)`` (``seed`` None: a new
    generator's default state), as a uint8 tensor."""
    if isinstance(seed, torch.Tensor) and seed.is_meta:
        return torch.empty(_STATE_BYTES, dtype=torch.uint8, device="meta")
    g = torch.Generator()
    if seed is not None:
        g.manual_seed(int(seed))
    return g.get_state()


@graph_ops.register
def draw_with_state(f, state: torch.Tensor, *args, **kwargs):
    """``f(*args, generator=g, **kwargs)`` with ``g`` a fresh generator set to ``state``:
    ``(result, g's state after the draw)``. On meta tensors (shape inference) ``f`` runs
    without a generator, on the meta device."""
    if state.is_meta:
        if not any(isinstance(a, torch.Tensor) for a in args) and "device" not in kwargs:
            kwargs = dict(kwargs, device="meta")
        return f(*args, **kwargs), torch.empty_like(state)
    g = torch.Generator()
    g.set_state(state)
    return f(*args, generator=g, **kwargs), g.get_state()


def _refuse(what: str) -> GraphError:
    return GraphError(f"{format_location(user_location())}: {what} on a generator made in "
                      f"the converted call: the graph threads its state through the draws "
                      f"but cannot do this")


class TracedGenerator:
    """Stands for a CPU ``torch.Generator`` made while tracing; ``state`` is its graph
    value, an attribute that tensor branches and loops carry as they carry any object's
    (``__tograph_carried__``)."""

    __tograph_carried__ = True

    def __init__(self):
        self.state = dispatch_record(seeded_generator_state, (), {})
        self.device = torch.device("cpu")

    def _current(self):
        return self.state

    def manual_seed(self, seed):
        self.state = dispatch_record(seeded_generator_state, (seed,), {})
        return self

    def get_state(self):
        return self._current()

    def set_state(self, new_state):
        self.state = new_state
        return self

    def seed(self):
        raise _refuse("seed()")

    def initial_seed(self):
        raise _refuse("initial_seed()")


def _is_traced(v) -> bool:
    return isinstance(v, TracedGenerator)


def generator_call(f, args, kwargs):
    """While tracing: ``torch.Generator()`` (CPU) as a ``TracedGenerator``, its methods,
    and a call given one (``generator=g``) as a ``draw_with_state`` node; None for other
    calls."""
    if f is torch.Generator:
        device = args[0] if args else kwargs.get("device", "cpu")
        if torch.device(device).type != "cpu":
            return None
        return TracedGenerator()
    owner = getattr(f, "__self__", None)
    if _is_traced(owner):
        return f(*args, **kwargs)
    given = [k for k, v in kwargs.items() if _is_traced(v)]
    if not given and not any(_is_traced(a) for a in args):
        return None
    if given != ["generator"] or any(_is_traced(a) for a in args):
        raise _refuse(f"passing it to {getattr(f, '__qualname__', f)}() other than as "
                      f"generator=")
    name = getattr(f, "__name__", "")
    if name.endswith("_") and not name.endswith("__"):
        raise _refuse(f"an in-place draw ({name})")
    if isinstance(owner, torch.Tensor):          # probs.multinomial(1, generator=g)
        f, args = getattr(torch.Tensor, name), (owner,) + tuple(args)
    gen = kwargs["generator"]
    rest = {k: v for k, v in kwargs.items() if k != "generator"}
    result, gen.state = dispatch_record(draw_with_state, (f, gen._current()) + tuple(args),
                                        rest)
    return result
