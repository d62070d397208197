"""Origins: every AST node remembers the user (file, line, col) it came from.

``annotate`` runs right after parsing; converters give the nodes they create the origin
of the construct they replace (``templates.replace(..., origin=node)`` or ``inherit``).
"""
import collections

import gast

from transpiler.pyct import anno
from transpiler.pyct import traversal

Location = collections.namedtuple('Location', 'filename lineno col_offset')


def annotate(tree, filename, line_offset, col_offset):
    """Set ORIGIN on every node with a position: parsed line 1 is user line 1 + line_offset.
    (Any order: each node's origin is its own; the annotation dict written directly.)"""
    key, attr, children_of = anno.Key.ORIGIN, anno._ATTR, traversal._children
    todo = [tree]
    while todo:
        node = todo.pop()
        children_of(node, todo)
        line = getattr(node, 'lineno', None)
        if line is not None:
            loc = Location(filename, line + line_offset, node.col_offset + col_offset)
            annos = node.__dict__.get(attr)
            if annos is None:
                node.__dict__[attr] = {key: loc}
            else:
                annos[key] = loc


def of(node):
    return anno.getanno(node, anno.Key.ORIGIN)


def inherit(nodes, source):
    """Give the nodes under ``nodes`` without an origin the origin of ``source``.

    A node that has one is not entered: it is user code (parsed, its positioned nodes
    annotated) or was given origins when it was made, and whatever under it still has
    none counts as having its nearest ancestor's (``conversion._line_map``). (Entering
    them made a template's origins cost the size of the user statements spliced into it,
    once per enclosing ``if``/loop.)"""
    loc = source if isinstance(source, Location) else of(source)
    if loc is None:
        return
    key, attr, children_of = anno.Key.ORIGIN, anno._ATTR, traversal._children
    stack = list(nodes) if isinstance(nodes, list) else [nodes]
    while stack:
        node = stack.pop()
        annos = node.__dict__.get(attr)
        if annos is None:
            node.__dict__[attr] = {key: loc}
        elif key in annos:
            continue
        else:
            annos[key] = loc
        children_of(node, stack)
