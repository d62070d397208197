"""Probes for ``f.probe(*args, names=[...])``: record the values of chosen variables.

After every statement of the user's function that binds a probed name (``h = ...``,
``h += ...``, ``a, h = ...``, ``h[i] = ...``, a ``for h in ...`` target, ``with ... as h``)
the converter adds ``tg.probe('h', h, in_loop)``; a probed parameter is also recorded at
the top of the body. ``in_loop`` says whether the statement sits inside a ``for``/``while``
of the function, so its values are collected per iteration. Nested functions and lambdas
are left alone (their names are theirs). Without probed names this converter is not run.
"""
import gast

from transpiler.converters import base
from transpiler.pyct import origin

_BLOCKS = ('body', 'orelse', 'finalbody')


def _bound_names(target, out):
    """Names a target binds or mutates (``h[i] = v`` mutates ``h``)."""
    if isinstance(target, gast.Name):
        out.append(target.id)
    elif isinstance(target, (gast.Tuple, gast.List)):
        for elt in target.elts:
            _bound_names(elt, out)
    elif isinstance(target, gast.Starred):
        _bound_names(target.value, out)
    elif isinstance(target, (gast.Subscript, gast.Attribute)):
        _bound_names(target.value, out)
    return out


def _assigned(stmt):
    if isinstance(stmt, gast.Assign):
        names = []
        for target in stmt.targets:
            _bound_names(target, names)
        return names
    if isinstance(stmt, gast.AugAssign) or (isinstance(stmt, gast.AnnAssign) and stmt.value):
        return _bound_names(stmt.target, [])
    return []


class _Inserter:

    def __init__(self, names):
        self.names = names

    def probes(self, names, where, in_loop):
        out = []
        for name in dict.fromkeys(n for n in names if n in self.names):
            value = gast.Name(id=name, ctx=gast.Load(), annotation=None, type_comment=None)
            stmt = gast.Expr(value=base.tg_call(
                'probe', [gast.Constant(value=name, kind=None), value,
                          gast.Constant(value=in_loop, kind=None)], where))
            origin.inherit(stmt, where)
            out.append(stmt)
        return out

    def block(self, stmts, in_loop):
        out = []
        for stmt in stmts:
            out.append(stmt)
            if isinstance(stmt, (gast.FunctionDef, gast.ClassDef, gast.AsyncFunctionDef)):
                continue
            looping = in_loop or isinstance(stmt, (gast.For, gast.While))
            if isinstance(stmt, gast.For):
                stmt.body = self.probes(_bound_names(stmt.target, []), stmt, True) + stmt.body
            if isinstance(stmt, gast.With):
                bound = []
                for item in stmt.items:
                    if item.optional_vars is not None:
                        _bound_names(item.optional_vars, bound)
                stmt.body = self.probes(bound, stmt, in_loop) + stmt.body
            for field in _BLOCKS:
                inner = getattr(stmt, field, None)
                if isinstance(inner, list) and inner:
                    # a loop's else runs once, after the loop
                    loop_else = field == 'orelse' and isinstance(stmt, (gast.For, gast.While))
                    inner[:] = self.block(inner, in_loop if loop_else else looping)
            for handler in getattr(stmt, 'handlers', ()):
                handler.body = self.block(handler.body, looping)
            for case in getattr(stmt, 'cases', ()):
                case.body = self.block(case.body, looping)
            out.extend(self.probes(_assigned(stmt), stmt, in_loop))
        return out


def transform(node, ctx, names=()):
    """Add probes of ``names`` to the function ``node`` (its own body only)."""
    if not names:
        return node
    inserter = _Inserter(frozenset(names))
    args = node.args
    params = [a.id for a in args.posonlyargs + args.args + args.kwonlyargs]
    params += [a.id for a in (args.vararg, args.kwarg) if a is not None]
    node.body = inserter.probes(params, node, False) + inserter.block(node.body, False)
    return node
