"""Functional control flow: ``cond`` and ``while_loop``, as ``torch.cond``/``tf.while_loop``.

With a concrete predicate they simply run Python. With a symbolic one they trace both
branches (or the loop test and body) into child graphs and add a single ``cond``
(``while``) node whose outputs replace the branch (loop) results.

Values flow as nested tuples/lists/dicts ("pytrees"). Tensor leaves become subgraph inputs
and outputs; a Python leaf stays a Python value when every path agrees on it, and becomes
a 0-d tensor when paths disagree (a Python counter updated in a tensor loop). Branch
outputs must agree in structure and dtype; differing shapes give a dynamic dimension. Loop
variables keep their dtype (a Python number's dtype may widen); a shape that changes
across iterations becomes dynamic.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence, Tuple

import torch
import torch.utils._pytree as pytree

from .errors import BranchMismatchError, GraphError
from .graph import Graph, Node
from .meta import TensorMeta, meta_empty
from .source_info import format_location, user_location
from .tensor_list import TensorList, stack_list
from .symbolic import (SymbolicTensor, building, contains_symbolic, current_graph,
                       is_symbolic, rebound_mark, record_tuple_outputs, restore_rebound,
                       to_node, wrap_node)

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
    if isinstance(value, bool):
        return torch.bool
    if isinstance(value, int):
        return torch.int64
    return torch.get_default_dtype()


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
        with torch._C.DisableTorchFunction():
            return meta_empty(value.shape, value.dtype)
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

    def __init__(self, meta: TensorMeta, example=None):
        self.meta = meta
        self.example = example

    def make(self) -> torch.Tensor:
        shape = [2 if d is None else d for d in (self.meta.shape or ())] \
            if self.example is None else list(self.example.shape)
        return torch.zeros(shape, dtype=self.meta.dtype)


def _unobservable(v) -> bool:
    return getattr(type(v), "__tograph_unobservable__", False)


def _fill_like(value):
    """``value``'s structure, tensors replaced by zero ``Fill``s, Python values kept."""
    leaves, spec = pytree.tree_flatten(value)
    filled = [Fill(_leaf_meta(v), _example(v)) if _leaf_meta(v) is not None else v
              for v in leaves]
    return pytree.tree_unflatten(filled, spec)


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
    if isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys():
        pairs = {k: zip_structures(a[k], b[k], fn) for k in a}
        return {k: p[0] for k, p in pairs.items()}, {k: p[1] for k, p in pairs.items()}
    return a, b


def reconcile(a, b):
    """Replace an unobservable value on one side by a placeholder shaped like the other."""
    def fill(x, y):
        if _unobservable(x) and not _unobservable(y):
            return _fill_like(y), y
        if _unobservable(y) and not _unobservable(x):
            return x, _fill_like(x)
        return None
    return zip_structures(a, b, fill)


# --------------------------------------------------------------------------- subgraphs
@dataclass
class Slot:
    """One leaf of the values flowing into a subgraph: a tensor input or a Python constant."""
    meta: Optional[TensorMeta]      # None: a Python constant passed as is
    const: Any = None
    example: Any = None


def _trace(parent: Graph, label: str, fn: Callable, slots: List[Slot], spec,
           names=None) -> Tuple[Graph, list, Any]:
    """Trace ``fn`` on placeholders for the tensor slots; returns (graph, out leaves, spec)."""
    sub, out = _trace_tree(parent, label, fn, slots, spec, names)
    out_leaves, out_spec = pytree.tree_flatten(out)
    return sub, out_leaves, out_spec


def _trace_tree(parent: Graph, label: str, fn: Callable, slots: List[Slot], spec, names=None):
    """Trace ``fn`` on placeholders for the tensor slots; returns (graph, its result)."""
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
                    leaves.append(wrap_node(ph, slot.example))
            out = fn(*pytree.tree_unflatten(leaves, spec))
    finally:
        restore_rebound(mark, sub)
    return sub, out


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
        if type(a) is type(b) and (a is b or (_is_plain(a) and a == b)):
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
        raise BranchMismatchError(
            f"{where}: {name} has dtype {ma.dtype} on one path and {mb.dtype} on the other")
    return "tensor", ma.join(mb)


def _is_plain(v) -> bool:
    return v is None or isinstance(v, (bool, int, float, complex, str, bytes, torch.dtype,
                                       torch.device, type(Ellipsis)))


def _kind(v) -> str:
    if getattr(v, "__tograph_undefined__", False):
        return "undefined"
    meta = _leaf_meta(v)
    if meta is not None:
        return f"a {str(meta)} tensor"
    return f"{type(v).__name__} {v!r}" if _is_plain(v) else f"a {type(v).__name__}"


def _clean(name: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in str(name)).strip("_") or "arg"


# --------------------------------------------------------------------------- cond
def cond(pred, true_fn: Callable, false_fn: Callable, operands=(), names=None):
    """``true_fn(*operands)`` if ``pred`` else ``false_fn(*operands)``; one ``cond`` node
    when ``pred`` is symbolic. ``names`` (optional) name the output leaves in errors."""
    operands = tuple(operands) if isinstance(operands, (tuple, list)) else (operands,)
    if not is_symbolic(pred):
        return true_fn(*operands) if pred else false_fn(*operands)
    return staged_cond(pred, true_fn, false_fn, operands, names)


def _check_pred(pred: SymbolicTensor, where: str) -> None:
    meta = pred._node.meta
    if meta.shape is not None and meta.is_static and int(torch.Size(meta.shape).numel()) != 1:
        raise GraphError(f"{where}: the condition has shape {tuple(meta.shape)}; Boolean value "
                         f"of a tensor with more than one value is ambiguous")


def staged_cond(pred, true_fn, false_fn, operands, names=None, location=None):
    location = location or user_location()
    where = format_location(location)
    _check_pred(pred, where)
    graph = _owner_graph(pred, operands)
    flat, spec = pytree.tree_flatten(operands)
    slots = [Slot(_leaf_meta(v), None if _leaf_meta(v) is not None else v, _example(v))
             for v in flat]
    then_g, then_tree = _trace_tree(graph, "then", true_fn, slots, spec, names)
    else_g, else_tree = _trace_tree(graph, "else", false_fn, slots, spec, names)
    then_tree, else_tree = reconcile(then_tree, else_tree)
    then_tree, else_tree = _grown_lists(then_g, then_tree, else_g, else_tree)
    then_out, then_spec = pytree.tree_flatten(then_tree)
    else_out, else_spec = pytree.tree_flatten(else_tree)
    if then_spec != else_spec:
        raise BranchMismatchError(
            f"{where}: the branches of the tensor condition return different structures: "
            f"{_describe_spec(then_spec)} vs {_describe_spec(else_spec)}")
    plans = [_merge_leaf(a, b, _leaf_name(names, then_spec, i), where)
             for i, (a, b) in enumerate(zip(then_out, else_out))]
    dtypes = [meta.dtype if kind == "tensor" else None for kind, meta in plans]
    _finish(then_g, then_out, dtypes)
    _finish(else_g, else_out, dtypes)
    captured = _align_captures([then_g, else_g])
    with building(graph):
        inputs = [to_node(graph, pred)] + [to_node(graph, v) for v in flat if _leaf_meta(v)]
    metas = tuple(meta for kind, meta in plans if kind == "tensor")
    node = graph.add_node("cond", None, tuple(inputs) + tuple(captured), meta=metas,
                          attrs={"n_operands": len(inputs) - 1}, subgraphs=[then_g, else_g],
                          location=location, impure=_has_effects(then_g, else_g))
    examples = [_example(a if not isinstance(a, Fill) else b) if _leaf_meta(a) is not None else None
                for (kind, _), a, b in zip(plans, then_out, else_out) if kind == "tensor"]
    outs = iter(record_tuple_outputs(node, metas, examples))
    leaves = [next(outs) if kind == "tensor" else value for kind, value in plans]
    return pytree.tree_unflatten(leaves, then_spec)


def _grown_lists(then_g, then_tree, else_g, else_tree):
    """Lists of different lengths on the two paths (``append`` in one branch) become
    TensorLists, stacked inside each branch: their length is known only at run time."""
    def stack(a, b):
        listlike = (list, TensorList)
        if not (isinstance(a, listlike) and isinstance(b, listlike)):
            return None
        if isinstance(a, TensorList) == isinstance(b, TensorList):
            if isinstance(a, TensorList) or len(a) == len(b) or not all(
                    isinstance(v, (torch.Tensor, int, float)) for v in a + b):
                return None
        like = next((v for v in (a, b) if isinstance(v, TensorList)), None) or (a + b)[0]
        with building(then_g):
            ta = a if isinstance(a, TensorList) else stack_list(a, like)
        with building(else_g):
            tb = b if isinstance(b, TensorList) else stack_list(b, like)
        return ta, tb
    return zip_structures(then_tree, else_tree, stack)


def _describe_spec(spec) -> str:
    return str(spec).replace("\n", "").replace("  ", "")


# --------------------------------------------------------------------------- while
def while_loop(cond_fn: Callable, body_fn: Callable, loop_vars, names=None):
    """Repeat ``loop_vars = body_fn(*loop_vars)`` while ``cond_fn(*loop_vars)``.

    Returns the final loop variables (a tuple, or the same structure as given). A single
    ``while`` node when the condition is symbolic; Python iteration otherwise (switching
    to a ``while`` node as soon as the condition becomes symbolic).
    """
    as_tuple = isinstance(loop_vars, (tuple, list))
    state = tuple(loop_vars) if as_tuple else (loop_vars,)
    graph, mark = graph_mark(state)
    test = cond_fn(*state)
    while not is_symbolic(test):
        if not test:
            return _as_given(state, loop_vars, as_tuple)
        state = _as_state(body_fn(*state), len(state))
        graph, mark = graph_mark(state)
        test = cond_fn(*state)
    if graph is not None and test._node.graph is graph:
        graph.rollback(mark)          # the test is traced again inside the loop
    owner = current_graph() or test._node.graph.root
    result = staged_while(cond_fn, body_fn, state, names, graph=owner)
    return _as_given(result, loop_vars, as_tuple)


def graph_mark(state):
    """The graph ops on ``state`` record into, and a rollback mark in it (or None, 0)."""
    graph = current_graph()
    if graph is None:
        symbolic = [v for v in pytree.tree_leaves(state) if isinstance(v, SymbolicTensor)]
        graph = symbolic[0]._node.graph.root if symbolic else None
    return graph, (graph.mark() if graph is not None else 0)


def _as_state(out, n: int) -> tuple:
    if n == 1 and not isinstance(out, tuple):
        return (out,)
    return tuple(out)


def _as_given(state, loop_vars, as_tuple):
    if not as_tuple:
        return state[0]
    return list(state) if isinstance(loop_vars, list) else tuple(state)


def staged_while(cond_fn, body_fn, state: tuple, names=None, location=None, graph=None):
    """Trace ``cond_fn``/``body_fn`` into a ``while`` node; returns the final state tuple."""
    location = location or user_location()
    where = format_location(location)
    graph = graph or _owner_graph(state)
    body = lambda *s: _as_state(body_fn(*s), len(state))  # noqa: E731
    for _ in range(_MAX_RETRACES):       # settle unobservable initial values first
        flat, spec = pytree.tree_flatten(state)
        slots = [Slot(_leaf_meta(v), None if _leaf_meta(v) else v, _example(v)) for v in flat]
        body_g, out_tree = _trace_tree(graph, "body", body, slots, spec, names)
        new_state, _ = reconcile(state, out_tree)
        if _same_tree(new_state, state):
            break
        body_g.forget_all()
        state = new_state
    widenable = [_leaf_meta(v) is None or isinstance(v, Fill) for v in flat]
    for _ in range(_MAX_RETRACES):
        out, out_spec = pytree.tree_flatten(reconcile(state, out_tree)[1])
        if out_spec != spec:
            raise BranchMismatchError(
                f"{where}: the loop body changes the structure of the loop variables: "
                f"{_describe_spec(spec)} -> {_describe_spec(out_spec)}")
        changed = False
        for i, (slot, new) in enumerate(zip(slots, out)):
            wider = _widen(slot, new, widenable[i], _leaf_name(names, spec, i), where)
            if wider is not None:
                slots[i] = wider
                changed = True
        if not changed:
            break
        body_g.forget_all()
        body_g, out_tree = _trace_tree(graph, "body", body, slots, spec, names)
    else:
        raise GraphError(f"{where}: the loop variables' types did not settle")
    cond_g, test_out, _ = _trace(graph, "cond", lambda *s: cond_fn(*s), slots, spec, names)
    test_leaves = pytree.tree_leaves(test_out)
    if len(test_leaves) != 1:
        raise GraphError(f"{where}: the loop condition must be a single value")
    test = test_leaves[0]
    if is_symbolic(test):
        _check_pred(test, where)
    dtypes = [None if s.meta is None else s.meta.dtype for s in slots]
    _finish(body_g, out, dtypes)
    _finish(cond_g, [test], [test._node.meta.dtype if is_symbolic(test) else torch.bool])
    captured = _align_captures([cond_g, body_g])
    with building(graph):
        init = []
        for v, slot in zip(flat, slots):
            if slot.meta is None:
                continue
            if isinstance(v, Fill) or _unobservable(v):
                v = Fill(slot.meta, slot.example).make()
            if not isinstance(v, torch.Tensor):
                v = torch.tensor(v, dtype=slot.meta.dtype)
            elif v.dtype != slot.meta.dtype:
                v = v.to(slot.meta.dtype)
            init.append(to_node(graph, v))
    metas = tuple(s.meta for s in slots if s.meta is not None)
    node = graph.add_node("while", None, tuple(init) + tuple(captured), meta=metas,
                          attrs={"n_vars": len(init)}, subgraphs=[cond_g, body_g],
                          location=location, impure=_has_effects(cond_g, body_g))
    examples = [s.example for s in slots if s.meta is not None]
    outs = iter(record_tuple_outputs(node, metas, examples))
    leaves = [next(outs) if s.meta is not None else s.const for s in slots]
    return pytree.tree_unflatten(leaves, spec)


def _has_effects(*graphs: Graph) -> bool:
    """Whether running these subgraphs does something besides computing their outputs."""
    return any(node.impure for g in graphs for node in g.walk())


def _same_tree(a, b) -> bool:
    la, sa = pytree.tree_flatten(a)
    lb, sb = pytree.tree_flatten(b)
    return sa == sb and all(x is y for x, y in zip(la, lb))


def _widen(slot: Slot, new, widenable: bool, name: str, where: str) -> Optional[Slot]:
    """A more general slot if the body's output for it does not fit; else None."""
    new_meta = _leaf_meta(new)
    if slot.meta is None and _unobservable(slot.const):
        if _unobservable(new):
            return None
        if new_meta is not None:
            return Slot(new_meta, None, _example(new))
        if isinstance(new, _NUMBER):
            return Slot(TensorMeta((), python_number_dtype(new)), None,
                        meta_empty((), python_number_dtype(new)))
        return Slot(None, new)
    if slot.meta is None:
        if new_meta is None and (new is slot.const or (_is_plain(new) and new == slot.const
                                                       and type(new) is type(slot.const))):
            return None
        if isinstance(slot.const, _NUMBER):
            dtype = python_number_dtype(slot.const)
            if new_meta is not None:
                dtype = torch.promote_types(dtype, new_meta.dtype)
            elif isinstance(new, _NUMBER):
                dtype = torch.promote_types(dtype, python_number_dtype(new))
            else:
                raise BranchMismatchError(
                    f"{where}: loop variable {name} changes from {_kind(slot.const)} to {_kind(new)}")
            if dtype_kind(dtype) != dtype_kind(python_number_dtype(slot.const)):
                raise KindChange(
                    f"{where}: loop variable {name} starts as {_kind(slot.const)} and becomes "
                    f"{_kind(new)} in the loop; if the loop ran zero times Python would return "
                    f"the {type(slot.const).__name__}. Start it as a number of the same kind "
                    f"(e.g. 0.0 rather than 0)")
            meta = TensorMeta((), dtype)
            if new_meta is not None:
                meta = TensorMeta((), dtype).join(TensorMeta(new_meta.shape, dtype)) \
                    if new_meta.shape != () else meta
            return Slot(meta, None, meta_empty(() if meta.shape is None else
                                               [2 if d is None else d for d in meta.shape], dtype))
        raise BranchMismatchError(
            f"{where}: loop variable {name} changes from {_kind(slot.const)} to {_kind(new)}")
    if new_meta is None:
        if isinstance(new, _NUMBER):
            dtype = torch.promote_types(slot.meta.dtype, python_number_dtype(new))
            if dtype == slot.meta.dtype:
                return None
            new_meta = TensorMeta((), dtype)
        else:
            raise BranchMismatchError(
                f"{where}: loop variable {name} changes from a tensor to {_kind(new)}")
    if new_meta.dtype != slot.meta.dtype:
        dtype = torch.promote_types(slot.meta.dtype, new_meta.dtype)
        if widenable and dtype == new_meta.dtype and \
                dtype_kind(dtype) != dtype_kind(slot.meta.dtype):
            raise KindChange(
                f"{where}: loop variable {name} starts as a Python "
                f"{dtype_kind(slot.meta.dtype)} and becomes a {new_meta.dtype} tensor in the "
                f"loop; if the loop ran zero times Python would return the "
                f"{dtype_kind(slot.meta.dtype)}. Start it as a number of the same kind")
        if not widenable or dtype != new_meta.dtype:
            raise BranchMismatchError(
                f"{where}: loop variable {name} changes dtype from {slot.meta.dtype} to "
                f"{new_meta.dtype} in the loop body")
        joined = TensorMeta(slot.meta.shape, dtype).join(TensorMeta(new_meta.shape, dtype))
        return Slot(joined, None, meta_empty(_hint(joined, slot.example), dtype))
    joined = slot.meta.join(new_meta)
    if joined == slot.meta:
        return None
    return Slot(joined, None, meta_empty(_hint(joined, slot.example), joined.dtype))


def _hint(meta: TensorMeta, example) -> list:
    if meta.shape is None:
        return list(example.shape) if example is not None else [2]
    if example is not None and example.dim() == len(meta.shape):
        return [e if d is None else d for e, d in zip(example.shape, meta.shape)]
    return [2 if d is None else d for d in meta.shape]
