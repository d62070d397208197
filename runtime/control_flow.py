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

import dis
import sys
import types
import weakref
from typing import Callable

import torch
import torch.utils._pytree as pytree

from . import (grad_flags, inference_ops, made_objects, path_values, region_state,
               size_hints, tensor_state, views)
from .errors import BranchMismatchError, GraphError
from .graph import same_tuple
from .grad_flags import grad_of
from .path_structures import choose_structures, reached_elsewhere, reached_ids
from .introspection import kind_of, mark, merged_kind
from .source_info import format_location, user_location
from .subgraphs import (Fill, Rebuilt, Slot, _align_captures, _check_pred, _describe_spec, _example,
                        _finish, _has_effects, _leaf_meta, _leaf_name, _merge_leaf,
                        _owner_graph, _trace_tree, reconcile, zip_structures)
from .symbolic import building, is_symbolic, record_tuple_outputs, to_node
from .tensor_list import TensorList, stack_list
from .threads import PerThreadList


# --------------------------------------------------------------------------- cond
def cond(pred, true_fn: Callable, false_fn: Callable, operands=(), names=None):
    """``true_fn(*operands)`` if ``pred`` else ``false_fn(*operands)``; one ``cond`` node
    when ``pred`` is symbolic. ``names`` (optional) name the output leaves in errors."""
    operands = tuple(operands) if isinstance(operands, (tuple, list)) else (operands,)
    if not is_symbolic(pred):
        return true_fn(*operands) if pred else false_fn(*operands)
    return staged_cond(pred, true_fn, false_fn, operands, names)




def staged_cond(pred, true_fn, false_fn, operands, names=None, location=None):
    location = location or user_location()
    where = format_location(location)
    _check_pred(pred, where)
    graph = _owner_graph(pred, operands)
    flat, spec = pytree.tree_flatten(operands)
    slots = [Slot(_leaf_meta(v), None if _leaf_meta(v) is not None else v, _example(v),
                  grad_of(v), kind_of(v), _leaf_meta(v) is not None and tensor_state.layout_of(v) is None)
             for v in flat]
    then_carry, else_carry = [], []       # Python state the branches change (region_state)
    then_ops, else_ops = Rebuilt(operands), Rebuilt(operands)
    then_g, then_tree = _trace_tree(graph, "then", true_fn, slots, spec, names, flat,
                                    carry=then_carry, originals=then_ops)
    else_g, else_tree = _trace_tree(graph, "else", false_fn, slots, spec, names, flat,
                                    carry=else_carry, originals=else_ops)
    noted = len(_COPIED)
    one_sided = _note_copies(then_tree, else_tree)
    shared = (then_tree, else_tree, then_ops, else_ops)     # as the branches left them
    outer = _visible(graph)
    _refuse_path_identity(flat, then_g, then_tree, else_g, else_tree, where)
    varying = _varying_containers(*shared, where)
    locations = region_state.merge(then_carry, else_carry)
    carried = bool(locations)
    if carried:         # each location's value per path leaves the cond with the results
        locations, contents, then_idx, else_idx = region_state.choose_contents(
            locations, then_carry, else_carry)
        then_tree = (then_tree, region_state.values_on(then_carry, locations, then_g),
                     then_idx)
        else_tree = (else_tree, region_state.values_on(else_carry, locations, else_g),
                     else_idx)
    then_tree, else_tree = reconcile(then_tree, else_tree)
    then_tree, else_tree = made_objects.unify(then_tree, else_tree, operands)   # (one per path)
    then_tree, else_tree = _grown_lists(then_g, then_tree, else_g, else_tree)
    if carried:         # (the state only: carried locations get no PathChoice)
        (then_state, *then_rest), (else_state, *else_rest) = then_tree, else_tree
        then_state, else_state = choose_structures(then_state, else_state)
        then_tree, else_tree = (then_state, *then_rest), (else_state, *else_rest)
    else:
        then_tree, else_tree = choose_structures(then_tree, else_tree)
    if varying:         # which path ran: 0 / 1, a graph output (see _varying_containers)
        then_tree, else_tree = (then_tree, 0), (else_tree, 1)
    then_out, then_spec = pytree.tree_flatten(then_tree)
    else_out, else_spec = pytree.tree_flatten(else_tree)
    if then_spec != else_spec:
        raise BranchMismatchError(
            f"{where}: the branches of the tensor condition return different structures: "
            f"{_describe_spec(then_spec)} vs {_describe_spec(else_spec)}")
    chosen = path_values.choose(then_g, then_out, else_g, else_out)   # "a" or "b": an index
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
    views.follow(leaves, then_out, else_out)
    for leaf, a, b in zip(leaves, then_out, else_out):     # whichever path runs decides
        if is_symbolic(leaf):
            leaf._node.attrs[grad_flags.KEY] = grad_flags.merge(
                grad_of(v) for v in (a, b) if not isinstance(v, Fill))
            leaf._node.attrs[inference_ops.KEY] = inference_ops.merge(
                v for v in (a, b) if not isinstance(v, Fill))
            mark(leaf, merged_kind(kind_of(v) for v in (a, b) if not isinstance(v, Fill)))
            size_hints.note_chosen(leaf, (a, b))        # an int on each path, a size on one
            tensor_state.merge_layouts(leaf, [v for v in (a, b) if not isinstance(v, Fill)])
            tensor_state.merge_leaves(leaf, [v for v in (a, b) if not isinstance(v, Fill)])
    result = pytree.tree_unflatten(path_values.wrap(leaves, chosen), then_spec)
    which = None
    if varying:
        result, which = result
    if carried:
        result, values, indices = result
        for loc, value in zip(locations, values):
            loc.assign(value)
        region_state.assign_contents(contents, indices)
    kept = set()
    result = _same_containers(result, *shared, kept, varying, which, outer)
    _COPIED[noted:] = [c for c in _COPIED[noted:] if id(c[0]) not in kept]  # not copies
    if one_sided:
        _note_result_copies(result, kept)
    return result


def _visible(graph) -> set:
    """ids of ``graph`` and its enclosing graphs: where a kept container's tensors live."""
    out = set()
    while graph is not None:
        out.add(id(graph))
        graph = graph.parent
    return out


def _outer_only(container, outer) -> bool:
    """Whether nothing ``container`` holds is a tensor of a branch's own graph: a container
    the branch made (``return {"y": x * 2}`` on one path) holds the branch's results, which
    only the ``cond``'s outputs carry out."""
    return not any(is_symbolic(leaf) and id(leaf._node.graph) not in outer
                   for leaf in pytree.tree_leaves(container))


def _same_containers(result, a, b, a_ops, b_ops, kept, varying=frozenset(), which=None,
                     outer=None):
    """``result`` with the list or dict that both paths hand back as the very same object
    (``return x * 2, lst`` and ``return x - 1, lst``) put back in place of the ``cond``'s
    rebuilt copy: eager's result *is* that object on either path (``out[1] is lst``).
    Its contents are already right: what a branch changed in it is carried state, assigned
    back to the object by ``region_state`` whichever path runs. A path where the value is
    unassigned (an early ``return`` not taken) never shows it: the other path decides.
    A branch's unchanged copy of an operand container (``a_ops``/``b_ops``: a branch gets
    its operands rebuilt) stands for the operand itself. A pair of two different
    containers in ``varying`` (an existing one on at least one path) stays the rebuilt
    copy, noted (``path_values.note_identity``) so that a result holding it hands back,
    per call, the object of the path the run took (``which``: its index)."""
    a, b = a_ops.original(a), b_ops.original(b)
    if _unassigned(b):
        b = a
    elif _unassigned(a):
        a = b
    if isinstance(a, (list, dict)) and a is b and (outer is None or _outer_only(a, outer)):
        kept.add(id(a))
        return a
    noted = varying.get((id(a), id(b)))
    if noted is not None and type(result) is not type(a):    # (a TensorList: lengths differ)
        path_values.note_identity(result, which, tuple(
            v if noted[i] else None for i, v in enumerate((a, b))))
        return result
    if type(a) is not type(b) or type(result) is not type(a):
        return result

    def inner(r, x, y):
        return _same_containers(r, x, y, a_ops, b_ops, kept, varying, which, outer)
    out = result
    if isinstance(result, list) and len(result) == len(a) == len(b):
        out = [inner(r, x, y) for r, x, y in zip(result, a, b)]
    elif (type(result) is tuple or hasattr(result, "_fields")) and \
            len(result) == len(a) == len(b):        # (namedtuples too)
        out = same_tuple(result, [inner(r, x, y) for r, x, y in zip(result, a, b)])
    elif type(result) is dict and result.keys() == a.keys() == b.keys():
        out = {k: inner(result[k], a[k], b[k]) for k in result}
    if noted is not None and isinstance(out, (list, dict)):
        path_values.note_identity(out, which, tuple(
            v if noted[i] else None for i, v in enumerate((a, b))))
    return out


def _varying_containers(a, b, a_ops, b_ops, where: str) -> dict:
    """The pairs of different lists or dicts that the two paths leave in one place of the
    results where at least one existed before the condition (another name reaches it: an
    argument, a global, a local): ``r = a if t else b``, ``return lst`` / ``return [x]``.
    Eager's result *is* that object on its path; the ``cond`` hands back a new container.
    {(id, id): (then's existed, else's existed)}, for ``_same_containers`` to note; a
    GraphError where converted code compares with ``is`` (``r is a`` depends on the path)."""
    pairs = []

    def walk(x, y):
        x, y = a_ops.original(x), b_ops.original(y)
        if _unassigned(x) or _unassigned(y) or x is y or type(x) is not type(y):
            return
        if isinstance(x, (list, dict)):             # (OrderedDicts too)
            pairs.append((x, y))
        if isinstance(x, (list, tuple)) and len(x) == len(y):
            for u, v in zip(x, y):
                walk(u, v)
        elif type(x) is dict and x.keys() == y.keys():
            for k in x:
                walk(x[k], y[k])
    walk(a, b)
    if not pairs:
        return {}
    unique = {id(v): v for pair in pairs for v in pair}
    existing = reached_ids(unique.values())
    if any(path_values.identity_choice(v) is not None for v in unique.values()):
        raise GraphError(f"{where}: a list or dict that an inner tensor condition chose "
                         f"by the path taken is one path's result of this one")
    found = {(id(x), id(y)): (id(x) in existing, id(y) in existing)
             for x, y in pairs if id(x) in existing or id(y) in existing}
    if found and compares_values():
        raise GraphError(f"{where}: a variable is an existing list or dict on one path of "
                         f"the tensor condition and another otherwise, and the code "
                         f"compares with 'is': the answer depends on the path taken")
    return found if found and path_values.allowed() else {}


def _unassigned(v) -> bool:
    return getattr(type(v), "__tograph_undefined__", False) or \
        getattr(type(v), "__tograph_unobservable__", False)


def _refuse_path_identity(flat, then_g, then_tree, else_g, else_tree, where: str) -> None:
    """GraphError where a result is an operand tensor itself on one path only (``y = x;
    if t: y = x * 2``), that tensor is still reached by another name (``x``) and the
    converted code on the stack compares with ``is``: ``y is x`` depends on the path, and
    the ``cond`` hands back a new tensor on both."""
    if not compares_values():
        return
    a_leaves, a_spec = pytree.tree_flatten(then_tree)
    b_leaves, b_spec = pytree.tree_flatten(else_tree)
    if a_spec != b_spec:
        return
    tensors = [v for v in flat if _leaf_meta(v) is not None]

    def operand(v, sub):
        if not is_symbolic(v) or v._node.op != "placeholder" or v._node.graph is not sub:
            return None
        index = sub.inputs.index(v._node)
        return tensors[index] if index < len(tensors) else None
    varying = {}
    for a, b in zip(a_leaves, b_leaves):
        pa, pb = operand(a, then_g), operand(b, else_g)
        if pa is not pb:
            varying.update({id(p): p for p in (pa, pb) if p is not None})
    refuse_reached(varying, where, "on one path of the tensor condition")


def refuse_reached(varying: dict, where: str, which: str) -> None:
    """GraphError where one of ``varying`` (id -> tensor: a region's result is that very
    tensor ``which``, a new one otherwise) is still reached by a local of the converted
    frames on the stack: ``y is x`` would depend on the path the run takes. Called only
    when the converted code compares values with ``is`` (``compares_values``)."""
    if not varying:
        return
    from .operators.state_aliases import _roots
    from .outputs import reachable
    # (not the caller's arguments: the caller compares nothing while the code runs)
    if any(id(v) in varying for v in reachable([v for _, v in _roots(arguments=False)])):
        raise GraphError(f"{where}: a variable is an existing tensor {which} and a new one "
                         f"otherwise, and the code compares with 'is': the answer depends "
                         f"on the path taken")


def compares_values() -> bool:
    """Whether converted code on the stack compares two values with ``is``: the right
    operand not a constant, a global or an attribute (``y is None``, ``type(t) is
    torch.Tensor`` compare with no tensor that a cond could hand back), nor a closure's
    variable that holds a function or class (transformers' ``type(self).forward is
    forward_with_checkpointing``, in every decoder layer: it made a dynamic trace of
    GPT-2/LLaMA with a KV cache and no mask refuse sdpa's ``if ... kv_length > q_length:
    key = key[..., :q_length, :]`` on the cache's keys, one trace per length)."""
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_filename.startswith("<tograph generated") and _is_of_values(code, frame):
            return True
        frame = frame.f_back
    return False


_IS_OPERANDS = weakref.WeakKeyDictionary()     # code -> (right operands, nested code does)

_NAMED = ("LOAD_CONST", "LOAD_GLOBAL", "LOAD_ATTR", "LOAD_METHOD")
_NOT_VALUES = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, type,
               types.ModuleType)


def _is_of_values(code, frame=None) -> bool:
    """Whether ``code`` (running in ``frame``, if given) compares values with ``is``."""
    found = _IS_OPERANDS.get(code)
    if found is None:
        ins = [i for i in dis.get_instructions(code) if i.opname not in ("CACHE", "PRECALL")]
        operands = tuple((ins[k - 1].opname, ins[k - 1].argval) for k, i in enumerate(ins)
                         if i.opname == "IS_OP" and k > 0 and ins[k - 1].opname not in _NAMED)
        found = operands, any(_is_of_values(c) for c in code.co_consts
                              if hasattr(c, "co_code"))
        _IS_OPERANDS[code] = found
    operands, nested = found
    return nested or any(not _names_no_value(code, frame, op, name) for op, name in operands)


def _names_no_value(code, frame, op: str, name) -> bool:
    """Whether the operand ``op name`` of an ``is`` in ``frame`` is a closure's variable
    holding a function, class or module (no tensor or container a cond hands back)."""
    if frame is None or op != "LOAD_DEREF" or name not in code.co_freevars:
        return False
    return isinstance(frame.f_locals.get(name), _NOT_VALUES)


def _note_copies(then_tree, else_tree) -> bool:
    """A branch's results may hold a list or dict that existed before (``return x,
    cleanup`` in a branch): the ``cond`` hands back a copy. That is exact while the
    original stays as it is; ``copies_changed`` (asked when the trace ends) says whether
    the code went on to change it (``cleanup[0] += 1`` in a ``finally``). True where such
    a container is a result on one path only (see ``_note_result_copies``)."""
    found = reached_elsewhere((then_tree, else_tree))
    if not found:
        return False
    where = format_location(user_location())
    for v in found:
        _COPIED.append((v, _contents(v), where))
    then_ids = {id(v) for v in _containers(then_tree)}
    else_ids = {id(v) for v in _containers(else_tree)}
    return any((id(v) in then_ids) != (id(v) in else_ids) for v in found)


def _note_result_copies(result, kept=frozenset()) -> None:
    """After a ``cond`` where a list or dict another name reaches is a result on one path
    only (``b = a if t else list(a)``): ``b`` is ``a`` itself on that path in eager, a new
    container in the graph. Exact while nobody changes it; ``copies_changed`` (asked when
    the trace ends) says whether the code changed it (``b.append(v)`` would grow ``a``)."""
    where = format_location(user_location())
    for v in _containers(result):
        if id(v) not in kept:           # (the original itself: not a copy)
            _COPIED.append((v, _contents(v), where))


def _containers(tree) -> list:
    """The lists and dicts a branch's results (or a cond's result) hold, inside tuples too."""
    found, seen, stack = [], set(), [tree]
    while stack:
        v = stack.pop()
        if type(v) in (list, dict):
            if id(v) not in seen:
                seen.add(id(v))
                found.append(v)
                stack.extend(dict.values(v) if type(v) is dict else v)
        elif isinstance(v, tuple):
            stack.extend(v)
    return found


def _contents(v) -> tuple:
    return tuple((k, id(x)) for k, x in dict.items(v)) if type(v) is dict else \
        tuple(id(x) for x in v)


_COPIED = PerThreadList()   # (per thread) (container, its contents then, where): _note_copies


def copies_mark() -> int:
    return len(_COPIED)


def copies_changed(mark: int):
    """The first message about a container copied out of a ``cond`` since ``mark``
    (``copies_mark``) that was changed afterwards, or None; forgets them."""
    try:
        for v, contents, where in _COPIED[mark:]:
            if _contents(v) != contents:
                return (f"{where}: a branch of the tensor condition gives a list or dict "
                        f"that another name also reaches, and the code changes it after "
                        f"the condition; the graph hands back a copy of it as it was")
        return None
    finally:
        del _COPIED[mark:]


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
        like = next((v for v in (a, b) if isinstance(v, TensorList)), None)
        if like is None:        # (not ``or``: a TensorList's truth is its run-time length)
            like = (a + b)[0]
        with building(then_g):
            ta = a if isinstance(a, TensorList) else stack_list(a, like)
        with building(else_g):
            tb = b if isinstance(b, TensorList) else stack_list(b, like)
        return ta, tb
    return zip_structures(then_tree, else_tree, stack)

