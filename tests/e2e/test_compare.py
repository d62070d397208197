"""``transpiler.compare``: eager vs converted per output leaf and input gradient, which way
each ``cond`` went and how often each ``while`` looped, fallbacks, errors, tolerances.

Every expectation comes from an eager run: branch counts from a hand-instrumented copy of
the function, values from the function itself.
"""
import collections
import inspect
import json
import os
import random

import pytest
import torch
import torch.utils._pytree as pytree

from transpiler import compare, to_graph
from transpiler.debugging import compare as compare_mod
from transpiler.debugging.compare import CompareReport
from transpiler.debugging.differences import diff_leaf as _diff_leaf, diff_tree as _diff_tree
from acceptance_program import acceptance

T = torch.tensor


# --------------------------------------------------------------------------- the acceptance case
def acceptance_counts(x):
    """``acceptance`` by hand, counting its control flow eagerly."""
    iterations = then = other = 0
    while x.sum() > 1:
        iterations += 1
        if x.max() > 3:
            then += 1
            x = x - 2
        else:
            other += 1
            x = x * 0.5
    return iterations, then, other


def line_of(fn, text):
    lines, first = inspect.getsourcelines(fn)
    hits = [first + i for i, line in enumerate(lines) if line.strip().startswith(text)]
    assert len(hits) == 1, (text, hits)
    return hits[0]


FILE = acceptance.__code__.co_filename
WHILE_LINE = line_of(acceptance, "while x.sum() > 1:")
IF_LINE = line_of(acceptance, "if x.max() > 3:")

# input -> which way the loop goes (checked against the hand count below)
PATHS = {
    "then_only": ([7.0, -1.0], lambda it, then, other: then == 2 and other == 0),
    "else_only": ([1.5, 1.0], lambda it, then, other: then == 0 and other == 2),
    "both": ([5.0, 4.0], lambda it, then, other: then == 1 and other == 3),
    "zero_iterations": ([0.1, 0.2], lambda it, then, other: it == 0),
}


@pytest.mark.parametrize("path", list(PATHS))
def test_acceptance_agrees_and_counts_branches_like_eager(path):
    values, takes_path = PATHS[path]
    x = T(values)
    before = x.clone()
    iterations, then, other = acceptance_counts(x.clone())
    assert takes_path(iterations, then, other)
    assert iterations == then + other

    report = compare(acceptance, x)

    assert report.ok and not report.fell_back
    assert report.eager_error is None and report.graph_error is None
    assert [o.path for o in report.outputs] == ["out[0]", "out[1]"]
    out_x, out_n = report.outputs
    assert out_x.ok and out_x.eager_shape == out_x.graph_shape == (2,)
    assert out_x.eager_dtype == out_x.graph_dtype == "float32"
    assert out_x.max_abs == 0.0
    assert out_n.ok and out_n.eager_dtype == "int"          # eager: a Python int
    assert out_n.graph_dtype == "int"                       # and the converted call's

    assert sorted(b.kind for b in report.branches) == ["cond", "while"]
    loop = next(b for b in report.branches if b.kind == "while")
    cond = next(b for b in report.branches if b.kind == "cond")
    assert loop.location == (FILE, WHILE_LINE) and loop.source == "while x.sum() > 1:"
    assert cond.location == (FILE, IF_LINE) and cond.source == "if x.max() > 3:"
    assert loop.taken == {"iterations": [iterations]}
    assert cond.taken == {"then": then, "else": other}
    assert torch.equal(x, before)                             # the caller's input untouched


def test_acceptance_report_text_and_dict():
    report = compare(acceptance, T([5.0, 4.0]))
    text = str(report)
    assert text.splitlines()[0] == "compare acceptance: eager and converted agree"
    base = os.path.basename(FILE)
    for needle in ("out[0]", "out[1]", f"{base}:{WHILE_LINE}", f"{base}:{IF_LINE}",
                   "while x.sum() > 1:", "if x.max() > 3:", "4 iterations",
                   "then x1, else x3"):
        assert needle in text, (needle, text)
    as_dict = report.to_dict()
    assert as_dict["ok"] is True and as_dict["fell_back"] is False
    assert [o["path"] for o in as_dict["outputs"]] == ["out[0]", "out[1]"]
    assert {b["kind"]: b["taken"] for b in as_dict["branches"]} == \
        {"while": {"iterations": [4]}, "cond": {"then": 1, "else": 3}}
    json.dumps(as_dict)                                       # plain data


def test_nested_while_counts_each_run_of_the_inner_loop():
    def nested(x):
        n = x.sum() * 0
        total = x.sum() * 0
        while n < 3:
            m = x.sum() * 0
            while m < n:
                m = m + 1
                total = total + 1
            n = n + 1
        return n, total

    report = compare(nested, torch.ones(2))
    assert report.ok
    runs = {b.source: b.taken for b in report.branches}
    assert runs == {"while n < 3:": {"iterations": [3]},
                    "while m < n:": {"iterations": [0, 1, 2]}}


def test_compare_reuses_the_cached_graph_of_a_graph_function():
    g = to_graph(acceptance)
    g(T([5.0, 4.0]))
    entries = dict(g._entries)
    report = compare(g, T([1.5, 1.0]))                       # same signature
    assert report.ok and len(g._history) == 1 and g._entries == entries


# --------------------------------------------------------------------------- gradients
def scaled(x, w):
    while x.abs().sum() < 10:
        if x.sum() > 0:
            x = x * w
        else:
            x = x + w
    return x.sum(), x


def test_input_gradients_are_compared():
    x = T([1.0, 2.0], requires_grad=True)
    w = T([1.5, 1.5], requires_grad=True)
    report = compare(scaled, x, w)
    assert report.ok
    assert [o.path for o in report.outputs] == ["out[0]", "out[1]", "grad x", "grad w"]
    for o in report.outputs[2:]:
        assert o.ok and o.eager_shape == o.graph_shape == (2,) and o.max_abs == 0.0
    assert x.grad is None and w.grad is None                 # copies were differentiated


def test_only_inputs_that_require_grad_get_a_gradient_row():
    report = compare(scaled, T([1.0, 2.0]), T([1.5, 1.5], requires_grad=True))
    assert [o.path for o in report.outputs] == ["out[0]", "out[1]", "grad w"]
    assert report.ok


def _patch_converted(monkeypatch, change):
    """Make the converted run of ``compare`` pass its floating outputs through ``change``."""
    real = compare_mod.lower

    def lower(*args, **kwargs):
        exe = real(*args, **kwargs)

        def run(*flat):
            return pytree.tree_map(
                lambda v: change(v) if isinstance(v, torch.Tensor) and v.is_floating_point()
                else v, exe(*flat))
        return run
    monkeypatch.setattr(compare_mod, "lower", lower)


def test_a_wrong_gradient_with_right_values_is_detected(monkeypatch):
    _patch_converted(monkeypatch, lambda t: t.detach() + (t - t.detach()) * 2)
    x = T([1.0, 2.0], requires_grad=True)
    w = T([1.5, 1.5], requires_grad=True)
    report = compare(scaled, x, w)
    by_path = {o.path: o for o in report.outputs}
    assert by_path["out[0]"].ok and by_path["out[1]"].ok
    assert not by_path["grad x"].ok and not by_path["grad w"].ok
    assert by_path["grad x"].max_abs > 0 and "beyond tolerance" in by_path["grad x"].note
    assert not report.ok and "DIFFER" in str(report)


def test_a_wrong_value_is_detected_and_tolerances_can_be_widened(monkeypatch):
    _patch_converted(monkeypatch, lambda t: t * (1 + 1e-3))
    x = T([5.0, 4.0])
    exp_x, _ = acceptance(x.clone())
    report = compare(acceptance, x)
    out_x, out_n = report.outputs
    assert not out_x.ok and out_n.ok and not report.ok
    assert out_x.max_abs == pytest.approx(float((exp_x * 1e-3).abs().max()), rel=1e-3)
    assert out_x.max_rel == pytest.approx(1e-3, rel=1e-3)
    assert "MISMATCH" in str(report)
    assert compare(acceptance, x, rtol=1e-2).ok
    assert compare(acceptance, x, atol=1.0).ok
    assert not compare(acceptance, x, rtol=1e-4).ok


def test_only_the_converted_side_raising_is_a_difference(monkeypatch):
    def boom(*flat):
        raise RuntimeError("boom")
    monkeypatch.setattr(compare_mod, "lower", lambda *a, **k: boom)
    report = compare(acceptance, T([5.0, 4.0]))
    assert report.eager_error is None and report.graph_error == "RuntimeError: boom"
    assert not report.ok and report.outputs == []
    assert "converted raised: RuntimeError: boom" in str(report)


# --------------------------------------------------------------------------- errors, fallbacks
def matmul_self(x):
    return x @ x


def test_both_sides_raising_the_same_exception_agree():
    report = compare(matmul_self, torch.ones(2, 3))
    assert report.eager_error.startswith("RuntimeError: ")
    assert report.graph_error.startswith("RuntimeError: ")
    assert report.ok and report.outputs == []
    text = str(report)
    assert "eager raised:     RuntimeError" in text and "converted raised: RuntimeError" in text


def test_missing_argument_raises_alike_on_both_sides():
    report = compare(scaled, torch.ones(2))
    assert report.eager_error.startswith("TypeError: ")
    assert report.graph_error.startswith("TypeError: ")


@pytest.mark.parametrize("eager, graph, ok", [
    ("ValueError: a", "ValueError: b", True),
    ("ValueError: a", None, False),
    (None, "ValueError: a", False),
    ("ValueError: a", "TypeError: a", False),
])
def test_ok_of_hand_made_reports_with_errors(eager, graph, ok):
    assert CompareReport("f", eager_error=eager, graph_error=graph).ok is ok


def test_ok_of_hand_made_reports_with_outputs():
    from transpiler.debugging.compare import OutputDiff
    assert CompareReport("f", outputs=[OutputDiff("out"), OutputDiff("grad x")]).ok
    assert not CompareReport("f", outputs=[OutputDiff("out"), OutputDiff("x", ok=False)]).ok


def noisy(x):
    return x * random.random()


def test_a_fallback_that_really_differs_is_reported_with_its_line():
    report = compare(noisy, torch.ones(3))
    assert report.fell_back
    assert "random" in report.fallback_reason.lower()
    line = line_of(noisy, "return x * random.random()")
    assert report.fallback_location == (noisy.__code__.co_filename, line)
    assert not report.ok and not report.outputs[0].ok      # two different random numbers
    assert report.branches == []
    assert f"fell back to eager: {noisy.__code__.co_filename}:{line}: " in str(report)


def test_fallback_location_of_the_same_function_in_two_files(tmp_path):
    import importlib.util
    text = "import random\n\ndef noisy(x):\n    return x * random.random()\n"
    locations = {}
    for name in ("first", "second"):
        (tmp_path / name).mkdir()
        path = tmp_path / name / "same.py"
        path.write_text(text)
        spec = importlib.util.spec_from_file_location(f"same_{name}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        locations[str(path)] = compare(module.noisy, torch.ones(2)).fallback_location
    assert locations == {path: (path, 4) for path in locations}


COUNTER = []


def appends_global(x):
    COUNTER.append(x * 1)                   # (appended numbers and text are staged: a
    # tensor kept across calls is not)
    return x + len(COUNTER)


def test_a_fallback_on_global_mutation_is_reported():
    del COUNTER[:]
    report = compare(appends_global, torch.ones(2))
    assert report.fell_back and "COUNTER" in report.fallback_reason
    filename, line = report.fallback_location
    first = appends_global.__code__.co_firstlineno
    assert filename == appends_global.__code__.co_filename and first <= line <= first + 2
    assert not report.ok                 # each side appended once: len differs by one
    assert report.outputs[0].max_abs == 1.0


def test_inputs_mutated_in_place_do_not_leak_between_the_runs():
    def bump(x, xs):
        x.add_(1)
        xs.append(x * 2)
        return x * 2, len(xs)

    x, xs = torch.ones(2), [torch.zeros(2)]
    report = compare(bump, x, xs)
    assert report.ok, str(report)      # a leak would give 3 * 2 and a longer list
    assert x.tolist() == [1.0, 1.0] and len(xs) == 1


# --------------------------------------------------------------------------- the difference helpers
NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("eager, graph, ok, note", [
    (T([1.0, 2.0]), T([1.0, 2.0]), True, ""),
    (T([1.0, 2.0]), T([1.0, 2.0], dtype=torch.float64), False, "dtype differs"),
    (T([1.0, 2.0]), T([1.0, 2.0, 3.0]), False, "shape differs"),
    (T(3.0), T([3.0]), False, "shape differs"),
    (T([1.0, NAN]), T([1.0, NAN]), True, ""),
    (T([1.0, NAN]), T([NAN, 1.0]), False, "beyond tolerance"),
    (T([1.0, NAN]), T([1.0, 2.0]), False, "beyond tolerance"),
    (T([INF, -INF]), T([INF, -INF]), True, ""),
    (T([INF]), T([-INF]), False, "beyond tolerance"),
    (T([INF]), T([1e30]), False, "beyond tolerance"),
    (T([-0.0]), T([0.0]), True, ""),
    (T([1, 2]), T([1, 2]), True, ""),
    (T([1, 2]), T([1, 3]), False, "beyond tolerance"),
    (T([0], dtype=torch.uint8), T([255], dtype=torch.uint8), False, "beyond tolerance"),
    (3, T(3), True, "0-d tensor"),
    (T(3), 3, True, "0-d tensor"),
    (3, T(3, dtype=torch.int32), True, "0-d tensor"),
    (3, T(4), False, ""),
    (3.5, T(3.5, dtype=torch.float64), True, "0-d tensor"),
    (True, T(True), True, "0-d tensor"),
    (3.0, T(3), False, "a tensor on one side"),
    (3, T(3.0), False, "a tensor on one side"),
    (True, T(1), False, "a tensor on one side"),
    (1, T(True), False, "a tensor on one side"),
    (3, T([3]), False, "a tensor on one side"),
    (T([1, 2]), [1, 2], False, "a tensor on one side"),
    (1.0, 1, False, "eager 1.0, converted 1"),
    (0.1 + 0.2, 0.3, False, "eager"),
    (NAN, NAN, True, ""),
    ("a", "a", True, ""),
    (None, None, True, ""),
    (T([]), T([]), True, ""),
    (T([]), T([], dtype=torch.float64), False, "dtype differs"),
    (torch.zeros(0, 3), torch.zeros(3, 0), False, "shape differs"),
    (T([True, False]), T([True, False]), True, ""),
    (T([True, False]), T([True, True]), False, "beyond tolerance"),
    (T([1 + 1j]), T([1 + 1j]), True, ""),
    (T([1 + 1j]), T([1 + 2j]), False, "beyond tolerance"),
], ids=lambda v: repr(v)[:30] if not isinstance(v, (bool, str)) else None)
def test_diff_leaf(eager, graph, ok, note):
    diff = _diff_leaf("out", eager, graph, None, None)
    assert diff.ok is ok
    if note:
        assert note in diff.note
    elif ok:
        assert diff.note == ""
    if isinstance(eager, torch.Tensor) and isinstance(graph, torch.Tensor):
        assert diff.eager_shape == tuple(eager.shape) and diff.graph_shape == tuple(graph.shape)


def test_diff_leaf_reports_names_and_magnitudes():
    diff = _diff_leaf("out[0]", T([1.0, 2.0, 4.0]), T([1.0, 2.5, 4.0]), None, None)
    assert (diff.path, diff.eager_dtype, diff.graph_dtype) == ("out[0]", "float32", "float32")
    assert diff.max_abs == 0.5 and diff.max_rel == 0.25 and not diff.ok
    ints = _diff_leaf("out", T([1, 5]), T([1, 2]), None, None)
    assert ints.max_abs == 3.0 and not ints.ok
    nan = _diff_leaf("out", T([1.0, NAN]), T([1.0, 2.0]), None, None)
    assert nan.max_abs == INF


def test_python_number_mismatch_note_says_values_differ():
    diff = _diff_leaf("out", 3, T(4), None, None)
    assert not diff.ok and diff.max_abs == 1.0
    assert "differ" in diff.note


def test_infinite_differences_are_reported_as_infinite():
    diff = _diff_leaf("out", T([INF]), T([-INF]), None, None)
    assert not diff.ok
    assert diff.max_abs == INF and diff.max_rel == INF


def test_python_int_out_of_the_tensor_dtype_range_is_a_mismatch():
    diff = _diff_leaf("out", 2 ** 40, T(5, dtype=torch.int32), None, None)
    assert not diff.ok


@pytest.mark.parametrize("dtype, rel, ok", [
    (torch.float32, 1e-6, True),
    (torch.float64, 1e-6, False),
    (torch.float64, 1e-8, True),
    (torch.float16, 5e-4, True),
    (torch.float16, 1e-2, False),
])
def test_tolerances_are_per_dtype(dtype, rel, ok):
    a = torch.tensor([1.0, 2.0, 3.0], dtype=dtype)
    b = (a.double() * (1 + rel)).to(dtype)
    assert _diff_leaf("out", a, b, None, None).ok is ok


def test_explicit_tolerances_override_the_dtype_defaults():
    a, b = T([1.0, 2.0]), T([1.0, 2.1])
    assert not _diff_leaf("out", a, b, None, None).ok
    assert _diff_leaf("out", a, b, 0.1, None).ok
    assert _diff_leaf("out", a, b, None, 0.2).ok
    assert not _diff_leaf("out", a, b, 0.01, 0.01).ok


Pair = collections.namedtuple("Pair", "lo hi")


@pytest.mark.parametrize("eager, graph, paths", [
    ((T(1.0), [T(2), 3]), (T(1.0), [T(2), 3]), ["out[0]", "out[1][0]", "out[1][1]"]),
    ({"a": T(1.0), "b": T([2.0])}, {"a": T(1.0), "b": T([2.0])}, ["out['a']", "out['b']"]),
    (Pair(T(1.0), T(2.0)), Pair(T(1.0), T(2.0)), ["out.lo", "out.hi"]),
    ([], [], []),
])
def test_diff_tree_paths(eager, graph, paths):
    diffs = _diff_tree(eager, graph, "out", None, None)
    assert [d.path for d in diffs] == paths and all(d.ok for d in diffs)


@pytest.mark.parametrize("eager, graph", [
    ((T(1.0), T(2.0)), [T(1.0), T(2.0)]),                       # tuple vs list
    ({"a": T(1.0), "b": T(2.0)}, {"a": T(1.0), "c": T(2.0)}),   # keys
    (Pair(T(1.0), T(2.0)), (T(1.0), T(2.0))),                   # namedtuple vs tuple
    ((T(1.0),), (T(1.0), T(2.0))),                              # length
    (T(1.0), None),
])
def test_diff_tree_structure_differences(eager, graph):
    diffs = _diff_tree(eager, graph, "out", None, None)
    assert len(diffs) == 1 and not diffs[0].ok


def test_diff_tree_reports_the_leaf_that_differs():
    diffs = _diff_tree(Pair(T(1.0), T(2.0)), Pair(T(1.0), T(3.0)), "out", None, None)
    assert [(d.path, d.ok) for d in diffs] == [("out.lo", True), ("out.hi", False)]


def test_structure_difference_note_is_one_line():
    diff, = _diff_tree((T(1.0), T(2.0)), [T(1.0), T(2.0)], "out", None, None)
    assert "structure differs" in diff.note and "\n" not in diff.note


def test_container_outputs_through_compare():
    def containers(x):
        return Pair(x.min(), x.max()), [x * 2, {"s": x.sum()}], (x > 0,)

    report = compare(containers, T([1.0, -2.0, 3.0]))
    assert report.ok, str(report)
    assert [o.path for o in report.outputs] == \
        ["out[0].lo", "out[0].hi", "out[1][0]", "out[1][1]['s']", "out[2][0]"]
    assert report.outputs[-1].eager_dtype == "bool"
    for o in report.outputs:
        assert o.path in str(report)


# --------------------------------------------------------------------------- calling conventions
def test_keyword_arguments_reach_both_sides():
    def affine(x, *, scale=1.0, shift=None):
        if scale > 2:
            x = x * scale
        return x + shift

    x = T([1.0, 2.0], requires_grad=True)
    shift = T([0.5, 0.5], requires_grad=True)
    report = compare(affine, x, scale=3.0, shift=shift)
    assert report.eager_error is None and report.graph_error is None
    assert report.ok and [o.path for o in report.outputs] == ["out", "grad x", "grad shift"]


class Gate(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)

    def forward(self, x):
        y = self.lin(x)
        if y.sum() > 0:
            y = torch.relu(y)
        else:
            y = -y
        return y


def test_module_as_the_function():
    torch.manual_seed(0)
    report = compare(Gate(), torch.randn(4, 3, requires_grad=True))
    assert report.ok
    assert [o.path for o in report.outputs] == ["out", "grad x"]
    assert [b.kind for b in report.branches] == ["cond"]
    assert sum(report.branches[0].taken.values()) == 1


def test_module_as_an_argument():
    torch.manual_seed(0)

    def apply(model, x):
        return model(x).sum()

    report = compare(apply, Gate(), torch.randn(4, 3))
    assert report.ok and [o.path for o in report.outputs] == ["out"]


class RunningCenter(torch.nn.Module):
    """Subtracts a running mean it updates in place (like batch norm's statistics)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("mean", torch.zeros(3))

    def forward(self, x):
        out = x - self.mean
        with torch.no_grad():
            self.mean.mul_(0.5).add_(0.5 * x.mean(0))
        return out


def test_converted_running_center_matches_eager():
    eager, converted = RunningCenter(), RunningCenter()
    g = to_graph(converted)
    for _ in range(3):
        x = torch.randn(2, 3)
        assert torch.equal(g(x), eager(x))
    assert torch.allclose(converted.mean, eager.mean)


def test_module_state_does_not_leak_between_the_runs():
    model = RunningCenter()
    report = compare(model, torch.ones(2, 3))
    assert report.ok, str(report)
    assert torch.equal(model.mean, torch.zeros(3))


def test_timing_fills_both_times():
    report = compare(acceptance, T([5.0, 4.0]), timing=True)
    assert isinstance(report.eager_seconds, float) and report.eager_seconds > 0
    assert isinstance(report.graph_seconds, float) and report.graph_seconds > 0
    assert "time per call: eager " in str(report)
    untimed = compare(acceptance, T([5.0, 4.0]))
    assert untimed.eager_seconds is None and untimed.graph_seconds is None
    assert "time per call" not in str(untimed)
