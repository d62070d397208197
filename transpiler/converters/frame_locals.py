"""``locals()``, ``vars()`` and ``dir()`` (no arguments) see the user's names only.

Converted code has names the user never wrote (``tg``, placeholders of variables not bound
yet), and runs branches, loop bodies and comprehensions in body functions whose frames
hold other names. So each such call becomes ``tg.frame_locals(locals, names, scope)``:
if the name still means the builtin, the operator reads its caller's frame and keeps the
names of ``names`` (the original function's local, cell and free variables in CPython's
order) that are bound; where the call runs in another frame than the converted function
(``scope`` is not its name: a body function, a lambda) it refuses, and the call runs
eagerly. A call in a nested ``def`` or ``lambda`` is refused the same way (``names`` is
None). Set/dict comprehensions and generator expressions keep their own frames (they are
not converted into body functions), so a call inside them past the first iterable is left
alone.
"""
import gast

from transpiler.analysis.activity import reads_frame
from transpiler.converters import base


class _FrameLocals(gast.NodeTransformer):

    def __init__(self, names, scope):
        self.names, self.scope = names, scope
        self.depth = 0              # nested defs and lambdas entered

    def _nested(self, node):
        self.depth += 1
        node = self.generic_visit(node)
        self.depth -= 1
        return node

    visit_FunctionDef = visit_Lambda = _nested

    def visit_ClassDef(self, node):         # (a class body's locals() is its namespace)
        node.decorator_list = [self.visit(d) for d in node.decorator_list]
        return node

    def _own_frame(self, node):             # only the first iterable is the caller's
        node.generators[0].iter = self.visit(node.generators[0].iter)
        return node

    visit_SetComp = visit_DictComp = visit_GeneratorExp = _own_frame

    def visit_Call(self, node):
        node = self.generic_visit(node)
        if not reads_frame(node):
            return node
        top = self.depth == 0
        names = gast.Tuple(elts=[gast.Constant(value=n, kind=None) for n in self.names],
                           ctx=gast.Load()) if top else gast.Constant(value=None, kind=None)
        scope = gast.Constant(value=self.scope, kind=None)
        return base.tg_call('frame_locals', [node.func, names, scope], node)


def transform(node, ctx):
    frames = _FrameLocals(ctx.frame_names, node.name)
    node.body = [frames.visit(stmt) for stmt in node.body]
    return node
