"""``match`` -> an ``if``/``else`` chain, one ``tg.match_case`` test per case (run first).

    match k:                              subject = k
        case 1:                           ok, caught = tg.match_case(subject, '1', (), {})
            A                             if ok:
        case (a, b) if a > 0:                 A
            B                       ->    else:
        case _:                               ok, caught = tg.match_case(subject, '(a, b)',
            C                                                           ('a', 'b'), {})
                                              if ok:
                                                  (a, b) = caught
                                              if ok and a > 0:
                                                  B
                                              else:
                                                  C

The subject is evaluated once; each pattern is matched by Python itself (``tg.match_case``
runs a one-case ``match`` of the pattern's source, given the names the pattern reads, and
returns whether it matched and its captures), so a Python subject is matched exactly as
Python would, at trace time, and leaves no node. The captures are bound before the guard,
as Python binds them; the cases' bodies and guards are then ordinary code, converted like
any other (a tensor guard is a tensor ``if``). An irrefutable last case (``case _``,
``case name``) without a guard is the final ``else``. A traced subject that a pattern
compares (``case 1``) raises in ``tg.match_case``, naming the line: a fallback.
"""
import gast

from transpiler.converters import base
from transpiler.pyct import codegen
from transpiler.pyct import templates
from transpiler.pyct import traversal


def _name(id_, ctx=gast.Load):
    return gast.Name(id=id_, ctx=ctx(), annotation=None, type_comment=None)


def _captures(pattern):
    """The names ``pattern`` binds, in order."""
    found = []
    for n in traversal.walk(pattern):
        name = getattr(n, 'rest' if isinstance(n, gast.MatchMapping) else 'name', None) \
            if isinstance(n, (gast.MatchAs, gast.MatchStar, gast.MatchMapping)) else None
        if name is not None and name not in found:
            found.append(name)
    return found


def _reads(pattern):
    """The names ``pattern`` reads (value patterns' ``Mode.TRAIN``, class patterns' ``Point``)."""
    found = []
    for n in traversal.walk(pattern):
        if isinstance(n, gast.Name) and n.id not in found:
            found.append(n.id)
    return found


def _capture_all(pattern):
    """``case _`` / ``case name``: matches anything."""
    return isinstance(pattern, gast.MatchAs) and pattern.pattern is None


class MatchTransformer(base.Transformer):
    statements_only = True

    def visit_Match(self, node):
        node = self.generic_visit(node)
        subject = self.ctx.namer.new('subject')
        ok, caught = self.ctx.namer.new('case_ok'), self.ctx.namer.new('case_caught')
        head = templates.replace('subject = value', node, subject=subject, value=node.subject)
        return head + self._chain(node.cases, subject, ok, caught)

    def _chain(self, cases, subject, ok, caught):
        if not cases:
            return []
        case, rest = cases[0], cases[1:]
        at = case.pattern           # (a case has no position: its pattern's line)
        if _capture_all(case.pattern) and case.guard is None:
            bind = [] if case.pattern.name is None else templates.replace(
                'name = subject', at, name=case.pattern.name, subject=subject)
            return bind + case.body
        names, reads = _captures(case.pattern), _reads(case.pattern)
        env = gast.Dict(keys=[gast.Constant(value=n, kind=None) for n in reads],
                        values=[_name(n) for n in reads])
        test = base.tg_call('match_case', [
            _name(subject), gast.Constant(value=codegen.expr_source(case.pattern), kind=None),
            gast.Tuple(elts=[gast.Constant(value=n, kind=None) for n in names],
                       ctx=gast.Load()), env], at)
        out = templates.replace('ok, caught = test', at, ok=ok, caught=caught, test=test)
        if names:
            out += templates.replace('if ok:\n    names = caught', at, ok=ok,
                                     names=[_name(n) for n in names], caught=caught)
        cond = _name(ok) if case.guard is None else \
            gast.BoolOp(op=gast.And(), values=[_name(ok), case.guard])
        orelse = self._chain(rest, subject, ok, caught)
        out += templates.replace('if cond:\n    body\nelse:\n    orelse', at, cond=cond,
                                 body=case.body, orelse=orelse or [gast.Pass()])
        return out


def transform(node, ctx):
    return MatchTransformer(ctx).visit(node)
