"""Constructs we refuse, with the user's file:line: generators, async code,
``except*`` and the name ``tg`` (reserved for the operator module the generated code calls)."""
import gast

from transpiler.errors import ConversionError
from transpiler.pyct import traversal

_REFUSED = {
    gast.Yield: 'generator functions (yield) are not supported',
    gast.YieldFrom: 'generator functions (yield from) are not supported',
    gast.Await: 'async code is not supported',
    gast.AsyncFunctionDef: 'async functions are not supported',
    gast.AsyncFor: 'async for is not supported',
    gast.AsyncWith: 'async with is not supported',
    getattr(gast, 'TryStar', None): 'try/except* (exception groups) is not supported',
}


REFUSED_KINDS = tuple(kind for kind in _REFUSED if kind)


def transform(node, ctx):
    refused = REFUSED_KINDS
    for n in traversal.walk(node):
        if isinstance(n, refused):
            reason = next(r for kind, r in _REFUSED.items() if kind and isinstance(n, kind))
            raise ConversionError.at(n, reason)
        if isinstance(n, gast.Name) and n.id == 'tg':
            raise ConversionError.at(n, "the name 'tg' is reserved for the converted code's operators")
    return node
