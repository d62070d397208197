"""Templates: build AST from a small string of Python with placeholder names.

    replace('''
        def body_name(params):
            body
            return state
    ''', body_name='if_body', params=['y'], body=stmts, state=['y'])

A placeholder is a Name in the template. Its replacement may be
- a str: a name (also for function names and parameters);
- an AST node: deep-copied in, its context set from the placeholder (Load/Store); one the
  caller gives up (``_owned``: built for this template, or taken from the statement being
  replaced) is put in as it is, once;
- a list: in statement position, statements spliced in; as parameters, one parameter
  per element; in expression position, a tuple of the elements.
Nodes created by the template get the ``origin`` of the construct they come from.
"""
import functools
import textwrap

import gast

from transpiler.pyct import clone
from transpiler.pyct import gast_bridge
from transpiler.pyct import origin as origin_lib
from transpiler.pyct import traversal


def _set_ctx(node, ctx):
    if isinstance(node, (gast.Name, gast.Attribute, gast.Subscript, gast.Starred)):
        node.ctx = ctx()
        if isinstance(node, gast.Starred):
            _set_ctx(node.value, ctx)
    elif isinstance(node, (gast.Tuple, gast.List)):
        node.ctx = ctx()
        for e in node.elts:
            _set_ctx(e, ctx)
    return node


def _to_expr(value, ctx):
    if isinstance(value, str):
        return gast.Name(id=value, ctx=ctx(), annotation=None, type_comment=None)
    if isinstance(value, (list, tuple)):
        return gast.Tuple(elts=[_to_expr(v, ctx) for v in value], ctx=ctx())
    node = clone.copy(value)
    return _set_ctx(node, ctx) if ctx is not gast.Load else node


class _Replacer(traversal.Transformer):
    def __init__(self, replacements, owned=()):
        self.repl = replacements
        self.owned = set(owned)

    def visit_Expr(self, node):
        if isinstance(node.value, gast.Name) and isinstance(self.repl.get(node.value.id), list):
            name = node.value.id
            if name in self.owned:          # given up by the caller: spliced once, as is
                self.owned.discard(name)
                return list(self.repl[name])
            return [clone.copy(s) for s in self.repl[name]]
        return self.generic_visit(node)

    def visit_Name(self, node):
        if node.id not in self.repl:
            return node
        value = self.repl[node.id]
        if node.id in self.owned and isinstance(value, gast.AST):
            self.owned.discard(node.id)     # given up by the caller: used once, not copied
            return _set_ctx(value, type(node.ctx)) if not isinstance(node.ctx, gast.Load) \
                else value
        return _to_expr(value, type(node.ctx))

    def visit_FunctionDef(self, node):
        if node.name in self.repl:
            node.name = self.repl[node.name]
        return self.generic_visit(node)

    def visit_arguments(self, node):
        params = []
        for arg in node.args:
            value = self.repl.get(arg.id, arg.id)
            for name in ([value] if isinstance(value, str) else value):
                params.append(gast.Name(id=name, ctx=gast.Param(), annotation=None, type_comment=None))
        node.args = params
        return node


@functools.lru_cache(maxsize=1024)
def _parsed(template):
    """The template's parsed module (read-only: ``replace`` fills a copy of it)."""
    return gast_bridge.parse(textwrap.dedent(template))


def replace(template, origin=None, _owned=(), **replacements):
    """Statements of ``template`` with placeholders replaced (see module docstring).
    ``_owned``: placeholders whose statement lists or nodes the caller gives up (used
    nowhere else): put in without a copy the first time (a body moved into its body
    function, the test of the ``if`` being replaced)."""
    module = clone.copy(_parsed(template))
    stmts = _Replacer(replacements, _owned).visit(module).body
    if origin is not None:
        origin_lib.inherit(stmts, origin)
    return stmts


def replace_as_expression(template, origin=None, _owned=(), **replacements):
    (stmt,) = replace(template, origin, _owned, **replacements)
    return stmt.value
