"""Small matrix products become the prologue of the fused kernel that reads them.

Rule: a fused elementwise kernel over a static 2-D space ``M x N`` that reads the result
of a ``mm``/``matmul`` of two 2-D matrices, or of an ``addmm(C, A, B)`` (no ``beta`` or
``alpha`` other than 1), takes the product in: the new kernel reads ``A`` (``M x K``) and
``B`` (``K x N``), and ``C`` when there is one, and computes each row of the product
before running the group on it (``kernels/codegen.py``), so the product is never written
out and there is one call instead of two. It applies when the product is small
(``M * N * K <= MAX_WORK``: there a library GEMM costs more in calling than in
arithmetic, as in an RNN step) and its rows are wide (``MIN_N <= N <= MAX_N``: a row of
accumulators lives on the stack, and narrower rows were measured slower than the library
call: 32x128 @ 128x32 24 us against 16, 16x64 @ 64x64 12 against 14), every matrix
has the kernel's float type, the product is read by that kernel only, every other input
of the kernel broadcasts to ``M x N`` statically, and nothing between the product and the
kernel could change what the product reads or how autograd records it: no node with an
effect (an in-place write, a grad-mode switch, a random draw) and no ``cond``/``while``
(whose bodies may write) — the product moves to where the kernel runs. The steps of an
unrolled loop that ``roll_steps`` will run as one loop (``unrolled_steps``) take the loop
body's limits.

The sums are fused multiply-adds in ``k`` order: a different rounding order than a
library GEMM's blocked one, within float tolerance as any two GEMMs are. Without a
compiler, under autograd or off the CPU, the kernel runs the product and the group as the
torch ops they came from. A kernel with a product is not elementwise for memory planning
(it reads all of ``A``'s row and ``B`` before writing), so it never writes over them.
"""
from __future__ import annotations

import bisect
from typing import Dict, List, Optional, Tuple

import torch

from ..graph import Graph, Node, iter_nodes
from ..kernels.codegen import KernelSpec, read_mode
from ..kernels.launch import DTYPES, FusedKernel
from ..meta import TensorMeta
from .rewrite import has_effect
from .roll_steps import unrolled_steps

MAX_WORK = 1 << 17      # multiply-adds; 16x64 @ 64x64 (an RNN step) is 65536
# In a loop body the library call is paid every step, and a body left as one kernel runs
# as direct C calls (kernels/loop.py): 64x64 @ 64x64 per RNN step 1.22x -> 1.9x eager
LOOP_MAX_WORK = 1 << 19
LOOP_MIN_N = 8          # rows of whole 8-float vectors (the kernel's AVX accumulators)
MIN_N = 64
MAX_N = 4096
_BARRIERS = ("cond", "while")


def absorb_products(graph: Graph, kernels: List[FusedKernel], in_loop: bool = False
                    ) -> None:
    """Rewrite in place, in ``graph`` and its subgraphs; ``kernels`` (the kernels to
    compile) gets each new kernel in the place of the one it replaces. ``in_loop``: a
    ``while`` body (or a graph inside one), where ``LOOP_MAX_WORK`` and ``LOOP_MIN_N``
    bound the products taken in."""
    for node in graph.nodes:
        for sub in node.subgraphs:
            absorb_products(sub, kernels, in_loop or node.op == "while")
    max_work = max(MAX_WORK, LOOP_MAX_WORK) if in_loop else MAX_WORK
    min_n = min(MIN_N, LOOP_MIN_N) if in_loop else MIN_N
    steps = set() if in_loop else unrolled_steps(graph)    # rolled up later: a loop's body
    readers: Dict[int, int] = {}
    for node in graph.nodes:
        for value in node.inputs:
            readers[id(value)] = readers.get(id(value), 0) + 1
    for value in iter_nodes(graph.outputs):
        readers[id(value)] = readers.get(id(value), 0) + 1
    dropped = set()
    barriers = []                       # positions of nodes a product may not move across
    for index, node in enumerate(graph.nodes):
        if has_effect(node) or node.op in _BARRIERS:
            barriers.append(index)
    position = {id(n): i for i, n in enumerate(graph.nodes)}
    for node in graph.nodes:
        if node.op != "fused" or not isinstance(node.target, FusedKernel):
            continue
        loop_like = id(node) in steps
        found = _product_input(node, readers, barriers, position,
                               max(max_work, LOOP_MAX_WORK) if loop_like else max_work,
                               min(min_n, LOOP_MIN_N) if loop_like else min_n)
        if found is None:
            continue
        slot, product = found
        kernel = _with_product(node.target, list(node.args), slot, product)
        if kernel is None:
            continue
        kernels[kernels.index(node.target)] = kernel
        a, b, c = _operands(product)
        args = list(node.args)
        args[slot] = a
        args.append(b)
        if c is not None:
            args.append(c)
        node.target, node.args = kernel, tuple(args)
        node.attrs["ops"] = kernel.ops
        dropped.add(id(product))
    if dropped:
        for n in graph.nodes:
            if id(n) in dropped:
                graph._names.pop(n.name, None)
        graph.nodes = [n for n in graph.nodes if id(n) not in dropped]


# ----------------------------------------------------------------------------- matching
def _operands(product: Node) -> Tuple[Node, Node, Optional[Node]]:
    if product.op == "addmm":
        c, a, b = product.args
        return a, b, c
    a, b = product.args
    return a, b, None


def _matrix(value, dtype: torch.dtype) -> bool:
    return isinstance(value, Node) and isinstance(value.meta, TensorMeta) and \
        value.meta.is_static and len(value.meta.shape) == 2 and value.meta.dtype == dtype


def _crosses(barriers: List[int], start: int, end: int) -> bool:
    """Whether a barrier position lies strictly between ``start`` and ``end``."""
    k = bisect.bisect_right(barriers, start)
    return k < len(barriers) and barriers[k] < end


def _product_input(node: Node, readers: Dict[int, int], barriers: List[int],
                   position: Dict[int, int], max_work: int, min_n: int
                   ) -> Optional[Tuple[int, Node]]:
    """(argument slot, product node) of the first product ``node`` can take in."""
    kernel: FusedKernel = node.target
    spec = kernel.spec
    shape = kernel._out_shape
    if spec.rows or spec.gemm or shape is None or len(shape) != 2 or node.kwargs:
        return None
    dtype = DTYPES[spec.dtype]
    for slot, value in enumerate(node.args):
        if not isinstance(value, Node) or value.impure or readers.get(id(value)) != 1 or \
                value.op not in ("addmm", "mm", "matmul") or \
                sum(a is value for a in node.args) != 1 or \
                _crosses(barriers, position[id(value)], position[id(node)]):
            continue
        if value.op == "addmm":
            if len(value.args) != 3 or set(value.kwargs) - {"beta", "alpha"} or \
                    any(v != 1 for v in value.kwargs.values()):
                continue
            c = value.args[0]
            if not (isinstance(c, Node) and isinstance(c.meta, TensorMeta) and
                    c.meta.is_static and c.meta.dtype == dtype and len(c.meta.shape) <= 2):
                continue
        elif len(value.args) != 2 or value.kwargs:
            continue
        a, b, _ = _operands(value)
        if not (_matrix(a, dtype) and _matrix(b, dtype) and _matrix(value, dtype)):
            continue
        (m, k), (k2, n) = a.meta.shape, b.meta.shape
        if k != k2 or (m, n) != tuple(shape) or m * n * k > max_work or k < 1 or \
                n > MAX_N or not (n >= MIN_N or (n >= min_n and n % 8 == 0)):
            continue
        return slot, value
    return None


def _with_product(old: FusedKernel, args: List, slot: int, product: Node
                  ) -> Optional[FusedKernel]:
    """The kernel computing ``product`` and then ``old``'s group, or None."""
    space = old._out_shape
    a, b, c = _operands(product)
    shapes = [tuple(v.meta.shape) if isinstance(v, Node) else None for v in args]
    if any(s is None for s in shapes) or None in old._in_shapes:
        return None
    modes = [read_mode(s, space, 1) for s in shapes]
    if any(m is None for m in modes):
        return None
    inputs = list(old.spec.inputs)
    in_shapes = list(shapes)
    inputs[slot] = (old.spec.dtype, "gemm")
    in_shapes[slot] = tuple(a.meta.shape)
    for k, mode in enumerate(modes):
        if k != slot:
            inputs[k] = (inputs[k][0], mode)
    inputs.append((old.spec.dtype, "gemm_b"))
    in_shapes.append(tuple(b.meta.shape))
    c_index = -1
    if c is not None:
        c_mode = read_mode(tuple(c.meta.shape), space, 1)
        if c_mode is None:
            return None
        c_index = len(inputs)
        inputs.append((old.spec.dtype, c_mode))
        in_shapes.append(tuple(c.meta.shape))
    spec = KernelSpec(dtype=old.spec.dtype, inputs=tuple(inputs), steps=old.spec.steps,
                      outputs=old.spec.outputs,
                      gemm=(slot, len(args), c_index, a.meta.shape[1], b.meta.shape[1]))
    torch_fn = _ProductThen(old.torch_fn, slot, len(args), product.target,
                            c is not None)
    return FusedKernel(spec, old.name, torch_fn, in_shapes, space, 1,
                       [product.op] + list(old.ops), None)


class _ProductThen:
    """The torch path: the product by its own torch function, then the old group's."""

    def __init__(self, group_fn, slot: int, n_args: int, product_fn, has_c: bool):
        self.group_fn, self.slot, self.n_args = group_fn, slot, n_args
        self.product_fn, self.has_c = product_fn, has_c

    def __call__(self, *xs):
        xs = list(xs)
        a, b = xs[self.slot], xs[self.n_args]
        value = self.product_fn(xs[self.n_args + 1], a, b) if self.has_c else \
            self.product_fn(a, b)
        xs[self.slot] = value
        return self.group_fn(*xs[:self.n_args])
