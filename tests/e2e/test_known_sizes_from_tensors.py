"""Sizes computed by tensor ops of Python numbers stay Python values (h100).

``torch.arange(n).tolist()`` and ``int(torch.tensor(n, dtype=torch.float32).sqrt())``,
with ``n`` a Python int or a static shape entry, are pure functions of Python numbers: the
graph makes the same value on every run, so the trace knows it (``runtime/known_values``:
any pure op of Python numbers, and any pure op of known values, whose result has at most
``MAX_ELEMENTS`` elements, integer, bool or real floating). A loop over such a list
unrolls and a reshape by such a size stays static, where both fell back ("depends on a
tensor's value"). A causal mask made so and cached on ``self`` stays the module's (the
write runs when the graph runs, not while inferring shapes).

Kept as fallbacks (never silently wrong): random ops (``torch.randperm(n).tolist()``),
ops reading a tensor's data that is not known (an argument's), results past the size
bound, and a known value written in place before it is read.

Differential: eager vs ``to_graph`` default and strict on several calls (sizes repeat):
values, dtypes, Python types, trace counts, warnings (a fallback names this file's line);
in a loop, a method and a module's forward.
"""
from __future__ import annotations

import os
import warnings

import pytest
import torch
from torch import nn

from transpiler import ConversionError, FallbackWarning, to_graph

THIS_FILE = os.path.basename(__file__)


def _same(got, exp):
    assert type(got) is type(exp), (type(got), type(exp))
    if isinstance(exp, (tuple, list)):
        assert len(got) == len(exp)
        for a, b in zip(got, exp):
            _same(a, b)
    elif isinstance(exp, torch.Tensor):
        assert got.dtype == exp.dtype and got.shape == exp.shape
        assert torch.allclose(got, exp, rtol=1e-6, atol=1e-6, equal_nan=True) \
            if exp.is_floating_point() else torch.equal(got, exp)
    else:
        assert got == exp


def _calls(fn, g, calls):
    """Each call eagerly and through ``g`` (the same RNG state before both); the
    FallbackWarnings ``g`` gave."""
    fallbacks = []
    for args in calls:
        torch.manual_seed(0)
        exp = fn(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
        rng = torch.get_rng_state()
        torch.manual_seed(0)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            got = g(*args)
        _same(got, exp)
        assert torch.equal(torch.get_rng_state(), rng)
        fallbacks += [str(m.message) for m in w if issubclass(m.category, FallbackWarning)]
    return fallbacks


def converts(fn, calls, traces):
    g = to_graph(fn)
    assert _calls(fn, g, calls) == []
    assert g.cache_info().traces == traces and g.cache_info().fallbacks == 0
    s = to_graph(fn, strict=True)
    assert _calls(fn, s, calls) == []
    return g


def falls_back(fn, calls, line_text):
    """Eager's results and a FallbackWarning naming this file's line holding
    ``line_text``; strict mode raises ConversionError naming it."""
    g = to_graph(fn)
    messages = _calls(fn, g, calls)
    assert messages, "expected a FallbackWarning"
    for m in messages:
        _names_line(m, line_text)
    with pytest.raises(ConversionError) as info:
        to_graph(fn, strict=True)(*calls[0])
    _names_line(str(info.value), line_text)
    return messages


def _names_line(message, text):
    here = os.path.abspath(__file__)
    assert f"{here}:" in message, message
    line = int(message.split(f"{here}:", 1)[1].split(":", 1)[0])
    with open(here) as f:
        assert text in f.read().splitlines()[line - 1], (text, message)


# ----------------------------------------------------------------------------- converts
def arange_list_loop(x):
    total = x.new_zeros(x.shape[1])
    for i in torch.arange(x.shape[0]).tolist():
        total = total + x[i] * (i + 1)
    return total, type(torch.arange(x.shape[0]).tolist()[0]) if x.shape[0] else None


def tensor_sqrt_side(t):
    side = int(torch.tensor(t.shape[1], dtype=torch.float32).sqrt())
    return t.reshape(t.shape[0], side, side, -1).mean((1, 2)), side


def stepped_and_float_lists(x):
    evens = torch.arange(0, x.shape[0], 2).tolist()
    weights = torch.linspace(0, 1, x.shape[0]).tolist()     # floats: eager's float32 values
    rev = (torch.arange(x.shape[0]) * 3).flip(0).tolist()
    out = x[evens].sum(0)
    for w, r in zip(weights, rev):
        out = out + w * r
    return out, weights, rev


def known_in_python_branch(x):
    n = int(torch.tensor(x.shape[-1]).pow(2).sum())
    if n > 20:                      # a Python if on a known number: no cond
        return x * 2, n
    return x - 1, n


def float_item_of_known(x):
    scale = torch.tensor(x.shape[-1], dtype=torch.float32).rsqrt().item()
    return x * scale, scale


@pytest.mark.parametrize("fn,calls,traces", [
    (arange_list_loop, [(torch.randn(5, 2),), (torch.randn(3, 2),), (torch.randn(5, 2),),
                        (torch.randn(0, 2),)], 3),
    (tensor_sqrt_side, [(torch.randn(2, 16, 3),), (torch.randn(1, 9, 3),),
                        (torch.randn(2, 16, 3),)], 2),
    (stepped_and_float_lists, [(torch.randn(6, 3),), (torch.randn(3, 3),)], 2),
    (known_in_python_branch, [(torch.randn(2, 3),), (torch.randn(2, 5),),
                              (torch.randn(2, 3),)], 2),
    (float_item_of_known, [(torch.randn(2, 4),), (torch.randn(3, 7),)], 2),
], ids=lambda v: getattr(v, "__name__", None))
def test_known_sizes_convert(fn, calls, traces):
    converts(fn, calls, traces)


def test_unrolled_loop_has_no_loop_op():
    """The list is a Python list: the loop over it unrolls (no while op in the graph)."""
    g = converts(arange_list_loop, [(torch.randn(4, 2),)], 1)
    ops = [n.op for n in g.graph(torch.randn(4, 2)).nodes]
    assert ops and not any("while" in str(op) or "cond" in str(op) for op in ops), ops


class PatchGrid(nn.Module):
    """A ViT head: tokens back to a square grid whose side is a tensor op of the count."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Conv2d(3, 4, 1)

    def grid_side(self, tokens):
        return int(torch.tensor(tokens.shape[1], dtype=torch.float32).sqrt())

    def forward(self, tokens):
        side = self.grid_side(tokens)
        grid = tokens.transpose(1, 2).reshape(tokens.shape[0], -1, side, side)
        rows = torch.arange(side).tolist()
        return torch.stack([self.proj(grid)[:, :, r].sum() for r in rows])


def test_module_forward_and_method():
    torch.manual_seed(0)
    m = PatchGrid()
    g = to_graph(PatchGrid())
    g.original_module.load_state_dict(m.state_dict())
    s = to_graph(PatchGrid(), strict=True)
    s.original_module.load_state_dict(m.state_dict())
    for x in (torch.randn(2, 16, 3), torch.randn(1, 25, 3), torch.randn(2, 16, 3)):
        exp = m(x)
        with warnings.catch_warnings():
            warnings.simplefilter("error", FallbackWarning)
            _same(g(x), exp)
            _same(s(x), exp)
        exp.sum().backward()
        g(x).sum().backward()
        for a, b in zip(m.parameters(), g.original_module.parameters()):
            assert torch.allclose(a.grad, b.grad, rtol=1e-5, atol=1e-6)


class CachedArangeMask(nn.Module):
    """A causal mask from two aranges (a known bool value), cached on ``self``."""

    def __init__(self):
        super().__init__()
        self.mask = None

    def forward(self, x):
        T = x.shape[1]
        if self.mask is None or self.mask.shape[-1] != T:
            self.mask = torch.arange(T)[:, None] >= torch.arange(T)[None, :]
        return x.masked_fill(~self.mask, 0.0).sum(-1)


def test_cached_known_mask_is_the_modules():
    eager, conv = CachedArangeMask(), CachedArangeMask()
    g = to_graph(conv, strict=True)
    for T in (4, 4, 3, 3, 4):
        x = torch.randn(2, T, T)
        _same(g(x), eager(x))
        assert type(conv.mask) is torch.Tensor and torch.equal(conv.mask, eager.mask)


# ---------------------------------------------------------------------- stays a fallback
def random_perm_list(x):
    order = torch.randperm(x.shape[0]).tolist()
    return x[order[0]] + len(order)


def data_of_argument(x):
    steps = torch.arange(int(x.abs().max().ceil())).tolist()
    return x.sum() + len(steps)


def past_the_bound(x):
    idx = torch.arange(5000 + x.shape[0]).tolist()
    return x * idx[-1]


def written_in_place_first(x):
    a = torch.arange(x.shape[0])
    a.mul_(2)
    return x * a.tolist()[-1]


@pytest.mark.parametrize("fn,calls,line", [
    (random_perm_list, [(torch.randn(4, 2),), (torch.randn(4, 2),)],
     "order = torch.randperm(x.shape[0]).tolist()"),
    (data_of_argument, [(torch.tensor([1.5, -2.5]),), (torch.tensor([0.5, 3.2]),)],
     "steps = torch.arange(int(x.abs().max().ceil())).tolist()"),
    (past_the_bound, [(torch.randn(2),), (torch.randn(3),)],
     "idx = torch.arange(5000 + x.shape[0]).tolist()"),
], ids=lambda v: getattr(v, "__name__", None))
def test_unknown_values_fall_back(fn, calls, line):
    falls_back(fn, calls, line)


def test_written_in_place_is_not_known():
    """The in-place write drops the known value: eager's results either way (a fallback
    naming the line, or the graph's run-time value), never the value before the write."""
    g = to_graph(written_in_place_first)
    for n in (3, 4, 3):
        x = torch.randn(n)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            got = g(x)
        _same(got, written_in_place_first(x))
        for m in w:
            if issubclass(m.category, FallbackWarning):
                _names_line(str(m.message), "return x * a.tolist()[-1]")
