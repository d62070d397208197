"""``gast.ast_to_gast`` and ``gast.gast_to_ast``, giving the same trees several times faster.

gast converts through a ``NodeTransformer`` that, per node, looks up its visitor, builds a
keyword dict of every field, calls the node class's Python ``__init__`` and copies the
positions one ``setattr`` at a time; parsing a function and generating its source went
through it twice and it was about a sixth of converting transformers' modules. Here each
node class gets, once, a small converter (target class, fields, positions) that fills the
new node's ``__dict__`` directly; the classes gast's ``ast3`` treats specially are written
out as it writes them (``Name``/``arg``, ``ExceptHandler``, ``arguments``, ``FunctionDef``,
``ClassDef``, ``Assign``). Same classes, fields, field order, positions and shared leaf
values as gast's result (``gast.dump`` equal, tests/transpiler/test_conversion_speed.py);
a class gast does not know converts to None, as with gast.

Only for the Python and gast versions whose ``ast3`` rules these mirror (``FAST``); any
other pairing uses gast's own functions.
"""
import ast
import sys

import gast

FAST = (3, 10) <= sys.version_info[:2] <= (3, 11) and \
    getattr(gast, '__version__', None) in ('0.5.4', '0.5.5', '0.6.0', '0.7.0')

_MISSING = object()
_POSITIONS = ('lineno', 'col_offset', 'end_lineno', 'end_col_offset')


def _convert(value, table):
    """A field's value converted: a node by its class's converter, a list item by item."""
    cls = type(value)
    if cls is list:
        return [_convert(v, table) for v in value]
    convert = table.get(cls)
    if convert is not None:
        return convert(value, table)
    if isinstance(value, ast.AST):
        convert = table[cls] = _generic_for(cls, table)
        return convert(value, table)
    return value


def _generic_for(src_cls, table):
    """gast's ``Translator.generic_visit`` for nodes of ``src_cls``: the same-named class of
    the other module, each present field converted, each present attribute copied."""
    target_module = table['module']
    dst = getattr(target_module, src_cls.__name__, None)
    if dst is None:
        return lambda node, table: None
    names = src_cls._fields + src_cls._attributes
    n_fields = len(src_cls._fields)
    leaves = _LEAVES

    def convert(node, table):
        new = dst.__new__(dst)
        state = new.__dict__
        old = node.__dict__
        for i, name in enumerate(names):
            value = old.get(name, _MISSING)
            if value is _MISSING:
                value = getattr(node, name, _MISSING)
                if value is _MISSING:
                    continue
            if i >= n_fields or type(value) in leaves:    # (positions are ints or None)
                state[name] = value
            else:
                state[name] = _convert(value, table)
        return new
    return convert


_LEAVES = frozenset({str, int, float, bool, type(None), bytes, complex, type(Ellipsis)})


def _shared_positions(old_cls, new_cls, cache={}):
    key = (old_cls, new_cls)
    found = cache.get(key)
    if found is None:
        found = cache[key] = tuple(a for a in _POSITIONS if a in old_cls._attributes
                                   and a in new_cls._attributes)
    return found


def _located(new, old):
    """``ast.copy_location(new, old)``: a position both classes have, unless it is None
    (the end positions are copied when None too)."""
    state = new.__dict__
    for attr in _shared_positions(type(old), type(new)):
        value = getattr(old, attr, _MISSING)
        if value is not _MISSING and (value is not None or attr[0] == 'e'):
            state[attr] = value
    return new


def _gast_located(new, old):
    """``gast.copy_location(new, old)``: a position both classes have and ``old`` has."""
    state = new.__dict__
    for attr in _shared_positions(type(old), type(new)):
        value = getattr(old, attr, _MISSING)
        if value is not _MISSING:
            state[attr] = value
    return new


def _new(cls, **fields):
    node = cls.__new__(cls)
    node.__dict__.update(fields)
    return node


# --- ast -> gast (gast.ast3.Ast3ToGAst for Python 3.10-3.11) ---

def _to_gast_name(node, table):
    return _located(_new(gast.Name, id=node.id, ctx=_convert(node.ctx, table),
                         annotation=None, type_comment=None), node)


def _to_gast_arg(node, table):
    return _located(_new(gast.Name, id=node.arg, ctx=gast.Param(),
                         annotation=_convert(node.annotation, table),
                         type_comment=_convert(node.type_comment, table)), node)


def _to_gast_handler(node, table):
    if not node.name:
        return _PLAIN_HANDLER_TO_GAST(node, table)
    return _located(_new(gast.ExceptHandler, type=_convert(node.type, table),
                         name=gast.Name(node.name, gast.Store(), None, None),
                         body=_convert(node.body, table)), node)


def _to_gast_function(dst):
    def convert(node, table):
        return _gast_located(_new(dst, name=node.name, args=_convert(node.args, table),
                             body=_convert(node.body, table),
                             decorator_list=_convert(node.decorator_list, table),
                             returns=_convert(node.returns, table),
                             type_comment=_convert(node.type_comment, table),
                             type_params=[]), node)
    return convert


def _to_gast_class(node, table):
    return _gast_located(_new(gast.ClassDef, name=node.name, bases=_convert(node.bases, table),
                         keywords=_convert(node.keywords, table),
                         body=_convert(node.body, table),
                         decorator_list=_convert(node.decorator_list, table),
                         type_params=[]), node)


# --- gast -> ast (gast.ast3.GAstToAst3 for Python 3.10-3.11) ---

def _to_ast_assign(node, table):
    return _located(_new(ast.Assign, targets=_convert(node.targets, table),
                         value=_convert(node.value, table)), node)


def _to_ast_name(node, table):
    return _located(_new(ast.Name, id=node.id, ctx=_convert(node.ctx, table)), node)


def _to_ast_handler(node, table):
    if not node.name:
        return _PLAIN_HANDLER_TO_AST(node, table)
    return _located(_new(ast.ExceptHandler, type=_convert(node.type, table),
                         name=node.name.id, body=_convert(node.body, table)), node)


def _to_ast_function(dst):
    def convert(node, table):
        return _located(_new(dst, name=node.name, args=_convert(node.args, table),
                             body=_convert(node.body, table),
                             decorator_list=_convert(node.decorator_list, table),
                             returns=_convert(node.returns, table),
                             type_comment=_convert(node.type_comment, table)), node)
    return convert


def _to_ast_class(node, table):
    return _located(_new(ast.ClassDef, name=node.name, bases=_convert(node.bases, table),
                         keywords=_convert(node.keywords, table),
                         body=_convert(node.body, table),
                         decorator_list=_convert(node.decorator_list, table)), node)


def _make_arg(node, table):
    if node is None:
        return None
    return _located(_new(ast.arg, arg=_convert(node.id, table),
                         annotation=_convert(node.annotation, table),
                         type_comment=_convert(node.type_comment, table)), node)


def _to_ast_arguments(node, table):
    return _new(ast.arguments,
                posonlyargs=[_make_arg(a, table) for a in node.posonlyargs],
                args=[_make_arg(a, table) for a in node.args],
                vararg=_make_arg(node.vararg, table),
                kwonlyargs=[_make_arg(a, table) for a in node.kwonlyargs],
                kw_defaults=_convert(node.kw_defaults, table),
                kwarg=_make_arg(node.kwarg, table),
                defaults=_convert(node.defaults, table))


_PLAIN_HANDLER_TO_GAST = _generic_for(ast.ExceptHandler, {'module': gast})
_PLAIN_HANDLER_TO_AST = _generic_for(gast.ExceptHandler, {'module': ast})
_TO_GAST = {'module': gast, ast.Name: _to_gast_name, ast.arg: _to_gast_arg,
            ast.ExceptHandler: _to_gast_handler, ast.ClassDef: _to_gast_class,
            ast.FunctionDef: _to_gast_function(gast.FunctionDef),
            ast.AsyncFunctionDef: _to_gast_function(gast.AsyncFunctionDef)}
_TO_AST = {'module': ast, gast.Assign: _to_ast_assign, gast.Name: _to_ast_name,
           gast.ExceptHandler: _to_ast_handler, gast.ClassDef: _to_ast_class,
           gast.arguments: _to_ast_arguments,
           gast.FunctionDef: _to_ast_function(ast.FunctionDef),
           gast.AsyncFunctionDef: _to_ast_function(ast.AsyncFunctionDef)}


def ast_to_gast(node):
    """``gast.ast_to_gast(node)``."""
    return _convert(node, _TO_GAST) if FAST else gast.ast_to_gast(node)


def gast_to_ast(node):
    """``gast.gast_to_ast(node)``."""
    return _convert(node, _TO_AST) if FAST else gast.gast_to_ast(node)


def parse(source):
    """``gast.parse(source)``."""
    return ast_to_gast(ast.parse(source))
