"""Code generation: gast -> ast -> Python source.

astunparse gives the most readable output; constructs it predates (``match``, some
f-string forms) fall back to the standard library's ``ast.unparse``.
"""
import ast

import astunparse

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
    tree = gast_bridge.gast_to_ast(node)      # (no locations: only unparsed, never compiled)
    if not isinstance(tree, ast.Module):
        tree = ast.Module(body=[tree], type_ignores=[])
    try:
        source = _without_blank_lines(astunparse.unparse(tree).strip('\n') + '\n')
        return source, ast.parse(source)
    except Exception:  # noqa: BLE001 - astunparse fails on constructs newer than it
        source = _without_blank_lines(ast.unparse(tree).strip('\n') + '\n')
        return source, ast.parse(source)


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
