"""``MyFunction.apply(...)`` (a user ``torch.autograd.Function``) while tracing.

``Function.apply`` does not dispatch through ``__torch_function__``: traced as Python, it
runs the class's ``forward`` on the traced tensors, so the graph records forward's
operations and nothing of the class's ``backward``. Values are right, but when autograd
records, the gradients would be those of forward's ops (a gradient-reversal layer would
not reverse; a straight-through estimator would give zeros): silently wrong.

So whenever a tensor argument may require grad with grad mode on, the call is one node
whose target is the class's ``apply``: the graph calls it on the run's real tensors, so
autograd records the class's own backward, as eager does (BLOOM's ``GeLUFunction`` in
train mode, DANN's gradient reversal, straight-through estimators). The node's output
shapes come from running ``apply`` on meta tensors; a forward that cannot run there (it
reads tensor data: ``.item()``, numpy) or that writes its tensor arguments in place
(``ctx.mark_dirty``: the node would not rebind them) is refused, naming the line. Without autograd
(``no_grad``, inference), forward's operations are the whole story and the call is
traced as they are, so their kernels fuse with the rest; with grad mode on and no argument
requiring grad, under a recorded ``no_grad`` (``apply`` switches grad off in C++ around
forward: a ``with torch.no_grad():`` in forward would otherwise record a switch back to
"off", ``grad_mode_switches``).
"""
from __future__ import annotations

import weakref

import torch
import torch.utils._pytree as pytree

from ..errors import GraphError
from ..grad_flags import grad_of
from ..source_info import format_location, user_location
from ..shape_inference import _run, _to_meta_args
from ..symbolic import dispatch_record

NOT_APPLIED = object()
_TARGETS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _function_class(f):
    """The ``autograd.Function`` subclass whose ``apply`` ``f`` is, else None."""
    owner = getattr(f, "__self__", None)
    if isinstance(owner, type) and issubclass(owner, torch.autograd.Function) \
            and getattr(f, "__name__", "") == "apply":
        return owner
    return None


def applied(f, args, kwargs):
    """``f(*args, **kwargs)`` as one node calling ``Function.apply`` when autograd may
    record it; ``NOT_APPLIED`` otherwise (not a Function's apply, or no gradient)."""
    owner = _function_class(f)
    if owner is None or not torch.is_grad_enabled():
        return NOT_APPLIED
    flags = [grad_of(t) for t in pytree.tree_leaves((args, kwargs))
             if isinstance(t, torch.Tensor)]
    if not any(flag is not False for flag in flags):
        with torch.no_grad():   # (apply runs forward so in C++, where the trace cannot see)
            return f(*args, **kwargs)
    where = f"{format_location(user_location())}: {owner.__name__}.apply: a custom " \
        f"autograd.Function's backward runs only as a call the graph makes"
    try:
        written = _writes_arguments(owner, args, kwargs)
        result = None if written else dispatch_record(_target(owner), args, kwargs)
    except Exception as e:      # noqa: BLE001 - any failure of forward on meta tensors
        raise GraphError(f"{where}, and its output shapes could not be found on meta "
                         f"tensors ({str(e).split(': ', 1)[-1]})") from e
    if written:
        raise GraphError(f"{where}, and its forward writes a tensor argument in place")
    return result


def _target(owner):
    """The node's target: ``owner.apply``, named ``<class>_apply`` in listings, and
    impure (a forward may draw random numbers: two calls are never merged or dropped)."""
    target = _TARGETS.get(owner)
    if target is None:
        held = weakref.ref(owner)       # (the class is the table's key: not kept alive)

        def target(*args, **kwargs):
            return held().apply(*args, **kwargs)
        target.__name__ = target.__qualname__ = f"{owner.__name__}_apply"
        target._tograph_impure = True
        _TARGETS[owner] = target
    return target


def _writes_arguments(owner, args, kwargs) -> bool:
    """Whether ``owner.apply`` changes a tensor argument in place or returns one
    (``ctx.mark_dirty``), run on meta tensors of the arguments' shapes."""
    with torch._C.DisableTorchFunction():      # (the trace sees none of it)
        margs, mkwargs = _to_meta_args(args, kwargs)
        tensors = [t for t in pytree.tree_leaves((margs, mkwargs))
                   if isinstance(t, torch.Tensor)]
        versions = [t._version for t in tensors]
        outs = pytree.tree_leaves(_run(owner.apply, margs, mkwargs))
        return any(t._version != v for t, v in zip(tensors, versions)) or \
        any(o is t for o in outs for t in tensors)
