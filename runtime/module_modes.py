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

Refused (the side-effect check then falls back, naming the line): the call in a
tensor-dependent branch or loop body, a mode that is a traced value, a class overriding
``train``/``eval``.

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
    if graph.parent is not None:
        location = user_location()
        error = GraphError(f"{format_location(location)}: {type(owner).__name__}.{name}() in "
                           f"a tensor-dependent branch or loop body: whether the mode "
                           f"changes is known only when the graph runs")
        error.location = location
        raise error
    entry = _entry_modes(graph.root)
    for m in owner.modules():
        entry.setdefault(id(m), (m, m.training))
    dispatch_record(call_method, (Held(owner), "train", list(owner.parameters()),
                                  {"mode": mode}), {})
    owner.train(mode)          # the rest of the trace sees the mode
    return owner


def _entry_modes(root) -> dict:
    modes = getattr(root, "_entry_modes", None)
    if modes is None:
        modes = root._entry_modes = {}
    return modes


def restore(graph) -> None:
    """Put back the ``training`` flags the trace of ``graph`` changed (as found)."""
    for m, flag in (getattr(graph, "_entry_modes", None) or {}).values():
        m.training = flag
