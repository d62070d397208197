"""Lowering a jump statement (return, break, continue) to a flag.

The jump becomes ``flag = True`` (plus whatever the caller adds); every statement that
may run after a possible jump, in the same block or an enclosing one up to the construct
that owns the jump, is guarded by ``if not flag:``. Used by return_statements,
break_statements and continue_statements.
"""
import gast

from transpiler.converters import base
from transpiler.pyct import templates
from transpiler.pyct import traversal


class Lowering:
    """Configure with the jump type, its replacement, the flag, and whether jumps inside
    nested loops belong to us (returns do; breaks/continues belong to the inner loop)."""

    def __init__(self, jump_type, replace, flag, into_loops=False, on_loop=None):
        self.jump_type = jump_type
        self.replace = replace        # jump stmt -> list of stmts
        self.flag = flag
        self.into_loops = into_loops
        self.on_loop = on_loop        # loop that may jump -> None (e.g. add a loop test)

    def block(self, stmts):
        """(new statements, may_jump, always_jumps)."""
        out = []
        for i, stmt in enumerate(stmts):
            new, may, always = self._stmt(stmt)
            out.extend(new)
            if always:
                return out, True, True
            if may:
                rest, _, _ = self.block(stmts[i + 1:])
                if rest:
                    out += templates.replace('if flag_test:\n    rest', stmts[i + 1],
                                             ('rest',),     # (built here: moved, not copied)
                                             flag_test=base.not_(self.flag), rest=rest)
                return out, True, False
        return out, False, False

    def _stmt(self, stmt):
        if isinstance(stmt, self.jump_type):
            return self.replace(stmt), True, True
        if isinstance(stmt, gast.If):
            stmt.body, may_body, always_body = self.block(stmt.body)
            stmt.orelse, may_else, always_else = self.block(stmt.orelse)
            return [stmt], may_body or may_else, always_body and always_else
        if isinstance(stmt, (gast.For, gast.While)):
            may = False
            if self.into_loops:
                stmt.body, may, _ = self.block(stmt.body)
                if may and self.on_loop is not None:
                    self.on_loop(stmt)
            stmt.orelse, may_else, _ = self.block(stmt.orelse)
            return [stmt], may or may_else, False
        if isinstance(stmt, (gast.With, gast.Try)):
            may = False
            for field in ('body', 'orelse', 'finalbody'):
                if hasattr(stmt, field):
                    new, m, _ = self.block(getattr(stmt, field))
                    setattr(stmt, field, new)
                    may |= m
            for h in getattr(stmt, 'handlers', []):
                h.body, m, _ = self.block(h.body)
                may |= m
            return [stmt], may, False
        return [stmt], False, False


def contains(stmts, jump_type, into_loops):
    """Whether a jump of ``jump_type`` that belongs to this level occurs in ``stmts``."""
    for stmt in stmts:
        stack = [stmt]
        while stack:
            node = stack.pop()
            if isinstance(node, jump_type):
                return True
            if isinstance(node, (gast.FunctionDef, gast.AsyncFunctionDef, gast.ClassDef, gast.Lambda)):
                continue
            if isinstance(node, (gast.For, gast.While)) and not into_loops:
                stack.extend(node.orelse)
                continue
            stack.extend(n for n in traversal.iter_child_nodes(node) if isinstance(n, gast.stmt)
                         or isinstance(n, gast.excepthandler))
    return False
