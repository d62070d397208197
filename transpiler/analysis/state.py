"""STATE: the state of a converted ``if`` or loop: the variables its body functions take and return.

Requires: activity, liveness. Provides: STATE on every if/while/for (nested function
bodies excluded). Used by reaching_defs and the control-flow converters.

if:   names modified in a branch that are live after it or read in a branch before written
loop: names modified in the body that are live at the loop head (read before written in the
      body, read by the test or an extra loop test) or live after the loop
      (a cell variable -- one a nested def/lambda reads -- counts as live everywhere)
Only the function's own locals qualify: ``global``/``nonlocal`` names never do.
"""
import gast

from transpiler.analysis import activity
from transpiler.pyct import anno


def _live_at_entry(block, default):
    return anno.getanno(block[0], anno.Key.LIVE_IN) if block else default


def for_target_names(node):
    e = activity.Effects()
    e.target(node.target)
    return e.binds


def state_of(stmt, scope):
    out = anno.getanno(stmt, anno.Key.LIVE_OUT)
    modified = anno.getanno(stmt, anno.Key.MODIFIED)
    if isinstance(stmt, gast.If):
        live = _live_at_entry(stmt.body, out) | _live_at_entry(stmt.orelse, out) | out
    elif isinstance(stmt, gast.While):
        live = _live_at_entry(stmt.body, out) | activity.header_effects(stmt).reads | out
    elif isinstance(stmt, gast.For):
        extra = activity.Effects()
        for test in anno.getanno(stmt, anno.Key.EXTRA_LOOP_TEST, []):
            extra.expr(test)
        live = (_live_at_entry(stmt.body, out) - for_target_names(stmt)) | extra.reads | out
    else:
        raise TypeError(stmt)
    live |= scope.cells      # a nested function may read it whenever it is called
    return tuple(sorted((modified & live & scope.locals) - scope.declared))


def analyze(fn):
    """Set STATE on the if/while/for statements of FunctionDef ``fn``."""
    scope = anno.getanno(fn, anno.Key.SCOPE)
    stack = list(fn.body)
    while stack:
        stmt = stack.pop()
        if isinstance(stmt, (gast.If, gast.While, gast.For)):
            anno.setanno(stmt, anno.Key.STATE, state_of(stmt, scope))
        for block in activity.blocks(stmt):
            stack.extend(block)
