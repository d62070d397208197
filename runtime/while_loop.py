"""``while_loop``: Python iteration while the test is a Python value, one ``while`` node
from the moment it is symbolic.

Loop variables keep their dtype (a Python number may widen within its kind); a shape that
changes across iterations becomes a dynamic dimension. The body is traced again until the
loop-carried types settle.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch
import torch.utils._pytree as pytree

from . import grad_flags, inference_ops, loop_options, path_values, region_state, tensor_state, views
from .grad_flags import grad_of
from .constant_keys import same_constant
from .introspection import kind_of, mark, merged_kind
from .errors import BranchMismatchError, GraphError
from .meta import TensorMeta, meta_empty
from .source_info import format_location, user_location
from .subgraphs import (_MAX_RETRACES, _NUMBER, Fill, KindChange, Slot, _align_captures,
                        _check_pred, _describe_spec, _example, _finish, _has_effects,
                        _is_plain, _kind, _leaf_meta, _leaf_name, _owner_graph, _trace,
                        _trace_tree, _unobservable, dtype_kind, python_number_dtype, with_number,
                        reconcile)
from .symbolic import (SymbolicTensor, building, current_graph, is_symbolic,
                       record_tuple_outputs, to_node)


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
    """Trace ``cond_fn``/``body_fn`` into a ``while`` node; returns the final state tuple.

    Python numbers (and tensors) the body changes outside the loop variables (a
    ``nonlocal`` counter, a context manager's count: ``region_state``) become loop
    variables too, set into their locations while the body and test are traced, and
    set to the loop's results after it."""
    n_vars = len(state)
    locations: list = []

    def located(fn, carry_out):
        def run(*s):
            for loc, value in zip(locations, s[n_vars:]):
                loc.set(value)
            try:
                out = fn(*s[:n_vars])
                return (_as_state(out, n_vars) + tuple(loc.get() for loc in locations)) \
                    if carry_out else out
            finally:
                for loc in locations:
                    loc.reset()
        return run
    body = located(body_fn, True)
    test = located(cond_fn, False)
    out = _staged_while(test, body, state, names, location, graph, locations)
    for loc, value in zip(locations, out[n_vars:]):
        loc.assign(value)
    return out[:n_vars]


def _staged_while(cond_fn, body, state: tuple, names, location, graph, locations: list):
    location = location or user_location()
    where = format_location(location)
    graph = graph or _owner_graph(state)
    flat, spec, slots, by_path = _slots_for(state, {})
    for _ in range(2 * _MAX_RETRACES):
        carry: list = []
        body_g, out_tree = _trace_tree(graph, "body", body, slots, spec, names, flat,
                                       carry=carry)
        new = region_state.merge(carry)
        if new:     # state the body changes: carry it as loop variables and trace again
            body_g.forget_all()
            locations.extend(new)
            state = tuple(state) + tuple(loc.before for loc in new)
            names = (tuple(names) if names is not None else ()) + tuple(
                loc.label for loc in new) if names is not None and \
                len(names) == len(state) - len(new) else names
            flat, spec, slots, by_path = _slots_for(state, by_path)
            continue
        new_state, _ = reconcile(state, out_tree)
        if not _same_tree(new_state, state):
            # a value no path can observe yet (the return value) met a real one: start
            # it as a placeholder of that structure and trace again
            body_g.forget_all()
            state = new_state
            flat, spec, slots, by_path = _slots_for(state, by_path)
            continue
        out, out_spec = pytree.tree_flatten(reconcile(state, out_tree)[1])
        if out_spec != spec:
            raise BranchMismatchError(
                f"{where}: the loop body changes the structure of the loop variables: "
                f"{_describe_spec(spec)} -> {_describe_spec(out_spec)}")
        changed = False
        paths = list(by_path)
        for i, (slot, new) in enumerate(zip(slots, out)):
            options = loop_options.widen(slot, new, _leaf_name(names, spec, i), where)
            if options is not None:     # a Python value chosen per run (loop_options)
                if options is not slot:
                    slots[i] = by_path[paths[i]] = options
                    changed = True
                continue
            widenable = _leaf_meta(flat[i]) is None or isinstance(flat[i], Fill)
            wider = _widen(slot, new, widenable, _leaf_name(names, spec, i), where)
            if wider is not None:
                if slot.meta is None and _unobservable(slot.const):    # (no path reads it:
                    wider.grad, wider.kind = grad_of(new), kind_of(new)  # the body's own)
                else:
                    wider.grad, wider.kind = slot.grad, slot.kind
                wider.varies = True         # (a new shape: strides known only at run time)
                slots[i] = by_path[paths[i]] = wider
                changed = True
            if slots[i].meta is not None and not slots[i].varies and \
                    not isinstance(new, Fill) and not tensor_state.same_layout(slots[i], new):
                slots[i].varies = True      # a layout the iterations change (tensor_state)
                changed = True
            if slots[i].meta is not None and not isinstance(new, Fill):
                kind = merged_kind([slots[i].kind, kind_of(new)])
                if kind != slots[i].kind:   # a number on entry, a tensor after: "mixed"
                    slots[i].kind = kind
                    changed = True
            if slots[i].meta is not None and slots[i].grad is not None and \
                    grad_of(new) != slots[i].grad:
                slots[i].grad = None     # the iterations run decide (see grad_flags)
                changed = True
        if not changed:
            break
        body_g.forget_all()
    else:
        raise GraphError(f"{where}: the loop variables' types did not settle")
    cond_g, test_out, _ = _trace(graph, "cond", lambda *s: cond_fn(*s), slots, spec, names)
    test_leaves = pytree.tree_leaves(test_out)
    if len(test_leaves) != 1:
        raise GraphError(f"{where}: the loop condition must be a single value")
    test = test_leaves[0]
    if is_symbolic(test):
        _check_pred(test, where)
    _refuse_zero_iteration_identity(flat, slots, out, body_g, where)
    _refuse_chosen_containers(out_tree, where)
    dtypes = [None if s.meta is None else s.meta.dtype for s in slots]
    with building(body_g):
        out = [v if s.options is None else loop_options.index_of(v, s.options)
               for v, s in zip(out, slots)]
    _finish(body_g, out, dtypes)
    _finish(cond_g, [test], [test._node.meta.dtype if is_symbolic(test) else torch.bool])
    captured = _align_captures([cond_g, body_g])
    with building(graph):
        init = []
        for v, slot in zip(flat, slots):
            if slot.meta is None:
                continue
            if slot.options is not None:
                v = loop_options.index_of(v, slot.options)
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
    leaves = [v if s.options is None else loop_options.chosen(v, s.options)
              for v, s in zip(leaves, slots)]
    views.follow(leaves, flat, out)     # (zero iterations: the values flowing in)
    for leaf, slot, first, last in zip(leaves, slots, flat, out):
        if is_symbolic(leaf):
            leaf._node.attrs[grad_flags.KEY] = slot.grad
            leaf._node.attrs[inference_ops.KEY] = inference_ops.merge(
                v for v in (first, last) if not isinstance(v, Fill))
            if slot.grad is not False:  # (zero iterations hand back the initial value)
                tensor_state.merge_leaves(leaf, [v for v in (first, last)
                                                 if not isinstance(v, Fill)])
            mark(leaf, slot.kind)
            if slot.varies:
                leaf._node.attrs[tensor_state.LAYOUT_VARIES] = True
    return pytree.tree_unflatten(leaves, spec)




def _refuse_chosen_containers(out_tree, where: str) -> None:
    """GraphError where the body hands back a list or dict that a tensor condition in it
    chose by the path taken (``if x[0] > 3: return a`` in a tensor ``while``): the loop's
    result is a new container, while eager's is that path's object (``path_values``)."""
    from .control_flow import _containers
    if any(path_values.identity_choice(v) is not None for v in _containers(out_tree)):
        raise GraphError(f"{where}: a list or dict that a tensor condition in the loop "
                         f"chose by the path taken leaves the loop; the loop hands back a "
                         f"new container, not that path's object")


def _refuse_zero_iteration_identity(flat, slots, out, body_g, where: str) -> None:
    """A loop variable the body rebinds is the initial tensor itself when no iteration
    runs (``t = x; while ...: t = t * 2``) and a new one otherwise: where converted code
    compares with ``is`` and another local still reaches that tensor, refused (as a
    cond's result that is an operand on one path only, ``control_flow``)."""
    from .control_flow import compares_values, refuse_reached
    if not compares_values():
        return
    tensors = [i for i, s in enumerate(slots) if s.meta is not None]
    varying = {}
    for j, i in enumerate(tensors):
        first, last = flat[i], out[i]
        if not isinstance(first, torch.Tensor):
            continue
        node = getattr(last, "_node", None)
        kept = node is not None and node.op == "placeholder" and node.graph is body_g and \
            body_g.inputs.index(node) == j
        if not kept:
            varying[id(first)] = first
    refuse_reached(varying, where, "when the loop runs no iteration")


def _slots_for(state, known: dict):
    """Flat leaves, spec and slots of ``state``; a leaf at a path already in ``known``
    keeps its (possibly widened) slot. Returns (flat, spec, slots, slot by path)."""
    pairs, spec = pytree.tree_flatten_with_path(state)
    flat, slots, by_path = [], [], {}
    for path, value in pairs:
        slot = known.get(path)
        if slot is not None and slot.kind is None and slot.meta is None and \
                _unobservable(slot.const) and not _unobservable(value):
            slot.kind = kind_of(value)      # (a variable the loop binds first: the body's kind)
        if slot is None:
            meta = _leaf_meta(value)
            slot = Slot(meta, None if meta is not None else value, _example(value),
                        grad_of(value), value.kind if isinstance(value, Fill) else
                        kind_of(value),
                        meta is not None and tensor_state.layout_of(value) is None)
        flat.append(value)
        slots.append(slot)
        by_path[path] = slot
    return flat, spec, slots, by_path


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
        if new_meta is None and (new is slot.const or (_is_plain(new) and
                                                       same_constant(new, slot.const))):
            return None                 # (-0.0 is not 0.0: constant_keys)
        if isinstance(slot.const, _NUMBER):
            dtype = python_number_dtype(slot.const)
            if new_meta is not None:        # (the number beside a tensor: a Python scalar)
                dtype = with_number(new_meta.dtype, slot.const)
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
            dtype = with_number(slot.meta.dtype, new)
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
