"""``to_torch_export``: a graph (or a converted function) as a ``torch.export`` program,
with tensor ``cond``/``while`` nodes as ``torch.cond``/``torch.while_loop``.

    ep = to_torch_export(f, (x,))            # f: @to_graph function, Module or a Graph
    torch.export.save(ep, "f.pt2")           # later, anywhere, without tograph:
    torch.export.load("f.pt2").module()(x)

Dynamic dimensions: a converted function is traced again with the chosen dimensions
left dynamic in its placeholders (``dynamic="auto"``: dimension 0 of every tensor
argument, the batch); any use of such a size in the function becomes a graph value, never
a baked-in number, so one export serves every size. If the function needs such a size
as a Python number (``for i in range(x.shape[0])`` as a Python loop is fine: it becomes
a ``while``; a shape passed to a Python-only API is not), the auto mode warns and exports
static shapes. ``dynamic=None`` exports static shapes; ``dynamic={"x": (0, 1)}`` (by
argument name or flat tensor index) chooses the dimensions. A ``Graph`` keeps the
dynamic dimensions its placeholders have (``shape=(None, 3)``). ``torch.export`` then
decides, from the ops, which of them stay dynamic (``dynamic_dims(ep)`` says).
"""
from __future__ import annotations

import re
import traceback
import warnings
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.utils._pytree as pytree

from ..executor import _LINE_NODES, Unstack
from ..graph import Graph, Node, iter_nodes, map_structure
from ..source_info import format_location
from .errors import ExportError, ExportWarning
from .lowering import lower_for_export


class _Program(torch.nn.Module):
    """The module torch.export traces: its forward is the generated function."""

    def __init__(self, fn):
        super().__init__()
        self._fn = fn

    def forward(self, *tensors):
        return self._fn(*tensors)


def _cleanup(graph: Graph, outputs: Any) -> Tuple[Graph, Any]:
    """The cleanup passes (fold, simplify, CSE, DCE, LICM), never fusion into C kernels;
    ``outputs`` mapped onto the new graph's nodes."""
    from ..passes.manager import CLEANUP, optimize
    cleaned = optimize(graph, passes=CLEANUP)
    env = {id(a): b for a, b in zip(iter_nodes(graph.outputs), iter_nodes(cleaned.outputs))}
    return cleaned, map_structure(outputs, lambda v: isinstance(v, Node), lambda v: env[id(v)])


def _flat_dynamic(dynamic, names: List[str], flat: List[Any]) -> Dict[int, Tuple[int, ...]]:
    """``dynamic`` as {flat leaf index: dims}; "auto" means dim 0 of every tensor."""
    if dynamic in (None, False, "static"):
        return {}
    if dynamic == "auto":
        return {i: (0,) for i, v in enumerate(flat)
                if isinstance(v, torch.Tensor) and v.dim() >= 1}
    out = {}
    for key, dims in dict(dynamic).items():
        index = names.index(key) if isinstance(key, str) and key in names else key
        if not isinstance(index, int) or not 0 <= index < len(flat) or \
                not isinstance(flat[index], torch.Tensor):
            raise ValueError(f"dynamic: {key!r} is not a tensor argument (tensor arguments: "
                             f"{[n for n, v in zip(names, flat) if isinstance(v, torch.Tensor)]})")
        dims = (dims,) if isinstance(dims, int) else tuple(dims)
        bad = [d for d in dims if not 0 <= d < flat[index].dim()]
        if bad:
            raise ValueError(f"dynamic: {key!r} has no dimension {bad[0]} "
                             f"(shape {tuple(flat[index].shape)})")
        out[index] = dims
    return out


def _traced(source, args, kwargs, dynamic) -> Tuple[Graph, Any, List[torch.Tensor]]:
    """(graph, output structure of nodes, the tensor inputs in placeholder order)."""
    if isinstance(source, Graph):
        tensors = [a if isinstance(a, torch.Tensor) else torch.as_tensor(a) for a in args]
        if len(tensors) != len(source.inputs):
            raise ValueError(f"the graph has {len(source.inputs)} inputs, got "
                             f"{len(tensors)} example arguments")
        for p, t in zip(source.inputs, tensors):
            _check_example(p, t)
        return source, source.outputs, tensors
    if not hasattr(source, "trace_graph"):
        raise TypeError(f"to_torch_export needs a runtime.Graph or a @to_graph function, "
                        f"got {type(source).__name__}")
    flat = pytree.tree_leaves((tuple(args), dict(kwargs)))
    names = _tensor_names(source, args, kwargs, len(flat))
    tensors = [id(v) for v in flat if isinstance(v, torch.Tensor)]
    if len(set(tensors)) != len(tensors):     # (a trace makes them one input: f(x, x))
        raise ExportError("the example arguments pass one tensor object as several "
                          "arguments; an exported program takes each as its own input: "
                          "pass distinct tensors (x and x.clone())")
    chosen = _flat_dynamic(dynamic, names, flat)
    try:
        graph, structure = source.trace_graph(tuple(args), dict(kwargs), chosen)
    except Exception as e:
        if not chosen:
            raise
        if dynamic != "auto":
            dims = {names[i]: d for i, d in chosen.items()}
            raise ExportError(f"{e} -- with dimensions {dims} dynamic; a size the function "
                              f"needs as a number must be exported static") from e
        graph, structure = source.trace_graph(tuple(args), dict(kwargs), {})   # static
        warnings.warn(ExportWarning(f"the batch dimension cannot stay dynamic ({e}); "
                                    f"exporting static shapes"), stacklevel=4)
    for name, location in getattr(graph, "mutated_inputs", ()):
        raise ExportError(f"{format_location(location)}: the function mutates argument "
                          f"{name!r} in place; an exported program is functional and would "
                          f"not write the caller's tensor (return the new value instead)")
    structure = map_structure(structure, lambda v: isinstance(v, Unstack),
                              lambda v: v.node)     # a list grown in a loop: its stack
    return graph, structure, [v for v in flat if isinstance(v, torch.Tensor)]


def _check_example(placeholder: Node, value: torch.Tensor) -> None:
    """An example for a graph's placeholder must fit its declared shape and dtype."""
    meta = placeholder.meta
    shape = meta.shape if meta is not None else None
    fits = shape is None or (len(shape) == value.dim() and all(
        d is None or d == s for d, s in zip(shape, value.shape)))
    if not fits or (meta is not None and meta.dtype != value.dtype):
        raise ValueError(f"example for placeholder {placeholder.name!r}: "
                         f"{str(value.dtype).replace('torch.', '')}{list(value.shape)} does "
                         f"not fit {meta}")


def _tensor_names(source, args, kwargs, n: int) -> List[str]:
    names = getattr(source, "_param_names", None) or []
    from_args = list(names[:len(args)]) + list(kwargs)
    return (from_args + [f"input{i}" for i in range(len(from_args), n)])[:n]


def _dynamic_shapes(graph: Graph) -> Optional[tuple]:
    specs = []
    for p in graph.inputs:
        shape = p.meta.shape if p.meta is not None else None
        dims = {d: torch.export.Dim.AUTO for d, size in enumerate(shape or ()) if size is None}
        specs.append(dims or None)
    return (tuple(specs),) if any(specs) else None


def located_export_error(e: BaseException, what: str) -> ExportError:
    """An ExportError naming the user line of the graph node the failure came from."""
    node = _node_in(traceback.format_exception(e)) or _node_in([str(e)])
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    if node is None:
        return ExportError(f"{what} failed: {text}")
    return ExportError(f"{format_location(node.location)}: {what} failed at op {node.op!r} "
                       f"(node %{node.name}): {text}")


_GENERATED = re.compile(r'File "(<tograph-export-\d+>)", line (\d+)')


def node_of_trace(text: str) -> Optional[Node]:
    """The graph node of the innermost generated export line a stack trace mentions."""
    found = None
    for filename, line in _GENERATED.findall(text or ""):
        node = _LINE_NODES.get(filename, {}).get(int(line))
        found = node or found
    return found


def _node_in(chunks: Sequence[str]) -> Optional[Node]:
    return node_of_trace("".join(chunks))


def to_torch_export(source, example_args: Sequence[Any] = (), example_kwargs=None,
                    dynamic="auto") -> "torch.export.ExportedProgram":
    """Export ``source`` (a ``runtime.Graph`` or a ``@to_graph`` function) for
    ``example_args``: a ``torch.export.ExportedProgram`` whose tensor ``cond``/``while``
    are ``torch.cond``/``torch.while_loop``. Python arguments are specialized as in a
    trace; tensor arguments are the program's inputs, in order."""
    return export_program(source, example_args, example_kwargs, dynamic)[0]


def export_program(source, example_args, example_kwargs=None, dynamic="auto",
                   numbers_as_tensors=False):
    """(the ExportedProgram, the names of its tensor inputs). ``numbers_as_tensors``:
    Python numbers among the outputs become 0-d tensors (ONNX outputs are tensors).
    With ``dynamic="auto"``, a program torch.export refuses with a dynamic batch is
    exported again with static shapes (and an ExportWarning saying why)."""
    try:
        return _export_program(source, example_args, example_kwargs, dynamic,
                               numbers_as_tensors)
    except ExportError as e:
        if dynamic != "auto" or isinstance(source, Graph):
            raise
        try:
            result = _export_program(source, example_args, example_kwargs, None,
                                     numbers_as_tensors)
        except ExportError:
            raise e from None
        warnings.warn(ExportWarning(f"the batch dimension cannot stay dynamic ({e}); "
                                    f"exported static shapes"), stacklevel=3)
        return result


def _export_program(source, example_args, example_kwargs, dynamic, numbers_as_tensors):
    graph, outputs, tensors = _traced(source, tuple(example_args), example_kwargs or {},
                                      dynamic)
    cleaned, outputs = _cleanup(graph, outputs)
    if numbers_as_tensors:
        outputs = map_structure(outputs, lambda v: isinstance(v, (bool, int, float)),
                                lambda v: cleaned.constant(torch.tensor(v)))
    fn, _, _, dropped = lower_for_export(cleaned, cleaned.inputs, outputs)
    if dropped:
        ops = sorted({n.op for n in dropped})
        warnings.warn(ExportWarning(f"left out of the export: {', '.join(ops)} "
                                    f"(effects a deployed program does not keep)"),
                      stacklevel=2)
    wanted = _dynamic_shapes(cleaned)
    ep = _export(fn, tensors, wanted)
    kept = dynamic_dims(ep)
    asked = [tuple(spec or ()) for spec in (wanted[0] if wanted else [()] * len(tensors))]
    if kept != asked:        # torch.export pinned some: say so, export them as fixed sizes
        lost = [f"{p.name}[{d}]" for p, a, k in zip(cleaned.inputs, asked, kept)
                for d in a if d not in k]
        if lost:
            warnings.warn(ExportWarning(
                f"torch.export fixed {', '.join(lost)} to the example's size (the ops "
                f"require it, or the example size is 0 or 1); exported as static"),
                stacklevel=3)
        ep = _export(fn, tensors, _explicit_shapes(kept))
    return ep, [p.name for p in cleaned.inputs]


def _export(fn, tensors, dynamic_shapes):
    """torch.export, with sizes "oblivious": a dynamic size is not assumed to be >= 2 (its
    0/1 specialization), so the program also serves batches of 1 and 0."""
    import torch.fx.experimental._config as fx_config
    try:
        with fx_config.patch(backed_size_oblivious=True):
            return torch.export.export(_Program(fn), tuple(tensors),
                                       dynamic_shapes=dynamic_shapes, strict=False)
    except Exception as e:
        raise located_export_error(e, "torch.export") from e


def _explicit_shapes(kept: List[Tuple[int, ...]]):
    """Dims that stayed dynamic, as named ``Dim``s; every other dim static."""
    specs = tuple({d: torch.export.Dim.DYNAMIC for d in dims} or None for dims in kept)
    return (specs,) if any(specs) else None


def dynamic_dims(ep) -> List[Tuple[int, ...]]:
    """Per tensor input of an exported program, the dimensions that stayed dynamic."""
    out = []
    for node in ep.graph.nodes:
        if node.op != "placeholder" or node.name not in _user_inputs(ep):
            continue
        val = node.meta.get("val")
        shape = getattr(val, "shape", ())
        out.append(tuple(d for d, s in enumerate(shape) if _symbolic(s)))
    return out


def _symbolic(size) -> bool:
    """A size torch.export kept symbolic (not an int, nor a symbol pinned to a value)."""
    if isinstance(size, int):
        return False
    node = getattr(size, "node", None)
    return node is None or node.maybe_as_int() is None


def _user_inputs(ep) -> set:
    from torch.export.graph_signature import InputKind
    return {spec.arg.name for spec in ep.graph_signature.input_specs
            if spec.kind == InputKind.USER_INPUT}
