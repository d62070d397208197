"""Training-step state that fell back and now converts (issue 15): a list the step appends
Python numbers to (``runtime.appended_lists``) and a counter on an ``nn.Module``
(``runtime.module_numbers``).

Each program builds its model, optimizer and Python state from one seed and returns
``(step, objs, batches, python_state)``; it runs eagerly, then with ``to_graph(step)`` in
default and strict mode, for STEPS steps; what the step returns, every parameter,
gradient and buffer, the optimizer's state and the Python state after *every* step (the
list's items with their Python types, the counters) must equal eager's exactly, in one
trace where the program converts.
"""
from __future__ import annotations

import inspect
import warnings

import pytest
import torch
import torch.nn.functional as F

from tests.training.test_step_fallbacks_closed import _compare as compare_steps, _exact
from tests.training.test_training_programs import _batches
from transpiler import ConversionError, FallbackWarning, to_graph

STEPS = 5
THIS_FILE = __file__.rsplit("/", 1)[-1]
SIZES = [(8, 12, 4), (16, 32, 3)]


def _compare(program, traces=1):
    """Each mode against eager (``test_step_fallbacks_closed._compare``: Python state
    after every step, exactly): a converted run traced at most ``traces`` times."""
    return compare_steps(program, max_traces=traces, this_file=THIS_FILE)


def _update(opt, loss):
    """The usual update, as a helper the step calls (converted with it)."""
    opt.zero_grad()
    loss.backward()
    opt.step()


def _mlp(size):
    n_in, n_hidden, n_out = size
    return torch.nn.Sequential(torch.nn.Linear(n_in, n_hidden), torch.nn.ReLU(),
                               torch.nn.Linear(n_hidden, n_out))


def _data(size, cls=True):
    return _batches(STEPS, (6, size[0]), size[2] if cls else None)


# ----------------------------------------------------------------------- appended lists
def closure_losses(size):
    """``losses.append(loss.item())``, the list in a closure cell."""
    model = _mlp(size)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []

    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        _update(opt, loss)
        losses.append(loss.item())
        return loss
    return step, [model, opt], _data(size), lambda: list(losses)


HISTORY = []


def global_history(size):
    """``history.append(float(loss))`` and an int count, the list a global (rebound to a
    new list before the program runs: the slot is read when the graph runs)."""
    global HISTORY
    HISTORY = []
    model = _mlp(size)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)

    def step(x, y):
        out = model(x)
        _update(opt, F.cross_entropy(out, y))
        loss = F.cross_entropy(out.detach(), y)
        HISTORY.append(float(loss))
        HISTORY.append((out.argmax(1) == y).sum().item())
        return out.detach()
    return step, [model, opt], _data(size), lambda: list(HISTORY)


class Trainer:
    """A Lightning-free trainer: a log list and a step counter on ``self``."""

    def __init__(self, size):
        self.model = _mlp(size)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.05)
        self.log = []
        self.global_step = 0

    def train_step(self, x, y):
        loss = F.cross_entropy(self.model(x), y)
        _update(self.opt, loss)
        self.global_step += 1
        self.log.append(loss.item())
        if self.global_step % 2 == 0:
            self.log.append(self.global_step)
        return loss


def trainer_method(size):
    t = Trainer(size)
    return t.train_step, [t.model, t.opt], _data(size), \
        lambda: (list(t.log), t.global_step)


def dict_of_lists(size):
    """``hist["loss"].append(...)``, ``hist["grad"].append(clip norm)``: a dict of lists,
    with a meter updated between them."""
    from tests.training.test_step_fallbacks_closed import TimmAverageMeter
    model = _mlp(size)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    hist = {"loss": [], "grad": []}
    meter = TimmAverageMeter()

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        hist["loss"].append(loss.item())
        meter.update(loss.item(), x.size(0))
        hist["grad"].append(norm.item())
        return loss
    return step, [model, opt], _data(size), \
        lambda: ({k: list(v) for k, v in hist.items()}, meter.sum, meter.count)


class LoggingModule(torch.nn.Module):
    """A LightningModule-shaped model: ``training_step`` appends to ``self.outputs``."""

    def __init__(self, size):
        super().__init__()
        self.net = _mlp(size)
        self.outputs = []

    def training_step(self, x, y):
        loss = F.cross_entropy(self.net(x), y)
        self.outputs.append(loss.item())
        return loss


def module_list(size):
    m = LoggingModule(size)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)

    def step(x, y):
        loss = m.training_step(x, y)
        _update(opt, loss)
        return loss
    return step, [m, opt], _data(size), lambda: list(m.outputs)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("program", [closure_losses, global_history, trainer_method,
                                     dict_of_lists, module_list])
def test_appended_lists_convert(program, size):
    traces = 2 if program is dict_of_lists else 1   # (the meter's int sum turns float)
    assert _compare(lambda: program(size), traces) == {"default": "converted",
                                                       "strict": "converted"}


def test_new_list_per_epoch_is_not_a_retrace():
    """``losses = []`` between epochs: the graph appends to the list the slot holds."""
    torch.manual_seed(0)
    step, _, batches, state = closure_losses(SIZES[0])
    torch.manual_seed(0)
    g_step, _, _, g_state = closure_losses(SIZES[0])
    cell = next(c for c in g_step.__closure__ if type(c.cell_contents) is list)
    eager_cell = next(c for c in step.__closure__ if type(c.cell_contents) is list)
    g = to_graph(g_step, strict=True)
    for epoch in range(2):
        cell.cell_contents, eager_cell.cell_contents = [], []
        for x, y in batches[:3]:
            step(x, y)
            g(x, y)
        _exact(g_state(), state(), f"epoch {epoch}")
        assert all(type(v) is float for v in g_state())
    assert g.cache_info().traces == 1


def misused_list(size, how):
    """A list used otherwise than appended numbers: ``len(losses)`` read (now a read when
    the graph runs: ``runtime.list_reads``), ``sorted(losses)`` (iterating it: the trace
    would keep what it held), a tensor appended, an append in a tensor branch."""
    model = _mlp(size)
    losses = []

    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        if how == "tensor":
            losses.append(loss.detach())
        elif how == "branch":
            if loss > 1.0:
                losses.append(loss.item())
        elif how == "sorted":
            losses.append(loss.item())
            loss = loss * sorted(losses)[0]
        else:
            losses.append(loss.item())
            loss = loss * len(losses)
        return loss
    return step, [model], _data(size), lambda: [float(v) for v in losses]


def test_a_read_length_converts():
    """``loss * len(losses)``: the length when the graph runs, one trace."""
    assert _compare(lambda: misused_list(SIZES[0], "read")) == {"default": "converted",
                                                                "strict": "converted"}


@pytest.mark.parametrize("how", ["sorted", "tensor", "branch"])
def test_other_list_uses_fall_back(how):
    """Never a stale list: these fall back naming the line (strict: ConversionError),
    with eager's results."""
    assert _compare(lambda: misused_list(SIZES[0], how)) == {"default": "fallback",
                                                             "strict": "refused"}


def test_a_read_of_the_list_is_the_reason_given():
    """The refusal names the line reading the list, and why."""
    step = misused_list(SIZES[0], "sorted")[0]
    x, y = _data(SIZES[0])[0]
    lines, first = inspect.getsourcelines(step)
    line = first + next(i for i, text in enumerate(lines) if "sorted(losses)" in text)
    with pytest.raises(ConversionError, match=rf"{THIS_FILE}:{line}: the function reads "
                                              r"closure variable 'losses', a list it "
                                              r"appends to"):
        to_graph(step, strict=True)(x, y)


# ---------------------------------------------------------------------- module counters
class Counted(torch.nn.Module):
    """``self.step += 1`` in forward and ``if self.step % 2 == 0:`` reading it."""

    def __init__(self, size):
        super().__init__()
        self.net = _mlp(size)
        self.step = 0

    def forward(self, x):
        self.step += 1
        y = self.net(x)
        if self.step % 2 == 0:
            y = y * 0.5
        return y


def module_forward_counter(size):
    m = Counted(size)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)

    def step(x, y):
        loss = F.cross_entropy(m(x), y)
        _update(opt, loss)
        return loss
    return step, [m, opt], _data(size), lambda: m.step


def step_counts_on_model(size):
    """fairseq's ``model.num_updates += 1`` and a float total kept on the model (and a
    NaN the step leaves alone: no change, ``module_containers`` compares NaN as equal)."""
    model = _mlp(size)
    model.num_updates, model.unset = 0, float("nan")
    model.total = 0.0
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)

    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        _update(opt, loss)
        model.num_updates += 1
        model.total += loss.item()
        return loss, model.num_updates
    return step, [model, opt], _data(size), lambda: (model.num_updates, model.total)


class Layer(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = torch.nn.Linear(n, n)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return torch.tanh(self.lin(x)) * (1.0 + 0.1 * self.calls)


def submodule_counter(size):
    model = torch.nn.Sequential(torch.nn.Linear(size[0], size[1]), Layer(size[1]),
                                torch.nn.Linear(size[1], size[2]))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        _update(opt, loss)
        return loss
    return step, [model, opt], _data(size), lambda: model[1].calls


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("program", [module_forward_counter, step_counts_on_model,
                                     submodule_counter])
def test_module_counters_convert(program, size):
    assert _compare(lambda: program(size)) == {"default": "converted", "strict": "converted"}


def test_to_graph_module_counts_its_calls():
    """``to_graph(model)`` with a counter in its own forward: one trace, eager's ints."""
    torch.manual_seed(0)
    eager, conv = Counted(SIZES[0]), Counted(SIZES[0])
    conv.load_state_dict(eager.state_dict())
    g = to_graph(conv, strict=True)
    for x, _ in _data(SIZES[0]):
        torch.testing.assert_close(g(x), eager(x), rtol=0, atol=0)
        assert type(conv.step) is int and conv.step == eager.step
    assert g.cache_info().traces == 1


def test_counter_set_by_caller_is_read():
    """The caller resets the counter between calls: the graph reads it when it runs."""
    torch.manual_seed(0)
    m = Counted(SIZES[0])
    g = to_graph(m, strict=True)
    x = torch.randn(3, SIZES[0][0])
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        a = g(x)        # step 1: not halved
        b = g(x)        # step 2: halved
        m.step = 0
        c = g(x)        # step 1 again
    torch.testing.assert_close(b, a * 0.5)
    torch.testing.assert_close(c, a)
    assert m.step == 1 and g.cache_info().traces == 1


def int_total_on_model(size):
    """``model.total = 0`` then ``model.total += loss.item()``: the int becomes a float
    (one more trace, as a Trainer's), and ``model.best = min(...)`` of numbers."""
    model = _mlp(size)
    model.total, model.best = 0, 10.0
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        _update(opt, loss)
        model.total += loss.item()
        model.best = min(model.best, loss.item())
        return loss
    return step, [model, opt], _data(size), lambda: (model.total, model.best)


def test_module_number_turning_float_converts():
    assert _compare(lambda: int_total_on_model(SIZES[1]), traces=2) == {
        "default": "converted", "strict": "converted"}


# ------------------------------------------------------------ BatchNorm momentum=None
class SmallCNN(torch.nn.Module):
    def __init__(self, channels, n_cls):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, channels, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(channels, momentum=None)
        self.head = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(channels * 16, 16),
                                        torch.nn.BatchNorm1d(16, momentum=None),
                                        torch.nn.ReLU(), torch.nn.Linear(16, n_cls))

    def forward(self, x):
        return self.head(F.relu(self.bn(self.conv(x))))


def cumulative_batchnorm(size):
    """Train steps with an eval forward after each (running statistics used)."""
    model = SmallCNN(size[1] // 2, size[2])
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def step(x, y):
        model.train()
        loss = F.cross_entropy(model(x), y)
        _update(opt, loss)
        model.eval()
        with torch.no_grad():
            val = model(x)
        return loss, val
    gen = torch.Generator().manual_seed(5)
    batches = [(torch.randn(6, 3, 4, 4, generator=gen), y) for _, y in _data(size)]
    return step, [model, opt], batches, \
        lambda: [b.clone() for b in model.buffers()]


@pytest.mark.parametrize("size", SIZES)
def test_cumulative_batchnorm_converts(size):
    """Two traces: the first call finds the model in train mode, the next in eval mode
    (``model.eval()`` at the step's end: the mode a call finds is guarded)."""
    assert _compare(lambda: cumulative_batchnorm(size), traces=2) == {
        "default": "converted", "strict": "converted"}


def test_cumulative_batchnorm_bits():
    """Running mean/var and the count bit for bit as eager's, forward-only in train mode
    (the factor 1/n computed in Python double each run)."""
    torch.manual_seed(0)
    eager = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.BatchNorm1d(7, momentum=None))
    conv = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.BatchNorm1d(7, momentum=None))
    conv.load_state_dict(eager.state_dict())
    g = to_graph(conv, strict=True)
    for i in range(6):
        x = torch.randn(9, 5) * (i + 1)
        assert torch.equal(g(x), eager(x))
        for a, b in zip(conv.buffers(), eager.buffers()):
            assert a.dtype == b.dtype and torch.equal(a, b)
    assert int(conv[1].num_batches_tracked) == 6 and g.cache_info().traces == 1
    assert type(conv[1]) is torch.nn.BatchNorm1d       # (its class back after the trace)


# ------------------------------------------------------------------- inference_mode
def inference_mode_eval(size):
    """Evaluation inside the training function under ``torch.inference_mode()``: converts
    (``runtime.inference_ops``: its ops run in inference mode, so ``val`` is an inference
    tensor as eager's; tests/training/test_step_inference_and_hidden.py compares that)."""
    model = _mlp(size)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        _update(opt, loss)
        with torch.inference_mode():
            val = F.cross_entropy(model(x), y)
        return loss.detach(), val
    return step, [model, opt], _data(size), lambda: None


def test_inference_mode_in_a_step_converts():
    assert _compare(lambda: inference_mode_eval(SIZES[0])) == {"default": "converted",
                                                               "strict": "converted"}
