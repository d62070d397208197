"""Facts about operations, as tables: their readable names, and which ones are impure.

Purity matters to the optimizer: CSE and DCE never merge or drop an impure node
(random draws, in-place mutation, printing, assertions).
"""
from __future__ import annotations


# Random operations: each run must draw new numbers. Which torch ops draw is torch's own
# schema fact (``RANDOM`` asks it: an ATen overload tagged ``nondeterministic_seeded`` or
# taking a ``Generator``, as ``_sample_dirichlet`` behind ``Beta.sample()``); these are the
# names the schema cannot answer for: functions recorded whole that draw inside.
_DRAWS_INSIDE = {
    "dropout1d", "dropout2d", "dropout3d", "gumbel_softmax",
    "fractional_max_pool2d", "fractional_max_pool3d",
    "get_rng_state",        # (reads the generator: must run in its place among the draws)
}
# ATen ops tagged random only for their dropout argument (``torch.lstm(..., dropout,
# train, ...)``): ``is_impure`` asks the call; as a name they are not random.
_DROPOUT_ARGUMENT = {"lstm": 5, "gru": 5, "rnn_tanh": 5, "rnn_relu": 5}
# Attention tagged random for its ``dropout_p``: ``is_impure`` asks the call (``dropout_p``
# 0 is the inference call every pass rewrites: a mask as ``is_causal``, fused attention).
_DROPOUT_P = {"scaled_dot_product_attention", "_scaled_dot_product_attention_math",
              "_scaled_dot_product_flash_attention_for_cpu"}


class _RandomOps:
    """``name in RANDOM``: the op named ``name`` draws from a random generator. Answers are
    cached in a dict two threads may both fill: each writes torch's same answer."""

    def __init__(self):
        self._known = {}

    def __contains__(self, name) -> bool:
        if not isinstance(name, str):
            return False
        found = self._known.get(name)
        if found is None:
            found = name in _DRAWS_INSIDE or (name not in _DROPOUT_ARGUMENT
                                              and name not in _DROPOUT_P
                                              and _schema_draws(name))
            if len(self._known) < 10_000:
                self._known[name] = found
        return found


def _schema_draws(name: str) -> bool:
    import torch
    if name.startswith("__"):
        return False
    try:
        packet = getattr(torch.ops.aten, name)
        overloads = [getattr(packet, o) for o in packet.overloads()]
    except (AttributeError, RuntimeError):
        return False
    return any(torch.Tag.nondeterministic_seeded in op.tags
               or any("Generator" in str(a.type) for a in op._schema.arguments)
               for op in overloads)


RANDOM = _RandomOps()
# Ops that change global state: autograd on/off (``with torch.no_grad():`` in traced code).
GLOBAL_STATE = {"set_grad_enabled"}


_NAMES: dict = {}      # func -> op_name(func), for the functions seen so far


def op_name(func) -> str:
    """``torch.matmul`` -> ``matmul``; ``Tensor.__add__`` -> ``add``; ``Tensor.T`` -> ``T``."""
    try:
        return _NAMES[func]
    except (KeyError, TypeError):
        pass
    name = _op_name(func)
    try:
        if len(_NAMES) < 10_000:
            _NAMES[func] = name
    except TypeError:            # unhashable callable
        pass
    return name


def _op_name(func) -> str:
    name = getattr(func, "__name__", None) or type(func).__name__
    if name == "__get__" and hasattr(func, "__self__"):
        name = getattr(func.__self__, "__name__", name)
    if name.startswith("__") and name.endswith("__") and len(name) > 4:
        name = name[2:-2]
    return name


def is_inplace(func, kwargs) -> bool:
    """Mutates an argument: ``add_``, ``x += y``, ``x[i] = v``, ``out=`` and ``inplace=True``
    forms."""
    name = getattr(func, "__name__", "")
    if name in ("__setitem__", "setitem") or (name.startswith("__i") and name.endswith("__")
                                 and name not in ("__index__", "__init__", "__iter__",
                                                  "__int__", "__invert__")):
        return True
    if name.endswith("_") and not name.endswith("__"):
        return True
    if kwargs.get("inplace") is True:       # F.relu(x, inplace=True) and friends
        return True
    return kwargs.get("out") is not None


def is_impure(func, kwargs, args=()) -> bool:
    """Cannot be merged, reordered across effects, or dropped when unused."""
    if is_inplace(func, kwargs) or getattr(func, "__name__", "") == "__set__":
        return True                     # (``p.grad = None``: a descriptor's setter)
    name = op_name(func)
    if name in RANDOM or name in GLOBAL_STATE or getattr(func, "_tograph_effect", False) or \
            getattr(func, "_tograph_impure", False):     # (autograd_effects' reads)
        return True
    if name in _DROPOUT_ARGUMENT:                   # torch.lstm(..., dropout, train, ...)
        at = _DROPOUT_ARGUMENT[name]
        return len(args) > at + 1 and bool(args[at]) and bool(args[at + 1])
    if name == "multi_head_attention_forward":      # attention dropout draws at random
        p = kwargs.get("dropout_p", args[10] if len(args) > 10 else 0.0)
        return bool(p) and bool(kwargs.get("training", args[13] if len(args) > 13 else True))
    if name in _DROPOUT_P:
        return bool(kwargs.get("dropout_p", args[4] if len(args) > 4 else 0.0))
    if name in ("batch_norm", "instance_norm"):      # training updates running statistics
        training = kwargs.get("training", kwargs.get("use_input_stats"))
        if training is None and len(args) > 5:
            training = args[5]
        return training is None or bool(training)
    return False
