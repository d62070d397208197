"""``try`` statements: converted, or guarded so that tracing them fails when it must.

- ``try``/``finally`` without ``except`` stays a Python ``try`` (its blocks converted like
  any others, its returns/breaks lowered to flags by the later converters): the
  ``finally`` block runs once on every path of the trace, as it runs once on every path
  eagerly, and tensor control flow inside becomes graph nodes. ``try_start =
  tg.node_mark()`` comes before it and its ``finally`` block is wrapped in ``with
  tg.finally_block(try_start):``: a block with an effect after tensor ops that may raise
  when the graph runs refuses the trace (eager runs the block on that error; the graph
  would stop before it). A ``finally`` holding its
  own ``return``/``break``/``continue`` (which would swallow an exception) is guarded as
  below, with no catching clause.
- with ``except`` clauses, the ``try`` body is guarded::

      with tg.try_guard(lambda: (KeyError,)):     # None: a bare ``except``
          try:
              with tg.try_body(False):          # True: the body holds if/while/for
                  body
          except KeyError:
              ...

  An exception raised while tracing is raised eagerly exactly when the body is pure
  Python (adds no graph node, uses no tensor value), so such a body converts and the
  handlers, ``else`` and ``finally`` run as traced -- unless the exception leaves an
  if/while/for of the body (its variables travel by return values, lost on a raise). A body that adds graph nodes converts
  only when no handler can catch an error a graph raises when it runs; anything else
  stops tracing (the runtime's ``try_guard``), which falls back.
"""
import gast

from transpiler.converters import base
from transpiler.converters import jumps
from transpiler.pyct import templates
from transpiler.pyct import traversal


def _catches(handlers):
    """``lambda: (T1, T2)`` for the handlers' types; ``None`` if one is a bare ``except``
    or there is none (a jump out of ``finally`` swallows every exception)."""
    types = [h.type for h in handlers]
    if not types or any(t is None for t in types):
        return gast.Constant(value=None, kind=None)
    return base.thunk(gast.Tuple(elts=types, ctx=gast.Load()))


def _has_control_flow(block):
    """Whether ``block`` holds an if/while/for of this function (each becomes a call
    passing its variables back by return: an exception raised inside one loses the
    values it had assigned, which an ``except`` clause could then observe)."""
    stack = list(block)
    while stack:
        node = stack.pop()
        if isinstance(node, (gast.If, gast.While, gast.For)):
            return True
        if not isinstance(node, (gast.FunctionDef, gast.AsyncFunctionDef, gast.ClassDef,
                                 gast.Lambda)):
            stack.extend(n for n in traversal.iter_child_nodes(node) if isinstance(n, gast.stmt))
    return False


def _jumps_out_of(block):
    return any(jumps.contains(block, kind, into_loops) for kind, into_loops in
               ((gast.Return, True), (gast.Break, False), (gast.Continue, False)))


class TryTransformer(base.Transformer):
    statements_only = True

    def visit_Try(self, node):
        node = self.generic_visit(node)
        if not node.handlers and not _jumps_out_of(node.finalbody):
            mark = self.ctx.namer.new('try_start')
            node.finalbody = templates.replace('with tg.finally_block(mark):\n    body',
                                               node.finalbody[0], mark=mark,
                                               body=node.finalbody)
            return templates.replace('mark = tg.node_mark()', node, mark=mark) + [node]
        node.body = templates.replace('with tg.try_body(flow):\n    body', node,
                                      flow=gast.Constant(value=_has_control_flow(node.body),
                                                         kind=None),
                                      body=node.body)
        return templates.replace('with tg.try_guard(catches):\n    try_stmt', node,
                                 catches=_catches(node.handlers), try_stmt=[node])


def transform(node, ctx):
    return TryTransformer(ctx).visit(node)
