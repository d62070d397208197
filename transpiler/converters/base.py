"""Shared pieces of the converters: the context, a transformer base, and the helpers that
build body functions and state-passing calls (used by control_flow and loops)."""
import dataclasses

import gast

from transpiler.analysis import activity
from transpiler.errors import ConversionError
from transpiler.pyct import anno
from transpiler.pyct import naming
from transpiler.pyct import templates
from transpiler.pyct import traversal

_COMPS = (gast.ListComp, gast.SetComp, gast.DictComp, gast.GeneratorExp)


@dataclasses.dataclass
class Context:
    namer: naming.Namer
    filename: str
    holds_del: bool = True      # False: the tree has no ``del`` (check_no_del has nothing to find)
    frame_names: tuple = ()     # the user function's local, cell and free variables (frame_locals)
    nested_frame_names: dict = dataclasses.field(default_factory=dict)  # of its nested defs
    private_names: dict = None  # ``__x`` -> ``_Cls__x`` as Python mangled them (private_names)


class Transformer(traversal.Transformer):
    """Leaves comprehensions alone and tracks the Scope of the user function being visited
    (generated body functions share the scope of the function they sit in)."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.scopes = []
        self.read_when_bound = []   # per scope: its READ_WHEN_BOUND (definite_assignment)

    @property
    def scope(self):
        return self.scopes[-1]

    def _visit_comprehension(self, node):
        return node

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _visit_comprehension

    def visit_FunctionDef(self, node):
        scope = anno.getanno(node, anno.Key.SCOPE)
        if scope is not None:
            self.scopes.append(scope)
            self.read_when_bound.append(anno.getanno(node, anno.Key.READ_WHEN_BOUND,
                                                     frozenset()))
        node = self.generic_visit(node)
        if scope is not None:
            self.scopes.pop()
            self.read_when_bound.pop()
        return node


class OperandTransformer(Transformer):
    """A transformer that puts operands in lambdas (``lazy``), knowing the function it
    converts (the first ``def`` it visits)."""

    root = None

    def visit_FunctionDef(self, node):
        if self.root is None:
            self.root = node
        return super().visit_FunctionDef(node)

    def lazy(self, expr):
        """``lambda: expr`` for an operand evaluated later or not at all (the right of
        ``and``/``or``, a branch of ``x if c else y``). A user's ``:=`` in it binds its
        name in the lambda, not in the function: a ConversionError naming its line when
        the function reads that name anywhere else (one a converter made, marked SKIP,
        binds a temporary the operand itself reads)."""
        for node in traversal.walk(expr):
            if isinstance(node, gast.NamedExpr) and not anno.getanno(node, anno.Key.SKIP) \
                    and _loads(self.root or expr, node.target.id) > _loads(expr, node.target.id):
                raise ConversionError.at(
                    node, f'`{node.target.id} := ...` in an operand evaluated only on some '
                    'paths (the right of `and`/`or`, a branch of `x if c else y`) and read '
                    'elsewhere: converted code evaluates the operand in a function of its '
                    'own, where the name would be bound; assign it in a statement first')
        return thunk(expr)


def _loads(tree, name):
    return sum(1 for n in traversal.walk(tree)
               if type(n) is gast.Name and n.id == name and type(n.ctx) is gast.Load)


def not_(name):
    return gast.UnaryOp(op=gast.Not(), operand=gast.Name(id=name, ctx=gast.Load(), annotation=None,
                                                         type_comment=None))


def names_tuple(names):
    return gast.Tuple(elts=[gast.Constant(value=n, kind=None) for n in names], ctx=gast.Load())


def declarations(block, scope):
    """``global``/``nonlocal`` statements a body function holding ``block`` needs."""
    modified = activity.block_modified(block)
    out = []
    for kind, names in ((gast.Global, scope.globals), (gast.Nonlocal, scope.nonlocals)):
        if modified & names:
            out.append(kind(names=sorted(modified & names)))
    return out


_STATEMENT_LISTS = ('body', 'orelse', 'finalbody', 'handlers', 'cases')


def holds_del(tree):
    """Whether ``tree`` has a ``del`` statement. Statements sit only in statement lists
    (a lambda's, an ``IfExp``'s body is an expression; comprehensions hold none), so
    only those are walked, not every expression node."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, gast.Delete):
            return True
        state = node.__dict__
        for field in _STATEMENT_LISTS:
            value = state.get(field)
            if type(value) is list:
                stack += value
    return False


def check_no_del(block, state, construct, ctx=None):
    if ctx is not None and not ctx.holds_del:
        return
    for stmt in block:
        for node in traversal.walk(stmt):
            if isinstance(node, gast.Delete):
                for t in node.targets:
                    if isinstance(t, gast.Name) and t.id in state:
                        raise ConversionError.at(
                            node, f'`del {t.id}` inside a converted {construct}: {t.id!r} is '
                            'carried by the statement and must stay defined')


def cell_entry(params, scope, namer, origin):
    """A parameter that is a cell variable of the user function (a nested def or lambda
    reads it whenever called) must live in that cell, not in a local of the body function:
    -> (params with it renamed, ``nonlocal v; v = v_in``). Each body (each branch, each
    iteration, each loop test) so starts with the cell holding its entry value, and its
    writes are what a closure called inside sees, as in eager code."""
    cells = [p for p in params if p in scope.cells]
    if not cells:
        return list(params), []
    renamed = {p: namer.new(p + '_in') for p in cells}
    prologue = [gast.Nonlocal(names=cells)]
    for p in cells:
        prologue += templates.replace('var = var_in', origin, var=p, var_in=renamed[p])
    return [renamed.get(p, p) for p in params], prologue


def body_function(name, params, block, state, scope, origin, namer, returns=None):
    """``def name(*params): <decls> <block>; return (*state,)`` (``returns``: the
    expressions returned instead of the state names, e.g. ``tg.UNREAD``). ``block`` is
    moved into it, not copied: the caller's statement it came from is being replaced."""
    params, prologue = cell_entry(params, scope, namer, origin)
    return templates.replace('''
        def fn_name(params):
            body
            return state
    ''', origin, _owned=('body',), fn_name=name, params=params,
        body=prologue + declarations(block, scope) + block,
        state=list(returns if returns is not None else state))


def undefined_inits(stmt, state, read_when_bound=frozenset()):
    """``v = tg.Undefined('v')`` for each state variable that may be unbound before
    ``stmt``; ``tg.Unassigned('v')`` for one of ``read_when_bound``, which the user code
    reads only where Python has bound it (``analysis.definite_assignment``): no path
    reads that value, so a tensor construct may pair it with a placeholder."""
    defined = anno.getanno(stmt, anno.Key.DEFINED_IN, frozenset())
    out = []
    for v in state:
        if v not in defined:
            kind = 'Unassigned' if v in read_when_bound else 'Undefined'
            out += templates.replace(f'var = tg.{kind}(var_name)', stmt, var=v,
                                     var_name=gast.Constant(value=v, kind=None))
    return out


def state_call(state, call, origin):
    """``(*state,) = <call>``, or the bare call when there is no state (``call`` is
    moved in, not copied: the caller built it for this statement)."""
    if not state:
        return templates.replace('call', origin, _owned=('call',), call=call)
    return templates.replace('state = call', origin, _owned=('call',), state=list(state),
                             call=call)


def tg_call(op, args, origin, keywords=()):
    """``tg.<op>(*args, **keywords)`` (args are used as given, not copied): the nodes
    ``templates.replace_as_expression(f'tg.{op}()', origin)`` gives (same fields, the
    template's positions, ``origin``'s origin on each), built directly (the template's
    copy and walks were a tenth of converting a function)."""
    name = gast.Name(id='tg', ctx=gast.Load(), annotation=None, type_comment=None)
    func = gast.Attribute(value=name, attr=op, ctx=gast.Load())
    call = gast.Call(func=func, args=list(args), keywords=list(keywords))
    for node, end in ((name, 2), (func, 3 + len(op)), (call, 5 + len(op))):
        node.lineno, node.col_offset, node.end_lineno, node.end_col_offset = 1, 0, 1, end
    loc = origin if isinstance(origin, tuple) else anno.getanno(origin, anno.Key.ORIGIN)
    if loc is not None:
        for node in (call, func, name, func.ctx, name.ctx):
            anno.setanno(node, anno.Key.ORIGIN, loc)
    return call


def thunk(expr):
    """``lambda: expr``"""
    return gast.Lambda(args=gast.arguments(args=[], posonlyargs=[], vararg=None, kwonlyargs=[],
                                           kw_defaults=[], kwarg=None, defaults=[]), body=expr)
