"""A list, dict or object that existed before the call (a global, a closure value, a
mutable default argument), reached through a *local* name and written in a tensor ``if``
or ``while``, keeps eager's contents after every call: never silently its old ones.

    STATE = {"best": math.inf}
    def step(x):
        s = STATE
        if x.sum().item() < s["best"]:
            s["best"] = x.sum().item()

The region carries the local ``s`` by value and hands it a new container, so the caller's
object would never be written: such a region falls back naming the user's line
(``runtime.operators.state_aliases.existing``), strict mode raising ConversionError.
Objects keep their identity through a region and convert. Each case runs the program
eagerly and converted (default, then strict) from one start, call by call, and compares
the result and the Python state after every call.
"""
from __future__ import annotations

import copy
import math
import types
import warnings

import pytest
import torch

from e2e_helpers import assert_same
from transpiler import ConversionError, FallbackWarning, to_graph

SCALES = [3.0, 1.0, 2.0, -1.0, 5.0, -3.0]
HERE = __file__.rsplit("/", 1)[-1]


def _run(build, strict=None):
    """strict None: eager. ([(result, state)], fallback messages); strict: the
    ConversionError of the first call, or None."""
    fn, state = build()
    g = fn if strict is None else to_graph(fn, strict=strict)
    rows, fallbacks = [], []
    for s in SCALES:
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            try:
                out = g(torch.ones(2, 2) * s)
            except ConversionError as e:
                return rows, [str(e)], e
        fallbacks += [str(w.message) for w in rec if issubclass(w.category, FallbackWarning)]
        rows.append((out.detach().clone(), copy.deepcopy(state())))
    return rows, fallbacks, None


def _check(build, verdict):
    """verdict: "fallback" (the tag's line named; strict raises) or "converts"."""
    exp, _, _ = _run(build)
    for strict in (False, True):
        got, fallbacks, error = _run(build, strict)
        if verdict == "converts":
            assert not fallbacks, fallbacks[0]
        else:
            assert fallbacks, f"strict={strict}: converted, eager's state expected a fallback"
            assert f"{HERE}:" in fallbacks[0], fallbacks[0]
            assert (error is not None) == strict
        if error is None:
            assert len(got) == len(exp)
        for i, (g, e) in enumerate(zip(got, exp)):
            assert_same(g, e, f"strict={strict} call {i}")


# ------------------------------------------------- dicts and lists: fall back, exact
BEST = {"best": math.inf}


def global_dict_via_local_python_if():
    BEST["best"] = math.inf

    def f(x):
        s = BEST
        if x.sum().item() < s["best"]:
            s["best"] = x.sum().item()
        return x * 2
    return f, lambda: BEST


def global_dict_via_local_tensor_if():
    BEST["best"] = math.inf

    def f(x):
        s = BEST
        if x.sum() < s["best"]:
            s["best"] = x.sum().item()
        return x * 2
    return f, lambda: BEST


def default_argument_dict_in_tensor_if():
    def f(x, _s={"best": math.inf}):
        if x.sum().item() < _s["best"]:
            _s["best"] = x.sum().item()
        return x * 2
    return f, lambda: f.__defaults__[0]


def closure_dict_via_local_tensor_if():
    held = {"n": 0}

    def f(x):
        s = held
        if x.sum() > 0:
            s["n"] = s["n"] + 1
        return x + 1
    return f, lambda: held


NESTED = {"inner": {"n": 0}}


def nested_dict_via_local_tensor_if():
    NESTED["inner"]["n"] = 0

    def f(x):
        inner = NESTED["inner"]
        if x.sum() > 0:
            inner["n"] = inner["n"] + 1
        return x - 1
    return f, lambda: NESTED


HISTORY = []


def global_list_via_local_tensor_if():
    HISTORY.clear()

    def f(x):
        h = HISTORY
        if x.sum() > 0:
            h.append(1)
        else:
            h.append(0)
        return x * 3
    return f, lambda: HISTORY


COUNTS = {"steps": 0}


def global_dict_via_local_tensor_while():
    COUNTS["steps"] = 0

    def f(x):
        c = COUNTS
        t = x.sum()
        while t < 10:
            c["steps"] = c["steps"] + 1
            t = t + 4
        return x * t
    return f, lambda: COUNTS


HELPED = {"n": 0}


def _count_positive(x):
    s = HELPED
    if x.sum() > 0:
        s["n"] = s["n"] + 1
    return x


def global_dict_via_local_in_helper():
    HELPED["n"] = 0

    def f(x):
        return _count_positive(x) * 2
    return f, lambda: HELPED


@pytest.mark.parametrize("build", [
    global_dict_via_local_in_helper, global_dict_via_local_python_if, global_dict_via_local_tensor_if,
    default_argument_dict_in_tensor_if, closure_dict_via_local_tensor_if,
    nested_dict_via_local_tensor_if, global_list_via_local_tensor_if,
    global_dict_via_local_tensor_while])
def test_existing_container_via_local_written_in_region_falls_back(build):
    _check(build, "fallback")


# ------------------------------------------------------------- converting, exact
CFG = types.SimpleNamespace(n=0)


def global_object_via_local_tensor_if():
    CFG.n = 0

    def f(x):
        o = CFG
        if x.sum() > 0:
            o.n += 1
        return x * 2
    return f, lambda: CFG


def local_dict_written_in_tensor_if():
    """A dict the call makes itself is no alias: converts (no needless fallback)."""
    def f(x):
        s = {"best": math.inf}
        if x.sum() < s["best"]:
            s["best"] = 1.0
        return x * s["best"]
    return f, lambda: None


def global_dict_read_only_in_tensor_if():
    BEST["best"] = 4.0

    def f(x):
        s = BEST
        if x.sum() < s["best"]:
            y = x * 2
        else:
            y = x - s["best"]
        return y
    return f, lambda: BEST


@pytest.mark.parametrize("build", [global_object_via_local_tensor_if,
                                   local_dict_written_in_tensor_if,
                                   global_dict_read_only_in_tensor_if])
def test_no_alias_or_identity_kept_converts(build):
    _check(build, "converts")
