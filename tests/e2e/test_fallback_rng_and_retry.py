"""A fallback leaves eager's random numbers; a fallback is retried once the Python state it
met has changed (a one-time write done, a lazy module materialized) (``transpiler/random_state.py``,
``transpiler/fallback_retry.py``).

Differential: every converted run is compared with plain eager from the same seed -- the
values of every call, the global RNG state after, the Python state (written values, logs
of side effects), and how many traces and warnings it took.

Random draws while tracing are forced where they happened in the wild (h61: a trace that
failed at ``scaled_dot_product_attention(dropout_p>0)`` under bf16 autocast): shape
inference failing for a random op, which ``shape_inference.fails_eagerly`` then runs on real
zeros to see whether eager fails too -- a real draw from the global generator.
"""
import warnings

import pytest
import torch
import torch.nn.functional as F

from runtime import autocast_ops
from transpiler import ConversionError, FallbackWarning, to_graph
from transpiler import fallback_retry


class NoShape(Exception):
    """Shape inference's failure for the ops in ``_unshaped``, forced."""


@pytest.fixture
def unshaped(monkeypatch):
    """``unshaped(*names)``: shape inference fails for the ops named so (the real op, run
    by ``fails_eagerly`` on zeros, succeeds: the call falls back)."""
    names = set()
    real = autocast_ops.infer

    def infer(func, args, kwargs):
        if getattr(func, "__name__", None) in names:
            raise NoShape(f"no shape for {func.__name__}")
        return real(func, args, kwargs)
    monkeypatch.setattr(autocast_ops, "infer", infer)
    return lambda *ops: names.update(ops)


def _runs(fn, calls, seed=0, **options):
    """``fn`` called on each of ``calls`` from ``seed``: (results, RNG state after,
    FallbackWarning texts)."""
    torch.manual_seed(seed)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = [fn(*args) for args in calls]
    return out, torch.get_rng_state(), [str(w.message) for w in caught
                                         if issubclass(w.category, FallbackWarning)]


def _same(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    return a == b


def _differential(fn, calls, **options):
    """Eager and ``to_graph(fn)`` from the same seed: the same values and RNG state after.
    Returns the converted function and its fallback warnings."""
    eager, eager_rng, _ = _runs(fn, calls)
    g = to_graph(fn, **options)
    mine, rng, fell = _runs(g, calls)
    assert _same(eager, mine), (eager, mine)
    assert torch.equal(eager_rng, rng), "the RNG state after differs from eager's"
    return g, fell


X = torch.randn(4, 6)


# ----------------------------------------------------------------- 1. a failed trace's draws
def dropout_op(x):
    return F.dropout(x, 0.5) * 2


def randn_like_op(x):
    return torch.randn_like(x) + x


def bernoulli_op(x):
    return torch.bernoulli(torch.full_like(x, 0.5)) + x


def multinomial_op(x):
    return x + torch.multinomial(torch.ones(6), 3).sum()


def randperm_op(x):
    return x[:, torch.randperm(6)]


@pytest.mark.parametrize("fn, op", [(dropout_op, "dropout"), (randn_like_op, "randn_like"),
                                    (bernoulli_op, "bernoulli"),
                                    (multinomial_op, "multinomial"),
                                    (randperm_op, "randperm")],
                         ids=lambda v: getattr(v, "__name__", v))
def test_failed_trace_of_a_random_op_leaves_eagers_numbers(unshaped, fn, op):
    """The trace's check runs the op for real (a draw), then falls back: the eager run
    draws eager's numbers, on this call and the next (the fallback is cached)."""
    unshaped(op)
    g, fell = _differential(fn, [(X,), (X,), (X,)])
    assert len(fell) == 1 and "test_fallback_rng_and_retry.py:" in fell[0] and \
        "no shape for" in fell[0], fell
    assert g.cache_info().fallbacks == 1 and g.cache_info().traces == 0


def all_draws(x):
    a = F.dropout(x, 0.5)
    b = torch.randn(3)
    c = torch.bernoulli(torch.full_like(x, 0.3))
    d = torch.multinomial(torch.ones(5), 2)
    e = torch.randperm(5)
    return a, b, c, d, e


def draws_then_refused(x):
    drawn = all_draws(x)
    return drawn + (torch.sin(drawn[0]),)       # the failing line, after the draws


def test_draws_before_a_failing_line(unshaped):
    """dropout, randn, bernoulli, multinomial and randperm traced, then a line whose
    trace fails and that the check draws nothing for: eager's draws, eager's state."""
    unshaped("randn")       # (the check of randn draws: it runs for real)
    unshaped("sin")
    g, fell = _differential(draws_then_refused, [(X,), (X,)])
    assert len(fell) == 1 and "no shape for randn" in fell[0], fell


def reseeding_refused(x):
    y = F.dropout(x, 0.5)
    return y * torch.initial_seed()     # (a Python value: refused while tracing)


def test_draws_then_a_refused_call(unshaped):
    unshaped("dropout")
    g, fell = _differential(reseeding_refused, [(X,), (X,)])
    assert len(fell) == 1


def drop_then_mismatch(x):
    y = F.dropout(x, 0.5)
    return torch.randn_like(y) @ torch.ones(5, 2)      # (6 != 5: eager's own error)


def test_users_error_after_draws_raises_with_eagers_state(monkeypatch):
    """The trace finds the user's error (eager fails there too: 6 != 5); eager runs up to
    it, as the call would, its draws from the state before the call -- though every op's
    shape inference drew on the way (as ``fails_eagerly``'s check of a random op does)."""
    real = autocast_ops.infer

    def drawing(func, args, kwargs):
        torch.rand(1)
        return real(func, args, kwargs)
    monkeypatch.setattr(autocast_ops, "infer", drawing)
    torch.manual_seed(0)
    with pytest.raises(RuntimeError) as eager_error:
        drop_then_mismatch(X)
    eager_rng = torch.get_rng_state()
    torch.manual_seed(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError) as mine:
            to_graph(drop_then_mismatch)(X)
    assert type(mine.value) is type(eager_error.value) and not caught
    assert torch.equal(torch.get_rng_state(), eager_rng)


def test_strict_mode_refusal_leaves_the_state_as_before(unshaped):
    """Strict mode raises ConversionError and runs nothing eagerly: no draw at all."""
    unshaped("dropout")
    torch.manual_seed(0)
    before = torch.get_rng_state()
    with pytest.raises(ConversionError, match="no shape for dropout"):
        to_graph(dropout_op, strict=True)(X)
    assert torch.equal(torch.get_rng_state(), before)


def with_generator(x, gen):
    return x + torch.rand(x.shape, generator=gen)


def test_a_generator_argument_falls_back_with_its_state(unshaped):
    """A ``torch.Generator`` argument falls back; the generator (and the global one) end
    as eager leaves them."""
    unshaped("dropout")
    eager_gen, mine_gen = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    eager, eager_rng, _ = _runs(with_generator, [(X, eager_gen)] * 2)
    mine, rng, fell = _runs(to_graph(with_generator), [(X, mine_gen)] * 2)
    assert _same(eager, mine) and torch.equal(eager_rng, rng) and len(fell) == 1
    assert torch.equal(eager_gen.get_state(), mine_gen.get_state())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_generators_after_a_failed_trace(unshaped):
    unshaped("dropout")
    x = X.cuda()
    torch.manual_seed(0)
    eager = [dropout_op(x) for _ in range(2)]
    cpu, cuda = torch.get_rng_state(), torch.cuda.get_rng_state()
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        g = to_graph(dropout_op)
        mine = [g(x) for _ in range(2)]
    assert all(torch.equal(a, b) for a, b in zip(eager, mine))
    assert torch.equal(cpu, torch.get_rng_state()) and \
        torch.equal(cuda, torch.cuda.get_rng_state())


# ------------------------------------------------------------- 2. a successful trace's draws
def test_converted_draws_are_eagers():
    """The graph draws exactly eager's numbers, call after call (a trace draws nothing
    the graph then misses)."""
    g, fell = _differential(all_draws, [(X,)] * 3, strict=True)
    assert g.cache_info().traces == 1


def make_counted():
    step = 0

    def counted(x):
        nonlocal step
        step += 1           # (a carried counter: the trace is taken twice)
        return F.dropout(x, 0.5) + torch.randn(()) + step
    return counted


def test_retraced_call_draws_eagers_numbers():
    eager, eager_rng, _ = _runs(make_counted(), [(X,)] * 3)
    g = to_graph(make_counted(), strict=True)
    mine, rng, _ = _runs(g, [(X,)] * 3)
    assert _same(eager, mine) and torch.equal(eager_rng, rng)


# ------------------------------------------------------- 3. one-time state writes: retried
class Config:
    def __init__(self):
        self.problem_type = None
        self.log = []


class Classifier(torch.nn.Module):
    """``*ForSequenceClassification``'s lazy default: the first call sets the config."""

    def __init__(self):
        super().__init__()
        self.config = Config()
        self.lin = torch.nn.Linear(6, 3)

    def forward(self, x, labels):
        if self.config.problem_type is None:
            self.config.problem_type = "single_label_classification"
            self.config.log.append("set")       # (a side effect: once, as eager)
        logits = self.lin(F.dropout(x, 0.2, self.training))
        return F.cross_entropy(logits, labels)


LABELS = torch.tensor([0, 1, 2, 1])


def _twins():
    torch.manual_seed(5)
    model = Classifier()
    twin = Classifier()
    twin.load_state_dict(model.state_dict())
    return model, twin


def test_one_time_config_write_converts_on_the_next_call():
    model, twin = _twins()
    eager, eager_rng, _ = _runs(model, [(X, LABELS)] * 5)
    g = to_graph(twin)
    mine, rng, fell = _runs(g, [(X, LABELS)] * 5)
    assert _same(eager, mine) and torch.equal(eager_rng, rng)
    assert len(fell) == 1 and "problem_type" in fell[0] or "mutates" in fell[0], fell
    info = g.graph_function.cache_info()
    assert (info.traces, info.fallbacks, info.misses) == (1, 1, 2), info
    assert twin.config.problem_type == model.config.problem_type
    assert twin.config.log == model.config.log == ["set"]


def test_one_time_write_in_a_converted_training_step():
    """``to_graph(step)`` (the model a closure variable): a graph from the first or second
    call on (this spelling keeps the write as a one-time set-up: ``lazy_init``); losses,
    parameters after every step, the write's side effect and the RNG are eager's."""
    results = []
    for spelling in ("eager", "step"):
        model, _ = _twins()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)

        def step(x, y):
            loss = model(x, y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            return loss
        run = step if spelling == "eager" else to_graph(step)
        out, rng, fell = _runs(run, [(X, LABELS)] * 4)
        results.append((out, rng, [p.detach().clone() for p in model.parameters()],
                        model.config.log))
        if spelling == "step":
            info = run.cache_info()
            assert info.traces == 1 and len(fell) == info.fallbacks <= 1, (info, fell)
    (e_out, e_rng, e_params, e_log), (m_out, m_rng, m_params, m_log) = results
    assert _same(e_out, m_out) and torch.equal(e_rng, m_rng) and _same(e_params, m_params)
    assert e_log == m_log == ["set"]


STATE = Config()


def write_every_call(x):
    STATE.problem_type = "b" if STATE.problem_type == "a" else "a"    # (on every call)
    STATE.log = STATE.log + [STATE.problem_type]
    return F.dropout(x, 0.5) * 2


def test_write_on_every_call_stays_a_fallback_without_retry_storm():
    """One retry (the state changed), the same reason again: the fallback is kept for
    good -- two traces over 20 calls, one warning, every write made once per call."""
    STATE.problem_type, STATE.log = None, []
    eager, eager_rng, _ = _runs(write_every_call, [(X,)] * 20)
    eager_log = list(STATE.log)
    STATE.problem_type, STATE.log = None, []
    g = to_graph(write_every_call)
    mine, rng, fell = _runs(g, [(X,)] * 20)
    assert _same(eager, mine) and torch.equal(eager_rng, rng)
    assert STATE.log == eager_log == ["a", "b"] * 10
    info = g.cache_info()
    assert info.misses == 2 and info.traces == 0 and len(fell) == 1, (info, fell)


class Staged:
    def __init__(self, stages):
        self.stages = stages


def staged_setup(x, cfg):
    """Sets another attribute on each of its first ``cfg.stages`` calls."""
    for i in range(cfg.stages):
        if not getattr(cfg, f"made{i}", False):
            setattr(cfg, f"made{i}", "yes")
            break
    return x * 2


@pytest.mark.parametrize("stages, traces, warned", [(2, 1, 2), (3, 0, 3)])
def test_retries_are_bounded_and_a_new_reason_warns(stages, traces, warned):
    """Each retry that falls back for a new reason warns; at most ``RETRIES`` retries:
    two set-up calls convert on the third, three stay eager."""
    assert fallback_retry.RETRIES == 2
    cfg, mine_cfg = Staged(stages), Staged(stages)
    eager, _, _ = _runs(staged_setup, [(X, cfg)] * 6)
    g = to_graph(staged_setup)
    mine, _, fell = _runs(g, [(X, mine_cfg)] * 6)
    assert _same(eager, mine) and vars(cfg) == vars(mine_cfg)
    info = g.cache_info()
    assert info.traces == traces and len(fell) == warned, (info, fell)
    assert info.misses <= 1 + fallback_retry.RETRIES


NESTED = Config()


@to_graph
def inner(x):
    if NESTED.problem_type is None:
        NESTED.problem_type = "set"
        NESTED.log.append("inner")
    return F.dropout(x, 0.5) + 1


def outer(x):
    return inner(x) * 2 + F.dropout(x, 0.3)


def test_fallback_in_a_nested_converted_function():
    """A one-time write in a converted function the converted function calls: eager's
    values, state and draws; both convert once the write is done."""
    NESTED.problem_type, NESTED.log = None, []
    eager, eager_rng, _ = _runs(outer, [(X,)] * 4)
    eager_log = list(NESTED.log)
    NESTED.problem_type, NESTED.log = None, []
    inner.__dict__.get("_entries").clear()
    g = to_graph(outer)
    mine, rng, fell = _runs(g, [(X,)] * 4)
    assert _same(eager, mine) and torch.equal(eager_rng, rng)
    assert NESTED.log == eager_log == ["inner"]
    assert g.cache_info().traces == 1, g.cache_info()


@to_graph
def plain_inner(x):
    return F.dropout(torch.sin(x), 0.5) + 1


def plain_outer(x):
    return plain_inner(x) * 2


def test_converted_function_called_while_tracing_is_traced_inline():
    """A converted function another converted function calls is traced inline in that
    trace (before: it traced itself on the trace's stand-ins and fell back, and the
    outer function fell back on the inner's cache bookkeeping)."""
    g, fell = _differential(plain_outer, [(X,)] * 3, strict=True)
    assert fell == [] and g.cache_info().traces == 1
    assert plain_inner.cache_info().fallbacks == 0  # (its own graph: the eager run's)


def test_state_that_does_not_change_stops_looking():
    """A fallback whose recorded state never changes looks ``CHECKS`` times, then no more
    (and frees what it recorded); one that changed stays due."""
    class Unchanged:
        looks = 0

        def changes(self):
            Unchanged.looks += 1
            return ""
    retry = fallback_retry.Retry(Unchanged(), fallback_retry.RETRIES)
    assert not any(retry.due() for _ in range(fallback_retry.CHECKS + 5))
    assert Unchanged.looks == fallback_retry.CHECKS and retry.snapshot is None

    class Changed:
        def changes(self):
            return "the function mutates global 'cfg'"
    retry = fallback_retry.Retry(Changed(), 1)
    assert retry.due() and retry.due()


HELPER_STATE = Config()


def set_up_in_helper():
    if HELPER_STATE.problem_type is None:
        HELPER_STATE.problem_type = "set"
        HELPER_STATE.log.append("helper")


def calls_a_helper(x):
    set_up_in_helper()          # (the write is the helper's: its global, not ours)
    return F.dropout(x, 0.5) + 1


def test_one_time_write_in_a_helper_function():
    """The state a retry watches includes what the helpers the trace met reach."""
    HELPER_STATE.problem_type, HELPER_STATE.log = None, []
    eager, eager_rng, _ = _runs(calls_a_helper, [(X,)] * 4)
    HELPER_STATE.problem_type, HELPER_STATE.log = None, []
    g = to_graph(calls_a_helper)
    mine, rng, fell = _runs(g, [(X,)] * 4)
    assert _same(eager, mine) and torch.equal(eager_rng, rng)
    assert HELPER_STATE.log == ["helper"] and len(fell) <= 1
    assert g.cache_info().traces == 1, g.cache_info()


class Lazy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.LazyLinear(3)

    def forward(self, x):
        return F.dropout(self.lin(x), 0.5)


def test_lazy_module_converts_once_materialized():
    """``nn.LazyLinear``: the first call materializes its parameters (eagerly: a trace
    cannot), the next converts; parameters, values and draws are eager's."""
    torch.manual_seed(1)
    model = Lazy()
    eager, eager_rng, _ = _runs(model, [(X,)] * 4)
    torch.manual_seed(1)
    twin = Lazy()
    g = to_graph(twin)
    mine, rng, fell = _runs(g, [(X,)] * 4)
    assert _same(eager, mine) and torch.equal(eager_rng, rng) and len(fell) == 1
    assert torch.equal(model.lin.weight, twin.lin.weight)
    assert g.graph_function.cache_info().traces == 1, g.graph_function.cache_info()


TAGGED = Config()


def refused_and_writes(x):
    TAGGED.log = TAGGED.log + [1]           # (state changes on every call...)
    return x * torch.initial_seed()         # (...but this refusal is not the state's)


def test_refusal_the_state_does_not_decide_is_kept_after_one_retry():
    TAGGED.log = []
    g = to_graph(refused_and_writes)
    mine, _, fell = _runs(g, [(X,)] * 20)
    assert _same(mine, [X * torch.initial_seed()] * 20) and len(TAGGED.log) == 20
    info = g.cache_info()
    assert info.misses == 2 and info.traces == 0 and len(fell) == 1, (info, fell)
