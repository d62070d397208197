"""``model.train()`` / ``model.eval()`` inside a converted function, staged.

The PyTorch examples' epoch loop calls ``train()`` (which starts with ``model.train()``)
and then ``test()`` (``model.eval()``): each converted function finds the model in the
other mode and flips it. A trace ran the flip for real, saw the module changed, and fell
back on every call (strict: ``ConversionError``). Now the flip is staged: while tracing
the modules take the mode (the ops traced after it are the mode's: dropout, BatchNorm's
batch statistics), the graph gets an effect node calling ``module.train(mode)`` when it
runs, and when the trace ends each module's ``training`` flag is put back as the call
found it, so the guard records the modes the graph was traced from (a call finding the
model in the other mode traces once more) and the graph's own run flips it.

In a tensor-dependent branch or loop body (``if it % k == 0:`` on a carried counter, with
``net.eval()`` ... ``net.train()``) the flip is staged the same way, as long as the region
puts each mode back by its end (``check_region``); one that leaves a mode changed is
refused, naming the line. Refused too (the side-effect check then falls back, naming the
line): a mode that is a traced value, a class overriding ``train``/``eval``.

Requires: ``autograd_effects`` (``call_method``, ``Held``: its effect node).
"""
from __future__ import annotations

from .errors import GraphError
from .source_info import format_location, user_location

NOT_STAGED = object()


def _torch_own(cls, name: str) -> bool:
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return (klass.__module__ or "").startswith("torch.")
    return False


def staged(owner, name: str, args, kwargs):
    """``owner.train(mode)`` / ``owner.eval()`` recorded; ``NOT_STAGED`` for anything else."""
    import torch
    if name not in ("train", "eval") or not isinstance(owner, torch.nn.Module) or \
            not _torch_own(type(owner), name) or \
            name == "eval" and not _torch_own(type(owner), "train"):
        return NOT_STAGED
    if name == "eval":
        if args or kwargs:
            return NOT_STAGED
        mode = False
    else:
        mode = kwargs.get("mode", args[0] if args else True)
        if len(args) + len(kwargs) > 1 or not isinstance(mode, bool):
            return NOT_STAGED
    from .autograd_effects import Held, call_method
    from .symbolic import current_graph, dispatch_record
    graph = current_graph()
    regions = [graph.root] if graph.parent is None else [graph.root, graph]
    for entry in map(_entry_modes, regions):
        for m in owner.modules():
            entry.setdefault(id(m), (m, m.training))
    if graph.parent is not None:        # (``check_region`` at the region's end)
        graph._mode_call = (user_location(), f"{type(owner).__name__}.{name}()")
    dispatch_record(call_method, (Held(owner), "train", list(owner.parameters()),
                                  {"mode": mode}), {})
    owner.train(mode)          # the rest of the trace sees the mode
    return owner


def _entry_modes(root) -> dict:
    modes = getattr(root, "_entry_modes", None)
    if modes is None:
        modes = root._entry_modes = {}
    return modes


def check_region(graph) -> None:
    """At the end of a tensor-dependent branch or loop body (``graph``): GraphError naming
    the line when a ``train()``/``eval()`` in it leaves a module in another mode than the
    region found it (whether the mode changes would be known only when the graph runs).
    A region that puts the modes back (``if it % k == 0: net.eval(); ...; net.train()``)
    is traced in the modes it sets, and its effect nodes run when the graph takes it."""
    found = getattr(graph, "_entry_modes", None) or {}
    changed = [m for m, flag in found.values() if m.training != flag]
    if changed:
        location, call = graph._mode_call
        error = GraphError(f"{format_location(location)}: {call} in a tensor-dependent branch "
                           f"or loop body leaves {type(changed[0]).__name__} in another mode "
                           f"than the region found it: whether the mode changes is known "
                           f"only when the graph runs")
        error.location = location
        error.names_its_line = True
        raise error


def restore(graph) -> None:
    """Put back the ``training`` flags the trace of ``graph`` changed (as found)."""
    for m, flag in (getattr(graph, "_entry_modes", None) or {}).values():
        m.training = flag
