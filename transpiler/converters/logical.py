"""``and``/``or``/``not``, comparison chains and ``is True``/``is False`` -> ``tg.and_``/
``tg.or_``/``tg.not_``/``tg.is_bool``.

    a and b and c  ->  tg.and_(a, lambda: b, lambda: c)      (short-circuit, returns an operand)
    a and b or c   ->  tg.ifexp(a, lambda: tg.or_(b, lambda: c), lambda: c)
    not x          ->  tg.not_(x)
    a in b         ->  tg.contains(a, b, False)              (``not in``: True)
    a < b < c      ->  tg.and_(a < b, lambda: b < c)         (b evaluated once: a walrus
                                                              temporary when b is not a name
                                                              or constant)
"""
import copy

import gast

from transpiler.converters import base
from transpiler.pyct import anno


class LogicalTransformer(base.OperandTransformer):

    def visit_BoolOp(self, node):
        if isinstance(node.op, gast.Or) and isinstance(node.values[0], gast.BoolOp) and \
                isinstance(node.values[0].op, gast.And):
            return self._and_or(node)
        node = self.generic_visit(node)
        op = 'and_' if isinstance(node.op, gast.And) else 'or_'
        return self._call(op, [node.values[0]] + [self.lazy(v) for v in node.values[1:]], node)

    def _and_or(self, node):
        """``A and R or D`` (the pre-ternary idiom) -> ``(R or D) if A else D``: the same
        value for Python operands, and on tensors each path yields R-or-D's operand rather
        than the bool A, so the paths agree in dtype."""
        first = node.values[0]
        rest = first.values[1:]
        r = rest[0] if len(rest) == 1 else gast.BoolOp(op=gast.And(), values=rest)
        d = node.values[1] if len(node.values) == 2 else \
            gast.BoolOp(op=gast.Or(), values=node.values[1:])
        r_or_d = gast.BoolOp(op=gast.Or(), values=[r, copy.deepcopy(d)])
        test = self.visit(first.values[0])
        return self._call('ifexp', [test, self.lazy(self.visit(r_or_d)),
                                    self.lazy(self.visit(d))], node)

    def visit_UnaryOp(self, node):
        node = self.generic_visit(node)
        if not isinstance(node.op, gast.Not):
            return node
        return self._call('not_', [node.operand], node)

    def visit_Compare(self, node):
        node = self.generic_visit(node)
        if len(node.ops) == 1:
            return self._is_bool(node)
        operands, links = [node.left] + list(node.comparators), []
        for i, op in enumerate(node.ops):
            right = operands[i + 1]
            if i + 1 < len(node.ops) and not isinstance(right, (gast.Name, gast.Constant)):
                tmp = self.ctx.namer.new('cmp')
                operands[i + 1] = gast.Name(id=tmp, ctx=gast.Load(), annotation=None, type_comment=None)
                right = gast.NamedExpr(target=gast.Name(id=tmp, ctx=gast.Store(), annotation=None,
                                                        type_comment=None), value=right)
                anno.setanno(right, anno.Key.SKIP, True)     # (read by the next link only)
            links.append(gast.Compare(left=operands[i], ops=[op], comparators=[right]))
        return self._call('and_', [links[0]] + [self.lazy(c) for c in links[1:]], node)

    def _is_bool(self, node):
        """``x is True`` / ``x is not False`` -> ``tg.is_bool(x, True, False)``: ``x`` may
        stand for a Python bool known only at run time. ``a in b`` / ``a not in b`` ->
        ``tg.contains(a, b, negate)``: of a traced tensor ``b``, a bool known when the graph
        runs."""
        op, right = node.ops[0], node.comparators[0]
        if isinstance(op, (gast.In, gast.NotIn)):
            negate = gast.Constant(value=isinstance(op, gast.NotIn), kind=None)
            return self._call('contains', [node.left, right, negate], node)
        if not isinstance(op, (gast.Is, gast.IsNot)) or not isinstance(right, gast.Constant) \
                or not isinstance(right.value, bool):
            return node
        negate = gast.Constant(value=isinstance(op, gast.IsNot), kind=None)
        return self._call('is_bool', [node.left, gast.Constant(value=right.value, kind=None),
                                      negate], node)

    _call = staticmethod(base.tg_call)


def transform(node, ctx):
    return LogicalTransformer(ctx).visit(node)
