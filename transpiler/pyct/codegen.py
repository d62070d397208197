"""Code generation: gast -> ast -> Python source.

astunparse gives the most readable output; constructs it predates (``match``, some
f-string forms) fall back to the standard library's ``ast.unparse``.
"""
import ast

import astunparse
import gast


def to_ast(node):
    tree = gast.gast_to_ast(node)
    return ast.fix_missing_locations(tree if isinstance(tree, ast.Module)
                                     else ast.Module(body=[tree], type_ignores=[]))


def to_source(node):
    tree = to_ast(node)
    try:
        source = astunparse.unparse(tree)
        ast.parse(source)
    except Exception:  # noqa: BLE001 - astunparse fails on constructs newer than it
        source = ast.unparse(tree)
    return _without_blank_lines(source.strip('\n') + '\n')


def _without_blank_lines(source):
    compact = ''.join(line for line in source.splitlines(True) if line.strip())
    try:
        if ast.dump(ast.parse(compact)) == ast.dump(ast.parse(source)):
            return compact
    except SyntaxError:
        pass
    return source
