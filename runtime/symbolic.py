"""Symbolic tensors: torch tensors that record operations into a graph instead of computing.

A ``SymbolicTensor`` is a ``torch.Tensor`` subclass over a ``meta`` tensor (shape and
dtype, no data). Every torch function, tensor method and operator that touches one goes
through ``__torch_function__`` and becomes a node; the output's shape and dtype come from
running the same op on meta tensors (see ``shape_inference``).

Asking for a concrete value (``bool``, ``int``, ``float``, ``.item()``, iteration, ``len``
of a run-time dimension) raises ``TracingError`` naming the user's ``file:line``: that is
tensor-dependent Python control flow, which needs conversion by ``@to_graph``.

While a function is traced (``tracing()``), a ``TorchFunctionMode`` also sees calls with
no symbolic argument, so random factories (``torch.randn``) become graph nodes instead of
one frozen sample.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, List, Optional

import torch
import torch.utils._pytree as pytree
from torch.overrides import TorchFunctionMode

from . import data_aliases, grad_mode_switches, graph_ops, views
from . import autocast_ops, autograd_effects, factory_dtypes, inference_ops, item_values
from . import flag_arguments, grad_flags, index_lists, size_text, tensor_state, trace_reads
from . import attention_fast_path, carried_numbers, library_questions, tensor_of_items
from . import inference_warnings, int_overflow, known_values, packed_sequences, unpool_sizes
from . import probe_shapes, size_compares
from . import number_checks
from . import value_tests
from . import branch_grad_flags, foreach_calls
from .errors import GraphError, TracingError
from .grad_flags import grad_of
from .graph import Graph, Node, find_leaves, map_structure
from .introspection import (REBINDING_OPS, RunTimeSize, arithmetic_kind, kind_of, legacy_new,
                            legacy_type, mark)
from .meta import TensorMeta, meta_empty
from .ops import is_impure, is_inplace, op_name
from .plain_containers import dict_values, elements
from .shape_inference import fails_eagerly, infer, infer_known
from .source_info import format_location, user_location
from .threads import PerThreadList

_BUILD_STACK = PerThreadList()     # the graphs being built, innermost last (per thread)
_MHA_FORWARD = torch.nn.functional.multi_head_attention_forward

_CONCRETE = {
    torch.Tensor.__bool__: "bool()", torch.Tensor.__int__: "int()",
    torch.Tensor.__float__: "float()", torch.Tensor.__index__: "use as an index or int",
    torch.Tensor.__complex__: "complex()", torch.Tensor.item: ".item()",
    torch.Tensor.tolist: ".tolist()", torch.Tensor.numpy: ".numpy()",
    torch.Tensor.__array__: "conversion to numpy", torch.Tensor.__iter__: "iteration",
    torch.Tensor.__reversed__: "reversed()",
}
_GETTERS = {
    torch.Tensor.dtype.__get__, torch.Tensor.ndim.__get__, torch.Tensor.dim,
    torch.Tensor.is_floating_point, torch.Tensor.is_complex, torch.Tensor.layout.__get__,
    torch.Tensor.element_size, torch.Tensor.requires_grad.__get__, torch.Tensor.ndimension,
    torch.Tensor.is_sparse.__get__, torch.Tensor.is_quantized.__get__, torch.Tensor.is_signed,
    torch.Tensor.is_nested.__get__, torch.Tensor.is_mkldnn.__get__,
}
_DEVICE_QUERIES = {torch.Tensor.device.__get__: torch.device("cpu"),
                   torch.Tensor.is_cuda.__get__: False, torch.Tensor.is_meta.__get__: False,
                   torch.Tensor.is_cpu.__get__: True}
_SIZE_QUERIES = {torch.Tensor.shape.__get__, torch.Tensor.size, torch.Tensor.numel,
                 torch.Tensor.__len__, torch.Tensor.nelement, torch.Tensor.nbytes.__get__}
_SUBSTITUTES = {torch._C._set_grad_enabled: graph_ops.set_grad_enabled,
               **unpool_sizes.SUBSTITUTES}     # output_size's run-time sizes as ints
_REQUIRES_GRAD = torch.Tensor.requires_grad.__get__
_DATA_DEPENDENT_SCALARS = {"equal", "allclose", "is_nonzero", "item", "tolist",
                           "is_same_size", "data_ptr"}
_TEXT = {torch.Tensor.__repr__, torch.Tensor.__str__, torch.Tensor.__format__}


class SymbolicTensor(torch.Tensor):
    """A tensor value of a graph being built: knows its node, shape and dtype, not its data."""

    _node: Node

    @staticmethod
    def __new__(cls, node: Node, example: torch.Tensor):
        self = torch.Tensor._make_subclass(cls, example, False)
        self._node = node
        return self

    def __init__(self, node, example):  # noqa: D401 - construction happens in __new__
        pass

    @property
    def node(self) -> Node:
        return self._node

    @property
    def name(self) -> str:
        return self._node.name

    @property
    def graph(self) -> Graph:
        return self._node.graph

    def __hash__(self):
        if kind_of(self) is not None:
            # a stand-in for a Python number (a run-time size, a loop index) hashes as
            # that number eagerly: by identity, a dict or set would miss it silently
            raise _needs_conversion("hash() (as a dict key or set member)")
        return id(self)

    @property
    def __class__(self):
        """``x.__class__`` as user code sees it: a tensor. ``type(x)`` stays
        ``SymbolicTensor`` for the runtime; converted code asks ``tg.call(type, x)``, which
        also answers ``int``/``float``/``bool`` for a Python number's stand-in (here that
        would make the runtime's own ``isinstance(v, int)`` true for one)."""
        return torch.Tensor

    def __iter__(self):
        """Rows of a first dimension of static size (``row, col = edge_index``): its
        ``unbind(0)``, as eager's iteration gives; a dynamic one needs conversion."""
        shape = self._node.meta.shape if self._node.meta is not None else ()
        if shape and isinstance(shape[0], int):
            return iter(self.unbind(0))
        raise _needs_conversion("iteration")

    def as_subclass(self, cls):         # (torch's own skips __torch_function__)
        return _as_subclass(self, cls)

    def __divmod__(self, other):        # ``divmod(k, 3)`` of a Python number's stand-in
        _number_operand(self, other)
        with number_checks.divmod_parts():
            return self // other, self % other

    def __rdivmod__(self, other):
        _number_operand(self, other)
        with number_checks.divmod_parts():
            return other // self, other % self

    def __setattr__(self, name, value):
        tensor_state.check_setattr(self, name)     # a user's attribute: refused
        super().__setattr__(name, value)

    def __deepcopy__(self, memo):
        return self

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return dispatch(func, args, kwargs or {})


def _number_operand(t: SymbolicTensor, other) -> None:
    """``divmod`` takes Python numbers (and their stand-ins), not tensors, as eager's."""
    if kind_of(t) not in ("int", "float", "bool"):
        raise TypeError(f"unsupported operand type(s) for divmod(): 'Tensor' and "
                        f"'{type(other).__name__}'")


def describe(t: SymbolicTensor) -> str:
    """``Tensor("matmul_1", shape=(2, 2), dtype=torch.float32)``: a node, not numbers."""
    meta = t._node.meta
    shape = "<unknown rank>" if meta.shape is None else \
        "(" + ", ".join("None" if d is None else str(d) for d in meta.shape) + \
        ("," if len(meta.shape) == 1 else "") + ")"
    return f'Tensor("{t._node.name}", shape={shape}, dtype={meta.dtype})'


def is_symbolic(value: Any) -> bool:
    return isinstance(value, SymbolicTensor)


def contains_symbolic(value: Any) -> bool:
    if isinstance(value, SymbolicTensor):
        return True
    if isinstance(value, (list, tuple)):        # (not a subclass's own methods)
        return any(contains_symbolic(v) for v in elements(value))
    if isinstance(value, dict):
        return any(contains_symbolic(v) for v in dict_values(value))
    if isinstance(value, slice):
        return any(contains_symbolic(v) for v in (value.start, value.stop, value.step))
    return False


# ------------------------------------------------------------------------- nodes <-> tensors
def wrap_node(node: Node, example: Optional[torch.Tensor] = None) -> SymbolicTensor:
    """The symbolic tensor for a tensor-valued node."""
    if example is None:
        example = node.attrs.get("_example")
        if example is None:
            meta: TensorMeta = node.meta
            shape = [2 if d is None else d for d in (meta.shape if meta.shape is not None else (2,))]
            example = meta_empty(shape, meta.dtype)
    node.attrs["_example"] = example
    return SymbolicTensor(node, example)


def current_graph() -> Optional[Graph]:
    return _BUILD_STACK[-1] if _BUILD_STACK else None


@contextlib.contextmanager
def building(graph: Graph):
    """Record operations into ``graph`` (a graph or subgraph being built)."""
    _BUILD_STACK.append(graph)
    try:
        yield graph
    finally:
        _BUILD_STACK.pop()


def _target_graph(args, leaves: Optional[List["SymbolicTensor"]] = None) -> Graph:
    graph = current_graph()
    if leaves is None:
        leaves = _symbolic_leaves(args)
    if graph is not None:
        for t in leaves:
            if t._node.graph is not graph:
                break
        else:                       # every tensor is from the graph being built
            return graph
    owners = {id(t._node.graph.root): t for t in leaves}
    if graph is None:
        if len(owners) > 1:
            raise GraphError("an operation mixes tensors from different graphs")
        if not owners:
            raise GraphError("no graph to record into")
        t = next(iter(owners.values()))
        if getattr(t._node.graph.root, "traced_by", None) not in (None, threading.get_ident()):
            raise GraphError(f"tensor {t._node.name!r} belongs to a graph that another thread "
                             f"is tracing (a Python object the traced code assigned it to, "
                             f"read by this thread meanwhile); it has no value here")
        return t._node.graph.root
    chain = {id(g) for g in graph.ancestors()}
    for t in leaves:
        if id(t._node.graph) not in chain:
            raise GraphError(
                f"{format_location(user_location())}: tensor {t._node.name!r} belongs to "
                f"another graph (or to a branch or loop body that has finished) and cannot "
                f"be used here")
    return graph


_NESTED = (list, tuple, dict, slice)


def _flat_leaves(args, kwargs) -> Optional[List[SymbolicTensor]]:
    """The symbolic tensors among flat arguments; None when some argument is nested."""
    found: List[SymbolicTensor] = []
    for v in args:
        if isinstance(v, SymbolicTensor):
            found.append(v)
        elif isinstance(v, _NESTED):
            return None
    for v in kwargs.values():
        if isinstance(v, SymbolicTensor):
            found.append(v)
        elif isinstance(v, _NESTED):
            return None
    return found


def _symbolic_leaves(value) -> List[SymbolicTensor]:
    return find_leaves(value, is_symbolic)


def to_node(graph: Graph, value: Any) -> Any:
    """Replace symbolic tensors by (captured) nodes and concrete tensors by constants."""
    def leaf(v):
        if isinstance(v, SymbolicTensor):
            return graph.capture(v._node)
        if v.is_meta:
            _refuse_meta_constant(v)
        return data_aliases.node_of(graph, v) or graph.constant(v)     # (p.data: read anew)
    kind = type(value)
    if kind is tuple:                   # flat arguments: the usual case
        for v in value:
            if isinstance(v, _NESTED):
                break
        else:
            return tuple([leaf(v) if isinstance(v, torch.Tensor) else v for v in value])
    elif kind is dict:
        for v in value.values():
            if isinstance(v, _NESTED):
                break
        else:
            return {k: leaf(v) if isinstance(v, torch.Tensor) else v for k, v in value.items()}
    return map_structure(value, _is_tensor, leaf)


def _refuse_meta_constant(v) -> None:
    """A meta tensor beside traced ones: made by torch machinery that ran on the traced
    tensors' meta stand-ins outside the trace (a higher-order op compiling its body, as
    ``associative_scan`` does), or the user's own, which eager cannot mix with real tensors
    either. As a graph constant it holds no data: the graph would fail when it runs."""
    raise GraphError(f"{format_location(user_location())}: a meta tensor "
                     f"{tuple(v.shape)} (made outside the trace, with no data) is used with "
                     f"traced tensors")


def _is_tensor(v) -> bool:
    return isinstance(v, torch.Tensor)


# ------------------------------------------------------------------------- dispatch
_TRACING_ERRORS = PerThreadList([0])     # per thread


def tracing_error_count() -> int:
    """How many 'needs conversion' errors were raised (caught ones included)."""
    return _TRACING_ERRORS[0]


def _needs_conversion(what: str) -> TracingError:
    _TRACING_ERRORS[0] += 1
    loc = user_location()
    return TracingError(
        f"{format_location(loc)}: {what} of a symbolic tensor: its value is only known when "
        f"the graph runs. Tensor-dependent Python control flow needs conversion: @to_graph "
        f"converts if/while/for/and/or/not and the builtins len/range/int/float/min/max, but "
        f"not this use (in a graph built by hand: runtime.cond / runtime.while_loop)")


def _text_refusal() -> TracingError:
    _TRACING_ERRORS[0] += 1
    return TracingError(
        f"{format_location(user_location())}: the text of a symbolic tensor (str, repr, "
        f"format) is known only when the graph runs: converted code prints it at run time "
        f"(print of f-strings, str.format, %, str and repr), but this use needs it as a "
        f"Python str now")


def _size(t: SymbolicTensor, func, args):
    meta: TensorMeta = t._node.meta
    if func is torch.Tensor.__len__:
        if meta.shape is None or not meta.shape or meta.shape[0] is None:
            if meta.shape == ():
                raise TypeError("len() of a 0-d tensor")
            raise _needs_conversion("len() of a dimension known only at run time")
        return meta.shape[0]
    if func == torch.Tensor.nbytes.__get__:     # (a method-wrapper: equal, not identical)
        return _size(t, torch.Tensor.numel, args) * t.element_size()
    if func in (torch.Tensor.numel, torch.Tensor.nelement):
        if not meta.is_static:
            return dispatch_record(graph_ops.numel, (t,), {})
        return int(torch.Size(meta.shape).numel())
    if meta.shape is None:
        raise _needs_conversion("the shape (rank unknown until run time)")
    dims = [d if d is not None else dispatch_record(graph_ops.dim_size, (t, i), {})
            for i, d in enumerate(meta.shape)]
    if func is torch.Tensor.size and len(args) > 1:
        return dims[args[1]]
    return torch.Size(dims) if all(isinstance(d, int) for d in dims) else RunTimeSize(dims)


def dispatch(func, args, kwargs):
    """Route a torch call with a symbolic argument: answer a query, refuse, or record."""
    if func in _TEXT:
        t = args[0]
        if not isinstance(t, SymbolicTensor):
            return func(*args, **kwargs)
        if current_graph() is not None:   # text made while tracing would be frozen
            raise _text_refusal()
        return describe(t)
    if func in _CONCRETE or func is torch.Tensor.item:
        answer = known_values.answer(func, args, kwargs)    # (the graph's fixed value)
        if answer is not known_values.NOT_KNOWN:
            return answer
    if func is torch.Tensor.item and len(args) == 1 and not kwargs and \
            isinstance(args[0], SymbolicTensor):     # loss.item() for logging
        return item_values.item_of(args[0], _needs_conversion)
    if func in _CONCRETE:
        if func is torch.Tensor.__bool__ and isinstance(args[0], SymbolicTensor):
            answer = library_questions.answer_bool(args[0])    # (a known torch site)
            if answer is not None:
                return answer
        raise _needs_conversion(_CONCRETE[func])
    if func == _REQUIRES_GRAD and isinstance(args[0], SymbolicTensor):
        flag = grad_of(args[0])         # the value's, not the stand-in's (see grad_flags)
        trace_reads.note_traced_grad()  # (which follows the flags of the constants in it)
        if flag is not None:
            return flag
        flag = dispatch_record(graph_ops.requires_grad_of, (args[0],), {})
        mark(flag, "bool")              # (a Python bool, known when the graph runs)
        return flag
    if func in _GETTERS:
        with torch._C.DisableTorchFunction():
            return func(*args, **kwargs)
    if func in _ALIASES and isinstance(args[0], SymbolicTensor):
        return _ALIASES[func](*args, **kwargs)
    if func in _TRAINING_CALLS:             # loss.backward(): an effect node
        return autograd_effects.backward(func, args, kwargs)
    if func is torch.autograd.grad:
        return autograd_effects.grad(func, args, kwargs)
    if func in tensor_state.QUESTIONS:       # layout, autograd state, version, storage
        traced = _symbolic_leaves((args, kwargs))
        if traced:
            return tensor_state.answer(func, traced[0], args, kwargs)
    if func in _DEVICE_QUERIES:
        return _DEVICE_QUERIES[func]
    if func in _SIZE_QUERIES:
        return _size(args[0], func, args)
    if func in _LEGACY and isinstance(args[0], SymbolicTensor):
        return _LEGACY[func](args[0], args[1:], kwargs)
    if func in REBINDING_OPS and kind_of(args[0]) is not None:
        # ``k += 1`` of a Python number's stand-in rebinds k, as for the number: no
        # in-place write that an alias (``j = k``) would see
        return dispatch_record(REBINDING_OPS[func], args, kwargs)
    if func is _MHA_FORWARD:                # as eager's fused attention, where it takes it
        return attention_fast_path.traced_attention(args, kwargs)
    if func is torch._nested_tensor_from_mask_left_aligned:
        raise GraphError(f"{format_location(user_location())}: nn.TransformerEncoder asks "
                         f"whether the padding mask is left-aligned (its nested-tensor path): "
                         f"a question about the mask's values")
    return dispatch_record(func, args, kwargs)


def _legacy_type(t: SymbolicTensor, args, kwargs):
    answer = legacy_type(t._node.meta.dtype, args, kwargs, format_location(user_location()))
    return answer if isinstance(answer, str) else dispatch_record(torch.Tensor.to, (t, answer), {})


def _legacy_new(t: SymbolicTensor, args, kwargs):
    call = legacy_new(t._node.meta.dtype, args, kwargs)
    if call is None:
        return dispatch_record(torch.Tensor.new, (t,) + tuple(args), kwargs)
    return dispatch_record(*call)


_LEGACY = {torch.Tensor.type: _legacy_type, torch.Tensor.new: _legacy_new}


def _set_requires_grad(t: SymbolicTensor, flag) -> None:
    """``t.requires_grad = flag``: as ``t.requires_grad_(flag)`` (a recorded op)."""
    dispatch_record(torch.Tensor.requires_grad_, (t, flag), {})


def _as_subclass(t: SymbolicTensor, cls):
    """``t.as_subclass(torch.Tensor)``: an alias of the same data, still attached to
    autograd, as ``view_as`` makes it; another class is refused (its own
    ``__torch_function__`` would decide what later ops return)."""
    if cls is not torch.Tensor:
        raise tensor_state.refusal(f"as_subclass({getattr(cls, '__name__', cls)})",
                                   "a graph of plain tensors does not repeat what a "
                                   "subclass's __torch_function__ does")
    return dispatch_record(torch.Tensor.view_as, (t, t), {})


_ALIASES = {torch.Tensor.requires_grad.__set__: _set_requires_grad}


def _rebind(t: SymbolicTensor, node: Node, example) -> SymbolicTensor:
    """After an in-place op, the Python object ``t`` stands for the op's result."""
    _REBOUND.append((t, t._node))
    if tensor_state.CLASS in t._node.attrs:      # p.add_(1): still the nn.Parameter
        node.attrs[tensor_state.CLASS] = t._node.attrs[tensor_state.CLASS]
    if t._node.op == "placeholder" and not hasattr(t, "_fed_as"):
        t._fed_as = t._node          # still the key to feed, as in TF
    t._node = node
    node.attrs["_example"] = example
    return t


_REBOUND = PerThreadList()   # (tensor, node before the in-place op), for subgraph exits


def restore_rebound(mark: int, graph: Graph) -> None:
    """Undo rebinding done while tracing ``graph`` (a finished branch or loop body): the
    objects stand again for their value outside it (mutated in place at run time)."""
    keep = _REBOUND[:mark]
    for t, old in reversed(_REBOUND[mark:]):
        if t._node.graph is graph or any(g is graph for g in t._node.graph.ancestors()):
            if not (old.graph is graph or any(g is graph for g in old.graph.ancestors())):
                t._node = old
                continue
        keep.append((t, old))
    _REBOUND[:] = keep


def rebound_mark() -> int:
    return len(_REBOUND)


# Sizes known only at run time (``dim_size``, ``numel``) stand for Python ints. Python
# arithmetic on them stays int with ints and becomes a float (a double) with floats or
# true division; torch would compute int64 with a float in float32. So: integer results
# stay marked as Python ints, and mixing with floats first casts to float64.
_INT_ARITHMETIC = frozenset({"add", "radd", "sub", "rsub", "mul", "rmul", "floordiv",
                             "rfloordiv", "mod", "rmod", "neg", "truediv", "rdiv",
                             "rtruediv", "div"})
_TRUE_DIVISION = frozenset({"truediv", "rdiv", "rtruediv", "div"})


def _python_int(value) -> bool:
    return isinstance(value, SymbolicTensor) and value._node.attrs.get("python_int", False)


# A staged ``range`` loop's index is a 0-d int64 graph value where eager has a Python int.
# Marked ``python_index`` (kept through integer arithmetic with ints), it only changes what
# ``torch.tensor(i)`` does: eager builds a tensor from an int, with no warning about
# copy-constructing from a tensor. Its arithmetic stays torch's (a full Python-int
# stand-in would make ``i / 2`` a float64 tensor, which promotes 0-d float32 operands
# where eager's Python float does not).
_INDEX_ARITHMETIC = frozenset({"add", "radd", "sub", "rsub", "mul", "rmul", "floordiv",
                               "rfloordiv", "mod", "rmod", "neg"})


def _python_index(value) -> bool:
    return isinstance(value, SymbolicTensor) and value._node.attrs.get("python_index", False)


def mark_python_index(value) -> None:
    """Mark ``value`` (a staged range loop's 0-d int64 index) as standing for an int."""
    if isinstance(value, SymbolicTensor) and value.dtype == torch.int64 and value.dim() == 0:
        value._node.attrs["python_index"] = True


def _keeps_index(func, args, kwargs) -> bool:
    return not kwargs and op_name(func) in _INDEX_ARITHMETIC and \
        any(_python_index(a) for a in args) and \
        all(_python_index(a) or (isinstance(a, int) and not isinstance(a, bool)) for a in args)


def _int_number(value) -> bool:
    """A stand-in for a Python int (``int(t)``, an int tensor's ``item()``, a run-time
    size): its true division, or arithmetic with a float, is Python's, in double (torch
    would give float32: ``int(t) / 3`` off eager's by 1e-8). A ``range`` index is not
    one (see ``_INDEX_ARITHMETIC``)."""
    return isinstance(value, SymbolicTensor) and \
        (value._node.attrs.get("python_number") == "int" or _python_int(value))


def _bools_as_ints(args):
    """Bool stand-ins in int or float arithmetic as ints (torch's ``True + True`` is
    ``True``, its ``-True`` an error; Python's are ``2`` and ``-1``)."""
    if not any(kind_of(a) == "bool" for a in args):
        return args
    out = []
    for a in args:
        if isinstance(a, SymbolicTensor) and kind_of(a) == "bool":
            a = dispatch_record(torch.Tensor.to, (a,), {"dtype": torch.int64})
            mark(a, "int")
        elif type(a) is bool:
            a = int(a)
        out.append(a)
    return tuple(out)


def _as_python_numbers(func, args):
    """(args, whether the result is a Python-int stand-in) for arithmetic on stand-ins."""
    name = op_name(func)
    if name == "pow" and len(args) == 2 and _int_number(args[0]) and \
            type(args[1]) in (int, float) and (type(args[1]) is float or args[1] < 0):
        return (args[0].double(), args[1]), False   # Python: 3 ** -1, 3 ** 0.5 are floats
    if name in _INT_ARITHMETIC and any(_int_number(a) for a in args) and \
            all(_int_number(a) or isinstance(a, (int, float)) for a in args) and \
            (name in _TRUE_DIVISION or any(isinstance(a, float) for a in args)):
        return tuple(a.double() if _int_number(a) else a for a in args), False
    if name not in _INT_ARITHMETIC or not any(_python_int(a) for a in args):
        return args, False
    others = [a for a in args if not _python_int(a)]
    if any(isinstance(a, torch.Tensor) for a in others):
        return args, False          # with a tensor, torch's promotion treats it as Python's
    if name in _TRUE_DIVISION or any(isinstance(a, float) for a in others):
        return tuple(a.double() if _python_int(a) else a for a in args), False
    return args, all(isinstance(a, int) and not isinstance(a, bool) for a in others)


# binary ops in which torch promotes a Python number by its kind, a 0-d tensor by its dtype
_PROMOTING = _INT_ARITHMETIC | {"pow", "rpow", "lt", "le", "gt", "ge", "eq", "ne",
                                "floor_divide", "remainder"}
_SAMPLE_NUMBERS = {"int": 3, "float": 3.0, "bool": True}


def _numbers_as_scalars(args):
    """A number stand-in (a run-time size, ``float(n)`` of one) beside a tensor acts as
    the Python number it stands for: torch promotes a 0-d tensor by its dtype but a Python
    number by its kind only (``x.sum() / float(n)`` is float32 eagerly, float64 with the
    stand-in's double). The stand-in is cast to the dtype the tensor and such a number
    give (what torch does with the number)."""
    kinds = [kind_of(a) for a in args]
    for i in (0, 1):
        number, other = args[i], args[1 - i]
        if isinstance(number, SymbolicTensor) and kinds[i] in _SAMPLE_NUMBERS and \
                isinstance(other, torch.Tensor) and kinds[1 - i] is None:
            with torch._C.DisableTorchFunction():
                dtype = torch.result_type(torch.empty((), dtype=other.dtype),
                                          _SAMPLE_NUMBERS[kinds[i]])
            if number.dtype == dtype:
                return args
            cast = dispatch_record(torch.Tensor.to, (number,), {"dtype": dtype})
            return (cast, other) if i == 0 else (other, cast)
    return args


# operands (position, keyword) that take a Python number as a scalar beside a tensor
# (``where``'s other value, ``clamp``'s input): ``torch.where(c, n / 2, t)``, ``t.clamp(max=n / 2)``
_SCALAR_OPERANDS = {"where": ((1, None), (2, None)),
                    "clamp": ((1, "min"), (2, "max")), "clip": ((1, "min"), (2, "max")),
                    "clamp_min": ((1, "min"),), "clamp_max": ((1, "max"),)}


def _operands_as_scalars(func, args, kwargs):
    """``_numbers_as_scalars`` for the operands of ``where`` and ``clamp``: a number
    stand-in beside a tensor is cast to the dtype that tensor and such a number give."""
    where = op_name(func) == "where"
    args, kwargs = list(args), dict(kwargs)
    for position, keyword in _SCALAR_OPERANDS[op_name(func)]:
        if position < len(args):
            number = args[position]
        elif keyword in kwargs:
            number = kwargs[keyword]
        else:
            continue
        other = (args[3 - position] if len(args) == 3 else None) if where else args[0]
        if where and isinstance(number, SymbolicTensor) and kind_of(number) is not None and \
                kind_of(other) is not None:     # two numbers: the default dtype's kinds
            kinds = {kind_of(number), kind_of(other)}
            dtype = torch.get_default_dtype() if "float" in kinds else \
                torch.int64 if "int" in kinds else torch.bool
            if number.dtype != dtype and kinds <= {"int", "float", "bool"}:
                args[position] = dispatch_record(torch.Tensor.to, (number,), {"dtype": dtype})
            continue
        if not isinstance(other, torch.Tensor) or kind_of(other) is not None:
            continue
        cast = _numbers_as_scalars((number, other))[0]
        if position < len(args):
            args[position] = cast
        else:
            kwargs[keyword] = cast
    return tuple(args), kwargs


def _tensor_of_python_int(args, kwargs):
    """``torch.tensor(i)`` of a stand-in for a Python int (a size, a staged range index):
    eager builds a new int64 (or ``dtype``) tensor from the int, without torch's warning
    about copy-constructing from a tensor; so does a copying ``to``. None otherwise.
    Also for a float or bool stand-in (``torch.tensor(n / 2)``): the default dtype or bool,
    as eager's number gives (the stand-in itself is a float64)."""
    if len(args) != 1 or not isinstance(args[0], SymbolicTensor) or \
            set(kwargs) - {"dtype", "device"}:
        return None
    kind = "int" if _python_int(args[0]) or _python_index(args[0]) else kind_of(args[0])
    if kind not in ("int", "float", "bool"):
        return None
    dtype = kwargs.get("dtype") or {"int": torch.int64, "float": torch.get_default_dtype(),
                                    "bool": torch.bool}[kind]
    extra = {"device": kwargs["device"]} if kwargs.get("device") is not None else {}
    return dispatch_record(torch.Tensor.to, (args[0],), {"dtype": dtype, "copy": True, **extra})


_INIT = torch.nn.init.__name__


def dispatch_record(func, args, kwargs, concrete: bool = False):
    """Add a node calling ``func``; ``concrete``: no symbolic argument (run it for real if
    it yields a Python value rather than tensors)."""
    if carried_numbers.SERVED and func in carried_numbers.RUNS_PYTHON:
        return carried_numbers.around_python(      # (a counter the graph carries is set
            lambda: _record_call(func, args, kwargs, concrete))     # before it, read after)
    return _record_call(func, args, kwargs, concrete)


def _record_call(func, args, kwargs, concrete: bool):
    if not args and "tensor" in kwargs and getattr(func, "__module__", None) == _INIT:
        kwargs = dict(kwargs)           # ``nn.init.uniform_(w)`` hands torch's dispatch its
        args = (kwargs.pop("tensor"),)  # tensor by keyword: the tensor written is args[0]
    if func is torch.tensor or func is torch.as_tensor:
        made = _tensor_of_python_int(args, kwargs)
        if made is None and func is torch.tensor:
            made = tensor_of_items.tensor_of(args, kwargs)
        if made is not None:
            return made
    if func in index_lists.INDEXING and len(args) >= 2:
        args = (args[0], index_lists.as_index_tensor(args[1])) + tuple(args[2:])
    if func in value_tests.CALLS:       # torch.equal/allclose: a bool the graph computes
        answer = value_tests.CALLS[func](*args, **kwargs)
        if answer is not None:
            return answer
    known = size_compares.decided(func, args, kwargs)    # (``n >= 0`` of a size: True)
    if known is not None:
        return known
    number = arithmetic_kind(op_name(func), args) if not kwargs else None
    if number in ("int", "float"):      # ``True + True`` is 2: bools count as ints
        args = _bools_as_ints(args)
    checked = number_checks.record(op_name(func), args, number, user_location()) \
        if number is not None else None     # (Python's errors and signs: checked)
    args, python_int = _as_python_numbers(func, args) if not kwargs else (args, False)
    if not kwargs and len(args) == 2 and op_name(func) in _PROMOTING:
        args = _numbers_as_scalars(args)
    elif op_name(func) in _SCALAR_OPERANDS:
        args, kwargs = _operands_as_scalars(func, args, kwargs)
    recorded, bound = func, None        # (an int past int64: checked when it runs)
    if checked is not None:
        recorded = checked
    elif number == "int" and not kwargs and int_overflow.checks(op_name(func)):
        checked = int_overflow.record(op_name(func), args, user_location())
        if checked is not None:
            bound, recorded = (checked[1], func) if checked[0] == "bounded" else (None, checked)
    try:
        result = _dispatch_record(func, args, kwargs, concrete) if recorded is func else \
            _dispatch_record(recorded[0], recorded[1], kwargs, concrete)
    except (GraphError, TypeError) as e:
        cause = e.__cause__ if isinstance(e, GraphError) else e
        flags = flag_arguments.flags_in(args, kwargs) if isinstance(cause, TypeError) else []
        if not flags:       # (a run-time bool where the op needs a real one: per value)
            raise
        return flag_arguments.call_per_flag(dispatch_record, func, args, kwargs, flags[0])
    if (python_int or func in (graph_ops.dim_size, graph_ops.numel)) and \
            isinstance(result, SymbolicTensor):
        result._node.attrs["python_int"] = True
    if isinstance(result, SymbolicTensor) and _keeps_index(func, args, kwargs):
        result._node.attrs["python_index"] = True
    mark(result, number)            # Python arithmetic on number stand-ins: int, float, bool
    if bound is not None:
        int_overflow.mark_bound(result, *bound)
    return result


def _dispatch_record(func, args, kwargs, concrete: bool = False):
    tensor_state.check_modes()
    leaves = _flat_leaves(args, kwargs)
    graph = _target_graph((args, kwargs), leaves)
    location = user_location()
    func = _SUBSTITUTES.get(func, func)
    if func is torch.full and len(args) == 2 and isinstance(args[1], torch.Tensor):
        func = graph_ops.full_of_tensor     # a 0-d tensor fill value: read when it runs
    node_args = to_node(graph, tuple(args))
    node_kwargs = to_node(graph, dict(kwargs))
    inference_ops.check(func, args, kwargs, graph, location)    # (eager's errors first)
    inference_warnings.reset()
    known = infer_known(func, args, kwargs)     # (with the values the graph fixes)
    try:
        result = known[0] if known is not None and known[0] is not None else \
            autocast_ops.infer(func, args, kwargs)
    except TracingError:
        raise
    except Exception as e:
        if known is not None and known[0] is None:
            e = known[1]            # (what it does with the values the graph fixes)
        # the user's own error only where eager surely runs the op (not in a traced branch
        # or loop body, which eager may skip) and it fails there on real tensors too
        eager = None if graph.parent is not None else fails_eagerly(func, args, kwargs, e)
        if eager is None:
            why = packed_sequences.refusal(func, args) or (
                "it depends on a tensor's value (a size or number read from a tensor), "
                "known only when the graph runs" if "on meta tensors" in str(e) else
                f"{type(e).__name__}: {e}")
            error = GraphError(f"{format_location(location)}: {op_name(func)}: the result's "
                               f"shape could not be inferred ({why})")
            error.location = location
            raise error from e
        # the error eager torch gives on these shapes and dtypes (its text); the user's
        # line in a note
        error = eager
        error.add_note(f"{format_location(location)}: {op_name(func)} (found while tracing)")
        error._tograph_user_error = True
        error.location = location
        raise error from None
    if func is torch.Tensor.__setitem__ and isinstance(args[0], SymbolicTensor):
        func, result = graph_ops.setitem, infer(graph_ops.setitem, args, kwargs)
    if result.meta is None and result.example is not None:
        if concrete:                    # a Python answer about real tensors: guarded
            return trace_reads.note(func, args, kwargs, func(*args, **kwargs), any_call=True)
        if op_name(func) in _DATA_DEPENDENT_SCALARS:
            raise _needs_conversion(f"{op_name(func)}() returns a Python value that depends "
                                    f"on tensor data; using it")
        return result.example       # metadata: a dtype, a static size
    impure = is_impure(func, kwargs, args)
    target, result, shared = autocast_ops.recorded(func, args, kwargs, result, location)
    if shared is not None:      # parameters as autocast's one cached cast (``autocast_ops``)
        node_args, node_kwargs = to_node(graph, tuple(shared[0])), to_node(graph, shared[1])
    target = inference_ops.target_for(func, target, args, kwargs, location)
    if inference_warnings.noted():      # torch warns: below the frames eager has above it
        target = inference_warnings.at_frames(target, inference_warnings.eager_frames(func))
    node_kwargs = factory_dtypes.pinned(target, node_kwargs, result.meta)
    node = graph.add_node(op_name(target), target, node_args, node_kwargs, result.meta,
                          location=location, impure=impure)
    _note_grad(node, func, args, kwargs, result.meta)
    probe_shapes.note(node, getattr(result, "probes", None))
    inference_ops.note(node, func, args, kwargs)
    tensor_state.note_layout(node, leaves if leaves is not None else
                             _symbolic_leaves((args, kwargs)))
    written = None
    if is_inplace(func, kwargs) and isinstance(result.meta, TensorMeta):
        target = kwargs.get("out") if kwargs.get("out") is not None else args[0]
        if isinstance(target, SymbolicTensor):
            views.check_write(target, location)
            rebound = _rebind(target, node, result.example)
            return None if func is graph_ops.setitem else rebound
        trace_reads.note_written(target)        # a real tensor (a buffer) written in place
        written = target
    out = _wrap_result(node, result.example, result.meta)
    known_values.note(func, args, kwargs, out, known[1] if known and known[0] else None)
    packed_sequences.note(func, args, out)
    if isinstance(written, torch.Tensor) and isinstance(out, SymbolicTensor):
        tensor_state.note_written_leaf(out, written)    # ``p -= ...``: still the leaf p
    views.note_result(func, args, out)
    return out


def _note_grad(node: Node, func, args, kwargs, meta) -> None:
    """Record whether the result requires grad (``grad_flags``); a grad-mode switch is
    applied for real too, so later ops and ``no_grad``'s saved mode see the traced mode."""
    if func is graph_ops.set_grad_enabled:
        grad_mode_switches.check_switch(node)      # (a switch made in C++ went unrecorded)
        torch._C._set_grad_enabled(bool(args[0] if args else kwargs.get("mode")))
        return
    if meta is None:
        return
    dtype = meta.dtype if isinstance(meta, TensorMeta) else None
    target = (kwargs.get("out") if kwargs.get("out") is not None else args[0]) \
        if is_inplace(func, kwargs) and args else None
    tensors = [v for v in pytree.tree_leaves((args, kwargs)) if isinstance(v, torch.Tensor)]
    node.attrs[grad_flags.KEY] = grad_flags.result_grad(
        op_name(func), tensors if op_name(func) != "requires_grad_" else list(args),
        kwargs, dtype, target)


def _wrap_result(node: Node, example, meta):
    if meta is None:
        return example            # None, or a Python value that does not depend on data
    if isinstance(meta, TensorMeta):
        return wrap_node(node, example)
    items = record_tuple_outputs(node, meta, example)
    return items if isinstance(example, list) else type(example)(items)


def record_tuple_outputs(node: Node, metas, examples=None) -> List[SymbolicTensor]:
    """``get`` nodes reading each output of a multi-output node, as symbolic tensors (an
    output with no meta is a constant None, as the op returns it)."""
    outs = []
    for i, m in enumerate(metas):
        if m is None:
            outs.append(None)
            continue
        get = node.graph.add_node("get", None, (node,), meta=m, attrs={"index": i},
                                  location=node.location)
        if node.attrs.get(tensor_state.LAYOUT_VARIES):
            get.attrs[tensor_state.LAYOUT_VARIES] = True
        if grad_flags.KEY in node.attrs:
            get.attrs[grad_flags.KEY] = node.attrs[grad_flags.KEY] and \
                (m.dtype.is_floating_point or m.dtype.is_complex)
        if inference_ops.KEY in node.attrs:
            get.attrs[inference_ops.KEY] = node.attrs[inference_ops.KEY]
        outs.append(wrap_node(get, None if examples is None else examples[i]))
    return outs


# ------------------------------------------------------------------------- tracing mode
class _TracingMode(TorchFunctionMode):
    """Sees every torch call during a trace. Calls on concrete values that make tensors
    (``torch.zeros(3)``, ``torch.randn(2)``, ``w.t()``) become nodes too: every run must
    make a fresh tensor (it may be mutated in place) and draw new random numbers."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch._assert and size_text.assert_call(args, kwargs):
            return None
        if contains_symbolic(args) or contains_symbolic(kwargs):
            items = foreach_calls.per_item(func, args, kwargs)
            if items is not None:           # _foreach_lerp_(ema, params, w): a loop of lerp_
                for method, item_args, item_kwargs in items:
                    self.__torch_function__(method, types, item_args, item_kwargs)
                return None
            return dispatch(func, args, kwargs)
        graph = current_graph()
        if func in _FLAG_SETS and graph is not None and graph.parent is not None:
            branch_grad_flags.note(graph, args[0])      # in a tensor branch or loop body:
            return dispatch_record(func, args, kwargs, concrete=True)   # when it runs there
        if func in _FLAG_READS:
            branch_grad_flags.refuse_read(graph, args[0], _FLAG_READS[func])
        if func == _GRAD and current_graph() is not None and autograd_effects.staged():
            return autograd_effects.read(args[0])   # p.grad after loss.backward()
        if func == _SET_GRAD and current_graph() is not None:
            autograd_effects.note_set(*args)        # p.grad = None: recorded as below
        if func in _PASSTHROUGH or current_graph() is None:
            # a question about a real tensor (a parameter's flag, a buffer's shape or
            # values): its answer decides Python code once, so it is guarded
            answer = func(*args, **kwargs)
            if func == _DATA and current_graph() is not None:
                data_aliases.note(current_graph(), args[0], answer)
            return trace_reads.note(func, args, kwargs, answer)
        if func is torch.Tensor.new:        # rate.new(shape).exponential_() (distributions)
            call = legacy_new(args[0].dtype, args[1:], {"device": args[0].device, **kwargs})
            if call is not None:
                return dispatch_record(*call, concrete=True)
        return dispatch_record(func, args, kwargs, concrete=True)


_GRAD = torch.Tensor.grad.__get__
_SET_GRAD = torch.Tensor.grad.__set__
_FLAG_SETS = {torch.Tensor.requires_grad_, torch.Tensor.requires_grad.__set__}
_FLAG_READS = {torch.Tensor.requires_grad.__get__: "requires_grad", _GRAD: ".grad"}
_DATA = torch.Tensor.data.__get__
_TRAINING_CALLS = {torch.Tensor.backward, torch.autograd.backward}
_PASSTHROUGH = set(_CONCRETE) | _GETTERS | set(_DEVICE_QUERIES) | _SIZE_QUERIES | _TEXT | {
    torch.Tensor.__hash__, torch.Tensor.data_ptr,
    torch.Tensor.__deepcopy__, torch.Tensor.__reduce_ex__, torch.Tensor.__setstate__,
    torch.Tensor.grad.__get__, torch.Tensor.data.__get__, torch.Tensor.requires_grad_,
    torch.Tensor.__dlpack__, torch.Tensor.untyped_storage, torch.Tensor.get_device,
    torch.Tensor.stride, torch.Tensor.is_contiguous, torch.Tensor.storage_offset,
    torch.Tensor.is_leaf.__get__, torch.Tensor.grad_fn.__get__,
}


@contextlib.contextmanager
def tracing(graph: Graph):
    """Trace Python code into ``graph``: record into it, and capture random factories.
    ``with torch.no_grad():`` in traced code records its grad-mode switches as ops."""
    grad = torch.is_grad_enabled()       # traced no_grad/enable_grad switch it for real
    graph.traced_by = threading.get_ident()     # (its tensors are refused to other threads)
    try:
        with tensor_state.watching_modes(), building(graph), _TracingMode():
            yield graph
        size_text.check_consumed(graph)
        grad_mode_switches.check_end(graph, grad)
    finally:
        graph.traced_by = None
        graph.__dict__.pop("made_iterators", None)  # (operators.outside_iterators: its)
        torch._C._set_grad_enabled(grad)
