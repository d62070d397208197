"""Parsing: a live function object -> its gast FunctionDef (or Lambda), origins attached."""
import inspect
import textwrap

import gast

from transpiler.errors import ConversionError
from transpiler.pyct import gast_bridge
from transpiler.pyct import origin
from transpiler.pyct import source_block


def _source_lines(fn):
    # by code object: inspect would follow ``__wrapped__`` (functools.wraps) to the function
    # a decorator wraps, and we would convert that instead of the wrapper that really runs
    code = fn.__code__
    filename = inspect.getsourcefile(code) or code.co_filename
    try:
        lines, first = inspect.getsourcelines(code)
    except (OSError, TypeError) as e:
        raise ConversionError(
            f'source code of {fn.__qualname__!r} is not available ({e}); functions defined '
            'in an interactive shell, by exec or in compiled modules cannot be converted',
            fn.__code__.co_filename, fn.__code__.co_firstlineno) from None
    return filename, lines, max(first, 1)


def _indent(text):
    first = text.split('\n', 1)[0]
    return len(first) - len(first.lstrip())


def _parse(text):
    return gast_bridge.parse(textwrap.dedent(text)), _indent(text)


def parse_function(fn):
    """Returns (node, filename): the FunctionDef or Lambda node of ``fn`` with origins."""
    found = None
    if fn.__name__ != '<lambda>':
        filename = inspect.getsourcefile(fn.__code__) or fn.__code__.co_filename
        found = source_block.find(fn, filename)
    if found is not None:
        lines, first, tree = found
        module, indent = gast_bridge.ast_to_gast(tree), _indent(lines[0])
    else:
        filename, lines, first = _source_lines(fn)
        if fn.__name__ == '<lambda>':
            return _parse_lambda(fn, filename, lines, first), filename
        try:
            module, indent = _parse(''.join(lines))
        except SyntaxError as e:
            raise ConversionError(f'cannot parse the source of {fn.__qualname__!r}: {e.msg}',
                                  filename, first) from None
    node = module.body[0]
    if not isinstance(node, (gast.FunctionDef, gast.AsyncFunctionDef)):
        raise ConversionError(f'expected a function definition for {fn.__qualname__!r}', filename, first)
    origin.annotate(node, filename, first - 1, indent)
    return node, filename


def _parse_lambda(fn, filename, lines, first):
    code = fn.__code__
    module = None
    # The source lines of a lambda are the statement they sit in; it may be cut mid-expression,
    # so try shorter prefixes and parenthesised forms until one parses.
    for n in range(len(lines), 0, -1):
        text = textwrap.dedent(''.join(lines[:n])).strip()
        for candidate in (text, '(' + text + ')', text.rstrip(',;\\')):
            try:
                module = gast_bridge.parse(candidate)
                break
            except SyntaxError:
                continue
        if module is not None:
            break
    if module is None:
        raise ConversionError('cannot parse the source of a lambda', filename, first)
    origin.annotate(module, filename, first - 1, 0)
    argnames = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
    found = []
    for node in gast.walk(module):
        if isinstance(node, gast.Lambda) and node.lineno + first - 1 == code.co_firstlineno:
            a = node.args
            names = tuple(x.id for x in a.posonlyargs + a.args + a.kwonlyargs)
            if names == argnames:
                found.append(node)
    if len(found) != 1:
        why = 'no lambda' if not found else 'several lambdas'
        raise ConversionError(f'{why} with arguments {argnames} found on this line; '
                              'define the function with def', filename, code.co_firstlineno)
    return found[0]
