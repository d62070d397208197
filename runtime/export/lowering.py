"""A graph as a Python function that ``torch.export`` can trace: control flow as
``torch.cond`` / ``torch.while_loop``, everything functional.

The executor's lowering is reused with these differences:
  cond   ``torch.cond(pred, then_fn, else_fn, (operands..., captures...))``
  while  ``while_loop(test_fn, body_fn, (carried...))``, captured values as closures
         (an initial value the loop also captures, or receives twice, is cloned)
  in-place ops (``add_``, ``x += y``, ``x[i] = v``, ``out=``, ``inplace=True``) become
         their functional forms: the graph already routes later reads to the op's
         result, and export forbids mutating the inputs of branches and loop bodies; a
         write through a view (``y[0][1] = v``) would be lost, so it is an ExportError
  run-time sizes (``dim_size``, ``numel``) become tensors made from symbolic sizes, and
         indexing by a run-time counter (``for r in x``) an ``index_select``
  ``print``, ``assert``, grad-mode switches and probes are left out (effects a
  deployed program does not keep; listed in ``dropped``)
The generated source is registered with ``linecache`` and its lines are mapped to the
nodes (as for the executor), so an export error can name the user's line.
"""
from __future__ import annotations

from typing import Any, Dict, Sequence

import torch
from torch._higher_order_ops.while_loop import while_loop

from .. import graph_ops, int_overflow, number_checks
from ..executor import _FLAT, _Lowering, load_lowered
from ..graph import Graph, Node, iter_nodes, map_nodes
from ..ops import is_inplace
from ..source_info import format_location
from .errors import ExportError

DROPPED_EFFECTS = ("print_values", "assert_true", "set_grad_enabled", "probe_value",
                   "write_text", "warn_at", "log_at")


def _dim_size(x: torch.Tensor, dim: int) -> torch.Tensor:
    return torch.scalar_tensor(x.size(dim), dtype=torch.int64)


def _numel(x: torch.Tensor) -> torch.Tensor:
    return torch.scalar_tensor(x.numel(), dtype=torch.int64)


# Names: torch.export's tracer (dynamo) names a value after the first plain local it is
# stored in (not a local a closure reads), else after its op; a ``cond`` in nested loops
# that receives two values named alike at two nesting levels (the rows of two ``for``
# loops, both ``x`` inside ``_getitem``, or both ``squeeze``) fails ("duplicate argument
# 'x_true_branch'"). So every value takes its unique name from the generated code: the
# helpers below never return a tensor they stored in a local, and a loop's functions get
# their captured values from ``_loop_test``/``_loop_body``, not from lambdas in the
# generated code (which would make its locals closure cells).
def _loop_test(fn, captured):
    """``while_loop``'s test: ``fn`` (carried values, then ``captured``) -> (bool,)."""
    return lambda *carried: fn(*carried, *captured)[0]


def _loop_body(fn, captured):
    """``while_loop``'s body: ``fn`` (carried values, then ``captured``) -> new values."""
    return lambda *carried: fn(*carried, *captured)


def _setitem(x: torch.Tensor, index, value) -> torch.Tensor:
    """``x[index] = value`` on a copy. A number is made by an op (no lifted constant); a
    run-time counter index (``y[i] = ...`` in a tensor loop) writes with ``index_put``."""
    if isinstance(value, (bool, int, float)):
        value = torch.full((), value, dtype=x.dtype, device=x.device)
    if _is_counter(index):
        row = torch.where(index < 0, index + x.size(0), index).reshape(1)
        return x.index_put((row,), value.to(x.dtype).expand(x.shape[1:]).unsqueeze(0))
    return _written(x.clone(), index, value)


def _written(out: torch.Tensor, index, value) -> torch.Tensor:
    out[index] = value
    return out


def _getitem(x, index):
    """``x[index]`` where 0-d integer tensors in the index (a loop counter) select with
    ``index_select``: export cannot specialize an index that is only known at run time."""
    parts = index if isinstance(index, tuple) else (index,)
    if not any(_is_counter(p) for p in parts) or any(p is Ellipsis or p is None or
                                                     isinstance(p, (list, torch.Tensor))
                                                     and not _is_counter(p) for p in parts):
        return x[index]
    return _select(x, parts, 0)


def _select(x, parts, dim: int):
    """``x`` indexed by ``parts`` from dimension ``dim`` on, one part per call."""
    if not parts:
        return x
    part, rest = parts[0], parts[1:]
    if _is_counter(part):
        i = torch.where(part < 0, part + x.size(dim), part).reshape(1)
        return _select(x.index_select(dim, i).squeeze(dim), rest, dim)
    return _select(x[(slice(None),) * dim + (part,)], rest, dim + isinstance(part, slice))


def _is_counter(part) -> bool:
    return isinstance(part, torch.Tensor) and part.dim() == 0 and \
        not part.is_floating_point() and part.dtype != torch.bool


def _tensor(data, *, dtype=None, device=None, requires_grad=False):
    """``torch.tensor(3)`` as ``torch.full``: a literal scalar made by an op, not a lifted
    constant (ONNX cannot copy a lifted constant inside an ``If``/``Loop`` body)."""
    if isinstance(data, (bool, int, float)):
        if dtype is None:
            dtype = torch.tensor(data).dtype
        return torch.full((), data, dtype=dtype, device=device)
    return torch.tensor(data, dtype=dtype, device=device)


def _unchecked_int(name: str, file: str, line: int, *args):
    """``checked_int`` as its plain op: an exported program has no Python to fall back
    to, so its int stand-ins are int64 and wrap as int64 does (said in the README)."""
    return int_overflow._OPS[name](*args)


_SUBSTITUTES = {graph_ops.dim_size: _dim_size, graph_ops.numel: _numel,
                graph_ops.setitem: _setitem, torch.tensor: _tensor,
                int_overflow.checked_int: _unchecked_int,
                number_checks.checked_number: number_checks.unchecked_number,
                number_checks.checked_int_of: number_checks.unchecked_int_of}
_BY_OP = {"getitem": _getitem}


# ops whose result may share memory with their first argument: an in-place write to the
# result changes that argument too, which a functional program cannot express
VIEW_OPS = frozenset("""
getitem select narrow view view_as reshape reshape_as t T mT H transpose swapaxes swapdims
permute movedim expand expand_as squeeze unsqueeze diagonal unfold as_strided flatten
unflatten detach real imag split chunk unbind tensor_split hsplit vsplit get alias
""".split())


def _view_of(node: Node):
    """The node ``node`` is a view of (through ``get`` of a split), or None."""
    if node.op not in VIEW_OPS:
        return None
    source = node.args[0] if node.args and isinstance(node.args[0], Node) else None
    if node.op == "get" and (source is None or source.op not in VIEW_OPS):
        return None                 # an output of a multi-output op that is not a split
    return source


def _mutated(node: Node):
    target = node.kwargs.get("out")
    return target if isinstance(target, Node) else \
        (node.args[0] if node.args and isinstance(node.args[0], Node) else None)


def _written_back(node: Node) -> bool:
    """``y[i] += 1`` reads the view, updates it and stores it back (``y[i] = result``):
    the functional form is then exact."""
    return any(user.op == "setitem" and len(user.args) > 2 and user.args[2] is node
               for user in node.graph.nodes)


def functional(target, kwargs: Dict[str, Any]):
    """The out-of-place form of an in-place call: (target, kwargs), or None if unknown."""
    kwargs = {k: v for k, v in kwargs.items() if k not in ("out", "inplace")}
    name = getattr(target, "__name__", "")
    owner = torch.Tensor if getattr(torch.Tensor, name, None) is target else None
    if name.startswith("__i") and name.endswith("__"):          # __iadd__ -> __add__
        plain = getattr(torch.Tensor, "__" + name[3:], None)
        return (plain, kwargs) if plain is not None else None
    if name.endswith("_") and not name.endswith("__"):
        space = owner or torch
        plain = getattr(space, name[:-1], None) or getattr(torch.Tensor, name[:-1], None)
        return (plain, kwargs) if plain is not None else None
    return target, kwargs                                       # out= / inplace=True


class ExportLowering(_Lowering):
    """The executor's code generator, emitting export-friendly control flow and ops."""

    def __init__(self):
        super().__init__()
        self.free = False                   # no ``del``: closures may still read values
        self.globals["_torch_cond"] = torch.cond
        self.globals["_while_loop"] = while_loop
        self.globals["_loop_test"], self.globals["_loop_body"] = _loop_test, _loop_body

    def function(self, graph, fname, inputs, outputs, keep_effects=True, structure=_FLAT):
        super().function(graph, fname, inputs, outputs, False, structure)   # no effects

    def node_code(self, node: Node, names, bind):
        extra = []
        args = [self.expr(a, names) for a in node.args]
        if node.op == "cond":
            fnames = self.sub_functions(node, extra)
            operands = "".join(a + ", " for a in args[1:])
            return [f"{bind(node)} = _torch_cond({args[0]}, {fnames[0]}, {fnames[1]}, "
                    f"({operands}))"], extra
        if node.op == "while":
            n = node.attrs["n_vars"]
            fc, fb = self.sub_functions(node, extra)
            carried = "".join(a + ", " for a in args[:n])
            captured = "".join(a + ", " for a in args[n:])      # closures: lifted by export
            return [f"{bind(node)} = _while_loop(_loop_test({fc}, ({captured})), "
                    f"_loop_body({fb}, ({captured})), ({carried}))"], extra
        if node.op in ("constant", "get") or node.target is None:
            return super().node_code(node, names, bind)
        target = _SUBSTITUTES.get(node.target) or _BY_OP.get(node.op) or node.target
        kwargs = node.kwargs
        if target is node.target and is_inplace(node.target, node.kwargs):
            plain = functional(node.target, node.kwargs)  # view writes: check_view_writes
            if plain is None:                             # no functional form known
                return super().node_code(node, names, bind)
            target, kwargs = plain
        call_args = args + [f"{k}={self.expr(v, names)}" for k, v in kwargs.items()]
        call = f"{self.global_for(target, node.op)}({', '.join(call_args)})"
        return ([f"{bind(node)} = {call}"] if node.meta is not None else [call]), extra


def unalias(graph: Graph) -> None:
    """Branches and loop bodies must not return their inputs (or one value twice):
    ``torch.cond``/``while_loop`` forbid outputs aliasing inputs. Such outputs (and views,
    which may alias an input) get a ``clone`` (``graph`` is the caller's own copy: it is changed in place)."""
    for node in graph.walk():
        for sub in node.subgraphs:
            seen, outputs = set(), []
            for out in sub.outputs:
                if isinstance(out, Node) and (out.op in ("placeholder", "constant") or
                                              out.op in VIEW_OPS or id(out) in seen):
                    out = sub.add_node("clone", torch.clone, (out,), {}, out.meta,
                                       location=node.location)
                seen.add(id(out))
                outputs.append(out)
            sub.outputs = type(sub.outputs)(outputs) if isinstance(sub.outputs, (tuple, list)) \
                else outputs


def _same_shape(value: torch.Tensor, like: torch.Tensor, dims) -> torch.Tensor:
    """Tell export that a loop body's new value has its carried value's size in ``dims``:
    it gives carried values fresh sizes, and a branch choosing between a carried value and
    a freshly computed one otherwise yields an unknown size that ``while_loop`` refuses."""
    for d in dims:
        torch._check(value.size(d) == like.size(d))
    return value


def pin_loop_shapes(graph: Graph) -> None:
    """Each ``while`` body output passes through ``_same_shape`` for the dimensions the
    graph knows are fixed (``graph`` is the caller's copy: changed in place)."""
    for node in graph.walk():
        if node.op != "while":
            continue
        body = node.subgraphs[1]
        carried = body.inputs[:node.attrs["n_vars"]]
        outputs = list(body.outputs)
        for i, (out, like) in enumerate(zip(outputs, carried)):
            if not (isinstance(out, Node) and out.meta is not None and
                    out.meta == like.meta and out.meta.shape):
                continue
            dims = tuple(d for d, size in enumerate(out.meta.shape) if size is not None)
            if dims:                        # sizes the graph knows stay fixed
                outputs[i] = body.add_node("same_shape", _same_shape, (out, like, dims),
                                           {}, out.meta, location=node.location)
        body.outputs = type(body.outputs)(outputs) if isinstance(body.outputs, tuple) \
            else outputs


def dedupe_cond_operands(graph: Graph) -> None:
    """A value a ``cond`` receives twice (as an operand and as a captured value) becomes
    one operand: ``torch.cond`` cannot take one tensor as two branch arguments. The
    second placeholder of each branch is replaced by the first (``graph``: a copy)."""
    for node in list(graph.walk()):
        if node.op != "cond":
            continue
        first: Dict[int, int] = {}
        dropped = []
        for i, value in enumerate(node.args[1:]):
            if isinstance(value, Node) and id(value) in first:
                dropped.append((i, first[id(value)]))
            elif isinstance(value, Node):
                first[id(value)] = i
        if not dropped:
            continue
        for sub in node.subgraphs:
            params = sub.inputs
            swap = {id(params[i]): params[keep] for i, keep in dropped}
            for inner in sub.nodes:
                inner.args = map_nodes(inner.args, lambda n: swap.get(id(n), n))
                inner.kwargs = map_nodes(inner.kwargs, lambda n: swap.get(id(n), n))
            sub.outputs = map_nodes(sub.outputs, lambda n: swap.get(id(n), n))
            sub.nodes = [n for n in sub.nodes if id(n) not in swap]
            sub.captures = [(o, i) for o, i in sub.captures if id(i) not in swap]
        gone = {i + 1 for i, _ in dropped}
        node.args = tuple(a for k, a in enumerate(node.args) if k not in gone)
        n_operands = node.attrs.get("n_operands")
        if n_operands is not None:
            node.attrs["n_operands"] = n_operands - sum(1 for i, _ in dropped if i < n_operands)


def unalias_loop_inputs(graph: Graph) -> None:
    """A value a ``while`` receives twice -- an initial loop value that is also a captured
    value or another initial value -- is copied for the loop variable: ``while_loop``
    refuses inputs that alias one another ("cond_fn might be aliasing the input"). The
    usual case is one constant the optimizer shares between an outer loop's counter and
    an inner loop's (``k = 0`` ... ``m = 0``), which the inner loop captures from outside
    (``graph``: a copy, changed in place)."""
    for node in list(graph.walk()):
        if node.op != "while":
            continue
        n = node.attrs["n_vars"]
        seen = {id(a) for a in node.args[n:] if isinstance(a, Node)}
        args = list(node.args)
        for i, value in enumerate(args[:n]):
            if not isinstance(value, Node):
                continue
            if id(value) in seen:
                owner = node.graph
                args[i] = owner.add_node("clone", torch.clone, (value,), {}, value.meta,
                                         location=node.location,
                                         index=owner.nodes.index(node))
            seen.add(id(value))
        node.args = tuple(args)


def check_view_writes(graph: Graph) -> None:
    """Refuse in-place writes through views (see ``ExportLowering.node_code``) anywhere in
    the graph, also where the write's result is never read again."""
    for node in graph.walk():
        if node.target is None or not is_inplace(node.target, node.kwargs):
            continue
        written = _mutated(node)
        base = _view_of(written) if written is not None else None
        if base is not None and not _written_back(node):
            raise ExportError(
                f"{format_location(node.location)}: {node.op} writes in place through a "
                f"view ({written.op} of %{base.name}), which changes the tensor it views; "
                f"an exported program is functional and would lose that write. Index the "
                f"tensor itself (y[0, 1] = v rather than y[0][1] = v) or assign the result "
                f"back (y[:, 1] = v * 2)")


def check_autocast(graph: Graph) -> None:
    """Refuse ops recorded under torch.autocast (``runtime.autocast_ops``): their casts
    happen inside torch's dispatcher, which the exported program would not repeat."""
    from ..autocast_ops import AutocastOp
    for node in graph.walk():
        if isinstance(node.target, AutocastOp):
            raise ExportError(
                f"{format_location(node.location)}: {node.op} was recorded under "
                f"torch.autocast, whose casts an exported program does not carry; export "
                f"the function traced without autocast")


def _fill_like(value: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return torch.zeros_like(value, dtype=dtype)


def shape_fills(graph: Graph) -> None:
    """A branch's stand-in zeros for a value it leaves undefined (the pending return value
    of an early return) take the size of a branch input of the same type: then both
    branches of the ``cond`` return the same symbolic shape, and the export needs no
    guess at the batch size (the traced stand-in has the example's sizes)."""
    for node in graph.walk():
        for sub in node.subgraphs if node.op == "cond" else ():
            for out, meta in zip(iter_nodes(sub.outputs), node.meta):
                if not out.attrs.get("fill") or meta is None or meta.is_static:
                    continue            # the cond's output meta: dynamic where paths differ
                like = next((p for p in sub.inputs if p.meta == meta), None)
                if like is not None:
                    out.target, out.op, out.meta = _fill_like, "zeros_like", meta
                    out.args, out.kwargs = (like, meta.dtype), {}


def lower_for_export(graph: Graph, inputs: Sequence[Node], outputs: Any, name: str = "forward"):
    """(function of the input tensors returning ``outputs``, its source, its file name,
    the effect nodes left out). ``graph`` is changed (``unalias``): pass a copy."""
    check_view_writes(graph)
    check_autocast(graph)
    shape_fills(graph)
    dedupe_cond_operands(graph)
    unalias_loop_inputs(graph)
    unalias(graph)
    pin_loop_shapes(graph)
    dropped = [n for n in graph.walk() if n.op in DROPPED_EFFECTS]
    lowering = ExportLowering()
    flat = list(iter_nodes(outputs))
    lowering.function(graph, name, list(inputs), flat, keep_effects=False, structure=outputs)
    namespace, source, filename = load_lowered(lowering, "export")
    return namespace[name], source, filename, dropped
