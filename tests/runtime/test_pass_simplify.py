"""Algebraic simplification: each rule of the table fires where it is exact, and only there.

Inputs include NaN, +-Inf and -0.0: a rule that changes any of them is wrong.
"""
import pytest
import torch

from runtime.graph_ops import set_grad_enabled
from runtime.passes import dce, simplify
from runtime.passes.simplify import RULES
from test_passes import F32, I64, graph_of, meta, op, ops, optimize, run_both, same

T = torch.Tensor
SPECIAL = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0, 0.0, 1.5, -2.0])
INTS = torch.tensor([0, -3, 7, 2**40, -(2**40), 1, -1])


def _simplified(build, dtype=F32, shape=(7,)):
    """(graph, simplified graph) for ``build(g, x)`` returning the output node."""
    g, (x,) = graph_of(shape, dtype=dtype)
    g.outputs = (op(g, T.add, build(g, x), 0.5 if dtype.is_floating_point else 1,
                    meta=meta(*shape, dtype=dtype)),)   # the value does not reach the caller as is
    return g, optimize(g, passes=[simplify, dce])


def m7(dtype=F32):
    return meta(7, dtype=dtype)


CASES = [  # (name, build, ops left before the final add, dtype)
    ("x*1", lambda g, x: op(g, T.mul, x, 1, meta=m7()), [], F32),
    ("x/1", lambda g, x: op(g, T.div, x, 1, meta=m7()), [], F32),
    ("x-0", lambda g, x: op(g, T.sub, x, 0, meta=m7()), [], F32),
    ("x**1", lambda g, x: op(g, T.pow, x, 1, meta=m7()), [], F32),
    ("x**2", lambda g, x: op(g, T.pow, x, 2, meta=m7()), ["mul"], F32),
    ("--x", lambda g, x: op(g, T.neg, op(g, T.neg, x, meta=m7()), meta=m7()), [], F32),
    ("relu(relu(x))", lambda g, x: op(g, torch.relu, op(g, torch.relu, x, meta=m7()), meta=m7()),
     ["relu"], F32),
    ("abs(abs(x))", lambda g, x: op(g, torch.abs, op(g, torch.abs, x, meta=m7()), meta=m7()),
     ["abs"], F32),
    ("abs(-x)", lambda g, x: op(g, torch.abs, op(g, T.neg, x, meta=m7()), meta=m7()),
     ["abs"], F32),
    ("(-x)*(-x)", lambda g, x: op(g, T.mul, op(g, T.neg, x, meta=m7()),
                                  op(g, T.neg, x, meta=m7()), meta=m7()), ["mul"], F32),
    ("x-(-x)", lambda g, x: op(g, T.sub, x, op(g, T.neg, x, meta=m7()), meta=m7()), ["add"], F32),
    ("x+(-x)", lambda g, x: op(g, T.add, x, op(g, T.neg, x, meta=m7()), meta=m7()), ["sub"], F32),
    ("x.float()", lambda g, x: op(g, T.float, x, meta=m7()), [], F32),
    ("x.to(f32)", lambda g, x: op(g, T.to, x, F32, meta=m7()), [], F32),
    ("x+0 int", lambda g, x: op(g, T.add, x, 0, meta=m7(I64)), [], I64),
    ("x-x int", lambda g, x: op(g, T.sub, x, x, meta=m7(I64)), ["zeros_like"], I64),
    ("x*0 int", lambda g, x: op(g, T.mul, x, 0, meta=m7(I64)), ["zeros_like"], I64),
    ("x//1 int", lambda g, x: op(g, T.__floordiv__, x, 1, meta=m7(I64)), [], I64),
    ("x.long() of i64", lambda g, x: op(g, T.long, x, meta=m7(I64)), [], I64),
]


@pytest.mark.parametrize("name, build, left, dtype", CASES, ids=[c[0] for c in CASES])
def test_rule_fires_and_is_exact_on_special_values(name, build, left, dtype):
    g, opt = _simplified(build, dtype)
    assert ops(opt) == left + ["add"], (name, str(opt))
    run_both(g, opt, SPECIAL if dtype == F32 else INTS)


def test_view_pairs_cancel():
    g, (x,) = graph_of((2, 3))
    m23, m32 = meta(2, 3), meta(3, 2)
    a = op(g, T.t, op(g, T.t, x, meta=m32), meta=m23)
    b = op(g, T.transpose, op(g, T.transpose, x, 0, 1, meta=m32), 1, 0, meta=m23)
    c = op(g, T.squeeze, op(g, T.unsqueeze, x, -1, meta=meta(2, 3, 1)), -1, meta=m23)
    g.outputs = (op(g, T.add, op(g, T.add, a, b, meta=m23), c, meta=m23),)
    opt = optimize(g, passes=[simplify, dce])
    assert ops(opt) == ["add", "add"]
    run_both(g, opt, torch.randn(2, 3))


NOT_EXACT = [  # (name, build, dtype): rules that would change a value, dtype or shape
    ("f32 x+0 (-0.0 + 0 is +0.0)", lambda g, x: op(g, T.add, x, 0, meta=m7()), F32),
    ("f32 x-x (inf - inf is nan)", lambda g, x: op(g, T.sub, x, x, meta=m7()), F32),
    ("f32 x*0 (inf * 0 is nan)", lambda g, x: op(g, T.mul, x, 0, meta=m7()), F32),
    ("int x*1.0 promotes", lambda g, x: op(g, T.mul, x, 1.0, meta=m7()), I64),
    ("int x/1 promotes", lambda g, x: op(g, T.div, x, 1, meta=m7()), I64),
    ("f32 x//1 (floors)", lambda g, x: op(g, T.__floordiv__, x, 1, meta=m7()), F32),
    ("x**2.5", lambda g, x: op(g, T.pow, x, 2.5, meta=m7()), F32),
    ("x.double()", lambda g, x: op(g, T.double, x, meta=m7(torch.float64)), F32),
]


@pytest.mark.parametrize("name, build, dtype", NOT_EXACT, ids=[c[0] for c in NOT_EXACT])
def test_rule_does_not_fire_where_inexact(name, build, dtype):
    g, (x,) = graph_of((7,), dtype=dtype)
    node = build(g, x)
    g.outputs = (op(g, T.neg, node, meta=node.meta),)
    opt = optimize(g, passes=[simplify])
    assert ops(opt) == ops(g), name
    run_both(g, opt, SPECIAL.to(dtype) if dtype == F32 else INTS)


UNIT_TENSORS = [  # (name, unit tensor node, fires)
    ("x * ones(3)", lambda g: op(g, torch.ones, 3), True),
    ("x * full(3, 1.0)", lambda g: op(g, torch.full, (3,), 1.0), True),
    ("x * ones(3, 3) broadcasts", lambda g: op(g, torch.ones, 3, 3, meta=meta(3, 3)), False),
    ("x * ones(3, f64) promotes", lambda g: op(g, torch.ones, 3, dtype=torch.float64,
                                              meta=meta(3, dtype=torch.float64)), False),
    ("x * full(3, 2.0)", lambda g: op(g, torch.full, (3,), 2.0), False),
]


@pytest.mark.parametrize("name, unit, fires", UNIT_TENSORS, ids=[c[0] for c in UNIT_TENSORS])
def test_unit_tensors_only_where_shape_and_dtype_stay(name, unit, fires):
    g, (x,) = graph_of((3,))
    u = unit(g)
    shape = torch.broadcast_shapes((3,), u.meta.shape)
    dtype = torch.promote_types(F32, u.meta.dtype)
    prod = op(g, T.mul, x, u, meta=meta(*shape, dtype=dtype))
    g.outputs = (op(g, T.neg, prod, meta=prod.meta),)
    opt = optimize(g, passes=[simplify, dce])
    assert ("mul" not in ops(opt)) == fires, str(opt)
    run_both(g, opt, SPECIAL[:3])


def test_unit_tensor_with_unknown_dims_is_kept():
    g, (x,) = graph_of((None, None))
    ones = op(g, torch.ones, 3, 3, meta=meta(3, 3))
    prod = op(g, T.mul, x, ones, meta=meta(None, None))    # x may be (1, 3): then (3, 3)
    g.outputs = (op(g, T.neg, prod, meta=prod.meta),)
    opt = optimize(g, passes=[simplify])
    assert "mul" in ops(opt)
    run_both(g, opt, torch.ones(1, 3))


def test_output_never_becomes_the_input_object():
    # return x * 1, -(-y): eager returns new tensors; a caller mutating them keeps x, y
    g, (x, y) = graph_of((3,), (3,))
    g.outputs = (op(g, T.mul, x, 1), op(g, T.neg, op(g, T.neg, y)))
    opt = optimize(g, passes=[simplify])
    xv, yv = torch.zeros(3), torch.zeros(3)
    a, b = opt(xv, yv)
    assert a is not xv and b is not yv
    a.add_(1)
    b.add_(1)
    same((xv, yv), (torch.zeros(3), torch.zeros(3)))


def test_two_outputs_stay_two_objects():
    # s = x + 1; return s, s * 1
    g, (x,) = graph_of((3,))
    s = op(g, T.add, x, 1)
    g.outputs = (s, op(g, T.mul, s, 1))
    a, b = optimize(g, passes=[simplify])(torch.zeros(3))
    assert a is not b


def test_internal_value_may_become_the_output():
    # return (x + 1) * 1 -> x + 1: the sum is still a fresh tensor
    g, (x,) = graph_of((3,))
    g.outputs = (op(g, T.mul, op(g, T.add, x, 1), 1),)
    opt = optimize(g, passes=[simplify, dce])
    assert ops(opt) == ["add"]
    run_both(g, opt, torch.randn(3))


def test_float_of_float_is_the_very_object_as_in_eager():
    g, (x,) = graph_of((3,))
    g.outputs = (op(g, T.float, x),)
    opt = optimize(g, passes=[simplify])
    v = torch.zeros(3)
    assert opt(v)[0] is v is v.float()


def test_mutated_values_are_not_replaced():
    # c = x.clone(); y = c * 1; c.add_(1); return y + 0.5   (y must not see the add_)
    g, (x,) = graph_of((3,))
    c = op(g, T.clone, x)
    y = op(g, T.mul, c, 1)
    op(g, T.add_, c, 1)
    g.outputs = (op(g, T.add, y, 0.5),)
    opt = optimize(g, passes=[simplify])
    assert "mul" in ops(opt)
    run_both(g, opt, torch.zeros(3))


def test_no_identity_rules_when_grad_mode_switches():
    # with no_grad: y = w * 1  -> y must not require grad, as in eager
    g, (x,) = graph_of((3,))
    weight = torch.ones(3, requires_grad=True)
    w = g.constant(weight, name="w")
    g.add_node("set_grad_enabled", set_grad_enabled, (False,), meta=None, impure=True)
    y = op(g, T.mul, w, 1)
    g.add_node("set_grad_enabled", set_grad_enabled, (True,), meta=None, impure=True)
    g.outputs = (op(g, T.mul, y, x),)
    opt = optimize(g, passes=[simplify])
    assert ops(opt).count("mul") == 2
    (out,) = opt(torch.ones(3, requires_grad=True))
    out.sum().backward()
    assert weight.grad is None


def test_every_rule_has_a_comment():
    import importlib
    import inspect
    source = inspect.getsource(importlib.import_module("runtime.passes.simplify"))
    table = source[source.index("RULES: List"):source.index("]\n", source.index("RULES: List"))]
    lines = [line for line in table.splitlines()[1:] if line.strip()]
    assert len(lines) >= len({op for op, _ in RULES}) and all("#" in line for line in lines)
