import pytest
"""Shared checks for the acceptance suite: converted function vs eager, graph structure."""
import collections
import warnings

import torch

from transpiler import to_graph


def assert_same(got, exp, path="out"):
    """Same structure and container kinds, same dtypes, floats within 1e-5, ints/bools exact.

    Python numbers are of eager's type (a converted call hands back numbers), except that a
    0-d tensor of the same kind may stand for one (the contract's stand-in, which a call
    hands back for a value that is a number on one path of tensor control flow and a
    tensor on another: ``runtime/returned_numbers.py``).
    """
    if isinstance(exp, torch.Tensor):
        assert isinstance(got, torch.Tensor), f"{path}: expected tensor, got {type(got).__name__}"
        assert got.dtype == exp.dtype, f"{path}: dtype {got.dtype} != {exp.dtype}"
        assert got.shape == exp.shape, f"{path}: shape {tuple(got.shape)} != {tuple(exp.shape)}"
        if exp.is_floating_point():
            torch.testing.assert_close(got.detach(), exp.detach(), rtol=1e-5, atol=1e-5,
                                       equal_nan=True, msg=lambda m: f"{path}: {m}")
        else:
            assert torch.equal(got, exp), f"{path}: {got} != {exp}"
        return
    if isinstance(exp, (bool, int, float)) and isinstance(got, torch.Tensor):
        assert got.dim() == 0, f"{path}: expected {type(exp).__name__} {exp!r}, got {got!r}"
        if isinstance(exp, bool):
            assert got.dtype == torch.bool, f"{path}: bool stood for by {got.dtype}"
            assert bool(got) == exp, f"{path}: {got} != {exp}"
        elif isinstance(exp, int):
            assert not got.is_floating_point() and got.dtype != torch.bool, \
                f"{path}: int stood for by {got.dtype}"
            assert int(got) == exp, f"{path}: {got} != {exp}"
        else:
            assert got.is_floating_point(), f"{path}: float stood for by {got.dtype}"
            assert abs(float(got) - exp) <= 1e-5 + 1e-5 * abs(exp), f"{path}: {got} != {exp}"
        return
    if isinstance(exp, (bool, int, float)):     # a converted call returns eager's number
        assert type(got) is type(exp), \
            f"{path}: expected {type(exp).__name__} {exp!r}, got {type(got).__name__} {got!r}"
    if isinstance(exp, (list, tuple, dict)):
        assert type(got) is type(exp), \
            f"{path}: container {type(got).__name__} != {type(exp).__name__}"
        assert len(got) == len(exp), f"{path}: length {len(got)} != {len(exp)}"
        if isinstance(exp, dict):
            assert set(got) == set(exp), f"{path}: keys {set(got)} != {set(exp)}"
            for k in exp:
                assert_same(got[k], exp[k], f"{path}[{k!r}]")
        else:
            for i, (a, b) in enumerate(zip(got, exp)):
                assert_same(a, b, f"{path}[{i}]")
        return
    if isinstance(exp, float):
        assert abs(got - exp) <= 1e-5 + 1e-5 * abs(exp), f"{path}: {got} != {exp}"
        return
    assert type(got) is type(exp) and got == exp, f"{path}: {got!r} != {exp!r}"


def _clone(v):
    if isinstance(v, torch.Tensor):
        return v.clone()
    if isinstance(v, tuple):
        return tuple(_clone(x) for x in v)
    if isinstance(v, list):
        return [_clone(x) for x in v]
    if isinstance(v, dict):
        return {k: _clone(x) for k, x in v.items()}
    return v


def check(fn, *inputs_list, g=None):
    """Compare ``to_graph(fn, strict=True)`` with ``fn`` on every input tuple; return g."""
    g = g if g is not None else to_graph(fn, strict=True)
    for args in inputs_list:
        exp = fn(*_clone(args))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            got = g(*_clone(args))
        assert_same(got, exp)
    return g


def op_counts(graph):
    """Counter of node ops, walking nested subgraphs."""
    c = collections.Counter()

    def walk(gr):
        for node in gr.nodes:
            c[node.op] += 1
            for sub in node.subgraphs:
                walk(sub)
    walk(graph)
    return c


def check_structure(g, args, cond, loop):
    counts = op_counts(g.graph(*_clone(args)))
    assert (counts["cond"] > 0) == cond, f"cond nodes: {counts['cond']} (expected {cond})"
    assert (counts["while"] > 0) == loop, f"while nodes: {counts['while']} (expected {loop})"


def case_collector(cond=None, loop=None):
    """``(cases, case)``: a list of pytest params and the decorator that fills it.

    ``@case(*inputs, cond=..., loop=..., xfail="BUG: ...")`` registers a program with the
    argument tuples to run it on; cond/loop: True/False = the graph must (not) hold
    cond/while nodes, None = not checked (defaults given here)."""
    cases = []

    def case(*inputs, cond=cond, loop=loop, xfail=None):
        def deco(fn):
            marks = [pytest.mark.xfail(strict=True, reason=xfail)] if xfail else []
            cases.append(pytest.param(fn, inputs, cond, loop, id=fn.__name__, marks=marks))
            return fn
        return deco
    return cases, case
