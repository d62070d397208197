"""Tree walks as ``ast``'s (``walk``, ``iter_child_nodes``, ``NodeTransformer``), faster.

Converting a transformers module walks its tree some twenty times (each converter, the
analyses, origins, the templates); ``ast``'s walks go through ``iter_fields`` and a
``getattr`` per field and a method lookup per node, and were about half of the conversion's
time. These read each node's ``__dict__`` by its class's ``_fields``, cache the visitor
method per (transformer class, node class), and skip the nodes no visitor would change (a
node class without fields -- ``Load``, ``Add``... -- or a ``Constant``, with no ``visit_``
method of its own and the generic visit of ``Transformer``). Order and results are
``ast``'s: ``walk`` is breadth-first in field order, a visitor returning None deletes the
node, a list is spliced in, a list field is updated in place.
"""
import ast
import collections

import gast

_LEGACY_CONSTANT_VISITORS = ('visit_Num', 'visit_Str', 'visit_Bytes', 'visit_NameConstant',
                             'visit_Ellipsis')


def iter_child_nodes(node):
    """The direct child nodes of ``node``, in field order (as ``ast.iter_child_nodes``)."""
    state = node.__dict__
    for field in node._fields:
        value = state.get(field)
        if isinstance(value, list):
            for item in value:
                if isinstance(item, ast.AST):
                    yield item
        elif isinstance(value, ast.AST):
            yield value


def _children(node, out):
    state = node.__dict__
    for field in node._fields:
        value = state.get(field)
        if isinstance(value, list):
            out.extend([item for item in value if isinstance(item, ast.AST)])
        elif isinstance(value, ast.AST):
            out.append(value)


def walk(node):
    """Every node under ``node`` (itself included), breadth-first, as ``ast.walk``."""
    todo = collections.deque([node])
    while todo:
        node = todo.popleft()
        _children(node, todo)
        yield node


class Transformer(gast.NodeTransformer):
    """``gast.NodeTransformer`` with the same results, visiting faster (see the module).

    ``statements_only``: the subclass's visitors are all for statements (its results do not
    depend on entering expressions, which hold no statements): expression nodes it has no
    ``visit_`` method for are left as they are without being entered."""

    statements_only = False

    def visit(self, node):
        cls = type(self)
        try:
            method = _METHODS[cls, type(node)]
        except KeyError:
            method = _METHODS[cls, type(node)] = _method(cls, type(node))
        return node if method is None else method(self, node)

    def generic_visit(self, node):
        state = node.__dict__
        for field in node._fields:
            old = state.get(field)
            if isinstance(old, list):
                new_values = []
                for value in old:
                    if isinstance(value, ast.AST):
                        value = self.visit(value)
                        if value is None:
                            continue
                        if not isinstance(value, ast.AST):
                            new_values.extend(value)
                            continue
                    new_values.append(value)
                old[:] = new_values
            elif isinstance(old, ast.AST):
                new_node = self.visit(old)
                if new_node is None:
                    delattr(node, field)
                else:
                    setattr(node, field, new_node)
        return node


_METHODS = {}


def _method(cls, node_cls):
    """The function ``cls().visit`` calls for a ``node_cls`` node; None: leave it as is."""
    method = getattr(cls, 'visit_' + node_cls.__name__, None)
    if method is ast.NodeVisitor.visit_Constant and \
            not any(hasattr(cls, name) for name in _LEGACY_CONSTANT_VISITORS):
        method = None
    if method is not None:
        return method
    if cls.generic_visit is Transformer.generic_visit and \
            (not node_cls._fields or node_cls is gast.Constant or
             (cls.statements_only and issubclass(node_cls, _EXPRESSION_KINDS))):
        return None
    return cls.generic_visit


# node kinds that hold no statement (a lambda's body is an expression)
_EXPRESSION_KINDS = (gast.expr, gast.expr_context, gast.boolop, gast.operator, gast.unaryop,
                     gast.cmpop, gast.keyword, gast.arguments, gast.comprehension, gast.alias,
                     gast.withitem, gast.pattern)
