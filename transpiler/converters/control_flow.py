"""``if``/``elif``/``else`` -> ``tg.if_stmt``.

    def if_body(y):
        y = x * 2
        return (y,)
    def else_body(y):
        y = -x
        return (y,)
    y = tg.Undefined('y')            # only if y may be unbound here
    (y,) = tg.if_stmt(test, if_body, else_body, (y,), ('y',))

Requires the analyses (activity, liveness, reaching_defs); the state is the STATE annotation.
Variables only read come from the closure. A state variable no later code reads (read,
then rebound, in a branch) comes back as ``tg.UNREAD``, so the paths need not agree on it
(not one only an inner ``if``'s state call rebinds: an object whose attributes it sets).
Inner statements are converted first.
"""
from transpiler.analysis import activity
from transpiler.converters import base
from transpiler.pyct import anno


class IfTransformer(base.Transformer):
    statements_only = True

    def visit_If(self, node):
        state = anno.getanno(node, anno.Key.STATE)   # annotations of the original node
        bound = activity.block_bound(node.body + node.orelse)   # (as the user wrote them)
        node = self.generic_visit(node)
        base.check_no_del(node.body + node.orelse, state, 'if statement', self.ctx)
        namer = self.ctx.namer
        body_name, else_name = namer.new('if_body'), namer.new('else_body')
        call = base.templates.replace_as_expression(       # (the replaced if's test: moved)
            'tg.if_stmt(test, body_name, else_name, state, names)', node, ('test',),
            test=node.test, body_name=body_name, else_name=else_name, state=list(state),
            names=base.names_tuple(state))
        # rebound in a branch, yet dead after the if: the paths need not agree on it (by
        # the user's code, not an inner if's state call: ``self`` whose attributes an
        # inner branch sets is passed on, else its new values leave the cond)
        unread = bound - self.scope.cells - anno.getanno(node, anno.Key.LIVE_OUT)
        returns = [base.templates.replace_as_expression('tg.UNREAD', node) if v in unread
                   else v for v in state]
        return (base.body_function(body_name, state, node.body, state, self.scope, node,
                                   namer, returns)
                + base.body_function(else_name, state, node.orelse, state, self.scope, node,
                                     namer, returns)
                + base.undefined_inits(node, state, self.read_when_bound[-1])
                + base.state_call(state, call, node))


def transform(node, ctx):
    return IfTransformer(ctx).visit(node)
