"""Training steps with evaluation under ``torch.inference_mode()`` (``runtime.inference_ops``),
hidden state kept across calls with its autograd history or in a tuple
(``runtime.carried_tensors``) and ``AveragedModel.update_parameters``
(``runtime.averaged_models``), eager against ``to_graph(step)`` (issue 15).

Each program builds its model, optimizer and Python state from one seed and returns
``(step, objs, batches, python_state)``. The runner runs it eagerly, then converted in
default and strict mode, and after *every* step compares: the returned values (values,
dtypes, structure) and each returned tensor's kind exactly (``is_inference()``,
``requires_grad``, ``grad_fn is None``, ``is_leaf``); every parameter, gradient and buffer
and the optimizer's state, bit for bit; the Python state (``python_state()``: the hidden
state kept, with the same kinds); and the error a step raises (type and first line), at
the same step, with the state eager leaves before it.
"""
from __future__ import annotations

import inspect
import re
import warnings

import pytest
import torch
import torch.nn.functional as F

from tests.e2e.e2e_helpers import assert_same
from tests.training.test_foreign_training import RNNModel, repackage_hidden
from tests.training.test_step_python_state import _exact as _bits
from tests.training.test_training_programs import _batches, _norm, _state
from transpiler import ConversionError, FallbackWarning, to_graph

STEPS = 4
THIS_FILE = __file__.rsplit("/", 1)[-1]


# ------------------------------------------------------------------------------ runner
def _kind(v):
    """What a value is, exactly, beyond its values."""
    if isinstance(v, torch.Tensor):
        return ("tensor", type(v).__name__, v.dtype, tuple(v.shape), v.is_inference(),
                v.requires_grad, v.grad_fn is None, v.is_leaf)
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, tuple(_kind(x) for x in v))
    if isinstance(v, dict):
        return ("dict", tuple((k, _kind(x)) for k, x in v.items()))
    return (type(v).__name__,)


def _same_kinds(got, exp) -> bool:
    """Kinds equal (a Python number of eager's kind is one: runtime/returned_numbers.py)."""
    if exp[0] in ("tuple", "list", "dict") and got[0] == exp[0]:
        return len(got[1]) == len(exp[1]) and all(
            _same_kinds(g, e) for g, e in zip(got[1], exp[1]))
    return got == exp


def _snap(v):
    """A copy of ``v``'s values (tensors detached and cloned) for later comparison."""
    if isinstance(v, torch.Tensor):
        return v.detach().clone()
    if isinstance(v, (list, tuple)):
        return type(v)(_snap(x) for x in v)
    if isinstance(v, dict):
        return {k: _snap(x) for k, x in v.items()}
    return v


def _run(program, mode, steps):
    torch.manual_seed(0)
    step, objs, batches, python_state = program()
    if mode != "eager":
        step = to_graph(step, strict=(mode == "strict"))
    records = []
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        torch.manual_seed(1)
        for b in batches[:steps]:
            try:
                out, error = step(*b), None
            except ConversionError:
                raise
            except RuntimeError as e:
                out, error = None, (type(e).__name__, str(e).splitlines()[0])
            kept = python_state()
            records.append((_snap(out), _kind(out), error, _norm(_state(objs)), _snap(kept),
                            _kind(kept)))
            if error is not None:
                break
    fallbacks = [str(w.message) for w in rec if issubclass(w.category, FallbackWarning)]
    traces = None if mode == "eager" or fallbacks else step.cache_info().traces
    return records, fallbacks, traces


def _compare(program, steps=STEPS, max_traces=2):
    """{mode: 'converted' | 'fallback' | 'refused'} after checking each mode against
    eager step by step (a fallback must name a line of this file)."""
    expected, _, _ = _run(program, "eager", steps)
    results = {}
    for mode in ("default", "strict"):
        try:
            got, fallbacks, traces = _run(program, mode, steps)
        except ConversionError as e:
            assert mode == "strict", e
            assert re.search(rf"{THIS_FILE}:\d+", str(e)), str(e)
            results[mode] = "refused"
            continue
        for msg in fallbacks:
            assert re.search(rf"{THIS_FILE}:\d+", msg), msg
        assert len(got) == len(expected), f"{mode}: {len(got)} steps != {len(expected)}"
        for i, (g, e) in enumerate(zip(got, expected)):
            where = f"{mode}.step{i}"
            assert g[2] == e[2], f"{where}: error {g[2]} != {e[2]}"
            assert_same(g[0], e[0], f"{where}.returned")
            assert _same_kinds(g[1], e[1]), f"{where}: returned kinds {g[1]} != {e[1]}"
            _bits(g[3], e[3], f"{where}.state")
            assert_same(g[4], e[4], f"{where}.kept")
            assert _same_kinds(g[5], e[5]), f"{where}: kept kinds {g[5]} != {e[5]}"
        if not fallbacks:
            assert traces <= max_traces, f"{mode}: {traces} traces"
        results[mode] = "fallback" if fallbacks else "converted"
    return results


CONVERTED = {"default": "converted", "strict": "converted"}
FALLS_BACK = {"default": "fallback", "strict": "refused"}


def _mlp(bn=False):
    layers = [torch.nn.Linear(8, 12)] + ([torch.nn.BatchNorm1d(12)] if bn else []) + \
        [torch.nn.ReLU(), torch.nn.Linear(12, 4)]
    return torch.nn.Sequential(*layers)


def _data(n=STEPS):
    return _batches(n, (6, 8), 4)


def _update(opt, loss):
    opt.zero_grad()
    loss.backward()
    opt.step()


# ------------------------------------------------------------------- inference_mode
def prog_eval_in_the_step():
    """The usual update, then evaluation under ``inference_mode``: the loss, an accuracy's
    ``.item()`` and the value itself (an inference tensor, as eager's)."""
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        _update(opt, loss)
        with torch.inference_mode():
            logits = model(x)
            val = F.cross_entropy(logits, y)
            acc = (logits.argmax(1) == y).float().mean()
        return loss.detach(), val, acc.item(), val.is_inference(), val * 2
    return step, [model, opt], _data(), lambda: None


def prog_no_grad_and_inference_side_by_side():
    """``no_grad`` and ``inference_mode`` evaluations of the same model in one step: the
    first gives normal tensors, the second inference tensors."""
    model = _mlp(bn=True)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)

    def step(x, y):
        model.train()
        _update(opt, F.cross_entropy(model(x), y))
        model.eval()
        with torch.no_grad():
            a = model(x)
        with torch.inference_mode():
            b = model(x)
        return a, b, (a - b).abs().max(), a.is_inference(), b.is_inference()
    return step, [model, opt], _data(), lambda: None


def prog_inference_mode_false_inside():
    """``inference_mode(False)`` inside a region: what it computes records autograd (a
    second loss backpropagated), what the region computes does not."""
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    def step(x, y):
        with torch.inference_mode():
            probe = model(x).softmax(-1)
            with torch.inference_mode(False):
                loss = F.cross_entropy(model(x), y)
            top = probe.max(-1).values
        _update(opt, loss)
        return loss.detach(), probe, top, loss.requires_grad
    return step, [model, opt], _data(), lambda: None


def prog_nested_modes():
    """``inference_mode`` inside ``no_grad`` and inside itself, ``enable_grad`` inside
    ``inference_mode`` (inference mode wins: no history), and grad mode after."""
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(x, y):
        with torch.no_grad():
            with torch.inference_mode():
                a = model(x)
                with torch.inference_mode():
                    b = a + 1
                with torch.enable_grad():
                    c = model(x) * 2
            d = model(x)
        loss = F.cross_entropy(model(x), y)
        _update(opt, loss)
        return a, b, c, d, loss.detach(), torch.is_grad_enabled()
    return step, [model, opt], _data(), lambda: None


@torch.inference_mode()
def _evaluate(model, x, y):
    """A helper decorated with ``@torch.inference_mode()`` (converted with the step)."""
    logits = model(x)
    return F.cross_entropy(logits, y), logits.argmax(1)


def prog_decorated_helper():
    model = _mlp()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)

    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        _update(opt, loss)
        val, pred = _evaluate(model, x, y)
        return loss.item(), val, pred, val.item()
    return step, [model, opt], _data(), lambda: None


def prog_batchnorm_statistics_in_inference_mode():
    """BatchNorm left in training mode under ``inference_mode``: its running statistics
    are updated in place there (normal tensors may be written in the mode)."""
    model = _mlp(bn=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(x, y):
        _update(opt, F.cross_entropy(model(x), y))
        with torch.inference_mode():
            out = model(x * 2)
        return out, model[1].running_mean * 1
    return step, [model, opt], _data(), lambda: None


def prog_inference_value_fed_to_autograd():
    """A value made under ``inference_mode`` used in a loss: eager raises torch's
    "Inference tensors cannot be saved for backward" on step 1; so does the converted
    step (the same error, the same state)."""
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(x, y):
        with torch.inference_mode():
            target = model(x).softmax(-1)
        loss = (model(x).log_softmax(-1) * target).sum()
        _update(opt, loss)
        return loss.detach()
    return step, [model, opt], _data(), lambda: None


def prog_inference_value_written_in_place():
    """An in-place write outside the mode to a value made in it: torch's error."""
    model = _mlp()

    def step(x, y):
        with torch.inference_mode():
            out = model(x)
        out.clamp_(min=0)
        return out
    return step, [model], _data(), lambda: None


def prog_inference_value_kept_across_calls():
    """An inference tensor kept in a closure list: not carried (a copy would not be an
    inference tensor), the step falls back naming the line."""
    model = _mlp()
    kept = [torch.zeros(6, 4)]

    def step(x, y):
        with torch.inference_mode():
            out = model(x)
        kept[0] = out
        return out.sum()
    return step, [model], _data(), lambda: kept[0]


class _Meter:
    """An AverageMeter (numbers only: its update is deferred, runtime.deferred_calls)."""

    def __init__(self):
        self.sum, self.count, self.avg = 0.0, 0, 0.0

    def update(self, val, n=1):
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


def prog_python_numbers_in_the_region():
    """A meter fed ``acc.item()`` and a closure counter bumped inside the region, both
    then used in the loss that autograd records: eager's Python numbers have no mode, so
    their graph stand-ins are no inference tensors."""
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    meter, steps = _Meter(), [0]

    def step(x, y):
        with torch.inference_mode():
            acc = (model(x).argmax(1) == y).float().mean()
            meter.update(acc.item(), x.shape[0])
            steps[0] += 1
        loss = F.cross_entropy(model(x), y) * (1 + meter.avg) * steps[0]
        _update(opt, loss)
        return loss.detach(), meter.avg
    return step, [model, opt], _data(), lambda: (meter.sum, meter.count, steps[0])


INFERENCE_CONVERTS = [prog_python_numbers_in_the_region, prog_eval_in_the_step, prog_no_grad_and_inference_side_by_side,
                      prog_inference_mode_false_inside, prog_nested_modes,
                      prog_decorated_helper, prog_batchnorm_statistics_in_inference_mode,
                      prog_inference_value_fed_to_autograd,
                      prog_inference_value_written_in_place]


@pytest.mark.parametrize("program", INFERENCE_CONVERTS, ids=lambda f: f.__name__[5:])
def test_inference_mode_in_a_step(program):
    assert _compare(program) == CONVERTED


def test_eager_errors_happen_on_the_first_step():
    """(the two error programs above do fail, eagerly, at step 1: the comparison is not
    vacuous)"""
    for program in (prog_inference_value_fed_to_autograd,
                    prog_inference_value_written_in_place):
        records, _, _ = _run(program, "eager", STEPS)
        assert len(records) == 1 and records[0][2][0] == "RuntimeError", records[0][2]


def prog_inference_value_in_a_branch_under_autograd():
    """The same misuse inside a tensor ``if``: eager may not reach it, so it is not raised
    while tracing; the step falls back naming the line and eager raises its error."""
    model = _mlp()

    def step(x, y):
        with torch.inference_mode():
            target = model(x).softmax(-1)
        if x.sum() > -100:
            loss = (model(x).log_softmax(-1) * target).sum()
        else:
            loss = model(x).sum()
        return loss.detach()
    return step, [model], _data(), lambda: None


def test_inference_value_in_a_branch_under_autograd_falls_back():
    assert _compare(prog_inference_value_in_a_branch_under_autograd) == FALLS_BACK


def test_inference_value_kept_across_calls_falls_back():
    assert _compare(prog_inference_value_kept_across_calls) == FALLS_BACK


def test_inference_mode_ops_are_recorded_as_such():
    """The graph's ops made in the region are ``InferenceOp`` nodes; the caller's mode is
    part of the signature (a call under ``inference_mode`` traces its own graph, whose
    ops are plain)."""
    model = _mlp()

    def f(x):
        with torch.inference_mode():
            y = model(x)
        return y, x * 2
    g = to_graph(f, strict=True)
    x = torch.randn(3, 8)
    ops = [n.op for n in g.graph(x).nodes]
    assert "inference_linear" in ops and "mul" in ops, ops
    y, z = g(x)
    assert y.is_inference() and not z.is_inference()
    with torch.inference_mode():
        y2, z2 = g(x)
        assert [n.op for n in g.graph(x).nodes].count("inference_linear") == 0
    assert y2.is_inference() and z2.is_inference()
    assert g.cache_info().traces == 2
    assert torch.equal(y, y2) and torch.equal(z, z2)


# ------------------------------------------------------------------------ hidden state
def _tokens(n=STEPS, seq=5, bsz=2, ntoken=12):
    g = torch.Generator().manual_seed(3)
    return [(torch.randint(0, ntoken, (seq, bsz), generator=g),
             torch.randint(0, ntoken, (seq * bsz,), generator=g)) for _ in range(n)]


def prog_word_lm_hidden_in_a_list():
    """word_language_model's train(): the hidden tuple kept between batches *with* its
    history (``hidden[0] = h``), repackaged at the start of the next; clip, manual SGD."""
    model = RNNModel()             # (word_language_model's, with dropout)
    hidden = [model.init_hidden(2)]

    def step(data, targets):
        model.zero_grad()
        h = repackage_hidden(hidden[0])
        output, h = model(data, h)
        loss = F.nll_loss(output, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-2.0)
        hidden[0] = h
        return loss.item()
    return step, [model], _tokens(), lambda: hidden[0]


def prog_gru_state_in_a_list():
    """A GRU's state (one tensor) kept with its history, detached by the next step."""
    rnn = torch.nn.GRU(8, 6, batch_first=True)
    head = torch.nn.Linear(6, 4)
    opt = torch.optim.Adam(list(rnn.parameters()) + list(head.parameters()), lr=1e-2)
    state = [torch.zeros(1, 6, 6)]

    def step(x, y):
        out, h = rnn(x.unsqueeze(1), state[0].detach())
        loss = F.cross_entropy(head(out[:, -1]), y)
        _update(opt, loss)
        state[0] = h
        return loss.detach(), h.requires_grad
    return step, [rnn, head, opt], _data(), lambda: state[0]


def prog_lstm_state_in_a_dict():
    """``(h, c)`` kept in a dict, detached before it is stored (no history)."""
    rnn = torch.nn.LSTM(8, 5)
    head = torch.nn.Linear(5, 4)
    opt = torch.optim.SGD(list(rnn.parameters()) + list(head.parameters()), lr=0.1)
    memory = {"hc": (torch.zeros(1, 6, 5), torch.zeros(1, 6, 5))}

    def step(x, y):
        out, (h, c) = rnn(x.unsqueeze(0), memory["hc"])
        loss = F.cross_entropy(head(out[0]), y)
        _update(opt, loss)
        memory["hc"] = (h.detach(), c.detach())
        return loss.detach()
    return step, [rnn, head, opt], _data(), lambda: memory["hc"]


class _Trainer:
    def __init__(self, cell):
        self.cell = cell
        self.hidden = None


def prog_lstm_cell_state_on_an_object():
    """An ``LSTMCell``'s ``(h, c)`` on a trainer object, with history, and a ``nonlocal``
    step count beside it."""
    cell = torch.nn.LSTMCell(8, 4)
    opt = torch.optim.SGD(cell.parameters(), lr=0.1)
    trainer = _Trainer(cell)
    trainer.hidden = (torch.zeros(6, 4), torch.zeros(6, 4))
    count = 0

    def step(x, y):
        nonlocal count
        h, c = (v.detach() for v in trainer.hidden)
        h, c = trainer.cell(x, (h, c))
        loss = F.cross_entropy(h, y)
        _update(opt, loss)
        trainer.hidden = (h, c)
        count += 1
        return loss.detach(), count
    return step, [cell, opt], _data(), lambda: (trainer.hidden, count)


def prog_state_kept_with_history_then_backward():
    """The state kept with its history and *not* detached: step 2's backward reaches
    step 1's freed graph; eager raises torch's "Trying to backward through the graph a
    second time", and so does the converted step, at step 2, the state left as eager's."""
    cell = torch.nn.GRUCell(8, 6)
    opt = torch.optim.SGD(cell.parameters(), lr=0.1)
    state = [torch.zeros(6, 6)]

    def step(x, y):
        h = cell(x, state[0])
        loss = h.pow(2).mean()
        _update(opt, loss)
        state[0] = h
        return loss.detach()
    return step, [cell, opt], _data(), lambda: state[0]


def prog_state_kept_with_history_retain_graph():
    """The same with ``backward(retain_graph=True)``: each backward runs through every
    step kept (gradients reach the earlier steps' graphs), as eager's."""
    cell = torch.nn.GRUCell(8, 6)
    state = [torch.zeros(6, 6)]
    grads = []

    def step(x, y):
        h = cell(x, state[0])
        cell.zero_grad()
        h.pow(2).mean().backward(retain_graph=True)
        state[0] = h
        return cell.weight_hh.grad.clone()
    return step, [cell], _data(), lambda: state[0]


def prog_nonlocal_tuple_state():
    """A tuple rebound with ``nonlocal`` (a closure cell), with history."""
    rnn = torch.nn.LSTM(8, 3)
    opt = torch.optim.SGD(rnn.parameters(), lr=0.1)
    hidden = (torch.zeros(1, 6, 3), torch.zeros(1, 6, 3))

    def step(x, y):
        nonlocal hidden
        out, hidden = rnn(x.unsqueeze(0), tuple(v.detach() for v in hidden))
        loss = out.pow(2).sum()
        _update(opt, loss)
        return loss.detach()
    return step, [rnn, opt], _data(), lambda: hidden


class StatefulLSTM(torch.nn.Module):
    """A module keeping its own ``(h, c)`` between calls (``self.hidden``), detached when
    read (``detach_on_read``) or when stored."""

    def __init__(self, detach_on_read=True):
        super().__init__()
        self.rnn = torch.nn.LSTM(8, 5)
        self.head = torch.nn.Linear(5, 4)
        self.detach_on_read = detach_on_read
        self.hidden = (torch.zeros(1, 6, 5), torch.zeros(1, 6, 5))

    def forward(self, x):
        h = tuple(v.detach() for v in self.hidden) if self.detach_on_read else self.hidden
        out, hidden = self.rnn(x.unsqueeze(0), h)
        self.hidden = hidden if self.detach_on_read else tuple(v.detach() for v in hidden)
        return self.head(out[0])


class StatefulGRUCell(torch.nn.Module):
    """A cell keeping its state on itself *with* history, never detached (each backward
    retains the graph: it runs through every call kept, as eager's)."""

    def __init__(self):
        super().__init__()
        self.cell = torch.nn.GRUCell(8, 6)
        self.h = torch.zeros(6, 6)     # (not "state": a name SGD has too, see the report)

    def forward(self, x):
        self.h = self.cell(x, self.h)
        return self.h


def _module_state_program(name, module, kept):
    """A step training ``module()`` (its state kept on itself); with history kept, the
    backward retains the graph and no optimizer changes the weights the kept graphs saved
    (eager would raise there, after its forward stored the state: a graph stores a
    module's attributes at the end of the run, see the report)."""
    def program():
        model = module()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)

        def step(x, y):
            out = model(x)
            model.zero_grad()
            if out.shape[1] == 4:
                loss = F.cross_entropy(out, y)
                loss.backward()
                opt.step()
            else:
                loss = out.pow(2).mean()
                loss.backward(retain_graph=True)
            return loss.detach()
        return step, [model, opt], _data(), lambda: getattr(model, kept)
    program.__name__ = f"prog_{name}"
    return program


prog_module_tuple_with_history = _module_state_program(
    "module_tuple_with_history", StatefulLSTM, "hidden")
prog_module_tuple_detached = _module_state_program(
    "module_tuple_detached", lambda: StatefulLSTM(detach_on_read=False), "hidden")
prog_module_state_retain_graph = _module_state_program(
    "module_state_retain_graph", StatefulGRUCell, "h")


HIDDEN_CONVERTS = [prog_module_tuple_with_history, prog_module_tuple_detached,
                   prog_module_state_retain_graph, prog_word_lm_hidden_in_a_list, prog_gru_state_in_a_list,
                   prog_lstm_state_in_a_dict, prog_lstm_cell_state_on_an_object,
                   prog_state_kept_with_history_then_backward,
                   prog_state_kept_with_history_retain_graph, prog_nonlocal_tuple_state]


@pytest.mark.parametrize("program", HIDDEN_CONVERTS, ids=lambda f: f.__name__[5:])
def test_hidden_state_kept_across_calls(program):
    assert _compare(program) == CONVERTED


def test_backward_through_kept_history_fails_at_step_two():
    records, _, _ = _run(prog_state_kept_with_history_then_backward, "eager", STEPS)
    assert len(records) == 2 and "second time" in records[1][2][1], records[-1][2]


def test_kept_state_is_the_graphs_own_result_with_history():
    """The tensor kept is the run's result itself (its autograd node is LSTM's, not a
    copy's), read back on the next call: one retrace when the state gains history."""
    step, objs, batches, kept = prog_word_lm_hidden_in_a_list()
    g = to_graph(step, strict=True)
    for b in batches:
        g(*b)
        h, c = kept()
        assert h.grad_fn is not None and "Clone" not in type(h.grad_fn).__name__
    assert g.cache_info().traces == 2


def test_a_tuple_of_another_form_is_refused_naming_the_line():
    state = [(torch.zeros(2, 3), torch.zeros(2, 3))]
    lin = torch.nn.Linear(3, 3)

    def f(x):
        h = lin(x + state[0][0])
        state[0] = (h.detach(),)            # a tuple of another length: refused here
        return h.sum().detach()
    line = inspect.getsourcelines(f)[1] + 2
    with pytest.raises(ConversionError, match=rf"{THIS_FILE}:{line}"):
        to_graph(f, strict=True)(torch.ones(2, 3))


# --------------------------------------------------------------------- AveragedModel
def prog_averaged_model_ema():
    """The EMA recipe of torch's docs: ``AveragedModel(model, multi_avg_fn=
    get_ema_multi_avg_fn(0.999))``, ``update_parameters(model)`` after each step (its
    ``if self.n_averaged == 0`` copy, then averaging), 20 steps."""
    from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
    model = _mlp()
    ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.9))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)

    def step(x, y):
        _update(opt, F.cross_entropy(model(x), y))
        ema.update_parameters(model)
        return ema.n_averaged * 1
    return step, [model, ema, opt], _data(20), lambda: ema.n_averaged.clone()


def prog_averaged_model_swa_with_buffers():
    """SWA's equal-weight average (no ``avg_fn``) over parameters *and* BatchNorm buffers
    (``use_buffers=True``), then the averaged model evaluated in the step."""
    from torch.optim.swa_utils import AveragedModel
    model = _mlp(bn=True)
    swa = AveragedModel(model, use_buffers=True)
    swa.eval()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def step(x, y):
        _update(opt, F.cross_entropy(model(x), y))
        swa.update_parameters(model)
        with torch.no_grad():
            return swa(x)
    return step, [model, swa, opt], _data(20), lambda: ema_count(swa)


def ema_count(averaged):
    return int(averaged.n_averaged)


class _CountingAverage(torch.optim.swa_utils.AveragedModel):
    """A subclass with its own ``update_parameters`` (user code, converted) calling
    torch's through ``super()`` (staged) and counting in Python."""

    def __init__(self, model):
        super().__init__(model)
        self.calls = 0

    def update_parameters(self, model):
        super().update_parameters(model)
        self.calls += 1


def prog_averaged_model_subclass():
    model = _mlp()
    ema = _CountingAverage(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(x, y):
        _update(opt, F.cross_entropy(model(x), y))
        ema.update_parameters(model)
        return ema.n_averaged * 1
    return step, [model, ema, opt], _data(), lambda: ema.calls


@pytest.mark.parametrize("program", [prog_averaged_model_ema,
                                     prog_averaged_model_swa_with_buffers],
                         ids=lambda f: f.__name__[5:])
def test_averaged_model_over_twenty_steps(program):
    """Averaged parameters, buffers and ``n_averaged`` bit for bit eager's after each of
    20 steps, in one trace."""
    assert _compare(program, steps=20, max_traces=1) == CONVERTED


def test_averaged_model_subclass_converts():
    assert _compare(prog_averaged_model_subclass) == CONVERTED


def test_averaged_model_of_a_traced_value_is_refused_naming_the_line():
    """``update_parameters`` of something that is not a module: refused at its line."""
    from torch.optim.swa_utils import AveragedModel
    model = _mlp()
    ema = AveragedModel(model)

    def f(x):
        ema.update_parameters(x * 2)        # not a module: refused here
        return x
    line = inspect.getsourcelines(f)[1] + 1
    with pytest.raises(ConversionError, match=rf"{THIS_FILE}:{line}"):
        to_graph(f, strict=True)(torch.ones(2))
