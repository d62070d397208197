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

    def __init__(self, jump_type, replace, flag, into_loops=False, on_loop=None, namer=None):
        self.jump_type = jump_type
        self.namer = namer            # (fresh names: a finally's pending jump)
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
        if isinstance(stmt, gast.Try):
            return self._try(stmt)
        if isinstance(stmt, gast.With):
            stmt.body, may, _ = self.block(stmt.body)
            return [stmt], may, False
        return [stmt], False, False

    def _try(self, stmt):
        """A ``try``: its ``else`` runs only if the body did not jump; its ``finally`` runs
        whatever is pending, and a jump there replaces the pending one (Python's rules):
        it runs with the flag down, raised again after it if it jumped or one was pending."""
        stmt.body, may_body, _ = self.block(stmt.body)
        may = may_body
        for h in stmt.handlers:
            h.body, m, _ = self.block(h.body)
            may |= m
        if stmt.orelse:
            first = stmt.orelse[0]
            orelse, m, _ = self.block(stmt.orelse)
            if may_body and orelse:
                orelse = templates.replace('if flag_test:\n    rest', first, ('rest',),
                                           flag_test=base.not_(self.flag), rest=orelse)
            stmt.orelse, may = orelse, may or m
        if stmt.finalbody:
            first = stmt.finalbody[0]
            final, m, _ = self.block(stmt.finalbody)
            if m and may:
                pending = self.namer.new(self.flag + '_pending') if self.namer else \
                    self.flag + '_pending'
                final = (templates.replace('pending = flag\nflag = False', first,
                                           pending=pending, flag=self.flag) + final +
                         templates.replace('flag = flag or pending', stmt.finalbody[-1],
                                           pending=pending, flag=self.flag))
            stmt.finalbody, may = final, may or m
        return [stmt], may, False


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
