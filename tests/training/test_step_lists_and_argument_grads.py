"""Training steps that fell back needlessly (issue 15): a logged list the step also reads
(``runtime.list_reads``: ``len(losses)``, ``losses[-1]``, ``sum(losses[-10:]) / 10``,
``if len(history) % 10 == 0: print(...)``) or receives as an argument
(``transpiler.appended_arguments``), and ``.grad`` of parameters passed as
arguments (``runtime.argument_grads``: d2l's ``sgd(params, lr, batch_size)`` and
``grad_clipping(params, theta)``).

Each program builds its state from one seed and returns ``(step, objs, calls,
python_state)``; it runs eagerly, then with ``to_graph(step)`` in default and strict mode,
and what the step returns, the objects' parameters and gradients, and the Python state
(here: each argument leaf's values and ``.grad``, None or a tensor) after *every* call
must equal eager's exactly, within the number of traces the program allows.
"""
from __future__ import annotations

import contextlib
import io
import warnings

import pytest
import torch
import torch.nn.functional as F

from tests.training.test_step_fallbacks_closed import _compare as compare_steps
from transpiler import ConversionError, FallbackWarning, to_graph

THIS_FILE = __file__.rsplit("/", 1)[-1]


def _compare(program, traces=1):
    return compare_steps(program, max_traces=traces, this_file=THIS_FILE)


def _mlp():
    return torch.nn.Sequential(torch.nn.Linear(6, 10), torch.nn.ReLU(), torch.nn.Linear(10, 3))


def _batches(n, seed=7):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(5, 6, generator=g), torch.randint(0, 3, (5,), generator=g))
            for _ in range(n)]


def _update(opt, loss):
    opt.zero_grad()
    loss.backward()
    opt.step()


# ------------------------------------------------------------------ logged lists read
def closure_reads(steps=6):
    """The list's length, last item, first item and a window's mean, each call; a print
    every other step."""
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses, running = [], []

    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        _update(opt, loss)
        losses.append(loss.item())
        n = len(losses)
        running.append(sum(losses[-3:]) / 3)
        if n % 2 == 0:
            print("step", n, losses[-1], losses[0])
        return loss.detach() * losses[0] + n
    return step, [model, opt], _batches(steps), lambda: (list(losses), list(running))


HISTORY = {"loss": [], "acc": [], "avg": []}


def dict_of_lists_reads():
    """``hist["loss"][-1]``, ``sum(hist["loss"]) / len(hist["loss"])``, a global dict of
    lists (reset before the program runs: what the slot holds when the graph runs)."""
    for v in HISTORY.values():
        v.clear()
    model = _mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)

    def step(x, y):
        out = model(x)
        loss = F.cross_entropy(out, y)
        _update(opt, loss)
        HISTORY["loss"].append(loss.item())
        HISTORY["acc"].append((out.argmax(1) == y).sum().item())
        HISTORY["avg"].append(sum(HISTORY["loss"]) / len(HISTORY["loss"]))
        if HISTORY["loss"][-1] < HISTORY["avg"][-1]:
            print("better than average", len(HISTORY["acc"]), sum(HISTORY["acc"]))
        return out.detach()
    return step, [model, opt], _batches(6), \
        lambda: {k: list(v) for k, v in HISTORY.items()}


class Trainer:
    """A trainer logging on ``self`` and printing every few steps, by the log's length."""

    def __init__(self):
        self.model = _mlp()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.05)
        self.history = []

    def train_step(self, x, y):
        loss = F.cross_entropy(self.model(x), y)
        _update(self.opt, loss)
        self.history.append(loss.item())
        if len(self.history) % 3 == 0:
            print(f"step {len(self.history)}: mean of last 3 "
                  f"{sum(self.history[-3:]) / 3:.6f}")
        return loss


def trainer_reads():
    t = Trainer()
    return t.train_step, [t.model, t.opt], _batches(7), lambda: list(t.history)


def ema_and_branch_reads():
    """An EMA logged from its own last item (``ema[-1] * 0.9 + ...``), reads inside a
    tensor ``if``, and ``len(hist) >= 3 and hist[-3] > hist[-1]`` (the item read only
    where the length allows it, as eagerly)."""
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.2)
    ema, hist = [1.0], []

    def step(x, y):
        out = model(x)
        loss = F.cross_entropy(out, y)
        _update(opt, loss)
        ema.append(ema[-1] * 0.9 + loss.item() * 0.1)
        hist.append(loss.item())
        if loss > 1.0:
            out = out.detach() * len(hist)
        else:
            out = out.detach() - sum(hist) / len(hist)
        if len(hist) >= 3 and hist[-3] > hist[-1]:
            print("improving", hist[-1], ema[-1])
        return out
    return step, [model, opt], _batches(8), lambda: (list(ema), list(hist))


def best_so_far():
    """``if loss.item() <= min(losses): print("new best")`` and ``max(losses[-3:])``."""
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.3)
    losses, worst = [], []

    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        _update(opt, loss)
        losses.append(loss.item())
        if loss.item() <= min(losses):
            print("new best", min(losses), len(losses))
        worst.append(max(losses[-3:]))
        return loss.detach()
    return step, [model, opt], _batches(8), lambda: (list(losses), list(worst))


@pytest.mark.parametrize("program", [closure_reads, dict_of_lists_reads, trainer_reads,
                                     ema_and_branch_reads, best_so_far])
def test_logged_lists_read_convert(program):
    """What every call reads is the list as eager has it then: one trace, the lists and
    the printed text equal eager's after every step."""
    assert _compare(program) == {"default": "converted", "strict": "converted"}


def test_a_growing_list_over_50_calls_is_one_trace():
    torch.manual_seed(0)
    step, _, batches, state = closure_reads(50)
    torch.manual_seed(0)
    g_step, _, _, g_state = closure_reads(50)
    g = to_graph(g_step, strict=True)
    for x, y in batches:
        exp_out, got_out = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(exp_out):
            step(x, y)
        with contextlib.redirect_stdout(got_out):
            g(x, y)
        assert got_out.getvalue() == exp_out.getvalue()
        assert g_state() == state()
    assert all(type(v) is float for v in g_state()[0] + g_state()[1])
    assert g.cache_info().traces == 1


def test_a_new_list_per_epoch_is_read():
    """``losses = []`` between epochs: the reads are of the list the slot holds then."""
    torch.manual_seed(0)
    step, _, batches, state = closure_reads()
    torch.manual_seed(0)
    g_step, _, _, g_state = closure_reads()
    g = to_graph(g_step, strict=True)
    cells = [c for c in g_step.__closure__ if type(c.cell_contents) is list]
    eager_cells = [c for c in step.__closure__ if type(c.cell_contents) is list]
    for epoch in range(3):
        for c in cells + eager_cells:
            c.cell_contents = []
        for x, y in batches[:3]:
            # (1 ulp: the step's ``loss * losses[0] + n`` fuses to one addcmul, now that the
            # backward before it no longer stops pattern fusion)
            torch.testing.assert_close(g(x, y), step(x, y), rtol=1e-6, atol=0)
        assert g_state() == state()
    assert g.cache_info().traces == 1


# ------------------------------------------------------------ a list passed in
def argument_list(epochs=(4,)):
    """``train_step(x, y, losses)``: the caller's list, read and appended to; a new list
    per epoch (``epochs``: calls per epoch), one holding a number already."""
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    lists = [[] if i % 2 == 0 else [2.5] for i in range(len(epochs))]

    def train_step(x, y, losses):
        loss = F.cross_entropy(model(x), y)
        _update(opt, loss)
        losses.append(loss.item())
        if len(losses) % 2 == 0:
            print("mean of the last two", sum(losses[-2:]) / 2, "first", losses[0])
        return loss.detach() * len(losses)
    batches = _batches(sum(epochs))
    calls = [(x, y, lists[e]) for e, n in enumerate(epochs)
             for x, y in batches[sum(epochs[:e]):sum(epochs[:e]) + n]]
    return train_step, [model, opt], calls, lambda: [list(v) for v in lists]


def test_a_list_passed_in_converts():
    """Its identity is the call's: each call appends to, and reads, the list it is given
    (two lists, one trace)."""
    assert _compare(lambda: argument_list((3, 4))) == {"default": "converted",
                                                       "strict": "converted"}


def test_a_list_passed_over_50_calls_is_one_trace():
    torch.manual_seed(0)
    g_step, _, calls, g_state = argument_list((50,))
    g = to_graph(g_step, strict=True)
    with contextlib.redirect_stdout(io.StringIO()):
        for call in calls:
            g(*call)
    assert len(g_state()[0]) == 50 and all(type(v) is float for v in g_state()[0])
    assert g.cache_info().traces == 1


def returns_its_list():
    """The list passed in, appended to and returned: the caller's own list comes back."""
    hist = []

    def log(x, hist):
        hist.append(x.sum().item())
        return hist
    g = torch.Generator().manual_seed(2)
    return log, [], [(torch.randn(3, generator=g), hist) for _ in range(3)], \
        lambda: list(hist)


def dict_of_lists_argument():
    """A Keras-style history dict passed in: ``hist["loss"].append(...)``, its lists read
    (``hist["loss"][-1]``, ``len(hist["acc"])``), one list left alone, the dict returned."""
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    hists = [{"loss": [], "acc": [], "lr": [0.1]}, {"loss": [9.0], "acc": [], "lr": []}]

    def fit_step(x, y, hist):
        out = model(x)
        loss = F.cross_entropy(out, y)
        _update(opt, loss)
        hist["loss"].append(loss.item())
        hist["acc"].append((out.argmax(1) == y).float().mean().item())
        if len(hist["acc"]) % 2 == 0:
            print("loss", hist["loss"][-1], "first", hist["loss"][0])
        return hist
    calls = [(x, y, hists[i // 3]) for i, (x, y) in enumerate(_batches(6))]
    return fit_step, [model, opt], calls, \
        lambda: [{k: list(v) for k, v in h.items()} for h in hists]


def dict_argument_new_key():
    """A new key set in the dict passed in: falls back naming the line."""
    hist = {"loss": []}

    def log(x, hist):
        hist["loss"].append(x.sum().item())
        hist["last"] = [x.sum().item()]
        return x * 2
    g = torch.Generator().manual_seed(2)
    return log, [], [(torch.randn(3, generator=g), hist) for _ in range(3)], \
        lambda: {k: list(v) for k, v in hist.items()}


def test_a_list_passed_then_returned_is_the_callers():
    assert _compare(returns_its_list) == {"default": "converted", "strict": "converted"}
    step, _, calls, _ = returns_its_list()
    g = to_graph(step, strict=True)
    for call in calls:
        assert g(*call) is call[1]


def test_a_dict_of_lists_argument_converts():
    """Two dicts (one trace: its keys are the signature), each call's own lists, the
    caller's dict returned as itself."""
    assert _compare(dict_of_lists_argument) == {"default": "converted", "strict": "converted"}
    step, _, calls, _ = dict_of_lists_argument()
    g = to_graph(step, strict=True)
    with contextlib.redirect_stdout(io.StringIO()):
        for call in calls:
            assert g(*call) is call[2]
    assert g.cache_info().traces == 1


def test_a_new_key_in_a_dict_argument_falls_back():
    assert _compare(dict_argument_new_key) == {"default": "fallback", "strict": "refused"}


def mixed_kinds():
    """``losses = [0]`` (an int) then floats appended: ``losses[0]``'s kind is known, but
    an item read of a list of ints and floats is refused (which one it reads depends on
    the run's length)."""
    model = _mlp()
    losses = [0]

    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        losses.append(loss.item())
        return loss * losses[-2]
    return step, [model], _batches(3), lambda: list(losses)


def test_an_item_of_mixed_kinds_falls_back_naming_the_line():
    assert _compare(mixed_kinds) == {"default": "fallback", "strict": "refused"}
    step = mixed_kinds()[0]
    x, y = _batches(1)[0]
    with pytest.raises(ConversionError, match=rf"{THIS_FILE}:\d+: the function reads an item "
                                              r"of closure variable 'losses' holding float, "
                                              r"int"):
        to_graph(step, strict=True)(x, y)


def _leaves(dtypes=(torch.float32, torch.float32), grads=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    shapes = [(3, 2), (2,), (4,)][:len(dtypes)]
    params = [torch.randn(s, generator=g, dtype=d).requires_grad_()
              for s, d in zip(shapes, dtypes)]
    if grads:
        for p in params:
            p.grad = torch.randn(p.shape, generator=g, dtype=p.dtype)
    return params


def _leaf_state(params):
    """Each leaf's values and gradient (None or a copy), as the caller sees them."""
    return lambda: [(p.detach().clone(), None if p.grad is None else p.grad.clone())
                    for p in params]


def _refill(params, seed):
    """New gradients between calls, as a backward outside the function would leave."""
    g = torch.Generator().manual_seed(seed)
    for p in params:
        p.grad = torch.randn(p.shape, generator=g, dtype=p.dtype)


# ------------------------------------------------------------------ d2l.ai's helpers
def sgd(params, lr, batch_size):
    """d2l.ai's minibatch SGD (``d2l.sgd``)."""
    with torch.no_grad():
        for param in params:
            param -= lr * param.grad / batch_size
            param.grad.zero_()


def grad_clipping(params, theta):
    """d2l.ai's ``grad_clipping`` (a list of leaves; its module branch reads parameters)."""
    norm = torch.sqrt(sum(torch.sum((p.grad ** 2)) for p in params))
    if norm > theta:
        for param in params:
            param.grad[:] *= theta / norm


class _Calls(list):
    """The calls of a program, with new gradients before each (a backward outside)."""

    def __init__(self, params, calls):
        super().__init__(calls)
        self.params = params

    def __iter__(self):
        for i, call in enumerate(list.__iter__(self)):
            _refill(self.params, 100 + i)
            yield call


def sgd_program(dtypes=(torch.float32, torch.float32)):
    params = _leaves(dtypes)
    return sgd, [], _Calls(params, [(params, 0.1, 4)] * 6), _leaf_state(params)


def clipping_program():
    """Gradients small and large: the tensor ``if`` takes both paths across calls."""
    params = _leaves()
    calls = [(params, theta) for theta in (0.5, 0.5, 100.0, 0.5, 100.0, 0.5)]
    return grad_clipping, [], _Calls(params, calls), _leaf_state(params)


def clip_then_sgd_program():
    """A d2l training step's tail: clip, then update, on the same argument leaves."""
    params = _leaves()

    def step(params, theta):
        grad_clipping(params, theta)
        sgd(params, 0.5, 2)
        return sum(p.sum() for p in params)
    calls = [(params, 1.0)] * 5
    return step, [], _Calls(params, calls), _leaf_state(params)


@pytest.mark.parametrize("program", [sgd_program, clipping_program, clip_then_sgd_program])
def test_d2l_helpers_on_argument_leaves_convert(program):
    """One trace (``theta`` is a Python number: one per value), the leaves and their
    gradients as eager leaves them after every call."""
    traces = 2 if program is clipping_program else 1
    assert _compare(program, traces) == {"default": "converted", "strict": "converted"}


def test_parameters_of_different_dtypes():
    assert _compare(lambda: sgd_program((torch.float32, torch.float64, torch.bfloat16))) == \
        {"default": "converted", "strict": "converted"}


# ------------------------------------------------------------- the gradient's life
def accumulate(w, x):
    """``w.grad is None`` asked (True on the first call, False after), then a backward
    reaching the argument leaf and its ``.grad`` read (made, then accumulated)."""
    fresh = w.grad is None
    loss = (w * x).sum() ** 2
    loss.backward()
    return loss.detach(), w.grad * 1, fresh


def _one_leaf(fn, seed, n):
    """A program calling ``fn(w, x)`` ``n`` times on one argument leaf ``w``."""
    def program():
        g = torch.Generator().manual_seed(seed)
        w = torch.randn(5, generator=g).requires_grad_()
        return fn, [], [(w, torch.randn(5, generator=g)) for _ in range(n)], \
            _leaf_state([w])
    return program


def test_a_grad_that_appears_after_the_first_call():
    """None, then a tensor: two signatures, two traces, never the first call's answer."""
    assert _compare(_one_leaf(accumulate, 3, 5), traces=2) == {"default": "converted",
                                                               "strict": "converted"}


def step_and_forget(w, x):
    """``if w.grad is not None: w.grad.zero_()``, a backward, a copy of the gradient kept,
    then ``w.grad = None`` (the caller's leaf has none after the call)."""
    if w.grad is not None:
        w.grad.zero_()
    F.mse_loss(w * x, x).backward()
    kept = w.grad.data.clone()
    w.grad = None
    return kept, w.grad is None


def test_grad_set_to_none_and_data():
    assert _compare(_one_leaf(step_and_forget, 4, 4)) == {"default": "converted",
                                                          "strict": "converted"}


def scale_grads(params, c):
    """``p.grad.data.mul_(c)`` on argument leaves, and ``is_leaf`` asked."""
    for p in params:
        if p.is_leaf:
            p.grad.data.mul_(c)
    return [p.grad.sum() for p in params]


def test_grad_data_written_in_place():
    def program():
        params = _leaves()
        return scale_grads, [], _Calls(params, [(params, 0.5)] * 4), _leaf_state(params)
    assert _compare(program) == {"default": "converted", "strict": "converted"}


def test_alternating_grad_states_keep_two_graphs():
    """None / tensor / None / tensor: one graph each, the second pair served from the
    cache (the key holds the state, not a guard that retraces)."""
    w = torch.ones(3, requires_grad=True)
    g = to_graph(lambda w: w * 2 if w.grad is None else w + w.grad, strict=True)
    for i in range(6):
        w.grad = None if i % 2 == 0 else torch.full((3,), float(i))
        torch.testing.assert_close(g(w), w * 2 if w.grad is None else w + w.grad,
                                   rtol=0, atol=0)
    assert g.cache_info().traces == 2


def test_a_new_leaf_per_call_reads_its_own_grad():
    """Each call's argument is another tensor: the graph reads that call's ``.grad``."""
    g = to_graph(lambda p: p.grad * 2, strict=True)
    for i in range(4):
        p = torch.zeros(2, requires_grad=True)
        p.grad = torch.full((2,), float(i))
        torch.testing.assert_close(g(p), torch.full((2,), 2.0 * i), rtol=0, atol=0)
    assert g.cache_info().traces == 1


def returns_grad(w):
    return w.grad


def adds_then_sums(w):
    w.grad.add_(1)
    return w.grad.sum()


def reads_then_forgets(w):
    g = w.grad
    w.grad = None
    return g * 2


def sets_a_new_grad(w):
    w.grad = w.grad * 2
    return w * 3


@pytest.mark.parametrize("fn", [returns_grad, adds_then_sums, reads_then_forgets,
                                sets_a_new_grad])
def test_grad_reads_and_writes_as_eager(fn):
    """Values, which result is the caller's ``.grad`` (``is``), the gradient after the
    call, and gradients the caller kept from earlier calls (never overwritten by a later
    run), one trace per gradient state."""
    eager, conv = torch.ones(3, requires_grad=True), torch.ones(3, requires_grad=True)
    g = to_graph(fn, strict=True)
    kept = []
    for i in range(4):
        for w in (eager, conv):
            if w.grad is None:
                w.grad = torch.full((3,), float(i))
        kept.append((eager.grad, conv.grad))
        exp, got = fn(eager), g(conv)
        torch.testing.assert_close(got, exp, rtol=0, atol=0)
        assert (got is conv.grad) == (exp is eager.grad)
        assert (conv.grad is None) == (eager.grad is None)
        if eager.grad is not None:
            torch.testing.assert_close(conv.grad, eager.grad, rtol=0, atol=0)
    for e, c in kept:
        torch.testing.assert_close(c, e, rtol=0, atol=0)
    assert g.cache_info().traces == 1


def test_a_gradient_unlike_its_parameter_falls_back():
    """A gradient with other strides than its parameter (the graph's read would make a
    tensor like the parameter): falls back naming the line; strict refuses."""
    w = torch.randn(3, 4).requires_grad_()
    w.grad = torch.randn(4, 3).t()

    def double(w):
        return w.grad * 2
    with pytest.warns(FallbackWarning, match=rf"{THIS_FILE}:\d+: .grad of an argument whose "
                                             r"gradient is not like it"):
        out = to_graph(double)(w)
    torch.testing.assert_close(out, w.grad * 2)
    with pytest.raises(ConversionError, match="gradient is not like it"):
        to_graph(double, strict=True)(w)


def test_plain_calls_keep_their_keys():
    """A function that never reads an argument's ``.grad``: a gradient appearing on an
    argument leaf is no new trace."""
    w = torch.ones(3, requires_grad=True)
    g = to_graph(lambda w: w * 3, strict=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        g(w)
        w.grad = torch.ones(3)
        g(w)
    assert g.cache_info().traces == 1
