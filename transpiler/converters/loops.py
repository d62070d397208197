"""``while`` and ``for`` -> ``tg.while_stmt`` / ``tg.for_stmt``.

    def loop_test(i, s):                 def loop_body(i, s):    # for i in range(n): s += i
        return i < n                         s += i
    def loop_body(i, s):                     return (s,)
        s += i                           (s,) = tg.for_stmt(tg.call(range, n), None, loop_body, (s,), ('s',))
        i += 1
        return (i, s)
    (i, s) = tg.while_stmt(loop_test, loop_body, (i, s), ('i', 's'))

The for target is the body's first parameter when it is a plain name that is not state;
otherwise the body takes ``itr`` and unpacks it (``(i, v) = itr``). Extra loop tests
(from break/return lowering) become ``extra_test=lambda <state>: <test>``.
Requires the analyses; the state is the STATE annotation. Inner statements are converted first.
"""
import gast

from transpiler.converters import base
from transpiler.errors import ConversionError
from transpiler.pyct import anno
from transpiler.pyct import templates


def _all(tests):
    return tests[0] if len(tests) == 1 else gast.BoolOp(op=gast.And(), values=tests)


class LoopTransformer(base.Transformer):
    statements_only = True

    def _prepare(self, node, construct):
        if node.orelse:   # break_statements moves else clauses out of every loop
            raise ConversionError.at(node, f'unexpected else clause on a {construct} loop')
        state = anno.getanno(node, anno.Key.STATE)
        node = self.generic_visit(node)
        base.check_no_del(node.body, state, f'{construct} loop', self.ctx)
        return node, state

    def visit_While(self, node):
        node, state = self._prepare(node, 'while')
        test_name, body_name = self.ctx.namer.new('loop_test'), self.ctx.namer.new('loop_body')
        params, prologue = base.cell_entry(state, self.scope, self.ctx.namer, node.test)
        loop_test = templates.replace('def test_name(params):\n    prologue\n    return test',
                                      node.test, test_name=test_name, params=params,
                                      prologue=prologue, test=node.test)
        call = templates.replace_as_expression(
            'tg.while_stmt(test_name, body_name, state, names)', node, test_name=test_name,
            body_name=body_name, state=list(state), names=base.names_tuple(state))
        return (loop_test + base.body_function(body_name, state, node.body, state, self.scope, node,
                                     self.ctx.namer)
                + base.undefined_inits(node, state, self.read_when_bound[-1])
                + base.state_call(state, call, node))

    def visit_For(self, node):
        node, state = self._prepare(node, 'for')
        body_name = self.ctx.namer.new('loop_body')
        body = node.body
        if isinstance(node.target, gast.Name) and node.target.id not in state:
            item = node.target.id
        else:
            item = self.ctx.namer.new('itr')
            body = templates.replace('target = item', node.target, target=node.target, item=item) + body
        extra = anno.getanno(node, anno.Key.EXTRA_LOOP_TEST)
        extra_test = gast.Constant(value=None, kind=None)
        if extra:
            extra_test = templates.replace_as_expression('lambda params: test', node,
                                                         params=list(state), test=_all(extra))
        call = templates.replace_as_expression(
            'tg.for_stmt(iterable, extra_test, body_name, state, names)', node,
            iterable=node.iter, extra_test=extra_test, body_name=body_name, state=list(state),
            names=base.names_tuple(state))
        return (base.body_function(body_name, [item] + list(state), body, state, self.scope,
                                     node, self.ctx.namer)
                + base.undefined_inits(node, state, self.read_when_bound[-1])
                + base.state_call(state, call, node))


def transform(node, ctx):
    return LoopTransformer(ctx).visit(node)
