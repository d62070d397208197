"""Lists, dicts and sets that a model keeps as attributes, and what a trace did to them.

A module's own Python containers (``self.saved_actions = []`` in the PyTorch examples'
actor-critic, ``self.rewards``, a cache dict) are not parameters or buffers, and the
fingerprint of the objects a call reaches stops at modules. A trace that appended to one
(``model.saved_actions.append(...)`` in a helper) left its symbolic tensors there: an
accepted trace returned a graph that never appends again (silently wrong), and a refused
one left them for the eager re-run to meet (a crash in the user's ``loss.backward()``).
``take`` copies each such container of one module (one level: the items themselves by
identity), ``changed`` names the first whose items differ after a trace (the call falls
back, strict: ``ConversionError``), ``restore`` puts their items back after a refused
trace. A trace that appends and clears again (the actor-critic's ``del model.rewards[:]``
at the end of the step) leaves nothing changed and converts.

The numbers a module holds are taken alike (``Held``: ``self.calls += 1`` in a
submodule's forward was baked into the graph, the count frozen at 1): a changed one is a
change, which the front door carries (``runtime.module_numbers``) or refuses.
"""
from __future__ import annotations

from typing import List, Tuple

from runtime.carried_numbers import plain

# torch.nn.Module's own bookkeeping (parameters, buffers, submodules, hook dicts):
# handled by ``hook_snapshot`` and the module guard, not user state
_INTERNAL_PREFIXES = ("_parameters", "_buffers", "_modules", "_non_persistent_buffers_set",
                      "_forward_", "_backward_", "_state_dict_", "_load_state_dict_",
                      "_is_full_backward_hook")

Entry = Tuple[str, str, object, object]     # (module's path, attribute, container, copy)


class Held:
    """A module's number attribute (an entry's container: ``get``, ``set``)."""

    __slots__ = ("module", "name")

    def __init__(self, module, name: str):
        self.module, self.name = module, name

    def get(self):
        return vars(self.module).get(self.name)

    def set(self, value) -> None:
        vars(self.module)[self.name] = value


_DEPTH = 3          # levels of containers looked into below a module's attribute
_ITEMS = 64         # items of one container looked into


def take(path: str, module) -> List[Entry]:
    """A copy of each list, dict and set held in ``module``'s own attributes (and each
    int or float: ``Held``), and of those they hold, and the attributes of the plain
    objects they hold, ``_DEPTH`` levels down (a LightningModule's
    ``self.logged["train_loss"]``, ``self.logs["train"]["loss"]``, ``self.meter.values``:
    a trace that changed one unseen left its stand-ins there, and no graph changes it)."""
    found = []
    for name, value in vars(module).items():
        if type(value) in (int, float):
            found.append((path, name, Held(module, name), value))
        elif not name.startswith(_INTERNAL_PREFIXES):
            found += _nested(path, name, value, _DEPTH)
    return found


def _nested(path: str, label: str, value, depth: int) -> List[Entry]:
    """Entries for ``value`` (a list, dict or set; a plain object's ``__dict__``) and
    the containers it holds, ``depth`` levels down."""
    kind = type(value)
    if kind in (list, dict, set):
        found, held = [(path, label, value, kind(value))], value
    elif plain(value):
        found, held = [(path, label, vars(value), dict(vars(value)))], vars(value)
    else:
        return []
    if depth == 0 or kind is set or len(held) > _ITEMS:
        return found
    pairs = held.items() if type(held) is dict else enumerate(held)
    for k, v in list(pairs):
        found += _nested(path, f"{label}.{k}" if held is not value else f"{label}[{k!r}]",
                         v, depth - 1)
    return found


def _same(now, before) -> bool:
    if isinstance(now, Held):       # (an equal number of the same type: unchanged)
        value = now.get()
        return type(value) is type(before) and (value == before or value != value and
                                                 before != before)      # (NaN)
    if isinstance(now, dict):
        return now.keys() == before.keys() and all(now[k] is v for k, v in before.items())
    if isinstance(now, set):
        return {id(v) for v in now} == {id(v) for v in before}
    return len(now) == len(before) and all(a is b for a, b in zip(now, before))


def changed(entries: List[Entry]) -> str:
    """What the trace did to the first container whose items changed, or ''."""
    for path, name, now, before in entries:
        if not _same(now, before):
            where = f"submodule {path!r}'s" if path else "the model's"
            what = "number" if isinstance(now, Held) else type(now).__name__
            return f"the function changes {where} {what} attribute {name!r}"
    return ""


def restore(entries: List[Entry]) -> None:
    """Put back the items of the containers a refused trace changed."""
    for _, _, now, before in entries:
        if isinstance(now, Held):
            if not _same(now, before):
                now.set(before)
        elif not _same(now, before):
            now.clear()
            now.update(before) if not isinstance(now, list) else now.extend(before)
