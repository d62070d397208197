"""Calls in converted code that set or read the global random state.

    torch.manual_seed(0)                  # graph ops: they act on every run, in their
    s = torch.get_rng_state()             # place among the random ops (torch.randn,
    torch.set_rng_state(s)                # dropout), which draw from the caller's
    with torch.random.fork_rng(devices=[]):   # global generator when the graph runs
        noise = torch.randn(3)

Python semantics: with no graph being traced, each call runs as it is. Staged semantics:
a graph repeats its random draws on every call, so what reseeds, saves or restores the
generator they draw from must be repeated too, in order: these calls become graph ops
(``fork_rng`` a ``get_rng_state`` op on entry and a ``set_rng_state`` op on exit).
What a graph cannot repeat exactly raises ``GraphError`` (the call falls back): a
``torch.Generator`` object used while tracing (its state lives outside the graph), the
CUDA generators, ``torch.seed()`` and ``torch.initial_seed()`` (Python values), a
``fork_rng`` that would fork CUDA generators too, and -- checked by ``watch`` around
calls that are not converted -- a library function that reseeds the generator while
traced (``transformers.set_seed``).
"""
from __future__ import annotations

import contextlib
import inspect

import torch

from .. import graph_ops
from ..errors import GraphError
from ..source_info import format_location, user_location
from ..symbolic import current_graph, dispatch_record
from . import traced_generators

NOT_RNG = object()


def _refuse(what: str) -> GraphError:
    return GraphError(f"{format_location(user_location())}: {what} while tracing: a graph "
                      f"draws its random numbers from the global generator when it runs, and "
                      f"cannot repeat this on every call")


def _manual_seed(seed):
    dispatch_record(graph_ops.manual_seed, (seed,), {})
    return torch.default_generator


def _get_rng_state():
    return dispatch_record(graph_ops.get_rng_state, (), {})


def _set_rng_state(new_state):
    dispatch_record(graph_ops.set_rng_state, (new_state,), {})


@contextlib.contextmanager
def _fork_rng(devices=None, enabled=True, _caller="fork_rng", _devices_kw="devices",
              device_type="cuda"):
    if not enabled:
        yield
        return
    if devices is None and getattr(torch, device_type).is_available() or devices:
        raise _refuse(f"torch.random.fork_rng() forking {device_type} generators")
    state = _get_rng_state()
    try:
        yield
    finally:
        _set_rng_state(state)


_STAGED = {
    torch.manual_seed: _manual_seed,
    torch.get_rng_state: _get_rng_state,
    torch.set_rng_state: _set_rng_state,
    torch.random.fork_rng: _fork_rng,
}
_REFUSED = {
    torch.seed: "torch.seed()", torch.initial_seed: "torch.initial_seed()",
    torch.cuda.manual_seed: "torch.cuda.manual_seed()",
    torch.cuda.manual_seed_all: "torch.cuda.manual_seed_all()",
    torch.cuda.seed: "torch.cuda.seed()", torch.cuda.seed_all: "torch.cuda.seed_all()",
    torch.cuda.set_rng_state: "torch.cuda.set_rng_state()",
    torch.cuda.get_rng_state: "torch.cuda.get_rng_state()",
    torch.cuda.set_rng_state_all: "torch.cuda.set_rng_state_all()",
    torch.cuda.get_rng_state_all: "torch.cuda.get_rng_state_all()",
}
_STAGED = {inspect.unwrap(k): v for k, v in _STAGED.items()}
_REFUSED = {inspect.unwrap(k): v for k, v in _REFUSED.items()}


def rng_call(f, args, kwargs):
    """``f(*args, **kwargs)`` staged while tracing if ``f`` sets or reads the random
    state; GraphError where that cannot be staged; ``NOT_RNG`` for other calls."""
    inner = f
    while hasattr(inner, "__wrapped__"):     # (torch._dynamo wraps torch.manual_seed)
        inner = inner.__wrapped__
    try:
        staged = _STAGED.get(inner)
        refused = _REFUSED.get(inner)
    except TypeError:               # (an unhashable callable)
        return NOT_RNG
    if staged is not None:
        return staged(*args, **kwargs)
    if refused is not None:
        raise _refuse(f"calls {refused}")
    made = traced_generators.generator_call(f, args, kwargs)   # a generator made here
    if made is not None:
        return made
    if isinstance(getattr(f, "__self__", None), torch.Generator):
        raise _refuse(f"a torch.Generator's {getattr(f, '__name__', 'method')}()")
    if any(isinstance(v, torch.Generator) for v in kwargs.values()) or \
            any(isinstance(v, torch.Generator) for v in args):
        raise _refuse("a torch.Generator object is used")
    return NOT_RNG


@contextlib.contextmanager
def watch(f):
    """Around a call that is not converted, while tracing: GraphError if it reseeded the
    global generator (a reseed would happen once, at trace time)."""
    seed = torch.initial_seed()
    yield
    if torch.initial_seed() != seed and current_graph() is not None:
        raise _refuse(f"{getattr(f, '__qualname__', f)}() reseeds the global generator")
