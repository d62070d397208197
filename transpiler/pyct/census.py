"""A census of a parsed function, in one walk: the node kinds it holds and the names it uses.

    found = census.take(tree)
    found.kinds      # frozenset of the node classes present (gast.If, gast.ListComp, ...)
    found.ids        # the ids of its Name nodes (parameters included)
    found.names      # every name it uses: Name ids, def/class names, names declared
                     # global/nonlocal, import aliases (what a fresh name must avoid)
    found.holds(kinds) -> bool   # whether a node of one of ``kinds`` is present

Converters with nothing to convert (no loop, no ``try``, no f-string...) are skipped on
it, and the namer takes its names from it instead of walking the tree again
(``conversion._convert_tree``): converting a function walked every node of it some
fifteen times, most of them finding nothing to do.
"""
import dataclasses

import gast

from transpiler.pyct import traversal

_DEFS = (gast.FunctionDef, gast.AsyncFunctionDef, gast.ClassDef)
_DECLARATIONS = (gast.Global, gast.Nonlocal)


@dataclasses.dataclass(frozen=True)
class Census:
    kinds: frozenset
    ids: frozenset
    names: frozenset

    def holds(self, kinds) -> bool:
        return any(kind in self.kinds for kind in kinds)


def take(tree) -> Census:
    """The census of ``tree`` (the names as ``naming.Namer`` collects them)."""
    kinds, ids, other = set(), set(), set()
    for node in traversal.walk(tree):
        cls = type(node)
        kinds.add(cls)
        if cls is gast.Name:
            ids.add(node.id)
        elif cls in _DEFS:
            other.add(node.name)
        elif cls in _DECLARATIONS:
            other.update(node.names)
        elif cls is gast.alias:
            other.add((node.asname or node.name).split('.')[0])
    return Census(frozenset(kinds), frozenset(ids), frozenset(ids | other))
