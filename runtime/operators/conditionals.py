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


def if_stmt(test, body, orelse, state, names):
    if not is_symbolic(test):
        return body(*state) if test else orelse(*state)
    return staged_cond(test, lambda *s: tuple(body(*s)), lambda *s: tuple(orelse(*s)),
                       tuple(state), names=names)
