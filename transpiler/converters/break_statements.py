"""``break`` -> a ``brk`` flag; loop ``else:`` clauses -> an ``if`` after the loop.

    brk = False
    while not brk and test:          for loops: extra loop test `not brk`
        ... break -> brk = True      (later statements of the body: if not brk)
    if not brk:
        <else clause>
"""
import gast

from transpiler.converters import base
from transpiler.converters import jumps
from transpiler.converters.return_statements import add_loop_test
from transpiler.pyct import templates


class BreakTransformer(base.Transformer):
    statements_only = True

    def _visit_loop(self, node):
        node = self.generic_visit(node)   # inner loops own their breaks
        orelse, node.orelse = node.orelse, []
        if not jumps.contains(node.body, gast.Break, into_loops=False):
            return [node] + orelse
        brk = self.ctx.namer.new('brk')
        flag = templates.replace('brk = False', node, brk=brk)
        lowering = jumps.Lowering(gast.Break, lambda b: templates.replace('brk = True', b, brk=brk), brk,
                                  namer=self.ctx.namer)
        node.body, _, _ = lowering.block(node.body)
        add_loop_test(node, base.not_(brk))
        if orelse:
            orelse = templates.replace('if not_brk:\n    orelse', orelse[0],
                                       not_brk=base.not_(brk), orelse=orelse)
        return flag + [node] + orelse

    visit_While = visit_For = _visit_loop


def transform(node, ctx):
    return BreakTransformer(ctx).visit(node)
