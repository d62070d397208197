"""A ``def``'s source lines found with the parser instead of the tokenizer.

``inspect.getsourcelines`` finds the end of a function by running Python's tokenizer (pure
Python before 3.12) over it, and finds its module by scanning ``sys.modules`` (thousands
of entries once torch and transformers are imported): together a few ms per function, a
tenth of converting transformers' functions. Here the block is cut before the first later
line indented no deeper than the ``def`` (or its first decorator), and the cut is accepted
only if that text parses to one function definition of the code's name: a cut inside a
string, a bracket or a continued line, or inside a multi-line signature, does not parse,
and the next cut is tried. A prefix that parses ends at a real dedent, so it holds the
function and nothing more: the same statements inspect finds (trailing comment lines
aside, which inspect leaves out and which are dropped here too).

``find(fn)`` -> ``(lines, first_line, ast.Module)``, or None where inspect must decide
(a lambda, source not in a file, a first line that is no ``def``/decorator, no cut that
parses within a few tries).
"""
import ast
import linecache
import re
import textwrap

_HEADER = re.compile(r'\s*(@|def\s|async\s+def\s)')
_TRIES = 8


def _indent(line):
    return len(line) - len(line.lstrip(' \t'))


def _code_line(line):
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith('#')


def find(fn, filename):
    code = fn.__code__
    if code.co_name == '<lambda>' or filename.startswith('<'):
        return None
    linecache.checkcache(filename)
    lines = linecache.getlines(filename, fn.__globals__)
    start = code.co_firstlineno - 1
    if not 0 <= start < len(lines) or not _HEADER.match(lines[start]):
        return None
    base = _indent(lines[start])
    cut, tries = start + 1, 0
    while tries < _TRIES:
        while cut < len(lines) and not (_code_line(lines[cut]) and _indent(lines[cut]) <= base):
            cut += 1
        end = cut
        while end > start + 1 and not _code_line(lines[end - 1]):
            end -= 1
        block = lines[start:end]
        tree = _parsed(block)
        if tree is not None and len(tree.body) == 1 and \
                isinstance(tree.body[0], (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                tree.body[0].name == code.co_name:
            return block, start + 1, tree
        if cut >= len(lines):
            return None
        cut, tries = cut + 1, tries + 1
    return None


def _parsed(block):
    try:
        return ast.parse(textwrap.dedent(''.join(block)))
    except (SyntaxError, ValueError):
        return None
