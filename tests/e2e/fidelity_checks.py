"""Differential checks shared by the fidelity tests: a converted function against eager in
both modes, on fresh clones of each input, comparing results and what happened to the
arguments; or a clean fallback (default: eager's result and one FallbackWarning; strict:
ConversionError)."""
import warnings

import pytest
import torch

from transpiler import ConversionError, FallbackWarning, to_graph

from e2e_helpers import _clone, assert_same


def same_grad_flags(got, exp, path="out"):
    """``requires_grad`` of every tensor in a result as in eager's."""
    if isinstance(exp, torch.Tensor):
        assert got.requires_grad == exp.requires_grad, f"{path}: requires_grad"
    elif isinstance(exp, (list, tuple)):
        for i, (a, b) in enumerate(zip(got, exp)):
            same_grad_flags(a, b, f"{path}[{i}]")
    elif isinstance(exp, dict):
        for k in exp:
            same_grad_flags(got[k], exp[k], f"{path}[{k!r}]")


def converts(fn, *inputs):
    """Strict mode converts and default mode runs the graph (no FallbackWarning); both equal
    eager on every input, arguments included."""
    for strict in (True, False):
        g = to_graph(fn, strict=strict)
        for args in inputs:
            eager_args, graph_args = _clone(args), _clone(args)
            exp = fn(*eager_args)
            with warnings.catch_warnings():
                warnings.simplefilter("error", FallbackWarning)
                got = g(*graph_args)
            assert_same(got, exp)
            same_grad_flags(got, exp)
            assert_same(graph_args, eager_args, "arguments")


def falls_back(fn, *inputs, match=None):
    """Default mode warns once and equals eager; strict mode raises ConversionError."""
    g = to_graph(fn)
    for i, args in enumerate(inputs):
        eager_args, graph_args = _clone(args), _clone(args)
        exp = fn(*eager_args)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            got = g(*graph_args)
        warned = [x for x in w if issubclass(x.category, FallbackWarning)]
        # once on the first call; a later input of a new signature may trace (and warn) again
        assert len(warned) == 1 if i == 0 else len(warned) <= 1, [str(x.message) for x in w]
        if match and i == 0:
            assert match in str(warned[0].message), str(warned[0].message)
        assert_same(got, exp)
        same_grad_flags(got, exp)
        assert_same(graph_args, eager_args, "arguments")
    with pytest.raises(ConversionError, match=match):
        to_graph(fn, strict=True)(*_clone(inputs[0]))


def same_gradients(fn, *inputs):
    """The gradients of ``fn(*args).sum()`` w.r.t. every floating argument equal eager's."""
    for strict in (True, False):
        g = to_graph(fn, strict=strict)
        for args in inputs:
            a1 = [a.clone().requires_grad_() for a in args]
            a2 = [a.clone().requires_grad_() for a in args]
            fn(*a1).sum().backward()
            with warnings.catch_warnings():
                warnings.simplefilter("error", FallbackWarning)
                g(*a2).sum().backward()
            for x, y in zip(a2, a1):
                assert (x.grad is None) == (y.grad is None)
                if y.grad is not None:
                    torch.testing.assert_close(x.grad, y.grad, rtol=1e-5, atol=1e-5)
