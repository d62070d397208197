"""A Python number argument the function never reads does not key the graph
(``transpiler.unread_numbers``): Lightning's ``batch_idx`` is one trace for an epoch, not
one per step. A number the source reads anywhere (a Python branch, ``print``, ``lr * step``,
``torch.full``, an f-string, ``range(n)``, ``x[:n]``, one side of a tensor branch, a nested
function, a store on an object or a global) is keyed by value, as before.

Each case runs eager and converted on the same values and compares results, printed text,
Python side effects, parameters and gradients; trace counts come from ``cache_info()``."""
import warnings

import pytest
import torch
from torch import nn

from e2e_helpers import assert_same
from transpiler import to_graph
from transpiler.analysis import unread_arguments
from transpiler.pyct import parser

VALUES = range(30)


def _traces(f) -> int:
    return f.cache_info().traces


def _both(fn, calls):
    """``fn`` eager and converted on each ``(args, kwargs)``; the converted function."""
    g = to_graph(fn)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")         # (RetracingWarning where keyed by value)
        for args, kwargs in calls:
            assert_same(g(*args, **kwargs), fn(*args, **kwargs))
    return g


def _x():
    return torch.randn(4, 3, generator=torch.Generator().manual_seed(0))


# ------------------------------------------------------------------ never read: one trace
def _step(model, opt, batch, batch_idx):
    x, y = batch
    loss = ((model(x) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.detach()


def _twin_models():
    torch.manual_seed(0)
    a = nn.Linear(4, 2)
    b = nn.Linear(4, 2)
    b.load_state_dict(a.state_dict())
    return a, b


def test_training_step_batch_idx_is_one_trace():
    eager_model, graph_model = _twin_models()
    eager_opt = torch.optim.SGD(eager_model.parameters(), lr=0.1)
    graph_opt = torch.optim.SGD(graph_model.parameters(), lr=0.1)
    g = to_graph(_step)
    gen = torch.Generator().manual_seed(1)
    for i in VALUES:
        batch = (torch.randn(8, 4, generator=gen), torch.randn(8, 2, generator=gen))
        assert_same(g(graph_model, graph_opt, batch, i), _step(eager_model, eager_opt, batch, i))
        for p, q in zip(graph_model.parameters(), eager_model.parameters()):
            assert_same(p, q)
            assert_same(p.grad, q.grad)
    assert _traces(g) == 1
    assert g.cache_info().hits == len(VALUES) - 1


class _Lit:
    def __init__(self, model):
        self.model = model
        self.logged = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        return ((self.model(x) - y) ** 2).mean()

    def logging_step(self, batch, batch_idx):
        x, y = batch
        if batch_idx % 10 == 0:
            self.logged.append(batch_idx)
        return ((self.model(x) - y) ** 2).mean()


def test_bound_method_batch_idx_is_one_trace_with_gradients():
    eager_model, graph_model = _twin_models()
    eager, lit = _Lit(eager_model), _Lit(graph_model)
    g = to_graph(lit.training_step)
    batch = (_x()[:, :2].repeat(1, 2), torch.ones(4, 2))
    for i in VALUES:
        out, exp = g(batch, i), eager.training_step(batch, i)
        assert_same(out, exp)
        out.backward()
        exp.backward()
    for p, q in zip(graph_model.parameters(), eager_model.parameters()):
        assert_same(p.grad, q.grad)
    assert _traces(g) == 1


def test_bound_method_that_reads_batch_idx_keys_it():
    eager, lit = _Lit(nn.Linear(4, 2)), None
    lit = _Lit(eager.model)
    g = to_graph(lit.logging_step)
    batch = (torch.ones(3, 4), torch.zeros(3, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(12):
            assert_same(g(batch, i), eager.logging_step(batch, i))
    assert lit.logged == eager.logged == [0, 10]
    assert _traces(g) + g.cache_info().fallbacks == 12


def test_keyword_and_positional_numbers():
    def f(x, scale, step=0, *, epoch=0):
        return x * scale

    calls = [((_x(), 2.0), {"step": i, "epoch": i % 3}) for i in VALUES]
    calls += [((_x(), 2.0, i), {}) for i in VALUES]
    g = _both(f, calls)
    assert _traces(g) == 2          # (keyword, then positional: two call shapes)
    _both(f, [((_x(), float(i)), {"step": 1}) for i in range(5)])   # read: per value
    assert _traces(_both(f, [((_x(), float(i)), {"step": 1}) for i in range(5)])) == 5


def test_types_still_key_the_graph():
    def f(x, n):
        return x + 1

    g = _both(f, [((_x(), v), {}) for v in [1, 2, 1.5, 2.5, True, False, -0.0, 0.0, None]])
    assert _traces(g) == 4          # int, float, bool, None


def test_is_none_and_isinstance_key_by_type():
    def f(x, n=None):
        if n is None:
            return x
        if isinstance(n, (int, float)) and not isinstance(n, bool):
            return x * 2
        return x - 1

    g = _both(f, [((_x(), v), {}) for v in [None, 1, 2, 3, 1.0, 2.0, True, False, None]])
    assert _traces(g) == 4


def test_unread_number_inside_containers():
    def f(x, batch, cfg):
        t, _ = batch
        return t * x * cfg["lr"]

    calls = [((_x(), (torch.ones(3), i), {"lr": 0.5, "step": i, "tags": [i, i + 1]}), {})
             for i in VALUES]
    g = _both(f, calls)
    assert _traces(g) == 1
    calls = [((_x(), (torch.ones(3), 1), {"lr": float(i), "step": 1, "tags": [1]}), {})
             for i in range(4)]
    assert _traces(_both(f, calls)) == 4        # cfg["lr"] is read: by value


def test_unread_numbers_in_a_list_argument():
    def f(x, items):
        return x * items[0]

    g = _both(f, [((_x(), [2.0, i, float(i)]), {}) for i in VALUES])
    assert _traces(g) == 1


# ------------------------------------------------------------------ read: one per value
def _branch(x, n):
    if n % 10 == 0:
        return x * 2
    return x


def _scaled(x, lr, step):
    return x * (lr * step)


def _full(x, step):
    return x + torch.full((), step)


def _text(x, step):
    return x, f"step {step}"


def _range(x, n):
    for _ in range(n):
        x = x + 1
    return x


def _sliced(x, n):
    return x[:n]


def _tensor_branch_one_side(x, n):
    if x.sum() > 0:
        y = x * n
    else:
        y = x
    return y


def _closure(x, n):
    def inner():
        return n
    return x + inner()


def _flagged(x, log, n):
    if log:
        return x + n
    return x


@pytest.mark.parametrize("fn, args", [
    (_branch, lambda i: (_x(), i)),
    (_scaled, lambda i: (_x(), 0.1, i)),
    (_full, lambda i: (_x(), i)),
    (_text, lambda i: (_x(), i)),
    (_range, lambda i: (_x(), i % 6)),
    (_sliced, lambda i: (_x(), i % 5)),
    (_tensor_branch_one_side, lambda i: (_x(), float(i))),
    (_tensor_branch_one_side, lambda i: (-_x().abs(), float(i))),
    (_closure, lambda i: (_x(), i)),
    (_flagged, lambda i: (_x(), i % 2 == 0, i)),
])
def test_a_read_number_keys_by_value(fn, args):
    calls = [(args(i), {}) for i in range(8)]
    g = _both(fn, calls)
    distinct = len({tuple(a for a in c[0][1:]) for c in calls})
    assert _traces(g) + g.cache_info().fallbacks == distinct


def test_print_of_the_number_prints_each_value(capsys):
    def f(x, step):
        print("step", step)
        return x + 1

    g = to_graph(f)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(6):
            g(_x(), i)
    got = capsys.readouterr().out
    for i in range(6):
        f(_x(), i)
    assert got == capsys.readouterr().out
    assert _traces(g) + g.cache_info().fallbacks == 6


# ------------------------------------------------------------------ escapes: read
class _Holder:
    step = None


def _stored(holder, x, step):
    holder.step = step
    return x + 1


LAST = []


def _stored_in_global(x, step):
    LAST.append(step)
    return x + 1


def test_a_number_stored_on_an_object_is_read():
    eager, graph = _Holder(), _Holder()
    g = to_graph(_stored)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(5):
            assert_same(g(graph, _x(), i), _stored(eager, _x(), i))
            assert graph.step == eager.step == i


def test_a_number_stored_in_a_global_is_read():
    g = to_graph(_stored_in_global)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(5):
            g(_x(), i)
    got = list(LAST)
    del LAST[:]
    for i in range(5):
        _stored_in_global(_x(), i)
    assert got == LAST == list(range(5))


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x, step):
        return self.fc(x)


def test_a_module_with_a_forward_hook_keys_by_value():
    net = _Net()
    seen = []
    net.register_forward_pre_hook(lambda m, args: seen.append(args[1]))
    g = to_graph(net)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(4):
            assert_same(g(_x(), i), net.fc(_x()))
    assert seen == list(range(4))


def test_a_module_without_hooks_is_one_trace():
    net = _Net()
    g = _both(net, [((_x(), i), {}) for i in VALUES])
    assert _traces(g) == 1


# ------------------------------------------------------------------ the analysis alone
def _source(x, batch, n, m, k, j, cfg, d, z):
    a, b = batch
    if n is None or isinstance(n, int):
        pass
    k += 1
    print(type(m))

    def inner():
        return j
    return x + a + cfg[0] + d["w"] + inner()


def test_analysis_names_unread_parameters():
    node, _ = parser.parse_function(_source)
    assert unread_arguments.unread(node) == {
        "batch": frozenset({0}), "n": unread_arguments.WHOLE, "m": unread_arguments.WHOLE,
        "cfg": frozenset({0}), "d": frozenset({"w"}), "z": unread_arguments.WHOLE}


def _frame(x, n):
    return locals()["x"]


def _frame_attribute(x, n):
    import sys
    return sys._getframe(0).f_locals["x"]


def _eval_and_stack_methods(model, x, n):
    model.eval()
    return torch.stack([x, x])


@pytest.mark.parametrize("fn", [_frame, _frame_attribute])
def test_analysis_gives_up_where_a_frame_is_named(fn):
    node, _ = parser.parse_function(fn)
    assert unread_arguments.unread(node) == {}


def test_analysis_keeps_methods_named_like_builtins():
    node, _ = parser.parse_function(_eval_and_stack_methods)
    assert unread_arguments.unread(node) == {"n": unread_arguments.WHOLE}


def test_entry_function_checks_only_the_type():
    def f(x, step):
        return x * 2

    g = _both(f, [((_x(), i), {}) for i in range(3)])
    text = g._entries.inline[0].source
    assert "a1.__class__ is int" in text and "a1 ==" not in text
    assert _traces(g) == 1


def test_new_sizes_and_unread_numbers():
    def f(x, step):
        return x.sum(0) * 2

    gen = torch.Generator().manual_seed(2)
    g = _both(f, [((torch.randn(n, 3, generator=gen), n * 7), {}) for n in range(2, 9)])
    assert _traces(g) == 2          # (static, then the batch dim dynamic)


def _own_isinstance():
    def isinstance(value, kind):        # noqa: A001 - its own isinstance: may read it
        return value > 3

    def f(x, n):
        if isinstance(n, int):
            return x + 1
        return x
    return f


def test_a_rebound_isinstance_reads_the_number():
    g = _both(_own_isinstance(), [((_x(), i), {}) for i in range(6)])
    assert _traces(g) == 6


# ------------------------------------------------------------------ passed on to a callee
def _ignores(x, i):
    return x * 2


def _reads(x, i):
    return x * i


def _passes_on(x, i):
    return _ignores(x, i=i)


class _Shared:
    def __init__(self, model):
        self.model = model

    def shared(self, batch, batch_idx, stage):
        return self.model(batch).sum()

    def training_step(self, batch, batch_idx):
        return self.shared(batch, batch_idx, "train")


def test_a_number_passed_to_a_method_that_never_reads_it():
    lit = _Shared(nn.Linear(3, 3))
    g = _both(lit.training_step, [((_x(), i), {}) for i in VALUES])
    assert _traces(g) == 1


def test_a_callee_rebound_to_one_that_reads_keys_by_value(monkeypatch):
    g = _both(_passes_on, [((_x(), i), {}) for i in range(5)])
    assert _traces(g) == 1
    monkeypatch.setitem(globals(), "_ignores", _reads)
    _both(_passes_on, [((_x(), i), {}) for i in range(5)])         # (a fresh function)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(5):
            assert_same(g(_x(), i), _passes_on(_x(), i))
    assert _traces(g) == 6
    monkeypatch.setitem(globals(), "_ignores", _ignores)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(5):
            assert_same(g(_x(), i), _passes_on(_x(), i))
    assert _traces(g) == 6              # (the first graph, whose guard holds again)


def test_a_method_rebound_on_the_class_keys_by_value(monkeypatch):
    lit = _Shared(nn.Linear(3, 3))
    g = _both(lit.training_step, [((_x(), i), {}) for i in range(3)])
    monkeypatch.setattr(_Shared, "shared", lambda self, b, i, s: self.model(b).sum() * i)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(5):
            assert_same(g(_x(), i), lit.training_step(_x(), i))
    assert _traces(g) == 6


def _passes_to_print(x, i):
    print(i, end="")
    return _ignores(x, i)


def test_a_number_also_passed_to_a_builtin_is_read(capsys):
    g = _both(_passes_to_print, [((_x(), i), {}) for i in range(4)])
    assert capsys.readouterr().out == "00112233"
    assert _traces(g) + g.cache_info().fallbacks == 4


def _passing(self, a, n, m):
    return self.f(a, n) + _ignores(a, i=n) + m(a)


def test_analysis_names_what_is_passed_on():
    node, _ = parser.parse_function(_passing)
    found = unread_arguments.unread(node)
    assert found == {"n": unread_arguments.Passed({(("attr", "self", "f"), 1),
                                                   (("name", "_ignores"), "i")})}
    # (a: also passed to m, a parameter: no callee known; m: called)


def _local_callee(x, i):
    _ignores = _reads               # noqa: F841 - a local of the global's name
    return _ignores(x, i)


def _callee_argument(x, i, _ignores):
    return _ignores(x, i)


@pytest.mark.parametrize("fn, extra", [(_local_callee, ()), (_callee_argument, (_reads,))])
def test_a_local_callee_is_not_the_global_of_its_name(fn, extra):
    g = _both(fn, [((_x(), i) + extra, {}) for i in range(4)])
    assert _traces(g) + g.cache_info().fallbacks == 4
