"""Tracing Python functions into the child graphs of ``cond`` and ``while`` nodes.

Shared by ``control_flow`` (cond) and ``while_loop``: the values flowing in and out of a
subgraph as pytrees (``Slot``s: tensor inputs or Python constants), tracing a function on
placeholders, setting a subgraph's outputs, aligning the values that branches capture
from enclosing graphs, and merging what two paths produce (``_merge_leaf``): the rules by
which a Python number may become a 0-d tensor (same kind only), shapes generalize to
dynamic dimensions, and values no path can observe (``Unobservable``) get placeholders.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence, Tuple

import torch
import torch.utils._pytree as pytree

from .errors import BranchMismatchError, GraphError
from . import grad_flags, inference_ops, introspection, size_hints, tensor_state
from .region_effects import run_watched
from .source_info import format_location, location_of_traceback
from .graph import Graph, Node
from .meta import TensorMeta, meta_empty
from . import module_modes, views
from .constant_keys import same_constant
from .symbolic import (SymbolicTensor, building, current_graph, rebound_mark,
                       restore_rebound, to_node, wrap_node)
from .threads import PerThreadList

_NUMBER = (bool, int, float)
_MAX_RETRACES = 6


def dtype_kind(dtype: torch.dtype) -> str:
    """bool, int, float or complex: what Python number a 0-d tensor of it stands for."""
    if dtype == torch.bool:
        return "bool"
    if dtype.is_complex:
        return "complex"
    return "float" if dtype.is_floating_point else "int"


class KindChange(BranchMismatchError):
    """A Python number would become a tensor of another kind (an int turning float)."""


def python_number_dtype(value) -> torch.dtype:
    """The dtype of the 0-d graph value standing for ``value``: a Python float is a double
    (float64, whatever the default dtype), an int an int64. Beside a tensor such a stand-in
    acts as the Python number (``symbolic._numbers_as_scalars``), not as a float64 tensor."""
    if isinstance(value, bool):
        return torch.bool
    if isinstance(value, int):
        return torch.int64
    return torch.float64


def with_number(dtype: torch.dtype, value) -> torch.dtype:
    """The dtype torch gives a tensor of ``dtype`` with the Python number ``value`` (a
    Python scalar promotes by its kind only: a float32 tensor and a float stay float32)."""
    with torch._C.DisableTorchFunction():
        return torch.result_type(torch.empty((), dtype=dtype, device="meta"), value)


def _leaf_meta(value) -> Optional[TensorMeta]:
    if isinstance(value, Fill):
        return value.meta
    if isinstance(value, SymbolicTensor):
        return value._node.meta
    if isinstance(value, torch.Tensor):
        return TensorMeta.of(value)
    return None


def _leaf_name(names: Optional[Sequence[str]], spec, index: int) -> str:
    if names is not None and index < len(names):
        return repr(names[index])
    return f"#{index}"


def _example(value) -> Optional[torch.Tensor]:
    if isinstance(value, Fill):
        return value.example
    if isinstance(value, torch.Tensor):
        with torch._C.DisableTorchFunction():     # the value's layout too (tensor_state)
            return tensor_state.example_with_layout(meta_empty(value.shape, value.dtype),
                                                    tensor_state.layout_of(value))
    return None


def _owner_graph(*values) -> Graph:
    graph = current_graph()
    if graph is not None:
        return graph
    for leaf in pytree.tree_leaves(values):
        if isinstance(leaf, SymbolicTensor):
            return leaf._node.graph.root
    raise GraphError("no graph to record control flow into")


# --------------------------------------------------------------------------- unobservable
class Unobservable:
    """Base of values that no path can read (the return value before any ``return``).

    When one path of a cond or loop has such a value and another path a real one, the
    real one wins, and the unobservable side gets a zero placeholder of the same type."""

    __tograph_unobservable__ = True


class Fill:
    """A zero tensor of ``meta``, made inside the subgraph whose output it stands for."""

    def __init__(self, meta: TensorMeta, example=None, kind=None):
        self.meta = meta
        self.example = example
        self.kind = kind        # the Python number kind of the value it stands beside

    def make(self) -> torch.Tensor:
        """The zeros (a node marked ``fill`` when traced: its value is never read, so an
        export may give it any shape)."""
        shape = [2 if d is None else d for d in (self.meta.shape or ())] \
            if self.example is None else list(self.example.shape)
        value = torch.zeros(shape, dtype=self.meta.dtype)
        node = getattr(value, "_node", None)
        if node is not None:
            node.attrs["fill"] = True
        return value


def _unobservable(v) -> bool:
    return getattr(type(v), "__tograph_unobservable__", False)


def _fill_like(value, side=None):
    """``value``'s structure, tensors replaced by zero ``Fill``s, Python values kept.

    An object's state (``ObjectState``) is no placeholder: the object is real on this
    path too (``return t, D`` on one path, ``D`` carried on both). It is taken from the
    same object's state elsewhere in ``side`` (this path's result), else read from the
    object now (the region carries no state of it, so after a trace it holds its state
    before the region; not the other path's copy, whose values may be that path's nodes:
    ``while ...: if c: return t, R``)."""
    from .path_values import PathValue
    objects = {id(v.obj): v for v in _object_states(side)}
    leaves, spec = pytree.tree_flatten(value, is_leaf=_is_object_state)
    filled = [objects.get(id(v.obj)) or type(v).of(v.obj) if _is_object_state(v) else
              Fill(_leaf_meta(v), _example(v), introspection.kind_of(v))
              if _leaf_meta(v) is not None else
              type(v)(0, v.options) if isinstance(v, PathValue) else v    # (its index may
              for v in leaves]                                  # be a node of that path)
    return pytree.tree_unflatten(filled, spec)


def _is_object_state(v) -> bool:
    return getattr(type(v), "__tograph_object_state__", False)


def _object_states(tree) -> list:
    if tree is None:
        return []
    return [v for v in pytree.tree_leaves(tree, is_leaf=_is_object_state)
            if _is_object_state(v)]


def zip_structures(a, b, fn):
    """Walk two structures side by side; where ``fn(x, y)`` gives a pair, use it, else
    descend into tuples/lists/dicts of the same shape. Returns the rebuilt pair."""
    done = fn(a, b)
    if done is not None:
        return done
    if isinstance(a, (tuple, list)) and type(a) is type(b) and len(a) == len(b) \
            and not hasattr(a, "_fields"):
        pairs = [zip_structures(x, y, fn) for x, y in zip(a, b)]
        return type(a)(p[0] for p in pairs), type(b)(p[1] for p in pairs)
    if isinstance(a, dict) and isinstance(b, dict) and list(a) == list(b):   # (order too)
        pairs = {k: zip_structures(a[k], b[k], fn) for k in a}
        return {k: p[0] for k, p in pairs.items()}, {k: p[1] for k, p in pairs.items()}
    return a, b


def reconcile(a, b):
    """Replace an unobservable value on one side by a placeholder shaped like the other."""
    def fill(x, y):
        if _unobservable(x) and not _unobservable(y):
            return _fill_like(y, a), y
        if _unobservable(y) and not _unobservable(x):
            return x, _fill_like(x, b)
        return None
    return zip_structures(a, b, fill)


# --------------------------------------------------------------------------- subgraphs
@dataclass
class Slot:
    """One leaf of the values flowing into a subgraph: a tensor input or a Python constant."""
    meta: Optional[TensorMeta]      # None: a Python constant passed as is
    const: Any = None
    example: Any = None
    grad: Optional[bool] = False    # requires grad (None: known only at run time)
    kind: Optional[str] = None      # the Python number it stands for (see introspection)
    varies: bool = False            # its layout is known only at run time (tensor_state)
    options: Optional[tuple] = None  # a Python value chosen per run: an index (loop_options)


def _trace(parent: Graph, label: str, fn: Callable, slots: List[Slot], spec,
           names=None) -> Tuple[Graph, list, Any]:
    """Trace ``fn`` on placeholders for the tensor slots; returns (graph, out leaves, spec)."""
    sub, out = _trace_tree(parent, label, fn, slots, spec, names)
    out_leaves, out_spec = pytree.tree_flatten(out)
    return sub, out_leaves, out_spec


def _trace_tree(parent: Graph, label: str, fn: Callable, slots: List[Slot], spec, names=None,
                outer=None, carry=None, originals=None):
    """Trace ``fn`` on placeholders for the tensor slots; returns (graph, its result).
    ``outer``: the values flowing in (one per slot), whose storage the placeholders share
    (see ``views``). ``carry``: a list to receive the Python state changes the region
    carries (``region_state``; a loop body's: numbers and tensors only). ``originals``
    (a ``Rebuilt``): told the operand containers the region gets, rebuilt from ``spec``."""
    sub = Graph(parent=parent, name=label)
    leaves = []
    labels = list(names) if names is not None and len(names) == len(slots) else \
        ["arg"] * len(slots)
    mark = rebound_mark()
    try:
        with building(sub):
            for i, slot in enumerate(slots):
                if slot.meta is None:
                    leaves.append(slot.const)
                else:
                    ph = sub.placeholder(slot.meta, name=_clean(labels[i]))
                    ph.attrs[grad_flags.KEY] = slot.grad
                    if slot.kind is not None:
                        ph.attrs[introspection.KEY] = slot.kind
                    if slot.varies:
                        ph.attrs[tensor_state.LAYOUT_VARIES] = True
                    if outer is not None and label in ("then", "else"):
                        size_hints.note_operand(ph, outer[i])   # a run-time size
                        if inference_ops.flag_of(outer[i]) is not False:
                            ph.attrs[inference_ops.KEY] = inference_ops.flag_of(outer[i])
                    leaves.append(wrap_node(ph, slot.example))
                    if outer is not None:
                        views.share(leaves[-1], outer[i])
                    if slot.options is not None:
                        from .loop_options import chosen
                        leaves[-1] = chosen(leaves[-1], slot.options)
            operands = pytree.tree_unflatten(leaves, spec)
            if originals is not None:
                originals.note(operands)
            out = run_watched(fn, operands,
                              _REGION.get(label, "a tensor-dependent region"), carry,
                              numbers_only=label == "body", names=tuple(
                                  str(n) for n in (names or ()) if isinstance(n, str)))
            module_modes.check_region(sub)      # (train()/eval() in it: modes put back)
    except Exception as e:
        if not isinstance(e, GraphError):   # the user's own exception: see ``escaped``
            where = location_of_traceback(e.__traceback__)
            _ESCAPED.append((f"{format_location(where)}: " if where else "") +
                            f"{type(e).__name__} raised in "
                            f"{_REGION.get(label, 'a tensor-dependent region')}")
        raise
    finally:
        restore_rebound(mark, sub)
    return sub, out


class Rebuilt:
    """The lists and dicts a region's operands are rebuilt as, and the operand containers
    they stand for. ``original(v)``: the operand container that ``v`` is a rebuilt copy
    of, while nothing in the copy (at any depth) has changed since; else ``v``."""

    def __init__(self, operands):
        self._operands = operands
        self._copies = {}           # id(copy) -> (copy, original, contents when rebuilt)

    def note(self, rebuilt) -> None:
        def walk(copy, orig):
            if type(copy) is not type(orig):
                return
            if type(copy) in (list, dict):
                self._copies[id(copy)] = (copy, orig, _contents(copy))
            if isinstance(copy, (list, tuple)) and len(copy) == len(orig):   # namedtuples too
                for c, o in zip(copy, orig):
                    walk(c, o)
            elif type(copy) is dict and list(copy) == list(orig):
                for k in copy:
                    walk(copy[k], orig[k])
        walk(rebuilt, self._operands)

    def original(self, v):
        hit = self._copies.get(id(v))
        if hit is None or hit[0] is not v or _contents(v) != hit[2]:
            return v
        return hit[1]


def _contents(v):
    """The identities of everything a list/dict/tuple holds, at any depth."""
    if type(v) is list or isinstance(v, tuple):
        return (type(v), tuple(_contents(x) for x in v))
    if type(v) is dict:
        return (dict, tuple((k, _contents(x)) for k, x in v.items()))
    return id(v)


_ESCAPED = PerThreadList()       # per thread: see runtime.threads


def escaped() -> int:
    """How many exceptions of the user's (``raise ValueError`` in a tensor branch) left a
    region being traced. Whether that path raises is known only when the graph runs, so
    a trace that went on after one (a ``with`` whose ``__exit__`` swallowed it, an
    ``except`` around a converted call) traced as if it always raised: ``escaped_since``
    tells the front door to refuse it."""
    return len(_ESCAPED)


def escaped_since(mark: int) -> Optional[str]:
    """What escaped a region since ``escaped()`` gave ``mark``, or None."""
    return _ESCAPED[mark] if len(_ESCAPED) > mark else None


_REGION = {"then": "a branch of a tensor condition", "else": "a branch of a tensor condition",
           "body": "the body of a tensor-dependent loop",
           "cond": "the test of a tensor-dependent loop"}


def _finish(sub: Graph, leaves: list, as_tensor: List[Optional[torch.dtype]]) -> None:
    """Set a subgraph's outputs: the leaves that are graph values, as nodes of ``sub``."""
    outs = []
    with building(sub):
        for leaf, dtype in zip(leaves, as_tensor):
            if dtype is None:
                continue
            if isinstance(leaf, Fill):
                leaf = leaf.make()
            if not isinstance(leaf, torch.Tensor):
                leaf = torch.tensor(leaf, dtype=dtype)
            elif leaf.dtype != dtype:
                leaf = leaf.to(dtype)
            outs.append(to_node(sub, leaf))
    sub.outputs = tuple(outs)


def _align_captures(subs: Sequence[Graph]) -> List[Node]:
    """Give every subgraph the same captured inputs, in one order; return the outer values."""
    union: List[Node] = []
    seen = set()
    for sub in subs:
        for outer, _ in sub.captures:
            if id(outer) not in seen:
                seen.add(id(outer))
                union.append(outer)
    for sub in subs:
        for outer in union:
            sub.capture(outer)
        order = {id(outer): i for i, outer in enumerate(union)}
        inner_of = {id(inner): order[id(outer)] for outer, inner in sub.captures}
        explicit = [n for n in sub.nodes if n.op == "placeholder" and id(n) not in inner_of]
        captured = sorted((n for n in sub.nodes if id(n) in inner_of), key=lambda n: inner_of[id(n)])
        rest = [n for n in sub.nodes if n.op != "placeholder"]
        sub.nodes = explicit + captured + rest
        sub.captures.sort(key=lambda pair: order[id(pair[0])])
    return union


def _merge_leaf(a, b, name: str, where: str):
    """How a leaf that two paths produce leaves the construct.

    Returns ("const", value) when both are the same Python value, or ("tensor", meta)
    for a graph output (Python numbers become 0-d tensors).
    """
    ma, mb = _leaf_meta(a), _leaf_meta(b)
    undefined = [getattr(v, "__tograph_undefined__", False) for v in (a, b)]
    if undefined[0] != undefined[1]:
        raise BranchMismatchError(
            f"{where}: variable {name} is assigned on only one path of tensor-dependent "
            f"control flow and used after it; define it on every path (e.g. assign it "
            f"before the `if`)")
    if ma is None and mb is None:
        if a is b or (_is_plain(a) and same_constant(a, b)):    # (-0.0 is not 0.0)
            return "const", a
        if isinstance(a, _NUMBER) and isinstance(b, _NUMBER) and type(a) is type(b):
            dtype = python_number_dtype(a)
            return "tensor", TensorMeta((), dtype)
        raise BranchMismatchError(
            f"{where}: {name} is {_kind(a)} on one path and {_kind(b)} on the other")
    if ma is None or mb is None:
        number, meta = (a, mb) if ma is None else (b, ma)
        if isinstance(number, _NUMBER) and \
                dtype_kind(python_number_dtype(number)) == dtype_kind(meta.dtype):
            return "tensor", meta.join(TensorMeta((), meta.dtype))
        raise BranchMismatchError(
            f"{where}: {name} is {_kind(a)} on one path and {_kind(b)} on the other")
    if ma.dtype != mb.dtype:
        stand_in = _stand_in_beside_tensor(a, ma, b, mb)
        if stand_in is not None:    # a Python number on one path: the tensor's dtype
            return "tensor", stand_in
        raise BranchMismatchError(
            f"{where}: {name} has dtype {ma.dtype} on one path and {mb.dtype} on the other")
    return "tensor", ma.join(mb)


def _stand_in_beside_tensor(a, ma: TensorMeta, b, mb: TensorMeta) -> Optional[TensorMeta]:
    """The merged meta where one path's value stands for a Python number (a 0-d float64
    for a float) and the other's is a tensor of the same kind: the tensor's dtype, as a
    Python number on that path would merge; else None."""
    kinds = [introspection.kind_of(a), introspection.kind_of(b)]
    for number, other, kind in ((ma, mb, kinds), (mb, ma, kinds[::-1])):
        if kind[0] in introspection.NUMBER_KINDS and kind[1] is None and \
                number.shape == () and dtype_kind(number.dtype) == dtype_kind(other.dtype):
            return other.join(TensorMeta((), other.dtype))
    return None


def _is_plain(v) -> bool:
    return v is None or isinstance(v, (bool, int, float, complex, str, bytes, torch.dtype,
                                       torch.device, type(Ellipsis)))


def _kind(v) -> str:
    if getattr(v, "__tograph_undefined__", False):
        return "undefined"
    described = getattr(type(v), "__tograph_describe__", None)   # (our own values)
    if described:
        return described
    meta = _leaf_meta(v)
    if meta is not None:
        return f"a {str(meta)} tensor"
    return f"{type(v).__name__} {v!r}" if _is_plain(v) else f"a {type(v).__name__}"


def _clean(name: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in str(name)).strip("_") or "arg"

def _check_pred(pred: SymbolicTensor, where: str) -> None:
    meta = pred._node.meta
    if meta.shape is not None and meta.is_static and int(torch.Size(meta.shape).numel()) != 1:
        raise GraphError(f"{where}: the condition has shape {tuple(meta.shape)}; Boolean value "
                         f"of a tensor with more than one value is ambiguous")


def _describe_spec(spec) -> str:
    return str(spec).replace("\n", "").replace("  ", "")




def _has_effects(*graphs: Graph) -> bool:
    """Whether running these subgraphs does something besides computing their outputs."""
    return any(node.impure for g in graphs for node in g.walk())
