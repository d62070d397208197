"""``locals()``, ``vars()`` and ``dir()`` (no arguments) see the user's names only.

Converted code has names the user never wrote (``tg``, placeholders of variables not bound
yet), and runs branches, loop bodies and comprehensions in body functions whose frames
hold other names. So each such call becomes ``tg.frame_locals(locals, names, scope)``:
if the name still means the builtin, the operator reads its caller's frame and keeps the
names of ``names`` (the original function's local, cell and free variables in CPython's
order) that are bound; where the call runs in another frame than the converted function
(``scope`` is not its name: a body function) it refuses, and the call runs eagerly. A call
in a user's nested ``def`` or ``lambda`` reads that function's own frame the same way, with
its names (from its code object in the original's constants, found by name and first
line); one in a function a converter made (a comprehension's) or nested in one is refused
(``names`` is None). Set/dict comprehensions and generator expressions keep their own frames (they are
not converted into body functions), so a call inside them past the first iterable is left
alone.
"""
import gast

from transpiler.analysis.activity import reads_frame
from transpiler.converters import base
from transpiler.pyct import anno


class _FrameLocals(gast.NodeTransformer):

    def __init__(self, names, scope, nested):
        self.frames = [(names, scope)]      # (names, scope) of the functions entered
        self.nested = nested                # (name, first line) -> names of a nested one

    def _nested(self, node):
        name = node.name if isinstance(node, gast.FunctionDef) else '<lambda>'
        lines = [anno.getanno(n, anno.Key.ORIGIN) for n in
                 [node] + list(getattr(node, 'decorator_list', ()))]
        first = min((o.lineno for o in lines if o is not None), default=None)
        # a user's def or lambda: its own frame, its own names (one a converter made, or
        # one inside a branch or loop body, finds none: refused)
        names = self.nested.get((name, first)) if self.frames[-1][0] is not None else None
        self.frames.append((names, name))
        node = self.generic_visit(node)
        self.frames.pop()
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
        known, scope = self.frames[-1]
        names = gast.Tuple(elts=[gast.Constant(value=n, kind=None) for n in known],
                           ctx=gast.Load()) if known is not None else \
            gast.Constant(value=None, kind=None)
        scope = gast.Constant(value=scope, kind=None)
        return base.tg_call('frame_locals', [node.func, names, scope], node)


def transform(node, ctx):
    frames = _FrameLocals(ctx.frame_names, node.name, ctx.nested_frame_names)
    node.body = [frames.visit(stmt) for stmt in node.body]
    return node
