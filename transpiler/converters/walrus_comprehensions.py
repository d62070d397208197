"""A list comprehension whose filter binds a name (``:=``), written out in place.

    ys = [y for r in x if (y := f(r)) is not None]
->
    items = []
    for r_1 in x:                # the comprehension's own names: fresh ones
        y = f(r_1)               # the filter's binding, evaluated first as in Python
        if y is not None:
            items.append(y)
    ys = items

Python binds ``y`` in the enclosing function (PEP 572), so the loop is the function's own,
not a local function's (``comprehensions``): the loop and ``if`` are then converted like any
others, ``y`` carried as their state (a tensor filter makes a run-time-length list). Only
a comprehension that a ``=`` or ``return`` evaluates first is written out (the value, or
the first item of its tuple: ``return [..], y``), and only when each ``:=`` is the first
thing its filter evaluates (``_leftmost``: moving any other would change when or whether
it runs) and the comprehension holds no scope of its own (a lambda, another
comprehension); anything else stays as it was.
"""
import gast

from transpiler.converters.walrus_tests import _assign, _leftmost, _replace
from transpiler.pyct import templates
from transpiler.pyct import traversal

_SCOPES = (gast.Lambda, gast.ListComp, gast.SetComp, gast.DictComp, gast.GeneratorExp)


def value_comprehension(stmt):
    """The ListComp with a ``:=`` that ``stmt``'s ``=``/``return`` value evaluates first
    (the value, or its tuple's or list's first item), or None."""
    if not isinstance(stmt, (gast.Assign, gast.Return)):
        return None
    comp = stmt.value
    while isinstance(comp, (gast.Tuple, gast.List)) and comp.elts:
        comp = comp.elts[0]
    if not isinstance(comp, gast.ListComp):
        return None
    if not any(isinstance(n, gast.NamedExpr) for n in traversal.walk(comp)):
        return None
    return comp if _writable(comp) else None


def _writable(comp):
    inner = [n for n in traversal.walk(comp) if n is not comp]
    if any(isinstance(n, _SCOPES) for n in inner) or \
            any(gen.is_async for gen in comp.generators):
        return False
    outside_filters = [comp.elt] + [p for gen in comp.generators for p in (gen.target, gen.iter)]
    if any(isinstance(n, gast.NamedExpr) for p in outside_filters for n in traversal.walk(p)):
        return False
    for cond in (c for gen in comp.generators for c in gen.ifs):
        named = [n for n in traversal.walk(cond) if isinstance(n, gast.NamedExpr)]
        if named and (len(named) > 1 or _leftmost(cond) is not named[0]
                      or not isinstance(named[0].target, gast.Name)):
            return False
    return True


class _Rename(traversal.Transformer):
    def __init__(self, names):
        self.names = names

    def visit_Name(self, node):
        if node.id in self.names:
            node.id = self.names[node.id]
        return node


def write_out(comp, namer):
    """(statements that build the list, the name holding it); ``comp`` is consumed."""
    own = {n.id for gen in comp.generators for n in traversal.walk(gen.target)
           if isinstance(n, gast.Name)}
    rename = _Rename({name: namer.new(name) for name in sorted(own)})
    for i, gen in enumerate(comp.generators):
        gen.target = rename.visit(gen.target)     # (the first iterable: the enclosing scope's)
        gen.iter = gen.iter if i == 0 else rename.visit(gen.iter)
        gen.ifs = [rename.visit(c) for c in gen.ifs]
    comp.elt = rename.visit(comp.elt)
    items = namer.new('items')
    body = templates.replace('items.append(elt)', comp, items=items, elt=comp.elt)
    for gen in reversed(comp.generators):
        for cond in reversed(gen.ifs):
            named = _leftmost(cond)
            if named is not None:
                body = [_assign(named)] + templates.replace(
                    'if cond:\n    body', comp, cond=_replace(cond, named), body=body)
            else:
                body = templates.replace('if cond:\n    body', comp, cond=cond, body=body)
        body = templates.replace('for target in iter_:\n    body', comp,
                                 target=gen.target, iter_=gen.iter, body=body)
    return templates.replace('items = []', comp, items=items) + body, items
