"""The hooks registered on a module tree, put back as they were after a refused trace.

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

# the dicts ``register_forward_hook``/``register_forward_pre_hook``/... add entries to
_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks",
          "_forward_hooks_with_kwargs", "_forward_hooks_always_called",
          "_forward_pre_hooks_with_kwargs", "_state_dict_hooks", "_state_dict_pre_hooks",
          "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks")


def take(owner) -> List[Tuple[dict, frozenset]]:
    """The keys of every hook dict of ``owner``'s module tree (``[]`` if not a module)."""
    modules = getattr(owner, "modules", None)
    if not (callable(modules) and isinstance(getattr(owner, "__dict__", None), dict)
            and "_modules" in vars(owner)):
        return []
    found = []
    for m in modules():
        for name in _DICTS:
            d = vars(m).get(name)
            if isinstance(d, dict):
                found.append((d, frozenset(d)))
    return found


def restore(taken: List[Tuple[dict, frozenset]]) -> None:
    """Remove the hooks registered since ``take`` (those removed meanwhile stay removed:
    their handles were used)."""
    for d, keys in taken:
        for k in [k for k in d if k not in keys]:
            del d[k]
