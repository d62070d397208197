"""Class-private names (``self.__scale`` in a method of ``Net``) are mangled as Python
compiles them (``self._Net__scale``).

Python mangles ``__name`` identifiers written inside a class body when it compiles the
class; the generated code is compiled outside any class, so it would read ``self.__scale``
(an AttributeError, or silently another path under ``try/except AttributeError``). The
names to mangle are the ones the original code object mangled (``ctx.private_names``:
``__scale`` -> ``_Net__scale``, found by ``conversion``): attribute names, variables,
parameters and nested ``def``/``class`` names; keyword names and strings stay as written,
as Python leaves them.
"""
import gast

from transpiler.pyct import traversal


def transform(node, ctx):
    names = ctx.private_names
    if not names:
        return node
    for n in traversal.walk(node):
        if isinstance(n, gast.Attribute):
            n.attr = names.get(n.attr, n.attr)
        elif isinstance(n, gast.Name):
            n.id = names.get(n.id, n.id)
        elif isinstance(n, (gast.FunctionDef, gast.ClassDef)) and n is not node:
            n.name = names.get(n.name, n.name)
    return node
