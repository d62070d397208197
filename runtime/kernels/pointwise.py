"""Which graph ops are elementwise, and how each one is written in C: the fusion op table.

``match(op, args, kwargs)`` turns one node's call into an ``Expr``: a C template over its
operands (``{0}``, ``{1}``...) and the kind of value it makes (``f``: the group's float
type, ``b``: a bool). Operands are the call's tensors and Python numbers, in template
order; keyword arguments that change the math are folded into the operands or the
template, and any keyword or form this table does not know makes the op unfusable (it
then runs as the torch op it always was).

Templates follow torch's float semantics, NaN and Inf included: ``relu(nan)`` is nan,
``maximum``/``minimum``/``clamp`` propagate nan, ``x ** 0.5`` is ``sqrt`` (as torch
special-cases it). Each ``m_*`` name is a C helper defined in ``codegen.PRELUDE``.

Derivatives sit beside each op (``d=``): per operand, a C template of that operand's share
of the gradient, over the operands ``{0}``, ``{1}``..., the op's result ``{out}`` (cheaper
than recomputing: exp, tanh, sigmoid) and the incoming gradient ``{g}``, written as torch's
``derivatives.yaml`` writes it (so NaN/Inf and ties behave as eager's backward); ``None``
for an operand no gradient flows to (a condition, a mask). ``derivative(template)`` looks a
template's rule up: ``NONDIFF`` for ops whose result carries no gradient (comparisons, bool
logic), None for ops without a rule (their group keeps the torch ops under autograd).
``kernels/pointwise_backward.py`` turns a fused group's rules into its backward kernel.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Tuple


@dataclass(frozen=True)
class Expr:
    template: str           # C expression over {0}, {1}, ... (operands in order)
    operands: Tuple[Any, ...]
    kind: str = "f"         # "f": the group's float type; "b": bool


Rule = Callable[[tuple, dict], Optional[Expr]]
RULES: Dict[str, Rule] = {}
# template -> per operand: the C template of its gradient share, or None (no gradient)
DERIVATIVES: Dict[str, Tuple[Optional[str], ...]] = {}
NONDIFF: Tuple[Optional[str], ...] = ()      # a result no gradient flows through


def grad_rule(template: str, *d: Optional[str]) -> str:
    """Record ``template``'s derivative (``d``: one entry per operand; none: NONDIFF)."""
    DERIVATIVES[template] = tuple(d)
    return template


def derivative(template: str) -> Optional[Tuple[Optional[str], ...]]:
    """The rule of ``template``: per operand its gradient template or None; ``NONDIFF``;
    or None when the template has no rule."""
    return DERIVATIVES.get(template)


def _no_kwargs(kwargs, allowed=()) -> bool:
    return all(k in allowed for k in kwargs)


def unary(template: str, *names: str, kind: str = "f", allowed=(), d: Optional[str] = None):
    if kind == "b" or d is not None:
        grad_rule(template, *(() if kind == "b" else (d,)))

    def rule(args, kwargs):
        if len(args) != 1 or not _no_kwargs(kwargs, allowed):
            return None
        if kwargs.get("inplace"):
            return None
        return Expr(template, (args[0],), kind)
    for name in names:
        RULES[name] = rule


def binary(template: str, *names: str, kind: str = "f", swap: bool = False, d=None):
    if kind == "b" or d is not None:
        grad_rule(template, *(() if kind == "b" else d))

    def rule(args, kwargs):
        if len(args) != 2 or kwargs:
            return None
        a, b = (args[1], args[0]) if swap else args
        return Expr(template, (a, b), kind)
    for name in names:
        RULES[name] = rule


# ---------------------------------------------------------------------------- the table
# d=: the gradient share of the operand(s) (see the module docstring); the forms of
# torch's derivatives.yaml (``abs``: grad * sgn(x), sgn(nan) = 0)
unary("(-{0})", "neg", "negative", d="(-{g})")                             # -x
unary("m_abs({0})", "abs", "absolute", d="{g} * (T)(({0} > 0) - ({0} < 0))")   # |x|
unary("m_exp({0})", "exp", d="{g} * {out}")                                 # e**x
unary("m_exp2({0})", "exp2", d="{g} * {out} * (T)0.693147180559945309417")
unary("m_expm1({0})", "expm1", d="{g} * ({out} + (T)1)")
unary("m_log({0})", "log", d="{g} / {0}")
unary("m_log2({0})", "log2", d="{g} / ({0} * (T)0.693147180559945309417)")
unary("m_log10({0})", "log10", d="{g} / ({0} * (T)2.302585092994045684018)")
unary("m_log1p({0})", "log1p", d="{g} / ({0} + (T)1)")
unary("m_sqrt({0})", "sqrt", d="{g} / ((T)2 * {out})")
unary("((T)1 / m_sqrt({0}))", "rsqrt", d="(T)-0.5 * {g} * ({out} * {out} * {out})")
unary("((T)1 / {0})", "reciprocal", d="-{g} * ({out} * {out})")
unary("({0} * {0})", "square", d="{g} * ((T)2 * {0})")
unary("m_sin({0})", "sin", d="{g} * m_cos({0})")
unary("m_cos({0})", "cos", d="{g} * -m_sin({0})")
unary("m_tan({0})", "tan", d="{g} * ((T)1 + {out} * {out})")
unary("m_asin({0})", "asin", d="{g} * ((T)1 / m_sqrt(-{0} * {0} + (T)1))")
unary("m_acos({0})", "acos", d="{g} * -((T)1 / m_sqrt(-{0} * {0} + (T)1))")
unary("m_atan({0})", "atan", d="{g} / ({0} * {0} + (T)1)")
unary("m_sinh({0})", "sinh", d="{g} * m_cosh({0})")
unary("m_cosh({0})", "cosh", d="{g} * m_sinh({0})")
unary("m_tanh({0})", "tanh", allowed=("inplace",), d="{g} * ((T)1 - {out} * {out})")  # F.tanh
unary("m_erf({0})", "erf", d="(T)1.12837916709551257390 * m_exp(-({0} * {0})) * {g}")
unary("m_floor({0})", "floor", d="(T)0")
unary("m_ceil({0})", "ceil", d="(T)0")
unary("m_trunc({0})", "trunc", d="(T)0")
unary("m_round({0})", "round", d="(T)0")                                     # half to even
unary("m_sigmoid({0})", "sigmoid", allowed=("inplace",), d="{g} * ((T)1 - {out}) * {out}")
unary("m_relu({0})", "relu", allowed=("inplace",),                   # nan stays nan
      d="({out} <= 0 ? (T)0 : {g})")
unary("m_silu({0})", "silu", allowed=("inplace",), d="{g} * m_silu_grad({0})")  # x*sigmoid(x)
unary("m_mish({0})", "mish", allowed=("inplace",),                 # x * tanh(softplus(x))
      d="{g} * m_mish_grad({0})")
unary("m_clamp({0}, (T)0, (T)6)", "relu6", allowed=("inplace",),    # hardtanh(x, 0, 6)
      d="(({0} <= 0 || {0} >= 6) ? (T)0 : {g})")
unary("m_hardsigmoid({0})", "hardsigmoid", allowed=("inplace",),
      d="(({0} > -3 && {0} < 3) ? {g} * (T)(1.0f / 6.0f) : (T)0)")  # as torch
unary("({0} * m_clamp({0} + (T)3, (T)0, (T)6) / (T)6)", "hardswish",   # x*c/6, as torch
      allowed=("inplace",), d="({0} <= -3 ? (T)0 : {0} < 3 ? {g} * ({0} / (T)3 + (T)0.5) : {g})")
unary("(!{0})", "logical_not", kind="b")
binary("({0} + {1})", "radd", d=("{g}", "{g}"))                     # s + x
binary("({0} - {1})", "subtract", d=("{g}", "(-{g})"))
binary("({1} - {0})", "rsub", d=("(-{g})", "{g}"))                  # s - x, as rsub(x, s)
binary("({0} * {1})", "mul", "rmul", "multiply", d=("{g} * {1}", "{g} * {0}"))
binary("({0} / {1})", "truediv", "true_divide",
       d=("{g} / {1}", "-{g} * (({0} / {1}) / {1})"))
binary("({1} / {0})", "rdiv", "rtruediv",                            # s / x
       d=("-{g} * (({1} / {0}) / {0})", "{g} / {0}"))
binary("m_maximum({0}, {1})", "maximum",                             # nan-propagating
       d=("({0} < {1} ? (T)0 : {0} == {1} ? {g} / (T)2 : {g})",     # ties split the grad
          "({0} > {1} ? (T)0 : {0} == {1} ? {g} / (T)2 : {g})"))
binary("m_minimum({0}, {1})", "minimum",
       d=("({0} > {1} ? (T)0 : {0} == {1} ? {g} / (T)2 : {g})",
          "({0} < {1} ? (T)0 : {0} == {1} ? {g} / (T)2 : {g})"))
binary("m_pow({0}, {1})", "rpow", swap=True, d=(                      # s ** x (and x ** y)
    "({1} == 0 ? (T)0 : {g} * ({1} * m_pow({0}, {1} - (T)1)))",
    "(({0} == 0 && {1} >= 0) ? (T)0 : {g} * ({out} * m_log({0})))"))
binary("({0} > {1})", "gt", "greater", kind="b")
binary("({0} < {1})", "lt", "less", kind="b")
binary("({0} >= {1})", "ge", "greater_equal", kind="b")
binary("({0} <= {1})", "le", "less_equal", kind="b")
binary("({0} == {1})", "eq", kind="b")
binary("({0} != {1})", "ne", "not_equal", kind="b")
binary("({0} && {1})", "logical_and", kind="b")
binary("({0} || {1})", "logical_or", kind="b")


# torch computes ``x + alpha*y`` and ``addcmul`` with one rounding (a fused multiply-add):
# ``add(inf, -3e38, alpha=2)`` is inf, not nan
FMA = "_Generic((T)0, float: fmaf, default: fma)"


def _alpha_rule(op: str, sign: str) -> Rule:
    """``add(x, y, alpha=a)`` -> fma(y, a, x) (``sub``: -a); without alpha the plain form."""
    def rule(args, kwargs):
        if len(args) != 2 or not _no_kwargs(kwargs, ("alpha",)):
            return None
        if "alpha" not in kwargs or kwargs["alpha"] == 1:
            return Expr(f"({{0}} {op} {{1}})", tuple(args))
        alpha = kwargs["alpha"]
        if not _is_number(alpha):
            return None
        return Expr(f"{FMA}({{1}}, {sign}(T){{2}}, {{0}})", (args[0], args[1], alpha))
    grad_rule(f"({{0}} {op} {{1}})", "{g}", "{g}" if op == "+" else "(-{g})")
    grad_rule(f"{FMA}({{1}}, {sign}(T){{2}}, {{0}})", "{g}", f"{{g}} * {sign}(T){{2}}", None)
    return rule


RULES["add"] = _alpha_rule("+", "")                                     # x + alpha*y
RULES["sub"] = _alpha_rule("-", "-")                                    # x - alpha*y


def _div(args, kwargs):                                              # true division only
    if len(args) != 2 or kwargs.get("rounding_mode") is not None or \
            not _no_kwargs(kwargs, ("rounding_mode",)):
        return None
    return Expr("({0} / {1})", tuple(args))


RULES["div"] = RULES["divide"] = _div


def _pow(args, kwargs):                                              # torch's special exponents
    if len(args) != 2 or kwargs:
        return None
    base, exp = args
    if _is_number(exp) and not isinstance(exp, bool):
        special = {2: "({0} * {0})", 3: _CUBE, 0.5: "m_sqrt({0})",
                   -0.5: "((T)1 / m_sqrt({0}))", 1: "({0})", -1: "((T)1 / {0})",
                   -2: _INV_SQUARE}
        if exp in special:
            return Expr(special[exp], (base,))
    return Expr("m_pow({0}, {1})", (base, exp))


_CUBE = grad_rule("({0} * {0} * {0})", "{g} * ((T)3 * ({0} * {0}))")
_INV_SQUARE = grad_rule("((T)1 / ({0} * {0}))", "{g} * ((T)-2 / ({0} * {0} * {0}))")
grad_rule("({0})", "{g}")
RULES["pow"] = _pow


# clamp with a bound that is a tensor or nan: the nan (of x or of the bound) propagates, as
# in torch (``clamp(x, min=nan)`` is all nan); a tie keeps x (and so the sign of a zero)
_NAN_MIN = "(({0} < {1} || {1} != {1}) ? (T){1} : {0})"
_NAN_MAX = "(({0} > {1} || {1} != {1}) ? (T){1} : {0})"


# torch's clamp_backward: the grad passes where lo <= x <= hi (a nan x gets none)
grad_rule("m_clamp_max({0}, {1})", "({0} <= {1} ? {g} : (T)0)", None)
grad_rule("m_clamp_min({0}, {1})", "({0} >= {1} ? {g} : (T)0)", None)
grad_rule("m_clamp({0}, {1}, {2})", "(({0} >= {1} && {0} <= {2}) ? {g} : (T)0)", None, None)


def _plain(bound) -> bool:
    return _is_number(bound) and not math.isnan(bound)


def clamp_expr(x, lo, hi) -> Optional[Expr]:
    """min(max(x, lo), hi) (either bound may be None), nan-propagating like torch."""
    if lo is None and hi is None:
        return None
    if lo is None:
        return Expr("m_clamp_max({0}, {1})" if _plain(hi) else _NAN_MAX, (x, hi))
    if hi is None:
        return Expr("m_clamp_min({0}, {1})" if _plain(lo) else _NAN_MIN, (x, lo))
    if _plain(lo) and _plain(hi):
        return Expr("m_clamp({0}, {1}, {2})", (x, lo, hi))
    return Expr(_NAN_MAX.replace("{1}", "{2}").replace("{0}", _NAN_MIN), (x, lo, hi))


def _clamp(args, kwargs):                                            # clamp(x, min, max)
    if not _no_kwargs(kwargs, ("min", "max")) or not 1 <= len(args) <= 3:
        return None
    lo = args[1] if len(args) > 1 else kwargs.get("min")
    hi = args[2] if len(args) > 2 else kwargs.get("max")
    return clamp_expr(args[0], lo, hi)


# a tensor (or nan) bound: torch's clamp_backward_min_max (a bound gets the grad where it
# is the result; with lo > hi the result is hi)
grad_rule(_NAN_MIN, "({0} >= {1} ? {g} : (T)0)", "({0} < {1} ? {g} : (T)0)")
grad_rule(_NAN_MAX, "({0} <= {1} ? {g} : (T)0)", "({0} > {1} ? {g} : (T)0)")
grad_rule(_NAN_MAX.replace("{1}", "{2}").replace("{0}", _NAN_MIN),
          "(({0} >= {1} && {0} <= {2}) ? {g} : (T)0)", "(({0} < {1} && {1} < {2}) ? {g} : (T)0)",
          "(({0} > {2} || {2} < {1}) ? {g} : (T)0)")
RULES["clamp"] = RULES["clip"] = _clamp
RULES["clamp_min"] = lambda a, k: None if k or len(a) != 2 else clamp_expr(a[0], a[1], None)
RULES["clamp_max"] = lambda a, k: None if k or len(a) != 2 else clamp_expr(a[0], None, a[1])


def _where(args, kwargs):                                            # where(c, a, b)
    if len(args) != 3 or kwargs:
        return None
    return Expr("({0} ? {1} : {2})", tuple(args))


def _masked_fill(args, kwargs):                                      # x.masked_fill(m, v)
    if len(args) != 3 or kwargs:
        return None
    x, mask, value = args
    return Expr("({1} ? {2} : {0})", (x, mask, value))


grad_rule("({0} ? {1} : {2})", None, "({0} ? {g} : (T)0)", "({0} ? (T)0 : {g})")
grad_rule("({1} ? {2} : {0})", "({1} ? (T)0 : {g})", None, "({1} ? {g} : (T)0)")
RULES["where"] = _where
RULES["masked_fill"] = _masked_fill


def _addcmul(args, kwargs):                                          # fma(value*b, c, a)
    if len(args) != 3 or not _no_kwargs(kwargs, ("value",)):
        return None
    value = kwargs.get("value", 1)
    if not _is_number(value):
        return None
    return Expr(FMA + "((T){3} * {1}, {2}, {0})", tuple(args) + (value,))


def _addcdiv(args, kwargs):                                          # a + (value*b)/c
    if len(args) != 3 or not _no_kwargs(kwargs, ("value",)):
        return None
    value = kwargs.get("value", 1)
    if not _is_number(value):
        return None
    return Expr("({0} + (T){3} * {1} / {2})", tuple(args) + (value,))


grad_rule(FMA + "((T){3} * {1}, {2}, {0})",
          "{g}", "{g} * {2} * (T){3}", "{g} * {1} * (T){3}", None)
grad_rule("({0} + (T){3} * {1} / {2})",
          "{g}", "{g} * (T){3} / {2}", "-{g} * (T){3} * {1} / ({2} * {2})", None)
RULES["addcmul"] = _addcmul
RULES["addcdiv"] = _addcdiv


def _leaky_relu(args, kwargs):                                       # x > 0 ? x : slope*x
    if not 1 <= len(args) <= 2 or not _no_kwargs(kwargs, ("negative_slope", "inplace")) \
            or kwargs.get("inplace"):
        return None
    slope = args[1] if len(args) > 1 else kwargs.get("negative_slope", 0.01)
    return Expr("({0} > 0 ? {0} : {0} * {1})", (args[0], slope)) if _is_number(slope) else None


def _elu(args, kwargs):                                              # x > 0 ? x : alpha*expm1(x)
    if len(args) != 1 or not _no_kwargs(kwargs, ("alpha", "inplace")) or kwargs.get("inplace"):
        return None
    alpha = kwargs.get("alpha", 1.0)
    return Expr("({0} > 0 ? {0} : {1} * m_expm1({0}))", (args[0], alpha)) \
        if _is_number(alpha) else None


def _gelu(args, kwargs):                                             # erf or tanh form
    if len(args) != 1 or not _no_kwargs(kwargs, ("approximate",)):
        return None
    how = kwargs.get("approximate", "none")
    if how == "none":
        return Expr("m_gelu({0})", args)
    if how == "tanh":
        return Expr("m_gelu_tanh({0})", args)
    return None


def _softplus(args, kwargs):                                         # log1p(exp(bx))/b
    if not 1 <= len(args) <= 3 or not _no_kwargs(kwargs, ("beta", "threshold")):
        return None
    beta = args[1] if len(args) > 1 else kwargs.get("beta", 1.0)
    threshold = args[2] if len(args) > 2 else kwargs.get("threshold", 20.0)
    if not (_is_number(beta) and _is_number(threshold)):
        return None
    return Expr("m_softplus({0}, {1}, {2})", (args[0], beta, threshold))


def _hardtanh(args, kwargs):                                         # clamp(x, lo, hi)
    if not 1 <= len(args) <= 3 or not _no_kwargs(kwargs, ("min_val", "max_val", "inplace")) \
            or kwargs.get("inplace"):
        return None
    lo = args[1] if len(args) > 1 else kwargs.get("min_val", -1.0)
    hi = args[2] if len(args) > 2 else kwargs.get("max_val", 1.0)
    if not (_is_number(lo) and _is_number(hi)):
        return None
    if _plain(lo) and _plain(hi):
        return Expr(_HARDTANH, (args[0], lo, hi))
    return clamp_expr(args[0], lo, hi)


# m_clamp spelled out: hardtanh's backward passes no grad at the bounds (clamp's does)
_HARDTANH = grad_rule("m_clamp_max(m_clamp_min({0}, {1}), {2})",
                      "(({0} <= {1} || {0} >= {2}) ? (T)0 : {g})", None, None)


grad_rule("({0} > 0 ? {0} : {0} * {1})", "({0} > 0 ? {g} : {g} * {1})", None)
grad_rule("({0} > 0 ? {0} : {1} * m_expm1({0}))",
          "({0} <= 0 ? {g} * {1} * m_exp({0}) : {g})", None)
grad_rule("m_gelu({0})", "{g} * m_gelu_grad({0})")
grad_rule("m_gelu_tanh({0})", "{g} * m_gelu_tanh_grad({0})")
grad_rule("m_softplus({0}, {1}, {2})", "{g} * m_softplus_grad({0}, {1}, {2})", None, None)
RULES["leaky_relu"] = _leaky_relu
RULES["elu"] = _elu
RULES["gelu"] = _gelu
RULES["softplus"] = _softplus
RULES["hardtanh"] = _hardtanh

# casts between the group's float type and bool: (T)b, b != 0
CASTS = {"float": "float32", "double": "float64", "bool": "bool"}


def _cast(target: Optional[str]) -> Rule:
    def rule(args, kwargs):
        if kwargs or (target is None and len(args) != 2) or (target and len(args) != 1):
            return None
        dtype = target or str(args[1]).replace("torch.", "")
        if dtype not in ("float32", "float64", "bool"):
            return None
        if dtype == "bool":
            return Expr("({0} != 0)", (args[0],), "b")
        return Expr("((T){0})", (args[0],))
    return rule


grad_rule("((T){0})", "{g}")
grad_rule("({0} != 0)")
RULES["float"] = _cast("float32")
RULES["double"] = _cast("float64")
RULES["bool"] = _cast("bool")
RULES["to"] = _cast(None)

# ops that compare or combine bools (`~m`, `m & n`) only when their operands are bools
BOOL_ONLY = {"invert": "(!{0})", "and": "({0} && {1})", "or": "({0} || {1})",
             "bitwise_not": "(!{0})", "bitwise_and": "({0} && {1})",
             "bitwise_or": "({0} || {1})", "xor": "({0} != {1})", "bitwise_xor": "({0} != {1})"}
for _t in BOOL_ONLY.values():
    grad_rule(_t)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, complex)


def match(op: str, args: tuple, kwargs: dict, bool_operands: bool = False) -> Optional[Expr]:
    """The elementwise expression for one call, or None when it is not fusable."""
    if op in BOOL_ONLY:
        arity = 2 if "{1}" in BOOL_ONLY[op] else 1
        if not bool_operands or kwargs or len(args) != arity:
            return None
        return Expr(BOOL_ONLY[op], tuple(args), "b")
    rule = RULES.get(op)
    return None if rule is None else rule(tuple(args), dict(kwargs))
