"""``if``/``elif``/``else`` statements of converted code.

    (y,) = tg.if_stmt(test, if_body, else_body, (y,), ('y',))

Each branch is a function of the state variables returning their new values. A Python
``test`` runs one branch, exactly as Python would; a symbolic one traces both into a
single ``cond`` node. A variable defined on one path only is an error naming it, unless
no path can read it (the return value before ``return``).
"""
from __future__ import annotations

from ..control_flow import staged_cond
from ..symbolic import is_symbolic
from ..tensor_list import TensorList, note_converted, truth
from .cells import restoring_cells
from .decisions import _LISTENERS, note
from . import state_aliases
from .object_state import unwrap_state, wrap_state, wrapping


def if_stmt(test, body, orelse, state, names):
    test = truth(test)                  # (``if L:`` of a list grown in a tensor loop)
    if not is_symbolic(test):
        if _LISTENERS:
            note("if", bool(test))
        return body(*state) if test else orelse(*state)
    pending = state_aliases.check(state, names, "a tensor-dependent if", defer=True)
    body, orelse = restoring_cells(body, names), restoring_cells(orelse, names)
    out = staged_cond(test, wrapping(body), wrapping(orelse), wrap_state(tuple(state)),
                      names=names)
    for before, after in zip(state, out):
        if isinstance(before, list) and isinstance(after, TensorList):
            note_converted(before)
    out = unwrap_state(out)
    state_aliases.confirm(pending, out, "a tensor-dependent if")
    return out
