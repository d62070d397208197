"""What a traced tensor answers about its state beyond shape and dtype, and the global
modes a trace depends on.

A symbolic tensor stands for a real one that exists only when the graph runs, so each
question about its state is either answered exactly at trace time or refused with a
``GraphError`` naming the user's line (the call falls back to eager):

- **Layout** (``stride()``, ``is_contiguous()``, ``storage_offset()``): the example
  (meta) tensor behind a traced value has eager's layout — an argument's strides are part
  of the call signature, its offset once a trace answers ``storage_offset()``
  (``reads_offsets``: until then a view at another offset, ``data[i:i + 4]``, shares the
  graph), and meta kernels compute strides as the real ones do. A ``cond`` output whose
  branches leave different layouts, and a ``while`` variable whose layout changes across
  iterations, have a layout known only at run time:
  it is marked (``LAYOUT_VARIES`` in the node's attrs, passed on to everything computed
  from it) and layout questions about it are refused. So are they about a value whose
  shape is not static (dims known only at run time, or differing by path: even
  ``contiguous()`` strides follow the run-time sizes).
- **Autograd state** (``is_leaf``, ``grad_fn``, ``grad``): answered when exact from the
  value's ``requires_grad`` flag (``grad_flags``); refused for an argument that requires
  grad (its graph history is the caller's), where the flag depends on the path, and for
  a cond/while output that requires grad and is a leaf on one path only (``IS_LEAF``:
  ``y if t else y * 2``; zero loop iterations hand back the initial value).
- **Identity, version and storage** (``_version``, ``_base``, ``data_ptr``,
  ``untyped_storage``, ``is_shared``, ...; ``is_inference`` where ``inference_ops`` cannot
  say), **autograd calls**
  (``backward``, ``torch.autograd.grad``, hooks) and **Python attributes set on a traced
  tensor** are refused: a graph has no such objects to answer with, and a trace cannot
  run autograd on values it does not have.
- **Arguments**: an ``nn.Parameter`` keeps its class for ``type``/``isinstance``; another
  tensor subclass, or a tensor carrying Python attributes, is refused (the signature tells
  them apart, so plain tensors of the same shape still convert).

Results keep eager's layout because the graph runs the same ops on real tensors; the
executor's two shortcuts respect it (a fused C kernel takes contiguous inputs only, a
planned ``out=`` buffer is used only where eager's result would be contiguous).

Global modes: a trace records ops as the modes at its start make them behave, so a call
is keyed on the caller's default dtype, CPU autocast dtype and inference mode
(``call_modes``), and code that changes a mode while it is traced (``set_default_dtype``,
``use_deterministic_algorithms``) is refused at its first op (``check_modes``). CPU
autocast and inference mode are carried instead: an op recorded while one is on runs under
it (``autocast_ops``, ``inference_ops``), whether it was on at the call or switched in the
traced code.

Module state: ``_MODES`` is a stack of the modes of the traces running, one per
``tracing()``, per thread as ``symbolic._BUILD_STACK`` (``runtime.threads``).
"""
from __future__ import annotations

import contextlib
from typing import Optional

import torch
import torch.autograd.forward_ad as _forward_ad

from . import argument_grads, autocast_ops, autograd_effects, grad_flags, inference_ops
from .errors import GraphError
from .source_info import format_location, user_location
from .threads import PerThreadList

LAYOUT_VARIES = "layout_varies"     # node.attrs key: the layout is known only at run time

# ---------------------------------------------------------------- refused questions
_REFUSED = {
    torch.Tensor._version.__get__: "its version counter (_version)",
    torch.Tensor._base.__get__: "its base tensor (_base)",
    torch.Tensor.data_ptr: "its data pointer (data_ptr)",
    torch.Tensor.untyped_storage: "its storage (untyped_storage)",
    torch.Tensor._typed_storage: "its storage (storage)",
    torch.Tensor.storage: "its storage (storage)",
    torch.Tensor.is_shared: "whether its storage is shared (is_shared)",
    torch.Tensor.share_memory_: "moving its storage to shared memory (share_memory_)",
    torch.Tensor.is_pinned: "whether its memory is pinned (is_pinned)",
    torch.Tensor._is_view: "whether it is a view (_is_view)",
    torch.Tensor.is_set_to: "whether it shares storage with another tensor (is_set_to)",
    torch.Tensor.is_inference: "whether it is an inference tensor (is_inference)",
    torch.Tensor.output_nr.__get__: "its autograd output number (output_nr)",
    torch.Tensor._cdata.__get__: "its C object (_cdata)",
    torch.Tensor.retains_grad.__get__: "whether it retains grad (retains_grad)",
    torch.Tensor.grad.__set__: "setting its .grad",
    torch.Tensor.data.__set__: "setting its .data",
    torch.Tensor.backward: "backward() on it (autograd inside a converted function)",
    torch.Tensor.register_hook: "a hook on it (register_hook)",
    torch.Tensor.register_post_accumulate_grad_hook: "a hook on it "
                                                    "(register_post_accumulate_grad_hook)",
    torch.Tensor.retain_grad: "retain_grad() on it",
    torch.autograd.grad: "torch.autograd.grad of it (autograd inside a converted function)",
    torch.autograd.backward: "torch.autograd.backward of it (autograd inside a converted "
                             "function)",
}
_LAYOUT = {torch.Tensor.stride, torch.Tensor.is_contiguous, torch.Tensor.storage_offset}
_AUTOGRAD = {torch.Tensor.is_leaf.__get__, torch.Tensor.grad_fn.__get__,
             torch.Tensor.grad.__get__, torch.Tensor._grad_fn.__get__,
             torch.Tensor._grad.__get__}
QUESTIONS = frozenset(_REFUSED) | frozenset(_LAYOUT) | frozenset(_AUTOGRAD)


_ONLY_AT_RUN_TIME = "the tensor exists only when the graph runs"


def refusal(what: str, why: str = _ONLY_AT_RUN_TIME) -> GraphError:
    """The error refusing ``what`` (asked of a traced tensor) because ``why``, at the
    user's line: the call falls back to eager (strict mode: ConversionError)."""
    location = user_location()
    where = f"{format_location(location)}: " if location is not None else ""
    error = GraphError(f"{where}{what} of a traced tensor: {why}, so a graph cannot do this "
                       f"as eager does")
    error.location = location
    return error


def answer(func, t, args, kwargs):
    """The answer to ``func`` (one of ``QUESTIONS``) about the symbolic tensor ``t``."""
    node = t._node
    if func in _SETTERS and args and not hasattr(args[0], "_node"):
        return autograd_effects.set_real(func, args[0], args[1])    # p.grad = g: a real p
    if func == _SET_GRAD and argument_grads.known(t)[:1] == ("leaf",):
        return _set_argument_grad(t, args[1])
    if func == _SET_DATA and own_data(t, args[1]):
        return None         # ``p.grad.data *= c``: the write in place was the whole effect
    if func is torch.Tensor.is_inference and (made := inference_ops.answer(t)) is not None:
        return made                         # (made in this trace: its mode decides)
    if func in _REFUSED:
        raise refusal(_REFUSED[func])
    if func in _LAYOUT:
        if node.attrs.get(LAYOUT_VARIES):
            raise refusal(f"{func.__name__}()", "its layout (strides, contiguity, offset) "
                          "depends on the path taken at run time")
        if node.meta is None or not node.meta.is_static:
            raise refusal(f"{func.__name__}()", "its shape, and so its layout, is known "
                          "only at run time")
        if func is torch.Tensor.storage_offset:
            _offset_read()
        with torch._C.DisableTorchFunction():
            return func(*args, **kwargs)
    return _autograd_answer(func, t)


def _offset_read() -> None:
    """The trace answered ``storage_offset()``: an answer that follows the arguments'
    offsets (``x[1:]`` of ``x``), which a call's key holds only from then on
    (``reads_offsets``)."""
    from .symbolic import current_graph
    graph = current_graph()
    if graph is not None:
        graph.root.reads_offsets = True


def reads_offsets(graph) -> bool:
    """Whether the trace ``graph`` answered a ``storage_offset()`` question: its calls'
    keys must then hold their tensors' storage offsets (other layout answers, strides and
    contiguity, do not depend on them; the graph's ops run on the caller's views)."""
    return bool(getattr(graph, "reads_offsets", False))


def _autograd_answer(func, t):
    """``is_leaf``, ``grad_fn``, ``grad`` where the value's requires_grad flag decides
    them: a tensor that does not require grad is a leaf with no grad_fn and no grad; an
    op's result that requires grad is not a leaf and has no ``.grad``; the stand-in of a
    real leaf written in place answers as that leaf (``WRITTEN``)."""
    real = getattr(t, WRITTEN, None)
    if real is not None:
        return _leaf_answer(func, real)
    node = t._node
    flag = grad_flags.grad_of(t)
    name = {torch.Tensor.is_leaf.__get__: "is_leaf", torch.Tensor.grad_fn.__get__: "grad_fn",
            torch.Tensor._grad_fn.__get__: "grad_fn"}.get(func, "grad")
    if name == "grad" and autograd_effects.staged():    # after loss.backward()
        return autograd_effects.read(t)
    if argument_grads.known(t)[:1] == ("leaf",):     # (its gradient is in the call's key)
        return True if name == "is_leaf" else None if name != "grad" else \
            autograd_effects.read(t)
    if node.op == "placeholder" and name == "grad":
        raise refusal(".grad", "it is an argument's, and whether the caller's tensor has a "
                      "gradient (and which tensor) is not part of the call's signature "
                      "(shapes, dtypes, requires_grad): the graph would keep this call's "
                      "answer for the next (hold the parameters in a closure or module, or "
                      "pass the gradients as arguments)")
    if node.op == "placeholder" and flag:
        raise refusal(f".{name}", "an argument's autograd state is the caller's")
    if flag is None:
        raise refusal(f".{name}", "whether it requires grad depends on the path taken at "
                      "run time")
    if not flag:
        return True if name == "is_leaf" else None
    made_leaf = _made_leaf(node)
    if made_leaf is None:
        raise refusal(f".{name}", "whether it is a leaf depends on the path taken at run "
                      "time")
    if name == "is_leaf":
        return made_leaf
    if name == "grad_fn" and not made_leaf:
        raise refusal(".grad_fn", "its autograd node exists only when the graph runs")
    return None


_SET_GRAD = torch.Tensor.grad.__set__
_SETTERS = (_SET_GRAD, torch.Tensor.data.__set__)


def _set_argument_grad(t, value) -> None:
    """``p.grad = value`` of an argument leaf: set when the graph runs
    (``argument_grads.set_grad``), followed as a parameter's (``autograd_effects``)."""
    from .symbolic import dispatch_record
    if value is not None and not isinstance(value, torch.Tensor):
        raise refusal("setting its .grad to a non-tensor")
    dispatch_record(argument_grads.set_grad, (argument_grads.value(t), value), {})
    autograd_effects.note_set(t, value)


_SET_DATA = torch.Tensor.data.__set__
_NO_HISTORY = ("data", "detach")


def own_data(t, value) -> bool:
    """Whether ``t.data = value`` leaves ``t`` as it is: ``value`` is ``t`` or its
    ``.data`` (``.detach()``), written in place since, of its shape and dtype. Python runs
    ``p.grad.data *= c`` as ``g = p.grad; g.data = g.data.__imul__(c)``: the multiply in
    place is the effect (the graph runs it on the real gradient), setting .data back to
    what it already shares is nothing."""
    from .ops import is_inplace
    node, own = getattr(value, "_node", None), t._node
    if node is None or node.meta != own.meta:
        return False
    while node is not own and node.op not in _NO_HISTORY and node.target is not None and \
            is_inplace(node.target, node.kwargs) and node.args and hasattr(node.args[0], "op"):
        node = node.args[0]
    return node is own or node.op in _NO_HISTORY and bool(node.args) and node.args[0] is own


WRITTEN = "_tograph_written"    # attribute of the stand-in of a real leaf written in place


def note_written_leaf(out, target: torch.Tensor) -> None:
    """``out`` is the trace's stand-in for the real tensor ``target`` after an in-place
    op on it (d2l's ``param -= lr * param.grad / batch_size`` under ``no_grad``, on a
    parameter a closure holds). Eagerly ``param`` is still that leaf, so its
    identity-bound autograd state (``.grad``, ``is_leaf``, ``grad_fn``) is the leaf's: a
    leaf that requires grad, whose stand-in still requires grad, answers as itself."""
    from . import trace_reads
    if grad_flags.grad_of(out) is not True:     # (a buffer's add_: nothing to answer)
        return
    with torch._C.DisableTorchFunction():
        leaf, flag = target.is_leaf, target.requires_grad
    trace_reads.note(torch.Tensor.is_leaf.__get__, (target,), {}, leaf)
    trace_reads.note(torch.Tensor.requires_grad.__get__, (target,), {}, flag)
    if leaf and flag:
        setattr(out, WRITTEN, target)


def _leaf_answer(func, real: torch.Tensor):
    """``func`` (an autograd question) asked of the real leaf ``real``: after a staged
    backward ``.grad`` is read when the graph runs, else the answer is guarded as any
    question about a real tensor (``trace_reads``)."""
    from . import trace_reads
    if func in (torch.Tensor.grad.__get__, torch.Tensor._grad.__get__) and \
            autograd_effects.staged():
        return autograd_effects.read(real)
    with torch._C.DisableTorchFunction():
        value = func(real)
    return trace_reads.note(func, (real,), {}, value)


IS_LEAF = "is_leaf"      # node.attrs key of a cond/while output: True, False, None (varies)


def _made_leaf(node) -> Optional[bool]:
    """Whether a value that requires grad is a leaf: one made so in the function
    (``requires_grad_()``, ``requires_grad=True``), not an op's result; for a cond/while
    output, what its paths agree on (``IS_LEAF``), None where they do not or it is not
    known (a region's operand stands for a value of the enclosing graph)."""
    if IS_LEAF in node.attrs:
        return node.attrs[IS_LEAF]
    if node.op == "placeholder":
        return None
    return node.op == "requires_grad_" or node.kwargs.get("requires_grad") is True


def leaf_of(v) -> Optional[bool]:
    """Whether the tensor ``v`` (traced or real) is an autograd leaf; None when only the
    run knows."""
    node = getattr(v, "_node", None)
    if node is None:
        with torch._C.DisableTorchFunction():
            return v.is_leaf
    flag = grad_flags.grad_of(v)
    if flag is None:
        return None
    return True if not flag else _made_leaf(node)


def merge_leaves(leaf, values) -> None:
    """``leaf`` (a cond or while output) is one of ``values`` (its paths' values): it is
    a leaf where they all are, not one where none is; else only the run knows."""
    answers = {leaf_of(v) for v in values if isinstance(v, torch.Tensor)}
    leaf._node.attrs[IS_LEAF] = answers.pop() if len(answers) == 1 else None


def note_layout(node, inputs) -> None:
    """A node computed from a value of run-time layout has a run-time layout too (its
    example's strides are one path's); ``contiguous()`` makes it known again."""
    if node.op == "contiguous" or not any(
            getattr(v, "_node", None) is not None and v._node.attrs.get(LAYOUT_VARIES)
            for v in inputs):
        return
    node.attrs[LAYOUT_VARIES] = True


def layout_of(t) -> Optional[tuple]:
    """(strides, offset) of a traced or real tensor's example; None when only the run
    knows (and for a value that is not a tensor)."""
    if not isinstance(t, torch.Tensor):
        return None
    node = getattr(t, "_node", None)
    if node is not None and node.attrs.get(LAYOUT_VARIES):
        return None
    with torch._C.DisableTorchFunction():
        return tuple(t.stride()), t.storage_offset()


def same_layout(slot, value) -> bool:
    """Whether ``value`` (a loop body's output) has the layout of the ``slot`` it flows
    back into (the loop variable's layout at entry)."""
    if not isinstance(value, torch.Tensor) or slot.example is None:
        return True
    with torch._C.DisableTorchFunction():
        return layout_of(value) == (tuple(slot.example.stride()), slot.example.storage_offset())


def merge_layouts(leaf, values) -> None:
    """``leaf`` (a cond output) is one of ``values`` (its paths' values): its layout is
    known when theirs is and they agree; else only the run knows it."""
    layouts = {layout_of(v) if isinstance(v, torch.Tensor) else None for v in values}
    if len(layouts) != 1 or None in layouts:
        leaf._node.attrs[LAYOUT_VARIES] = True


def example_with_layout(example: torch.Tensor, layout: Optional[tuple]) -> torch.Tensor:
    """A meta tensor like ``example`` with strides and offset ``layout`` (when given and
    valid for its shape)."""
    if layout is None or example is None or len(layout[0]) != example.dim():
        return example
    return meta_strided(tuple(example.shape), layout[0], layout[1], example.dtype)


def meta_strided(shape, stride, offset: int, dtype) -> torch.Tensor:
    """A meta tensor with exactly these sizes, strides and storage offset."""
    with torch._C.DisableTorchFunction():
        extent = 1 + sum((s - 1) * abs(st) for s, st in zip(shape, stride)) \
            if all(s > 0 for s in shape) else 0
        base = torch.empty(offset + extent, dtype=dtype, device="meta")
        return base.as_strided(tuple(shape), tuple(stride), offset)


# ---------------------------------------------------------------- arguments
CLASS = "tensor_class"      # node.attrs key: an argument's class other than torch.Tensor


def argument_example(value: torch.Tensor, meta, name: str) -> Optional[torch.Tensor]:
    """The example behind an argument's placeholder: its strides and storage offset (a
    call's signature holds the strides, the offset once a trace reads one:
    ``reads_offsets``), or None (a default one) for a dynamic shape or a layout without
    strides."""
    if value.layout != torch.strided or meta.shape != tuple(value.shape):
        return None
    return meta_strided(tuple(value.shape), tuple(value.stride()), value.storage_offset(),
                        value.dtype)


def note_argument(node, value: torch.Tensor) -> None:
    """An argument's class and Python attributes: an ``nn.Parameter`` (a subclass whose
    ``__torch_function__`` is torch's disabled one: ops on it make plain tensors) keeps
    its class for ``type``/``isinstance``; another subclass decides in Python what every
    op returns, and attributes set on the tensor are Python state the trace would bake:
    both are refused."""
    cls = type(value)
    if cls is not torch.Tensor:
        if getattr(cls, "__torch_function__", None) is not torch._C._disabled_torch_function_impl:
            raise refusal(f"an argument of the tensor subclass {cls.__name__}", "its "
                          "__torch_function__ decides what each op returns, which a graph of "
                          "plain tensors does not repeat")
        node.attrs[CLASS] = cls
    argument_grads.note(node, value)        # (its .grad: in the key once a trace reads it)
    names = [n for n in value.__dict__ if not n.startswith(_TORCH_MARKS)]
    if names:
        raise refusal(f"Python attributes ({', '.join(sorted(names))}) of an argument",
                      "the trace would bake their values in")


# attributes torch itself sets on tensors (torch._dynamo.mark_dynamic and friends)
_TORCH_MARKS = ("_dynamo_", "_has_dynamo")


# ---------------------------------------------------------------- Python attributes
_INTERNAL = ("_node", "_fed_as", "_tograph")


def check_setattr(t, name: str) -> None:
    """``t.name = value`` on a symbolic tensor: torch's own attributes and the tracer's go
    through; a Python attribute of the user's is refused: a graph returns fresh tensors
    without it, and which object holds it after tensor control flow is known only at run
    time."""
    if name.startswith(_INTERNAL) or hasattr(type(t), name):
        return
    raise refusal(f"setting the Python attribute {name!r}", "the graph returns fresh "
                  "tensors, and which object holds it after tensor control flow is known "
                  "only at run time")


# ---------------------------------------------------------------- global modes
def _modes() -> tuple:
    return torch._C.get_default_dtype(), torch.are_deterministic_algorithms_enabled()


_NAMES = ("the default dtype (torch.set_default_dtype)",
          "deterministic algorithms (torch.use_deterministic_algorithms)")
_MODES = PerThreadList()     # per thread: see runtime.threads


def call_modes() -> tuple:
    """The caller's modes a graph is specialized for: CPU autocast (its dtype, or False
    when off; ``autocast_ops.call_mode``), the default dtype, an open forward-mode AD level
    and inference mode (a call's signature ends with these)."""
    return autocast_ops.call_mode(), torch._C.get_default_dtype(), \
        _forward_ad._current_level, torch.is_inference_mode_enabled()


def _refuse(reason: str):
    location = user_location()
    error = GraphError(f"{format_location(location)}: the call runs under {reason}")
    error.location = location
    raise error


@contextlib.contextmanager
def watching_modes():
    """Around a trace: refuse one made under forward-mode AD, and note the modes to hold
    (CPU autocast is not one: ops recorded under it run under it, ``autocast_ops``)."""
    if _forward_ad._current_level >= 0:
        # the fused C kernels read the primal values of dual tensors: tangents would be lost
        _refuse("forward-mode AD (torch.autograd.forward_ad.dual_level): a graph's fused "
                "kernels do not carry tangents")
    _MODES.append(_modes())
    autocast_ops.trace_started(True)
    inference_ops.trace_started(True)
    try:
        yield
    finally:
        inference_ops.trace_started(False)
        autocast_ops.trace_started(False)
        _MODES.pop()


_SWITCHES = {torch.set_default_dtype: (1, "d", None, torch.get_default_dtype,
                                       "the default dtype (torch.set_default_dtype)"),
             torch.use_deterministic_algorithms: (
                 1, "mode", None, torch.are_deterministic_algorithms_enabled,
                 "deterministic algorithms (torch.use_deterministic_algorithms)")}


def refuse_mode_switch(f, args, kwargs) -> None:
    """A call in traced code that switches a mode the graph cannot record: refused at its
    own line (``check_modes`` would name the first op after it). Inference mode is
    recorded instead (``inference_ops``)."""
    try:
        entry = _SWITCHES.get(f)
    except TypeError:           # (an unhashable callable)
        return
    if entry is None:
        return
    position, keyword, default, now, name = entry
    value = args[position - 1] if len(args) >= position else kwargs.get(keyword, default)
    if not isinstance(value, (bool, torch.dtype)) or value == now():
        return
    location = user_location()
    error = GraphError(f"{format_location(location)}: the converted code switches {name}, "
                       f"which a graph does not record: its ops would run otherwise than "
                       f"eager")
    error.location = location
    raise error


def check_modes() -> None:
    """Before recording an op: the global modes are still the trace's (code that switches
    the default dtype or deterministic algorithms while traced would make the graph run
    its ops otherwise than eager; inference mode is recorded: ``inference_ops``)."""
    if not _MODES:
        return
    now = _modes()
    if now != _MODES[-1]:
        changed = next(n for n, a, b in zip(_NAMES, now, _MODES[-1]) if a != b)
        location = user_location()
        error = GraphError(f"{format_location(location)}: the converted code switches "
                           f"{changed}, which a graph does not record: its ops would run "
                           f"otherwise than eager")
        error.location = location
        raise error
