"""Probes for ``f.probe(*args, names=[...])``: record the values of chosen variables.

After every statement of the user's function that binds or updates a probed name
(``h = ...``, ``h += ...``, ``a, h = ...``, ``h[i] = ...``, ``h.add_(1)``, a ``for h in
...`` target, ``with ... as h``)
the converter adds ``tg.probe('h', h, loop)``; a probed parameter is also recorded at the
top of the body. ``loop`` numbers the innermost ``for``/``while`` of the function around
the statement (None outside loops), and each loop body starts with ``tg.probe(None, None,
loop)``, a tick that starts a new iteration, so the values of one iteration can be told
apart from the next. Nested functions and lambdas are left alone (their names are
theirs). Without probed names this converter is not run.
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


def _mutated_by_call(stmt):
    """``h.add_(1)`` (``tg.call(h.add_, 1)`` once calls are converted): an in-place method
    of a name, called for its effect."""
    call = stmt.value if isinstance(stmt, gast.Expr) else None
    if not isinstance(call, gast.Call):
        return []
    func = call.func
    if isinstance(func, gast.Attribute) and isinstance(func.value, gast.Name) and \
            func.value.id == 'tg' and func.attr == 'call' and call.args:
        func = call.args[0]
    if isinstance(func, gast.Attribute) and isinstance(func.value, gast.Name) and \
            func.attr.endswith('_') and not func.attr.endswith('__'):
        return [func.value.id]
    return []


def _assigned(stmt):
    if isinstance(stmt, gast.Expr):
        return _mutated_by_call(stmt)
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
        self.loops = 0

    def call(self, args, where):
        stmt = gast.Expr(value=base.tg_call(
            'probe', [gast.Constant(value=a, kind=None) if not isinstance(a, gast.AST) else a
                      for a in args], where))
        origin.inherit(stmt, where)
        return stmt

    def probes(self, names, where, loop):
        return [self.call([name, gast.Name(id=name, ctx=gast.Load(), annotation=None,
                                           type_comment=None), loop], where)
                for name in dict.fromkeys(n for n in names if n in self.names)]

    def block(self, stmts, loop):
        out = []
        for stmt in stmts:
            out.append(stmt)
            if isinstance(stmt, (gast.FunctionDef, gast.ClassDef, gast.AsyncFunctionDef)):
                continue
            inner = loop
            if isinstance(stmt, (gast.For, gast.While)):
                self.loops += 1
                inner = self.loops
                bound = _bound_names(stmt.target, []) if isinstance(stmt, gast.For) else []
                stmt.body = [self.call([None, None, inner], stmt)] + \
                    self.probes(bound, stmt, inner) + stmt.body
            if isinstance(stmt, gast.With):
                bound = []
                for item in stmt.items:
                    if item.optional_vars is not None:
                        _bound_names(item.optional_vars, bound)
                stmt.body = self.probes(bound, stmt, loop) + stmt.body
            for field in _BLOCKS:
                body = getattr(stmt, field, None)
                if isinstance(body, list) and body:
                    # a loop's else runs once, after the loop
                    loop_else = field == 'orelse' and isinstance(stmt, (gast.For, gast.While))
                    body[:] = self.block(body, loop if loop_else else inner)
            for handler in getattr(stmt, 'handlers', ()):
                handler.body = self.block(handler.body, inner)
            for case in getattr(stmt, 'cases', ()):
                case.body = self.block(case.body, inner)
            out.extend(self.probes(_assigned(stmt), stmt, loop))
        return out


def transform(node, ctx, names=()):
    """Add probes of ``names`` to the function ``node`` (its own body only)."""
    if not names:
        return node
    inserter = _Inserter(frozenset(names))
    args = node.args
    params = [a.id for a in args.posonlyargs + args.args + args.kwonlyargs]
    params += [a.id for a in (args.vararg, args.kwarg) if a is not None]
    node.body = inserter.probes(params, node, None) + inserter.block(node.body, None)
    return node
