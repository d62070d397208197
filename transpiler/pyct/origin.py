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
    none takes its nearest ancestor's (``fill_from_parents``). (Entering them made a
    template's origins cost the size of the user statements spliced into it, once per
    enclosing ``if``/loop.)"""
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


def fill_from_parents(tree):
    """Nodes still without an origin take the origin of their nearest ancestor.
    (Reads and writes the annotation dict directly, pushing a node's children with its
    origin in one list: a generator, three calls and a tuple per node were most of it.)"""
    key, attr, children_of = anno.Key.ORIGIN, anno._ATTR, traversal._children
    stack, children = [tree], []
    origins = [None]                    # the origin each node on ``stack`` inherits
    while stack:
        node, loc = stack.pop(), origins.pop()
        state = node.__dict__
        annos = state.get(attr)
        if annos is not None and key in annos:
            loc = annos[key] or loc
        elif loc is not None:
            if annos is None:
                state[attr] = {key: loc}
            else:
                annos[key] = loc
        children_of(node, children)
        if children:
            stack += children
            origins += [loc] * len(children)
            children.clear()
