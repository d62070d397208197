"""List comprehensions -> a local function with a ``for`` loop (run first).

    ys = [f(r) for r in x if r.sum() > 0]
->
    def listcomp():
        items = []
        for r in x:
            if r.sum() > 0:
                items.append(f(r))
        return items
    ys = listcomp()

The loop and the ``if`` are then converted like any others, so a comprehension over a
tensor becomes a ``while`` node and its result a list whose length is known at run time;
over a Python list it stays a Python loop. The function keeps the comprehension's own
scope for its variables. One whose filter binds a name (``:=``) binds it in the function:
``walrus_comprehensions`` writes it out as the function's own loop. Comprehensions inside
lambdas, and other ones using ``:=``, stay as they are (set/dict comprehensions and
generator expressions too).
"""
import sys

import gast

from transpiler.converters import base
from transpiler.converters import walrus_comprehensions
from transpiler.pyct import anno
from transpiler.pyct import origin
from transpiler.pyct import templates
from transpiler.pyct import traversal

_SCOPES = (gast.Lambda, gast.FunctionDef, gast.AsyncFunctionDef, gast.ClassDef,
           gast.SetComp, gast.DictComp, gast.GeneratorExp)


def _outer_listcomps(stmt):
    """ListComp nodes of ``stmt`` not inside a nested scope or another comprehension."""
    found, stack = [], [stmt]
    while stack:
        node = stack.pop()
        for child in traversal.iter_child_nodes(node):
            if isinstance(child, gast.ListComp):
                if not any(isinstance(n, gast.NamedExpr) for n in traversal.walk(child)):
                    found.append(child)
            elif isinstance(child, gast.stmt) or isinstance(child, _SCOPES):
                continue      # nested statements are visited with their own block
            else:
                stack.append(child)
    return found


class ComprehensionTransformer(base.Transformer):

    def visit_ListComp(self, node):
        return node

    def visit_Lambda(self, node):
        return node

    def _block(self, stmts):
        out = []
        for stmt in stmts:
            comp = walrus_comprehensions.value_comprehension(stmt)
            if comp is not None:        # (binds in this function: a loop of its own)
                built, items = walrus_comprehensions.write_out(comp, self.ctx.namer)
                _replace(comp, gast.Name(id=items, ctx=gast.Load(), annotation=None,
                                         type_comment=None))
                out.extend(self.visit(s) for s in built)
            for comp in _outer_listcomps(stmt):
                out.extend(self._as_function(comp))
            out.append(self.visit(stmt))
        return out

    def generic_visit(self, node):
        for field in ('body', 'orelse', 'finalbody'):
            block = getattr(node, field, None)
            if isinstance(block, list) and block and isinstance(block[0], gast.stmt):
                setattr(node, field, self._block(block))
        for h in getattr(node, 'handlers', []):
            h.body = self._block(h.body)
        return node

    def visit_FunctionDef(self, node):
        return self.generic_visit(node)

    def _as_function(self, comp):
        fn_name, items = self.ctx.namer.new('listcomp'), self.ctx.namer.new('items')
        body = templates.replace('items.append(elt)', comp, items=items, elt=comp.elt)
        for gen in reversed(comp.generators):
            for cond in reversed(gen.ifs):
                body = templates.replace('if cond:\n    body', comp, cond=cond, body=body)
            body = templates.replace('for target in iter_:\n    body', comp,
                                     target=gen.target, iter_=gen.iter, body=body)
        fn = templates.replace('def fn_name():\n    items = []\n    body\n    return items',
                               comp, fn_name=fn_name, items=items, body=body)
        if sys.version_info < (3, 12):      # (its own frame; inlined since PEP 709)
            anno.setanno(fn[0], anno.Key.EAGER_SCOPE, '<listcomp>')
        call = gast.Call(func=gast.Name(id=fn_name, ctx=gast.Load(), annotation=None,
                                        type_comment=None), args=[], keywords=[])
        origin.inherit(call, comp)
        _replace(comp, call)
        return [self.generic_visit(f) for f in fn]   # comprehensions inside the element


def _replace(old, new):
    """Turn node ``old`` into ``new`` in place (its parent keeps pointing at it)."""
    old.__class__ = new.__class__
    for field in list(old._fields):
        if hasattr(old, field) and field not in new._fields:
            delattr(old, field)
    for field in new._fields:
        setattr(old, field, getattr(new, field))
    for attr in ('lineno', 'col_offset', 'end_lineno', 'end_col_offset'):
        if hasattr(new, attr):
            setattr(old, attr, getattr(new, attr))


def transform(node, ctx):
    return ComprehensionTransformer(ctx).visit(node)
