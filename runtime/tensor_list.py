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

from . import grad_flags, views
from .errors import TracingError
from .grad_flags import grad_of
from .introspection import kind_of, mark, merged_kind
from .source_info import format_location, user_location
from .threads import PerThreadList


class TensorList:
    """A list of same-typed tensors stacked along a new leading dimension."""

    def __init__(self, stack: torch.Tensor):
        self.stack = stack

    def append(self, value) -> None:
        kind = kind_of(value)
        value = self._element(value, "appending")
        self._grow(torch.cat([self.stack, value.unsqueeze(0)], 0), value, kinds={kind})

    def _grow(self, stack, added=None, flags=None, kinds=frozenset()) -> None:
        """The new stack, remembering the ``requires_grad`` of the elements it holds, and
        the Python number kinds they stand for (``kinds``: of those added; None: unknown)."""
        before = element_grads(self.stack)
        known = element_kinds(self.stack)
        if added is not None:
            flags = frozenset([grad_of(added)])
        self.stack = stack
        if before is not None and flags is not None:
            stack._tograph_element_grads = before | flags
        if known is not None and kinds is not None:
            stack._tograph_element_kinds = known | frozenset(kinds)

    def _read(self, value, element: bool = True):
        """An element (or the stack) handed to user code: a row of the stack, where eager
        has the appended tensor itself; writing it in place is refused (``views``)."""
        if element:
            self._check_grads()
            flags = element_grads(self.stack)
            node = getattr(value, "_node", None)
            if flags is not None and len(flags) == 1 and node is not None:
                node.attrs[grad_flags.KEY] = next(iter(flags))   # every element's flag
        views.note_copy(value)
        return value

    def _check_grads(self) -> None:
        """Eager's elements keep their own ``requires_grad``; the stack's rows share one:
        reading an element of a list that mixes them (or may) falls back."""
        flags = element_grads(self.stack)
        if flags is not None and (None in flags or len(flags) > 1):
            raise TracingError(
                f"{format_location(user_location())}: an element of a list built in a tensor "
                f"loop is read, and the list mixes tensors that require grad with tensors "
                f"that do not (or may, depending on the path): its rows share one "
                f"requires_grad, eager's elements keep their own")

    def stacked(self) -> torch.Tensor:
        """The stack, for ``torch.stack(L)``/``torch.cat(L)`` (one tensor in eager too)."""
        return self._read(self.stack, element=False)

    def unstacked(self) -> torch.Tensor:
        """The stack of a list the function returns (unbound into its elements); its node
        notes the Python number kind its rows stand for (``ELEMENTS``), when known."""
        kinds = element_kinds(self.stack)
        value = self._read(self.stack)
        node = getattr(value, "_node", None)
        if node is not None and kinds:
            node.attrs[ELEMENTS] = merged_kind(kinds)
        return value

    def _element(self, value, doing: str) -> torch.Tensor:
        """``value`` as one row of the stack: a tensor of the element dtype and shape (eager
        would keep a differently typed element as it is; the stack cannot)."""
        value = value if isinstance(value, torch.Tensor) else \
            torch.tensor(value, dtype=self.stack.dtype)
        if value.dtype != self.stack.dtype:
            raise TracingError(
                f"{format_location(user_location())}: {doing} a {value.dtype} tensor to a "
                f"list of {self.stack.dtype} tensors built in a tensor loop")
        rows, item = _dims(self.stack)[1:], _dims(value)
        if rows is not None and item is not None and (len(rows) != len(item) or any(
                a is not None and b is not None and a != b for a, b in zip(rows, item))):
            raise TracingError(
                f"{format_location(user_location())}: {doing} a tensor of shape "
                f"{_text(item)} to a list of {_text(rows)} tensors built in a tensor loop "
                f"(the list is one stacked tensor: its elements share a shape)")
        views.note_copy(value)
        return value

    def extend(self, values) -> None:
        if isinstance(values, TensorList):
            self._grow(torch.cat([self.stack, values.stacked()], 0),
                       flags=element_grads(values.stack), kinds=element_kinds(values.stack))
            return
        for value in values:
            self.append(value)

    def __add__(self, other):
        """``L + [v]`` (``L + M``): a new list, this one unchanged."""
        if not isinstance(other, (list, tuple, TensorList)):
            return NotImplemented
        out = TensorList(self.stack)
        out.extend(other)       # (out's stacks are new tensors: this list is unchanged)
        return out

    def __iadd__(self, other):
        self.extend(other)
        return self

    def pop(self, index=-1):
        """Remove and return the element at ``index`` (an int: where the rest closes up
        must be known while tracing)."""
        index = self._position(index, "pop()")
        self.nonempty(IndexError, "pop from empty list")
        item = self._row(index)
        n = self.length()
        at = index if index >= 0 else n + index
        self._grow(torch.cat([self.stack[self._bounds(slice(None, at))],
                              self.stack[self._bounds(slice(at + 1, None))]], 0),
                   flags=frozenset())
        return item

    def insert(self, index, value) -> None:
        """``L.insert(i, v)``: ``L[i:i] = [v]`` (a negative or too large ``i`` clamps as a
        slice bound does)."""
        at = self._position(index, "insert()")
        kind = kind_of(value)
        value = self._element(value, "inserting")
        self._grow(torch.cat([self.stack[self._bounds(slice(None, at))], value.unsqueeze(0),
                              self.stack[self._bounds(slice(at, None))]], 0), value,
                   kinds={kind})

    def reverse(self) -> None:
        self._grow(torch.flip(self.stack, [0]), flags=frozenset())

    def sort(self, *, key=None, reverse=False) -> None:
        """``L.sort()`` of integers or bools (Python numbers or 0-d tensors): a stable sort
        of the stack; a key, float elements (NaN makes Python's order depend on its
        algorithm) and tensor rows (compared by ``bool()``, an error) are refused."""
        if key is not None or not isinstance(reverse, bool) or self.stack.dim() != 1 or \
                self.stack.dtype.is_floating_point or self.stack.dtype.is_complex:
            raise TracingError(f"{format_location(user_location())}: sort() of a list built "
                               f"in a tensor loop sorts integers or bools only, with no key "
                               f"(here {self.stack.dtype} elements of shape "
                               f"{_text(_dims(self.stack)[1:])}{', a key' if key else ''})")
        # (equal integers are alike: which of them comes first is moot)
        self._grow(self.stack.sort(descending=reverse)[0], flags=frozenset())

    def copy(self) -> "TensorList":
        return TensorList(self.stack)   # (every change makes a new stack: none is shared)

    def clear(self) -> None:
        self.stack = self.stack[:0]
        if hasattr(self.stack, "_node"):
            self.stack._tograph_element_grads = frozenset()
            self.stack._tograph_element_kinds = frozenset()

    def __mul__(self, times):
        """``L * n`` (``n * L``): a new list of ``n`` copies, none for ``n <= 0``."""
        if isinstance(times, bool) or not isinstance(times, int):
            return NotImplemented
        out = TensorList(self.stack)
        out._grow(self.stack.repeat((max(times, 0),) + (1,) * (self.stack.dim() - 1)),
                  flags=frozenset())
        return out

    __rmul__ = __mul__

    def __imul__(self, times):
        out = self.__mul__(times)
        if out is NotImplemented:
            return out
        self._grow(out.stack, flags=frozenset())
        return self

    def __delitem__(self, index) -> None:
        """``del L[i]`` (a Python int), ``del L[a:b]`` (no step): ``L[:a] + L[b:]``, where
        ``b`` is at least ``a`` (``del L[3:1]`` deletes nothing)."""
        if not isinstance(index, slice):
            self.pop(index)
            return
        if index.step not in (None, 1):
            raise TracingError(f"{format_location(user_location())}: del of a slice with a "
                               f"step from a list built in a tensor loop")
        n = self.length()
        start, stop = index.start, index.stop
        if isinstance(n, int):
            start, stop, _ = index.indices(n)
        elif start is not None and stop is not None and not (
                isinstance(start, int) and isinstance(stop, int) and (start < 0) == (stop < 0)):
            raise TracingError(f"{format_location(user_location())}: del L[{start}:{stop}] of "
                               f"a list built in a tensor loop (where the slice ends depends "
                               f"on the length, known only when the graph runs)")
        kept = [self.stack[self._bounds(slice(None, 0 if start is None else start))]]
        if stop is not None:
            rest = stop if start is None else max(start, stop)
            kept.append(self.stack[self._bounds(slice(rest, None))])
        self._grow(torch.cat(kept, 0), flags=frozenset())

    def remove(self, value) -> None:
        raise _by_value("remove()")

    def index(self, value, *args):
        raise _by_value("index()")

    def count(self, value):
        raise _by_value("count()")

    def _position(self, index, what: str) -> int:
        if isinstance(index, bool) or not isinstance(index, int):
            raise TracingError(f"{format_location(user_location())}: {what} of a list built "
                               f"in a tensor loop needs a Python int index")
        return index

    def nonempty(self, error: type, message: str) -> None:
        """Raise ``error(message)``, as eager does, where the list is empty: now if its
        length is known, or when the graph runs (a staged check) if not."""
        n = self.length()
        if isinstance(n, int):
            if n == 0:
                raise error(message)
            return
        from .operators.staged_raises import raise_if
        raise_if(n == 0, lambda: (error, (message,)))

    def length(self):
        meta = getattr(self.stack, "_node", None)
        dims = meta.meta.shape if meta is not None else tuple(self.stack.shape)
        return dims[0] if dims and dims[0] is not None else self.stack.shape[0]

    def item(self, i):
        return self._row(i)

    def __getitem__(self, index):
        if isinstance(index, slice):
            part = TensorList(self.stack)
            step = index.step
            if isinstance(step, int) and step < 0 and index.start is None and \
                    index.stop is None:     # L[::-1], L[::-k]: from the last row back
                flipped = self.stack.flip(0)
                part._grow(flipped if step == -1 else flipped[::-step], flags=frozenset())
                return part
            part._grow(self.stack[self._bounds(index)], flags=frozenset())
            return part
        return self._row(index)

    def _row(self, index):
        """The element at ``index``: the number it stands for where the list holds Python
        numbers of one kind (``L[i]`` of ``.item()`` ints is an int, as eagerly); a list
        that mixes numbers with tensors or numbers of other kinds, whose element's type
        would depend on the index, needs the index while tracing."""
        kinds = element_kinds(self.stack)
        if kinds is not None and len(kinds) > 1 and kinds != {None}:
            raise TracingError(
                f"{format_location(user_location())}: an element of a list built in a tensor "
                f"loop is read, and the list mixes "
                f"{', '.join(sorted(k or 'tensor' for k in kinds))} elements: the element's "
                f"type would depend on which one is read")
        n = self.length()
        if getattr(index, "_node", None) is not None or not isinstance(n, int):
            from .operators.staged_raises import raise_if     # (known when the graph runs)
            raise_if((index >= n) | (index < -n),
                     lambda: (IndexError, ("list index out of range",)))
        value = self._read(self.stack[index])
        if kinds is not None and len(kinds) == 1 and None not in kinds:
            mark(value, next(iter(kinds)))
        return value

    def _bounds(self, index: slice) -> slice:
        """``index`` with bounds counted from the end made explicit when the length is
        known only at run time (``L[:-1]``, ``L[i:]``): meta tensors cannot tell how many
        rows such a slice keeps."""
        n = self.length()
        if isinstance(n, int):
            return index

        def bound(b, default):
            if b is None:
                return default
            return n + b if isinstance(b, int) and b < 0 else b
        step = index.step
        if step is not None and not (isinstance(step, int) and step > 0):
            raise TracingError(f"{format_location(user_location())}: a slice with step "
                               f"{step!r} of a list built in a tensor loop")
        return slice(bound(index.start, 0), bound(index.stop, n), step)

    def __setitem__(self, index, value) -> None:
        """``L[i] = v``: a new stack with row ``i`` replaced (``index_put``, not a write into
        the old stack: earlier reads of the list keep their values, as eager's do)."""
        if isinstance(index, slice):
            raise TracingError(f"{format_location(user_location())}: slice assignment to a "
                               f"list built in a tensor loop (it may change the length)")
        if not isinstance(index, torch.Tensor):
            index = torch.tensor(index, dtype=torch.int64)
        kind = kind_of(value)
        value = self._element(value, "storing")
        self._grow(self.stack.index_put((index.reshape(1),), value.unsqueeze(0)), value,
                   kinds={kind})

    def __len__(self):
        raise _dynamic("len() of a list built in a tensor loop")

    def __iter__(self):
        raise _dynamic("iteration over a list built in a tensor loop")

    def __repr__(self) -> str:
        return f"TensorList({self.stack!r})"


pytree.register_pytree_node(
    TensorList, lambda t: ([t.stack], None), lambda children, _: TensorList(children[0]),
    flatten_with_keys_fn=lambda t: ([(pytree.GetAttrKey("stack"), t.stack)], None))


def truth(value):
    """``bool(L)`` (``if L:``, ``not L``, ``a if L else b``) of a list built in a tensor
    loop: ``len(L) > 0``, a bool known when the graph runs (a Python bool where the length
    is static); any other value as it is."""
    if type(value) is not TensorList:
        return value
    return value.length() > 0


#: a returned stack's node attribute: the Python number kind ("int", "float", "bool") its
#: rows stand for, "mixed" where some are tensors (``runtime.returned_numbers``); absent:
#: tensors, or not known
ELEMENTS = "element_number"


def element_kinds(stack) -> "frozenset | None":
    """The Python number kinds (None: a tensor) of the elements a traced stack holds, as
    far as this trace saw them be added; None if unknown."""
    return getattr(stack, "__dict__", {}).get("_tograph_element_kinds")


def element_grads(stack) -> "frozenset | None":
    """The ``requires_grad`` flags (True, False, None: path-dependent) of the elements a
    traced stack holds, as far as this trace saw them be added; None if unknown."""
    return getattr(stack, "__dict__", {}).get("_tograph_element_grads")


def _dims(t: torch.Tensor):
    """The dimensions of ``t`` (None where known only at run time)."""
    node = getattr(t, "_node", None)
    return tuple(t.shape) if node is None else node.meta.shape


def _text(dims) -> str:
    return "(" + ", ".join("?" if d is None else str(d) for d in dims) + ")"


def _by_value(what: str) -> TracingError:
    return TracingError(f"{format_location(user_location())}: {what} of a list built in a "
                        f"tensor loop finds an element by its value: where it is (or "
                        f"whether it is there) is known only when the graph runs")


def _dynamic(what: str) -> TracingError:
    return TracingError(f"{format_location(user_location())}: {what}: its length is known only "
                        f"when the graph runs; this use needs conversion (@to_graph)")


_CONVERTED = PerThreadList()   # (per thread) lists replaced by TensorLists during the current trace


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
    raise UnstackableElement(f"{format_location(user_location())}: a list whose length is known "
                             f"only at run time must hold tensors or numbers, not "
                             f"{type(value).__name__}")


class UnstackableElement(TracingError):
    """A list grown in a tensor loop gets an element no stack can hold (a list of
    ``.item()`` ints): a loop of static length unrolls instead (``operators.loops``)."""


def stack_list(items: list, like) -> TensorList:
    """A TensorList of ``items`` (tensors or numbers); ``like``: an element (or a
    TensorList) giving the element type, used when ``items`` is empty."""
    shape, dtype = element_type(like)
    for item in items:
        if element_type(item) != (shape, dtype) and not _double(item, shape, dtype):
            raise TracingError(
                f"{format_location(user_location())}: a list whose length is known only at "
                f"run time is one stacked tensor: its items must share a shape and dtype, "
                f"not {_text(element_type(item)[0])} {element_type(item)[1]} and "
                f"{_text(shape)} {dtype}")
    if items:
        tensors = [i if isinstance(i, torch.Tensor) else torch.tensor(i, dtype=dtype)
                   for i in items]
        for t in tensors:
            views.note_copy(t)
        stack = torch.stack(tensors)
        flags = frozenset(grad_of(t) for t in tensors)
    else:
        _check_static_rows(like)
        stack = torch.empty((0,) + tuple(int(d) for d in shape), dtype=dtype)
        flags = frozenset()
    if hasattr(stack, "_node"):
        stack._tograph_element_grads = flags
        stack._tograph_element_kinds = frozenset(map(kind_of, items))
    return TensorList(stack)


def _double(item, shape, dtype) -> bool:
    """A Python float (a double) in a list of float64 numbers: its row holds it exactly
    (``lrs = [lr]`` before a loop appending the carried ``lr``)."""
    return type(item) is float and shape == () and dtype == torch.float64


def _check_static_rows(like) -> None:
    """An empty list's stack gets its row shape from the element appended to it: a
    dimension of that element known only at run time (``data[i:i + 6]`` with a traced
    ``i``: shorter near the end) has no size to give it, and an example size taken for it
    would make the stack refuse the real rows when the graph runs."""
    dims = _dims(like.stack)[1:] if isinstance(like, TensorList) else \
        _dims(like) if isinstance(like, torch.Tensor) else ()
    if dims is not None and None in dims:
        raise TracingError(
            f"{format_location(user_location())}: a list built in a tensor loop (one stacked "
            f"tensor) gets elements of shape {_text(dims)}, a size known only when the graph "
            f"runs: the stack's rows cannot be given a shape")
