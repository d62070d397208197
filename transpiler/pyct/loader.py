"""Loading generated source as a live function.

The generated source (one ``def``) is compiled under a unique fake filename that is
registered in ``linecache``, so tracebacks and ``inspect`` show the generated code.

Closures and extra names, the choice made here: the new function keeps the user
function's *real* ``__globals__`` dict (so ``global`` writes and later rebinding of module
names behave exactly as in the original), and every other name it needs -- the user
function's free variables and the caller's ``extra_names`` such as ``tg`` -- becomes a
free variable. To get a code object with those free variables, the ``def`` is compiled
inside a factory function (built as an AST around the parsed source, so line numbers stay
those of the registered text) that binds each name as a local. The function is then
rebuilt with ``types.FunctionType`` from that code object, the real globals, and a closure
made of the *user's own cells* for free variables (so reads see later rebinding and
``nonlocal`` writes reach the user's scope) and fresh cells for extra names.
"""
import __future__
import ast
import itertools
import linecache
import types

_counter = itertools.count()


def fake_filename(name):
    return f'<tograph generated {name} #{next(_counter)}>'


def register(filename, source):
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)


def forget(filename):
    """Drop a generated file's text (when its code is freed: ``conversion.convert``)."""
    linecache.cache.pop(filename, None)



def compile_function(source, name, outer_names, filename, parsed=None, like=None):
    """Code object of function ``name`` defined by ``source``, with ``outer_names`` free.
    ``parsed``: ``ast.parse(source)`` if the caller has it (it is consumed); ``like``: the
    code object of the function converted, whose ``from __future__ import annotations``
    the new code keeps (its nested functions' annotations stay unevaluated text: a name
    imported only under ``TYPE_CHECKING`` is no NameError)."""
    register(filename, source)
    module = parsed if parsed is not None else ast.parse(source, filename)
    located = list(module.body)
    if name not in outer_names:
        # the function's own name stays a global, as in the original (recursion by name);
        # without this, the factory's local binding would turn it into a free variable
        module.body.insert(0, ast.Global(names=[name]))
    factory = ast.FunctionDef(
        name='__tg_factory', args=ast.arguments(posonlyargs=[], args=[], vararg=None, kwonlyargs=[],
                                               kw_defaults=[], kwarg=None, defaults=[]),
        body=[ast.Assign(targets=[ast.Name(id=n, ctx=ast.Store())], value=ast.Constant(None))
              for n in outer_names] + module.body + [ast.Return(value=ast.Name(id=name, ctx=ast.Load()))],
        decorator_list=[], returns=None, lineno=1, col_offset=0)
    module.body = [factory]
    _locate_factory(factory, located)
    scratch = {}
    flags = like.co_flags & __future__.annotations.compiler_flag if like is not None else 0
    exec(compile(module, filename, 'exec', flags=flags, dont_inherit=True), scratch)
    return scratch['__tg_factory']().__code__


def _locate_factory(factory, located):
    """Give the factory's own nodes line 1, column 0 (what ``ast.fix_missing_locations``
    gives them) without walking the ``located`` statements: parsed, every node under them
    has its position already (that walk cost as much as compiling)."""
    stack = [factory]
    inner = {id(stmt) for stmt in located}
    while stack:
        node = stack.pop()
        if id(node) in inner:
            continue
        if 'lineno' in node._attributes:
            node.lineno, node.col_offset = 1, 0
            node.end_lineno, node.end_col_offset = 1, 0
        stack.extend(ast.iter_child_nodes(node))


def make_function(code, globals_dict, free_cells, extra_names, like=None):
    """A function running ``code`` with the user's cells and fresh cells for extra names.
    ``like``: a function whose defaults, kwdefaults, annotations, names and doc are copied."""
    cells = tuple(free_cells[n] if n in free_cells else types.CellType(extra_names[n])
                  for n in code.co_freevars)
    fn = types.FunctionType(code, globals_dict, code.co_name, None, cells)
    if like is not None:
        fn.__defaults__ = like.__defaults__
        fn.__kwdefaults__ = like.__kwdefaults__
        fn.__annotations__ = dict(getattr(like, '__annotations__', {}))
        fn.__doc__, fn.__module__ = like.__doc__, like.__module__
        fn.__name__, fn.__qualname__ = like.__name__, like.__qualname__
    return fn


def load(source, name, globals_dict, free_cells, extra_names, filename=None):
    """Compile ``source`` (defining function ``name``) and return (function, filename).

    free_cells: {name: cell} of the user function; extra_names: {name: value}.
    """
    filename = filename or fake_filename(name)
    outer = list(free_cells) + [n for n in extra_names if n not in free_cells]
    code = compile_function(source, name, outer, filename)
    return make_function(code, globals_dict, free_cells, extra_names), filename
