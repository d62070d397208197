"""The names eager Python gives the functions nested in a converted one.

Converters wrap parts of the user's function in functions of their own (``loop_body``,
``if_body``, ...). Compiled as they are, a ``def step`` inside a converted ``for`` would have
``__qualname__`` ``f.<locals>.loop_body.<locals>.step`` where eager has ``f.<locals>.step``,
and a ``def`` of a method would lose its class (``m.<locals>.g`` for ``C.m.<locals>.g``).
``restore`` rewrites the nested code objects' qualified names as eager has them: a generated
function is no scope of eager's (its name is dropped from the path), except those that
stand for one of eager's own (a list comprehension's function is ``<listcomp>``, as in
Python 3.11, in its name too: ``logging``'s ``funcName``, tracebacks).

``hidden`` (the generated functions that are no eager frame) is what the runtime asks when it
walks the frames of generated code as eager's (``runtime.source_info.register_source_map``).
"""
import gast

from transpiler.pyct import anno
from transpiler.pyct import traversal

_LOCALS = '<locals>'
_COMPREHENSIONS = frozenset({'<listcomp>', '<setcomp>', '<dictcomp>', '<genexpr>'})


def scopes(tree):
    """(hidden, renamed) of a converted tree: the names of the functions converters made up
    that are no frame of eager's, and {name: eager's name} of those that stand for one."""
    made = anno.getanno(tree, anno.Key.GENERATED_NAMES, frozenset())
    hidden, renamed = set(), {}
    for node in traversal.walk(tree):
        if node is tree or not isinstance(node, gast.FunctionDef) or node.name not in made:
            continue
        eager = anno.getanno(node, anno.Key.EAGER_SCOPE)
        if eager is None:
            hidden.add(node.name)
        else:
            renamed[node.name] = eager
    return frozenset(hidden), renamed


def restore(code, qualname, hidden, renamed):
    """``code`` (the converted function's) with ``co_qualname`` ``qualname`` (the user
    function's) and its nested code objects named as eager names them."""
    return _restore(code, code.co_qualname, qualname, hidden, renamed)


def _restore(code, compiled_root, root, hidden, renamed):
    consts = tuple(_restore(c, compiled_root, root, hidden, renamed)
                   if isinstance(c, type(code)) else c for c in code.co_consts)
    qualname, name = _eager_qualname(code.co_qualname, compiled_root, root, hidden,
                                     renamed), renamed.get(code.co_name, code.co_name)
    if all(a is b for a, b in zip(consts, code.co_consts)) and \
            qualname == code.co_qualname and name == code.co_name:
        return code                 # (code objects compare equal whatever their qualnames)
    return code.replace(co_consts=consts, co_qualname=qualname, co_name=name)


def _eager_qualname(qualname, compiled_root, root, hidden, renamed):
    if qualname == compiled_root:
        return root
    if not qualname.startswith(compiled_root + '.'):
        return qualname             # (declared global in the function: its own name)
    parts = qualname[len(compiled_root) + 1:].split('.')
    out = [root]
    for i, part in enumerate(parts):
        if part in hidden and i + 1 < len(parts) and parts[i + 1] == _LOCALS:
            continue
        if part == _LOCALS and (out[-1] == _LOCALS or out[-1] in _COMPREHENSIONS):
            continue                # (of a dropped function; a comprehension has none)
        out.append(renamed.get(part, part))
    return '.'.join(out)
