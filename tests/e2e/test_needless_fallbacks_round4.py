"""Needless fallbacks of the fresh-eyes rounds (h93), differential: eager vs ``to_graph``
(default and strict) over several calls, comparing results, exceptions (type, text, args),
Python state with exact types, gradients and trace counts; and the neighbours of each
case (in a loop, in a method, with a tensor and with a Python value), plus the cases that
must still fall back, naming the user's line.

Fixed here: a user's forward hooks on torch's own modules run converted while the forward
is traced (``runtime/operators/traced_hooks.py``); a hook's dict given a Python number at a
new key (``runtime/module_writes.py``); lists appended text, None and tuples
(``runtime/appended_lists.py``); ``math.isclose``/``modf``/``frexp`` of ``.item()`` values
(``runtime/operators/math_calls.py``); ``raise E(a, b)`` and user constructors under a
tensor condition, ``try/finally: pass`` (``runtime/operators/staged_raises.py``,
``transpiler/converters/staged_raises.py``); an item read of an empty list argument
short-circuited away (``runtime/list_reads.py``); a helper's closure list
(``runtime/carried_numbers.py``).
"""
from __future__ import annotations

import math
import warnings

import pytest
import torch
import torch.nn as nn

from transpiler import ConversionError, FallbackWarning, to_graph

THIS_FILE = __file__.rsplit("/", 1)[-1]


# ----------------------------------------------------------------------------- harness
def snap(v):
    if isinstance(v, torch.Tensor):
        return ("T", v.detach().clone(), v.requires_grad)
    if isinstance(v, dict):
        return {k: snap(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return type(v)(snap(x) for x in v)
    return v


def same(a, b, tol=0.0):
    """Equal with exact Python types; tensors by dtype, shape and values (``tol``:
    relative, for a model's float outputs); floats bit for bit (sign of zero, nan)."""
    assert type(a) is type(b), (a, b)
    if isinstance(a, dict):
        assert list(a) == list(b), (a, b)
        for k in a:
            same(a[k], b[k], tol)
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), (a, b)
        if a and a[0] == "T" and len(a) == 3 and isinstance(a[1], torch.Tensor):
            assert a[1].dtype == b[1].dtype and a[1].shape == b[1].shape and a[2] == b[2], (a, b)
            if tol and a[1].is_floating_point():
                assert torch.allclose(a[1], b[1], rtol=tol, atol=tol, equal_nan=True), (a, b)
            else:
                assert torch.equal(a[1], b[1]), (a, b)
            return
        for x, y in zip(a, b):
            same(x, y, tol)
    elif isinstance(a, float):
        if tol and math.isfinite(a):
            assert math.isclose(a, b, rel_tol=tol, abs_tol=tol), (a, b)
        else:
            assert (math.isnan(a) and math.isnan(b)) or \
                (a == b and math.copysign(1, a) == math.copysign(1, b)), (a, b)
    else:
        assert a == b, (a, b)


def run(make, mode):
    """``make()`` -> (fn, calls, state): ``fn`` wrapped for ``mode``, called with each
    of ``calls``; a record of each outcome and ``state()`` after it; the fallbacks; the
    wrapped function."""
    fn, calls, state = make()
    g = fn if mode == "eager" else to_graph(fn, strict=mode == "strict")
    records = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for args in calls:
            try:
                out = ("ok", snap(g(*args)))
            except ConversionError:
                raise
            except Exception as e:  # noqa: BLE001 - eager's errors are compared
                out = ("exc", type(e).__name__, str(e), snap(e.args),
                       snap(_own_attributes(e)) if type(e).__module__ == __name__ else None)
            records.append((out, snap(state())))
    return records, [str(w.message) for w in caught if issubclass(w.category, FallbackWarning)], g


def _own_attributes(e) -> dict:
    """What the user's error class set on the error (not the note and location a graph's
    error carries as every staged raise's does: ``executor.located``)."""
    return {k: v for k, v in vars(e).items()
            if k not in ("__notes__", "location") and not k.startswith("_tograph")}


def converts(make, traces=2, tol=0.0):
    """Default and strict: no fallback, eager's records, at most ``traces`` traces."""
    torch.manual_seed(0)
    want, _, _ = run(make, "eager")
    for mode in ("default", "strict"):
        torch.manual_seed(0)
        got, fell, g = run(make, mode)
        assert not fell, fell
        same(got, want, tol)
        assert g.cache_info().traces <= traces, g.cache_info()
    return want


def falls_back(make, tag, tol=0.0):
    """A FallbackWarning naming this file's line ending ``# <tag>``, eager's records;
    strict: ConversionError."""
    with open(__file__) as f:
        lines = [i + 1 for i, line in enumerate(f.read().splitlines())
                 if line.endswith(f"# {tag}")]
    assert len(lines) == 1, lines
    torch.manual_seed(0)
    want, _, _ = run(make, "eager")
    torch.manual_seed(0)
    got, fell, _ = run(make, "default")
    assert fell and f"{THIS_FILE}:{lines[0]}:" in fell[0], (fell, lines)
    same(got, want, tol)
    with pytest.raises(ConversionError):
        torch.manual_seed(0)
        run(make, "strict")


def _xs(n=5, shape=(2, 3), seed=1):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(*shape, generator=g) * (1 if k % 2 else -1),) for k in range(n)]


def _grads(model):
    return lambda: [p.grad for p in model.parameters()]


# -------------------------------------------------------------- hooks on torch modules
def _hooked(hook_of, state, model=None, loss=True, n=5):
    """A Linear+Tanh (or ``model``) whose first module carries ``hook_of(state)``; the step
    returns the loss after backward (gradients compared) or the output."""
    def make():
        torch.manual_seed(0)
        m = model() if model else nn.Sequential(nn.Linear(3, 3), nn.Tanh())
        st = {k: (list(v) if isinstance(v, list) else v) for k, v in state.items()}
        first = next(iter(m.modules())) if not isinstance(m, nn.Sequential) else m[0]
        first.register_forward_hook(hook_of(st))

        def step(x):
            out = m(x).sum()
            if loss:
                m.zero_grad()
                out.backward()
            return out.detach()
        return step, _xs(n), lambda: (dict(st), [p.grad for p in m.parameters()])
    return make


def _counter_get(st):
    def hook(mod, inp, out):
        st["fc"] = st.get("fc", 0) + 1
    return hook


def _counter_get_float_item(st):
    def hook(mod, inp, out):
        st["sum"] = st.get("sum", 0.0) + out.abs().sum().item()
    return hook


def _round_stat(st):
    def hook(mod, inp, out):
        st["std"] = round(out.std().item(), 3)
        st["n"] = round(out.shape[0] * 1.5)
    return hook


def _tensor_if(st):
    def hook(mod, inp, out):
        if out.mean() > 0:
            st["pos"] += 1
        else:
            st["neg"] += 1
    return hook


def _tensor_if_changes_output(st):
    def hook(mod, inp, out):
        if out.sum() > 0:
            return out * 2
        return out - 1
    return hook


def test_hook_counter_with_get_new_key():
    want = converts(_hooked(_counter_get, {}), tol=1e-6)
    assert [r[1][0] for r in want] == [{"fc": n} for n in range(1, 6)]


def test_hook_counter_with_get_of_an_item_value():
    want = converts(_hooked(_counter_get_float_item, {}), tol=1e-6)
    assert type(want[-1][1][0]["sum"]) is float


def test_hook_round_of_item():
    want = converts(_hooked(_round_stat, {}), tol=1e-6)
    assert type(want[0][1][0]["std"]) is float and type(want[0][1][0]["n"]) is int


def test_hook_tensor_if_on_a_sequential_child():
    def make():
        torch.manual_seed(0)
        m = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
        st = {"pos": 0, "neg": 0}
        m[1].register_forward_hook(_tensor_if(st))

        def step(x):
            return m(x)
        return step, _xs(6, (2, 4)), lambda: dict(st)
    want = converts(make, tol=1e-6)
    assert sum(want[-1][1].values()) == 6 and min(want[-1][1].values()) > 0


def test_hook_tensor_if_changing_the_output_with_gradients():
    converts(_hooked(_tensor_if_changes_output, {}), tol=1e-6)


def test_hook_in_a_python_loop_over_layers():
    """The counter hook on each Linear of a stack the step runs in a Python loop."""
    def make():
        torch.manual_seed(0)
        layers = nn.ModuleList(nn.Linear(3, 3) for _ in range(3))
        st = {}
        for k, layer in enumerate(layers):
            layer.register_forward_hook(
                lambda mod, i, o, k=f"l{k}": st.__setitem__(k, st.get(k, 0) + 1))

        def step(x):
            for layer in layers:
                x = torch.relu(layer(x))
            return x.sum()
        return step, _xs(4), lambda: dict(st)
    want = converts(make, tol=1e-6)
    assert want[-1][1] == {"l0": 4, "l1": 4, "l2": 4}


def test_bound_method_hook_changing_its_object_falls_back():
    """A bound-method hook changing its own object's dict (README: refused), on a torch
    module inside a user module's forward."""
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 2)
            self.seen = {}
            self.fc.register_forward_hook(self.count)

        def count(self, mod, i, o):
            self.seen["n"] = self.seen.get("n", 0) + 1  # fb:method

        def forward(self, x):
            return self.fc(x).relu()

    def make():
        torch.manual_seed(0)
        net = Net()
        return net, _xs(4), lambda: dict(net.seen)
    falls_back(make, "fb:method", tol=1e-6)


def test_global_hook_appends_type_names_and_tuples():
    def make():
        torch.manual_seed(0)
        m = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4))
        log = {"names": [], "rows": []}

        def ghook(mod, inp, out):
            log["names"].append(type(mod).__name__)
            log["rows"].append((type(mod).__name__, tuple(out.shape), None,
                                round(out.std().item(), 3)))
        handle = nn.modules.module.register_module_forward_hook(ghook)

        def step(x):
            try:
                return m(x).sum()
            finally:
                pass

        def state():
            return {k: list(v) for k, v in log.items()}
        calls = _xs(4)
        step.handle = handle
        return step, calls, state
    handles = []
    orig = nn.modules.module.register_module_forward_hook

    def register(hook):
        handles.append(orig(hook))
        return handles[-1]
    nn.modules.module.register_module_forward_hook = register
    try:
        want = converts(make, tol=1e-5)
    finally:
        nn.modules.module.register_module_forward_hook = orig
        for h in handles:
            h.remove()
    assert want[-1][1]["names"] == ["Linear", "LayerNorm", "Sequential"] * 4
    assert type(want[-1][1]["rows"][0][3]) is float


# ------------------------------------------------------------------ appended values
def test_function_appends_text_none_and_tuples():
    def make():
        log = []

        def step(x):
            log.append("step")
            log.append(None)
            log.append(("loss", x.sum().item(), (x.shape[0], "rows"), True))
            return x * 2
        return step, _xs(4), lambda: list(log)
    want = converts(make)
    assert want[-1][1][:3] == ["step", None, want[-1][1][2]] and type(want[-1][1][2][1]) is float


def test_append_in_a_method_of_a_plain_object():
    class Logger:
        def __init__(self):
            self.events = []

        def step(self, x):
            self.events.append(("seen", x.shape[1]))
            return x.sum()

    def make():
        lg = Logger()
        return lg.step, _xs(4), lambda: list(lg.events)
    converts(make)


def test_reading_a_list_holding_text_falls_back():
    def make():
        log = ["start"]

        def step(x):
            log.append("step")
            return x * len(log[0])  # fb:text
        return step, _xs(3), lambda: list(log)
    falls_back(make, "fb:text")


def test_appending_a_tensor_still_falls_back():
    def make():
        log = []

        def step(x):
            log.append(("t", x.sum()))  # fb:tensor
            return x * 2
        return step, _xs(3), lambda: len(log)
    falls_back(make, "fb:tensor")


def test_helper_closure_counter_and_list():
    def make():
        calls = {"n": 0, "vals": []}

        def log(v):
            calls["n"] += 1
            if calls["n"] % 2 == 1:
                calls["vals"].append(v)
        def step(x):
            log(x.sum().item())
            return x * 2
        return step, _xs(5), lambda: {"n": calls["n"], "vals": list(calls["vals"])}
    want = converts(make)
    assert want[-1][1]["n"] == 5 and len(want[-1][1]["vals"]) == 3


def test_item_read_of_an_empty_list_argument_short_circuited():
    def make():
        losses = []

        def step(x, losses):
            loss = x.sum().item()
            worse = len(losses) > 0 and loss > losses[-1]
            losses.append(loss)
            return worse
        return step, [(x, losses) for (x,) in _xs(5)], lambda: list(losses)
    converts(make)


def test_item_read_of_an_empty_list_raises_index_error():
    def make():
        def step(x, values):
            return values[-1] + x.sum().item()
        return step, [(torch.ones(2), []), (torch.ones(2), [1.5]), (torch.ones(2), [])], \
            lambda: None
    want = converts(make)
    assert want[0][0][:2] == ("exc", "IndexError") and want[2][0][:2] == ("exc", "IndexError")


# ----------------------------------------------------------------------- math of items
def test_math_isclose_modf_frexp_of_items():
    def make():
        def step(x, y):
            a, b = x.item(), y.item()
            return (math.isclose(a, b, rel_tol=1e-3), math.isclose(a, b),
                    math.isclose(a, 1.0, abs_tol=0.5), math.modf(a), math.frexp(b),
                    math.modf(2.5))
        pairs = ((5.5, 2.0), (-5.25, -5.25), (1.0, 1.0005), (-0.0, 0.0), (math.inf, 3.0),
                 (-7.75, 0.0))
        return step, [(torch.tensor(a, dtype=torch.float64), torch.tensor(b, dtype=torch.float64))
                      for a, b in pairs], lambda: None
    want = converts(make)
    assert type(want[0][0][1][0]) is bool and type(want[0][0][1][4][1]) is int


def test_math_isclose_in_a_tensor_loop_condition():
    def make():
        def step(x):
            n = 0
            v = x.item()
            while not math.isclose(v, 0.0, abs_tol=1e-3):
                v = v / 2
                n += 1
            return n, v
        return step, [(torch.tensor(a, dtype=torch.float64),) for a in (1.0, 0.5, 3.0, 0.0)], \
            lambda: None
    converts(make, traces=3)


def test_math_isclose_of_a_tensor_of_several_values_falls_back():
    def make():
        def step(x):
            return math.isclose(x, 1.0)  # fb:several
        return step, [(torch.ones(2),), (torch.ones(1),)], lambda: None
    falls_back(make, "fb:several")


# --------------------------------------------------------------------------- raises
class StepLimit(Exception):
    pass


class BudgetExceeded(Exception):
    made = 0

    def __init__(self, spent, limit):
        super().__init__(f"spent {spent:.2f} of {limit}")
        self.spent, self.limit = spent, limit


def test_custom_class_with_several_plain_arguments():
    def make():
        def step(c, lim):
            s = c.cumsum(0)
            if s[-1] > lim:
                raise StepLimit("over the limit", lim, None)
            return s
        return step, [(torch.tensor(a), 5) for a in ([1.0, 2.0], [3.0, 4.0], [0.5, 0.5],
                                                     [9.0, 0.0])], lambda: None
    want = converts(make)
    assert want[1][0][:2] == ("exc", "StepLimit")


def test_custom_constructor_with_item_values():
    def make():
        def step(c, lim):
            s = c.cumsum(0)
            if s[-1] > lim:
                raise BudgetExceeded(s[-1].item(), lim)
            return s * 2
        return step, [(torch.tensor(a), lim) for a, lim in (([1.0, 2.0], 5), ([3.0, 4.25], 5),
                                                             ([0.5, 0.5], 1), ([9.0, 0.0], 2))], \
            lambda: None
    want = converts(make, traces=4)
    assert want[1][0][4] == {"spent": 7.25, "limit": 5}


def test_raise_with_an_int_item_in_a_loop_and_a_method():
    class Checker:
        def __init__(self):
            self.limit = 3

        def check(self, x):
            for i in range(x.shape[0]):
                if x[i] > self.limit:
                    raise StepLimit(i, x[i].int().item())
            return x.sum()

    def make():
        c = Checker()
        return c.check, [(torch.tensor(a),) for a in ([1, 2, 3], [1, 5, 2], [4, 0, 0],
                                                      [0, 0, 0])], lambda: c.limit
    want = converts(make)
    assert want[1][0][3] == (1, 5) and type(want[1][0][3][1]) is int


def test_raise_under_try_finally_pass():
    def make():
        def step(x):
            try:
                if x.max() > 10:
                    raise OverflowError("too large")
                return x * 2
            finally:
                pass
        return step, [(torch.tensor(a),) for a in ([1.0, 2.0], [20.0, 1.0], [3.0, 4.0],
                                                   [11.0, 0.0])], lambda: None
    converts(make)


def test_raise_with_a_tensor_argument_falls_back():
    def make():
        def step(x):
            if x.sum() > 0:
                raise StepLimit("bad", x)  # fb:tensor_arg
            return x
        return step, [(-torch.ones(2),), (torch.ones(2),)], lambda: None
    falls_back(make, "fb:tensor_arg")


def test_raise_under_try_finally_with_an_effect_falls_back():
    def make():
        state = {"calls": 0}

        def step(x):
            try:
                if x.max() > 10:
                    raise OverflowError("too large")
                return x * 2
            finally:
                state["calls"] += 1
        return step, [(torch.tensor(a),) for a in ([1.0, 2.0], [20.0, 1.0], [3.0, 4.0])], \
            lambda: dict(state)
    torch.manual_seed(0)
    want, _, _ = run(make, "eager")
    got, fell, _ = run(make, "default")
    same(got, want)
    assert fell


# ------------------------------------------------------- sizes that depend on data
def test_repeat_interleave_with_tensor_counts():
    """Its length is ``counts.sum()``: shape inference under fake tensors
    (``runtime/shape_inference.py``); function, method and ``dim`` forms, gradients."""
    def make():
        w = torch.randn(3, 2, requires_grad=True)

        def step(v, c):
            out = torch.repeat_interleave(v * w[: v.shape[0], 0], c)
            rows = w.repeat_interleave(c[:3].clamp(min=0), dim=0)
            total = out.sum() + rows.sum()
            w.grad = None
            total.backward()
            return out.detach(), rows.detach(), torch.repeat_interleave(c)
        calls = [(torch.tensor([1.0, 2.0]), torch.tensor([2, 1])),
                 (torch.tensor([1.0, 2.0, 3.0]), torch.tensor([0, 0, 4])),
                 (torch.tensor([4.0, 5.0]), torch.tensor([3, 0]))]
        return step, calls, lambda: w.grad
    converts(make, traces=3)


def test_run_length_round_trip_in_a_python_loop():
    def make():
        def step(xs):
            out = []
            for x in xs:
                vals, counts = torch.unique_consecutive(x, return_counts=True)
                assert torch.equal(torch.repeat_interleave(vals, counts), x)
                out.append((vals, counts))
            return out
        return step, [([torch.tensor([1, 1, 2, 3, 3]), torch.tensor([7])],),
                      ([torch.tensor([4, 4, 4]), torch.tensor([1, 2])],)], lambda: None
    converts(make, traces=3)
