"""What a trace asked of real tensors: answers that Python code decided on, once.

Inside a trace, a parameter, a buffer or a tensor held by a global is a real tensor (a
graph constant, kept by reference): the graph reads its *values* on every run. What Python
code *asked* about it while tracing -- ``self.w.requires_grad``, ``self.pos.shape[0]``,
``self.flag.item()``, ``self.w.grad is None``, ``torch.equal(self.a, self.b)`` -- chose
Python control flow once, and that choice is baked into the graph. Each such question is
recorded here while a trace runs (``recording``), and the front door turns the record
into a guard (``Reads.check``): before a cached graph runs, every question is asked again
and must get the same answer, else the function is traced again.

- metadata (flags, dtype, device, shape, layout): asked again, compared with ``==``;
- ``.grad``: compared by identity (a graph constant is that very tensor);
- data (``item()``, ``bool()``, ``tolist()``, ``numpy()``, ...): a copy of the tensor is
  kept and compared with ``torch.equal`` (NaN equal to NaN);
- any other torch call on real tensors that answers a Python value (``torch.equal``,
  ``allclose``): asked again, compared with ``==``.

A traced value's ``requires_grad`` is answered from the flags of the real tensors it was
computed from (``grad_flags``); when a trace asks it, the flag of every real tensor the
graph holds is guarded too (``note_traced_grad``).

``backend_flags``: the ``torch.backends`` flags (mkldnn, cudnn, opt_einsum, TF32), which
code names as module attributes, guarded where the traced code names ``backends``;
``environment_check``: ``os.environ``, guarded where it names ``environ``/``getenv``.

Module state: ``_LOGS``, a stack of the records of the traces running (one per
``symbolic.tracing``), per thread (``runtime.threads``).
"""
from __future__ import annotations

import contextlib
import functools
import os
from typing import Any

import torch

from .threads import PerThreadList

try:                                    # CPython's dict version tag (PEP 509), as torch
    from torch._C._dynamo.guards import dict_version as _dict_version   # reads it
except ImportError:                     # pragma: no cover - another torch / Python
    _dict_version = None

_LOGS = PerThreadList()      # per thread: see runtime.threads

_META = {
    torch.Tensor.dtype.__get__, torch.Tensor.ndim.__get__, torch.Tensor.dim,
    torch.Tensor.ndimension, torch.Tensor.is_floating_point, torch.Tensor.is_complex,
    torch.Tensor.layout.__get__, torch.Tensor.element_size, torch.Tensor.requires_grad.__get__,
    torch.Tensor.is_sparse.__get__, torch.Tensor.is_quantized.__get__, torch.Tensor.is_signed,
    torch.Tensor.is_nested.__get__, torch.Tensor.is_mkldnn.__get__, torch.Tensor.is_leaf.__get__,
    torch.Tensor.device.__get__, torch.Tensor.is_cuda.__get__, torch.Tensor.is_meta.__get__,
    torch.Tensor.is_cpu.__get__, torch.Tensor.get_device,
    torch.Tensor.shape.__get__, torch.Tensor.size, torch.Tensor.numel, torch.Tensor.nelement,
    torch.Tensor.__len__, torch.Tensor.stride, torch.Tensor.is_contiguous,
    torch.Tensor.storage_offset,
}
_IDENTITY = {torch.Tensor.grad.__get__, torch.Tensor.grad_fn.__get__}
_DATA = {
    torch.Tensor.__bool__, torch.Tensor.__int__, torch.Tensor.__float__,
    torch.Tensor.__index__, torch.Tensor.__complex__, torch.Tensor.item, torch.Tensor.tolist,
    torch.Tensor.numpy, torch.Tensor.__array__,
}
_COUNT = {torch.Tensor.__iter__, torch.Tensor.__reversed__}    # how many rows: the shape
_QUESTIONS = _META | _IDENTITY | _DATA | _COUNT


class Reads:
    """The questions one trace asked of real tensors, with their answers."""

    def __init__(self):
        self.asked: dict = {}      # (func, ids of the arguments) -> (func, args, kwargs, answer)
        self.data: dict = {}       # id(tensor) -> (tensor, copy of its values)
        self.traced_grad = False   # a traced value's requires_grad was asked
        self.written: set = set()  # storages of real tensors the graph writes in place

    def note(self, func, args, kwargs, answer) -> None:
        if func in _DATA:
            t = args[0]
            if self.written and _storage(t) in self.written:
                from .errors import GraphError
                raise GraphError(f"{_name(func)}() reads in Python the values of a tensor "
                                 f"the function changed in place earlier in the call (a "
                                 f"buffer's add_): the graph changes it when it runs, the "
                                 f"trace saw it unchanged")
            if id(t) not in self.data:
                with torch._C.DisableTorchFunction():
                    self.data[id(t)] = (t, t.detach().clone())
            return
        if func in _COUNT:              # iterating a real tensor: its size says how long
            with torch._C.DisableTorchFunction():
                func, args, kwargs, answer = torch.Tensor.size, args[:1], {}, args[0].size()
        key = (func,) + tuple(map(id, args)) + tuple((k, id(v)) for k, v in kwargs.items())
        if key not in self.asked:
            self.asked[key] = (func, args, kwargs, answer)

    def __bool__(self) -> bool:
        return bool(self.asked or self.data or self.traced_grad)

    def guard_constants(self, tensors) -> None:
        """Guard ``requires_grad`` of the real tensors the graph holds (when a trace asked
        a traced value's flag, which follows theirs)."""
        if not self.traced_grad:
            return
        for t in tensors:
            key = (torch.Tensor.requires_grad.__get__, id(t))
            if key not in self.asked:
                self.asked[key] = (torch.Tensor.requires_grad.__get__, (t,), {},
                                   t.requires_grad)

    def check(self):
        """A function of no arguments: whether every recorded question gets its recorded
        answer now (None when nothing was asked)."""
        asked = [(f, a, k, answer, f in _IDENTITY) for f, a, k, answer in self.asked.values()]
        data = list(self.data.values())
        if not asked and not data:
            return None

        def holds() -> bool:
            try:
                for func, args, kwargs, answer, identity in asked:
                    now = func(*args, **kwargs)
                    if (now is not answer) if identity else (now != answer):
                        return False
                for t, copy in data:
                    if not _same_values(t, copy):
                        return False
            except Exception:           # a question that no longer has an answer
                return False
            return True
        return holds

    def describe(self) -> str:
        """The first recorded question whose answer differs now, in words ('' if none)."""
        for func, args, kwargs, answer in self.asked.values():
            try:
                now = func(*args, **kwargs)
            except Exception as e:
                return f"{_name(func)} of a tensor the function holds now fails ({e})"
            if (now is not answer) if func in _IDENTITY else (now != answer):
                return f"{_name(func)} of a tensor the function holds: {answer!r} -> {now!r}"
        for t, copy in self.data.values():
            if not _same_values(t, copy):
                return "the values of a tensor whose data the function read in Python changed"
        return ""


def _same_values(t, copy) -> bool:
    if t.shape != copy.shape or t.dtype != copy.dtype:
        return False
    if torch.equal(t, copy):
        return True
    return (t.is_floating_point() or t.is_complex()) and \
        bool(torch.isclose(t, copy, rtol=0, atol=0, equal_nan=True).all())


def _name(func) -> str:
    name = getattr(func, "__name__", None) or getattr(getattr(func, "__self__", None),
                                                      "__name__", "a question")
    return name if name != "__get__" else repr(func).split("'")[1]


@contextlib.contextmanager
def recording():
    """Record, while a trace runs, the questions it asks of real tensors."""
    log = Reads()
    _LOGS.append(log)
    try:
        yield log
    finally:
        _LOGS.pop()


def note(func, args, kwargs, answer, any_call: bool = False) -> Any:
    """Record that the running trace asked ``func(*args, **kwargs)`` of real tensors and
    got ``answer``; returns ``answer``. Only the questions listed above are recorded, or
    with ``any_call`` any call whose answer is not a tensor (``torch.equal``)."""
    if _LOGS and args and isinstance(args[0], torch.Tensor) and (
            func in _QUESTIONS or any_call and not isinstance(answer, torch.Tensor)):
        with torch._C.DisableTorchFunction():
            if args[0].is_meta:         # the runtime's own example of a traced value
                return answer
        _LOGS[-1].note(func, args, kwargs, answer)
    return answer


def note_written(t) -> None:
    """The running trace recorded an in-place write to the real tensor ``t`` (a module's
    buffer: ``num_batches_tracked.add_(1)``): its values read in Python later in the trace
    (``float(self.num_batches_tracked)``, BatchNorm with ``momentum=None``) would be the
    values before the write, so such a read is refused (``Reads.note``)."""
    if _LOGS and isinstance(t, torch.Tensor):
        _LOGS[-1].written.add(_storage(t))


def _storage(t):
    with torch._C.DisableTorchFunction():
        try:
            return t.untyped_storage().data_ptr() or id(t)    # (0: empty, by identity)
        except Exception:           # (no storage: a tensor subclass) by identity
            return id(t)


def note_traced_grad() -> None:
    """A traced value's ``requires_grad`` was asked (see ``Reads.guard_constants``)."""
    if _LOGS:
        _LOGS[-1].traced_grad = True


def current() -> "Reads":
    return _LOGS[-1] if _LOGS else None


# ---------------------------------------------------------------- torch.backends flags
_BACKEND_FLAGS = (("mkldnn", "enabled"), ("cudnn", "enabled"), ("cudnn", "benchmark"),
                  ("cudnn", "deterministic"), ("cudnn", "allow_tf32"), ("opt_einsum", "enabled"),
                  ("cuda", "matmul", "allow_tf32"))


def backend_flags() -> tuple:
    """The values of ``torch.backends`` flags code may branch on (``if
    torch.backends.mkldnn.enabled:``), as now."""
    readers = _READERS or _READERS.extend(_flag_readers()) or _READERS
    return tuple([read() for read in readers])


def _flag(path) -> Any:
    value = torch.backends
    try:
        for name in path:
            value = getattr(value, name)
    except (AttributeError, RuntimeError):
        value = None
    return value


def _flag_readers() -> list:
    """One reader per flag, each giving what reading the attribute gives, without the
    walk from ``torch.backends`` (a guard asks on every call: 7 walks took ~20 µs): the
    C getter behind a flag torch declares as a ``ContextProp`` of its backend module's
    class; for an attribute its owner's class lacks, the owner's own dict, else its
    ``__getattr__`` (Python's order, without raising the failed lookup's AttributeError
    first); else the walk."""
    readers = []
    for path in _BACKEND_FLAGS:
        owner, name = _flag(path[:-1]), path[-1]
        cls = type(owner)
        prop = cls.__dict__.get(name) if owner is not None else None
        getter = getattr(prop, "getter", None)
        if type(prop).__name__ == "ContextProp" and callable(getter):
            readers.append(getter)
        elif owner is not None and not hasattr(cls, name) and hasattr(cls, "__getattr__"):
            readers.append(functools.partial(_missing_attribute, owner, name))
        else:
            readers.append(functools.partial(_flag, path))
    return readers


def _missing_attribute(owner, name) -> Any:
    try:
        own = getattr(owner, "__dict__", None)
        if own is not None and name in own:
            return own[name]
        return type(owner).__getattr__(owner, name)
    except (AttributeError, RuntimeError):
        return None


_READERS: list = []


def backend_flags_check():
    """A function of no arguments: whether ``backend_flags()`` are as now."""
    flags = backend_flags()
    return lambda: backend_flags() == flags


# ---------------------------------------------------------------- os.environ
def environment_check():
    """A function of no arguments: whether the process environment (``os.environ``, which
    code that names ``environ``/``getenv`` may read) is as now."""
    now = dict(os.environ)
    data = getattr(os.environ, "_data", None)       # the dict os.environ keeps its text in
    if _dict_version is None or type(data) is not dict:
        return lambda: dict(os.environ) == now
    env, version = os.environ, [_dict_version(data)]

    def check() -> bool:            # by the version tag of that dict while it holds
        if os.environ is env and _dict_version(data) == version[0]:
            return True
        if dict(os.environ) != now:
            return False
        version[0] = _dict_version(data) if os.environ is env else -1
        return True
    return check
