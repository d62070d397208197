"""Which traced values may share storage, and the writes a graph cannot reproduce.

A graph runs on real tensors, so a view taken in traced code (``x[0]``, ``x[:, 1]``,
``view``, ``transpose``, ``unbind``...) is a real view when the graph runs, and in-place
writes through a view or its base show through exactly as in eager. What breaks that is
a copy the trace makes where eager keeps the tensor itself: a list grown in a tensor loop
(``TensorList``) is one stacked tensor, so appending copies the element and reading one
gives a row of the stack; a tensor loop over ``zip``/``enumerate`` of a Python list of
tensors reads rows of a stacked copy.

So every symbolic tensor carries a storage token (``Storage``): fresh for an op's result,
passed on by view ops (conservatively: ``reshape``, ``contiguous``, ``to`` count as views),
kept by in-place ops, given to a subgraph's placeholders by the value flowing in, and to
a cond/while output by the values its paths give it (``follow``). A tensor copied into or
read out of such a list marks its token; an in-place write to a marked token is a
``GraphError`` (fall back): eager's list element would see the write. A loop body that
writes a token living across iterations and also copies it into a list is refused too
(the next iteration's write would reach the element copied in this one).
"""
from __future__ import annotations

from typing import Any, Optional

from .errors import GraphError
from .ops import op_name
from .source_info import format_location, user_location

# ops whose results may share storage with their first argument (a few copy in some
# layouts: counting them as views only makes the checks stricter)
VIEW_OPS = frozenset({
    "getitem", "view", "view_as", "reshape", "reshape_as", "flatten", "unflatten",
    "transpose", "transpose_", "t", "T", "mT", "H", "mH", "adjoint", "permute", "unbind",
    "split", "split_with_sizes", "chunk", "tensor_split", "hsplit", "vsplit", "dsplit",
    "select", "narrow", "expand", "expand_as", "diagonal", "squeeze", "unsqueeze",
    "movedim", "moveaxis", "swapaxes", "swapdims", "as_strided", "detach", "real", "imag",
    "unfold", "contiguous", "to", "type_as", "float", "double", "half", "bfloat16", "int",
    "long", "short", "bool", "byte", "char", "type", "view_as_real", "view_as_complex",
    "alias", "data", "atleast_1d", "atleast_2d", "atleast_3d", "ravel", "align_as",
    "broadcast_to", "positive", "resolve_conj", "resolve_neg", "conj", "requires_grad_",
})


class Storage:
    """The identity of a run-time storage. ``copied``: where a tensor of it was copied
    into (or read out of) a list built in a tensor loop; ``writes``: for each in-place
    write, the loop bodies being traced when it was recorded; ``origin``: the graph being
    built when the storage was made; ``aliases``: other storages it may be (a cond/while
    output that is a view of one base on one path and of another on the other)."""

    __slots__ = ("copied", "writes", "origin", "aliases", "written")

    def __init__(self, origin=None, aliases=()):
        self.copied: Optional[str] = None
        self.written = None     # the location of the first in-place write, if any
        self.writes: list = []
        self.origin = origin
        self.aliases = tuple(aliases)

    def all(self) -> tuple:
        return (self,) + self.aliases


def storage(t) -> Optional[Storage]:
    """The storage token of a symbolic tensor (made on first use); None for other values."""
    if not hasattr(t, "_node"):
        return None
    token = t.__dict__.get("_tograph_storage")
    if token is None:
        token = t._tograph_storage = Storage(t._node.graph)
    return token


def share(t, source) -> None:
    """``t`` may share ``source``'s storage (a view of it, or the same value entering a
    subgraph)."""
    token = storage(source)
    if token is not None and hasattr(t, "_node"):
        t._tograph_storage = token
        for name in _FOLLOW:
            value = source.__dict__.get(name)
            if value is not None:
                setattr(t, name, value)


# facts about a value that hold for the same value inside a subgraph (a TensorList's
# element grads: see ``tensor_list``), merged over paths for a cond/while output
_FOLLOW = ("_tograph_element_grads", "_tograph_element_kinds")


def follow(outer: list, *paths: list) -> None:
    """After a cond/while node: each output shares the storage of the values the paths
    give it (one storage, or one that may be any of theirs), and its ``_FOLLOW`` facts are
    theirs (the union of the sets) when every path's value has them."""
    for i, t in enumerate(outer):
        if not hasattr(t, "_node"):
            continue
        tokens = [storage(p[i]) for p in paths if i < len(p)]
        tokens = list({id(k): k for k in tokens if k is not None}.values())
        if len(tokens) == 1:
            t._tograph_storage = tokens[0]
        elif tokens:
            t._tograph_storage = Storage(t._node.graph, {a for k in tokens for a in k.all()})
        for name in _FOLLOW:
            found = [getattr(p[i], "__dict__", {}).get(name) if i < len(p) else None
                     for p in paths]
            if found and all(f is not None for f in found):
                setattr(t, name, frozenset().union(*found))


def note_result(func, args, result) -> None:
    """After recording ``func``: results of view ops share their input's storage."""
    if not args or op_name(func) not in VIEW_OPS or storage(args[0]) is None:
        return
    if isinstance(result, (list, tuple)):
        for r in result:
            share(r, args[0])
    else:
        share(result, args[0])


def _open_bodies() -> list:
    from .symbolic import _BUILD_STACK
    return [g for g in _BUILD_STACK if g.name == "body"]


def check_write(target, location) -> None:
    """Before an in-place write to ``target``: refuse one that eager would show through a
    list element the graph holds as a copy; remember it for later copies."""
    token = storage(target)
    if token is None:
        return
    copied = next((t.copied for t in token.all() if t.copied is not None), None)
    if copied is not None:
        raise GraphError(
            f"{format_location(location)}: writes in place into a tensor that was put into "
            f"or read out of a list that a tensor loop builds or iterates (at "
            f"{copied}): in eager the list element is that tensor (or a view of it) and "
            f"sees the write, while the graph's list holds a copy")
    for t in token.all():
        t.written = t.written or location
    bodies = _open_bodies()
    if bodies:
        for t in token.all():
            t.writes.append(tuple(bodies))


def note_copy(value: Any) -> None:
    """``value`` is copied into (or read out of) a list built in a tensor loop."""
    token = storage(value)
    if token is None:
        return
    where = format_location(user_location())
    open_now = {id(g) for g in _open_bodies()}
    for t in token.all():
        origin_chain = set() if t.origin is None else {id(g) for g in t.origin.ancestors()}
        for bodies in t.writes:
            for body in bodies:
                if id(body) in open_now and id(body) not in origin_chain:
                    raise GraphError(
                        f"{where}: a tensor that this loop body writes in place is put into "
                        f"a list that a tensor loop builds or iterates: in eager the element "
                        f"is that tensor (or a view of it) and sees the next iteration's "
                        f"write, while the graph's list holds a copy")
        if t.copied is None:
            t.copied = where


def copied(value):
    """``value`` (a copy the trace made of tensors eager keeps apart), marked: reading it
    is fine, writing it in place is refused."""
    note_copy(value)
    return value
