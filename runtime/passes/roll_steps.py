"""Unrolled steps of one kernel, rolled back into one loop node.

A Python loop over time steps (``while t < T``, ``for xt in xs.unbind(0)``, ``for t in
range(T)`` with a Python ``T``) is unrolled by the trace: after fusion an RNN becomes a
chain of ``T`` equal ``fused`` nodes, each reading the one before. Each step then costs a
launcher call from the generated code, where the same program written ``for xt in xs``
(a counted ``while``) runs all its steps in one ``KernelLoop``/``ProductLoop`` call
(``passes/counted_loops``): 0.7x the speed at 50x32x64 with the same kernel.

Rule: ``MIN_STEPS`` or more pure steps ``s_1 .. s_n`` in one graph, each either

    h_k = kernel(..., h_{k-1}, ...)                  (the kernel reads the state once), or
    p_k = addmm(C_k, h_{k-1}, W) / mm(h_{k-1}, W);  h_k = kernel(..., p_k, ...)

with kernels of equal spec and shapes, each state ``h_{k-1}`` (and product ``p_k``) read by
the next step only, and every other operand, slot by slot, either the same value in every
step (a capture) or row ``i0 + k`` of one tensor ``X`` (``get`` of ``X.unbind(0)`` or
``X[i0 + k]``; one ``i0`` for all), become one ``kernel_loop`` node ``loop(h_0, *caps)``
running ``kernels/loop.KernelLoop`` (or ``loop_product.ProductLoop``) over
``range(i0, i0 + n)``: the same C function on the same values, step by step (the results
are identical), in one call; under autograd the loops' own nodes (or the launcher per
step, as before). The rows' ``get``s and the ``unbind`` go when nothing else reads them.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from ..graph import Graph, Node
from ..kernels.launch import FusedKernel
from ..kernels.loop import KernelLoop
from ..kernels.loop_product import ProductLoop
from ..meta import TensorMeta
from .batch_matmul import row_of
from .rewrite import Uses, graphs_post_order, has_effect

MIN_STEPS = 4
_PRODUCTS = ("addmm", "mm", "matmul")


def roll_steps(graph: Graph) -> Graph:
    for g in graphs_post_order(graph):
        if not any(has_effect(n) for n in g.nodes):
            _roll_graph(g)
    return graph


class _Step:
    """One step: its kernel node, its product node (or None), the state it reads."""

    def __init__(self, kernel: Node, product: Optional[Node], state):
        self.kernel, self.product, self.state = kernel, product, state


def _roll_graph(graph: Graph) -> None:
    uses = Uses(graph)
    seen = set()
    for node in list(graph.nodes):
        if id(node) in seen or node.graph is not graph or not _is_kernel(node):
            continue
        chain = _chain(node, uses)
        seen.update(id(s.kernel) for s in chain)
        if len(chain) >= MIN_STEPS:
            _roll(graph, chain, uses)


def unrolled_steps(graph: Graph) -> set:
    """The ids of ``graph``'s kernel nodes that are steps of a chain with a product each
    (before ``gemm_epilogue`` takes products in: it gives them a loop body's limits, so
    the rolled loop is one kernel per step, as a ``while`` body would be)."""
    if any(has_effect(n) for n in graph.nodes):
        return set()
    uses = Uses(graph)
    found, seen = set(), set()
    for node in graph.nodes:
        if id(node) in seen or not _is_kernel(node):
            continue
        first = _first_step(node, uses)
        chain = _follow(first, uses) if first.product is not None else [first]
        seen.update(id(s.kernel) for s in chain)
        if len(chain) >= MIN_STEPS and _plan(chain) is not None:
            found.update(id(s.kernel) for s in chain)
    return found


def _is_kernel(node: Node) -> bool:
    k = node.target
    return node.op == "fused" and isinstance(k, FusedKernel) and not node.kwargs and \
        not node.attrs.get("planned_inplace") and k._single and not k._row_outputs[0] and \
        k._out_shape is not None and None not in k._in_shapes and not node.impure


def _key(node: Node) -> tuple:
    k = node.target
    return (k.spec, tuple(k._in_shapes), k._out_shape, k._split, k._row_shape)


def _first_step(node: Node, uses: Uses) -> Optional[_Step]:
    """``node`` as a step: the state is the product's left operand when one product input
    is read by it alone, else None (kernel-only steps get their state from the chain)."""
    products = [a for a in node.args if isinstance(a, Node) and a.op in _PRODUCTS and
                not a.kwargs and not a.impure and uses.only_reader(a, node)]
    if len(products) == 1 and sum(a is products[0] for a in node.args) == 1:
        p = products[0]
        args = p.args[1:] if p.op == "addmm" else p.args
        if len(args) == 2 and len(p.args) == (3 if p.op == "addmm" else 2):
            return _Step(node, p, args[0])
    return _Step(node, None, None)


def _next(step: _Step, uses: Uses) -> Optional[_Step]:
    """The step reading ``step``'s result as its state, of the same form and kernel."""
    h = step.kernel
    readers = uses.readers(h)
    if len(readers) != 1 or uses.out_count.get(id(h), 0):
        return None
    reader = readers[0]
    if step.product is not None:
        if not (reader.op == step.product.op and not reader.kwargs and
                uses.readers(reader) and len(uses.readers(reader)) == 1):
            return None
        kernel = uses.readers(reader)[0]
        nxt = _first_step(kernel, uses) if _is_kernel(kernel) else None
        if nxt is None or nxt.product is not reader or nxt.state is not h or \
                sum(a is h for a in reader.args) != 1:
            return None
    else:
        if not _is_kernel(reader) or sum(a is h for a in reader.args) != 1:
            return None
        nxt = _Step(reader, None, h)
    return nxt if _key(nxt.kernel) == _key(step.kernel) else None


def _chain(node: Node, uses: Uses) -> List[_Step]:
    """The steps from ``node`` on: with a product each when ``node`` reads one, else (or
    when those are too few) kernels only."""
    first = _first_step(node, uses)
    chain = _follow(first, uses)
    if first.product is not None and len(chain) < MIN_STEPS:
        chain = _follow(_Step(node, None, None), uses)
    if chain[0].product is None and len(chain) > 1:     # the first state: what step 2 reads
        slot = [a is node for a in chain[1].kernel.args].index(True)
        chain[0].state = node.args[slot]
    return chain


def _follow(first: _Step, uses: Uses) -> List[_Step]:
    chain = [first]
    while True:
        nxt = _next(chain[-1], uses)
        if nxt is None:
            return chain
        chain.append(nxt)


def _row(value) -> Optional[Tuple[Node, int]]:
    """(X, i) when ``value`` is row ``i >= 0`` of ``X`` (``batch_matmul.row_of``)."""
    found = row_of(value)
    return found if found is not None and found[1] >= 0 else None


class _Roles:
    """The loop's captures and the role of each operand slot, read off every step."""

    def __init__(self):
        self.caps: List[Node] = []
        self.index: Dict[int, int] = {}
        self.start: Optional[int] = None

    def capture(self, value: Node) -> int:
        if id(value) not in self.index:
            self.index[id(value)] = len(self.caps)
            self.caps.append(value)
        return self.index[id(value)]

    def of(self, values: list) -> Optional[tuple]:
        """("capture", c) or ("row", c) for one slot's value in each step, or None."""
        first = values[0]
        if not isinstance(first, Node):
            return None
        if all(v is first for v in values):
            return ("capture", self.capture(first))
        rows = [_row(v) for v in values]
        if None in rows or any(x is not rows[0][0] for x, _ in rows):
            return None
        start = rows[0][1]
        if any(i != start + k for k, (_, i) in enumerate(rows)) or \
                (self.start is not None and start != self.start):
            return None
        x = rows[0][0]
        if not isinstance(x.meta, TensorMeta) or not x.meta.is_static or \
                start + len(values) > x.meta.shape[0]:
            return None
        self.start = start
        return ("row", self.capture(x))


def _plan(chain: List[_Step]):
    """(KernelLoop or ProductLoop, captures) for ``chain``, or None."""
    roles = _Roles()
    kernels = [s.kernel for s in chain]
    into = [s.product if s.product is not None else s.state for s in chain]
    kernel_roles = []
    for j in range(len(kernels[0].args)):
        values = [k.args[j] for k in kernels]
        if all(v is t for v, t in zip(values, into)):
            kernel_roles.append(("product",) if chain[0].product is not None else ("var",))
            continue
        if any(v is t for v, t in zip(values, into)):
            return None
        role = roles.of(values)
        if role is None:
            return None
        kernel_roles.append(role)
    product = None
    if chain[0].product is not None:
        p = [s.product for s in chain]
        w = roles.of([q.args[-1] for q in p])
        c = roles.of([q.args[0] for q in p]) if p[0].op == "addmm" else None
        if w is None or w[0] != "capture" or (p[0].op == "addmm" and c is None) or \
                not all(isinstance(v.meta, TensorMeta) and len(v.meta.shape) == 2
                        for v in (p[0], p[0].args[-1])):
            return None
        product = (c, w[1])
    if any(isinstance(s.state, Node) and id(s.state) in roles.index for s in chain[:1]):
        return None                 # (the first state is also a capture)
    start = roles.start or 0
    steps = range(start, start + len(chain))
    kernel = kernels[0].target
    if product is None:
        return KernelLoop(kernel, kernel_roles, steps), roles.caps
    return ProductLoop(kernel, kernel_roles, steps, product), roles.caps


def _roll(graph: Graph, chain: List[_Step], uses: Uses) -> None:
    if not isinstance(chain[0].state, Node):
        return
    planned = _plan(chain)
    if planned is None:
        return
    loop, caps = planned
    last = chain[-1].kernel
    node = uses.insert_before(last, "kernel_loop", loop, (chain[0].state, *caps),
                              meta=last.meta, like=chain[0].kernel,
                              attrs={"ops": last.attrs.get("ops"), "steps": len(chain)})
    rows = [v for s in chain for v in s.kernel.args + (s.product.args if s.product else ())
            if _row(v) is not None]
    uses.replace(last, node)
    for s in reversed(chain):
        uses.erase(s.kernel)
        if s.product is not None:
            uses.erase(s.product)
    unbound = {id(v.args[0]): v.args[0] for v in rows if v.op == "get"}
    for v in {id(v): v for v in rows}.values():
        if not uses.used(v) and v in graph.nodes:
            uses.erase(v)
    for u in unbound.values():
        if not uses.used(u) and u in graph.nodes:
            uses.erase(u)
