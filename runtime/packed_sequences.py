"""Packed sequences whose lengths are known only when the graph runs: one graph for all.

``pack_padded_sequence(x, lengths)`` with ``lengths`` a tensor argument (or computed from
one): the values decide the sizes, so no meta kernel runs (``_pack_padded_sequence`` wants
real CPU lengths). They are not needed for the *shapes* the rest of the code sees:

- ``_pack_padded_sequence(input, lengths, batch_first)``: ``data`` has ``sum(lengths)`` rows
  and ``batch_sizes`` ``max(lengths)`` entries, both dynamic dims (``None``);
  ``batch_sizes[0]`` is the number of sequences, ``lengths.shape[0]`` (torch refuses a
  length below 1, so every sequence has a first step): the batch-sizes node keeps it
  (``FIRST``) and ``batch_sizes[0]`` gets it as a known value (``known_values``), which
  ``nn.RNN``/``LSTM``/``GRU`` read for their zero state and check with ``int()``;
- the packed RNN kernels (``torch.lstm``/``gru``/``rnn_tanh``/``rnn_relu`` given
  ``batch_sizes``): the output has the data's rows and ``directions * hidden`` columns
  (``hx``'s last dim), the states ``hx``'s shapes;
- ``_pad_packed_sequence(data, batch_sizes, batch_first, value, total_length)``: the
  sequences (``FIRST``) by ``total_length`` steps (an int, or ``max(lengths)`` known
  when the graph runs), and their lengths.

The nodes run torch's own ops when the graph runs, which check the values (lengths
sorted for ``enforce_sorted``, none below 1, none past the input) and raise eager's error.
With lengths the graph fixes, ``known_values`` gives static shapes instead (checked first).
"""
from __future__ import annotations

from typing import Optional

import torch

from . import known_values
from .meta import TensorMeta

FIRST = "_packed_batch"     # batch-sizes node: its first entry, the number of sequences
_RNNS = {torch.lstm, torch.gru, torch.rnn_tanh, torch.rnn_relu}
_EXAMPLE_STEPS = 3          # example size of a dynamic dim the rules make


def _shape(t):
    meta = getattr(getattr(t, "_node", None), "meta", None)
    if isinstance(meta, TensorMeta):
        return meta.shape
    return tuple(t.shape) if isinstance(t, torch.Tensor) else None


def _out(shape, dtype):
    example = torch.empty([_EXAMPLE_STEPS if d is None else d for d in shape], dtype=dtype,
                          device="meta")
    return TensorMeta(tuple(shape), dtype), example


def _pack(inp, lengths, batch_first=False):
    shape, lens = _shape(inp), _shape(lengths)
    if shape is None or lens is None or len(lens) != 1 or lens[0] is None or len(shape) < 2:
        return None
    return [_out((None,) + tuple(shape[2:]), inp.dtype), _out((None,), torch.int64)]


def _rnn(data, batch_sizes, hx, *rest):
    states = list(hx) if isinstance(hx, (list, tuple)) else [hx]
    shapes = [_shape(h) for h in states]
    rows, bidirectional = _shape(data), rest[-1] if rest else False
    if rows is None or any(s is None or len(s) != 3 or s[2] is None for s in shapes):
        return None
    width = (2 if bidirectional is True else 1) * shapes[0][2]
    return [_out((rows[0], width), data.dtype)] + [_out(s, h.dtype) for s, h in zip(shapes, states)]


def _pad(data, batch_sizes, batch_first, padding_value, total_length):
    batch = getattr(getattr(batch_sizes, "_node", None), "attrs", {}).get(FIRST)
    rows = _shape(data)
    if batch is None or rows is None:
        return None
    steps = total_length if type(total_length) is int else None
    dims = (batch, steps) if batch_first else (steps, batch)
    return [_out(dims + tuple(rows[1:]), data.dtype), _out((batch,), torch.int64)]


_RULES = {torch._pack_padded_sequence: _pack, torch._pad_packed_sequence: _pad,
          **{f: _rnn for f in _RNNS}}


def inferred(func, args, kwargs):
    """``(metas, examples)`` of a packed-sequence op whose sizes follow lengths known
    only when the graph runs; None for any other op (or one the graph fixes)."""
    rule = _RULES.get(func)
    if rule is None or kwargs or len(args) < 2 or not isinstance(args[1], torch.Tensor) or \
            args[1].is_floating_point() or known_values.value(args[1]) is not None:
        return None
    found = rule(*args)
    if found is None:
        return None
    return tuple(m for m, _ in found), tuple(e for _, e in found)


def note(func, args, out) -> None:
    """After recording: the batch-sizes output of ``_pack_padded_sequence`` keeps the
    number of sequences; ``batch_sizes[0]`` of it is that number, a known value."""
    if func is torch._pack_padded_sequence and isinstance(out, (list, tuple)) and \
            len(out) == 2 and known_values.value(out[1]) is None and \
            getattr(out[1], "_node", None) is not None and \
            (_shape(args[1]) or (None,))[0] is not None:
        out[1]._node.attrs[FIRST] = _shape(args[1])[0]
    elif func is torch.Tensor.__getitem__ and len(args) == 2 and type(args[1]) is int and \
            args[1] in (0, -0) and getattr(out, "_node", None) is not None:
        batch = getattr(getattr(args[0], "_node", None), "attrs", {}).get(FIRST)
        if batch is not None:
            out._node.attrs[known_values.KEY] = torch.tensor(batch)


def refusal(func, args) -> Optional[str]:
    """Why a packed-sequence op could not be shaped (its lengths known only when the graph
    runs, and its rules not applying); None for other ops."""
    if func not in _RULES or len(args) < 2 or not isinstance(args[1], torch.Tensor) or \
            args[1].is_floating_point() or known_values.value(args[1]) is not None:
        return None
    if func is torch._pack_padded_sequence:
        return ("a packed sequence's sizes follow its lengths, known only when the graph "
                "runs, and so is their number here (a dimension traced as dynamic)")
    return ("a packed sequence's sizes follow its batch_sizes, known only when the graph "
            "runs, and not made by pack_padded_sequence in this graph (its batch size is "
            "not known)")
