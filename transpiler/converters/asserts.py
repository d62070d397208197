"""``assert test, msg`` -> ``tg.assert_stmt(test, lambda: msg)`` (``None`` without a message)."""
import gast

from transpiler.converters import base
from transpiler.pyct import origin


class AssertTransformer(base.Transformer):
    statements_only = True

    def visit_Assert(self, node):
        node = self.generic_visit(node)
        msg = base.thunk(node.msg) if node.msg is not None else gast.Constant(value=None, kind=None)
        stmt = gast.Expr(value=base.tg_call('assert_stmt', [node.test, msg], node))
        origin.inherit(stmt, node)
        return stmt


def transform(node, ctx):
    return AssertTransformer(ctx).visit(node)
