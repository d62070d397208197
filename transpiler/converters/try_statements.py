"""``try`` -> ``with tg.eager_only('try/except'): try: ...`` (the body is still converted;
the runtime refuses to stage what it cannot repeat)."""
from transpiler.converters import base
from transpiler.pyct import templates


class TryTransformer(base.Transformer):

    def visit_Try(self, node):
        node = self.generic_visit(node)
        return templates.replace("with tg.eager_only('try/except'):\n    body", node, body=[node])


def transform(node, ctx):
    return TryTransformer(ctx).visit(node)
