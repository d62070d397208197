"""Deep copies of AST trees, as ``copy.deepcopy`` makes them, at a fraction of its cost.

Converters splice user statements into templates and copy them (a nested ``if``'s body is
copied once per enclosing ``if``); ``copy.deepcopy`` goes through ``__reduce_ex__`` and its
generic dispatch per node and was a third of converting transformers' modules. ``copy``
gives the same tree: a new node per node (same class, every ``__dict__`` entry copied, so
annotations too), lists and dicts copied, a node reached twice copied once (the memo),
immutable values (str, numbers, enums, tuples and frozensets of them: e.g. an ORIGIN
``Location``) kept as they are, anything else handed to ``copy.deepcopy`` with the memo.
"""
import ast
import copy as _copy_module
import enum

_ATOMIC = frozenset({str, int, float, bool, type(None), bytes, complex, type(Ellipsis)})


def copy(value, memo=None):
    """A deep copy of ``value`` (an AST node, a list of them, ...)."""
    return _copy(value, {} if memo is None else memo)


def _copy(value, memo):
    cls = type(value)
    if cls in _ATOMIC:
        return value
    if isinstance(value, ast.AST):
        new = memo.get(id(value))
        if new is None:
            new = memo[id(value)] = cls.__new__(cls)
            state = new.__dict__
            for key, item in value.__dict__.items():
                state[key] = item if type(item) in _ATOMIC else _copy(item, memo)
        return new
    if cls is list:
        new = memo.get(id(value))
        if new is None:
            new = memo[id(value)] = []
            new.extend(item if type(item) in _ATOMIC else _copy(item, memo) for item in value)
        return new
    if cls is dict:
        new = memo.get(id(value))
        if new is None:
            new = memo[id(value)] = {}
            for key, item in value.items():
                new[_copy(key, memo)] = _copy(item, memo)
        return new
    if isinstance(value, enum.Enum):
        return value
    if isinstance(value, (tuple, frozenset)) and all(type(v) in _ATOMIC for v in value):
        return value
    return _copy_module.deepcopy(value, memo)
