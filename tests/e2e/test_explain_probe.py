"""``f.explain(*args)`` (per source line: cond/while node, Python if/loop, fallback, not
reached; retrace history) and ``f.probe(*args, names=[...])`` (variables by name, per
iteration inside loops), checked against values and counts collected by eager runs."""
import inspect
import random
import warnings

import pytest
import torch

from transpiler import FallbackWarning, to_graph
from acceptance_program import acceptance

T = torch.tensor


def line_of(fn, text):
    lines, first = inspect.getsourcelines(fn)
    hits = [first + i for i, line in enumerate(lines) if line.strip().startswith(text)]
    assert len(hits) == 1, (text, hits)
    return hits[0]


def kinds(explanation, fn, text):
    """The event kinds ``explanation`` lists on the line of ``fn`` starting with ``text``."""
    line = line_of(fn, text)
    return [e.what for e in explanation.at(line)]


# =========================================================================== explain
def test_explain_names_the_while_and_the_if_of_the_acceptance_function():
    g = to_graph(acceptance)
    e = g.explain(T([5.0, 4.0]))
    assert not e.fell_back and e.fallback_reason is None
    assert kinds(e, acceptance, "while x.sum() > 1:") == ["while"]
    assert kinds(e, acceptance, "if x.max() > 3:") == ["cond"]
    assert len(e.lines) == 2
    loop, cond = e.lines
    assert loop.filename == acceptance.__code__.co_filename
    assert loop.source == "while x.sum() > 1:" and cond.source == "if x.max() > 3:"
    assert "while node" in loop.detail and "cond node" in cond.detail
    assert "inside %" in cond.detail                       # the if sits in the loop body
    text = str(e)
    assert text.splitlines()[0] == "explain acceptance: traced into a graph"
    assert "while x.sum() > 1:" in text and "if x.max() > 3:" in text
    assert "not traced yet" in text                        # g was never called


def python_valued(x, n, flag):
    if flag:
        x = x + 1
    else:
        if x.sum() > 0:
            x = x - 1
    y = x * 2 if n > 2 else x
    for i in range(n):
        if i % 2 == 0:
            x = x + i
    k = 0
    while k < n:
        k += 1
    s = x.sum() if x.sum() > 0 else -x.sum()
    return x, y, k, s


def test_explain_python_valued_control_flow():
    g = to_graph(python_valued)
    e = g.explain(torch.ones(3), 3, True)
    assert not e.fell_back

    def only(text):
        events = e.at(line_of(python_valued, text))
        assert len(events) == 1, (text, events)
        return events[0]

    flag = only("if flag:")
    assert flag.what == "python-if" and "(True)" in flag.detail
    assert only("if x.sum() > 0:").what == "not-reached"   # inside the branch not taken
    ternary = only("y = x * 2 if n > 2 else x")
    assert ternary.what == "python-if" and "(True)" in ternary.detail
    loop = only("for i in range(n):")
    assert loop.what == "python-loop" and "3 iterations unrolled" in loop.detail
    inner = only("if i % 2 == 0:")                          # i = 0, 1, 2
    assert inner.what == "python-if" and "True x2, False x1" in inner.detail
    count = only("while k < n:")
    assert count.what == "python-loop" and "3 iterations unrolled" in count.detail
    assert only("s = x.sum() if x.sum() > 0 else -x.sum()").what == "cond"

    other = g.explain(torch.ones(3), 1, False)

    def other_only(text):
        events = other.at(line_of(python_valued, text))
        assert len(events) == 1, (text, events)
        return events[0]

    assert other_only("if flag:").what == "python-if"
    assert "(False)" in other_only("if flag:").detail
    assert other_only("if x.sum() > 0:").what == "cond"
    assert "1 iteration unrolled" in other_only("for i in range(n):").detail
    assert "(False)" in other_only("y = x * 2 if n > 2 else x").detail


def test_explain_python_loop_that_becomes_a_while():
    def grows(x):
        k = 0
        while k < 3:
            k = k + x.sum()
        return k

    e = to_graph(grows).explain(torch.ones(2))
    assert sorted(kinds(e, grows, "while k < 3:")) == ["python-loop", "while"]
    python_part = next(ev for ev in e.at(line_of(grows, "while k < 3:"))
                       if ev.what == "python-loop")
    assert "1 iteration unrolled" in python_part.detail and "while node" in python_part.detail


def noisy(x):
    y = x * 2
    return y * random.random()


COUNTER = []


def appends_global(x):
    COUNTER.append(x.sum())     # (a tensor: numbers appended convert, runtime.appended_lists)
    return x * 2


def test_explain_fallback_line_and_reason():
    with warnings.catch_warnings():
        warnings.simplefilter("error")                     # explain warns nothing
        e = to_graph(noisy).explain(torch.ones(2))
    assert e.fell_back and "random" in e.fallback_reason.lower()
    line = line_of(noisy, "return y * random.random()")
    assert [(ev.lineno, ev.what) for ev in e.lines] == [(line, "fallback")]
    assert e.lines[0].source == "return y * random.random()"
    assert e.fallback_reason in e.lines[0].detail
    assert "falls back to eager" in str(e)


def test_explain_fallback_on_global_mutation():
    e = to_graph(appends_global).explain(torch.ones(2))
    assert e.fell_back and "COUNTER" in e.fallback_reason
    fallback, = [ev for ev in e.lines if ev.what == "fallback"]
    first = appends_global.__code__.co_firstlineno
    assert fallback.filename == appends_global.__code__.co_filename
    assert first <= fallback.lineno <= first + 2
    assert COUNTER == []                                   # the trace's append was undone


G = []


def assigns_global(x):
    # (a global number the call advances is carried as graph state; a global list of
    # tensors rebound per call is a side effect a graph cannot repeat)
    global G
    G = G + [x.sum()]
    return x * len(G)


def test_explain_global_assignment_points_at_the_assignment():
    e = to_graph(assigns_global).explain(torch.ones(2))
    assert e.fell_back
    assert [ev.lineno for ev in e.lines if ev.what == "fallback"] == \
        [line_of(assigns_global, "G = G + [x.sum()]")]


def test_explain_retrace_history_says_what_changed():
    def scale(x, n):
        return x * n

    g = to_graph(scale, dynamic=False)     # (one static trace per shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g(torch.ones(3), 2)
        g(torch.ones(3), 2)                                # cached: no retrace
        g(torch.ones(4), 2)
        g(torch.ones(4), 5)
        g(torch.ones(4, dtype=torch.float64), 5)
        g(torch.ones(4, dtype=torch.float64, requires_grad=True), 5)
    e = g.explain(torch.ones(4), 5)                        # traced already (trace 3)
    assert e.retraces == [
        "trace 1: x: float32[3], n=2",
        "trace 2: x: shape (3,) -> (4,)",
        "trace 3: n: 2 -> 5",
        "trace 4: x: dtype torch.float32 -> torch.float64",
        "trace 5: x: requires_grad False -> True",
    ]
    new = g.explain(torch.ones(2), 5)
    assert new.retraces[:5] == e.retraces
    assert len(new.retraces) == 6 and "not traced yet" in new.retraces[5]
    assert "shape (4,) -> (2,)" in new.retraces[5]
    assert "retrace history:" in str(new) and "trace 2: x: shape (3,) -> (4,)" in str(new)


def test_explain_retrace_history_names_dynamic_dims():
    # automatic dynamic shapes: a second size traces the dim dynamic, and the history says
    # so in words (it printed the key's internals: "strides and offset ((1,), 0) ->
    # contiguous", "training mode: train -> train"); sizes a dynamic graph serves are traced
    def scale(x, n):
        return x * n

    g = to_graph(scale)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for shape in ((3,), (3,), (4,), (5,), (7, 2), (8, 2), (9, 3)):
            assert torch.equal(g(torch.ones(shape), 2), torch.ones(shape) * 2)
    e = g.explain(torch.ones(6), 2)                        # served by trace 2
    assert e.retraces == [
        "trace 1: x: float32[3], n=2",
        "trace 2: x: shape (3,) -> (*,); traced with dynamic dims x[0] (one graph for "
        "their sizes)",
        "trace 3: x: shape (*,) -> (7, 2)",
        "trace 4: x: shape (7, 2) -> (*, 2); traced with dynamic dims x[0] (one graph for "
        "their sizes)",
        "trace 5: x: shape (*, 2) -> (*, *); traced with dynamic dims x[0], x[1] (one "
        "graph for their sizes)",
    ], e.retraces
    assert g.explain(torch.ones(10, 4), 2).retraces == e.retraces
    new = g.explain(torch.ones(6, dtype=torch.float64), 2)
    assert "not traced yet" in new.retraces[-1] and "dtype" in new.retraces[-1]
    assert "not traced yet" in g.explain(torch.ones(2, 3, 4), 2).retraces[-1]

    factor = [2.0]

    def scaled(x):
        return x * factor[0]

    g = to_graph(scaled)
    g(torch.ones(3)), g(torch.ones(4))
    factor[0] = 3.0                                        # a guard of the dynamic graph
    assert torch.equal(g(torch.ones(5)), torch.full((5,), 3.0))
    assert g.explain(torch.ones(6)).retraces[2].startswith(
        "trace 3: Python state the last trace read changed")


def test_explain_does_not_change_the_cache_or_results():
    g = to_graph(acceptance)
    x = T([5.0, 4.0])
    first = g(x.clone())
    entries, history = dict(g._entries), list(g._history)
    g.explain(x.clone())
    g.explain(T([1.0, 2.0, 3.0]))                          # a new signature
    assert g._entries == entries and g._history == history
    again = g(x.clone())
    expected = acceptance(x.clone())
    assert torch.equal(again[0], expected[0]) and int(again[1]) == expected[1]
    assert torch.equal(first[0], again[0])


def helper(y):
    if y.mean() > 0:
        y = y * 2
    return y


def calls_helper(x):
    z = helper(x)
    while z.sum() < 100:
        z = helper(z) + 1
    return z


def test_explain_names_lines_of_called_user_functions():
    e = to_graph(calls_helper).explain(torch.ones(2))
    helper_line = line_of(helper, "if y.mean() > 0:")
    assert [ev.what for ev in e.at(helper_line)] == ["cond", "cond"]   # outside, in the loop
    assert kinds(e, calls_helper, "while z.sum() < 100:") == ["while"]
    assert any("inside %" in ev.detail for ev in e.at(helper_line))


def early_return(y):
    if y.mean() > 0:
        return y * 2
    return y - 1


def test_explain_early_return_lists_only_the_if_line():
    e = to_graph(early_return).explain(torch.ones(2))
    conds = [ev.lineno for ev in e.lines if ev.what == "cond"]
    assert conds == [line_of(early_return, "if y.mean() > 0:")]


class Gate(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            x = x * 2
        return x


def test_explain_a_module():
    g = to_graph(Gate())
    e = g.explain(torch.ones(3))
    assert kinds(e, Gate.forward, "if x.sum() > 0:") == ["cond"]


def test_explain_module_retrace_history_names_the_training_mode():
    model = Gate()
    g = to_graph(model)
    g(torch.ones(3))
    model.eval()
    g(torch.ones(3))
    e = g.explain(torch.ones(3))
    assert "#1" not in "\n".join(e.retraces)
    assert "training" in e.retraces[1]


# =========================================================================== probe
def collect_acceptance(x):
    """``acceptance`` by hand, collecting each name's values per iteration."""
    xs, ns, big = [], [], []
    n = 0
    while x.sum() > 1:
        if x.max() > 3:
            x = x - 2
            big.append(x)
        else:
            x = x * 0.5
        n = n + 1
        xs.append(x)
        ns.append(n)
    return xs, ns, big


def probed_acceptance(x):
    n = 0
    while x.sum() > 1:
        if x.max() > 3:
            x = x - 2
            big = x
        else:
            x = x * 0.5
        n = n + 1
    return x, n


@pytest.mark.parametrize("values", [[5.0, 4.0], [7.0, -1.0], [1.5, 1.0]])
def test_probe_while_loop_values_per_iteration(values):
    x = T(values)
    xs, ns, big = collect_acceptance(x.clone())
    g = to_graph(probed_acceptance, strict=True)
    p = g.probe(x, names=["x", "n", "big"])
    assert torch.equal(p["x"], torch.stack(xs))
    assert torch.equal(p["n"], T(ns))
    if big:
        assert torch.equal(p["big"], torch.stack(big))      # only iterations taking the if
    else:
        assert p["big"] == []
    assert p.counts == {"x": 1 + len(xs), "n": 1 + len(ns), "big": len(big)}
    assert torch.equal(p.last["x"], xs[-1]) and int(p.last["n"]) == ns[-1]
    expected = probed_acceptance(x.clone())
    assert torch.equal(p.result[0], expected[0]) and int(p.result[1]) == expected[1]
    assert torch.equal(x, T(values).to(x.dtype))


def test_probe_zero_iterations():
    g = to_graph(probed_acceptance, strict=True)
    p = g.probe(T([0.1, 0.2]), names=["x", "n", "big"])
    assert p["x"] == [] and p["n"] == [] and p["big"] == []
    assert torch.equal(p.last["x"], T([0.1, 0.2])) and p.last["n"] == 0    # before the loop
    assert p.counts == {"x": 1, "n": 1, "big": 0}


def straight(x, scale):
    h = x * scale
    a, b = h.min(), h.max()
    c = x.clone()
    c += 1
    c[0] = 7.0
    return h + a + b + c


def test_probe_straight_line_values():
    x = T([1.0, 2.0, 3.0])
    g = to_graph(straight, strict=True)
    p = g.probe(x, 2.0, names=["h", "a", "b", "c", "x", "scale", "never", "T"])
    h = x * 2.0
    assert torch.equal(p["h"], h)
    assert torch.equal(p["a"], h.min()) and torch.equal(p["b"], h.max())
    assert torch.equal(p["c"], T([7.0, 3.0, 4.0]))           # after the item assignment
    assert p.counts["c"] == 3                                # =, +=, [0] =
    assert torch.equal(p["x"], x) and p["scale"] == 2.0      # parameters
    assert p["never"] is None and p["T"] is None and p.counts["never"] == 0
    assert torch.equal(p.result, straight(x, 2.0))


def loops(x, n):
    total = 0
    for i in range(n):
        total = total + i
        h = x * i
    for row in x.reshape(-1, 1):
        r = row * 3
    return total, r


def test_probe_python_for_range_and_for_over_a_tensor():
    x = T([1.0, 2.0, 3.0])
    g = to_graph(loops, strict=True)
    p = g.probe(x, 3, names=["i", "total", "h", "row", "r"])
    assert torch.equal(p["i"], T([0, 1, 2]))
    assert torch.equal(p["total"], T([0, 1, 3]))
    assert torch.equal(p["h"], torch.stack([x * i for i in range(3)]))
    assert torch.equal(p["row"], x.reshape(-1, 1))
    assert torch.equal(p["r"], x.reshape(-1, 1) * 3)
    empty = g.probe(x, 0, names=["i", "h", "total"])
    assert empty["i"] == [] and empty["h"] == [] and empty.last["total"] == 0


def reuses(x):
    out = x
    for i in range(3):
        h = x * 2 + i
        h = torch.relu(h)
        h = h + 1
        h.mul_(3)
        out = out + h
    return out


def reuses_while(x):
    i = 0
    h = x
    while h.sum() < 30:
        t = h * 2
        t.add_(1)
        h = torch.tanh(t) + h
        i = i + 1
    return h


def test_probe_sees_values_at_probe_time_despite_in_place_reuse():
    x = T([-0.7, 0.2, 1.5, -2.0])
    expected, out = [], x
    for i in range(3):                                 # by hand: h as each iteration ends
        h = x * 2 + i
        h = torch.relu(h)
        h = h + 1
        h.mul_(3)
        expected.append(h.clone())
        out = out + h                                  # ... and `out` reads it after
    p = to_graph(reuses, strict=True).probe(x, names=["h"])
    assert torch.allclose(p["h"], torch.stack(expected))
    assert p.counts["h"] == 12                         # 3 assignments + 1 in-place call, x3
    assert torch.allclose(p.result, reuses(x.clone()))

    x = T([0.5, -0.25, 1.0])
    ts, hs = [], []
    h = x
    while h.sum() < 30:
        t = h * 2
        t.add_(1)
        ts.append(t.clone())                            # t as the iteration ends
        h = torch.tanh(t) + h
        hs.append(h)
    p = to_graph(reuses_while, strict=True).probe(x, names=["t", "h"])
    assert torch.allclose(p["t"], torch.stack(ts)) and torch.allclose(p["h"], torch.stack(hs))


def test_probe_does_not_change_results_or_the_cache():
    g = to_graph(probed_acceptance, strict=True)
    x = T([5.0, 4.0])
    before = g(x.clone())
    entries, history = dict(g._entries), list(g._history)
    p = g.probe(x.clone(), names=["x", "n"])
    assert g._entries == entries and g._history == history
    after = g(x.clone())
    for got in (p.result, after):
        assert torch.equal(got[0], before[0])
        assert type(got[1]) is type(before[1]) and got[1] == before[1]
    assert "probe_value" not in str(g.graph(x.clone()))


def test_probe_again_with_new_values_of_the_same_signature():
    g = to_graph(probed_acceptance, strict=True)
    first = g.probe(T([5.0, 4.0]), names=["x"])
    second = g.probe(T([1.5, 1.0]), names=["x"])
    assert torch.equal(first["x"], torch.stack(collect_acceptance(T([5.0, 4.0]))[0]))
    assert torch.equal(second["x"], torch.stack(collect_acceptance(T([1.5, 1.0]))[0]))


def test_probe_with_inputs_that_require_grad():
    def f(x):
        h = x * 2
        while h.sum() < 20:
            h = h * 2
        return h.sum()

    x = T([1.0, 1.0], requires_grad=True)
    p = to_graph(f, strict=True).probe(x, names=["h"])
    assert torch.equal(p["h"], T([[4.0, 4.0], [8.0, 8.0], [16.0, 16.0]]))
    assert not p["h"].requires_grad
    assert p.result.requires_grad and torch.equal(p.result.detach(), f(x).detach())
    (grad,) = torch.autograd.grad(p.result, x)
    (expected,) = torch.autograd.grad(f(x), x)
    assert torch.equal(grad, expected)


def falls_back(x):
    total = x
    for k in range(3):
        try:
            step = x * k
        except ValueError:
            step = x
        total = total + step
    return total


def test_probe_a_function_that_falls_back():
    x = T([1.0, 2.0])
    with pytest.warns(FallbackWarning):
        p = to_graph(falls_back).probe(x, names=["step", "total", "k"])
    assert torch.equal(p["step"], torch.stack([x * k for k in range(3)]))
    assert torch.equal(p["total"], torch.stack([x, x * 2, x * 4]))
    assert torch.equal(p["k"], T([0, 1, 2]))
    assert torch.equal(p.result, falls_back(x))


@pytest.mark.parametrize("names", [["1x"], ["a-b"], [3], "not valid", [""], ["x", None]])
def test_probe_rejects_invalid_names(names):
    with pytest.raises(ValueError):
        to_graph(straight).probe(torch.ones(2), 1.0, names=names)


def test_probe_a_single_name_as_a_string():
    p = to_graph(straight).probe(torch.ones(2), 2.0, names="h")
    assert list(p) == ["h"] and torch.equal(p["h"], torch.full((2,), 2.0))


def test_probe_rejects_keywords():
    with pytest.raises(ValueError):
        to_graph(straight).probe(torch.ones(2), 1.0, names=["for"])


def python_objects(x):
    shape = x.shape
    label = "long" if x.shape[0] > 1 else "short"
    kind = x.dtype
    return x.reshape(shape) * 2


def test_probe_python_objects():
    p = to_graph(python_objects).probe(torch.ones(2), names=["shape", "label", "kind"])
    assert p["shape"] == torch.Size([2]) and p["label"] == "long"
    assert p["kind"] == torch.float32


def test_probe_a_module_and_a_method():
    class Net(torch.nn.Module):
        def forward(self, x):
            h = x * 2
            while h.sum() < 10:
                h = h + 1
            return h

    p = to_graph(Net()).probe(torch.ones(2), names=["h"])
    assert torch.equal(p["h"], T([[3.0, 3.0], [4.0, 4.0], [5.0, 5.0]]))

    class C:
        @to_graph
        def meth(self, x):
            h = x * 3
            return h

    p = C().meth.probe(torch.ones(2), names=["h"])
    assert torch.equal(p["h"], T([3.0, 3.0]))


def branches(x, *, flag=True):
    if x.sum() > 0:
        h = x * 2
    else:
        h = x * 3
    if flag:
        k = h + 1
    else:
        k = h - 1
    return k


@pytest.mark.parametrize("sign", [1.0, -1.0])
@pytest.mark.parametrize("flag", [True, False])
def test_probe_names_bound_in_branches_with_keyword_arguments(sign, flag):
    x = torch.full((2,), sign)
    h = x * 2 if sign > 0 else x * 3
    k = h + 1 if flag else h - 1
    p = to_graph(branches, strict=True).probe(x, flag=flag, names=["h", "k", "flag"])
    assert torch.equal(p["h"], h) and torch.equal(p["k"], k) and p["flag"] is flag
    assert p.counts == {"h": 1, "k": 1, "flag": 1}           # only the branch taken ran
    assert torch.equal(p.result, branches(x, flag=flag))


SEEN = []


def appends_to_global(x):
    # (a list argument the call appends to converts: the append is written back; a global
    # list grown on every call is a side effect a graph cannot repeat)
    y = x * 2
    SEEN.append(y)
    return y


class KeepsHistory(torch.nn.Module):
    # (a tensor stored as ``self.last = h`` converts: the graph sets it when it runs,
    # runtime.module_writes; a list attribute grown on every call is a side effect)
    def __init__(self):
        super().__init__()
        self.history = []

    def forward(self, x):
        h = x * 2
        self.history.append(h)
        return h


@pytest.mark.parametrize("fn, args, text", [
    (appends_to_global, (T([1.0]),), "SEEN.append(y)"),
    (KeepsHistory(), (T([1.0]),), "self.history.append(h)")],
    ids=["append", "self_attribute"])
def test_side_effect_fallbacks_name_the_mutating_line(fn, args, text):
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    e = to_graph(fn).explain(*args)
    assert e.fell_back
    assert [ev.lineno for ev in e.lines if ev.what == "fallback"] == [line_of(target, text)]
