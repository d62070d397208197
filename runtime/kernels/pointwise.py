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


def _no_kwargs(kwargs, allowed=()) -> bool:
    return all(k in allowed for k in kwargs)


def unary(template: str, *names: str, kind: str = "f", allowed=()):
    def rule(args, kwargs):
        if len(args) != 1 or not _no_kwargs(kwargs, allowed):
            return None
        if kwargs.get("inplace"):
            return None
        return Expr(template, (args[0],), kind)
    for name in names:
        RULES[name] = rule


def binary(template: str, *names: str, kind: str = "f", swap: bool = False):
    def rule(args, kwargs):
        if len(args) != 2 or kwargs:
            return None
        a, b = (args[1], args[0]) if swap else args
        return Expr(template, (a, b), kind)
    for name in names:
        RULES[name] = rule


# ---------------------------------------------------------------------------- the table
unary("(-{0})", "neg", "negative")                                   # -x
unary("m_abs({0})", "abs", "absolute")                               # |x|
unary("m_exp({0})", "exp")                                           # e**x
unary("m_exp2({0})", "exp2")
unary("m_expm1({0})", "expm1")
unary("m_log({0})", "log")
unary("m_log2({0})", "log2")
unary("m_log10({0})", "log10")
unary("m_log1p({0})", "log1p")
unary("m_sqrt({0})", "sqrt")
unary("((T)1 / m_sqrt({0}))", "rsqrt")
unary("((T)1 / {0})", "reciprocal")
unary("({0} * {0})", "square")
unary("m_sin({0})", "sin")
unary("m_cos({0})", "cos")
unary("m_tan({0})", "tan")
unary("m_asin({0})", "asin")
unary("m_acos({0})", "acos")
unary("m_atan({0})", "atan")
unary("m_sinh({0})", "sinh")
unary("m_cosh({0})", "cosh")
unary("m_tanh({0})", "tanh", allowed=("inplace",))                  # F.tanh
unary("m_erf({0})", "erf")
unary("m_floor({0})", "floor")
unary("m_ceil({0})", "ceil")
unary("m_trunc({0})", "trunc")
unary("m_round({0})", "round")                                       # half to even
unary("m_sigmoid({0})", "sigmoid", allowed=("inplace",))
unary("m_relu({0})", "relu", allowed=("inplace",))                   # nan stays nan
unary("m_silu({0})", "silu", allowed=("inplace",))                   # x * sigmoid(x)
unary("m_mish({0})", "mish", allowed=("inplace",))                   # x * tanh(softplus(x))
unary("m_clamp({0}, (T)0, (T)6)", "relu6", allowed=("inplace",))
unary("m_hardsigmoid({0})", "hardsigmoid", allowed=("inplace",))
unary("({0} * m_clamp({0} + (T)3, (T)0, (T)6) / (T)6)", "hardswish",   # x*c/6, as torch
      allowed=("inplace",))
unary("(!{0})", "logical_not", kind="b")
binary("({0} + {1})", "radd")                                       # s + x
binary("({0} - {1})", "subtract")
binary("({1} - {0})", "rsub")                                        # s - x, recorded as rsub(x, s)
binary("({0} * {1})", "mul", "rmul", "multiply")
binary("({0} / {1})", "truediv", "true_divide")
binary("({1} / {0})", "rdiv", "rtruediv")                            # s / x
binary("m_maximum({0}, {1})", "maximum")                             # nan-propagating
binary("m_minimum({0}, {1})", "minimum")
binary("m_pow({0}, {1})", "rpow", swap=True)                         # s ** x
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
        special = {2: "({0} * {0})", 3: "({0} * {0} * {0})", 0.5: "m_sqrt({0})",
                   -0.5: "((T)1 / m_sqrt({0}))", 1: "({0})", -1: "((T)1 / {0})",
                   -2: "((T)1 / ({0} * {0}))"}
        if exp in special:
            return Expr(special[exp], (base,))
    return Expr("m_pow({0}, {1})", (base, exp))


RULES["pow"] = _pow


# clamp with a bound that is a tensor or nan: the nan (of x or of the bound) propagates, as
# in torch (``clamp(x, min=nan)`` is all nan); a tie keeps x (and so the sign of a zero)
_NAN_MIN = "(({0} < {1} || {1} != {1}) ? (T){1} : {0})"
_NAN_MAX = "(({0} > {1} || {1} != {1}) ? (T){1} : {0})"


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
    return clamp_expr(args[0], lo, hi)


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


RULES["float"] = _cast("float32")
RULES["double"] = _cast("float64")
RULES["bool"] = _cast("bool")
RULES["to"] = _cast(None)

# ops that compare or combine bools (`~m`, `m & n`) only when their operands are bools
BOOL_ONLY = {"invert": "(!{0})", "and": "({0} && {1})", "or": "({0} || {1})",
             "bitwise_not": "(!{0})", "bitwise_and": "({0} && {1})",
             "bitwise_or": "({0} || {1})", "xor": "({0} != {1})", "bitwise_xor": "({0} != {1})"}


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
