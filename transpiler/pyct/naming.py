"""One namer per converted function: fresh readable names that never collide with any
name the function uses (locals, globals, attributes' bases, free variables) or builtins."""
import builtins

import gast

from transpiler.pyct import traversal

RESERVED = frozenset({'tg'})   # the operator module the generated code calls


class Namer:
    def __init__(self, used):
        self._used = set(used) | set(dir(builtins)) | RESERVED

    @classmethod
    def for_tree(cls, tree, extra=()):
        used = set(extra)
        for node in traversal.walk(tree):
            if isinstance(node, gast.Name):
                used.add(node.id)
            elif isinstance(node, (gast.FunctionDef, gast.ClassDef, gast.AsyncFunctionDef)):
                used.add(node.name)
            elif isinstance(node, (gast.Global, gast.Nonlocal)):
                used.update(node.names)
            elif isinstance(node, gast.alias):
                used.add((node.asname or node.name).split('.')[0])
        return cls(used)

    def new(self, base):
        """``base`` if free, else ``base_1``, ``base_2``, ...; the name is then taken."""
        name, i = base, 0
        while name in self._used:
            i += 1
            name = f'{base}_{i}'
        self._used.add(name)
        return name
