"""``a if test else b`` -> ``tg.ifexp(test, lambda: a, lambda: b)``."""
from transpiler.converters import base


class IfExpTransformer(base.Transformer):

    def visit_IfExp(self, node):
        node = self.generic_visit(node)
        return base.tg_call('ifexp', [node.test, base.thunk(node.body), base.thunk(node.orelse)], node)


def transform(node, ctx):
    return IfExpTransformer(ctx).visit(node)
