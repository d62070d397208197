"""Item reads by a computed index -> ``tg.getitem`` (run last).

    best = bptrs[best_id]      ->  best = tg.getitem(bptrs, best_id)

A Python list or tuple indexed by a number the graph knows only when it runs (an
``.item()``, ``int(t)``, an ``argmax``) cannot be read while tracing: ``list[i]`` asks for
the int. ``tg.getitem`` reads a list of numbers of one kind by that number when the graph
runs (``runtime.operators.item_reads``) and is ``obj[index]`` for anything else. Indices
written as constants, slices and tuples (``x[0]``, ``x[:, 1:]``, ``x[i, j]``), stores and
deletes are left as they are.
"""
import gast

from transpiler.converters import base
from transpiler.pyct import anno


def _computed(index) -> bool:
    if isinstance(index, gast.UnaryOp):
        return not isinstance(index.operand, gast.Constant)
    return isinstance(index, (gast.Name, gast.Attribute, gast.Call, gast.BinOp,
                              gast.Subscript))


class SubscriptTransformer(base.Transformer):

    def visit_Subscript(self, node):
        node = self.generic_visit(node)
        if not isinstance(node.ctx, gast.Load) or anno.getanno(node, anno.Key.SKIP) or \
                not _computed(node.slice):
            return node
        return base.tg_call('getitem', [node.value, node.slice], node)


def transform(node, ctx):
    return SubscriptTransformer(ctx).visit(node)
