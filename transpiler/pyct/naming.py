"""One namer per converted function: fresh readable names that never collide with any
name the function uses (locals, globals, attributes' bases, free variables: ``pyct.census``
collects them) or builtins."""
import builtins

RESERVED = frozenset({'tg'})   # the operator module the generated code calls


class Namer:
    def __init__(self, used):
        self._used = set(used) | set(dir(builtins)) | RESERVED
        self.created = set()        # the names ``new`` gave (pyct.qualnames)

    def new(self, base):
        """``base`` if free, else ``base_1``, ``base_2``, ...; the name is then taken."""
        name, i = base, 0
        while name in self._used:
            i += 1
            name = f'{base}_{i}'
        self._used.add(name)
        self.created.add(name)
        return name
