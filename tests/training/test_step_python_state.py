"""Python state a training step reads and writes (issue 15): ``opt.param_groups`` and
``sched.last_epoch`` inside a converted step, eager against converted over 20 steps.

Each program builds a model, optimizer and scheduler from one seed and returns its step;
the runner runs it eagerly, then (same seed) as ``to_graph(step)`` in default and strict
mode, and compares what it returns and prints, the lrs and momenta of every group after
each step, and at the end every parameter and gradient, the optimizer's state and groups
and the scheduler's state, all exactly. A converted step must trace once
(``runtime.training_attributes``: the values are read and written when the graph runs, a
changed lr is not a new trace and never a stale one); what cannot be staged falls back
naming this file's line (strict: ``ConversionError``), with eager's results.
"""
from __future__ import annotations

import contextlib
import io
import math
import re
import warnings

import pytest
import torch
import torch.nn.functional as F

from tests.e2e.e2e_helpers import assert_same
from transpiler import ConversionError, FallbackWarning, to_graph

STEPS = 20
THIS_FILE = __file__.rsplit("/", 1)[-1]

OPTIMIZERS = {
    "sgd_momentum": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9),
    "adam": lambda ps: torch.optim.Adam(ps, lr=0.01),
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.1),
}
SCHEDULERS = {
    "step": lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=3, gamma=0.5),
    "cosine": lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=12),
    "lambda": lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda e: min(1.0, (e + 1) / 4)),
    "onecycle": lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.05,
                                                              total_steps=STEPS + 1),
}


def get_lr(it, warmup=4, max_lr=1e-2, min_lr=1e-3, total=15):
    """nanoGPT's warmup + cosine decay, written by hand."""
    if it < warmup:
        return max_lr * (it + 1) / warmup
    if it > total:
        return min_lr
    ratio = (it - warmup) / (total - warmup)
    coeff = 0.5 * (1.0 + math.cos(math.pi * ratio))
    return min_lr + coeff * (max_lr - min_lr)


# ----------------------------------------------------------------------------- runner
def _inputs(n=STEPS, seed=7):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(6, 5, generator=g), torch.randn(6, 3, generator=g))
            for _ in range(n)]


def _groups(opt):
    return [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups]


def _state(model, opt, sched):
    st = {"params": [p.detach().clone() for p in model.parameters()],
          "grads": [None if p.grad is None else p.grad.clone() for p in model.parameters()],
          "opt": opt.state_dict()["state"], "groups": _groups(opt)}
    if sched is not None:
        st["sched"] = {k: v for k, v in sched.state_dict().items() if not callable(v)}
    return st


def _exact(got, exp, path):
    if isinstance(exp, torch.Tensor):
        assert isinstance(got, torch.Tensor) and got.dtype == exp.dtype and \
            torch.equal(got, exp), f"{path}: {got} != {exp}"
    elif isinstance(exp, dict):
        assert set(got) == set(exp), path
        for k in exp:
            _exact(got[k], exp[k], f"{path}[{k!r}]")
    elif isinstance(exp, (list, tuple)):
        assert type(got) is type(exp) and len(got) == len(exp), path
        for i, (a, b) in enumerate(zip(got, exp)):
            _exact(a, b, f"{path}[{i}]")
    else:
        assert type(got) is type(exp) and got == exp, f"{path}: {got!r} != {exp!r}"


def _numbers(outs):
    """What the returned values hold but tensors (compared exactly)."""
    if isinstance(outs, torch.Tensor):
        return None
    if isinstance(outs, (tuple, list)):
        return type(outs)(_numbers(x) for x in outs)
    if isinstance(outs, dict):
        return {k: _numbers(x) for k, x in outs.items()}
    return outs


def _run(program, mode, between=None):
    torch.manual_seed(0)
    step, (model, opt, sched), inputs = program()
    fn = step if mode == "eager" else to_graph(step, strict=(mode == "strict"))
    outs, lrs, buf = [], [], io.StringIO()
    with warnings.catch_warnings(record=True) as rec, contextlib.redirect_stdout(buf):
        warnings.simplefilter("always")
        for i, args in enumerate(inputs):
            if between is not None:
                between(i, opt)
            outs.append(fn(*args))
            lrs.append(_groups(opt))
    fallbacks = [w for w in rec if issubclass(w.category, FallbackWarning)]
    traces = None if mode == "eager" else fn.cache_info().traces
    return outs, lrs, _state(model, opt, sched), buf.getvalue(), fallbacks, traces


def _compare(program, between=None, modes=("default", "strict")):
    """Eager against each mode: {mode: "converted" / "fallback" / "refused"}."""
    exp_out, exp_lrs, exp_state, exp_print, _, _ = _run(program, "eager", between)
    results = {}
    for mode in modes:
        try:
            out, lrs, state, printed, fbs, traces = _run(program, mode, between)
        except ConversionError as e:
            assert mode == "strict", e
            assert THIS_FILE in str(e) and re.search(r":\d+", str(e)), str(e)
            results[mode] = "refused"
            continue
        for w in fbs:
            assert THIS_FILE in str(w.message) and re.search(r":\d+", str(w.message)), \
                f"the fallback does not name the user's line: {w.message}"
        _exact(lrs, exp_lrs, f"{mode}.lrs")        # after every step, every group
        _exact(state, exp_state, f"{mode}.state")
        assert printed == exp_print, f"{mode}: printed {printed!r} != {exp_print!r}"
        assert_same(out, exp_out, f"{mode}.returned")
        _exact(_numbers(out), _numbers(exp_out), f"{mode}.numbers")    # (types too)
        if not fbs:
            assert traces == 1, f"{mode}: {traces} traces for {STEPS} steps"
        results[mode] = "fallback" if fbs else "converted"
    return results


def _model():
    return torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))


# ----------------------------------------------------------------------------- programs
def _logging_program(opt_name, sched_name):
    """lr read from param_groups before and after the scheduler's step, for a log."""
    def program():
        model = _model()
        opt = OPTIMIZERS[opt_name](model.parameters())
        sched = SCHEDULERS[sched_name](opt)

        def step(x, y):
            lr = opt.param_groups[0]["lr"]
            loss = F.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            new_lr = opt.param_groups[0]["lr"]
            print(f"epoch {sched.last_epoch} lr {lr:.6e} -> {new_lr:.6e}")
            return loss.detach(), lr, new_lr, sched.last_epoch
        return step, (model, opt, sched), _inputs()
    return program


@pytest.mark.parametrize("opt_name,sched_name", [
    ("sgd_momentum", "step"), ("adam", "cosine"), ("adamw", "lambda"),
    ("sgd_momentum", "onecycle"), ("adamw", "onecycle")])
def test_lr_read_for_logging(opt_name, sched_name):
    assert _compare(_logging_program(opt_name, sched_name)) == \
        {"default": "converted", "strict": "converted"}


def prog_nanogpt_warmup():
    """nanoGPT: decay / no-decay groups, ``for g in opt.param_groups: g["lr"] = lr`` from
    a hand-written warmup + cosine of the iteration (a tensor the loop passes)."""
    model = _model()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}], lr=6e-4,
                            betas=(0.9, 0.95))
    inputs = [(x, y, torch.tensor(i)) for i, (x, y) in enumerate(_inputs())]

    def step(x, y, it):
        lr = get_lr(int(it))
        for param_group in opt.param_groups:
            param_group["lr"] = lr
        loss = F.mse_loss(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if int(it) % 5 == 0:
            print(f"iter {int(it)}: loss {loss.item():.4f}, lr {lr:.4e}")
        return loss.detach(), lr
    return step, (model, opt, None), inputs


def prog_manual_decay():
    """A hand-made decay on each group's own lr, and a momentum read with OneCycleLR
    (which cycles SGD's momentum)."""
    model = _model()
    opt = torch.optim.SGD([{"params": model[0].parameters()},
                           {"params": model[2].parameters(), "lr": 0.02}],
                          lr=0.05, momentum=0.9)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=[0.05, 0.02],
                                                total_steps=STEPS + 1)

    def step(x, y):
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        for g in opt.param_groups:
            g["lr"] = g["lr"] * 0.9
        return loss.detach(), opt.param_groups[1]["momentum"], \
            [g["lr"] for g in opt.param_groups]
    return step, (model, opt, sched), _inputs()


def prog_betas_onecycle():
    """Adam's betas cycled by OneCycleLR, read as a tuple; betas written back."""
    model = _model()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.05, total_steps=STEPS + 1)

    def step(x, y):
        beta1, beta2 = opt.param_groups[0]["betas"]
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        b1, b2 = opt.param_groups[0]["betas"]
        opt.param_groups[0]["betas"] = (b1, 0.999)
        return loss.detach(), beta1, beta2
    return step, (model, opt, sched), _inputs()


def prog_lr_in_tensor_branch():
    """The lr halved when the loss is high: a write in a tensor ``if``."""
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def step(x, y):
        loss = F.mse_loss(model(x), y)
        if loss > 1.0:
            opt.param_groups[0]["lr"] = 0.02
        else:
            opt.param_groups[0]["lr"] = opt.param_groups[0]["lr"] * 1.5
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach(), opt.param_groups[0]["lr"]
    return step, (model, opt, None), _inputs()


def prog_epoch_gated_log():
    """``sched.last_epoch`` as a Python int: a log every 4 epochs, and an lr scale."""
    model = _model()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.3)

    def step(x, y):
        loss = F.mse_loss(model(x), y) * (1.0 + sched.last_epoch / 10)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if sched.last_epoch % 4 == 0:
            print("epoch", sched.last_epoch, "lr", sched.get_last_lr()[0])
        return loss.detach(), sched.last_epoch
    return step, (model, opt, sched), _inputs()


class Trainer:
    """A Trainer-shaped object: the step is a method, the optimizer an attribute."""

    def __init__(self):
        self.model = _model()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=3e-3)
        self.scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(self.optimizer, 8)
        self.log = []

    def train_step(self, x, y):
        loss = F.mse_loss(self.model(x), y)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.scheduler.step()
        return {"loss": loss.detach(), "lr": self.optimizer.param_groups[0]["lr"],
                "epoch": self.scheduler.last_epoch}


def prog_trainer():
    t = Trainer()
    return t.train_step, (t.model, t.optimizer, t.scheduler), _inputs()


CONVERTS = {
    "nanogpt_warmup": prog_nanogpt_warmup,
    "manual_decay": prog_manual_decay,
    "betas_onecycle": prog_betas_onecycle,
    "lr_in_tensor_branch": prog_lr_in_tensor_branch,
    "epoch_gated_log": prog_epoch_gated_log,
    "trainer": prog_trainer,
}


@pytest.mark.parametrize("name", sorted(CONVERTS))
def test_step_writes_and_reads_convert(name):
    assert _compare(CONVERTS[name]) == {"default": "converted", "strict": "converted"}


def prog_read_changed_by_caller():
    """The caller sets the lr between steps; the step reads it (no retrace, never stale)."""
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(x, y):
        lr = opt.param_groups[0]["lr"]
        loss = F.mse_loss(model(x), y) * lr
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach(), lr
    return step, (model, opt, None), _inputs()


def test_lr_set_by_the_caller_between_steps():
    def between(i, opt):
        opt.param_groups[0]["lr"] = 0.1 / (i + 1)
    assert _compare(prog_read_changed_by_caller, between) == \
        {"default": "converted", "strict": "converted"}


# ----------------------------------------------------------------------------- fallbacks
def _refused_program(body):
    def program():
        model = _model()
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True)
        sched = torch.optim.lr_scheduler.StepLR(opt, 3)

        def step(x, y):
            loss = F.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            return loss.detach(), body(opt, sched)
        return step, (model, opt, sched), _inputs(4)
    return program


def _nesterov(opt, sched):
    return opt.param_groups[0]["nesterov"]          # not a number


def _set_epoch(opt, sched):
    sched.last_epoch = 0
    return 0


def _new_key(opt, sched):
    opt.param_groups[0]["my_lr"] = 0.1
    return 0


def _text_value(opt, sched):
    opt.param_groups[0]["lr"] = "0.1"
    return 0


def _grow_groups(opt, sched):
    opt.param_groups.append({"params": []})
    return 0


@pytest.mark.parametrize("body", [_nesterov, _set_epoch, _new_key, _text_value, _grow_groups],
                         ids=lambda f: f.__name__)
def test_what_cannot_be_staged_falls_back_naming_the_line(body):
    if body is _text_value or body is _grow_groups:     # eager raises later, at its step
        return _check_same_error(body)
    assert _compare(_refused_program(body)) == {"default": "fallback", "strict": "refused"}


def _check_same_error(body):
    """Eager's error (a str lr breaks the next step; a group without params raises at the
    next step) comes from the converted step too: it falls back and runs eagerly."""
    errors = []
    for mode in ("eager", "default"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FallbackWarning)
            try:
                _run(_refused_program(body), mode)
                errors.append(None)
            except Exception as e:    # noqa: BLE001 - compared with eager's
                errors.append((type(e), str(e)))
    assert errors[0] == errors[1]


def test_read_outside_a_trace_is_the_real_list():
    """After a trace (and a refused one), the optimizer holds its own list of dicts."""
    torch.manual_seed(0)
    step, (model, opt, sched), inputs = _logging_program("adam", "step")()
    groups = opt.param_groups
    g = to_graph(step)
    g(*inputs[0])
    assert opt.param_groups is groups and all(type(x) is dict for x in groups)
    assert type(sched) is torch.optim.lr_scheduler.StepLR
    step, (model, opt, sched), inputs = _refused_program(_set_epoch)()
    groups = opt.param_groups
    with pytest.raises(ConversionError):
        to_graph(step, strict=True)(*inputs[0])
    assert opt.param_groups is groups and type(sched) is torch.optim.lr_scheduler.StepLR
    assert sched.last_epoch == 0 and opt.state == {}


# ------------------------------------------------------------ counters kept across calls
def prog_nonlocal_counter_warmup():
    """``nonlocal step; step += 1`` drives a hand-written warmup + cosine lr, a log every
    5 steps and a running mean of the loss (a float kept across calls)."""
    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4)
    step_count, running = 0, 0.0

    def step(x, y):
        nonlocal step_count, running
        lr = get_lr(step_count)
        for g in opt.param_groups:
            g["lr"] = lr
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        running = 0.9 * running + 0.1 * loss.item()
        step_count += 1
        if step_count % 5 == 0:
            print(f"step {step_count} lr {lr:.3e} running {running:.5f}")
        return loss.detach(), step_count, running
    return step, (model, opt, None), _inputs()


ITER_NUM = 0


def prog_global_iteration():
    """nanoGPT's ``iter_num`` as a module global the step advances."""
    global ITER_NUM
    ITER_NUM = 0
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def step(x, y):
        global ITER_NUM
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.param_groups[0]["lr"] = get_lr(ITER_NUM, warmup=2, max_lr=0.05, min_lr=0.005)
        opt.step()
        ITER_NUM += 1
        return loss.detach(), ITER_NUM
    return step, (model, opt, None), _inputs()


@pytest.mark.parametrize("program", [prog_nonlocal_counter_warmup, prog_global_iteration],
                         ids=lambda f: f.__name__)
def test_counters_kept_across_calls_convert(program):
    assert _compare(program) == {"default": "converted", "strict": "converted"}


def prog_counter_changes_kind():
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    count = 0

    def step(x, y):
        nonlocal count
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        count = count + 0.5         # an int becomes a float: carried, one more trace
                                    # (test_step_fallbacks_closed.py)
        return loss.detach(), count
    return step, (model, opt, None), _inputs(4)


def prog_counter_in_a_list():
    """The iteration in a closure list (``it[0] += 1``), scaling the loss."""
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    it = [0, "label"]

    def step(x, y):
        loss = F.mse_loss(model(x), y) * (1 + it[0] / 10)
        opt.zero_grad()
        loss.backward()
        opt.step()
        it[0] += 1
        return loss.detach(), it[0], it[1]
    return step, (model, opt, None), _inputs()


class CountingTrainer:
    """``self.global_step += 1`` and a running loss on the Trainer, lr from the count."""

    def __init__(self):
        self.model = _model()
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-2)
        self.global_step = 0
        self.running_loss = 0.0
        self.name = "run"

    def training_step(self, x, y):
        self.optimizer.param_groups[0]["lr"] = get_lr(self.global_step, warmup=3)
        loss = F.mse_loss(self.model(x), y)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.global_step += 1
        self.running_loss += loss.item()
        if self.global_step % 4 == 0:
            print(self.name, self.global_step, round(self.running_loss, 4))
        return loss.detach()


def prog_trainer_counter():
    t = CountingTrainer()
    return t.training_step, (t.model, t.optimizer, None), _inputs()


@pytest.mark.parametrize("program", [prog_counter_in_a_list, prog_trainer_counter],
                         ids=lambda f: f.__name__)
def test_counters_in_lists_and_objects_convert(program):
    assert _compare(program) == {"default": "converted", "strict": "converted"}


def prog_counter_on_a_module():
    model = _model()
    model.steps = 0
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    def step(x, y):
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        model.steps += 1            # carried: runtime.module_numbers
        return loss.detach()
    return step, (model, opt, None), _inputs(4)


@pytest.mark.parametrize("program", [prog_counter_on_a_module], ids=lambda f: f.__name__)
def test_counter_on_a_module_is_carried(program):
    assert _compare(program) == {"default": "converted", "strict": "converted"}


SEEN_STEPS = 0


def prog_counter_read_by_lr_lambda():
    """A LambdaLR whose lambda reads the global the step advances just before
    ``sched.step()``: the graph sets the global before the staged step runs it, as eager
    has by then (a write only at the end would give the lambda the old count)."""
    global SEEN_STEPS
    SEEN_STEPS = 0
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda epoch: 1.0 / (1 + SEEN_STEPS))

    def step(x, y):
        global SEEN_STEPS
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        SEEN_STEPS += 1
        sched.step()
        return loss.detach(), SEEN_STEPS
    return step, (model, opt, sched), _inputs()


def test_counter_read_by_a_staged_step_is_set_before_it():
    assert _compare(prog_counter_read_by_lr_lambda) == \
        {"default": "converted", "strict": "converted"}


HELPER_ITER = 0


def _next_lr():
    """A helper the step calls: advances a global and returns its lr."""
    global HELPER_ITER
    HELPER_ITER += 1
    return get_lr(HELPER_ITER, warmup=3, max_lr=0.05, min_lr=0.005)


def prog_counter_in_a_helper():
    """A global rebound by a helper the step calls (before, the trace's increment was
    the only one: the graph kept the first lr and the global stopped at 1, silently)."""
    global HELPER_ITER
    HELPER_ITER = 0
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    def step(x, y):
        opt.param_groups[0]["lr"] = _next_lr()
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach(), HELPER_ITER
    return step, (model, opt, None), _inputs()


def test_counter_rebound_by_a_helper_is_carried():
    assert _compare(prog_counter_in_a_helper) == {"default": "converted", "strict": "converted"}
    assert HELPER_ITER == STEPS


def prog_write_then_read_other_kind():
    """``g["weight_decay"] = 0`` (an int where the group held a float) read back in the
    same step: the read stands for what the run holds then (an int), not the trace's."""
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, weight_decay=0.1)

    def step(x, y):
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.param_groups[0]["weight_decay"] = 0
        opt.step()
        return loss.detach(), opt.param_groups[0]["weight_decay"]
    return step, (model, opt, None), _inputs(4)


def test_a_read_after_a_write_has_the_written_kind():
    assert _compare(prog_write_then_read_other_kind) == \
        {"default": "converted", "strict": "converted"}
