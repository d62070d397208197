"""Counted loops: a ``while`` whose test is ``i < N`` on a counter that steps by a constant
runs as a Python ``for i in range(start, N, step)``, and row products it reads are batched.

A tensor ``for x_t in xs`` (and ``for i in range(n)`` staged as a loop) traces to a
``while`` whose loop variable ``i`` starts at a constant 0-d integer, whose test is
``lt(i, N)`` with a Python int ``N`` and nothing else, and whose body returns
``add(i, step)`` for ``i`` and reads ``i`` only as the index of ``getitem`` nodes. Such a
loop runs exactly ``len(range(start, N, step))`` iterations, so the executor runs it with
the counter as a Python int (``counted``): no 0-d index tensor, no ``lt``, no ``bool()``
and a plain int index per iteration (``x[i]`` with an int is the same view as with a 0-d
integer tensor). Only when nothing after the loop reads the counter's final value (the
pass marks the loop ``COUNTER``; the executor checks the subgraphs again, as later passes
may have changed them).

Row products (``batch_rows``): in such a loop, ``matmul(xs[i], W)`` or
``linear(xs[i], W, b)`` with ``xs``, ``W`` (and ``b``) captured from outside (the same
every iteration) becomes ``XW[i]``, with ``XW = matmul(xs, W)`` computed once before the
loop: one large product instead of one small one per step (an RNN's input projection),
as ``batch_matmul`` does for unrolled loops. Only when the rows visited are at least half
of ``xs``'s first dimension and all lie in it (a loop that stops early would compute too
much; an index out of range must raise where eager raises), nothing in the loop has an
effect and neither operand may be changed in place. The batched product rounds like any
other GEMM of the same rows (within float tolerance of the per-row products); autograd
records it as eager would record the product of the rows.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch

from ..graph import Graph, Node, iter_nodes
from ..kernels.launch import FusedKernel
from ..kernels.loop import KernelLoop, KernelWhile
from ..kernels.loop_product import ProductLoop
from ..meta import TensorMeta
from .licm import _capture
from .rewrite import Uses, bump, facts_for, graphs_post_order, has_effect, inputs_of

COUNTER = "counter"         # attrs key of a ``while``: the counter's loop-variable index
_ROW_PRODUCTS = ("matmul", "linear")


def counted_loops(graph: Graph) -> Graph:
    """Mark the counted ``while`` loops of ``graph`` and batch their row products."""
    for g in graphs_post_order(graph):
        uses = None
        for node in list(g.nodes):
            if node.op != "while" or node.graph is not g:
                continue
            uses = uses or Uses(g)
            k = _counter_index(node, uses)
            if k is None:
                continue
            if node.attrs.get(COUNTER) != k:
                node.attrs[COUNTER] = k
                bump()
            _capture_constants(g, node)
            _batch_rows(graph, g, node, counted(node))
    return graph


def counted(loop: Node) -> Optional[Tuple[int, int, int, int]]:
    """``(k, start, stop, step)`` when ``loop`` is marked counted and its subgraphs still
    have the counted form for loop variable ``k``; else None."""
    k = loop.attrs.get(COUNTER)
    if k is None or loop.op != "while":
        return None
    return _form(loop, k)


# ----------------------------------------------------------------------------- matching
def _counter_index(loop: Node, parent_uses: Uses) -> Optional[int]:
    """The loop variable that counts ``loop`` when nothing after it reads its value."""
    cond = loop.subgraphs[0]
    test = _test(cond)
    if test is None:
        return None
    k = cond.inputs.index(test.args[0])
    if _form(loop, k) is None:
        return None
    for reader in parent_uses.readers(loop):
        if reader.op != "get" or reader.attrs.get("index") == k:
            return None
    if any(v is loop for v in iter_nodes(loop.graph.outputs)):
        return None
    return k


def _test(cond: Graph) -> Optional[Node]:
    outputs = cond.outputs
    if not isinstance(outputs, (tuple, list)) or len(outputs) != 1:
        return None
    test = outputs[0]
    if not isinstance(test, Node) or test.op != "lt" or test.kwargs or len(test.args) != 2:
        return None
    index, stop = test.args
    if not isinstance(index, Node) or index.op != "placeholder" or type(stop) is not int:
        return None
    if any(n is not test and n.op != "placeholder" for n in cond.nodes):
        return None
    return test


def _form(loop: Node, k: int) -> Optional[Tuple[int, int, int, int]]:
    n_vars = loop.attrs.get("n_vars", 0)
    cond, body = loop.subgraphs
    test = _test(cond)
    if not 0 <= k < n_vars or test is None or test.args[0] is not cond.inputs[k]:
        return None
    start = _int_constant(loop.args[k])
    meta = loop.meta[k] if isinstance(loop.meta, tuple) else None
    if start is None or not isinstance(meta, TensorMeta) or meta.dtype != torch.int64:
        return None
    index = body.inputs[k]
    outputs = list(body.outputs) if isinstance(body.outputs, (tuple, list)) else []
    if len(outputs) != n_vars:
        return None
    step_node = outputs[k]
    if not isinstance(step_node, Node) or step_node.op != "add" or step_node.kwargs or \
            len(step_node.args) != 2 or step_node.args[0] is not index or \
            type(step_node.args[1]) is not int or step_node.args[1] < 1:
        return None
    if sum(o is step_node for o in outputs) != 1 or any(o is index for o in outputs):
        return None
    if step_node.graph is not body:
        return None
    for node in body.nodes:
        if node is step_node or node.op == "placeholder":
            continue
        reads = inputs_of(node)
        if step_node in reads:
            return None
        if index in reads and not (node.op == "getitem" and len(node.args) == 2 and
                                   node.args[1] is index and node.args[0] is not index and
                                   not node.kwargs):
            return None
    return k, start, test.args[1], step_node.args[1]


def _int_constant(value) -> Optional[int]:
    """The Python int a 0-d int64 constant node holds, else None."""
    if not isinstance(value, Node):
        return None
    if value.op == "tensor" and len(value.args) == 1 and type(value.args[0]) is int and \
            set(value.kwargs) <= {"dtype"} and value.kwargs.get("dtype", torch.int64) is \
            torch.int64:
        return value.args[0]
    if value.op == "constant":
        held = value.attrs.get("value")
        if isinstance(held, torch.Tensor) and held.dim() == 0 and held.dtype == torch.int64 \
                and not held.requires_grad:
            return int(held)
    return None


# ----------------------------------------------------------------------------- row products
def _capture_constants(graph: Graph, loop: Node) -> None:
    """Pass the tensor constants a counted loop's body reads (a module's weights, traced
    as ``constant`` nodes in the body) in as captures, copied before the loop: the same
    objects, read the same way, but now operands the row products (``_batch_rows``) and a
    ``KernelLoop`` take (``to_graph(model)`` of an RNN: ``xs[i] @ self.w_ih`` batched and
    ``h @ self.w_hh`` absorbed into the step's kernel, as for a function given weights)."""
    body = loop.subgraphs[1]
    found = [n for n in body.nodes if n.op == "constant" and
             isinstance(n.attrs.get("value"), torch.Tensor) and isinstance(n.meta, TensorMeta)]
    if not found:
        return
    uses = Uses(body)
    at = graph.nodes.index(loop)
    for node in found:
        copy = graph.add_node("constant", None, (), {}, node.meta, name=node.name,
                              attrs=dict(node.attrs), location=node.location, index=at)
        at += 1
        body.nodes.remove(node)
        uses.replace(node, copy)
        _capture(loop, copy, body, uses)
    bump(len(found))


def _batch_rows(root: Graph, graph: Graph, loop: Node, form) -> None:
    _, start, stop, step = form
    cond, body = loop.subgraphs
    if any(has_effect(n) for sub in (cond, body) for n in sub.walk()):
        return
    n_vars = loop.attrs["n_vars"]
    index = body.inputs[loop.attrs[COUNTER]]
    outer = {id(inner): loop.args[j] for j, inner in enumerate(body.inputs) if j >= n_vars}
    facts = None
    uses = Uses(body)
    for node in list(body.nodes):
        if node.op not in _ROW_PRODUCTS or node.kwargs or not isinstance(node.args[0], Node):
            continue
        row = node.args[0]
        if row.op != "getitem" or row.args[1] is not index or id(row.args[0]) not in outer:
            continue
        rest = node.args[1:]
        if not rest or len(rest) > (2 if node.op == "linear" else 1) or \
                not all(isinstance(v, Node) and id(v) in outer for v in rest):
            continue
        xs = outer[id(row.args[0])]
        operands = [outer[id(v)] for v in rest]
        if not _batchable(xs, operands, node, range(start, stop, step)):
            continue
        facts = facts or facts_for(root)
        if not all(facts.stable(v) and not facts.mutated(v) for v in [xs] + operands):
            continue
        shape = tuple(xs.meta.shape[:-1]) + tuple(node.meta.shape[-1:])
        target = torch.matmul if node.op == "matmul" else node.target
        product = graph.add_node(node.op, target, (xs, *operands), {},
                                 TensorMeta(shape, node.meta.dtype), location=node.location,
                                 index=graph.nodes.index(loop))
        _capture(loop, product, body, uses)
        inner = body.inputs[-1]
        node.op, node.target, node.args, node.kwargs = "getitem", row.target, \
            (inner, index), {}
        bump()


def _batchable(xs: Node, operands, node: Node, rows: range) -> bool:
    metas = [xs.meta, node.meta] + [v.meta for v in operands]
    if not all(isinstance(m, TensorMeta) and m.is_static for m in metas):
        return False
    if len(xs.meta.shape) < 2 or len(operands[0].meta.shape) != 2 or \
            len(node.meta.shape) != len(xs.meta.shape) - 1:
        return False
    if any(m.dtype != node.meta.dtype or not m.dtype.is_floating_point for m in metas):
        return False
    n = xs.meta.shape[0]
    return len(rows) >= 2 and 2 * len(rows) >= n and rows[0] >= 0 and rows[-1] < n


# ----------------------------------------------------------------------------- one kernel
def kernel_loop(loop: Node, form) -> Optional[KernelLoop]:
    """A ``KernelLoop`` running ``loop`` when its body is one fused kernel (besides rows of
    captures by the counter) computing its one other loop variable; else None."""
    k, start, stop, step = form
    n_vars = loop.attrs["n_vars"]
    body = loop.subgraphs[1]
    if n_vars != 2:
        return None
    inputs = body.inputs
    index, var = inputs[k], inputs[1 - k]
    result = body.outputs[1 - k]
    if not isinstance(result, Node) or result.op != "fused" or \
            not isinstance(result.target, FusedKernel) or set(result.kwargs) - {"out"} or \
            "planned_inplace" in result.attrs:
        return None
    position = {id(v): j for j, v in enumerate(inputs)}

    def role(value):
        if value is var:
            return ("var",)
        if isinstance(value, Node) and position.get(id(value), -1) >= n_vars:
            return ("capture", position[id(value)] - n_vars)
        if isinstance(value, Node) and value.op == "getitem" and value.args[1] is index \
                and position.get(id(value.args[0]), -1) >= n_vars:
            return ("row", position[id(value.args[0])] - n_vars)
        return None
    roles = [role(value) for value in result.args]
    product = None
    if None in roles and roles.count(None) == 1 and ("var",) not in roles:
        at = roles.index(None)
        product = _step_product(body, result.args[at], result, var, role)
        if product is not None:
            roles[at] = ("product",)
    if None in roles or any(has_effect(n) for n in body.walk()):
        return None
    if product is not None:
        return ProductLoop(result.target, roles, range(start, stop, step), product)
    return KernelLoop(result.target, roles, range(start, stop, step))


def _step_product(body: Graph, node, reader: Node, var: Node, role) -> Optional[tuple]:
    """``(C's role or None, W's capture index)`` when ``node`` is ``addmm(C, var, W)`` or
    ``mm``/``matmul(var, W)`` of 2-D matrices, ``W`` a capture and ``C`` a capture or a
    row, read only by the step's kernel ``reader`` (once), ``var`` read only by it; else None
    (``kernels/loop_product.ProductLoop``)."""
    if not isinstance(node, Node) or node.op not in ("addmm", "mm", "matmul") or \
            node.kwargs or "planned_inplace" in node.attrs or node.graph is not body:
        return None
    args = list(node.args)
    c = args.pop(0) if node.op == "addmm" else None
    if len(args) != 2 or args[0] is not var or not isinstance(args[1], Node):
        return None
    w, c_role = role(args[1]), None if c is None else role(c)
    if w is None or w[0] != "capture" or (c is not None and (c_role is None or
                                                             c_role[0] == "var")):
        return None
    if not all(isinstance(v.meta, TensorMeta) and len(v.meta.shape) == 2
               for v in (node, var, args[1])):
        return None
    uses = Uses(body)
    if not uses.only_reader(var, node) or not uses.only_reader(node, reader) or \
            sum(a is node for a in reader.args) != 1:
        return None
    return c_role, w[1]


def kernel_while(loop: Node) -> Optional[KernelWhile]:
    """A ``KernelWhile`` running ``loop`` when its one tensor loop variable is computed by
    one fused kernel and its test is one fused kernel with a bool result, both reading
    only that variable and captures (Newton's iteration); else None. A second loop
    variable may be a step counter (a constant start, ``i + step`` in the body and read
    by nothing else) that the test ignores or checks first (``while i < N and ...``: the
    test's ``cond`` on ``lt(i, N)`` with the kernel in ``then`` and ``False`` in
    ``else``); the driver counts the steps instead."""
    if loop.op != "while" or loop.attrs.get("n_vars") not in (1, 2):
        return None
    n_vars = loop.attrs["n_vars"]
    cond, body = loop.subgraphs
    if any(has_effect(n) for sub in (cond, body) for n in sub.walk()):
        return None
    counter, k = None, None
    if n_vars == 2:
        for j in (0, 1):
            counter = _step_counter(loop, j)
            if counter is not None:
                k = j
                break
        if counter is None:
            return None
    v = 0 if k is None else 1 - k
    found = _while_test(cond, k, counter)
    if found is None:
        return None
    test, test_inputs, limit = found
    body_out = body.outputs[v] if isinstance(body.outputs, (tuple, list)) and \
        len(body.outputs) == n_vars else None
    roles = []
    for result, inputs in ((test, test_inputs), (body_out, list(body.inputs))):
        if not isinstance(result, Node) or result.op != "fused" or \
                not isinstance(result.target, FusedKernel) or set(result.kwargs) - {"out"} or \
                "planned_inplace" in result.attrs:
            return None
        position = {id(x): j for j, x in enumerate(inputs) if x is not None}
        these = []
        for value in result.args:
            j = position.get(id(value)) if isinstance(value, Node) else None
            if j is None or j == k:
                return None
            these.append(("var",) if j < n_vars else ("capture", j - n_vars))
        roles.append((result.target, these))
    (test_k, test_roles), (step_k, step_roles) = roles
    steps = None if counter is None else (k,) + counter + (limit,)
    return KernelWhile(test_k, test_roles, step_k, step_roles, steps)


def _step_counter(loop: Node, k: int) -> Optional[Tuple[int, int]]:
    """``(start, step)`` when loop variable ``k`` starts at a constant 0-d int64 and the body
    only adds a positive constant to it."""
    start = _int_constant(loop.args[k])
    meta = loop.meta[k] if isinstance(loop.meta, tuple) else None
    if start is None or not isinstance(meta, TensorMeta) or meta.dtype != torch.int64:
        return None
    body = loop.subgraphs[1]
    outputs = list(body.outputs) if isinstance(body.outputs, (tuple, list)) else []
    index = body.inputs[k]
    if len(outputs) != loop.attrs["n_vars"]:
        return None
    add = outputs[k]
    if not isinstance(add, Node) or add.op != "add" or add.kwargs or len(add.args) != 2 or \
            add.args[0] is not index or type(add.args[1]) is not int or add.args[1] < 1 or \
            add.graph is not body or sum(o is add for o in outputs) != 1:
        return None
    uses = Uses(body)
    if not uses.only_reader(index, add) or uses.readers(add):
        return None
    return start, add.args[1]


def _while_test(cond: Graph, k: Optional[int], counter) -> Optional[tuple]:
    """(the test kernel node, the inputs of the graph it is in, as positions of ``cond``'s
    inputs (None where not one), the step limit the counter sets or None)."""
    outputs = cond.outputs
    if not isinstance(outputs, (tuple, list)) or len(outputs) != 1 or \
            not isinstance(outputs[0], Node):
        return None
    result = outputs[0]
    if result.op == "fused":
        if k is not None and Uses(cond).used(cond.inputs[k]):
            return None
        return result, list(cond.inputs), None
    # ``i < N and test``: get(cond(lt(i, N), *operands) -> then: test / else: False, 0)
    branch = result.args[0] if result.op == "get" and result.attrs.get("index") == 0 else None
    if k is None or not isinstance(branch, Node) or branch.op != "cond" or \
            branch.kwargs or len(branch.subgraphs) != 2:
        return None
    lt = branch.args[0]
    if not isinstance(lt, Node) or lt.op != "lt" or lt.kwargs or len(lt.args) != 2 or \
            lt.args[0] is not cond.inputs[k] or type(lt.args[1]) is not int:
        return None
    if any(n.op != "placeholder" and n not in (lt, branch, result) for n in cond.nodes):
        return None
    then, other = branch.subgraphs
    if len(then.outputs) != 1 or len(other.outputs) != 1:
        return None
    false = other.outputs[0]
    if not isinstance(false, Node) or not (_is_false(false) or _given(other, false, branch, lt)) \
            or any(n.op != "placeholder" and n is not false for n in other.nodes):
        return None
    test = then.outputs[0]
    if not isinstance(test, Node) or any(n.op != "placeholder" and n is not test
                                         for n in then.nodes):
        return None
    position = {id(x): j for j, x in enumerate(cond.inputs)}
    operands = branch.args[1:]
    if len(operands) != len(then.inputs) or \
            not all(isinstance(x, Node) and (id(x) in position or x is lt) for x in operands):
        return None
    inputs = [None] * len(cond.inputs)
    for inner, outer in zip(then.inputs, operands):
        if outer is not lt:         # (``i < N`` itself: the kernel may not read it)
            inputs[position[id(outer)]] = inner
    start, step = counter
    return test, inputs, len(range(start, lt.args[1], step))


def _given(branch_graph: Graph, value: Node, branch: Node, lt: Node) -> bool:
    """Whether ``value`` is the input of ``branch_graph`` that ``branch`` binds to ``lt``
    (the ``else`` of ``i < N and test`` returning the ``i < N`` it was given: False)."""
    inputs = list(branch_graph.inputs)
    where = [j for j, x in enumerate(inputs) if x is value]
    return len(where) == 1 and len(branch.args) == 1 + len(inputs) and \
        branch.args[1 + where[0]] is lt


def _is_false(node: Node) -> bool:
    if node.op == "tensor" and node.args == (False,) and \
            node.kwargs.get("dtype", torch.bool) is torch.bool and set(node.kwargs) <= {"dtype"}:
        return True
    held = node.attrs.get("value") if node.op == "constant" else None
    return isinstance(held, torch.Tensor) and held.dtype == torch.bool and held.dim() == 0 \
        and not bool(held)


# ----------------------------------------------------------------------------- stacked lists
def stacked(loop: Node, form) -> dict:
    """``{j: v}`` for each loop variable ``j`` of a counted ``loop`` that collects one value
    ``v`` per step (``outs.append(v)`` on a list of tensors: ``outs = cat([outs,
    unsqueeze(v, 0)], 0)``) from an empty start ``(0, *S)``, ``v`` of static shape ``S`` and
    the same dtype, with nothing but that ``cat`` reading it in the body or the test. The
    executor then keeps the ``v`` of each step and stacks them once after the loop (the
    same values: ``cat`` copies each one in turn, ``stack`` copies them once) instead of
    copying the growing result every step (quadratic: 50 steps of 32x64 copy ~5 MB)."""
    k = form[0]
    n_vars = loop.attrs["n_vars"]
    cond, body = loop.subgraphs
    outputs = list(body.outputs) if isinstance(body.outputs, (tuple, list)) else []
    if len(outputs) != n_vars or any(has_effect(n) for sub in (cond, body) for n in sub.walk()):
        return {}               # (a value kept might be written in place by a later step)
    uses = cond_uses = None
    found = {}
    for j in range(n_vars):
        out, init = outputs[j], loop.args[j]
        if j == k or not isinstance(out, Node) or out.op != "cat" or out.graph is not body:
            continue
        uses = uses or Uses(body)
        cond_uses = cond_uses or Uses(cond)
        v = _appended(out, body.inputs[j], uses)
        if v is None or cond_uses.used(cond.inputs[j]) or outputs.count(out) != 1 or \
                uses.readers(out):
            continue
        vm, im, om = v.meta, getattr(init, "meta", None), out.meta
        if not all(isinstance(m, TensorMeta) for m in (vm, im, om)) or not vm.is_static or \
                not im.is_static or tuple(im.shape) != (0,) + tuple(vm.shape) or \
                not vm.dtype == im.dtype == om.dtype:
            continue
        found[j] = v
    return found


def _appended(cat: Node, acc: Node, uses: Uses) -> Optional[Node]:
    """``v`` when ``cat`` is ``cat([acc, unsqueeze(v, 0)], 0)`` and ``acc`` and the
    ``unsqueeze`` are read by it alone."""
    dim = cat.args[1] if len(cat.args) > 1 else cat.kwargs.get("dim", 0)
    if len(cat.args) > 2 or set(cat.kwargs) - {"dim"} or type(dim) is not int or dim != 0 or \
            not isinstance(cat.args[0], (list, tuple)) or len(cat.args[0]) != 2:
        return None
    first, second = cat.args[0]
    if first is not acc or not isinstance(second, Node) or second.op != "unsqueeze" or \
            second.kwargs or len(second.args) != 2 or type(second.args[1]) is not int or \
            second.args[1] != 0 or \
            not isinstance(second.args[0], Node):
        return None
    if not uses.only_reader(acc, cat) or not uses.only_reader(second, cat):
        return None
    return second.args[0]
