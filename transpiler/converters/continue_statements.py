"""``continue`` -> a ``cont`` flag reset at the top of each iteration.

    while test:
        cont = False
        ... continue -> cont = True   (later statements of the body: if not cont)
"""
import gast

from transpiler.converters import base
from transpiler.converters import jumps
from transpiler.pyct import templates


class ContinueTransformer(base.Transformer):
    statements_only = True

    def _visit_loop(self, node):
        node = self.generic_visit(node)   # inner loops own their continues
        if not jumps.contains(node.body, gast.Continue, into_loops=False):
            return node
        cont = self.ctx.namer.new('cont')
        lowering = jumps.Lowering(gast.Continue,
                                  lambda c: templates.replace('cont = True', c, cont=cont), cont,
                                  namer=self.ctx.namer)
        body, _, _ = lowering.block(node.body)
        node.body = templates.replace('cont = False', node, cont=cont) + body
        return node

    visit_While = visit_For = _visit_loop


def transform(node, ctx):
    return ContinueTransformer(ctx).visit(node)
