"""Python numbers a training step keeps in closure dicts, plain objects and helpers' closures,
read and changed under tensor ``if``s (``runtime/region_numbers.py``,
``runtime/carried_numbers.py``).

    if lossf < state["best_val_loss"]:          # nanoGPT: a tensor condition (lossf traced)
        state["best_val_loss"] = lossf          # a number carried in a closure dict
    stop = early_stopper.early_stop(val_loss)   # counter / min loss on a plain object
    steps["done"] += 1                          # a helper's closure dict (DQN's epsilon)

Each program is built twice from one seed: one copy runs eagerly, the other through
``to_graph`` (default, then strict), on the same inputs. After *every* call the results
must be eager's (returned numbers of eager's type: runtime/returned_numbers.py) and the
Python state exactly eager's: the same
values with the same Python types (int, float, bool) -- never a tensor left in the user's
dict or object. Programs that convert trace once; those that cannot be made exact fall
back naming the line that changes the number (strict: ``ConversionError`` there).
"""
from __future__ import annotations

import copy
import dataclasses
import math
import types
import warnings

import pytest
import torch
import torch.nn.functional as F

from tests.e2e.e2e_helpers import assert_same
from transpiler import ConversionError, FallbackWarning, to_graph

CALLS = 6


def _exact(got, exp, path="state"):
    """Python state: the same structure, the same Python types, equal values (floats to
    1e-9 relative: eager's own float64 arithmetic)."""
    if isinstance(exp, torch.Tensor):
        assert isinstance(got, torch.Tensor), f"{path}: {got!r} is not a tensor"
        assert got.dtype == exp.dtype and got.shape == exp.shape, f"{path}: {got} != {exp}"
        torch.testing.assert_close(got, exp, rtol=1e-5, atol=1e-6, msg=path)
    elif isinstance(exp, (list, tuple, dict)):
        assert type(got) is type(exp) and len(got) == len(exp), f"{path}: {got!r} != {exp!r}"
        if isinstance(exp, dict):
            assert list(got) == list(exp), f"{path}: keys {list(got)} != {list(exp)}"
        for k in (exp if isinstance(exp, dict) else range(len(exp))):
            _exact(got[k], exp[k], f"{path}[{k!r}]")
    else:
        assert type(got) is type(exp), \
            f"{path}: {type(got).__name__} {got!r} where eager has {type(exp).__name__} {exp!r}"
        if isinstance(exp, float) and not math.isinf(exp):
            assert abs(got - exp) <= 1e-9 * max(1.0, abs(exp)), f"{path}: {got!r} != {exp!r}"
        else:
            assert got == exp, f"{path}: {got!r} != {exp!r}"


def _run(build, strict=False):
    """Eager first (all calls, results and state copied), then converted, call by call (a
    program may keep its numbers in a module global: built again before each run);
    returns (fallback messages, traces)."""
    torch.manual_seed(0)
    fn, state, inputs = build()
    expected = []
    for i, args in enumerate(inputs):
        torch.manual_seed(100 + i)
        out = fn(*args)
        expected.append((out, copy.deepcopy(state())))
    torch.manual_seed(0)
    fn, state, inputs = build()
    g = to_graph(fn, strict=strict)
    fallbacks = []
    for i, (args, (exp, exp_state)) in enumerate(zip(inputs, expected)):
        torch.manual_seed(100 + i)
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            got = g(*args)
        fallbacks += [str(w.message) for w in rec if issubclass(w.category, FallbackWarning)]
        assert_same(got, exp, f"call {i} result")
        _exact(state(), exp_state, f"call {i} state")
    return fallbacks, g.cache_info().traces


def converts(build, traces=1):
    for strict in (False, True):
        fallbacks, n = _run(build, strict)
        assert not fallbacks, fallbacks[0]
        assert n <= traces, f"{n} traces"


def falls_back_at(build, text):
    """One FallbackWarning naming the line of this file holding ``text`` (results and state
    still eager's); strict: ConversionError naming the same line."""
    with open(__file__) as f:
        lines = [i + 1 for i, line in enumerate(f.read().splitlines()) if text in line]
    where = f"{__file__}:{lines[0]}:"          # (its first: the parameters name it after)
    fallbacks, _ = _run(build)
    assert fallbacks and fallbacks[0].startswith(where), (fallbacks[:1], where)
    with pytest.raises(ConversionError) as info:
        _run(build, strict=True)
    assert f"{info.value.filename}:{info.value.lineno}:" == where, str(info.value)


def _losses(*values):
    """Inputs whose ``x.sum().item()`` is each of ``values`` (improving and not)."""
    return [(torch.tensor([v / 2, v / 2]),) for v in values]


LOSSES = _losses(3.0, 1.0, 2.0, 2.5, 0.5, 4.0, 5.0, 0.25)


# ---------------------------------------------------------------------- the three programs
def nanogpt_best_val_loss():
    """nanoGPT's train loop: lr from ``iter_num`` (a closure dict), ``lossf = loss.item()``
    and ``if lossf < best_val_loss: best_val_loss = lossf``."""
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    state = {"iter_num": 0, "best_val_loss": 1e9}

    def get_lr(it, warmup=2, decay=5, lr=6e-3, min_lr=6e-4):
        if it < warmup:
            return lr * (it + 1) / (warmup + 1)
        if it > decay:
            return min_lr
        coeff = 0.5 * (1.0 + math.cos(math.pi * (it - warmup) / (decay - warmup)))
        return min_lr + coeff * (lr - min_lr)

    def step(x, y):
        lr = get_lr(state["iter_num"])
        for group in opt.param_groups:
            group["lr"] = lr
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        lossf = loss.item()
        if lossf < state["best_val_loss"]:
            state["best_val_loss"] = lossf
        state["iter_num"] += 1
        return lossf, lr

    g = torch.Generator().manual_seed(1)
    inputs = [(torch.randn(6, 4, generator=g) * s, torch.randint(0, 3, (6,), generator=g))
              for s in (1.0, 0.5, 3.0, 0.2, 2.0, 0.1, 4.0)]
    return step, lambda: dict(state, w=model.weight.detach().clone()), inputs


class EarlyStopping:
    """pytorchtools' EarlyStopping, as a callable object: a float best score, an int
    counter and a bool flag, set in tensor branches; a Python ``if`` on the counter inside
    one (``mode="max"``: accuracy)."""

    def __init__(self, patience=2, delta=0.0):
        self.patience = patience
        self.counter = 0
        self.best_score = -float("inf")
        self.early_stop = False
        self.delta = delta

    def __call__(self, score):
        if score < self.best_score + self.delta:
            self.counter += 1
            if self.counter >= self.patience:
                self.early_stop = True
        else:
            self.best_score = score
            self.counter = 0


def early_stopping_object():
    stopper = EarlyStopping(patience=2, delta=0.01)

    def epoch(x):
        accuracy = x.sigmoid().mean().item()
        stopper(accuracy)
        return accuracy, stopper.early_stop

    return epoch, lambda: dict(vars(stopper)), LOSSES


def dqn_epsilon_schedule():
    """The DQN tutorial's select_action: ``steps['done'] += 1`` in a helper's closure dict,
    ``math.exp`` of it, and a branch on ``random.random()``'s torch twin."""
    policy = torch.nn.Linear(4, 2)
    steps = {"done": 0}
    eps_start, eps_end, eps_decay = 0.9, 0.05, 3

    def select_action(state):
        sample = torch.rand(()).item()
        eps = eps_end + (eps_start - eps_end) * math.exp(-1.0 * steps["done"] / eps_decay)
        steps["done"] += 1
        if sample > eps:
            with torch.no_grad():
                return policy(state).max(1).indices.view(1, 1)
        return torch.randint(0, 2, (1, 1))

    def act(state):         # (steps only in the helper's closure: read before it runs)
        return select_action(state) * 2

    g = torch.Generator().manual_seed(2)
    return act, lambda: dict(steps), [(torch.randn(1, 4, generator=g),) for _ in range(CALLS)]


@pytest.mark.parametrize("build", [nanogpt_best_val_loss, early_stopping_object,
                                   dqn_epsilon_schedule], ids=lambda b: b.__name__)
def test_the_three_programs_convert(build):
    converts(build)


# ------------------------------------------------------------------------- neighbours
def min_in_nonlocal():
    """``nonlocal best`` (a closure cell of the enclosing function) set in the branch."""
    best = float("inf")

    def step(x):
        nonlocal best
        loss = x.sum().item()
        if loss < best:
            best = loss
        return loss

    return step, lambda: best, LOSSES


def max_accuracy_namespace():
    """Max tracking and a patience counter on a ``SimpleNamespace``."""
    tracker = types.SimpleNamespace(best_acc=0.0, bad=0, epochs=0)

    def evaluate(x):
        acc = x.sigmoid().mean().item()
        if acc > tracker.best_acc:
            tracker.best_acc = acc
            tracker.bad = 0
        else:
            tracker.bad += 1
        tracker.epochs += 1
        return acc

    return evaluate, lambda: dict(vars(tracker)), LOSSES


@dataclasses.dataclass
class TrainState:
    best_loss: float = float("inf")
    bad_epochs: int = 0
    stopped: bool = False


def dataclass_patience():
    """A dataclass's float, int and bool fields; the bool returned and read later."""
    st = TrainState()

    def epoch(x, patience: int = 2):
        loss = x.sum().item()
        if loss < st.best_loss:
            st.best_loss = loss
            st.bad_epochs = 0
        else:
            st.bad_epochs += 1
            if st.bad_epochs >= patience:
                st.stopped = True
        return st.stopped

    return epoch, lambda: dataclasses.asdict(st), LOSSES


def epsilon_greedy_closure():
    """An epsilon schedule in a closure dict: decayed every call, floored, returned."""
    sched = {"eps": 1.0, "t": 0}

    def act(q):
        sched["t"] += 1
        sched["eps"] = max(0.05, sched["eps"] * 0.7)
        if torch.rand(()).item() < sched["eps"]:
            return torch.randint(0, q.numel(), ()), sched["eps"]
        return q.argmax(), sched["eps"]

    g = torch.Generator().manual_seed(3)
    return act, lambda: dict(sched), [(torch.randn(4, generator=g),) for _ in range(CALLS)]


def nested_dict_number():
    """``state["stats"]["best"]``: a number two dicts down."""
    state = {"stats": {"best": 1e9, "n": 0}, "name": "run"}

    def step(x):
        loss = x.sum().item()
        if loss < state["stats"]["best"]:
            state["stats"]["best"] = loss
        state["stats"]["n"] += 1
        return loss

    step.state = state      # (for the caller replacing it)
    return step, lambda: {k: dict(v) if isinstance(v, dict) else v
                          for k, v in state.items()}, LOSSES


def helper_called_twice():
    """A helper bumping its closure counter, called twice per step."""
    counts = {"calls": 0, "big": 0}

    def scaled(x):
        counts["calls"] += 1
        if x.sum() > 2:
            counts["big"] += 1
        return x * counts["calls"]

    def step(x):
        return scaled(x) + scaled(x * 0.5)

    return step, lambda: dict(counts), LOSSES


def counter_returned():
    """The counter itself returned (an int, as eager's)."""
    state = {"improved": 0, "best": 1e9}

    def step(x):
        loss = x.sum().item()
        if loss < state["best"]:
            state["best"] = loss
            state["improved"] += 1
        return state["improved"], state["best"]

    return step, lambda: dict(state), LOSSES


def counter_in_range():
    """A counter changed in a tensor branch, then the bound of ``range()``."""
    state = {"k": 0}

    def step(x):
        if x.sum() > 2:
            state["k"] += 1
        y = x
        for _ in range(state["k"]):
            y = y * 0.5
        return y

    return step, lambda: dict(state), LOSSES


def counter_in_python_if():
    """A patience counter decides a Python ``if`` later in the same call."""
    state = {"bad": 0}

    def step(x):
        loss = x.sum().item()
        if loss > 2:
            state["bad"] += 1
        else:
            state["bad"] = 0
        if state["bad"] >= 2:
            return x * 0, True
        return x, False

    return step, lambda: dict(state), LOSSES


def bool_flag_in_nested_branch():
    """``stop = True`` set in a branch inside a branch, read as the result."""
    state = {"stop": False, "bad": 0}

    def step(x):
        if x.sum() > 2:
            state["bad"] += 1
            if state["bad"] >= 2:
                state["stop"] = True
        return state["stop"]

    return step, lambda: dict(state), LOSSES


GLOBAL_STEPS = {"done": 0}


def global_dict_counter():
    """The DQN tutorial's counter in a module-level dict, bumped by a helper."""
    GLOBAL_STEPS["done"] = 0

    def eps_threshold():
        eps = 0.05 + 0.85 * math.exp(-1.0 * GLOBAL_STEPS["done"] / 3)
        GLOBAL_STEPS["done"] += 1
        return eps

    def q_and_eps(x):
        return x.max(), eps_threshold()

    return q_and_eps, lambda: dict(GLOBAL_STEPS), LOSSES


BEST_LOSS = 1e9
IMPROVED = 0


def global_best():
    """nanoGPT's train.py keeps ``best_val_loss`` at module level: ``global`` in a step."""
    global BEST_LOSS, IMPROVED
    BEST_LOSS, IMPROVED = 1e9, 0

    def step(x):
        global BEST_LOSS, IMPROVED
        loss = x.sum().item()
        if loss < BEST_LOSS:
            BEST_LOSS = loss
            IMPROVED += 1
        return loss

    return step, lambda: (BEST_LOSS, IMPROVED), LOSSES


LOOP_ITERATIONS = 0


def counters_in_tensor_loops():
    """A global and a nonlocal counted in a tensor ``while`` and under a tensor ``if`` in a
    loop over rows (carried as loop variables)."""
    global LOOP_ITERATIONS
    LOOP_ITERATIONS = 0
    total = 0

    def solve(x):
        global LOOP_ITERATIONS
        nonlocal total
        while x.sum() > 1:
            x = x * 0.5
            LOOP_ITERATIONS += 1
            total += 2
        for row in x.reshape(-1, 1):
            if row.sum() > 0.1:
                total += 1
        return x

    return solve, lambda: (LOOP_ITERATIONS, total), LOSSES


class Local:
    def __init__(self):
        self.counter, self.best = 0, 2.5


def _update(self, loss):
    if loss < self.best:
        self.best = loss
        self.counter = 0
    elif loss > self.best + 0.1:
        self.counter += 1
        if self.counter >= 2:
            return True
    return False


def local_object_nested_branches():
    """An object the call makes, changed by a helper's nested branches (the helper's
    ``self`` is dead after its outer ``if``: the inner branch's values must leave it)."""
    def step(x):
        obj = Local()
        stop = _update(obj, x.sum().item())
        return stop, obj.counter, obj.best

    return step, lambda: None, LOSSES


@pytest.mark.parametrize("build", [
    min_in_nonlocal, max_accuracy_namespace, dataclass_patience, epsilon_greedy_closure,
    nested_dict_number, helper_called_twice, counter_returned, counter_in_range,
    counter_in_python_if, bool_flag_in_nested_branch, global_dict_counter,
    local_object_nested_branches, global_best, counters_in_tensor_loops],
    ids=lambda b: b.__name__)
def test_neighbours_convert(build):
    converts(build)


def test_caller_replacing_the_holder_is_seen():
    """The caller puts a new stats dict, then a new best, between calls: read then, not
    the trace's (the guard sees the new holder; the slot is read when the graph runs)."""
    step = nested_dict_number()[0]
    eager = nested_dict_number()[0]
    state, e_state = step.state, eager.state
    g = to_graph(step, strict=True)
    for i, (x,) in enumerate(LOSSES):
        if i == 3:
            state["stats"], e_state["stats"] = {"best": 0.75, "n": 100}, {"best": 0.75, "n": 100}
        if i == 5:
            state["stats"]["best"] = e_state["stats"]["best"] = 10.0
        assert_same(g(x), eager(x))
        _exact(state, e_state, f"call {i}")
    assert g.cache_info().traces <= 2


# -------------------------------------------------------------- what still falls back
class Counted:
    total = 0


def class_attribute():
    """A class attribute (shared by every instance): not carried."""
    def step(x):
        loss = x.sum().item()
        if loss > 2:
            Counted.total += 1
        return loss

    Counted.total = 0
    return step, lambda: Counted.total, LOSSES


def int_becomes_float_on_one_path():
    """``best = 0`` then ``best = lossf`` on one path: its Python type depends on the
    path taken, which eager's caller would see."""
    state = {"best": 0}

    def step(x):
        loss = x.sum().item()
        if loss > state["best"]:                # (the line named)
            state["best"] = loss
        return loss

    return step, lambda: dict(state), LOSSES


class Reporter:
    def __init__(self):
        self.best, self.status = float("inf"), "init"

    def report(self, loss):
        if loss < self.best:
            self.best = loss
            self.status = "improved"
        return loss


def text_attribute_in_method():
    """A method sets a string attribute in a tensor branch: the fallback names the
    method's line, not the converted function's ``def``."""
    reporter = Reporter()

    def epoch(x):
        return reporter.report(x.sum().item())

    return epoch, lambda: dict(vars(reporter)), LOSSES


class EarlyStoppingFromNone(EarlyStopping):
    """pytorchtools' own start: ``best_score = None`` until the first call sets a float
    (a number the graph cannot read on the first call: that call falls back)."""

    def __init__(self):
        super().__init__()
        self.best_score = None

    def __call__(self, score):
        if self.best_score is None:
            self.best_score = score         # (from None: named)
        else:
            super().__call__(score)


def early_stopping_from_none():
    stopper = EarlyStoppingFromNone()

    def epoch(x):
        stopper(x.sigmoid().mean().item())
        return stopper.early_stop

    return epoch, lambda: dict(vars(stopper)), LOSSES


@pytest.mark.parametrize("build, line", [
    (early_stopping_from_none, "# (from None: named)"),
    (class_attribute, "Counted.total += 1"),
    (int_becomes_float_on_one_path, "(the line named)"),
    (text_attribute_in_method, 'self.status = "improved"'),
], ids=lambda b: getattr(b, "__name__", ""))
def test_falls_back_naming_the_line(build, line):
    falls_back_at(build, line)


def test_none_initialised_stopper_converts_after_its_first_call():
    """The first call's write (None -> a float) falls back once, eagerly made; the later
    calls find a float there and convert (``transpiler/fallback_retry.py``): one trace."""
    fallbacks, traces = _run(early_stopping_from_none)
    assert len(fallbacks) == 1 and traces == 1, (fallbacks, traces)
