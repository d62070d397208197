"""Values that stand for "not assigned yet" in converted code.

``Undefined('y')`` is what a variable holds before its first assignment on some path;
reading it raises the error Python would (``UnboundLocalError`` naming the variable).
``UndefinedReturn()`` is the return value before any ``return`` ran: no path can observe
it, so a tensor branch that returns pairs with a placeholder on the other side.
``Unassigned('y')`` is a variable not assigned yet that the user code reads only where
Python has bound it (``transpiler.analysis.definite_assignment``: ``y = row; break`` in a
loop and ``y = ...`` in its ``else:``): no path observes it either, so it pairs with a
placeholder too; read as a Python value it still raises ``UnboundLocalError``.
"""
from __future__ import annotations

from ..subgraphs import Unobservable


class _Unbound:
    """A variable not assigned yet: every use raises Python's ``UnboundLocalError``."""

    __slots__ = ()

    def __init__(self, name: str):
        object.__setattr__(self, "name", name)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    def _fail(self, *args, **kwargs):
        raise UnboundLocalError(
            f"local variable {self.name!r} referenced before assignment")

    def __getattr__(self, attr):
        if attr.startswith("__"):       # (a protocol asked of any value: not a read)
            raise AttributeError(attr)
        self._fail()

    __call__ = _fail
    __bool__ = _fail
    __iter__ = _fail
    __len__ = _fail
    __getitem__ = _fail
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _fail
    __truediv__ = __rtruediv__ = __neg__ = __lt__ = __gt__ = __le__ = __ge__ = _fail


class Undefined(_Unbound):
    """A variable that has not been assigned on this path."""

    __slots__ = ("name",)
    __tograph_undefined__ = True


class Unassigned(_Unbound, Unobservable):
    """A variable not assigned on this path that no later code reads on it."""

    __slots__ = ("name",)


class UndefinedReturn(Unobservable):
    """The return value before any ``return`` statement has run."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "UndefinedReturn()"


class Unread(Unobservable):
    """What a branch returns for a variable it takes but no later code reads (a name read
    and then rebound inside an ``if`` that is dead after it): the paths need not agree."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "UNREAD"


UNREAD = Unread()


def is_undefined(value) -> bool:
    return isinstance(value, (_Unbound, UndefinedReturn))
