"""Values of small tensors that a graph computes the same on every run.

``pack_padded_sequence(x, [6, 4, 2])`` makes ``torch.as_tensor([6, 4, 2])`` (a node of
Python data), and torch's packed-sequence code reads sizes from it: the packed data has
``sum(lengths)`` rows, ``batch_sizes`` holds how many sequences are longer than each step,
``nn.LSTM`` sizes its zero state by ``int(batch_sizes[0])``, ``pad_packed_sequence`` pads
to ``len(batch_sizes)``. No meta kernel can answer these; the values can, since they are
the same on every run: the node's value is fixed by the Python data the trace baked in.
``pack_sequence`` does the same with lengths taken from static sizes.

A node's *known value* (``node.attrs[KEY]``, a real CPU tensor) is what the node computes
on every run of its graph:

- a factory of Python data (``torch.tensor``/``as_tensor`` of numbers, no tensors), or
  the result of any pure op whose arguments hold no tensor (``torch.div(h.size(1), 2 * w,
  rounding_mode="trunc")``, Longformer's and LED's chunk count, then a ``view`` size;
  ``torch.full((), n)``; ``torch.arange(n)``, whose ``tolist()`` a loop unrolls over):
  torch wraps the numbers, the value is the same on every run;
- the result of a pure op whose tensor arguments all have known values (``lengths.to(
  int64)``, ``torch.sort(lengths)``, ``batch_sizes[0]``, ``torch.tensor(n, dtype=float32)
  .sqrt()``, a ViT grid's side): it is run for real;
- an integer or bool output that shape inference computed for real from known values
  beside meta ones (``_pack_padded_sequence``'s ``batch_sizes``, ``_pad_packed_sequence``'s
  ``lengths``): its data read only known values;
- ``batch_sizes[0]`` of a pack whose lengths are known only when the graph runs: the
  number of sequences (``packed_sequences``).

Shape inference runs ops with known values real and other tensors meta
(``substituted``; never an op with an effect: ``set_attribute`` of a causal mask that a
module caches on ``self`` runs when the graph runs, not while inferring), and
``int()``/``bool()``/``.item()``/``.tolist()`` of such a value answer from it (``answer``):
no guard is needed, the graph makes the same value every time. Integer, bool and real
floating values only (no complex, nothing that requires grad), on the CPU.
``torch.empty`` and its kin (garbage), random and in-place ops make no known value, and a
value whose storage is written in place (``views``: the write and every view of it)
loses it from then on; inside a loop body, only values made in that body have one (a
later iteration may see a write the body makes after reading). Limited to
``MAX_ELEMENTS`` elements (checked on the traced outputs' static shapes before an op of
Python numbers is run for real: ``torch.ones(B, T, T)`` is not computed here).

Requires: ``views`` (storage tokens and their first in-place write).
"""
from __future__ import annotations

from typing import Any, Optional

import torch

from . import views
from .graph import find_leaves, map_structure
from .ops import is_impure, is_inplace, op_name

KEY = "_known_value"
MAX_ELEMENTS = 4096
_FACTORIES = (torch.tensor, torch.as_tensor)
_UNSET = frozenset({"empty", "empty_like", "new_empty", "empty_strided", "new_empty_strided"})
_QUESTIONS = {torch.Tensor.__int__, torch.Tensor.__index__, torch.Tensor.__bool__,
              torch.Tensor.__float__, torch.Tensor.item, torch.Tensor.tolist}
NOT_KNOWN = object()


def value(t) -> Optional[torch.Tensor]:
    """The value ``t`` (a traced tensor) has on every run; None if not known (or its
    storage was written in place since)."""
    node = getattr(t, "_node", None)
    known = None if node is None else node.attrs.get(KEY)
    if known is None:
        return None
    token = views.storage(t)
    if token is not None and any(s.written is not None for s in token.all()):
        return None
    bodies = views._open_bodies()
    if bodies and not any(g is bodies[-1] for g in node.graph.ancestors()):
        return None     # (a loop body made elsewhere may write it before its next iteration)
    return known


def substituted(func, args, kwargs, to_meta):
    """``(args, kwargs)`` with each tensor that has a known value replaced by that value
    and every other tensor by ``to_meta(t)``; None when no argument has a known value (or
    the op has an effect: inference runs on the traced tensors themselves). Beside a meta
    tensor only integer and bool values go real (sizes, indices, lengths: a float one,
    an LSTM's zero state, stays meta, as torch's kernels want one device for the data)."""
    if not find_leaves((args, kwargs), _with_known, slices=False) or \
            is_impure(func, kwargs, args):
        return None     # (an effect, ``set_attribute`` of a known value, must not run here)
    found = [False]
    every = all(value(t) is not None for t in find_leaves((args, kwargs), _is_tensor,
                                                          slices=False))

    def conv(t):
        known = value(t)
        if known is None or not every and (known.is_floating_point() or known.is_complex()):
            return to_meta(t)
        found[0] = True
        return known.clone()            # (an op may return its input: keep ours intact)
    new = map_structure((tuple(args), dict(kwargs)), _is_tensor, conv)
    return new if found[0] else None


def _with_known(v) -> bool:
    node = getattr(v, "_node", None) if isinstance(v, torch.Tensor) else None
    return node is not None and KEY in node.attrs


def _is_tensor(v) -> bool:
    return isinstance(v, torch.Tensor)


def _small(v) -> bool:
    return type(v) is torch.Tensor and not v.is_meta and v.device.type == "cpu" and \
        not v.is_complex() and not v.requires_grad and v.numel() <= MAX_ELEMENTS


def _small_outputs(outs) -> bool:
    """Whether every traced output has a static shape of at most ``MAX_ELEMENTS``."""
    for o in outs:
        meta = getattr(getattr(o, "_node", None), "meta", None)
        if not getattr(meta, "is_static", False) or \
                int(torch.Size(meta.shape).numel()) > MAX_ELEMENTS:
            return False
    return True


def _python_data(v) -> bool:
    if isinstance(v, (list, tuple)):
        return all(_python_data(x) for x in v)
    return type(v) in (int, bool, float)


def _plain_value(v) -> bool:
    """Python data an op of no tensors may take (numbers, flags, sizes, dtypes, names)."""
    if isinstance(v, (list, tuple)):
        return all(_plain_value(x) for x in v)
    return v is None or type(v) in (int, bool, float, str, torch.dtype, torch.device)


def _factory_value(func, args, kwargs):
    if func in _FACTORIES:
        if len(args) != 1 or not _python_data(args[0]) or \
                set(kwargs) - {"dtype", "device"} or \
                any(isinstance(v, torch.Tensor) for v in kwargs.values()):
            return None
    elif not (_plain_value(args) and _plain_value(tuple(kwargs.values()))) or \
            not kwargs.get("device", "cpu") in ("cpu", torch.device("cpu")) or \
            "out" in kwargs or "generator" in kwargs:
        return None
    with torch._C.DisableTorchFunction():
        try:
            real = func(*args, **kwargs)
        except Exception:  # noqa: BLE001 - eager's error: the trace reports it as before
            return None
    return real


def note(func, args, kwargs, out, real) -> None:
    """After recording ``func`` with result ``out`` (traced tensors): mark the outputs
    whose value is known. ``real``: the op's outputs as shape inference computed them with
    the known values of its arguments (``substituted``), or None."""
    if is_impure(func, kwargs, args) or op_name(func) in _UNSET:
        return
    outs = out if isinstance(out, (list, tuple)) else (out,)
    if real is None:
        if not _small_outputs(outs):
            return      # (not run for real: ``torch.ones(B, T, T)``)
        real = _factory_value(func, args, kwargs)
        if real is None:
            return
    reals = real if isinstance(real, (list, tuple)) else (real,)
    if len(outs) != len(reals):
        return
    for o, r in zip(outs, reals):
        node = getattr(o, "_node", None)
        if node is not None and _small(r) and tuple(r.shape) == tuple(o.shape) and \
                r.dtype == o.dtype:
            node.attrs[KEY] = r


def answer(func, args, kwargs) -> Any:
    """``int(t)``, ``bool(t)``, ``t.item()``, ``t.tolist()`` of a traced ``t`` with a known
    value: eager's answer; ``NOT_KNOWN`` otherwise."""
    if func not in _QUESTIONS or not args:
        return NOT_KNOWN
    known = value(args[0])
    if known is None:
        return NOT_KNOWN
    with torch._C.DisableTorchFunction():
        return func(known, *args[1:], **kwargs)

