"""Formatted text whose operands may be tensors, made when the graph runs.

    f"s={x:.3f} {y!r}"   -> tg.fstring('s=', (x, '', '.3f'), ' ', (y, 'r', ''))
    "%d: %s" % (i, x)    -> tg.percent('%d: %s', (i, x))     (a str literal on the left)

With Python operands the operators compute exactly Python's str; with traced tensors they
give text that ``print`` and ``assert`` render on every run. A format spec that is itself
an f-string (``f"{x:{w}}"``) becomes a nested ``tg.fstring``; a spec with no fields stays
a literal. (``str.format``, ``str``, ``repr`` and ``format`` are calls: ``tg.call``
handles them.)
"""
import gast

from transpiler.converters import base
from transpiler.pyct import traversal

_CONVERSIONS = {-1: '', 115: 's', 114: 'r', 97: 'a'}


def _literal(value):
    return gast.Constant(value=value, kind=None)


def _spec(spec):
    """A FormattedValue's spec (None, or a JoinedStr already converted): an expression."""
    if spec is None:
        return _literal('')
    return spec


class FormattedStringTransformer(traversal.Transformer):

    def visit_JoinedStr(self, node):
        node = self.generic_visit(node)
        if all(isinstance(v, gast.Constant) for v in node.values):
            return _literal(''.join(str(v.value) for v in node.values))
        parts = []
        for value in node.values:
            if isinstance(value, gast.FormattedValue):
                parts.append(gast.Tuple(elts=[value.value, _literal(_CONVERSIONS[value.conversion]),
                                              _spec(value.format_spec)], ctx=gast.Load()))
            else:
                parts.append(value)
        return base.tg_call('fstring', parts, node)

    def visit_BinOp(self, node):
        node = self.generic_visit(node)
        if isinstance(node.op, gast.Mod) and isinstance(node.left, gast.Constant) and \
                isinstance(node.left.value, str):
            return base.tg_call('percent', [node.left, node.right], node)
        return node


def transform(node, ctx):
    return FormattedStringTransformer().visit(node)
