"""What every pass shares: who reads a node, replacing, inserting and erasing nodes, and
the facts a rewrite must respect.

Passes rewrite the graph they are given in place (``optimize`` hands them a clone) and
count every edit in ``EDITS``, so the pass manager can tell when a round changed nothing.

Facts (``Facts``, computed once per pass over the whole root graph):

* **effects**: ``has_effect`` is ``node.impure`` plus two gaps of the op table: a
  functional op called with ``inplace=True`` and ``batch_norm``/``instance_norm`` (which
  update running statistics while training). Such nodes are never merged, dropped, moved.
* **storage groups**: values that may share storage, a union-find over may-alias edges.
  An op in ``FRESH`` returns a new tensor; any other op (views, ``to``/``float`` that may
  return ``self``, ``get``, unknown ops) may alias every input. Subgraph inputs alias the
  outer values bound to them; result ``k`` of a ``cond`` aliases output ``k`` of each
  branch, and of a ``while`` loop variable ``k`` (initial value, body input and output).
* a group is **mutated** when an effectful node (other than printing, asserting and
  switching grad mode) reads a value of it: its values may change between two reads.
* a group **escapes** when it holds an output of the root graph (the caller gets it and
  may mutate it) and is **external** when it holds a root placeholder or a constant (the
  caller's tensors, parameters: they outlive the call).

The rules the passes follow, stated once here:

* a node of a mutated group, or reading one, is never merged, folded, replaced by
  another value, or moved (the value it reads may change under it);
* replacing node ``n`` by an existing value ``v`` must not make an output the very
  object of an input or of another output: refused when ``n`` escapes and ``v`` is
  external or escapes too (see ``may_replace``);
* inside a graph, ``set_grad_enabled`` nodes cut regions: values are merged only within
  one region, and when the root switches grad mode anywhere, replacing ``f(v)`` by ``v``
  is refused unless eager returns ``v`` itself (``exact``).
"""
from __future__ import annotations

import weakref
from collections import defaultdict
from typing import Any, Dict, Iterator, List, Optional, Tuple

from ..graph import Graph, Node, iter_nodes, map_nodes
from ..ops import GLOBAL_STATE, RANDOM
from ..threads import PerThreadList

EDITS = PerThreadList([0])      # edits made by this thread's passes so far (the manager watches it)

# Ops whose result is always a new tensor (never a view of, nor the same object as, an input).
FRESH = frozenset("""
add sub mul div true_divide floor_divide remainder fmod pow neg negative abs exp exp2
expm1 log log2 log10 log1p sqrt rsqrt sin cos tan asin acos atan atan2 sinh cosh tanh
asinh acosh atanh sigmoid relu relu6 gelu silu mish softplus elu leaky_relu hardtanh
hardsigmoid hardswish selu celu logsigmoid softsign tanhshrink erf erfc erfinv reciprocal
sign sgn floor ceil round trunc frac clamp clip clamp_min clamp_max maximum minimum fmax
fmin lerp addcmul addcdiv where square logical_and logical_or logical_not logical_xor
bitwise_and bitwise_or bitwise_xor bitwise_not eq ne lt le gt ge isnan isinf isfinite
nan_to_num rsub rdiv rtruediv rfloordiv rpow rmod matmul mm bmm mv dot addmm addmv baddbmm
linear conv1d conv2d conv3d conv2d_relu outer sum mean prod std var norm amax amin logsumexp
cumsum cumprod argmax argmin all any max min softmax log_softmax clone cat concat stack
zeros_like ones_like full_like rand_like randn_like zeros ones full arange tensor eye linspace
scalar_tensor dim_size numel layer_norm group_norm embedding masked_fill index_select gather
nonzero tril triu flip roll repeat
""".split())

# Effectful ops that only read their inputs.
_READ_ONLY_EFFECTS = frozenset({"print_values", "assert_true", "probe_value",
                                "write_text", "warn_at", "log_at"}) | GLOBAL_STATE
_STATEFUL_NORMS = frozenset({"batch_norm", "instance_norm"})


def bump(n: int = 1) -> None:
    EDITS[0] += n


def inputs_of(node: Node) -> List[Node]:
    """``node.inputs``, faster (the passes ask for it a lot)."""
    found: List[Node] = []
    for value in node.args:
        if isinstance(value, Node):
            found.append(value)
        elif isinstance(value, (tuple, list, dict, slice)):
            found.extend(iter_nodes(value))
    for value in node.kwargs.values():
        if isinstance(value, Node):
            found.append(value)
        elif isinstance(value, (tuple, list, dict, slice)):
            found.extend(iter_nodes(value))
    return found


# --------------------------------------------------------------------------- node facts
def has_effect(node: Node) -> bool:
    """Must run, once, in its place: impure, random, ``inplace=True``, norm statistics."""
    if node.impure or node.op in RANDOM:
        return True
    if node.kwargs.get("inplace") is True:
        return True
    return node.op in _STATEFUL_NORMS and node.kwargs.get("training", True) is not False


def mutates(node: Node) -> bool:
    """May write into the storage of its inputs."""
    if not has_effect(node) or node.target is None or node.op in _READ_ONLY_EFFECTS:
        return False
    return not (node.op in RANDOM and not node.op.endswith("_")
                and node.kwargs.get("inplace") is not True)


def rules_by_op(rules) -> Dict[str, List[Any]]:
    """A rule table (``(op, rule)`` pairs, in order) indexed by op."""
    by_op: Dict[str, List[Any]] = {}
    for op, rule in rules:
        by_op.setdefault(op, []).append(rule)
    return by_op


def rule_sites(graph: Graph, by_op: Dict[str, List[Any]]) -> Iterator[tuple]:
    """``(g, node, rules)`` for each node without effects that a rule table indexes, in
    every graph under ``graph`` (subgraphs first); nodes a rule already moved are skipped."""
    for g in graphs_post_order(graph):
        for node in list(g.nodes):
            rules = by_op.get(node.op)
            if rules and not has_effect(node) and node.graph is g:
                yield g, node, rules


def graphs_post_order(graph: Graph) -> Iterator[Graph]:
    """Every graph under ``graph`` (subgraphs before the graph that owns them)."""
    for node in list(graph.nodes):
        for sub in node.subgraphs:
            yield from graphs_post_order(sub)
    yield graph


def sub_operands(node: Node, index: int) -> tuple:
    """The outer values bound to the inputs of ``node.subgraphs[index]``, in order."""
    return node.args[1:] if node.op == "cond" else node.args


def grad_regions(graph: Graph) -> Dict[int, int]:
    """node id -> how many ``set_grad_enabled`` nodes precede it in its graph."""
    region, out = 0, {}
    for node in graph.nodes:
        if node.op in GLOBAL_STATE:
            region += 1
        out[id(node)] = region
    return out


# --------------------------------------------------------------------------- facts
_MUTATED, _ESCAPES, _EXTERNAL = 1, 2, 4


class Facts:
    """Storage groups of the values of a root graph and what is known of each group."""

    def __init__(self, root: Graph):
        self._parent: Dict[int, int] = {}
        self._flags: Dict[int, int] = defaultdict(int)
        self.any_mutation = False
        self.grad_switch = False
        self._mutations: List[Tuple[tuple, list]] = []   # (node and its ancestors, inputs)
        self._scan(root, True, ())
        for value in iter_nodes(root.outputs):
            self._flag(value, _ESCAPES)

    def _find(self, key: int) -> int:
        parent = self._parent
        root = key
        while parent.get(root, root) != root:
            root = parent[root]
        while key != root:
            parent[key], key = root, parent.get(key, key)
        return root

    def union(self, a, b) -> None:
        """Put two values (nodes, or ``(id(node), k)`` slots of cond/while results) in one group."""
        ra = self._find(id(a) if isinstance(a, Node) else a)
        rb = self._find(id(b) if isinstance(b, Node) else b)
        if ra != rb:
            self._parent[rb] = ra
            self._flags[ra] |= self._flags.pop(rb, 0)

    def _flag(self, node: Node, flag: int) -> None:
        self._flags[self._find(id(node))] |= flag

    def _has(self, node: Node, flag: int) -> bool:
        return bool(self._flags.get(self._find(id(node)), 0) & flag)

    def _scan(self, graph: Graph, is_root: bool, chain: tuple) -> None:
        for node in graph.nodes:
            if node.op == "constant" or (node.op == "placeholder" and is_root) or \
                    getattr(node.target, "_tograph_external", False):   # (a module's tensor)
                self._flag(node, _EXTERNAL)
            inputs = inputs_of(node)
            if node.subgraphs:
                self._scan_control(node, chain + (node,))
            elif node.op == "get" and node.args[0].op in ("cond", "while"):
                self.union(node, (id(node.args[0]), node.attrs["index"]))
            elif node.op not in FRESH:
                for value in inputs:
                    self.union(node, value)
            if node.op in GLOBAL_STATE:
                self.grad_switch = True
            if getattr(node.target, "_tograph_stores", False):   # (kept after the run)
                for value in inputs:
                    self._flag(value, _ESCAPES)
            if mutates(node):
                self.any_mutation = True
                for value in inputs:
                    self._flag(value, _MUTATED)
                self._mutations.append((chain + (node,), list(inputs)))

    def _scan_control(self, node: Node, chain: tuple) -> None:
        """Result ``k`` of a cond is output ``k`` of either branch; of a while, loop
        variable ``k``: its initial value, the body's inputs and outputs ``k``."""
        for index, sub in enumerate(node.subgraphs):
            for inner, outer in zip(sub.inputs, sub_operands(node, index)):
                if isinstance(outer, Node):
                    self.union(inner, outer)
            self._scan(sub, False, chain)
        if node.op == "while":
            cond_g, body = node.subgraphs
            for k, value in enumerate(iter_nodes(body.outputs)):
                self.union(value, (id(node), k))
                self.union(value, body.inputs[k])
        elif node.op == "cond":
            for sub in node.subgraphs:
                for k, value in enumerate(iter_nodes(sub.outputs)):
                    self.union(value, (id(node), k))
        else:                                 # an unknown op with subgraphs: one group
            for value in inputs_of(node):
                self.union(node, value)
            for sub in node.subgraphs:
                for value in iter_nodes(sub.outputs):
                    self.union(node, value)

    # queries ------------------------------------------------------------------------------
    def group(self, node: Node) -> int:
        """The storage group of a value: a key shared by the values that may alias it."""
        return self._find(id(node))

    def mutated(self, node: Node) -> bool:
        return self.any_mutation and self._has(node, _MUTATED)

    def mutated_between(self, node: Node, first: Node, last: Node) -> bool:
        """Whether ``node``'s storage group may be changed in place after ``first`` and
        before ``last`` (two nodes of one graph; a change inside a cond/while node between
        them counts; changes before ``first``, after ``last`` or in other graphs do not:
        a training step's ``opt.step()`` after the forward leaves the forward's parameters
        unchanged while it runs)."""
        if not self.mutated(node):
            return False
        order = {id(n): i for i, n in enumerate(last.graph.nodes)}
        lo, hi = order.get(id(first)), order.get(id(last))
        if lo is None or hi is None:
            return True
        group = self.group(node)
        for chain, inputs in self._mutations:
            here = next((order[id(n)] for n in chain if id(n) in order), None)
            if here is not None and lo < here < hi and \
                    any(isinstance(v, Node) and self.group(v) == group for v in inputs):
                return True
        return False

    def escapes(self, node: Node) -> bool:
        return self._has(node, _ESCAPES)

    def external(self, node: Node) -> bool:
        return self._has(node, _EXTERNAL)

    def stable(self, node: Node) -> bool:
        """Neither ``node`` nor anything it reads may be changed in place."""
        if not self.any_mutation:
            return True
        return not self.mutated(node) and not any(self.mutated(v) for v in inputs_of(node))

    def may_replace(self, node: Node, value: Node, exact: bool = False) -> bool:
        """Whether readers of ``node`` may read ``value`` instead. ``exact``: eager itself
        returns ``value`` for ``node`` (``x.float()`` of a float32 ``x``)."""
        if exact:
            return True
        if self.grad_switch or self.mutated(node) or self.mutated(value):
            return False
        if self.escapes(node) and (self.escapes(value) or self.external(value)):
            return False
        return True

    def may_merge(self, a: Node, b: Node) -> bool:
        """Whether two equal computations may become one value."""
        if not (self.stable(a) and self.stable(b)):
            return False
        return not (self.escapes(a) and self.escapes(b))


_LAST_FACTS = PerThreadList([None, -1, None])     # (weak root, EDITS then, facts), per thread


def facts_for(root: Graph) -> Facts:
    """``Facts(root)``, reused while no pass has edited any graph since it was computed."""
    ref, edits, facts = _LAST_FACTS
    if ref is not None and ref() is root and edits == EDITS[0]:
        return facts
    facts = Facts(root)
    _LAST_FACTS[:] = [weakref.ref(root), EDITS[0], facts]
    return facts


# --------------------------------------------------------------------------- uses
class Uses:
    """The readers of every value of one graph (kept current by the edits made through it)."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.users: Dict[int, List[Node]] = defaultdict(list)
        for node in graph.nodes:
            for value in inputs_of(node):
                self.users[id(value)].append(node)
        self.out_count: Dict[int, int] = defaultdict(int)
        for value in iter_nodes(graph.outputs):
            self.out_count[id(value)] += 1

    def readers(self, node: Node) -> List[Node]:
        return self.users.get(id(node), [])

    def used(self, node: Node) -> bool:
        return bool(self.users.get(id(node))) or self.out_count.get(id(node), 0) > 0

    def only_reader(self, node: Node, reader: Node) -> bool:
        """``reader`` is the one node that reads ``node``, and ``node`` is no output."""
        users = self.users.get(id(node), [])
        return bool(users) and all(u is reader for u in users) and \
            not self.out_count.get(id(node), 0)

    def replace(self, old: Node, new: Any) -> None:
        """Every reader of ``old`` (nodes, subgraph captures, outputs) reads ``new`` instead."""
        swap = lambda n: new if n is old else n  # noqa: E731
        readers = self.users.pop(id(old), [])
        seen = set()
        for user in readers:
            if id(user) in seen:
                continue
            seen.add(id(user))
            user.args = map_nodes(user.args, swap)
            user.kwargs = map_nodes(user.kwargs, swap)
            for sub in user.subgraphs:
                if any(o is old for o, _ in sub.captures):
                    sub.captures = [(swap(o), i) for o, i in sub.captures]
                    sub._capture_map = {id(o): i for o, i in sub.captures}
            if isinstance(new, Node):
                self.users[id(new)].append(user)
        if self.out_count.pop(id(old), 0):
            self.graph.outputs = map_nodes(self.graph.outputs, swap)
            self.out_count = defaultdict(int)
            for value in iter_nodes(self.graph.outputs):
                self.out_count[id(value)] += 1
        bump()

    def insert_before(self, anchor: Node, op: str, target, args, kwargs=None, meta=None,
                      like: Optional[Node] = None, attrs=None) -> Node:
        """A new node right before ``anchor`` (location from ``like``, else ``anchor``)."""
        graph = self.graph
        index = graph.nodes.index(anchor)
        node = graph.add_node(op, target, args, kwargs or {}, meta, attrs=attrs,
                              location=(like or anchor).location, index=index)
        for value in inputs_of(node):
            self.users[id(value)].append(node)
        bump()
        return node

    def erase(self, node: Node) -> None:
        """Remove ``node`` (which nothing reads any more) and forget its names."""
        self.graph.nodes.remove(node)
        self.graph.forget(node)
        for value in inputs_of(node):
            users = self.users.get(id(value))
            if users:
                self.users[id(value)] = [u for u in users if u is not node]
        bump()

    def replace_node(self, old: Node, new: Any) -> None:
        self.replace(old, new)
        self.erase(old)


def replace_with_new(uses: Uses, node: Node, op: str, target, args, kwargs=None,
                     meta: Any = None) -> Node:
    """Swap ``node`` for a new node computing it another way (same meta and location)."""
    new = uses.insert_before(node, op, target, args, kwargs,
                             node.meta if meta is None else meta, like=node)
    uses.replace_node(node, new)
    return new
