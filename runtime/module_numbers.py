"""Python numbers an ``nn.Module`` keeps in its attributes and a step changes on every
call: ``self.step += 1``, ``self.num_updates += 1``, ``model.n_updates += 1`` in a training
step, and ``if self.step % 10 == 0:`` reading it.

They are carried as ``runtime.carried_numbers`` carries a Trainer's ``self.global_step``:
a graph value read from the module when the graph runs, set back by a ``write_slot`` node
at the end of the run (so the int grows on every call, eager's type and value), never the
trace's number. What differs for a module is its guard: ``runtime.module_state`` compares
each module's ``__dict__`` by identity, which a new count would fail on every call (a
retrace per call, a fallback in disguise); a carried attribute is compared by its Python
type instead (``KIND``, read by ``module_writes.alike``), and ``module_writes.Watch``
leaves it to ``carried_numbers`` rather than recording it as a stored tensor.

The modules looked at: those held by the traced function's closure cells and globals,
by plain objects those hold (``trainer.model``), the method's object (``to_graph(model)``
counting in its own ``forward``), and their submodules.
"""
from __future__ import annotations

from typing import List

import torch

KIND = "kind"       # (module_writes.alike: compare this name's value by its Python type)
_MODULES = 256      # modules of one tree looked at
_ITEMS = 32         # items of one dict looked at


def number(value) -> bool:
    return type(value) in (int, float)


def _roots(cells, globals_, owner) -> list:
    from .carried_numbers import plain
    values = [v for _, _, v in cells] + [v for _, _, v in globals_] + [owner]
    roots = [v for v in values if isinstance(v, torch.nn.Module)]
    for v in values:
        if v is not None and plain(v):
            roots += [a for a in vars(v).values() if isinstance(a, torch.nn.Module)]
    return roots


def candidates(cells, globals_, owner, slot_type) -> list:
    """(slot, value) for the number attributes of the modules reachable (the module
    docstring): the slots a trace may rebind."""
    found, seen = [], set()
    for root in _roots(cells, globals_, owner):
        for m in list(root.modules())[:_MODULES]:
            if id(m) in seen:
                continue
            seen.add(id(m))
            found += [(slot_type("attr", m, k, f"{type(m).__name__}.{k}"), v)
                      for k, v in vars(m).items() if not k.startswith("_") and number(v)]
            found += _in_dicts(m, slot_type)
    return found


def _in_dicts(m, slot_type) -> list:
    """(slot, value) for the numbers held by the dicts among ``m``'s public attributes
    (str keys): ``self.stats["calls"] += 1`` in an MoE router's forward. The dict itself
    stays the module's (guarded by identity); its numbers are carried as a closure's."""
    return [(slot_type("item", d, k, f"{type(m).__name__}.{name}[{k!r}]"), v)
            for name, d in vars(m).items() if not name.startswith("_") and type(d) is dict
            and len(d) <= _ITEMS for k, v in d.items() if type(k) is str and number(v)]


def guarded(slots) -> List[tuple]:
    """(module, name, KIND) for the module attributes among the carried ``slots``: what
    the module guard compares by type (``side_effects.Snapshot.module_writes``)."""
    return [(s.holder, s.key, KIND) for s in slots
            if s.kind == "attr" and isinstance(s.holder, torch.nn.Module)]


def carried(graph) -> set:
    """(id(module), name) of the module attributes ``graph`` carries (``Watch.writes``
    leaves them to ``carried_numbers``)."""
    return {(id(m), name) for m, name, _ in guarded(getattr(graph, "carried_slots", ()))}
