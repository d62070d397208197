"""Shape and dtype of an operation's output, by running it on ``meta`` tensors.

Requires: the op's arguments, with symbolic tensors (meta-backed) and concrete tensors.
Provides: ``Inferred(meta, example)``: the output's ``TensorMeta`` (a tuple of them for
multi-output ops, None for none) and meta tensors standing for the outputs.

Results are cached by (op, argument metadata, the default dtype, which factories and
Python numbers read): running an op on meta tensors costs tens to hundreds of
microseconds. Dimensions known only at run time (``None``) are found by
running the op a second time with different sizes for the dynamic input dimensions: an
output dimension that changes with them is dynamic. Ops whose output size depends on
data (``nonzero``, ``masked_select``, boolean indexing, ``unique``) have no meta kernel;
they run under ``FakeTensorMode`` with a ``ShapeEnv``, where such sizes come out symbolic.
"""
from __future__ import annotations

import contextlib
import builtins
import re
import threading
from typing import Any, Dict, NamedTuple, Optional

import torch

from . import graph_ops, inference_warnings, known_values, packed_sequences, probe_shapes
from . import size_probes, value_bounds
from .errors import GraphError
from .meta import TensorMeta
from .ops import is_inplace
from .introspection import KEY as NUMBER_KEY
from .tensor_state import meta_strided
from .size_hints import is_size, hint, run_time_sizes, with_hints

_CACHE: Dict[Any, "Inferred"] = {}
_WARNS: set = set()     # keys of _CACHE whose op warned (``inference_warnings``)
_CACHE_LIMIT = 100_000

# Per thread: whether run-time dimensions must be proven to follow their inputs (a graph
# traced with dynamic input dimensions serves every size, so a guess is not enough).
_STRICT = threading.local()


@contextlib.contextmanager
def strict_dims():
    """Within: an output dimension is marked static only when the op, run again with the
    run-time input dimensions (and the sizes taken from them) doubled, gives it the same
    size; when the op fails there, ``GraphError`` (it holds only at the sizes it was
    traced with), where outside a failing probe leaves a guess: the dimensions equal to
    an example size are dynamic."""
    before = getattr(_STRICT, "on", False), getattr(_STRICT, "shifted", False)
    _STRICT.on, _STRICT.shifted = True, size_probes.take_pending()
    size_probes.clear_failure()
    try:
        yield
    finally:
        _STRICT.on, _STRICT.shifted = before


def _strict() -> bool:
    return getattr(_STRICT, "on", False)


def _probes():
    """``(scale, grow)`` of the sizes a strict trace proves an op at (``size_probes``)."""
    return size_probes.probes(getattr(_STRICT, "shifted", False))


class Inferred(NamedTuple):
    meta: Any
    example: Any
    probes: Any = None      # {probe: meta} of a strict trace's probes (``probe_shapes``)


def _meta_like(t: torch.Tensor, shape=None) -> torch.Tensor:
    shape = tuple(t.shape) if shape is None else tuple(shape)
    if shape == tuple(t.shape):         # the layout too: views' strides and offsets follow it
        return meta_strided(shape, tuple(t.stride()), t.storage_offset(), t.dtype)
    return torch.empty(shape, dtype=t.dtype, device="meta")


def _symbolic_meta(t) -> Optional[TensorMeta]:
    node = getattr(t, "_node", None)
    return None if node is None else node.meta


def _map(value, fn):
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, tuple):
        items = tuple(_map(v, fn) for v in value)
        return type(value)(*items) if hasattr(value, "_fields") else items
    if isinstance(value, list):
        return [_map(v, fn) for v in value]
    if isinstance(value, dict):
        return {k: _map(v, fn) for k, v in value.items()}
    return value


def _flat_key(args: tuple, kwargs: dict):
    """``(_key_leaf(args), _key_leaf(kwargs))`` for flat arguments, faster; None when an
    argument is nested."""
    parts = ["tuple"]
    for v in args:
        if isinstance(v, torch.Tensor):
            node = getattr(v, "_node", None)
            parts.append(("T", tuple(v.shape), tuple(v.stride()), v.storage_offset(), v.dtype,
                          None if node is None else node.meta.shape))
        elif isinstance(v, _NESTED):
            return None
        else:
            hash(v)
            parts.append((type(v), v))
    kparts = ["dict"]
    for k, v in kwargs.items():
        if isinstance(v, torch.Tensor) or isinstance(v, _NESTED):
            return None
        hash(v)
        kparts.append((k, (type(v), v)))
    return tuple(parts), tuple(kparts)


_NESTED = (tuple, list, dict, slice)


def _key_leaf(v):
    if isinstance(v, torch.Tensor):
        meta = _symbolic_meta(v)
        dyn = None if meta is None else meta.shape
        return ("T", tuple(v.shape), tuple(v.stride()), v.storage_offset(), v.dtype, dyn)
    if isinstance(v, (tuple, list)):
        return (type(v).__name__,) + tuple(_key_leaf(x) for x in v)
    if isinstance(v, dict):
        return ("dict",) + tuple((k, _key_leaf(x)) for k, x in v.items())
    if isinstance(v, slice):
        return ("slice", _key_leaf(v.start), _key_leaf(v.stop), _key_leaf(v.step))
    hash(v)
    return (type(v), v)


def _ctc_loss_meta(log_probs, targets, input_lengths, target_lengths, blank=0,
                   reduction="mean", zero_infinity=False):
    """``F.ctc_loss``'s result: its kernel's work space (``log_alpha``) is as long as the
    longest target, a tensor's value, so fake tensors refuse it; the loss is per batch
    item (``reduction="none"``) or one number."""
    per_item = reduction == "none" and log_probs.dim() == 3
    return torch.empty((log_probs.shape[1],) if per_item else (), dtype=log_probs.dtype,
                       device="meta")


def _on_zeros(func):
    """``func``'s result run on zeros of its tensors' shapes and dtypes, as meta: for ops
    that check their inputs' *values* in Python before computing (which meta tensors cannot
    answer) where zeros pass the check; the node checks the real values when the graph
    runs, raising eager's error."""
    def run(*args, **kwargs):
        zeros = _map((args, kwargs), lambda t: torch.zeros(t.shape, dtype=t.dtype))
        out = func(*zeros[0], **zeros[1])
        return _map(out, lambda t: torch.empty(t.shape, dtype=t.dtype, device="meta"))
    return run


def _bool_condition(func, at):
    """``func`` with a uint8 condition (argument ``at``) taken as bool: eager accepts
    ``torch.where(uint8_mask, a, b)`` (pytorch-crf's default mask, deprecated with a
    warning the node gives when it runs) but the meta kernel refuses it; the result's
    shape and dtype do not depend on the condition's dtype."""
    def run(*args, **kwargs):
        if len(args) > at and isinstance(args[at], torch.Tensor) and args[at].dtype == torch.uint8:
            args = (*args[:at], args[at].bool(), *args[at + 1:])
        elif isinstance(kwargs.get("condition"), torch.Tensor) and \
                kwargs["condition"].dtype == torch.uint8:
            kwargs = dict(kwargs, condition=kwargs["condition"].bool())
        return func(*args, **kwargs)
    return run


# ops whose output shape no meta or fake kernel gives, though it follows the input shapes
_META_RULES = {
    torch.where: _bool_condition(torch.where, 0),
    torch.Tensor.where: _bool_condition(torch.Tensor.where, 1),
    torch.nn.functional.ctc_loss: _ctc_loss_meta,
    # ``torch.any(var < 0)``: raise ValueError for a negative variance
    torch.nn.functional.gaussian_nll_loss: _on_zeros(torch.nn.functional.gaussian_nll_loss),
}


def _run(func, args, kwargs):
    # (a factory with no tensor argument, torch.randn(3), runs for real on the CPU: its
    # draw must not advance the caller's generator, which the graph draws from at run time)
    func = _META_RULES.get(func, func)
    with torch._C.DisableTorchFunction(), torch.no_grad(), torch.random.fork_rng(devices=[]), \
            inference_warnings.quiet():     # (the node warns when it runs, as eager)
        return func(*args, **kwargs)


def _to_meta_args(args, kwargs, resize=None):
    """Arguments as plain meta tensors; ``resize`` maps id(symbolic) -> other sizes."""
    def conv(t):
        shape = None if resize is None else resize.get(id(t))
        return _meta_like(t, shape)
    return _map(args, conv), _map(kwargs, conv)


def _describe(out) -> Inferred:
    if out is None:
        return Inferred(None, None)
    if isinstance(out, torch.Tensor):
        example = out if type(out) is torch.Tensor and out.is_meta else _meta_like(out)
        return Inferred(TensorMeta.of(out), example)
    if isinstance(out, (tuple, list)) and all(isinstance(o, torch.Tensor) for o in out):
        examples = [_meta_like(o) for o in out]
        container = examples if isinstance(out, list) else \
            (type(out)(examples) if type(out) is not tuple else tuple(examples))
        return Inferred(tuple(TensorMeta.of(o) for o in out), container)
    if isinstance(out, (list, tuple)) and any(isinstance(o, torch.Tensor) for o in out) and \
            all(o is None or isinstance(o, torch.Tensor) for o in out):
        # ``None`` beside tensors (``multi_head_attention_forward(need_weights=False)``):
        # no meta and no ``get`` node for it; the example keeps the None
        examples = [None if o is None else _meta_like(o) for o in out]
        container = examples if isinstance(out, list) else \
            (type(out)(examples) if type(out) is not tuple else tuple(examples))
        return Inferred(tuple(None if o is None else TensorMeta.of(o) for o in out), container)
    if isinstance(out, (list, tuple)) and any(isinstance(o, torch.Tensor) for o in out):
        raise GraphError(f"unsupported output: a {type(out).__name__} mixing tensors and "
                         f"other values")
    return Inferred(None, out)      # a Python value: metadata (dtype, size) or a scalar


def _fake_infer(func, args, kwargs) -> Inferred:
    """Run under FakeTensorMode: data-dependent sizes come out as symbols -> None."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    mode = FakeTensorMode(shape_env=ShapeEnv(), static_shapes=True)

    def fake(t):
        return mode.from_tensor(torch.empty(tuple(t.shape), dtype=t.dtype))
    args, kwargs = _nonnegative_dim(func, args, kwargs)
    with torch._C.DisableTorchFunction():
        fargs, fkwargs = _map(args, fake), _map(kwargs, fake)
    with mode, torch._C.DisableTorchFunction(), torch.no_grad(), inference_warnings.quiet():
        out = func(*fargs, **fkwargs)

    def describe(o):
        dims = tuple(d if isinstance(d, int) else None for d in o.shape)
        hint = [2 if d is None else d for d in dims]
        return TensorMeta(dims, o.dtype), torch.empty(hint, dtype=o.dtype, device="meta")
    if isinstance(out, torch.Tensor):
        return Inferred(*describe(out))
    pairs = [describe(o) for o in out]
    return Inferred(tuple(p[0] for p in pairs), type(out)(p[1] for p in pairs)
                    if type(out) is not tuple else tuple(p[1] for p in pairs))


def _nonnegative_dim(func, args, kwargs):
    """``unique_consecutive``'s fake kernel takes a negative ``dim`` as it is (a 1-D
    tensor's ``dim=-1`` came out 2-D): the same call with the dim counted from the front,
    which eager treats alike."""
    if getattr(func, "__name__", None) != "unique_consecutive" or not args or \
            not isinstance(args[0], torch.Tensor):
        return args, kwargs
    if isinstance(kwargs.get("dim"), int) and kwargs["dim"] < 0:
        kwargs = dict(kwargs, dim=kwargs["dim"] + max(args[0].dim(), 1))
    elif len(args) > 3 and isinstance(args[3], int) and args[3] < 0:
        args = (*args[:3], args[3] + max(args[0].dim(), 1), *args[4:])
    return args, kwargs


def _run_any(func, args, kwargs) -> Inferred:
    """On meta tensors; under FakeTensorMode for ops whose output size depends on data."""
    try:
        return _describe(_run(func, args, kwargs))
    except NotImplementedError:
        return _fake_infer(func, args, kwargs)
    except RuntimeError:
        if func not in _DATA_SIZED:
            raise
        return _fake_infer(func, args, kwargs)


# ops whose meta kernel refuses a size that depends on data, which a fake one gives
# (``repeat_interleave(v, counts)``: its length is ``counts.sum()``)
_DATA_SIZED = frozenset({torch.repeat_interleave, torch.Tensor.repeat_interleave})


_RETRY_SIZES = (1, 2, 3, 4, 5, 6, 8, 16)


def _retry_with_other_sizes(func, args, kwargs, dynamic):
    """The op failed with the example sizes of run-time dimensions (``x[:2] + ones(3)``
    where ``x[:2]`` has a dynamic length): try other sizes for them; the first that works
    gives the output's meta, returned with the sizes that gave it (``_generalize`` starts
    from them). If none works, the op fails for every size: raise."""
    error = None
    for size in _RETRY_SIZES:
        resize = {}
        for t in dynamic:
            meta = _symbolic_meta(t)
            dims = meta.shape if meta.shape is not None else (None,) * t.dim()
            resize[id(t)] = [size if d is None else s for s, d in zip(t.shape, dims)]
        try:
            margs, mkwargs = _to_meta_args(args, kwargs, resize)
            return _run_any(func, margs, mkwargs), resize
        except Exception as e:  # noqa: PERF203 - trying sizes until one fits
            error = e
    raise error


def _dynamic_inputs(args, kwargs):
    found = []
    _map((args, kwargs), lambda t: found.append(t) if (
        _symbolic_meta(t) is not None and not _symbolic_meta(t).is_static) else None)
    return found


def _generalize(first: Inferred, func, args, kwargs, dynamic, sizes=None) -> Inferred:
    """Mark output dims that follow the run-time-sized input dims as dynamic (None);
    ``sizes``: the input sizes ``first`` was inferred at, where not the examples'."""
    unknown_rank = any(_symbolic_meta(t).shape is None for t in dynamic)
    sizes = sizes or {}
    resize, doubled = {}, {}
    for t in dynamic:
        meta = _symbolic_meta(t)
        dims = meta.shape if meta.shape is not None else (None,) * t.dim()
        shape = sizes.get(id(t), tuple(t.shape))
        resize[id(t)] = [s + 1 if d is None else s for s, d in zip(shape, dims)]
        doubled[id(t)] = [2 * s if d is None else s for s, d in zip(shape, dims)]
    hints = {s for t in dynamic for s, d in zip(sizes.get(id(t), tuple(t.shape)),
                                                _symbolic_meta(t).shape or
                                                (None,) * t.dim()) if d is None}
    per_probe = None
    if _strict() and not unknown_rank:
        second, per_probe = _proven(func, args, kwargs, dynamic)
        _same_count(first.meta, second, func)
        if func in _CLAMPING or func in _COUNTED:
            second = _at_one(first.meta, second, _run_at_one(func, args, kwargs, dynamic),
                             func)
    else:
        second = None
        for other in (resize, doubled):     # one bigger, else doubled (``view(6, -1)``)
            try:
                margs, mkwargs = _to_meta_args(args, kwargs, other)
                second = _run_any(func, margs, mkwargs).meta
                break
            except Exception:  # noqa: PERF203,BLE001 - the next sizes
                continue

    def join(m1: TensorMeta, m2: Optional[TensorMeta]) -> TensorMeta:
        if unknown_rank:
            return TensorMeta(None, m1.dtype)
        if m2 is None:
            return TensorMeta(tuple(None if d in hints else d for d in m1.shape), m1.dtype)
        return m1.join(TensorMeta(m2.shape, m1.dtype))
    meta = first.meta
    if isinstance(meta, TensorMeta):
        meta = join(meta, second if isinstance(second, TensorMeta) else None)
    elif isinstance(meta, tuple):
        seconds = second if isinstance(second, tuple) else (None,) * len(meta)
        meta = tuple(None if a is None else join(a, b) for a, b in zip(meta, seconds))
    return Inferred(meta, first.example, per_probe)


def _proven(func, args, kwargs, dynamic):
    """The output meta with the run-time input dims doubled (``strict_dims``): doubling
    keeps the sizes derived from one another consistent (a batch of 3 flattened with 16
    positions is 48 rows; doubled, 96 rows for a batch of 6, where one bigger would
    give 49 and 4), and moves what follows a size (a stride-2 conv's ``(n - 1) // 2 + 1``
    is 2 at 3 and 4, 3 at 6). A shifted trace also probes them all grown by the same
    amount (``size_probes``). ``GraphError`` when the op holds at no probe: it holds only
    at the sizes it was traced with. The inputs are resized to the shapes they have at
    each probe (``probe_shapes``: 4BS rows for tokens flattened from (B, S), doubled)."""
    def at(probe):
        resize = {id(t): probe_shapes.resized(t._node, tuple(t.shape), _symbolic_meta(t).shape,
                                              *probe) for t in dynamic}
        margs, mkwargs = _to_meta_args(args, kwargs, resize)
        return _run_any(func, margs, mkwargs).meta
    return _at_probes(func, at)


def _at_probes(func, at):
    """``at(probe)`` merged over the strict probes where it holds (``size_probes.merge``),
    and ``{probe: at(probe)}`` of those; when none holds, ``GraphError``, noting whether a
    shifted probe would have held."""
    held, error = {}, None
    probes = _probes()
    for probe in probes:
        try:
            meta = at(probe)
        except Exception as e:  # noqa: BLE001,PERF203 - the next probe
            error = e
            continue
        if meta is not None:
            held[probe] = meta
    if held:
        return size_probes.merge(list(held.values())), held
    shifted = None
    if size_probes.SHIFTED not in probes:
        try:
            shifted = at(size_probes.SHIFTED)
        except Exception:  # noqa: BLE001 - no shift holds either
            shifted = None
    size_probes.note_failure(shifted is not None)
    detail = f" ({type(error).__name__}: {error})" if error is not None else ""
    raise GraphError(f"{getattr(func, '__name__', func)} holds only at the sizes it was "
                     f"traced with: it cannot serve other sizes of a dynamic dimension"
                     f"{detail}") from None


# ops whose output size is the least of an input size and a bound: ``x[:4]`` has 4 rows
# at 5 rows and at 10 (the sizes a dynamic trace tries), but 3 at 3 (also the diagonal of
# an n x 4 matrix): they are also run at size 1
_CLAMPING = frozenset({torch.Tensor.__getitem__, torch.diagonal, torch.Tensor.diagonal,
                       torch.diag, torch.Tensor.diag})


# ops whose number of results may change below the sizes a dynamic trace tries
# (``x.split(n // 2 + 1)`` makes 2 pieces from 3 rows up, 1 at 2)
_COUNTED = frozenset({torch.split, torch.Tensor.split, torch.tensor_split,
                      torch.Tensor.tensor_split, torch.chunk, torch.Tensor.chunk})


def _run_at_one(func, args, kwargs, dynamic):
    """The op's output meta with the run-time dims at size 1; None if it fails there
    (an index past size 1 fails, as eager would at that size)."""
    resize = {}
    for t in dynamic:
        dims = _symbolic_meta(t).shape
        resize[id(t)] = [1 if d is None else s for s, d in zip(t.shape, dims)]
    try:
        margs, mkwargs = _to_meta_args(args, kwargs, resize)
        return _run_any(func, margs, mkwargs).meta
    except Exception:  # noqa: BLE001
        return None


def _at_one(first, second, low, func):
    """``second`` joined with ``low``, the meta at size 1: a dim cut to a bound
    (``x[:4]``) follows the sizes below it; a number of results that differs there
    refuses the dynamic trace (``_same_count``)."""
    if low is None:
        return second
    if func in _COUNTED:
        _same_count(first, low, func)
    if isinstance(second, TensorMeta) and isinstance(low, TensorMeta) and \
            second.shape is not None and low.shape is not None and \
            len(second.shape) == len(low.shape):
        return second.join(TensorMeta(low.shape, second.dtype))
    return second


def _same_count(first, second, func) -> None:
    """``strict_dims``: an op whose number of outputs follows a dynamic size
    (``unbind``, ``split`` along it) cannot serve other sizes: its results are Python
    values (a tuple of that many tensors) the graph would bake in."""
    if isinstance(first, tuple) != isinstance(second, tuple) or \
            isinstance(first, tuple) and len(first) != len(second):
        raise GraphError(f"{getattr(func, '__name__', func)} gives a number of results that "
                         f"depends on the size of a dynamic dimension")


_INDEXING = {torch.Tensor.__getitem__, torch.Tensor.__setitem__, graph_ops.setitem}


def _is_index_scalar(v) -> bool:
    return isinstance(v, torch.Tensor) and v.dim() == 0 and \
        not v.dtype.is_floating_point and v.dtype != torch.bool


def _has_tensor_scalars(index) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return any(_is_index_scalar(v) or (isinstance(v, slice) and any(
        isinstance(b, torch.Tensor) for b in (v.start, v.stop, v.step))) for v in items)


def _hinted_slice(v: slice) -> slice:
    """A slice with tensor bounds as meta tensors can take it: the bounds' example values
    when all are sizes with one (``x[:, :t]`` with ``t = ids.size(1)``: the example stays
    consistent with the other tensors sized by ``t``), else the full slice."""
    bounds = []
    for b in (v.start, v.stop, v.step):
        if isinstance(b, torch.Tensor):
            b = hint(b._node) if run_time_sizes(b, {}) else None
            if b is None:
                return slice(None)
        bounds.append(b)
    return slice(*bounds)


def _proved_width(data, v: slice) -> Optional[int]:
    """``data[i:i + c]`` on dimension 0 with ``0 <= i <= len - c`` proved by the graph
    (``value_bounds``: nanoGPT's windows at ``randint`` offsets): ``c``, else None."""
    shape = getattr(data, "shape", None)
    if v.step is not None or not shape or type(shape[0]) is not int:
        return None
    return value_bounds.static_width(shape[0], v.start, v.stop)


def _infer_indexing(func, args, kwargs) -> Inferred:
    """Indexing with 0-d integer tensors (``x[i]`` in a tensor loop) or tensor slice bounds
    (``x[:n]``): meta tensors have no values, so infer with 0 / a full slice, and mark the
    dimensions a tensor-bounded slice produces as dynamic."""
    index = args[1]
    items = index if isinstance(index, tuple) else (index,)
    meta_items, dynamic, position = [], [], 0
    for v in items:
        if _is_index_scalar(v):
            meta_items.append(0)
        elif isinstance(v, slice) and any(isinstance(b, torch.Tensor)
                                          for b in (v.start, v.stop, v.step)):
            width = _proved_width(args[0], v) if not meta_items else None
            meta_items.append(_hinted_slice(v) if width is None else slice(0, width))
            if width is None:
                dynamic.append(position)
            position += 1
        else:
            meta_items.append(v)
            if v is None or isinstance(v, slice):
                position += 1
    meta_index = tuple(meta_items) if isinstance(index, tuple) else meta_items[0]
    result = _infer(func, (args[0], meta_index) + tuple(args[2:]), kwargs)
    if isinstance(result.meta, TensorMeta) and dynamic and result.meta.shape is not None:
        # (no probe shapes: the slice was probed at its bounds' example values)
        dims = tuple(None if i in dynamic else d for i, d in enumerate(result.meta.shape))
        result = Inferred(TensorMeta(dims, result.meta.dtype), result.example)
    return result


_VERIFY_LIMIT = 1 << 24     # elements: a bigger stand-in is not worth making to check


_NAMES_META = re.compile(r"\bmeta\b", re.IGNORECASE)


def fails_eagerly(func, args, kwargs, error: Exception) -> Optional[Exception]:
    """The error ``func`` raises on real tensors if it fails the same way (``type(error)``):
    the symbolic tensors replaced by zero-filled CPU tensors of their shapes and dtypes,
    concrete ones by copies. Then shape inference's error is the user's own, and this one
    has the text eager gives. None when it cannot be checked (a size known only at run
    time, a symbolic number standing for a Python int, a tensor inside a slice): the
    failure may be ours, not the user's."""
    if "on meta tensors" in str(error):
        return None     # a value read from a traced tensor (``view(n_t, ...)``): zeros lie
    if _NAMES_META.search(str(error)):
        return None     # an op refusing meta tensors themselves (pack_padded_sequence's
        # lengths "should be a 1D CPU int64 tensor, but got 1D meta Long tensor"): zeros
        # would fail another way (a zero length) and pass for the user's error
    checkable, total = [True], [0]

    def real(t):
        if not isinstance(t, torch.Tensor):
            return t
        node = getattr(t, "_node", None)
        meta = TensorMeta(tuple(t.shape), t.dtype) if node is None else node.meta
        if node is not None and (node.attrs.get("python_int") or node.attrs.get("python_index")
                                 or node.attrs.get(NUMBER_KEY) is not None):
            checkable[0] = False        # (a number stand-in: ``t.item()``, ``int(t)``)
        if not isinstance(meta, TensorMeta) or not meta.is_static:
            checkable[0] = False
            return t
        total[0] += int(torch.Size(meta.shape).numel())
        if total[0] > _VERIFY_LIMIT:
            checkable[0] = False
            return t
        if node is None and not t.is_meta:
            return t.detach().clone()
        known = known_values.value(t)       # (the value the graph fixes: exact)
        return known.clone() if known is not None else torch.zeros(meta.shape, dtype=meta.dtype)

    def walk(v):
        if isinstance(v, slice):
            if any(isinstance(b, torch.Tensor) for b in (v.start, v.stop, v.step)):
                checkable[0] = False
            return v
        if isinstance(v, torch.Tensor):
            return real(v)
        if isinstance(v, tuple):
            items = tuple(walk(x) for x in v)
            return type(v)(*items) if hasattr(v, "_fields") else items
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        return v
    with torch._C.DisableTorchFunction():
        rargs, rkwargs = walk(tuple(args)), walk(dict(kwargs))
        if not checkable[0]:
            return None
        try:
            with torch.no_grad(), inference_warnings.quiet():
                func(*rargs, **rkwargs)
        except type(error) as e:
            return e
        except Exception:   # noqa: BLE001 - a different failure: not the one we saw
            return None
    return None


def infer_known(func, args, kwargs):
    """``infer`` for an op whose arguments include traced tensors with known values
    (``known_values``): run with those real and every other tensor meta. ``(Inferred, the
    op's outputs as computed)``; ``(None, the error)`` when the op fails so (then ``infer``
    as ever, and this error is the one to check eagerly: ``fails_eagerly``); None when no
    argument has a known value or an input has a run-time dimension."""
    with torch._C.DisableTorchFunction():
        new = known_values.substituted(func, args, kwargs, _meta_like)
        if new is None or _dynamic_inputs(args, kwargs):
            return None
        try:
            out = _run(func, *new)
            return _describe(out), out
        except Exception as e:  # noqa: BLE001 - inference as ever reports it
            return None, e


def infer(func, args, kwargs) -> Inferred:
    """Output meta of ``func(*args, **kwargs)``; args hold symbolic and concrete tensors."""
    with torch._C.DisableTorchFunction():
        packed = packed_sequences.inferred(func, args, kwargs)   # (lengths known when it runs)
        if packed is not None:
            return Inferred(*packed)
        try:
            return _infer(func, args, kwargs)
        except Exception as e:
            sizes = run_time_sizes(args, kwargs)
            try:
                if not sizes:
                    raise
                return _infer_sized(func, args, kwargs, sizes, e)
            except Exception:
                given = _given_view_shape(func, args, kwargs)   # (the guesses disagree)
                if given is None:
                    raise
                return given


_VIEWS = (torch.Tensor.view, torch.Tensor.reshape, torch.reshape)


def _given_view_shape(func, args, kwargs) -> Optional[Inferred]:
    """``x.view(B, E)`` / ``reshape`` to a shape given in full (no -1) of an ``x`` with a
    run-time dimension (a boolean-mask selection's row count): that shape, whatever example
    sizes inference guessed for ``x`` (two unknowns' guesses need not multiply out); the
    op checks the element count when the graph runs, raising eager's error."""
    if kwargs or len(args) < 2 or not builtins.any(func is v for v in _VIEWS):
        return None
    meta = _symbolic_meta(args[0])
    if meta is None or meta.shape is None or None not in meta.shape:
        return None
    dims = args[1:]
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = tuple(dims[0])
    shape, example = [], []
    for d in dims:
        if type(d) is int and d >= 0:
            shape.append(d)
            example.append(d)
        elif is_size(d) and hint(d._node) is not None:
            shape.append(None)
            example.append(hint(d._node))
        else:
            return None
    return Inferred(TensorMeta(tuple(shape), meta.dtype),
                    torch.empty(example, dtype=meta.dtype, device="meta"))


def _infer_sized(func, args, kwargs, sizes, error) -> Inferred:
    """``func`` given sizes known only at run time (``x.view(-1, n)``, ``zeros(n)``): run
    with their example values (``size_hints``), then again with the run-time dimensions
    and the sizes taken from them one bigger (else with other values for the sizes alone):
    output dimensions that change are dynamic. When no other value fits, the dimensions
    equal to a size's example value are."""
    hints = {id(s): hint(s._node) for s in sizes}
    if any(h is None for h in hints.values()):
        raise error
    try:
        if _strict() and not is_inplace(func, kwargs):
            # the example sizes as they are: a guess generalized from them (a probe with
            # the sizes held as numbers) would mark dims that follow nothing dynamic
            first = _run_any(func, *_to_meta_args(with_hints(args, hints),
                                                  with_hints(kwargs, hints)))
        else:
            first = _infer(func, with_hints(args, hints), with_hints(kwargs, hints))
    except Exception:   # noqa: BLE001 - the failure with the symbolic sizes is the one to report
        raise error from None
    dynamic = _dynamic_inputs(args, kwargs)

    def grown_by(grow: int, scale: int = 1):
        """The meta with the run-time dims and the sizes taken from them ``scale`` times
        as big and ``grow`` bigger (None if the op fails there)."""
        grown = {id(s): hint(s._node, grow=grow, scale=scale) for s in sizes}
        if (not dynamic and scale == 1) or any(h is None for h in grown.values()):
            return None
        resize = {id(t): probe_shapes.resized(t._node, tuple(t.shape), _symbolic_meta(t).shape
                                              or (None,) * t.dim(), scale, grow)
                  for t in dynamic}
        try:
            margs, mkwargs = _to_meta_args(with_hints(args, grown), with_hints(kwargs, grown),
                                           resize)
            return _run_any(func, margs, mkwargs).meta
        except Exception:  # noqa: BLE001 - then other values for the sizes alone
            return None
    per_probe = None
    if _strict():       # at the probes _proven uses; no guess when none holds
        second, per_probe = _at_probes(func, lambda probe: grown_by(probe[1], scale=probe[0]))
        _same_count(first.meta, second, func)
        if func in _CLAMPING or func in _COUNTED:
            second = _at_one(first.meta, second, grown_by(1, scale=0), func)
    else:
        second = grown_by(1)
    for change in (lambda h: h + 1, lambda h: 2 * h + 1):
        if second is not None:
            break
        other = {k: change(h) for k, h in hints.items()}
        try:
            second = _infer(func, with_hints(args, other), with_hints(kwargs, other)).meta
        except Exception:  # noqa: PERF203,BLE001 - trying values until one fits
            continue
    values = set(hints.values())

    def vary(m1, m2):
        if not isinstance(m1, TensorMeta) or m1.shape is None:
            return m1
        if isinstance(m2, TensorMeta) and m2.shape is not None and \
                len(m2.shape) == len(m1.shape):
            return m1.join(TensorMeta(m2.shape, m1.dtype))
        # no other value fits: the dimensions equal to a size's example value follow it
        return TensorMeta(tuple(None if d in values else d for d in m1.shape), m1.dtype)
    meta = first.meta
    if isinstance(meta, tuple):
        seconds = second if isinstance(second, tuple) else (None,) * len(meta)
        meta = tuple(vary(a, b) for a, b in zip(meta, seconds))
    else:
        meta = vary(meta, second)
    return Inferred(meta, first.example, per_probe)


def _infer(func, args, kwargs) -> Inferred:
    if getattr(func, "_tograph_effect", False):
        return Inferred(None, None)
    if func in _INDEXING and len(args) > 1 and _has_tensor_scalars(args[1]):
        return _infer_indexing(func, args, kwargs)
    inplace = is_inplace(func, kwargs)
    key = None
    if not inplace:
        try:
            flat = _flat_key(args, kwargs)
            key = (func, _key_leaf(tuple(args)), _key_leaf(dict(kwargs))) if flat is None \
                else (func,) + flat
            key += (torch._C.get_default_dtype(),)    # factories' and numbers' dtype
            if _strict():
                key += ("strict dims", getattr(_STRICT, "shifted", False),
                        tuple(probe_shapes.key(t._node, _probes())
                              for t in _dynamic_inputs(args, kwargs)))
            hit = _CACHE.get(key)
            if hit is not None:
                if key in _WARNS:
                    inference_warnings.note()
                return hit
        except TypeError:
            key = None
    if inplace:
        # run on the symbolic tensors themselves: their own sizes must follow (unsqueeze_)
        margs = _map(args, lambda t: t if _symbolic_meta(t) is not None else _meta_like(t))
        mkwargs = _map(kwargs, lambda t: t if _symbolic_meta(t) is not None else _meta_like(t))
    else:
        margs, mkwargs = _to_meta_args(args, kwargs)
    dynamic = _dynamic_inputs(args, kwargs)
    sizes = None
    try:
        result = _run_any(func, margs, mkwargs)
    except Exception:
        if not dynamic or inplace:
            raise
        result, sizes = _retry_with_other_sizes(func, args, kwargs, dynamic)
    if dynamic and result.meta is not None:
        result = _generalize(result, func, args, kwargs, dynamic, sizes)
    if key is not None:
        if len(_CACHE) > _CACHE_LIMIT:
            _CACHE.clear()
            _WARNS.clear()
        _CACHE[key] = result
        if inference_warnings.noted():
            _WARNS.add(key)
    return result
