"""Code generation: gast -> Python source (and the ast parsed from it).

astunparse gives the most readable output (here reading the gast tree itself); constructs
it predates (``match``, some f-string forms) fall back to the standard library's
``ast.unparse``.
"""
import ast
import io

import astunparse
import gast

from transpiler.pyct import gast_bridge


def to_ast(node):
    tree = gast_bridge.gast_to_ast(node)
    return ast.fix_missing_locations(tree if isinstance(tree, ast.Module)
                                     else ast.Module(body=[tree], type_ignores=[]))


def expr_source(node):
    """An expression's source on one line (``self.h``, ``d['k']``), unchecked: for names."""
    return ast.unparse(gast_bridge.gast_to_ast(node))


def to_source(node):
    return to_source_and_ast(node)[0]


def to_source_and_ast(node):
    """(source, the ``ast.Module`` parsed from it): the parse that checks astunparse's text
    is the one the loader compiles and the line map reads (one parse, not three)."""
    try:
        text = io.StringIO()
        _GastUnparser(ast.Module(body=[node], type_ignores=[])
                      if not isinstance(node, gast.Module) else node, text)
        source = _without_blank_lines(text.getvalue().strip('\n') + '\n')
        return source, ast.parse(source)
    except Exception:  # noqa: BLE001 - astunparse fails on constructs newer than it
        tree = gast_bridge.gast_to_ast(node)     # (no locations: only unparsed, never compiled)
        if not isinstance(tree, ast.Module):
            tree = ast.Module(body=[tree], type_ignores=[])
        source = _without_blank_lines(ast.unparse(tree).strip('\n') + '\n')
        return source, ast.parse(source)


class _GastUnparser(astunparse.Unparser):
    """astunparse's ``Unparser`` reading a gast tree itself: the text it gives the tree
    ``gast_bridge.gast_to_ast`` makes (converting the whole tree first cost twice the
    unparsing). It dispatches on class names, which gast shares with ast; where it checks
    ``ast`` classes (``elif`` chains, ``and``/``or``, ``1 .real``, a parenthesized annotated
    name) or gast's nodes differ from ast's (parameters and except-clause names are Names),
    it gets an ast node made on the spot, whose children stay gast; f-strings, which it
    unparses with a plain ``Unparser``, are converted whole."""

    boolops = {**astunparse.Unparser.boolops, gast.And: 'and', gast.Or: 'or'}

    def _If(self, t):
        super()._If(_elif_chain(t))

    def _AnnAssign(self, t):
        if isinstance(t.target, gast.Name):
            t = ast.AnnAssign(target=ast.Name(id=t.target.id, ctx=ast.Store()),
                              annotation=t.annotation, value=t.value, simple=t.simple)
        super()._AnnAssign(t)

    def _Attribute(self, t):
        if isinstance(t.value, gast.Constant):
            t = ast.Attribute(value=ast.Constant(value=t.value.value, kind=t.value.kind),
                              attr=t.attr, ctx=ast.Load())
        super()._Attribute(t)

    def _ExceptHandler(self, t):
        super()._ExceptHandler(ast.ExceptHandler(
            type=t.type, name=t.name.id if t.name is not None else None, body=t.body))

    def _arguments(self, t):
        super()._arguments(ast.arguments(
            posonlyargs=[_arg(a) for a in t.posonlyargs], args=[_arg(a) for a in t.args],
            vararg=_arg(t.vararg), kwonlyargs=[_arg(a) for a in t.kwonlyargs],
            kw_defaults=t.kw_defaults, kwarg=_arg(t.kwarg), defaults=t.defaults))

    def _Subscript(self, t):
        if isinstance(t.slice, gast.Tuple) and any(isinstance(e, gast.Slice)
                                                   for e in t.slice.elts):
            # astunparse writes ``a[1:2, ::3]`` as ``a[(1:2, ::3)]``, which does not
            # parse: the text is ast.unparse's (to_source_and_ast), found without
            # unparsing the rest and parsing it
            raise SyntaxError('a slice in a subscript tuple')
        super()._Subscript(t)

    def _JoinedStr(self, t):
        super()._JoinedStr(gast_bridge.gast_to_ast(t))

    def _FormattedValue(self, t):
        super()._FormattedValue(gast_bridge.gast_to_ast(t))


def _elif_chain(t):
    """An ast ``If`` for gast ``If`` ``t``, and for each ``If`` alone in an ``else`` below
    it (what astunparse writes as ``elif``)."""
    orelse = t.orelse
    if len(orelse) == 1 and isinstance(orelse[0], gast.If):
        orelse = [_elif_chain(orelse[0])]
    return ast.If(test=t.test, body=t.body, orelse=orelse)


def _arg(name):
    """An ast ``arg`` for a gast parameter (a Name)."""
    if name is None:
        return None
    return ast.arg(arg=name.id, annotation=name.annotation, type_comment=None)


def _without_blank_lines(source):
    compact = ''.join(line for line in source.splitlines(True) if line.strip())
    if not any(mark in source for mark in ("'''", '"""', '\\\n')):
        # a blank line is more than layout only inside a string spanning lines, which
        # needs triple quotes or a backslash-newline: without them, skip the two parses
        # and dumps below (a fifth of generating the source of a function)
        return compact
    try:
        if ast.dump(ast.parse(compact)) == ast.dump(ast.parse(source)):
            return compact
    except SyntaxError:
        pass
    return source
