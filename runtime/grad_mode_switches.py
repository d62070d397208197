"""The grad mode a graph's recorded switches leave must be the mode its trace saw.

Traced code switches grad mode through ``torch._C._set_grad_enabled`` (``no_grad``,
``enable_grad``, ``set_grad_enabled``): each switch is recorded as a ``set_grad_enabled``
node and applied for real (``symbolic._note_grad``), so the graph switches on every run
where the trace did. A switch made in C++ is applied but not recorded: an
``autograd.Function``'s ``apply`` runs forward with grad off, so a ``with torch.no_grad():``
inside it records "off" when entered and "off" (the mode it found) when left, and the
graph would leave grad mode off for the caller, with every op after it recorded as
requiring grad (torch's reentrant checkpoint did this: ``operators.checkpoints`` traces
it as what it computes). Such a trace is refused, naming the line of the last switch:

- ``check_switch``: before a switch is recorded, the mode must be the one the graph's
  previous switch set (the first switch of a (sub)graph is not checked: its mode on entry
  is the parent's);
- ``check_end``: when a trace ends, the mode must be the one its graph's last top-level
  switch set, or the mode it started in.
"""
from __future__ import annotations

import torch

from .errors import GraphError
from .source_info import format_location


_LAST = "_last_grad_switch"      # graph.__dict__ key: its latest set_grad_enabled node


def _mode(node) -> bool:
    return bool(node.args[0] if node.args else node.kwargs.get("mode"))


def _refuse(node, mode: bool) -> None:
    raise GraphError(f"{format_location(node.location)}: grad mode was switched "
                     f"{'on' if mode else 'off'} where the trace cannot record it (in C++: "
                     f"an autograd.Function's forward); the graph would leave it "
                     f"{'on' if _mode(node) else 'off'}")


def check_switch(node) -> None:
    """``node``, a ``set_grad_enabled`` just added to its graph, before it is applied."""
    previous = node.graph.__dict__.get(_LAST)
    node.graph.__dict__[_LAST] = node
    mode = torch.is_grad_enabled()
    if previous is not None and _mode(previous) != mode:
        _refuse(previous, mode)


def check_end(graph, start: bool) -> None:
    """At the end of ``graph``'s trace, which started in grad mode ``start``."""
    last = graph.__dict__.pop(_LAST, None)
    mode = torch.is_grad_enabled()
    if (start if last is None else _mode(last)) != mode:
        if last is None:
            raise GraphError(f"grad mode was switched {'on' if mode else 'off'} during the "
                             f"trace where it cannot be recorded (in C++)")
        _refuse(last, mode)
