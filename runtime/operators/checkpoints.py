"""``torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=True)`` while tracing.

Reentrant checkpointing is an autograd.Function (torch's ``CheckpointFunction``): its
forward runs ``fn`` under ``no_grad`` inside C++ ``Function.apply`` (a grad-mode switch no
trace sees) and its backward runs ``fn`` again with grad and backpropagates through that.
Traced as torch wrote it, the graph recorded forward's ``no_grad`` without the switch back:
the result did not require grad and grad mode stayed off for the caller.

So the call is traced as what it computes: ``fn`` (converted like any call) in the
caller's grad mode, its floating tensor outputs passed through ``CheckpointFunction``
below: a copy whose backward passes the gradient on after torch's own validity check
(``autograd.grad`` or ``backward(inputs=...)`` through it raise torch's error, as eager's
checkpoint does), its ``grad_fn`` named as eager's. Values and gradients are eager's: the
backward's recompute replays the forward's random draws (``preserve_rng_state``) and leaves
the RNG as the forward left it. Eager's rules for the outputs hold: with grad mode off or
no tensor argument requiring grad, ``fn`` runs under ``no_grad`` and nothing requires grad
(with torch's warning); else every floating output requires grad.

Refused, naming the line: an output that would require grad in eager but depends on no
argument requiring grad (eager's backward raises there) or whose flag only the run knows;
outputs other than a tensor or a tuple; ``fn`` whose trace records an effect eager's
recompute would repeat (a print, a write to a real tensor such as BatchNorm's running
statistics). What differs: activations are kept, not recomputed (memory), and Python side
effects of ``fn`` (a list appended to) happen once per call, not twice.
"""
from __future__ import annotations

import warnings

import torch
import torch.utils.checkpoint as torch_checkpoint

from .. import grad_flags, trace_reads
from ..errors import GraphError
from ..ops import RANDOM, is_inplace
from ..source_info import format_location, user_location
from ..symbolic import current_graph, dispatch_record

NOT_CHECKPOINT = object()
_IGNORED = {"use_reentrant", "preserve_rng_state", "determinism_check", "early_stop"}
_NO_INPUT_GRAD = "None of the inputs have requires_grad=True. Gradients will be None"


class CheckpointFunction(torch.autograd.Function):
    """The outputs of a checkpointed ``fn``: copies (torch's outputs are fresh tensors, free
    to change in place) whose backward checks, as torch's ``CheckpointFunction`` does, that
    the backward is ``.backward()`` without ``inputs``."""

    @staticmethod
    def forward(ctx, *outputs):
        return tuple(t.clone() for t in outputs)

    @staticmethod
    def backward(ctx, *grads):
        if not torch.autograd._is_checkpoint_valid():
            raise RuntimeError(
                "When use_reentrant=True, torch.utils.checkpoint is incompatible with "
                ".grad() or passing an `inputs` parameter to .backward(). To resolve this "
                "error, you can either set use_reentrant=False, or call .backward() "
                "without passing the `inputs` argument.")
        return grads


def checkpoint_outputs(*outputs):
    """The graph op: ``CheckpointFunction`` over a checkpointed call's outputs."""
    return CheckpointFunction.apply(*outputs)


def checkpointed(f, args, kwargs, call):
    """``f(*args, **kwargs)`` traced as above when ``f`` is torch's ``checkpoint`` in its
    reentrant form; ``NOT_CHECKPOINT`` otherwise (``call`` converts and calls ``fn``)."""
    if f is not torch_checkpoint.checkpoint or not args or current_graph() is None:
        return NOT_CHECKPOINT
    reentrant = kwargs.get("use_reentrant")
    if reentrant is False or set(kwargs) - _IGNORED:
        return NOT_CHECKPOINT       # (non-reentrant: traced as torch runs it; errors: torch's)
    if reentrant is None:
        warnings.warn(
            "torch.utils.checkpoint: the use_reentrant parameter should be passed "
            "explicitly. Starting in PyTorch 2.9, calling checkpoint without use_reentrant "
            "will raise an exception. use_reentrant=False is recommended, but if you need "
            "to preserve the current default behavior, you can pass use_reentrant=True. "
            "Refer to docs for more details on the differences between the two variants.",
            stacklevel=3)
    fn, fargs = args[0], args[1:]
    where = f"{format_location(user_location())}: checkpoint(..., use_reentrant=True)"
    flags = [grad_flags.grad_of(a) for a in fargs if isinstance(a, torch.Tensor)]
    if None in flags and torch.is_grad_enabled():
        raise GraphError(f"{where}: whether an argument requires grad is known only when "
                         f"the graph runs")
    if not torch.is_grad_enabled() or not any(flags):
        if torch.is_grad_enabled():
            warnings.warn(_NO_INPUT_GRAD, stacklevel=3)
        with torch.no_grad():       # (recorded: the graph switches as eager's forward)
            return call(fn, *fargs)
    graph, written = current_graph(), _written()
    before = set(map(id, graph.walk()))
    out = call(fn, *fargs)
    _refuse_repeated_effects(where, graph, before, written)
    return _through_boundary(where, out)


def _written() -> int:
    reads = trace_reads.current()
    return 0 if reads is None else len(reads.written)


def _refuse_repeated_effects(where, graph, before, written) -> None:
    """GraphError when ``fn``'s trace recorded an effect eager's recompute repeats."""
    if _written() != written:
        raise GraphError(f"{where}: the checkpointed function writes a real tensor in "
                         f"place (a buffer), which eager's backward writes again")
    for node in graph.walk():
        if id(node) in before or not node.impure or node.op in RANDOM:
            continue
        if node.op == "set_grad_enabled" or _writes_own_value(node, before):
            continue
        raise GraphError(f"{where}: the checkpointed function has an effect ({node.op}) "
                         f"that eager's backward repeats when it recomputes the function")


def _writes_own_value(node, before) -> bool:
    """An in-place op on a value the checkpointed function made (``relu_``)."""
    inputs = node.inputs
    return is_inplace(node.target, node.kwargs) and bool(inputs) and \
        id(inputs[0]) not in before and inputs[0].op not in ("placeholder", "constant")


def _through_boundary(where, out):
    single = isinstance(out, torch.Tensor)
    items = (out,) if single else out
    if not isinstance(items, tuple):
        raise GraphError(f"{where}: the checkpointed function returns a "
                         f"{type(out).__name__}, not a tensor or a tuple")
    picks = [i for i, t in enumerate(items) if isinstance(t, torch.Tensor) and
             (t.dtype.is_floating_point or t.dtype.is_complex)]
    for i in picks:
        flag = grad_flags.grad_of(items[i])
        if flag is not True:
            raise GraphError(f"{where}: output {i} of the checkpointed function does not "
                             f"{'surely ' if flag is None else ''}depend on an argument "
                             f"requiring grad (eager's backward raises on it)")
    if not picks:
        return out
    copies = dispatch_record(checkpoint_outputs, tuple(items[i] for i in picks), {})
    result = list(items)
    for i, c in zip(picks, copies):
        result[i] = c
    return result[0] if single else tuple(result)
