"""Iterables whose length is known only when the graph runs.

``range``, ``enumerate`` and ``zip`` over symbolic values, and ``TensorList``: a Python
list grown by ``append`` inside a tensor loop, held as one stacked tensor whose leading
dimension is dynamic. Each exposes ``length()`` (an int or a symbolic 0-d tensor) and
``item(i)`` (the i-th element for a symbolic index), which is what a tensor ``for`` loop
needs.
"""
from __future__ import annotations

import torch

from .. import views
from ..errors import TracingError
from ..source_info import format_location, user_location
from ..symbolic import is_symbolic, mark_python_index
from ..tensor_list import TensorList


def length_of(x):
    """``len(x)`` for a tensor: an int when static, else a symbolic 0-d int64 tensor."""
    if is_symbolic(x):
        dim = x._node.meta.shape
        if dim is not None and dim and dim[0] is not None:
            return dim[0]
        return x.shape[0]
    return len(x)


class _Iterable:
    """Python iteration (``iter()``) of a symbolic iterable, for code the converter leaves
    to Python (a generator expression, a dict or set comprehension, ``dict(enumerate(x))``):
    its items one by one where the length is known while tracing (a tensor's static
    first dimension), else a ``TracingError`` saying what to write instead."""

    what = "range()"

    def __iter__(self):
        n = self.length()
        if not isinstance(n, int):
            raise TracingError(
                f"{format_location(user_location())}: Python iterates a {self.what} whose "
                f"length is known only when the graph runs (in a generator expression, a "
                f"set or dict comprehension, or a call such as tuple() or dict()); a `for` "
                f"loop or a list comprehension over it converts")
        return (self.item(i) for i in range(n))


class SymbolicRange(_Iterable):
    """``range(start, stop, step)`` with a symbolic bound."""

    def __init__(self, *args):
        start, stop, step = (0, args[0], 1) if len(args) == 1 else \
            (args[0], args[1], args[2] if len(args) > 2 else 1)
        self.start, self.stop, self.step = start, stop, step

    def length(self):
        span = self.stop - self.start
        count = (span + self.step - (1 if _positive(self.step) else -1)) // self.step
        return torch.clamp(count, min=0) if is_symbolic(count) else max(0, count)

    def item(self, i):
        return self.start + i * self.step


def _positive(step) -> bool:
    if is_symbolic(step):
        raise TracingError(f"{format_location(user_location())}: range() with a tensor step "
                           f"is not supported")
    return step > 0


class SymbolicEnumerate(_Iterable):
    what = "enumerate()"

    def __init__(self, source, start=0):
        self.source, self.start = as_source(source), start

    def length(self):
        return self.source.length()

    def item(self, i):
        return (self.start + i, self.source.item(i))


class SymbolicZip(_Iterable):
    what = "zip()"

    def __init__(self, *sources):
        self.sources = [as_source(s) for s in sources]

    def length(self):
        lengths = [s.length() for s in self.sources]
        result = lengths[0]
        for n in lengths[1:]:
            if is_symbolic(result) or is_symbolic(n):
                result = torch.minimum(torch.as_tensor(result), torch.as_tensor(n))
            else:
                result = min(result, n)
        return result

    def item(self, i):
        return tuple(s.item(i) for s in self.sources)


def zip_of(*sources, strict=False):
    """``zip(...)`` with a traced source: a ``SymbolicZip`` for a tensor loop, or Python's
    own zip where a source is a list or tuple that is not one stack of tensors
    (``zip(saved_actions, returns)``: namedtuples beside a tensor of returns) and every
    traced source has a length known now: the loop is then as long as the shortest, known
    while tracing, and unrolled. ``strict=True`` checks the lengths now, raising Python's
    own error, and is refused where a length is known only when the graph runs."""
    if strict:
        _same_lengths(sources)
    python = [s for s in sources if isinstance(s, (list, tuple)) and
              not (s and all(isinstance(v, torch.Tensor) for v in s))]
    if python and all(isinstance(length_of(s), int) for s in sources if is_symbolic(s)) \
            and not any(isinstance(s, (SymbolicRange, SymbolicEnumerate, SymbolicZip,
                                       SymbolicReversed, TensorList)) for s in sources):
        return zip(*sources)
    return SymbolicZip(*sources)


def _same_lengths(sources) -> None:
    """``zip(..., strict=True)``'s check, on the lengths known while tracing."""
    lengths = []
    for s in sources:
        source = as_source(s) if is_symbolic_iterable(s) else None
        n = source.length() if source is not None else len(s) if hasattr(s, "__len__") \
            else None
        if not isinstance(n, int):
            raise TracingError(f"{format_location(user_location())}: zip(strict=True) of a "
                               f"length known only when the graph runs")
        lengths.append(n)
    for _ in zip(*[range(n) for n in lengths], strict=True):   # (Python's own error)
        pass


class SymbolicReversed(_Iterable):
    """``reversed(...)`` of a tensor, a symbolic range or a list built in a tensor loop."""

    what = "reversed()"

    def __init__(self, source):
        self.source = as_source(source)

    def length(self):
        return self.source.length()

    def item(self, i):
        return self.source.item(self.source.length() - 1 - i)


class _TensorSource:
    def __init__(self, tensor):
        self.tensor = tensor

    def length(self):
        return length_of(self.tensor)

    def item(self, i):
        return self.tensor[i]


class _RangeSource:
    """A Python ``range`` (or its rest) iterated with a symbolic index."""

    def __init__(self, r: range):
        self.range = r

    def length(self):
        return len(self.range)

    def item(self, i):
        mark_python_index(i)         # torch.tensor(item) then builds from an int, as eager
        return self.range.start + i * self.range.step


def as_source(value):
    """An object with ``length()``/``item(i)`` for a tensor ``for`` loop, or None."""
    if isinstance(value, (SymbolicRange, SymbolicEnumerate, SymbolicZip, SymbolicReversed,
                          TensorList, _TensorSource, _RangeSource)):
        return value
    if isinstance(value, torch.Tensor):
        return _TensorSource(value)
    if isinstance(value, range):
        return _RangeSource(value)
    if isinstance(value, (list, tuple)) and value and \
            all(isinstance(v, torch.Tensor) for v in value):
        for v in value:              # the loop sees rows of a copy: writing one in place
            views.note_copy(v)       # (or the items, later) would not reach them
        return _TensorSource(views.copied(torch.stack(list(value))))
    raise TracingError(f"{format_location(user_location())}: cannot iterate a "
                       f"{type(value).__name__} with a run-time index")


def is_symbolic_iterable(value) -> bool:
    return is_symbolic(value) or isinstance(
        value, (SymbolicRange, SymbolicEnumerate, SymbolicZip, SymbolicReversed, TensorList))
