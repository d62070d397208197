"""``MyFunction.apply(...)`` (a user ``torch.autograd.Function``) while tracing.

``Function.apply`` does not dispatch through ``__torch_function__``: it runs the class's
``forward`` on the traced tensors, so the graph records forward's operations and nothing
of the class's ``backward``. Values are right, but when autograd records, the gradients
would be those of forward's ops (a gradient-reversal layer would not reverse; a
straight-through estimator would give zeros): silently wrong. So the trace is refused
there, naming the line, whenever a tensor argument may require grad with grad mode on;
without autograd (``no_grad``, inference), forward's operations are the whole story and
the call is traced as they are.
"""
from __future__ import annotations

import torch
import torch.utils._pytree as pytree

from ..errors import GraphError
from ..grad_flags import grad_of
from ..source_info import format_location, user_location


def refuse_custom_backward(f, args, kwargs) -> None:
    owner = getattr(f, "__self__", None)
    if not (isinstance(owner, type) and issubclass(owner, torch.autograd.Function)
            and getattr(f, "__name__", "") == "apply"):
        return
    if not torch.is_grad_enabled():
        return
    flags = [grad_of(t) for t in pytree.tree_leaves((args, kwargs))
             if isinstance(t, torch.Tensor)]
    if any(flag is not False for flag in flags):
        raise GraphError(f"{format_location(user_location())}: {owner.__name__}.apply: a "
                         f"custom autograd.Function's backward is not part of a traced graph "
                         f"(the graph would differentiate its forward's operations instead)")
