"""The torch-free entry point: a Python function -> converted source and a live function.

    convert(fn, extra_globals) -> Converted      # extra_globals: e.g. {'tg': operators}
    to_source(fn) -> str

Converters run in a fixed order; the analyses run once, after the jump lowering (whose
flags they must see) and before the converters that read them.
"""
import ast
import dataclasses
import inspect
import logging
import types
import weakref


import gast

from transpiler import conversion_cache
from transpiler.analysis import activity
from transpiler.analysis import definite_assignment
from transpiler.analysis import liveness
from transpiler.analysis import reaching_defs
from transpiler.analysis import state
from transpiler.converters import asserts
from transpiler.converters import base
from transpiler.converters import break_statements
from transpiler.converters import call_trees
from transpiler.converters import comprehensions
from transpiler.converters import conditional_expressions
from transpiler.converters import continue_statements
from transpiler.converters import control_flow
from transpiler.converters import formatted_strings
from transpiler.converters import frame_locals
from transpiler.converters import functions
from transpiler.converters import logical
from transpiler.converters import match_statements
from transpiler.converters import private_names
from transpiler.converters import probes
from transpiler.converters import loops
from transpiler.converters import return_statements
from transpiler.converters import staged_raises
from transpiler.converters import subscripts
from transpiler.converters import try_statements
from transpiler.converters import unsupported
from transpiler.converters import walrus_tests
from transpiler.pyct import anno
from transpiler.pyct import census
from transpiler.pyct import codegen
from transpiler.pyct import loader
from transpiler.pyct import naming
from transpiler.pyct import parser
from transpiler.pyct import qualnames
from transpiler.pyct import traversal

BEFORE_ANALYSIS = (private_names, unsupported, match_statements, walrus_tests, comprehensions, functions,
                   call_trees, frame_locals, formatted_strings, asserts, staged_raises,
                   try_statements, return_statements, break_statements, continue_statements)


class _Expressions(logical.LogicalTransformer, conditional_expressions.IfExpTransformer):
    """``conditional_expressions`` then ``logical`` in one walk of the tree (two full walks
    were a tenth of converting a function): both rewrite their nodes after their children,
    an ``IfExp``'s operands in the order ``tg.ifexp``'s arguments have, so each node comes
    out as the two passes made it (the same source, tests/transpiler/test_conversion_speed)."""

    @classmethod
    def transform(cls, node, ctx):
        return cls(ctx).visit(node)


AFTER_ANALYSIS = (control_flow, loops, _Expressions, subscripts)

_LOOPS = (gast.For, gast.While, gast.ListComp)       # (comprehensions makes list
                                                     # comprehensions ``for`` loops)
_BRANCHES = _LOOPS + (gast.If, getattr(gast, 'Match', gast.If))   # (what needs state)
# converter -> the node kinds without which it changes nothing (none of the converters
# before it makes them): skipped on a function whose census (pyct.census) has none
_TRIGGERS = {
    unsupported: unsupported.REFUSED_KINDS,         # (and a Name 'tg': checked apart)
    match_statements: (getattr(gast, 'Match', ()),),
    walrus_tests: (gast.NamedExpr,),
    comprehensions: (gast.ListComp,),
    formatted_strings: (gast.JoinedStr, gast.Mod),   # f-strings, ``'%d' % n``
    asserts: (gast.Assert,),
    staged_raises: (gast.Raise,),
    try_statements: (gast.Try,),
    break_statements: _LOOPS,
    continue_statements: _LOOPS,
    loops: _LOOPS,
    subscripts: (gast.Subscript,),
}


def _has_work(converter, found):
    if converter is frame_locals:                   # (a Name locals/vars/dir)
        return not found.ids.isdisjoint(activity.FRAME_READERS)
    kinds = _TRIGGERS.get(converter)
    if kinds is None:
        return True
    return found.holds(kinds) or (converter is unsupported and 'tg' in found.ids)


def _enclosing_class(qualname):
    """The innermost class whose body holds the function named ``qualname``, or None."""
    parts = qualname.split('.')[:-1]
    for i in range(len(parts) - 1, -1, -1):
        following = parts[i + 1] if i + 1 < len(parts) else None
        if parts[i] != '<locals>' and following != '<locals>':
            return parts[i]
    return None


def _code_names(code):
    names = set(code.co_names) | set(code.co_varnames) | set(code.co_cellvars) | \
        set(code.co_freevars)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


def _private_names(fn):
    """``{'__x': '_Cls__x'}`` for the class-private names Python mangled in ``fn``."""
    cls = _enclosing_class(getattr(fn, '__qualname__', ''))
    prefix = '_' + cls.lstrip('_') if cls and cls.lstrip('_') else None
    if prefix is None:
        return {}
    mark = prefix + '__'
    return {n[len(prefix):]: n for n in _code_names(fn.__code__)
            if n.startswith(mark) and not n.endswith('__')}


def _frame_names(code):
    """The names ``locals()`` shows in a frame of ``code``, in CPython's order."""
    cells = [n for n in code.co_cellvars if n not in code.co_varnames]
    return tuple(code.co_varnames) + tuple(cells) + tuple(code.co_freevars)


def _nested_frame_names(code, out=None):
    """{(name, first line): ``_frame_names``} of the functions and lambdas nested in
    ``code`` (None where two share a name and a line: which one is meant is unknown)."""
    out = {} if out is None else out
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            key = (const.co_name, const.co_firstlineno)
            out[key] = _frame_names(const) if key not in out else None
            _nested_frame_names(const, out)
    return out


@dataclasses.dataclass
class Converted:
    fn: object          # the converted function (bound again if a bound method was given)
    source: str         # the generated source (what to_code shows)
    filename: str       # fake file name of the generated code, registered in linecache
    line_map: dict      # generated lineno -> (user filename, user lineno)
    hidden: frozenset   # names of the generated functions that are no frame of eager's


@dataclasses.dataclass
class _Compiled:
    code: object
    source: str
    filename: str
    line_map: dict
    hidden: frozenset


# original code object -> {(its file, first line, extra names, probed): _Compiled}, freed
# with the code; the generated file's linecache text is freed with the generated code
_cache = weakref.WeakKeyDictionary()


def _unwrap(fn):
    if inspect.ismethod(fn):
        return fn.__func__, fn.__self__
    return fn, None


def _strip_signature(node):
    """Annotations and non-literal defaults are evaluated by the original ``def``; the
    loader copies them onto the new function, so the generated ``def`` must not evaluate them."""
    a = node.args
    for arg in a.posonlyargs + a.args + a.kwonlyargs + [a.vararg, a.kwarg]:
        if arg is not None:
            arg.annotation = None
    node.returns = None
    defaults = a.defaults + [d for d in a.kw_defaults if d is not None]
    if not all(isinstance(d, gast.Constant) for d in defaults):
        a.defaults, a.kw_defaults = [], [None] * len(a.kw_defaults)


def _convert_tree(fn, probed=()):
    node, filename = parser.parse_function(fn)
    found = census.take(node)
    namer = naming.Namer(found.names.union(fn.__code__.co_freevars, fn.__code__.co_names))
    if isinstance(node, gast.Lambda):
        node = functions.as_function_def(node, namer.new('lam'))
    ctx = base.Context(namer=namer, filename=filename, frame_names=_frame_names(fn.__code__),
                       nested_frame_names=_nested_frame_names(fn.__code__),
                       private_names=_private_names(fn))
    if found.holds(_BRANCHES):     # (on the user's code: before jumps become flags)
        definite_assignment.analyze(node)
    for converter in BEFORE_ANALYSIS:
        if _has_work(converter, found):
            node = converter.transform(node, ctx)
        if converter is call_trees:         # probes are operator calls, not user calls
            node = probes.transform(node, ctx, probed)
    ctx.holds_del = base.holds_del(node)     # (no converter writes a ``del``)
    for fn_node in [n for n in traversal.walk(node) if isinstance(n, gast.FunctionDef)]:
        memo = {}           # (each statement's effects, found once for the analyses)
        activity.analyze(fn_node, memo)
        liveness.analyze(fn_node, memo)
        state.analyze(fn_node)
        reaching_defs.analyze(fn_node, memo)
    for converter in AFTER_ANALYSIS:
        if _has_work(converter, found):
            node = converter.transform(node, ctx)
    _strip_signature(node)
    anno.setanno(node, anno.Key.GENERATED_NAMES, frozenset(namer.created))
    return node


# the fields holding the nodes that start lines of the generated source (statements, except
# clauses, decorators, case patterns), read from statements, except clauses and cases
_LINE_FIELDS = {'body', 'orelse', 'finalbody', 'handlers', 'cases', 'decorator_list', 'pattern'}
_line_fields = {}       # node class name -> its _LINE_FIELDS, in field order
_HOLDERS = (ast.stmt, ast.excepthandler, ast.match_case)


def _line_map(tree, parsed):
    """{generated line: (user file, line)}; ``parsed``: the generated source's ast.Module.

    Each generated line is named by its first node (in pre-order) with an origin, that
    node's own origin or else its nearest ancestor's. A line starts with a statement, an
    ``except`` clause, a decorator or a case pattern (astunparse writes each on a line of
    its own and never breaks an expression over lines), and that node comes first on it:
    so only those are paired, the generated ones with the converted ones, and no origin
    is written into the tree (filling every expression's origin, then walking every node
    of both trees, was a tenth of converting a function). Two holders of different kinds,
    or statement lists of different lengths, end the pairing, as a node of another kind
    ended the node-by-node walk (which also stopped at expressions of different kinds:
    none in any function the model zoo's transformers reach)."""
    out = {}
    attr, key = anno._ATTR, anno.Key.ORIGIN
    if len(parsed.body) != 1:
        return out
    stack = [(parsed.body[0], tree, None)]
    while stack:
        g, c, outer = stack.pop()
        name = type(g).__name__
        if name != type(c).__name__:
            break
        annos = c.__dict__.get(attr)
        loc = (annos.get(key) if annos else None) or outer
        line = g.__dict__.get('lineno')
        if line is not None and loc is not None and line not in out:
            out[line] = (loc.filename, loc.lineno)
        if not isinstance(g, _HOLDERS):
            continue
        fields = _line_fields.get(name)
        if fields is None:
            fields = _line_fields[name] = [f for f in type(g)._fields if f in _LINE_FIELDS]
        pairs = []
        for field in fields:
            gv, cv = getattr(g, field, None), getattr(c, field, None)
            if type(gv) is list and type(cv) is list and len(gv) == len(cv):
                pairs += [(x, y, loc) for x, y in zip(gv, cv)]
            elif isinstance(gv, ast.AST) and isinstance(cv, gast.AST):
                pairs.append((gv, cv, loc))
            elif gv or cv:
                return out
        stack += reversed(pairs)
    return out


def to_source(fn, probed=()):
    """The generated source of ``fn`` (a function, lambda or bound method)."""
    return codegen.to_source(_convert_tree(_unwrap(fn)[0], tuple(probed)))


_CODE_LOG = logging.getLogger("tograph.code")     # runtime.logs' topic (plain logging here)


def _log_conversion(fn, source: str) -> None:
    """``tograph.code``: a function converted (its generated source at DEBUG)."""
    if _CODE_LOG.isEnabledFor(logging.INFO):
        name = fn.__qualname__.rpartition("<locals>.")[2]
        where = f"{fn.__code__.co_filename}:{fn.__code__.co_firstlineno}"
        _CODE_LOG.info("converted %s (%s): %d generated lines", name, where,
                       source.count("\n") + 1)
        _CODE_LOG.debug("generated source of %s:\n%s", name, source)


def convert(fn, extra_globals, probed=(), cache_dir=None):
    """Convert ``fn``; the result's function calls ``extra_globals`` names (e.g. ``tg``).
    ``probed``: variable names whose values ``tg.probe`` records (see converters.probes).
    ``cache_dir``: a directory of converted code kept across processes (conversion_cache)."""
    fn, bound_self = _unwrap(fn)
    probed = tuple(sorted(set(probed)))
    code = fn.__code__                 # equal code objects may come from different files
    key = (code.co_filename, code.co_firstlineno, tuple(sorted(extra_globals)), probed)
    try:
        compiled_for = _cache.setdefault(code, {})
    except TypeError:                  # (not weakly referable: not cached)
        compiled_for = {}
    compiled = compiled_for.get(key)
    if compiled is None:
        filename = loader.fake_filename(fn.__qualname__)
        disk_key = conversion_cache.key(fn, extra_globals, probed) if cache_dir else None
        found = conversion_cache.load(cache_dir, disk_key)
        if found is not None:
            code, source, line_map, hidden = found
            code = conversion_cache.renamed(code, filename)
            loader.register(filename, source)
        else:
            tree = _convert_tree(fn, probed)
            source, parsed = codegen.to_source_and_ast(tree)
            line_map = _line_map(tree, parsed)
            outer = list(fn.__code__.co_freevars) + [n for n in extra_globals
                                                     if n not in fn.__code__.co_freevars]
            code = loader.compile_function(source, tree.name, outer, filename, parsed,
                                           like=fn.__code__)
            hidden, renamed = qualnames.scopes(tree)
            code = qualnames.restore(code, fn.__code__.co_qualname, hidden, renamed)
            conversion_cache.store(cache_dir, disk_key, code, source, line_map, hidden)
        weakref.finalize(code, loader.forget, filename)
        compiled = compiled_for[key] = _Compiled(code, source, filename, line_map, hidden)
        _log_conversion(fn, source)
    cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or ()))
    new_fn = loader.make_function(compiled.code, fn.__globals__, cells, extra_globals, like=fn)
    if bound_self is not None:
        new_fn = new_fn.__get__(bound_self)
    return Converted(new_fn, compiled.source, compiled.filename, dict(compiled.line_map),
                     compiled.hidden)
