"""``if test: raise E(msg)`` -> a check the graph makes on every run (``tg.raise_if``).

Libraries validate their inputs with a tensor test guarding a ``raise`` (a label range, a
NaN loss). Traced as an ``if``, both branches run and the raising one stops the trace; as
a check, the graph raises eager's error when the test holds and otherwise goes on::

    if labels.max() >= vocab:                raise_test = labels.max() >= vocab
        m = labels.max()           ->        def raise_parts():
        raise ValueError(f"{m}")                 m = labels.max()
    y = x * 2                                    return (ValueError, (f"{m}",))
                                             tg.raise_if(raise_test, raise_parts)
                                             y = x * 2

(the test on a line of the ``if``, the check on one of the ``raise``: each error names
the line eager's traceback would). ``raise_parts`` is marked CALLED_AT_ONCE: the names
it reads are read right there, so they need no cells (activity).

The other branch follows the check (a raise in the ``else`` branch checks
``tg.not_(test)``); ``elif`` chains become one check after another (inner statements are
converted first). A loop's ``else:`` raising after a ``break`` (a search that failed) sets
a flag instead, checked after the loop: ``raise_test = False; for ...: ... else:
raise_test = True; tg.raise_if(raise_test, raise_parts)``. ``raise_parts`` gives the
error class and its arguments (None: ``raise X`` of a class or an instance, raised as
it is); a Python ``test`` runs it and raises as
Python would, a traced one stages the check (``runtime.operators.staged_raises``).

Converted only where the graph raising at run time is what eager does: the raising branch
is assignments to local names followed by ``raise X`` or ``raise X(args)`` (no ``from``, no
keywords, no ``*args``); no ``try`` of the function encloses it (its handlers or
``finally`` would run while tracing, not on the raise; a ``finally: pass`` without
handlers does nothing: ``_transparent``); every enclosing ``with`` is one of
torch's mode switches, whose ``__exit__`` never swallows an error. Anything else keeps the
``if``, whose tracing fails and falls back as before.

Runs after call_trees (``raise tg.call(E, msg)``) and before try_statements and the jump
lowering (which must see the moved statements as plain code).
"""
import gast

from transpiler.converters import base
from transpiler.converters import jumps
from transpiler.pyct import anno
from transpiler.pyct import templates
from transpiler.pyct import traversal

# ``with`` context managers whose ``__exit__`` lets any error pass: torch's mode switches
_PASSING = frozenset({'no_grad', 'enable_grad', 'inference_mode', 'set_grad_enabled',
                      'autocast', 'record_function', 'nullcontext'})
_PASSING_ROOTS = frozenset({'torch', 'contextlib'})
_NO_VALUE = (gast.Yield, gast.YieldFrom, gast.Await, gast.NamedExpr)


def _callee(expr):
    """``f`` of ``tg.call(f, ...)``, else None."""
    if isinstance(expr, gast.Call) and isinstance(expr.func, gast.Attribute) and \
            expr.func.attr == 'call' and isinstance(expr.func.value, gast.Name) and \
            expr.func.value.id == 'tg' and expr.args:
        return expr.args[0]
    return None


def _dotted(expr):
    parts = []
    while isinstance(expr, gast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if not isinstance(expr, gast.Name):
        return None
    return [expr.id] + parts[::-1]


def _passes_errors(item):
    """Whether ``with`` item ``item`` is ``torch.no_grad()`` or a kin (see _PASSING)."""
    name = _dotted(_callee(item.context_expr))
    return item.optional_vars is None and name is not None and \
        name[0] in _PASSING_ROOTS and name[-1] in _PASSING


def _parts(exc):
    """The ``(class, args)`` expression for ``raise exc``, or None when not staged."""
    callee = _callee(exc)
    if callee is None:
        if isinstance(exc, (gast.Name, gast.Attribute)):
            return gast.Tuple(elts=[exc, gast.Constant(value=None, kind=None)], ctx=gast.Load())
        return None
    args = exc.args[1:]
    if exc.keywords or any(isinstance(a, gast.Starred) for a in args):
        return None
    return gast.Tuple(elts=[callee, gast.Tuple(elts=list(args), ctx=gast.Load())],
                      ctx=gast.Load())


def _transparent(node) -> bool:
    """A ``try`` that neither catches nor does anything on the way out (``try: ...
    finally: pass``): a raise in it leaves as it would without the ``try``."""
    return not node.handlers and not node.orelse and \
        all(isinstance(stmt, gast.Pass) for stmt in node.finalbody)


def _names(target):
    if isinstance(target, gast.Name):
        return [target.id]
    if isinstance(target, (gast.Tuple, gast.List)):
        out = []
        for elt in target.elts:
            inner = _names(elt)
            if inner is None:
                return None
            out += inner
        return out
    return None


class StagedRaiseTransformer(base.Transformer):
    statements_only = True

    def __init__(self, ctx):
        super().__init__(ctx)
        self.guarded = [0]          # per function: enclosing ``try``s and other ``with``s
        self.declared = [frozenset()]   # per function: names declared global/nonlocal

    def visit_FunctionDef(self, node):
        declared = set()
        for n in traversal.walk(node):
            if isinstance(n, (gast.Global, gast.Nonlocal)):
                declared.update(n.names)
        self.guarded.append(0)
        self.declared.append(frozenset(declared))
        node = self.generic_visit(node)
        self.guarded.pop()
        self.declared.pop()
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    def _guarded_visit(self, node, guards):
        self.guarded[-1] += guards
        node = self.generic_visit(node)
        self.guarded[-1] -= guards
        return node

    def visit_Try(self, node):
        return self._guarded_visit(node, 0 if _transparent(node) else 1)

    def visit_TryStar(self, node):
        return self._guarded_visit(node, 1)

    def visit_With(self, node):
        return self._guarded_visit(node, 0 if all(_passes_errors(i) for i in node.items)
                                   else 1)

    visit_AsyncWith = visit_Try

    def _staged(self, block):
        """``(assignments, parts)`` when ``block`` is assignments then a raise we stage."""
        if not block or not isinstance(block[-1], gast.Raise) or self.guarded[-1]:
            return None
        last = block[-1]
        if last.exc is None or last.cause is not None:
            return None
        bound = [[n for t in s.targets for n in (_names(t) or [None])]
                 for s in block[:-1] if isinstance(s, gast.Assign)]
        if len(bound) != len(block) - 1:
            return None
        later = set().union(*bound)     # (read before bound: the body function's local)
        if None in later or later & self.declared[-1]:
            return None
        for stmt, names in zip(block, bound):
            for n in traversal.walk(stmt.value):
                if isinstance(n, _NO_VALUE) or isinstance(n, gast.Name) and n.id in later:
                    return None
            later -= set(names)
        parts = _parts(last.exc)
        return None if parts is None else (block[:-1], parts)

    def _check(self, raise_stmt, test_name, staged):
        """``def raise_parts(): ...; tg.raise_if(test_name, raise_parts)`` on the line of
        ``raise_stmt``, for ``staged`` (``_staged``'s assignments and parts)."""
        assignments, parts = staged
        body = templates.replace('''
            def fn_name():
                assignments
                return parts
            tg.raise_if(test_name, fn_name)
        ''', raise_stmt, _owned=('assignments', 'parts'),
            fn_name=self.ctx.namer.new('raise_parts'), test_name=test_name,
            assignments=list(assignments), parts=parts)
        anno.setanno(body[0], anno.Key.CALLED_AT_ONCE, True)    # (its reads make no cells)
        return body

    def visit_If(self, node):
        node = self.generic_visit(node)
        staged = self._staged(node.body)
        test, rest = node.test, node.orelse
        if staged is None:
            staged = self._staged(node.orelse)
            if staged is None:
                return node
            test, rest = base.tg_call('not_', [test], node), node.body
        raise_stmt = (node.body if rest is node.orelse else node.orelse)[-1]
        test_name = self.ctx.namer.new('raise_test')
        # the test on a line of the ``if``, the check on one of the ``raise``: an error in
        # the test names the one, the raised error (and the graph's check) the other
        head = templates.replace('test_name = test', node, _owned=('test',),
                                 test_name=test_name, test=test)
        return head + self._check(raise_stmt, test_name, staged) + rest

    def _visit_loop(self, node):
        """``for ...: ... break ... else: raise E(msg)``: the ``else`` sets a flag, the
        check after the loop raises when it is set (a tensor ``break`` makes it a traced
        flag: the check is staged; a Python one raises as the ``else`` would)."""
        node = self.generic_visit(node)
        if not jumps.contains(node.body, gast.Break, into_loops=False):
            return node         # (the else always runs: the raise as written, after it)
        staged = self._staged(node.orelse)
        if staged is None:
            return node
        raise_stmt = node.orelse[-1]
        test_name = self.ctx.namer.new('raise_test')
        head = templates.replace('test_name = False', node, test_name=test_name)
        node.orelse = templates.replace('test_name = True', raise_stmt, test_name=test_name)
        return head + [node] + self._check(raise_stmt, test_name, staged)

    visit_For = visit_While = _visit_loop


def transform(node, ctx):
    return StagedRaiseTransformer(ctx).visit(node)
