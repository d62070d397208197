"""Reaching definitions, in the form the converters need: which names are certainly bound
before each statement *of the generated code*, hence which state variables may be
undefined there (and need a ``tg.Undefined(name)`` placeholder).

Requires: activity, state (STATE).
Provides on every statement: DEFINED_IN (frozenset of names certainly bound before it).

A converted ``if``/loop binds all its state variables (its call returns them), so after
it -- and at the start of its body functions, whose parameters they are -- they count as
defined. Any other name a body function binds is a local of that function: unbound at
its start, whatever the enclosing function had bound. A ``try`` is not converted; names it may bind count as defined after it (a wrong
guess then fails loudly with UnboundLocalError rather than hiding a value).
"""
import gast

from transpiler.analysis import activity
from transpiler.pyct import anno


def _block(stmts, defined, scope, memo):
    for stmt in stmts:
        defined = _stmt(stmt, defined, scope, memo)
    return defined


def _stmt(stmt, defined, scope, memo):
    anno.setanno(stmt, anno.Key.DEFINED_IN, frozenset(defined))
    e = activity.header_effects(stmt, memo=memo)
    if isinstance(stmt, (gast.If, gast.While, gast.For)):
        state = set(anno.getanno(stmt, anno.Key.STATE))
        inside = defined | state
        # Each block becomes a body function: a name it binds is a local there, unbound
        # at entry unless it is a parameter (state, the for target).
        params = state | (e.binds if isinstance(stmt, gast.For) else set())
        for block in (stmt.body, stmt.orelse):
            _block(block, (defined - (activity.block_bound(block, memo) - scope.declared))
                   | params, scope, memo)
        return inside
    if isinstance(stmt, gast.With):
        return _block(stmt.body, defined | e.binds, scope, memo)
    if isinstance(stmt, gast.Try):
        for block in activity.blocks(stmt):
            _block(block, defined, scope, memo)
        return defined | anno.getanno(stmt, anno.Key.MODIFIED, frozenset())
    return (defined | e.binds) - e.deleted


def analyze(fn, memo=None):
    """Annotate every statement of FunctionDef ``fn`` (analysed by activity and liveness;
    ``memo``: see ``activity.header_effects``)."""
    scope = anno.getanno(fn, anno.Key.SCOPE)
    _block(fn.body, set(scope.params), scope, {} if memo is None else memo)
