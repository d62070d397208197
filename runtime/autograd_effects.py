"""A training step inside a traced function: autograd and optimizer calls as effect nodes.

The forward is traced into graph ops as usual; the calls that make a training step are
recorded as effect nodes that call autograd or the optimizer *when the graph runs*, in
their place among the other nodes ("the backward runs as autograd's"):

- ``loss.backward(...)`` and ``torch.autograd.backward(...)``: ``run_backward``;
- ``opt.step()`` and ``opt.zero_grad(set_to_none=...)`` of a ``torch.optim`` optimizer,
  ``model.zero_grad(...)`` of an ``nn.Module``, ``scheduler.step()`` of an lr scheduler:
  ``call_method`` (the object's own method, its hooks included, on every run);
- ``torch.nn.utils.clip_grad_norm_`` / ``clip_grad_value_``: ``clip_grad_norm`` /
  ``clip_grad_value`` (the norm is a graph value);
- ``scheduler.get_last_lr()``: ``last_lrs``, the lrs on that run (float stand-ins, as
  ``loss.item()``; read in its place, after any ``step()`` before it);
- ``ReduceLROnPlateau.step(metric)``: ``call_method`` with the metric of that run (a
  number's stand-in or a tensor: the scheduler takes its ``float()``);
- ``torch.autograd.grad(..., create_graph=True)``: ``autograd_grad`` keeping the
  gradients' history (a gradient penalty, a MAML inner step; a later backward is a double
  backward, where fused kernels replay their torch ops);
- ``torch.amp.GradScaler``'s ``scale``/``unscale_``/``step``/``update``/``get_scale``:
  ``runtime.scaler_effects``;
- ``torch.autograd.grad(..., allow_unused=True)``: which inputs the outputs were computed
  from is known while tracing (``grad_reach``): the others' gradients are None, the used
  ones differentiated as without ``allow_unused`` (``_used``);
- ``p.grad = g`` / ``p.data = v`` of a real tensor (a parameter) to a graph value
  (``set_real``): a node setting it in its place (``.data`` reads: ``data_aliases``);
- ``p.grad`` of a parameter after one of these in the same trace: ``read_grad``, the
  tensor ``p.grad`` holds on that run (before any of them, the trace's read is guarded as
  before, ``trace_reads``).

The nodes name the parameters they may change among their inputs, so the passes see
those tensors as mutated (``passes.rewrite.Facts``): nothing reading them is merged,
folded or moved across a step, and a forward after ``opt.step()`` reads the new values.

Whether ``p.grad`` is None after these calls is decided at trace time (Python code may
branch on it): after ``zero_grad()`` (set_to_none) it is None; after a backward it is a
tensor for each parameter that requires grad and that the differentiated values were
computed from; else as before the call. The read checks the prediction when it runs
and raises if autograd disagrees (a parameter reached only on a path not taken), never
returning another value. Calls in a branch or loop body leave the state unknown: a later
``p.grad`` read is refused (the call falls back to eager). After a
``backward(create_graph=True)`` a ``p.grad`` read may carry history: whether it requires
grad is read when the graph runs. Refused: ``opt.step(closure)``, any other method of an optimizer or scheduler, and optimizers
whose ``step`` is not torch's own.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

import torch

from . import argument_grads, grad_flags, grad_reach, module_modes, scaler_effects
from .errors import GraphError
from .graph_ops import effect
from .kernels import adam_step, sgd_step
from .source_info import format_location, user_location

NOT_STAGED = object()

NONE, TENSOR, UNKNOWN = "none", "tensor", "unknown"
_IN_BRANCH = "gradient of a tensor made in the function set in a branch or loop body"


# ------------------------------------------------------------------------- graph targets
@effect
def run_backward(tensors, grad_tensors, retain_graph, create_graph, inputs) -> None:
    """``torch.autograd.backward`` when the graph runs."""
    torch.autograd.backward(list(tensors), grad_tensors=grad_tensors,
                            retain_graph=retain_graph, create_graph=create_graph,
                            inputs=inputs)


class Held:
    """An object a node calls (an optimizer): shared by every copy of the graph, printed
    by its class (an optimizer's own repr lists its parameter groups)."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __repr__(self) -> str:
        return f"<{type(self.obj).__name__}>"

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self


@effect
def call_method(owner: Held, name: str, params, kwargs) -> None:
    """``owner.obj.name(**kwargs)`` when the graph runs (``params``: the tensors it may
    change, named for the passes). ``SGD.step()``, ``Adam.step()`` and ``AdamW.step()`` run as
    one C loop where that gives eager's bits (``kernels.sgd_step``, ``kernels.adam_step``)."""
    if name == "step" and not kwargs and (sgd_step.run(owner.obj) or adam_step.run(owner.obj)):
        return
    getattr(owner.obj, name)(**kwargs)


def _impure(fn):
    fn._tograph_impure = True           # (ops.is_impure: never merged, dropped or moved)
    return fn


@_impure
def read_grad(t: torch.Tensor, where: str) -> torch.Tensor:
    """``t.grad`` when the graph runs; the trace predicted a tensor."""
    if t.is_meta:
        return torch.empty_like(t)
    grad = t.grad
    if grad is None:
        raise RuntimeError(f"{where}: the graph read .grad of a parameter that autograd "
                           f"left None on this run (the trace expected a gradient)")
    return grad


@_impure
def autograd_grad(outputs, inputs, grad_outputs, retain_graph, create_graph=False) -> tuple:
    """``torch.autograd.grad`` when the graph runs (no None: unused inputs raise, as
    eagerly without ``allow_unused``). ``create_graph``: the gradients carry autograd
    history (a gradient penalty, a MAML inner step), fused kernels' backward replays
    their torch ops under autograd (``kernels.autograd_node``)."""
    if inputs and inputs[0].is_meta:
        return tuple(torch.empty_like(t) for t in inputs)
    return torch.autograd.grad(list(outputs), list(inputs), grad_outputs=grad_outputs,
                               retain_graph=retain_graph, create_graph=create_graph)


@effect
def expect_no_grad(t: torch.Tensor, where: str) -> None:
    """Check, when the graph runs, that ``t.grad`` is None as the trace predicted."""
    if t.grad is not None:
        raise RuntimeError(f"{where}: the graph read .grad of a parameter as None, but "
                           f"autograd gave it a gradient on this run")


@_impure
def clip_grad_norm(params, max_norm, norm_type=2.0, error_if_nonfinite=False,
                   foreach=None) -> torch.Tensor:
    """``torch.nn.utils.clip_grad_norm_`` when the graph runs: the total norm."""
    if params and params[0].is_meta:
        return torch.empty((), dtype=params[0].dtype, device="meta")
    return torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type=norm_type,
                                          error_if_nonfinite=error_if_nonfinite,
                                          foreach=foreach)


@_impure
def last_lrs(owner: Held, anchor: torch.Tensor, n: int) -> torch.Tensor:
    """``scheduler.get_last_lr()`` when the graph runs, as one float64 tensor of ``n``
    (``anchor``: a parameter of its optimizer, giving the node a tensor input)."""
    if anchor.is_meta:
        return torch.empty(n, dtype=torch.float64, device="meta")
    lrs = owner.obj.get_last_lr()
    if len(lrs) != n:
        raise RuntimeError(f"{type(owner.obj).__name__}.get_last_lr() gave {len(lrs)} "
                           f"values; the graph was traced with {n} parameter groups")
    return torch.tensor([float(v) for v in lrs], dtype=torch.float64)


@effect
def clip_grad_value(params, clip_value, foreach=None) -> None:
    """``torch.nn.utils.clip_grad_value_`` when the graph runs."""
    torch.nn.utils.clip_grad_value_(params, clip_value, foreach=foreach)


# ------------------------------------------------------------------------- trace state
def _states() -> Optional[Dict[int, tuple]]:
    """id(tensor) -> (tensor, NONE/TENSOR/UNKNOWN) for the trace being built (its root
    graph), or None outside a trace."""
    from .symbolic import current_graph
    graph = current_graph()
    if graph is None:
        return None
    root = graph.root
    states = getattr(root, "_grad_states", None)
    if states is None:
        states = root._grad_states = {}
    return states


def staged() -> bool:
    """Whether the trace being built has recorded a call that changes gradients."""
    from .symbolic import current_graph
    graph = current_graph()
    return graph is not None and getattr(graph.root, "_grad_states", None) is not None


def _set(tensors, state: str, in_branch: bool) -> None:
    """Record the state of ``tensors``' gradients after a training call (which makes
    ``staged()`` true for the rest of the trace)."""
    states = _states()
    for t in tensors:
        states[_key(t) if isinstance(t, torch.Tensor) else id(t)] = \
            (t, UNKNOWN if in_branch else state)
        if in_branch and not (isinstance(t, torch.Tensor) and not hasattr(t, "_node")):
            states[_IN_BRANCH] = (None, UNKNOWN)    # (a tensor made in the function: the
            # branch holds its own stand-in of it, so the read outside finds no entry)


def note_set(t: torch.Tensor, value) -> None:
    """``p.grad = value`` of a real tensor in a trace (recorded as a node that sets it
    when the graph runs): the state of its gradient from there on."""
    _set([t], NONE if value is None else TENSOR, _in_branch())


def set_real(func, t: torch.Tensor, value) -> None:
    """``p.grad = value`` / ``p.data = value`` of a real tensor ``p`` (a parameter) to a
    graph value: a node that sets it when the graph runs, in its place among the others
    (later ops, ``opt.step()`` and the caller see it); ``.grad`` followed as
    ``note_set``."""
    from .symbolic import dispatch_record
    if func == torch.Tensor.data.__set__ and (
            isinstance(t, torch.nn.parameter.UninitializedTensorMixin) or
            not isinstance(value, torch.Tensor) or
            (tuple(value.shape), value.dtype) != (tuple(t.shape), t.dtype)):
        raise _refuse("setting its .data to a value of another shape or dtype (a lazy "
                      "module materializing its parameter; the ops after it were traced "
                      "for the tensor as it was)")
    dispatch_record(func, (t, value), {})
    if func == torch.Tensor.grad.__set__:        # (a fresh method-wrapper: not `is`)
        note_set(t, value)


def _in_branch() -> bool:
    from .symbolic import current_graph
    return current_graph().parent is not None


def _where() -> str:
    return format_location(user_location())


def _refuse(what: str) -> GraphError:
    location = user_location()
    error = GraphError(f"{format_location(location)}: {what} inside a converted function "
                       f"cannot be part of a graph")
    error.location = location
    return error


# ------------------------------------------------------------------------- .grad reads
def grad_is_none(t: torch.Tensor) -> bool:
    """Whether ``t.grad`` is None (a guarded question, see ``trace_reads``)."""
    with torch._C.DisableTorchFunction():
        return t.grad is None


def _key(t) -> int:
    """A tensor's key in the states: a real one's id, a traced one's node's."""
    node = getattr(t, "_node", None)
    if node is None:
        return id(t)
    return id(argument_grads.key_node(t) or node)


def read(t: torch.Tensor):
    """``t.grad`` in a trace that recorded a training call: of a real tensor (a
    parameter), or of a traced leaf (``torch.ones(3, requires_grad=True)``, an argument
    that requires grad) after a backward reached it."""
    from .symbolic import dispatch_record
    states = _states()
    entry = states.get(_key(t))
    if entry is None and getattr(t, "_node", None) is not None and _IN_BRANCH in states:
        entry = states[_IN_BRANCH]
    state = entry[1] if entry is not None else _initial(t)
    if state == UNKNOWN:
        location = user_location()
        error = GraphError(
            f"{format_location(location)}: .grad read after a backward (or zero_grad) that "
            f"runs in a branch or loop body decided by a tensor (a tensor `if`, `while` or "
            f"`continue`, or a `.item()` compared): whether .grad is set there depends on "
            f"the path taken at run time, which a graph cannot answer while tracing (take "
            f"the gradient with torch.autograd.grad, or decide the branch with a Python "
            f"value)")
        error.location = location
        raise error
    t = argument_grads.value(t)         # (an argument's: its placeholder)
    if state == NONE:
        dispatch_record(expect_no_grad, (t, _where()), {})
        return None
    out = dispatch_record(read_grad, (t, _where()), {})
    out._node.attrs[grad_flags.KEY] = \
        None if getattr(current_root(), "_grad_history", False) else False
    return out


def current_root():
    from .symbolic import current_graph
    return current_graph().root


def _initial(t: torch.Tensor) -> str:
    from . import trace_reads
    node = getattr(t, "_node", None)
    if node is not None:        # made in the function: no gradient yet; else the caller's
        state = argument_grads.known(t)
        if state[:1] == ("leaf",):      # (an argument leaf: its .grad is in the call's key)
            if state[1] is False:
                raise _refuse(".grad of an argument whose gradient is not like it (another "
                              "dtype, shape or layout, or one that requires grad)")
            return NONE if state[1] is None else TENSOR
        if node.op == "placeholder":
            raise _refuse(".grad of an argument not reached by the backward (the caller's "
                          "gradient)")
        return NONE
    none = trace_reads.note(grad_is_none, (t,), {}, grad_is_none(t), any_call=True)
    return NONE if none else TENSOR


# ------------------------------------------------------------------------- backward
def backward(func, args, kwargs):
    """``t.backward(...)`` / ``torch.autograd.backward(...)`` with a traced tensor."""
    from .symbolic import dispatch_record
    if func is torch.Tensor.backward:
        names = ("self", "gradient", "retain_graph", "create_graph", "inputs")
        bound = dict(zip(names, args), **kwargs)
        tensors, grads = [bound["self"]], bound.get("gradient")
        grads = None if grads is None else [grads]
    else:
        names = ("tensors", "grad_tensors", "retain_graph", "create_graph", "grad_variables",
                 "inputs")
        bound = dict(zip(names, args), **kwargs)
        tensors = bound["tensors"]
        tensors = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)
        grads = bound.get("grad_tensors", bound.get("grad_variables"))
        if isinstance(grads, torch.Tensor):
            grads = [grads]
        grads = None if grads is None else list(grads)
    create_graph = bound.get("create_graph") or False
    if not isinstance(create_graph, bool):
        raise _refuse("backward(create_graph=<a traced value>)")
    if create_graph and torch.is_grad_enabled():    # .grad keeps its history: whether a
        current_root()._grad_history = True         # later read requires grad, the run says
    inputs = bound.get("inputs")
    if isinstance(inputs, torch.Tensor):
        inputs = [inputs]
    dispatch_record(run_backward, (tuple(tensors), grads, bound.get("retain_graph"),
                                   create_graph, None if inputs is None else list(inputs)), {})
    sure, maybe = grad_reach.reached(tensors)
    if inputs is not None:
        wanted = {_key(t) for t in inputs}
        sure = {k: v for k, v in sure.items() if k in wanted}
        maybe = {k: v for k, v in maybe.items() if k in wanted}
    _set(sure.values(), TENSOR, _in_branch())
    _set([t for t in maybe.values() if _before(t) != TENSOR], UNKNOWN, True)
    return None


def _before(t) -> str:
    """The state of ``t``'s gradient before a call that may or may not give it one."""
    entry = _states().get(_key(t) if isinstance(t, torch.Tensor) else id(t))
    if entry is not None:
        return entry[1]
    if isinstance(t, torch.Tensor) and not hasattr(t, "_node"):
        return _initial(t)
    return UNKNOWN


def grad(func, args, kwargs):
    """``torch.autograd.grad(outputs, inputs, ...)`` with traced tensors: a node whose
    results are the gradients (``.grad`` of nothing changes)."""
    from .symbolic import dispatch_record
    names = ("outputs", "inputs", "grad_outputs", "retain_graph", "create_graph",
             "only_inputs", "allow_unused", "is_grads_batched", "materialize_grads")
    bound = dict(zip(names, args), **kwargs)
    if bound.get("is_grads_batched") or bound.get("materialize_grads"):
        raise _refuse("torch.autograd.grad with is_grads_batched or materialize_grads")
    create_graph = bound.get("create_graph")
    if create_graph is not None and not isinstance(create_graph, bool):
        raise _refuse("torch.autograd.grad(create_graph=<a traced value>)")
    outputs, inputs = bound["outputs"], bound["inputs"]
    outputs = [outputs] if isinstance(outputs, torch.Tensor) else list(outputs)
    single = isinstance(inputs, torch.Tensor)
    inputs = [inputs] if single else list(inputs)
    grads = bound.get("grad_outputs")
    grads = [grads] if isinstance(grads, torch.Tensor) else None if grads is None else list(grads)
    retain = bound.get("retain_graph")
    used = _used(outputs, inputs) if bound.get("allow_unused") else [True] * len(inputs)
    result = dispatch_record(autograd_grad, (tuple(outputs), tuple(
        t for t, u in zip(inputs, used) if u), grads,
        create_graph if retain is None else retain, bool(create_graph)), {})
    # with create_graph, whether a gradient requires grad depends on the derivative
    # autograd builds (``(3 * x)'`` does not, ``(x * x)'`` does): the run answers
    history = None if create_graph and torch.is_grad_enabled() else False
    for t in result:
        t._node.attrs[grad_flags.KEY] = history
    taken = iter(result)
    return tuple(next(taken) if u else None for u in used)


def _is_leaf(t: torch.Tensor) -> bool:
    with torch._C.DisableTorchFunction():
        return t.is_leaf


def _used(outputs, inputs) -> list:
    """With ``allow_unused=True``: per input, whether the outputs were computed from it
    (its gradient a tensor) or not (None), as the trace tells (``grad_reach``); the used
    ones are differentiated without ``allow_unused`` (a wrong guess raises, never a wrong
    None). Refused where only the run can tell: an input reached on one path only, a
    traced input the walk does not end at (an intermediate value), outputs computed from a
    real tensor with history of its own (the input may be behind it), and no input used
    (eager's call still runs autograd: errors, the graph freed)."""
    sure, maybe = grad_reach.reached(outputs)
    for t in (*sure.values(), *maybe.values()):
        if isinstance(t, torch.Tensor) and not hasattr(t, "_node") and not _is_leaf(t):
            raise _refuse("torch.autograd.grad(allow_unused=True) of values computed from "
                          "a tensor with autograd history of its own")
    used = []
    for t in inputs:
        key = _key(t)
        if key in maybe or (key not in sure and hasattr(t, "_node")):
            raise _refuse("torch.autograd.grad(allow_unused=True) with an input whose use "
                          "only the run can tell")
        used.append(key in sure)
    if not any(used):
        raise _refuse("torch.autograd.grad(allow_unused=True) whose inputs are all unused")
    return used


# ------------------------------------------------------------------------- library calls
def _owner_params(owner) -> List[torch.Tensor]:
    if isinstance(owner, torch.optim.Optimizer):
        return [p for group in owner.param_groups for p in group["params"]]
    return list(owner.parameters())


def _record_method(owner, name: str, kwargs) -> None:
    from .symbolic import dispatch_record
    params = _owner_params(owner) if not _is_scheduler(owner) else \
        _owner_params(owner.optimizer)
    dispatch_record(call_method, (Held(owner), name, params, kwargs), {})
    _set([], TENSOR, False)
    _owners().append(owner)


def _owners() -> list:
    from .symbolic import current_graph
    root = current_graph().root
    if getattr(root, "_staged_owners", None) is None:
        root._staged_owners = []
    return root._staged_owners


def owners(graph) -> list:
    """The objects whose methods the traced ``graph`` calls when it runs (optimizers,
    lr schedulers, modules' zero_grad): their state is not the trace's to guard."""
    return list(getattr(graph, "_staged_owners", None) or ())


def _is_scheduler(owner) -> bool:
    scheduler = getattr(torch.optim.lr_scheduler, "LRScheduler", None) or \
        torch.optim.lr_scheduler._LRScheduler
    return isinstance(owner, scheduler) and isinstance(getattr(owner, "optimizer", None),
                                                       torch.optim.Optimizer)


def _torch_own(cls, name: str) -> bool:
    """Whether ``cls.name`` is torch's own method. A subclass that only inherits ``step``
    may still hold one in its ``__dict__``: torch's step-hook wrapper, which the first
    optimizer made of that subclass installs there when torch's class was not wrapped
    yet (``Optimizer._patch_step_function``); what it wraps decides."""
    for klass in cls.__mro__:
        if name in klass.__dict__:
            f = klass.__dict__[name]
            if getattr(f, "hooked", False) and getattr(f, "__wrapped__", None) is not None:
                return (getattr(f.__wrapped__, "__module__", None) or "").startswith("torch.")
            return (klass.__module__ or "").startswith("torch.")
    return False


def _zero_grad(owner, args, kwargs) -> None:
    set_to_none = kwargs.get("set_to_none", args[0] if args else True)
    if not isinstance(set_to_none, bool):
        raise _refuse("zero_grad(set_to_none=<a traced value>)")
    _record_method(owner, "zero_grad", {"set_to_none": set_to_none})
    if set_to_none:
        _set(_owner_params(owner), NONE, _in_branch())


# (for runtime.scaler_effects)
torch_own, refuse, owner_params = _torch_own, _refuse, _owner_params


def note_step(*owners) -> None:
    """A call that may change gradients and parameters was recorded, on ``owners``."""
    _set([], TENSOR, False)
    _owners().extend(owners)


def note_value(out, owner) -> None:
    """``out`` is a value read from ``owner`` when the graph runs (no gradient)."""
    out._node.attrs[grad_flags.KEY] = False
    note_owner(owner)


def note_owner(owner) -> None:
    """The graph calls ``owner``'s methods when it runs: its state is not guarded."""
    _owners().append(owner)


def staged_call(f, args, kwargs) -> Any:
    """The result of calling ``f`` while tracing when it is a training call (recorded as
    an effect node), else ``NOT_STAGED``."""
    owner = getattr(f, "__self__", None)
    if owner is None:
        owner = _step_wrapped_by_scheduler(f)
    name = getattr(f, "__name__", None)
    if scaler_effects.is_scaler(owner):     # torch.amp.GradScaler's scale/step/update
        return scaler_effects.staged(owner, name, args, kwargs)
    if isinstance(owner, torch.optim.Optimizer):
        if name not in ("step", "zero_grad") or not _torch_own(type(owner), name) or \
                name == "step" and f != getattr(owner, "step"):
            raise _refuse(f"{type(owner).__name__}.{name}() (only step() and zero_grad() of "
                          f"torch.optim's optimizers are staged)")
        if name == "zero_grad":
            _zero_grad(owner, args, kwargs)
            return None
        if args or kwargs:
            raise _refuse(f"{type(owner).__name__}.step(closure)")
        _record_method(owner, "step", {})
        return None
    if _is_scheduler(owner):
        if name == "get_last_lr" and not args and not kwargs and \
                _torch_own(type(owner), name):
            return _last_lr_values(owner)
        metric = _plateau_metric(owner, name, args, kwargs)
        if metric is not None:      # ReduceLROnPlateau.step(val_loss): the run's value
            _record_method(owner, "step", {"metrics": metric[0]})
            return None
        if name != "step" or args or kwargs or not _torch_own(type(owner), name):
            raise _refuse(f"{type(owner).__name__}.{name}(...) of an lr scheduler (only "
                          f"step() with no argument, ReduceLROnPlateau.step(metric) and "
                          f"get_last_lr() are staged)")
        _record_method(owner, "step", {})
        return None
    if isinstance(owner, torch.nn.Module) and name == "zero_grad" and \
            _torch_own(type(owner), "zero_grad"):
        _zero_grad(owner, args, kwargs)
        return None
    if isinstance(owner, torch.nn.Module) and name in ("train", "eval"):
        staged = module_modes.staged(owner, name, args, kwargs)     # model.train()/eval()
        if staged is not module_modes.NOT_STAGED:
            return staged
    if f is torch.nn.utils.clip_grad_norm_ or f is torch.nn.utils.clip_grad_value_:
        return _clip(f, args, kwargs)
    if isinstance(owner, torch.nn.Module) and name == "update_parameters":
        from . import averaged_models       # (swa_utils.AveragedModel: its own method)
        staged = averaged_models.staged(f, args, kwargs)
        if staged is not averaged_models.NOT_STAGED:
            return staged
    return NOT_STAGED


def _plateau_metric(owner, name: str, args, kwargs) -> Optional[tuple]:
    """``(metric,)`` of ``ReduceLROnPlateau.step(metric)`` (a number, a stand-in for one
    or a tensor: the scheduler takes ``float()`` of it when the graph runs), else None."""
    if name != "step" or not isinstance(owner, torch.optim.lr_scheduler.ReduceLROnPlateau) \
            or not _torch_own(type(owner), name) or len(args) + len(kwargs) != 1 or \
            set(kwargs) - {"metrics"}:
        return None
    return (args[0] if args else kwargs["metrics"],)


def _last_lr_values(owner) -> list:
    """``owner.get_last_lr()``: the list of the lrs on each run, as float stand-ins."""
    from .introspection import mark
    from .symbolic import dispatch_record
    params = _owner_params(owner.optimizer)
    if not params:
        raise _refuse(f"{type(owner).__name__}.get_last_lr() of an optimizer without "
                      f"parameters")
    n = len(owner.optimizer.param_groups)
    out = dispatch_record(last_lrs, (Held(owner), params[0], n), {})
    out._node.attrs[grad_flags.KEY] = False
    _owners().append(owner)
    values = []
    for i in range(n):
        value = out[i]
        mark(value, "float")
        values.append(value)
    return values


def _step_wrapped_by_scheduler(f):
    """The optimizer whose ``step`` an lr scheduler replaced by ``f`` (a plain function
    in the optimizer's ``__dict__`` that marks the step as called), else None."""
    if not getattr(f, "_wrapped_by_lr_sched", False) or f.__closure__ is None:
        return None
    for name, cell in zip(f.__code__.co_freevars, f.__closure__):
        if name == "opt_ref":
            owner = cell.cell_contents()
            return owner if isinstance(owner, torch.optim.Optimizer) else None
    return None


def _clip(f, args, kwargs):
    from .symbolic import contains_symbolic, dispatch_record
    params = args[0] if args else kwargs.pop("parameters")
    params = [params] if isinstance(params, torch.Tensor) else list(params)
    rest = dict(zip(("max_norm", "norm_type", "error_if_nonfinite", "foreach")
                    if f is torch.nn.utils.clip_grad_norm_ else ("clip_value", "foreach"),
                    args[1:]), **kwargs)
    if contains_symbolic(params) or contains_symbolic(tuple(rest.values())):
        raise _refuse(f"{f.__name__} of traced tensors")
    if f is torch.nn.utils.clip_grad_value_:
        dispatch_record(clip_grad_value, (params,), rest)
        _set([], TENSOR, False)         # (no state changes; later reads are nodes)
        return None
    out = dispatch_record(clip_grad_norm, (params,), rest)
    _set([], TENSOR, False)
    out._node.attrs[grad_flags.KEY] = False
    return out
