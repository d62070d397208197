"""``torch._check(cond)`` and its kin with a condition known only when the graph runs.

Libraries written for torch.compile state facts about run-time values with torch's check
functions instead of ``if ...: raise`` (transformers' ``torch_compilable_check``, taken
while tracing since ``is_compiling()`` answers True to library code: BART's
classification head checks ``torch.unique_consecutive(eos_mask.sum(1)).numel() == 1``).
Traced as an ordinary call, a condition standing for a Python bool became a ``cond`` node
calling ``torch._check(True)`` and ``torch._check(False)``, and tracing the False side
raised eager's error: the call fell back on every input.

Here such a call is a staged check (``graph_ops.assert_true``), as ``assert`` is: it
raises eager's error type with eager's message on every run where the condition is
False. Handled: ``torch._check`` (RuntimeError), ``_check_value`` (ValueError),
``_check_index`` (IndexError), ``_check_type`` (TypeError), ``_check_not_implemented``
(NotImplementedError), ``_check_with(error_type, ...)`` for a builtin error type, and the
``_check_tensor_all``/``_check_tensor_all_with`` forms on a traced bool tensor (all of
its elements). A condition that is a Python bool runs torch's own check at trace time;
a traced tensor passed where torch wants a bool gets torch's own TypeError.
"""
from __future__ import annotations

import builtins

import torch

from .. import graph_ops
from ..errors import GraphError, TracingError
from ..introspection import kind_of
from ..source_info import format_location, user_location
from ..symbolic import dispatch_record, is_symbolic

NOT_CHECK = object()
_DEFAULT = ("Expected cond to be True, but got False. (Could this error message be "
            "improved? If so, please report an enhancement request to PyTorch.)")
# torch's check -> (the error it raises, or None: the first argument; takes a tensor)
_CHECKS = {
    torch._check: (RuntimeError, False),
    torch._check_value: (ValueError, False),
    torch._check_index: (IndexError, False),
    torch._check_type: (TypeError, False),
    torch._check_not_implemented: (NotImplementedError, False),
    torch._check_with: (None, False),
    torch._check_tensor_all: (RuntimeError, True),
    torch._check_tensor_all_with: (None, True),
}


def staged_check(f, args, kwargs):
    """The check staged in the graph (None), or ``NOT_CHECK``: not one of torch's checks,
    or its condition is known now (torch's own function then runs)."""
    try:
        entry = _CHECKS.get(f)
    except TypeError:           # (an unhashable callable)
        return NOT_CHECK
    if entry is None:
        return NOT_CHECK
    error, on_tensor = entry
    if error is None:
        if not args or (f is torch._check_with and len(args) < 3 and "message" not in kwargs):
            return NOT_CHECK        # (torch's own TypeError: _check_with needs a message)
        error, args = args[0], args[1:]
    cond = args[0] if args else kwargs.get("cond")
    message = args[1] if len(args) > 1 else kwargs.get("message")
    if not is_symbolic(cond) or (not on_tensor and kind_of(cond) != "bool") or \
            (on_tensor and cond.dtype != torch.bool):
        return NOT_CHECK
    if not (isinstance(error, type) and getattr(builtins, error.__name__, None) is error):
        raise GraphError(f"{format_location(user_location())}: {f.__name__} raising "
                         f"{getattr(error, '__name__', error)!r} on a condition known only "
                         f"when the graph runs (a staged check raises builtin errors only)")
    text = _DEFAULT
    if message is not None:
        try:
            text = str(message()) if callable(message) else None
        except (TracingError, GraphError):      # a message made from a traced value
            text = None
        if text is None:
            raise GraphError(f"{format_location(user_location())}: {f.__name__} with a "
                             f"message made from a traced value, on a condition known only "
                             f"when the graph runs")
    test = cond.all() if on_tensor else cond
    dispatch_record(graph_ops.assert_true, (test, format_location(user_location()), text),
                    {"error": error.__name__})
    return None
