"""The allow-list of operations a saved graph may call: name tables of torch operations
(from ``torch.overrides``, less ``_DENIED``, plus ``_ALSO_ALLOWED``) and of
``runtime.graph_ops`` functions, the dtype / layout / memory-format name tables, and
``target_name`` / ``resolve_target`` to go from a node target to its saved name and back."""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Tuple

import torch

from .. import graph_ops, inference_warnings

# Overridable operations a loaded graph must never call: they call Python callables
# given as arguments, register hooks, or unpickle/produce callables.
_DENIED = {
    "torch.Tensor.apply_", "torch.Tensor.map_", "torch.Tensor.map2_",
    "torch.Tensor.register_hook", "torch.Tensor.register_post_accumulate_grad_hook",
    "torch.Tensor.__reduce_ex__", "torch.Tensor.__setstate__", "torch.Tensor.module_load",
    "torch.Tensor._backward_hooks.__get__", "torch.Tensor._post_accumulate_grad_hooks.__get__",
    "torch.Tensor.grad_fn.__get__", "torch.Tensor._grad_fn.__get__",
    "torch.Tensor.__deepcopy__", "torch.Tensor.share_memory_",
}

# functions of runtime.graph_ops that are helpers (decorators), not graph targets
_GRAPH_OPS_HELPERS = {"register", "effect"}

# Operations torch.overrides lists as "ignored" (no tensor argument to dispatch on, or
# deprecated wrappers) that tracing still records: factories seen by the tracing
# TorchFunctionMode, ``Tensor.new_*``. They only build tensors.
_ALSO_ALLOWED = {f"torch.{n}" for n in (
    "tensor", "as_tensor", "scalar_tensor", "zeros", "ones", "full", "empty", "empty_strided",
    "empty_permuted", "arange", "range", "linspace", "logspace", "eye", "rand", "rand_like",
    "randn", "randn_like", "randint", "randint_like", "randperm", "normal", "tril_indices",
    "triu_indices", "vander", "bartlett_window", "blackman_window", "hamming_window",
    "hann_window", "kaiser_window", "fill", "as_strided", "result_type", "promote_types",
    "can_cast", "fft.fftfreq", "fft.rfftfreq", "functional.broadcast_shapes",
    "Tensor.new_tensor", "Tensor.new_zeros", "Tensor.new_ones", "Tensor.new_full",
    "Tensor.new_empty", "Tensor.new_empty_strided", "Tensor.unflatten", "Tensor.stride",
    "nn.functional.sigmoid", "nn.functional.tanh", "nn.functional.hardsigmoid",
    "nn.functional.hardswish", "nn.functional.upsample", "nn.functional.upsample_bilinear",
    "nn.functional.upsample_nearest")}

# --------------------------------------------------------------------------- name tables
def _named_values(kind) -> Dict[str, Any]:
    """``{"float32": torch.float32, ...}`` for every torch attribute of type ``kind``."""
    table = {}
    for value in vars(torch).values():
        if isinstance(value, kind):
            table.setdefault(str(value).replace("torch.", ""), value)
    return table


_TABLES: Dict[str, Any] = {}


def _enum_table(kind: str) -> Dict[str, Any]:
    if kind not in _TABLES:
        _TABLES[kind] = _named_values({"dtype": torch.dtype, "layout": torch.layout,
                                       "memory_format": torch.memory_format}[kind])
    return _TABLES[kind]


def _torch_targets() -> Tuple[Dict[str, Callable], Dict[Any, str]]:
    """(name -> callable, callable -> name) for the torch operations a graph may call.

    Built once: torch's testing overrides (every function ``__torch_function__`` can
    report), the in-place public functions torch lists as overridable, and the factories
    in ``_ALSO_ALLOWED``, named by the namespace torch indexes them under."""
    if "targets" in _TABLES:
        return _TABLES["targets"]
    from torch import overrides
    try:
        _, index = overrides._get_overridable_functions()
    except Exception:       # a torch without the private index: name by namespace
        index = {}
        for namespace, funcs in overrides.get_overridable_functions().items():
            prefix = getattr(namespace, "__name__", None)
            if prefix is None:
                continue
            prefix = "torch.Tensor" if namespace is torch.Tensor else prefix
            for func in funcs:
                index.setdefault(func, f"{prefix}.{getattr(func, '__name__', '?')}")
    ignored = set(overrides.get_ignored_functions())
    allowed = list(overrides.get_testing_overrides())
    for func, name in index.items():
        last = name.rsplit(".", 1)[-1]
        if name in _ALSO_ALLOWED and not isinstance(func, type):
            allowed.append(func)
            continue
        if isinstance(func, type) or func in ignored or name.endswith(".__set__"):
            continue
        if last.endswith("_") and not last.startswith("_") and \
                name.startswith(("torch.", "torch.nn.functional.", "torch.nn.init.")):
            allowed.append(func)
    by_name: Dict[str, Callable] = {}
    by_fn: Dict[Any, str] = {}
    for func in allowed:
        name = index.get(func)
        if name is None:
            fname = getattr(func, "__name__", None)
            if fname and getattr(torch, fname, None) is func:
                name = f"torch.{fname}"
        if name is None or name in _DENIED or name in by_name:
            continue
        by_name[name] = func
        try:
            by_fn.setdefault(func, name)
        except TypeError:   # unhashable callable: cannot be looked up anyway
            pass
    _TABLES["targets"] = (by_name, by_fn)
    return by_name, by_fn


def _graph_op_targets() -> Dict[str, Callable]:
    """The functions of ``runtime.graph_ops``: public module functions and the registry."""
    table = {}
    for name, value in vars(graph_ops).items():
        if callable(value) and not name.startswith("_") and \
                getattr(value, "__module__", None) == graph_ops.__name__ and \
                not isinstance(value, type) and name not in _GRAPH_OPS_HELPERS:
            table[f"runtime.graph_ops.{name}"] = value
    table.update(graph_ops.REGISTRY)
    return table


def target_name(target: Callable) -> Optional[str]:
    """The saved name of a node target, or None when it is not an allowed operation."""
    target = inference_warnings.unwrapped(target)   # (an op run below eager's frames)
    for name, fn in _graph_op_targets().items():
        if fn is target:
            return name
    _, by_fn = _torch_targets()
    try:
        return by_fn.get(target)
    except TypeError:
        return None


def resolve_target(name: str) -> Optional[Callable]:
    """The allowed callable a saved name stands for, or None."""
    if not isinstance(name, str):
        return None
    fn = _graph_op_targets().get(name)
    if fn is not None:
        return fn
    return _torch_targets()[0].get(name)
