"""``TensorList``: a Python list grown in tensor-dependent control flow.

A list appended to inside a tensor loop (or in one branch of a tensor ``if``) has a length
known only when the graph runs. It is held as one stacked tensor whose leading dimension
is dynamic; it is a pytree node whose only leaf is that tensor, so it flows through
``cond`` and ``while`` like any value. A converted function that returns one returns a
Python list again (the stack unbound).
"""
from __future__ import annotations

import torch
import torch.utils._pytree as pytree

from .errors import TracingError
from .source_info import format_location, user_location


class TensorList:
    """A list of same-typed tensors stacked along a new leading dimension."""

    def __init__(self, stack: torch.Tensor):
        self.stack = stack

    def append(self, value) -> None:
        value = value if isinstance(value, torch.Tensor) else \
            torch.tensor(value, dtype=self.stack.dtype)
        if value.dtype != self.stack.dtype:
            raise TracingError(
                f"{format_location(user_location())}: appending a {value.dtype} tensor to a "
                f"list of {self.stack.dtype} tensors built in a tensor loop")
        self.stack = torch.cat([self.stack, value.unsqueeze(0)], 0)

    def extend(self, values) -> None:
        for value in values:
            self.append(value)

    def pop(self, index=-1):
        item = self.stack[index]
        if index != -1:
            raise TracingError(f"{format_location(user_location())}: only pop() of the last "
                               f"element is supported on a list built in a tensor loop")
        self.stack = self.stack[:-1]
        return item

    def length(self):
        meta = getattr(self.stack, "_node", None)
        dims = meta.meta.shape if meta is not None else tuple(self.stack.shape)
        return dims[0] if dims and dims[0] is not None else self.stack.shape[0]

    def item(self, i):
        return self.stack[i]

    def __getitem__(self, index):
        if isinstance(index, slice):
            return TensorList(self.stack[index])
        return self.stack[index]

    def __setitem__(self, index, value) -> None:
        self.stack = self.stack.clone()
        self.stack[index] = value

    def __len__(self):
        raise _dynamic("len() of a list built in a tensor loop")

    def __iter__(self):
        raise _dynamic("iteration over a list built in a tensor loop")

    def __repr__(self) -> str:
        return f"TensorList({self.stack!r})"


pytree.register_pytree_node(
    TensorList, lambda t: ([t.stack], None), lambda children, _: TensorList(children[0]),
    flatten_with_keys_fn=lambda t: ([(pytree.GetAttrKey("stack"), t.stack)], None))


def _dynamic(what: str) -> TracingError:
    return TracingError(f"{format_location(user_location())}: {what}: its length is known only "
                        f"when the graph runs; this use needs conversion (@to_graph)")


_CONVERTED: list = []        # Python lists replaced by TensorLists during the current trace


def note_converted(items: list) -> None:
    """Record that ``items`` (a Python list object) became a TensorList in a trace: the
    object itself is not mutated. If the caller can see it, the trace lost a side effect."""
    _CONVERTED.append(items)


def take_converted() -> list:
    """The lists recorded since the last call (and forget them)."""
    out = list(_CONVERTED)
    _CONVERTED.clear()
    return out


def element_type(value):
    """(shape, dtype) of one element of a list: of a tensor, a number, or a TensorList's
    elements. Reads only metadata, so it works on values of finished subgraphs too."""
    if isinstance(value, TensorList):
        shape, dtype = element_type(value.stack)
        return shape[1:], dtype
    if isinstance(value, torch.Tensor):
        node = getattr(value, "_node", None)
        if node is not None:
            dims = node.meta.shape if node.meta.shape is not None else ()
            hint = node.attrs.get("_example")
            return tuple(h if d is None else d for d, h in
                         zip(dims, hint.shape if hint is not None else dims)), node.meta.dtype
        return tuple(value.shape), value.dtype
    if isinstance(value, bool):
        return (), torch.bool
    if isinstance(value, int):
        return (), torch.int64
    if isinstance(value, float):
        return (), torch.get_default_dtype()
    raise TracingError(f"{format_location(user_location())}: a list whose length is known only "
                       f"at run time must hold tensors or numbers, not {type(value).__name__}")


def stack_list(items: list, like) -> TensorList:
    """A TensorList of ``items`` (tensors or numbers); ``like``: an element (or a
    TensorList) giving the element type, used when ``items`` is empty."""
    shape, dtype = element_type(like)
    if items:
        tensors = [i if isinstance(i, torch.Tensor) else torch.tensor(i, dtype=dtype)
                   for i in items]
        return TensorList(torch.stack(tensors))
    return TensorList(torch.empty((0,) + tuple(int(d) for d in shape), dtype=dtype))
