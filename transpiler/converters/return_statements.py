"""``return`` anywhere -> ``do_return``/``retval`` flags, as TF AutoGraph does.

    do_return = False
    retval = tg.UndefinedReturn()
    ...  return v  ->  retval = v; do_return = True      (later statements: if not do_return)
    loops that may return stop: while-test `not do_return and test`, for extra test
    return retval

A function whose returns are all top-level statements is left alone. A function that may
fall off its end gets an explicit ``return None`` first, so ``retval`` is always set (not
after ``while True:`` without ``break``, whose end no path reaches).
"""
import gast

from transpiler.converters import base
from transpiler.converters import jumps
from transpiler.pyct import anno
from transpiler.pyct import templates


def _needs_flags(fn):
    return jumps.contains([s for s in fn.body if not isinstance(s, gast.Return)], gast.Return, True)


def _falls_through(stmts):
    """Whether control may reach the end of ``stmts`` (conservative: True when unsure)."""
    if not stmts:
        return True
    last = stmts[-1]
    if isinstance(last, (gast.Return, gast.Raise)):
        return False
    if isinstance(last, gast.If):
        return _falls_through(last.body) or _falls_through(last.orelse)
    if isinstance(last, gast.Try):      # its body, else or a handler ends it; a finally may not
        ends = (_falls_through(last.body) and (not last.orelse or _falls_through(last.orelse))
                or any(_falls_through(h.body) for h in last.handlers))
        return ends and (not last.finalbody or _falls_through(last.finalbody))
    if isinstance(last, gast.With):     # (a manager that suppresses an error: the function
        return _falls_through(last.body)    # ends with no return, UndefinedReturn is None)
    if isinstance(last, gast.While) and isinstance(last.test, gast.Constant) and \
            last.test.value is True:
        return jumps.contains(last.body, gast.Break, False)   # only a break leaves it
    return True


class ReturnTransformer(base.Transformer):
    statements_only = True

    def visit_Lambda(self, node):
        return self.generic_visit(node)

    def visit_FunctionDef(self, node):
        node = self.generic_visit(node)   # nested functions first: their returns are their own
        if not _needs_flags(node):
            return node
        do_return, retval = self.ctx.namer.new('do_return'), self.ctx.namer.new('retval')
        body = list(node.body)
        if _falls_through(body):
            body.append(gast.Return(value=None))
            anno.setanno(body[-1], anno.Key.ORIGIN, anno.getanno(node.body[-1], anno.Key.ORIGIN))

        def replace(ret):
            value = ret.value if ret.value is not None else gast.Constant(value=None, kind=None)
            # the value first: if computing it raises (and a handler catches), no return
            return templates.replace('retval = value\ndo_return = True', ret,
                                     do_return=do_return, retval=retval, value=value)

        def on_loop(loop):
            add_loop_test(loop, base.not_(do_return))
            if loop.orelse:
                loop.orelse = templates.replace('if not_flag:\n    orelse', loop.orelse[0],
                                                not_flag=base.not_(do_return), orelse=loop.orelse)

        lowered, _, _ = jumps.Lowering(gast.Return, replace, do_return, True, on_loop,
                                       self.ctx.namer).block(body)
        node.body = (templates.replace('do_return = False\nretval = tg.UndefinedReturn()', node,
                                       do_return=do_return, retval=retval)
                     + lowered + templates.replace('return retval', body[-1], retval=retval))
        return node


def add_loop_test(loop, test):
    """Make ``loop`` also require ``test`` (an expression over loop state) before each iteration."""
    if isinstance(loop, gast.While):
        loop.test = gast.BoolOp(op=gast.And(), values=[test, loop.test])
    else:
        anno.setanno(loop, anno.Key.EXTRA_LOOP_TEST,
                     [test] + anno.getanno(loop, anno.Key.EXTRA_LOOP_TEST, []))


def transform(node, ctx):
    return ReturnTransformer(ctx).visit(node)
