"""``a if test else b`` -> ``tg.ifexp(test, lambda: a, lambda: b)``."""
from transpiler.converters import base


class IfExpTransformer(base.OperandTransformer):

    def visit_IfExp(self, node):
        node = self.generic_visit(node)
        return base.tg_call('ifexp', [node.test, self.lazy(node.body), self.lazy(node.orelse)], node)


def transform(node, ctx):
    return IfExpTransformer(ctx).visit(node)
