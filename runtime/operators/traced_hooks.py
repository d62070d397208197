"""The user's forward hooks on torch's own modules, converted while a forward is traced.

A hook on a module whose forward is torch's (``nn.Linear``, ``nn.LayerNorm``, a child of
``nn.Sequential``, or any module through torch's global ``register_module_forward_hook``)
is called by ``nn.Module._call_impl`` itself, natively: its Python ran unconverted while
the forward was traced, so ``if out.mean() > 0:`` in it raised ``bool()`` of a traced
tensor and ``round(out.std().item(), 3)`` a TypeError, and the call fell back, though the
same code in a helper the step calls converts.

``converted(roots)``: while the trace runs, each such hook that is a user function (a
``def``, a lambda or a bound method of the user's) is replaced in its dict by a
``Converted`` that runs it through ``call`` (converted, as any user function converted code
calls); torch calls it where it called the hook, with the same arguments and result rules.
The hooks are put back when the trace ends (before the guard reads them), so the module's
hook dicts hold the user's own functions again; a hook removed meanwhile stays removed.
The hooks a module called through ``module_hooks.hooked_call`` runs are met here too: the
``Converted`` runs natively there and converts the hook itself.
"""
from __future__ import annotations

import contextlib
from typing import Callable, Iterable

from torch.nn.modules import module as _m

_DICTS = ("_forward_hooks", "_forward_pre_hooks")


class Converted:
    """A hook run through ``call`` (converted where it is a user function)."""

    __slots__ = ("hook", "call")

    def __init__(self, hook, call: Callable):
        self.hook, self.call = hook, call

    def __call__(self, *args, **kwargs):
        return self.call(self.hook, *args, **kwargs)


def _hook_dicts(roots: Iterable) -> list:
    """The forward hook dicts of the module trees of ``roots`` and torch's global ones,
    each once."""
    found = {id(d): d for d in (_m._global_forward_hooks, _m._global_forward_pre_hooks)}
    seen = set()
    for root in roots:
        for module in root.modules():
            if id(module) in seen:
                continue
            seen.add(id(module))
            for name in _DICTS:
                d = vars(module).get(name)
                if isinstance(d, dict):
                    found.setdefault(id(d), d)
    return list(found.values())


@contextlib.contextmanager
def converted(roots: Iterable):
    """Within: the user-function forward hooks of ``roots``' trees (``nn.Module``s) and the
    global ones run converted through ``call``; put back after."""
    from .calls import _is_user_function as is_user, call
    swapped = []
    for hooks in _hook_dicts(roots):
        for key, hook in list(hooks.items()):
            if not isinstance(hook, Converted) and is_user(hook):
                hooks[key] = Converted(hook, call)
                swapped.append((hooks, key, hook))
    try:
        yield
    finally:
        for hooks, key, hook in swapped:
            if isinstance(hooks.get(key), Converted) and hooks[key].hook is hook:
                hooks[key] = hook
