"""The hooks registered on a module tree, put back as they were after a refused trace;
and the tree's modules' own attributes, to tell what a trace set on them.

A library may register hooks on submodules lazily, on the first call, and mark the model
as done with an attribute on it (transformers' output capturing:
``model._output_capturing_hooks_installed = True`` after ``register_forward_hook`` on its
layers). When a trace of that first call is refused, the side-effect check restores the
model's attributes (the mark goes), so the hooks must go too: else the eager run installs
them a second time, and every captured output is captured twice (segformer's decode head
then crashed; other models returned each hidden state twice).
"""
from __future__ import annotations

from typing import List, Tuple

from . import module_containers

# the dicts ``register_forward_hook``/``register_forward_pre_hook``/... add entries to
_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks",
          "_forward_hooks_with_kwargs", "_forward_hooks_always_called",
          "_forward_pre_hooks_with_kwargs", "_state_dict_hooks", "_state_dict_pre_hooks",
          "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks")


class Taken:
    """``hooks``: [(hook dict, its keys)]; ``attributes``: [(module, copy of its
    ``__dict__``)] for every module of the tree; ``tensors``: [(module's name,
    "_parameters" or "_buffers", that dict, a copy)]; ``containers``: [(module's name,
    attribute, a list/dict/set the module holds, a copy)]."""

    __slots__ = ("hooks", "attributes", "tensors", "containers")

    def __init__(self, hooks, attributes, tensors=(), containers=()):
        self.hooks: List[Tuple[dict, frozenset]] = hooks
        self.attributes: list = attributes
        self.tensors: list = list(tensors)
        self.containers: list = list(containers)


NOTHING = Taken([], [])


def take(owner) -> Taken:
    """The hook dicts' keys and the attributes of ``owner``'s module tree (nothing if
    ``owner`` is not an ``nn.Module``)."""
    modules = getattr(owner, "modules", None)
    if not (callable(modules) and isinstance(getattr(owner, "__dict__", None), dict)
            and "_modules" in vars(owner)):
        return NOTHING
    hooks, attributes, tensors, containers = [], [], [], []
    for path, m in owner.named_modules(remove_duplicate=True):
        attributes.append((m, dict(vars(m))))
        containers += module_containers.take(path, m)
        for name in ("_parameters", "_buffers"):
            d = vars(m).get(name)
            if isinstance(d, dict):
                tensors.append((path, name, d, dict(d)))
        for name in _DICTS:
            d = vars(m).get(name)
            if isinstance(d, dict):
                hooks.append((d, frozenset(d)))
    return Taken(hooks, attributes, tensors, containers)


def restore(taken: Taken) -> None:
    """Remove the hooks registered since ``take`` (those removed meanwhile stay removed:
    their handles were used)."""
    for d, keys in taken.hooks:
        for k in [k for k in d if k not in keys]:
            del d[k]
    for _, _, d, before in taken.tensors:     # a parameter or buffer the trace replaced
        if d.keys() != before.keys() or any(d[k] is not v for k, v in before.items()):
            d.clear()
            d.update(before)
    module_containers.restore(taken.containers)


def replaced_tensor(taken: Taken):
    """The first parameter or buffer of the tree replaced (or added, deleted) since
    ``take``, as ``"buffer 'u' of submodule '2.parametrizations.weight.0'"``, or None.
    A trace replacing one leaves a symbolic tensor in the module (code the trace ran
    unconverted, e.g. a parametrization's ``self._u = ...`` reached through a property,
    which the owner's attribute fingerprint does not reach)."""
    for path, name, d, before in taken.tensors:
        for k in list(before) + [k for k in d if k not in before]:
            if d.get(k, MISSING) is not before.get(k, MISSING):
                kind = "buffer" if name == "_buffers" else "parameter"
                return f"{kind} {k!r} of submodule {path!r}" if path else f"{kind} {k!r}"
    return None


def tensors_of(modules) -> Taken:
    """Only the parameter and buffer dicts of the trees of ``modules`` (modules the call
    receives or reaches through globals and closures: a model passed to a training step)."""
    seen, tensors, containers = set(), [], []
    for root in modules:
        if _is_module(root) and id(root) not in seen:
            seen.add(id(root))
            taken = take(root)
            tensors += taken.tensors
            containers += taken.containers
    return Taken([], [], tensors, containers)


def _is_module(value) -> bool:
    """Whether ``value`` is an ``nn.Module``, asked of its type only: a stand-in for a value
    tensor control flow chose raises on any attribute read (``getattr(v, "modules")``)."""
    return any(c.__name__ == "Module" and c.__module__ == "torch.nn.modules.module"
               for c in type(value).__mro__)


def added(taken: Taken) -> list:
    """The hooks registered since ``take``: ``[(dict, key, hook)]``, in order."""
    return [(d, k, d[k]) for d, keys in taken.hooks for k in list(d) if k not in keys]


def set_attributes(taken: Taken):
    """The attributes set on the tree's modules since ``take``: ``[(module, name, before
    or MISSING, now)]``, or None if one was deleted."""
    found = []
    for m, before in taken.attributes:
        now = vars(m)
        if any(k not in now for k in before):
            return None
        found += [(m, k, before.get(k, MISSING), v) for k, v in now.items()
                  if k not in before or before[k] is not v]
    return found


MISSING = object()
