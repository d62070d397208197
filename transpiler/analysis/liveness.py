"""Liveness: which names may be read before being rebound, before and after each statement.

Requires: activity. Works on structured control flow:
run it after return/break/continue have been lowered to flags (a remaining ``return``
ends the path; ``break``/``continue`` are treated as plain statements).
Provides on every statement: LIVE_IN, LIVE_OUT (frozensets of names).
"""
import gast

from transpiler.analysis import activity
from transpiler.pyct import anno


def _type_reads(expr):
    e = activity.Effects()
    e.expr(expr)
    return frozenset(e.reads)


def _block(stmts, live_out, memo):
    live = frozenset(live_out)
    for stmt in reversed(stmts):
        live = _stmt(stmt, live, memo)
    return live


def _stmt(stmt, out, memo):
    anno.setanno(stmt, anno.Key.LIVE_OUT, out)
    e = activity.header_effects(stmt, memo=memo)
    reads, binds = frozenset(e.reads), frozenset(e.binds)
    if isinstance(stmt, gast.If):
        live = reads | _block(stmt.body, out, memo) | _block(stmt.orelse, out, memo)
    elif isinstance(stmt, (gast.While, gast.For)):
        if isinstance(stmt, gast.For):
            extra = activity.Effects()
            for test in anno.getanno(stmt, anno.Key.EXTRA_LOOP_TEST, []):
                extra.expr(test)
            head_reads = frozenset(extra.reads) | _target_reads(stmt.target)
        else:
            head_reads = reads
        exit_live = _block(stmt.orelse, out, memo)
        head = head_reads | exit_live | out
        while True:
            body_in = _block(stmt.body, head, memo)
            if isinstance(stmt, gast.For):
                body_in -= binds
            new_head = head | body_in
            if new_head == head:
                break
            head = new_head
        live = head | (_plain_reads(stmt.iter) if isinstance(stmt, gast.For) else frozenset())
    elif isinstance(stmt, gast.With):
        live = reads | (_block(stmt.body, out, memo) - binds)
    elif isinstance(stmt, gast.Try):
        # an exception may leave the body before any of its statements: what a handler
        # reads, or (none matching) the finally block before the exception propagates,
        # is live throughout the body
        exc = set(_block(stmt.finalbody, frozenset(), memo))
        fin_in = _block(stmt.finalbody, out, memo)
        for h in stmt.handlers:
            h_in = _block(h.body, fin_in, memo) - ({h.name.id} if h.name is not None else set())
            exc |= h_in | _type_reads(h.type)
        live = _block(stmt.orelse, fin_in, memo)
        for s in reversed(stmt.body):
            live = _stmt(s, live, memo) | exc
        live = frozenset(live | exc)
    elif isinstance(stmt, (gast.Return, gast.Raise)):
        live = reads
    else:
        live = reads | (out - binds)
    anno.setanno(stmt, anno.Key.LIVE_IN, frozenset(live))
    return frozenset(live)


def _plain_reads(expr):
    e = activity.Effects()
    e.expr(expr)
    return frozenset(e.reads)


def _target_reads(target):
    e = activity.Effects()
    e.target(target)
    return frozenset(e.reads)


def analyze(fn, memo=None):
    """Annotate every statement of FunctionDef ``fn`` (nested defs excluded; ``memo``:
    see ``activity.header_effects``)."""
    _block(fn.body, frozenset(), {} if memo is None else memo)
