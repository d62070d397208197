"""Tests that bind a name (``:=``): the binding moves out of the test.

An ``if`` whose ``and``/``or`` chain binds in an operand after the first evaluates those
operands by statements (``visit_If``); a ``while`` whose test binds first:

    while (s := f(x)) < 20:              s = f(x)
        body                      ->     while s < 20:
                                             body      (each ``continue``: s = f(x) first)
                                             s = f(x)

Python evaluates the test before every iteration and once more at the end, so ``s`` holds
the value of the last test. The rewrite evaluates ``f(x)`` at exactly those points: before
the loop, at the end of each iteration, and before each ``continue`` of this loop (not of
inner loops); ``break`` and ``return`` leave without evaluating it, as in Python. Then
``s`` is an ordinary variable assigned before and in the loop, which the loop converter
carries as state. Only a binding on the test's leftmost evaluation path (the test itself,
or the left side of a comparison, operator or ``and``/``or`` chain, or the operand of
``not``) is moved, and only when the test has one: anything else would change when or
whether ``f(x)`` is evaluated, so it is left as it was.
"""
import copy

import gast

from transpiler.converters import base
from transpiler.pyct import templates
from transpiler.pyct import traversal


def _leftmost(test):
    """The NamedExpr evaluated first and unconditionally in ``test``, or None."""
    node = test
    while True:
        if isinstance(node, gast.NamedExpr):
            return node
        if isinstance(node, (gast.Compare, gast.BinOp)):
            node = node.left
        elif isinstance(node, gast.BoolOp):
            node = node.values[0]
        elif isinstance(node, gast.UnaryOp):
            node = node.operand
        else:
            return None


def _assign(named):
    target = gast.Name(id=named.target.id, ctx=gast.Store(), annotation=None,
                       type_comment=None)
    return gast.copy_location(gast.Assign(targets=[target], value=copy.deepcopy(named.value),
                                          type_comment=None), named)


class _Continues(traversal.Transformer):
    """``continue`` of one loop -> the re-binding, then ``continue``."""

    def __init__(self, named):
        self.named = named

    def visit_Continue(self, node):
        return [_assign(self.named), node]

    def _skip(self, node):             # inner loops and functions own their continues
        return node

    visit_While = visit_For = visit_AsyncFor = _skip
    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = visit_ClassDef = _skip


class WalrusTestTransformer(base.Transformer):
    statements_only = True

    def visit_While(self, node):
        node = self.generic_visit(node)
        named = _leftmost(node.test)
        if named is None or sum(isinstance(n, gast.NamedExpr) for n in traversal.walk(node.test)) != 1:
            return node
        before = _assign(named)
        node.test = _replace(node.test, named)
        continues = _Continues(named)
        node.body = [s for stmt in node.body for s in _as_list(continues.visit(stmt))]
        node.body.append(_assign(named))
        return [before, node]


    def visit_If(self, node):
        """``if A and (m := B) > 1:`` -> ``t = A``, ``if t: t = (m := B) > 1``, ``if t:``
        (``or``: ``if not t``): each operand after the first is evaluated by a statement
        when the ones before let it, as ``and``/``or`` would, so its ``:=`` binds in the
        function (in a lambda, as converted operands are, it would bind there)."""
        node = self.generic_visit(node)
        test = node.test
        if not isinstance(test, gast.BoolOp) or not any(
                isinstance(n, gast.NamedExpr) for v in test.values[1:] for n in traversal.walk(v)):
            return node
        flag = self.ctx.namer.new('test')
        load = gast.Name(id=flag, ctx=gast.Load(), annotation=None, type_comment=None)
        rest = []
        for value in reversed(test.values[1:]):
            keep = copy.deepcopy(load) if isinstance(test.op, gast.And) else base.not_(flag)
            step = templates.replace('if keep:\n    flag = value', value, keep=keep, flag=flag,
                                     value=value)
            step[0].body += rest
            rest = step
        node.test = gast.copy_location(load, test)
        return templates.replace('flag = value', test, flag=flag, value=test.values[0]) + \
            rest + [node]


def _as_list(result):
    return result if isinstance(result, list) else [result]


class _Swap(traversal.Transformer):
    """``named`` -> ``load`` wherever it stands."""

    def __init__(self, named, load):
        self.named, self.load = named, load

    def visit_NamedExpr(self, node):
        return self.load if node is self.named else node


def _replace(test, named):
    """``test`` with ``named`` replaced by a load of its name."""
    load = gast.copy_location(gast.Name(id=named.target.id, ctx=gast.Load(), annotation=None,
                                        type_comment=None), named)
    return load if test is named else _Swap(named, load).visit(test)


def transform(node, ctx):
    return WalrusTestTransformer(ctx).visit(node)
