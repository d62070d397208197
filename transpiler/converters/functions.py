"""Function-level shaping, run first.

- ``as_function_def``: a top-level lambda becomes ``def <name>(args): return <body>``.
- the top-level function loses its decorators (the converted function is the undecorated
  one) and its docstring (the loader copies ``__doc__``).
- in every user function, ``global``/``nonlocal`` statements are hoisted to the top, so
  they still cover the whole function once its blocks move into body functions (which
  redeclare them where they assign such names; see ``base.declarations``).
"""
import gast

from transpiler.converters import base
from transpiler.pyct import origin


def as_function_def(lam, name):
    fn = gast.FunctionDef(name=name, args=lam.args, body=[gast.Return(value=lam.body)],
                          decorator_list=[], returns=None, type_comment=None, type_params=[])
    origin.inherit(fn, lam)
    return fn


def _is_docstring(stmt):
    return (isinstance(stmt, gast.Expr) and isinstance(stmt.value, gast.Constant)
            and isinstance(stmt.value.value, str))


class DeclarationHoister(base.Transformer):
    statements_only = True

    def visit_FunctionDef(self, node):
        node = self.generic_visit(node)
        found = {gast.Global: [], gast.Nonlocal: []}
        node.body = self._strip(node.body, found)
        decls = [kind(names=sorted(set(names))) for kind, names in found.items() if names]
        origin.inherit(decls, node)
        node.body = decls + (node.body or [gast.Pass()])
        return node

    def _strip(self, block, found):
        out = []
        for stmt in block:
            if isinstance(stmt, (gast.Global, gast.Nonlocal)):
                found[type(stmt)].extend(stmt.names)
                continue
            for field in ('body', 'orelse', 'finalbody'):
                if hasattr(stmt, field) and not isinstance(stmt, (gast.FunctionDef, gast.ClassDef)):
                    setattr(stmt, field, self._strip(getattr(stmt, field), found) or
                            ([gast.Pass()] if field == 'body' else []))
            for h in getattr(stmt, 'handlers', []):
                h.body = self._strip(h.body, found) or [gast.Pass()]
            out.append(stmt)
        return out


def transform(node, ctx):
    node.decorator_list = []
    if node.body and _is_docstring(node.body[0]):
        node.body = node.body[1:] or [gast.Pass()]
    return DeclarationHoister(ctx).visit(node)
