"""Data-dependent questions torch's own Python code asks, answered for a graph.

Calls into torch are not converted, so a ``bool()`` of a traced tensor inside torch's
Python (``torch.nn``, ``torch.distributions``) would make the whole call fall back. A few
such questions have an answer that keeps eager's results for every input; they are kept
here, one rule per site, matched by the asking frame (torch's file and function):

- ``torch/nn/modules/transformer.py: _detect_is_causal_mask`` asks whether a mask passed
  to ``nn.TransformerEncoder``/``nn.TransformerDecoder``/``nn.Transformer`` equals the
  causal mask, only to pass ``is_causal`` as a *hint* beside the same mask. Answer
  ``False``: the layers then apply the mask itself, which is right for any mask (for a
  causal one it equals eager's ``is_causal`` path up to rounding).
- ``torch/distributions/distribution.py: __init__ / _validate_sample`` (argument
  validation, on by default) ask ``if not torch._is_all_true(valid): raise ValueError``.
  Answer ``True`` and stage the check: the graph raises ``ValueError`` on every run where
  a parameter or a sample is out of its constraint's support, as eager does.

- ``torch/nn/utils/rnn.py: pad_packed_sequence`` asks ``total_length < max_seq_length``
  where the longest sequence is known only when the graph runs (``packed_sequences``):
  answer ``False`` and stage the check, raising ``ValueError`` as eager does.

Any other site keeps refusing (``None``): tracing fails and the call falls back.
"""
from __future__ import annotations

import sys
from typing import Optional

_TRANSFORMER = ("torch/nn/modules/transformer.py", "_detect_is_causal_mask")
_DISTRIBUTION = "torch/distributions/distribution.py"
_PAD_PACKED = ("torch/nn/utils/rnn.py", "pad_packed_sequence")
_VALIDATORS = ("__init__", "_validate_sample")
_MAX_DEPTH = 12         # frames between torch's ``bool()`` and the runtime's dispatch


def _asking_frame():
    """The innermost frame outside this runtime (and outside torch's dispatch helpers)."""
    frame = sys._getframe(2)
    for _ in range(_MAX_DEPTH):
        if frame is None:
            return None
        name = frame.f_code.co_filename.replace("\\", "/")
        if "/runtime/" not in name and not name.endswith(("torch/overrides.py",
                                                          "torch/_tensor.py")):
            return frame
        frame = frame.f_back
    return None


def answer_bool(test) -> Optional[bool]:
    """The answer to ``bool(test)`` (a traced tensor) asked by a known torch site, or
    None. May record a staged check (see the module's docstring)."""
    frame = _asking_frame()
    if frame is None:
        return None
    file = frame.f_code.co_filename.replace("\\", "/")
    func = frame.f_code.co_name
    if file.endswith(_TRANSFORMER[0]) and func == _TRANSFORMER[1]:
        return False
    if file.endswith(_DISTRIBUTION) and func in _VALIDATORS:
        _stage_validation(test, frame)
        return True
    if file.endswith(_PAD_PACKED[0]) and func == _PAD_PACKED[1]:
        _stage_total_length(test, frame)
        return False
    return None


def _stage_total_length(test, frame) -> None:
    """``total_length < max_seq_length`` (the longest of lengths known when the graph
    runs) as a graph assert raising eager's ``ValueError`` (its text, less that value)."""
    import torch
    from . import graph_ops
    from .source_info import format_location, user_location
    from .symbolic import dispatch_record
    message = (f"Expected total_length to be at least the length of the longest sequence "
               f"in input, but got total_length={frame.f_locals.get('total_length')}")
    holds = dispatch_record(torch.logical_not, (test,), {})
    dispatch_record(graph_ops.assert_true, (holds, format_location(user_location()), message),
                    {"error": "ValueError"})


def _stage_validation(test, frame) -> None:
    """The distribution's check as a graph assert raising ``ValueError`` (eager's type;
    the message says what eager's does, less the values, known only at run time)."""
    from . import graph_ops
    from .source_info import format_location, user_location
    from .symbolic import dispatch_record
    local = frame.f_locals
    owner = local.get("self")
    dist = type(owner).__name__ if owner is not None else "distribution"
    if frame.f_code.co_name == "__init__":
        value = local.get("value")
        what = (f"Expected parameter {local.get('param')} ({value.__class__.__name__} of shape "
                f"{tuple(getattr(value, 'shape', ()))}) of distribution {dist} to satisfy "
                f"the constraint {local.get('constraint')!r}")
    else:
        value = local.get("value")
        what = (f"Expected value argument ({value.__class__.__name__} of shape "
                f"{tuple(getattr(value, 'shape', ()))}) to be within the support "
                f"({local.get('support')!r}) of the distribution {dist}")
    message = what + ", but found invalid values"
    dispatch_record(graph_ops.assert_true, (test, format_location(user_location()), message),
                    {"error": "ValueError"})
