"""A one-time initialization the first trace made: kept, when a second trace proves it.

Libraries set themselves up on a model's first call: transformers registers its
output-capturing hooks on the layers and marks the model
(``model._output_capturing_hooks_installed = True``); later calls see the mark and skip
it. A trace of that first call changes the model, which a graph cannot repeat, so it was
refused: the call fell back (strict mode: ``ConversionError`` on every call, since the
restored model never got its mark).

``kept(snapshot)`` says whether the only changes are Python values (no tensor, no
container) set on modules of the method's object's tree, and hooks registered there.
Then the front door keeps that state and traces again from it: if the second trace
changes nothing, the graph is what every later call runs (eager's later calls skip the
set-up too, and the guard holds the set-up state), and this call's set-up is done, as
eager's would be. If the second trace changes state again (a counter: no one-time
set-up), everything goes back as before the first trace and the call falls back as it
did. An int or float that was one before (``self.step += 1``) is no set-up: the front door
carries it (``runtime.module_numbers``).
"""
from __future__ import annotations

from . import hook_snapshot

_ATOMS = (bool, int, float, complex, str, bytes, type(None))


def kept(snapshot) -> bool:
    """Whether the state ``snapshot`` saw change is a one-time set-up to keep (see above).
    Leaves the state as the trace left it."""
    taken = getattr(snapshot, "_hooks", hook_snapshot.NOTHING)
    values = hook_snapshot.set_attributes(taken)
    if not values or not all(type(v) in _ATOMS for _, _, _, v in values):
        return False
    if any(type(v) in (int, float) and type(before) is type(v) for _, _, before, v in values):
        return False    # a number counted on (``self.step += 1``): carried, not set up once
    hooks = hook_snapshot.added(taken)
    for m, k, before, _ in values:      # are these (and the hooks) the only change?
        if before is hook_snapshot.MISSING:
            del vars(m)[k]
        else:
            vars(m)[k] = before
    for d, k, _ in hooks:
        del d[k]
    try:
        others = snapshot.changes()
    finally:
        for m, k, _, now in values:
            vars(m)[k] = now
        for d, k, hook in hooks:
            d[k] = hook
    return not others
