"""Definite assignment on the user's own code: the locals a function reads only where
Python has certainly bound them.

Requires: nothing (a gast FunctionDef as parsed, before any converter: its ``return``,
``break``, ``continue``, loop ``else:`` and ``match`` still as the user wrote them).
Provides on the FunctionDef: READ_WHEN_BOUND.

Lowering jumps to flags hides why a variable is bound: ``found = row; break`` in a loop
and ``found = zeros`` in its ``else:`` become a loop that may leave ``found`` unbound and
an ``if not brk:`` that binds it -- unbound on no path, but no analysis of the lowered
code can tell (the flag ties them). Here, on the code before lowering, ``found`` is bound
at every read, so the converters give it ``tg.Unassigned`` instead of ``tg.Undefined``:
a value no path can read, which a tensor construct replaces with a placeholder shaped
like the value the other path assigns (the loop body is traced to learn it).

A name qualifies when every read of it (comprehensions' reads included, at the point
they run) comes where every path from the function's start has bound it, counting
``return``/``raise`` as leaving and ``break`` as reaching the loop's exit. Conservative
where unsure: an ``except`` clause or ``finally`` block starts from what was bound before
the ``try`` (less what the body deletes); a name bound by ``:=``, read by a nested
function, lambda or generator expression (which run later), or declared
``global``/``nonlocal`` never qualifies. A ``with`` block counts as running to its end:
an exception its context manager swallows leaves the placeholder a Python value, which
raises ``UnboundLocalError`` when read, as eager does.
"""
import gast

from transpiler.analysis import activity
from transpiler.pyct import anno
from transpiler.pyct import traversal

_LATER = (gast.FunctionDef, gast.AsyncFunctionDef, gast.Lambda, gast.ClassDef,
          gast.GeneratorExp)     # their reads run when called (iterated), not here
_LOOPS = (gast.For, gast.AsyncFor, gast.While)
_WITHS = (gast.With, gast.AsyncWith)
_MATCH = getattr(gast, 'Match', ())


def _meet(a, b):
    """Names bound on both of two paths (None: a path no execution reaches)."""
    if a is None:
        return b
    if b is None:
        return a
    return a & b


def _less(bound, names):
    return None if bound is None else bound - names


def _plus(bound, names):
    return None if bound is None else bound | names


def _deleted(stmts):
    """Names a ``del`` in ``stmts`` (nested blocks included) unbinds."""
    out = set()
    stack = list(stmts)
    while stack:
        stmt = stack.pop()
        if isinstance(stmt, gast.Delete):
            out |= activity.header_effects(stmt, bindings_only=True).deleted
        stack.extend(b for block in activity.blocks(stmt) for b in block)
        stack.extend(b for case in getattr(stmt, 'cases', ()) for b in case.body)
    return out


def _captures(pattern):
    """The names a ``match`` pattern binds."""
    out = set()
    for node in traversal.walk(pattern):
        name = getattr(node, 'rest' if isinstance(node, gast.MatchMapping) else 'name', None)
        if isinstance(name, str) and isinstance(node, (gast.MatchAs, gast.MatchStar,
                                                       gast.MatchMapping)):
            out.add(name)
    return out


def _reads(expr):
    e = activity.Effects()
    e.expr(expr)
    return e.reads


class _Walk:
    """One forward walk over a function's statements: ``bound`` is the set of names bound
    on every path to the current point (None: no path reaches it)."""

    def __init__(self):
        self.unsafe = set()     # names read somewhere they may be unbound
        self.loops = []         # per enclosing loop: [names bound at its breaks]
        self.captured = set()   # names ``match`` patterns bind

    def read(self, names, bound):
        if bound is not None:
            self.unsafe |= names - bound

    def block(self, stmts, bound):
        for stmt in stmts:
            bound = self.stmt(stmt, bound)
        return bound

    def stmt(self, stmt, bound):
        if isinstance(stmt, gast.If):
            self.read(_reads(stmt.test), bound)
            return _meet(self.block(stmt.body, bound), self.block(stmt.orelse, bound))
        if isinstance(stmt, _LOOPS):
            return self.loop(stmt, bound)
        if isinstance(stmt, gast.Break):
            self.loops[-1][0] = _meet(self.loops[-1][0], bound)
            return None
        if isinstance(stmt, gast.Continue):
            return None
        if isinstance(stmt, gast.Try):
            return self.try_(stmt, bound)
        if isinstance(stmt, _WITHS):
            e = activity.header_effects(stmt)
            self.read(e.reads, bound)
            return self.block(stmt.body, _plus(bound, e.binds))
        if _MATCH and isinstance(stmt, _MATCH):
            return self.match(stmt, bound)
        e = activity.header_effects(stmt)
        self.read(e.reads, bound)       # (a def's: its free names, unsafe anyway)
        if isinstance(stmt, (gast.Return, gast.Raise)):
            return None
        return _less(_plus(bound, e.binds), e.deleted)

    def loop(self, stmt, bound):
        head = _less(bound, _deleted(stmt.body))     # (what a pass may unbind)
        if isinstance(stmt, gast.While):
            self.read(_reads(stmt.test), head)
            entry = head
            forever = isinstance(stmt.test, gast.Constant) and bool(stmt.test.value)
        else:
            e = activity.header_effects(stmt)
            self.read(e.reads, bound)
            entry, forever = _plus(head, e.binds), False
        self.loops.append([None])
        self.block(stmt.body, entry)
        breaks = self.loops.pop()[0]
        done = None if forever else head          # the test failed / the items ran out
        if stmt.orelse:
            done = self.block(stmt.orelse, done)
        return _meet(done, breaks)

    def try_(self, stmt, bound):
        body = self.block(stmt.body, bound)
        start = _less(bound, _deleted(stmt.body))    # an exception may come at any point
        ends = [self.block(stmt.orelse, body)]
        for h in stmt.handlers:
            if h.type is not None:
                self.read(_reads(h.type), start)
            name = {h.name.id} if isinstance(h.name, gast.Name) else set()
            ends.append(_less(self.block(h.body, _plus(start, name)), name))  # (`as e`: deleted)
        normal = None
        for end in ends:
            normal = _meet(normal, end)
        if not stmt.finalbody:
            return normal
        anywhere = stmt.body + stmt.orelse + [s for h in stmt.handlers for s in h.body]
        after = self.block(stmt.finalbody, _meet(normal, _less(bound, _deleted(anywhere))))
        if normal is None or after is None:
            return None
        return (normal - _deleted(stmt.finalbody)) | after

    def match(self, stmt, bound):
        self.read(_reads(stmt.subject), bound)
        last = stmt.cases[-1] if stmt.cases else None
        irrefutable = last is not None and last.guard is None and \
            isinstance(last.pattern, gast.MatchAs) and last.pattern.pattern is None
        ends = None if irrefutable else bound          # (no case matched)
        for case in stmt.cases:
            names = _captures(case.pattern)
            self.captured |= names
            inside = _plus(bound, names)
            if case.guard is not None:
                self.read(_reads(case.guard), inside)
            ends = _meet(ends, self.block(case.body, inside))
        return ends


def _never_qualify(fn):
    """Names bound by ``:=``, read by code that runs later, or declared global/nonlocal;
    None (every name) where the function reads its frame: ``locals()`` sees whether a name
    is bound, so no path may stand in a placeholder for it."""
    out = set()
    for node in traversal.walk(fn):
        if node is fn:
            continue
        if activity.reads_frame(node):
            return None
        if isinstance(node, gast.NamedExpr) and isinstance(node.target, gast.Name):
            out.add(node.target.id)
        elif isinstance(node, _LATER):
            out |= activity.free_names(node)
        elif isinstance(node, (gast.Global, gast.Nonlocal)):
            out |= set(node.names)
    return out


def read_when_bound(fn):
    """The names FunctionDef ``fn`` binds and reads only where they are certainly bound."""
    a = fn.args
    params = {x.id for x in a.posonlyargs + a.args + a.kwonlyargs}
    params |= {x.id for x in (a.vararg, a.kwarg) if x is not None}
    never = _never_qualify(fn)
    if never is None:
        return frozenset()
    walk = _Walk()
    walk.block(fn.body, frozenset(params))
    return frozenset((activity.block_bound(fn.body) | walk.captured) - walk.unsafe - never)


def analyze(tree):
    """Annotate ``tree`` (a FunctionDef) and the functions nested in it with READ_WHEN_BOUND."""
    for node in traversal.walk(tree):
        if isinstance(node, gast.FunctionDef):
            anno.setanno(node, anno.Key.READ_WHEN_BOUND, read_when_bound(node))
