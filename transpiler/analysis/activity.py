"""Activity: which names each statement reads, binds and mutates.

Requires: nothing (a gast FunctionDef).
Provides, on every statement of the function (nested blocks included, nested function
bodies excluded -- analyse them on their own):
  READ       names the statement may read (free names of nested defs/lambdas/comprehensions too)
  MODIFIED   names it may bind, delete or mutate (``x`` of ``x.a = v`` / ``x[i] = v``)
  COMPOSITES composite targets written, as source text (``self.h``, ``x[i]``)
and on the FunctionDef: SCOPE, a ``Scope`` (its ``cells``: locals a nested function may read
later, whenever it is called -- a body function must keep them in the enclosing cell; not
those of a def marked CALLED_AT_ONCE, which reads them where it is defined).
"""
import dataclasses

import gast

from transpiler.pyct import anno
from transpiler.pyct import codegen
from transpiler.pyct import traversal

_FUNCS = (gast.FunctionDef, gast.AsyncFunctionDef, gast.Lambda)
_COMPS = (gast.ListComp, gast.SetComp, gast.DictComp, gast.GeneratorExp)
_SCOPED = frozenset((gast.Lambda,) + _COMPS)     # (their names are their own)
# Methods that mutate their receiver in place: ``lst.append(v)`` modifies ``lst``.
_MUTATORS = frozenset({'append', 'extend', 'insert', 'pop', 'remove', 'clear', 'update',
                       'setdefault', 'add', 'discard', 'sort', 'reverse', 'popitem'})


def _mutated_receiver(call):
    """``lst`` for ``lst.append(v)`` or ``tg.call(lst.append, v)``; also ``x`` of ``x.add_(1)``
    and ``d`` of ``d['k'].append(v)``."""
    callee = call.func
    if isinstance(callee, gast.Attribute) and callee.attr == 'call' and \
            isinstance(callee.value, gast.Name) and callee.value.id == 'tg' and call.args:
        callee = call.args[0]
    if isinstance(callee, gast.Attribute) and isinstance(callee.value, gast.Name) and \
            callee.value.id != 'tg':
        name = callee.attr
        if name in _MUTATORS or (name.endswith('_') and not name.endswith('__')):
            return callee.value.id
    if isinstance(callee, gast.Attribute) and isinstance(callee.value, gast.Subscript) and \
            callee.attr in _MUTATORS:
        base = callee.value        # ``log['err'].append(v)`` modifies ``log`` (POT's log)
        while isinstance(base, gast.Subscript):
            base = base.value
        if isinstance(base, gast.Name) and base.id != 'tg':
            return base.id
    return None


FRAME_READERS = frozenset({'locals', 'vars', 'dir'})


def reads_frame(node) -> bool:
    """``locals()``, ``vars()`` or ``dir()`` (no arguments): it reads the caller's frame."""
    return isinstance(node, gast.Call) and isinstance(node.func, gast.Name) and \
        node.func.id in FRAME_READERS and not node.args and not node.keywords


def _frame_reads(call):
    """The names ``tg.frame_locals(locals, ('x', 'y'), 'f')`` shows (converters.frame_locals):
    it reads every one of them that is bound, so each stays live up to it (``y`` bound by a
    tensor ``if`` and read by no later code must still come out of the ``if``)."""
    callee = call.func
    if isinstance(callee, gast.Attribute) and callee.attr == 'frame_locals' and \
            isinstance(callee.value, gast.Name) and callee.value.id == 'tg' and \
            len(call.args) == 3 and isinstance(call.args[1], gast.Tuple):
        return {e.value for e in call.args[1].elts}
    return ()


@dataclasses.dataclass
class Scope:
    params: frozenset
    locals: frozenset      # every name bound in the function body (params included)
    globals: frozenset     # declared ``global``
    nonlocals: frozenset   # declared ``nonlocal``
    cells: frozenset = frozenset()   # locals that a nested def/lambda/comprehension reads

    @property
    def declared(self):
        return self.globals | self.nonlocals


@dataclasses.dataclass
class Effects:
    """What the header of one statement does (for compound statements: test, iter, target...)."""
    reads: set = dataclasses.field(default_factory=set)
    binds: set = dataclasses.field(default_factory=set)     # certainly bound afterwards
    mutated: set = dataclasses.field(default_factory=set)   # bases of attribute/subscript writes
    deleted: set = dataclasses.field(default_factory=set)
    composites: set = dataclasses.field(default_factory=set)
    # binds and deleted only (block_bound): reads of nested functions and composites'
    # source text, each a walk or an unparse, are left out (the other sets are partial)
    bindings_only: bool = False

    def expr(self, node):
        """(A stack, not recursion: the sets come out the same in any order, and this
        walk of every expression was most of the analyses' time.)"""
        if node is None:
            return
        stack, children_of, load = [node], traversal._children, gast.Load
        while stack:
            node = stack.pop()
            cls = type(node)
            if cls is gast.Name:
                (self.reads if type(node.ctx) is load else self.binds).add(node.id)
            elif cls in _SCOPED:
                if not self.bindings_only:
                    self.reads |= free_names(node)
            elif cls is gast.NamedExpr:
                stack.append(node.value)
                self.target(node.target)
            else:
                if cls is gast.Call:
                    receiver = _mutated_receiver(node)
                    if receiver is not None:
                        self.mutated.add(receiver)
                    self.reads.update(_frame_reads(node))
                children_of(node, stack)

    def target(self, node, deleting=False):
        if isinstance(node, gast.Name):
            (self.deleted if deleting else self.binds).add(node.id)
        elif isinstance(node, (gast.Tuple, gast.List)):
            for elt in node.elts:
                self.target(elt, deleting)
        elif isinstance(node, gast.Starred):
            self.target(node.value, deleting)
        elif isinstance(node, (gast.Attribute, gast.Subscript)):
            base = node.value
            while isinstance(base, (gast.Attribute, gast.Subscript)):
                base = base.value
            if isinstance(base, gast.Name):
                self.reads.add(base.id)
                self.mutated.add(base.id)
            if not self.bindings_only:
                self.composites.add(codegen.expr_source(node))
            self.expr(node.value)
            if isinstance(node, gast.Subscript):
                self.expr(node.slice)


def free_names(node):
    """Names read inside a nested function/lambda/comprehension and not bound there."""
    bound, read = set(), set()
    for n in traversal.walk(node):
        if isinstance(n, gast.Name):
            (read if isinstance(n.ctx, gast.Load) else bound).add(n.id)
        elif isinstance(n, (gast.Global, gast.Nonlocal)):
            bound.difference_update(n.names)
    if isinstance(node, (gast.FunctionDef, gast.AsyncFunctionDef)):
        bound.add(node.name)
    return read - bound


def _lazy_free_names(node):
    """The free names ``node`` may read after it is made: a list/set/dict comprehension
    reads none later (it runs where it is written), a generator expression reads its
    first iterable there too (``sum(w * k for w, k in zip(W, ks))``: ``ks`` is no cell)."""
    if isinstance(node, (gast.ListComp, gast.SetComp, gast.DictComp)):
        return set()
    if not isinstance(node, gast.GeneratorExp):
        return free_names(node)
    first = node.generators[0]
    rest = gast.GeneratorExp(elt=node.elt, generators=[gast.comprehension(
        target=first.target, iter=gast.Constant(value=None, kind=None), ifs=first.ifs,
        is_async=first.is_async)] + node.generators[1:])
    return free_names(rest)


def header_effects(stmt, bindings_only=False, memo=None):
    """Effects of ``stmt`` itself, not of the blocks it contains (``bindings_only``: only
    its ``binds`` and ``deleted`` are complete). ``memo``: a dict the analyses of one
    function share (``conversion._convert_tree``), which do not change the tree: each
    statement's full effects are found once, not once per analysis and per enclosing
    block or loop iteration (the result is shared: read it, do not change it)."""
    if memo is not None:
        found = memo.get(id(stmt))
        if found is None:
            found = memo[id(stmt)] = header_effects(stmt)
        return found
    e = Effects(bindings_only=bindings_only)
    if isinstance(stmt, gast.Assign):
        e.expr(stmt.value)
        for t in stmt.targets:
            e.target(t)
    elif isinstance(stmt, gast.AugAssign):
        e.expr(stmt.value)
        e.expr(_as_load(stmt.target))
        e.target(stmt.target)
    elif isinstance(stmt, gast.AnnAssign):
        if stmt.value is not None:
            e.expr(stmt.value)
            e.target(stmt.target)
    elif isinstance(stmt, gast.Delete):
        for t in stmt.targets:
            e.target(t, deleting=True)
    elif isinstance(stmt, (gast.Import, gast.ImportFrom)):
        e.binds |= {(a.asname or a.name).split('.')[0] for a in stmt.names}
    elif isinstance(stmt, (gast.FunctionDef, gast.AsyncFunctionDef, gast.ClassDef)):
        e.binds.add(stmt.name)
        for d in stmt.decorator_list:
            e.expr(d)
        if bindings_only:
            pass
        elif isinstance(stmt, gast.ClassDef):
            e.reads |= free_names(stmt)
        else:
            e.reads |= free_names(stmt) | _arg_defaults_reads(stmt.args)
    elif isinstance(stmt, (gast.If, gast.While)):
        e.expr(stmt.test)
    elif isinstance(stmt, (gast.For, gast.AsyncFor)):
        e.expr(stmt.iter)
        e.target(stmt.target)
        for extra in anno.getanno(stmt, anno.Key.EXTRA_LOOP_TEST, []):
            e.expr(extra)
    elif isinstance(stmt, (gast.With, gast.AsyncWith)):
        for item in stmt.items:
            e.expr(item.context_expr)
            if item.optional_vars is not None:
                e.target(item.optional_vars)
    elif isinstance(stmt, (gast.Global, gast.Nonlocal, gast.Try)):
        pass
    else:   # Expr, Return, Raise, Assert, Pass, Break, Continue, ...
        for child in traversal.iter_child_nodes(stmt):
            e.expr(child)
    return e


def _as_load(target):
    if isinstance(target, gast.Name):
        return gast.Name(id=target.id, ctx=gast.Load(), annotation=None, type_comment=None)
    return target


def _arg_defaults_reads(args):
    e = Effects()
    for d in args.defaults + [d for d in args.kw_defaults if d is not None]:
        e.expr(d)
    return e.reads


def blocks(stmt):
    """The statement lists directly inside ``stmt``."""
    if isinstance(stmt, (gast.FunctionDef, gast.AsyncFunctionDef, gast.ClassDef)):
        return []
    out = [getattr(stmt, f) for f in ('body', 'orelse', 'finalbody') if hasattr(stmt, f)]
    out += [h.body for h in getattr(stmt, 'handlers', [])]
    return out


def _analyze_block(stmts, memo):
    read, modified, composites = set(), set(), set()
    for stmt in stmts:
        e = header_effects(stmt, memo=memo)
        r, m, c = set(e.reads), e.binds | e.mutated | e.deleted, set(e.composites)
        for h in getattr(stmt, 'handlers', []):
            if h.type is not None:
                r |= _reads_of(h.type)
            if h.name is not None:
                m.add(h.name.id)
        for block in blocks(stmt):
            br, bm, bc = _analyze_block(block, memo)
            r, m, c = r | br, m | bm, c | bc
        anno.setanno(stmt, anno.Key.READ, frozenset(r))
        anno.setanno(stmt, anno.Key.MODIFIED, frozenset(m))
        anno.setanno(stmt, anno.Key.COMPOSITES, frozenset(c))
        read, modified, composites = read | r, modified | m, composites | c
    return read, modified, composites


def _reads_of(expr):
    e = Effects()
    e.expr(expr)
    return e.reads


def block_read(stmts):
    return frozenset().union(*[anno.getanno(s, anno.Key.READ, frozenset()) for s in stmts])


def block_modified(stmts):
    return frozenset().union(*[anno.getanno(s, anno.Key.MODIFIED, frozenset()) for s in stmts])


def block_bound(stmts, memo=None):
    """Names that ``stmts`` may bind or delete (as plain names), nested blocks included:
    the locals a generated body function holding ``stmts`` has besides its parameters."""
    bound = set()
    stack = list(stmts)
    while stack:
        stmt = stack.pop()
        e = header_effects(stmt, bindings_only=True, memo=memo)
        bound |= e.binds | e.deleted
        bound |= {h.name.id for h in getattr(stmt, 'handlers', []) if h.name is not None}
        for block in blocks(stmt):
            stack.extend(block)
    return frozenset(bound)


def _scope(fn, memo):
    a = fn.args
    params = {x.id for x in a.posonlyargs + a.args + a.kwonlyargs}
    params |= {x.id for x in (a.vararg, a.kwarg) if x is not None}
    declared_g, declared_nl = set(), set()
    stack = list(fn.body)
    while stack:
        stmt = stack.pop()
        if isinstance(stmt, gast.Global):
            declared_g |= set(stmt.names)
        elif isinstance(stmt, gast.Nonlocal):
            declared_nl |= set(stmt.names)
        for block in blocks(stmt):
            stack.extend(block)
    locals_ = (set(params) | block_bound(fn.body, memo)) - declared_g - declared_nl
    captured = set()
    for stmt in fn.body:
        for node in traversal.walk(stmt):
            if isinstance(node, _FUNCS + _COMPS) and \
                    not anno.getanno(node, anno.Key.CALLED_AT_ONCE):
                captured |= _lazy_free_names(node)
    return Scope(frozenset(params), frozenset(locals_), frozenset(declared_g), frozenset(declared_nl),
                 frozenset(captured & locals_))


def analyze(fn, memo=None):
    """Annotate the statements of FunctionDef ``fn`` and return its Scope (``memo``: see
    ``header_effects``)."""
    memo = {} if memo is None else memo
    _analyze_block(fn.body, memo)
    scope = _scope(fn, memo)
    anno.setanno(fn, anno.Key.SCOPE, scope)
    return scope
