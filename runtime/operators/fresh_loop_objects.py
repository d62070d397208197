"""A tensor loop's variable rebound to a new object of the same class each iteration.

    out = model(ids, past_key_values=cache)           # a ModelOutput before the loop
    while unfinished.max() != 0 and cur < max_len:
        tok = sample(out.logits[:, -1])
        out = model(tok[:, None], past_key_values=cache)    # a new ModelOutput

Python semantics: after the loop ``out`` is the last iteration's object (the one from
before the loop if no iteration ran), and the object from before the loop is unchanged.
Staged semantics: a loop variable's object is carried by identity (``ObjectState``), so a
body that hands back another object would change the loop's structure. Where the body's
object is new (made by this trace of the body: it holds the body's traced values), of the
same class and with the same attributes and keys, its state is carried as the state of the
variable's object (``adopting``); after the loop the variable is a new object of that
class holding the final state, and the object from before the loop gets its own state
back (``settle``). Where converted code compares with ``is`` and another local still
reaches the object from before the loop (it would be the result when no iteration runs),
the loop is refused, as for tensors (``control_flow.refuse_reached``).
"""
from __future__ import annotations

from .object_state import ObjectState, _attributes, _set_state, object_states


def _holds_traced(state: ObjectState, graph) -> bool:
    values = list(state.attrs.values()) + list((state.items or {}).values())
    return any(getattr(getattr(v, "_node", None), "graph", None) is graph for v in values)


def adopting(body, fresh: dict):
    """``body`` (wrapped state in and out) handing back, for a top-level loop variable
    rebound to a new object like its own, that state on the variable's own object;
    ``fresh``: the indices of such variables, filled here."""
    from ..symbolic import current_graph

    def run(*state):
        out = tuple(body(*state))
        given = {id(s.obj) for s in object_states(state)}
        graph = current_graph()
        adopted = list(out)
        for i, (before, after) in enumerate(zip(state, out)):
            if not (isinstance(before, ObjectState) and isinstance(after, ObjectState)) or \
                    after.obj is before.obj or type(after.obj) is not type(before.obj) or \
                    id(after.obj) in given or set(after.attrs) != set(before.attrs) or \
                    (after.items is None) != (before.items is None) or \
                    list(after.items or ()) != list(before.items or ()) or \
                    not _holds_traced(after, graph):
                continue
            fresh.add(i)
            adopted[i] = ObjectState(before.obj, after.attrs, after.items)
        return tuple(adopted)
    return run


def settle(out: list, fresh: set, initial: tuple, where: str) -> list:
    """After the loop: each adopted variable a new object holding the final state, the
    object from before the loop (``initial``: the loop's wrapped state on entry) with its
    own state again."""
    if not fresh:
        return out
    from ..control_flow import compares_values, refuse_reached
    if compares_values():
        refuse_reached({id(initial[i].obj): initial[i].obj for i in fresh}, where,
                       "when the loop runs no iteration")
    for i in fresh:
        before = initial[i]
        obj = before.obj
        cls = type(obj)
        made = cls.__new__(cls)
        final = _attributes(obj)
        items = dict(obj) if isinstance(obj, dict) else None
        _set_state(made, final, items)
        _set_state(obj, before.attrs, before.items)
        out[i] = made
    return out
