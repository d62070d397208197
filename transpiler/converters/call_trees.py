"""Every call ``f(a, *b, k=c, **d)`` -> ``tg.call(f, a, *b, k=c, **d)``; method calls too
(``tg.call(x.sum, dim=1)``).

What a comprehension's ``for`` iterates: ``tg.iterated(it)`` (see visit_GeneratorExp).

Left alone: calls that inspect their caller's frame (``locals()``, ``globals()``, ``vars()``,
``eval``, ``exec``, ``super``). A zero-argument ``super()`` becomes
``super(__class__, <first parameter>)`` so that it also works inside body functions.
"""
import gast

from transpiler.converters import base

_FRAME_SENSITIVE = frozenset({'locals', 'globals', 'vars', 'eval', 'exec', 'super', 'dir'})


class CallTransformer(base.Transformer):

    def __init__(self, ctx):
        super().__init__(ctx)
        self.first_params = []

    def visit_FunctionDef(self, node):
        args = node.args.posonlyargs + node.args.args
        self.first_params.append(args[0].id if args else None)
        node = self.generic_visit(node)
        self.first_params.pop()
        return node

    def visit_Lambda(self, node):
        # (a zero-argument ``super()`` in a lambda takes the lambda's own first argument,
        # as Python's does: eager's TypeError when that is no instance)
        args = node.args.posonlyargs + node.args.args
        self.first_params.append(args[0].id if args else None)
        node = self.generic_visit(node)
        self.first_params.pop()
        return node

    def visit_GeneratorExp(self, node):
        # A generator expression stays lazy (no body function), but its calls go through
        # tg.call like any other: print/warnings/logging in it were run once, at trace time,
        # and then dropped from the graph; user functions in it ran unconverted. So do a
        # set or dict comprehension's, and what each ``for`` of it iterates goes through
        # tg.iterated (``{k: v for k, v in it}`` or ``next(it)`` in it, of the caller's
        # iterator: refused before it runs).
        node = self.generic_visit(node)
        for gen in node.generators:
            gen.iter = base.tg_call('iterated', [gen.iter], gen.iter)
        return node

    visit_SetComp = visit_DictComp = visit_GeneratorExp

    def visit_Call(self, node):
        node = self.generic_visit(node)
        if isinstance(node.func, gast.Name) and node.func.id in _FRAME_SENSITIVE:
            if node.func.id == 'super' and not node.args and self.first_params[-1]:
                node.args = [gast.Name(id=n, ctx=gast.Load(), annotation=None, type_comment=None)
                             for n in ('__class__', self.first_params[-1])]
            return node
        return base.tg_call('call', [node.func] + node.args, node, node.keywords)


def transform(node, ctx):
    return CallTransformer(ctx).visit(node)
