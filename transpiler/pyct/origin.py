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
    """Set ORIGIN on every node with a position: parsed line 1 is user line 1 + line_offset."""
    for node in traversal.walk(tree):
        if getattr(node, 'lineno', None) is not None:
            loc = Location(filename, node.lineno + line_offset, node.col_offset + col_offset)
            anno.setanno(node, anno.Key.ORIGIN, loc)


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
    stack = list(nodes) if isinstance(nodes, list) else [nodes]
    while stack:
        node = stack.pop()
        if anno.hasanno(node, anno.Key.ORIGIN):
            continue
        anno.setanno(node, anno.Key.ORIGIN, loc)
        stack.extend(traversal.iter_child_nodes(node))


def fill_from_parents(tree):
    """Nodes still without an origin take the origin of their nearest ancestor."""
    stack = [(tree, None)]
    while stack:
        node, loc = stack.pop()
        if anno.hasanno(node, anno.Key.ORIGIN):
            loc = of(node) or loc
        elif loc is not None:
            anno.setanno(node, anno.Key.ORIGIN, loc)
        stack.extend([(child, loc) for child in traversal.iter_child_nodes(node)])
