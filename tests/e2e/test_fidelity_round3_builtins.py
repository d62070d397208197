"""Round-3 fixes: ``max``/``min`` with ``key=``/``default=`` over one list of tensors (the
element itself, or a fallback for a traced key), ``range``/``slice`` of a run-time count
returned as plain Python objects, and ``os.environ`` reads guarded."""
import os

import torch

from transpiler import to_graph

from fidelity_checks import converts, falls_back


def T(*v):
    return torch.tensor(v, dtype=torch.float32)


# ---------------------------------------------------------------- max/min with key=
def test_max_key_by_shape_converts_to_the_element():
    def f(xs):
        m = max(xs, key=lambda t: t.shape[0])
        return m * 2, m is xs[1]
    converts(f, ([T(1.0), T(1.0, 2.0), T(3.0)],), ([T(1.0, 2.0, 3.0), T(1.0, 2.0)],))


def test_min_key_len_default_on_empty_and_full():
    def f(xs, x):
        m = min(xs, key=len, default=None)
        return x if m is None else m + x
    converts(f, ([], T(1.0)), ([T(1.0, 2.0), T(5.0)], T(1.0)))


def test_max_key_tensor_value_falls_back_with_identity():
    def f(xs):
        m = max(xs, key=lambda t: float(t.sum()))
        return m, m is xs[0]
    falls_back(f, ([T(5.0), T(3.0)],), ([T(1.0), T(3.0)],))


def test_min_key_tuple_of_tensors_falls_back():
    def f(a, b):
        return min((a, b), key=lambda t: t.sum().item()) * 3
    falls_back(f, (T(1.0), T(3.0)), (T(5.0), T(3.0)))


def test_max_key_gradient_flows_to_the_chosen_element():
    def f(xs):
        return max(xs, key=lambda t: t.shape[0]).sum()
    for strict in (False, True):
        xs = [T(1.0).requires_grad_(), T(2.0, 3.0).requires_grad_()]
        to_graph(f, strict=strict)(xs).backward()
        assert xs[0].grad is None and torch.equal(xs[1].grad, torch.ones(2))


# ---------------------------------------------------------------- range/slice of a count
def _count(x):
    n = 0
    while x.sum() < 10:
        x = x * 2
        n += 1
    return n


def test_range_with_start_and_step_of_runtime_count_converts():
    def f(x):
        n = _count(x)
        return range(1, n + 1, 2), x
    converts(f, (T(1.0),), (T(20.0),), (T(2.0, 0.5),))


def test_slices_of_runtime_count_are_plain_ints():
    def f(x):
        n = 0
        while x.sum() < 10:
            x = x * 2
            n += 1
        return slice(n, None, 2), (slice(0, n),), x
    converts(f, (T(1.0),), (T(20.0),))
    g = to_graph(f, strict=True)
    assert type(g(T(1.0))[0].start) is int


# ---------------------------------------------------------------- os.environ
def _with_flag(value, g, x):
    old = os.environ.get("R3_FLAG")
    if value is None:
        os.environ.pop("R3_FLAG", None)
    else:
        os.environ["R3_FLAG"] = value
    try:
        return g(x)
    finally:
        if old is None:
            os.environ.pop("R3_FLAG", None)
        else:
            os.environ["R3_FLAG"] = old


def test_getenv_read_retraces_when_environment_changes():
    def f(x):
        scale = float(os.getenv("R3_FLAG", "1"))
        if x.sum() > 0:
            return x * scale
        return x
    for strict in (False, True):
        g = to_graph(f, strict=strict)
        for value, want in ((None, 1.0), ("3", 3.0), ("5", 5.0), (None, 1.0)):
            assert torch.equal(_with_flag(value, g, T(1.0)), T(want))


def test_environ_from_import_read_is_guarded():
    from os import environ

    def f(x):
        if environ.get("R3_FLAG") == "on" and x.sum() > 0:
            return x + 10
        return x
    for strict in (False, True):
        g = to_graph(f, strict=strict)
        for value, want in ((None, 1.0), ("on", 11.0), ("off", 1.0)):
            assert torch.equal(_with_flag(value, g, T(1.0)), T(want))
