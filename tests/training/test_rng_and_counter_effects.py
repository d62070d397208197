"""Random draws in converted code are never dropped, merged, reordered or folded: every op
that consumes a generator stays in the graph (``runtime.ops.RANDOM`` asks torch's schema:
``nondeterministic_seeded`` or a ``Generator`` argument). Differential against eager: the
values, and the global RNG state after each call, for every ``torch.distributions``
distribution with ``.sample()`` (draw unused, used, in a tensor ``if`` branch, in a tensor
loop), the random factories and in-place draws, dropouts, ``gumbel_softmax`` and explicit
``torch.Generator`` objects; default mode (converted or a FallbackWarning naming this file)
and strict (converted equal, or ConversionError)."""
from __future__ import annotations

import os
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import distributions as D

from transpiler import ConversionError, FallbackWarning, to_graph

THIS_FILE = os.path.basename(__file__)
t = torch.tensor
_L = t([[1.0, 0.0], [0.5, 1.2]])

# one instance of every distribution with .sample(); test_every_distribution_listed checks
DISTS = {
    "Bernoulli": lambda: D.Bernoulli(probs=t([0.3, 0.7])),
    "Beta": lambda: D.Beta(t([1.0, 2.0]), t([1.5, 0.5])),
    "Binomial": lambda: D.Binomial(5, probs=t([0.3, 0.6])),
    "Categorical": lambda: D.Categorical(probs=t([0.2, 0.3, 0.5])),
    "Cauchy": lambda: D.Cauchy(t([0.0, 1.0]), t([1.0, 2.0])),
    "Chi2": lambda: D.Chi2(t([2.0, 3.0])),
    "ContinuousBernoulli": lambda: D.ContinuousBernoulli(probs=t([0.3, 0.8])),
    "Dirichlet": lambda: D.Dirichlet(t([0.5, 1.0, 2.0])),
    "Exponential": lambda: D.Exponential(t([1.0, 2.0])),
    "FisherSnedecor": lambda: D.FisherSnedecor(t([2.0, 3.0]), t([4.0, 5.0])),
    "Gamma": lambda: D.Gamma(t([2.0, 0.5]), t([1.0, 3.0])),
    "GeneralizedPareto": lambda: D.GeneralizedPareto(t([0.0, 1.0]), t([1.0, 2.0]),
                                                     t([0.1, 0.2])),
    "Geometric": lambda: D.Geometric(probs=t([0.3, 0.6])),
    "Gumbel": lambda: D.Gumbel(t([0.0, 1.0]), t([1.0, 2.0])),
    "HalfCauchy": lambda: D.HalfCauchy(t([1.0, 2.0])),
    "HalfNormal": lambda: D.HalfNormal(t([1.0, 2.0])),
    "Independent": lambda: D.Independent(D.Normal(t([0.0, 1.0]), t([1.0, 2.0])), 1),
    "InverseGamma": lambda: D.InverseGamma(t([2.0, 3.0]), t([1.0, 2.0])),
    "Kumaraswamy": lambda: D.Kumaraswamy(t([1.0, 2.0]), t([2.0, 1.0])),
    "LKJCholesky": lambda: D.LKJCholesky(3, t(0.5)),
    "Laplace": lambda: D.Laplace(t([0.0, 1.0]), t([1.0, 2.0])),
    "LogNormal": lambda: D.LogNormal(t([0.0, 1.0]), t([1.0, 0.5])),
    "LogisticNormal": lambda: D.LogisticNormal(t([0.0, 1.0]), t([1.0, 0.5])),
    "LowRankMultivariateNormal": lambda: D.LowRankMultivariateNormal(
        t([0.0, 1.0]), t([[1.0], [0.5]]), t([1.0, 2.0])),
    "MixtureSameFamily": lambda: D.MixtureSameFamily(
        D.Categorical(probs=t([0.3, 0.7])), D.Normal(t([0.0, 3.0]), t([1.0, 0.5]))),
    "Multinomial": lambda: D.Multinomial(4, probs=t([0.2, 0.3, 0.5])),
    "MultivariateNormal": lambda: D.MultivariateNormal(t([0.0, 1.0]), scale_tril=_L),
    "NegativeBinomial": lambda: D.NegativeBinomial(3, probs=t([0.3, 0.6])),
    "Normal": lambda: D.Normal(t([0.0, 1.0]), t([1.0, 2.0])),
    "OneHotCategorical": lambda: D.OneHotCategorical(probs=t([0.2, 0.3, 0.5])),
    "OneHotCategoricalStraightThrough": lambda: D.OneHotCategoricalStraightThrough(
        probs=t([0.2, 0.8])),
    "Pareto": lambda: D.Pareto(t([1.0, 2.0]), t([2.0, 3.0])),
    "Poisson": lambda: D.Poisson(t([1.0, 4.0])),
    "RelaxedBernoulli": lambda: D.RelaxedBernoulli(t(0.5), probs=t([0.3, 0.6])),
    "RelaxedOneHotCategorical": lambda: D.RelaxedOneHotCategorical(t(0.5), probs=t([0.2, 0.8])),
    "StudentT": lambda: D.StudentT(t([3.0, 5.0])),
    "TransformedDistribution": lambda: D.TransformedDistribution(
        D.Normal(t([0.0]), t([1.0])), [D.transforms.ExpTransform()]),
    "Uniform": lambda: D.Uniform(t([0.0, 1.0]), t([1.0, 3.0])),
    "VonMises": lambda: D.VonMises(t([0.0, 1.0]), t([1.0, 4.0])),
    "Weibull": lambda: D.Weibull(t([1.0, 2.0]), t([1.5, 0.5])),
    "Wishart": lambda: D.Wishart(t(3.0), scale_tril=_L),
}


def test_every_distribution_listed():
    have = {n for n in D.__all__ if isinstance(getattr(D, n), type)
            and issubclass(getattr(D, n), D.Distribution)
            and getattr(D, n) not in (D.Distribution, D.ExponentialFamily)}
    assert have <= set(DISTS), sorted(have - set(DISTS))


def _same(a, b, where):
    if isinstance(a, (tuple, list)):
        assert len(a) == len(b), where
        for i, (u, v) in enumerate(zip(a, b)):
            _same(u, v, f"{where}[{i}]")
        return
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape, \
            f"{where}: {a!r} vs {b!r}"
        torch.testing.assert_close(b, a, equal_nan=True, msg=lambda m: f"{where}: {m}")
        return
    if isinstance(b, torch.Tensor) and b.dim() == 0:     # README: a 0-d tensor may stand
        b = b.item()                                     # for a number of the same kind
    assert type(a) is type(b) and a == b, f"{where}: {a!r} vs {b!r}"


def check(fn, calls, strict=False, expect=None):
    """Each call's result and the global RNG state after it equal eager's. Returns
    'convert' or 'fallback' (a fallback must name this file; strict: ConversionError)."""
    g = to_graph(fn, strict=strict)
    seen = set()
    for i, args in enumerate(calls):
        torch.manual_seed(100 + i)
        want = fn(*args)
        want_rng = torch.get_rng_state()
        torch.manual_seed(100 + i)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            try:
                got = g(*args)
            except ConversionError as e:
                assert strict, e
                assert THIS_FILE in str(e), str(e)
                seen.add("fallback")
                continue
        falls = [str(x.message) for x in w if issubclass(x.category, FallbackWarning)]
        for m in falls:
            assert THIS_FILE in m, m
        seen.add("fallback" if falls else "convert")
        _same(want, got, f"call {i}")
        assert torch.equal(torch.get_rng_state(), want_rng), f"call {i}: RNG state differs"
    verdict = "fallback" if "fallback" in seen else "convert"
    if expect is not None:
        assert verdict == expect, verdict
    return verdict


def _unused(d):
    def f(x):
        d.sample()
        d.sample((2,))
        return x + torch.rand(())
    return f


def _used(d):
    def f(x):
        s = d.sample((3,))
        return s, x + torch.randint(5, ())
    return f


def _in_branch(d):
    def f(x):
        if x.sum() > 0:
            s = d.sample().float().sum()
        else:
            s = torch.zeros(())
        return s + torch.rand(())
    return f


def _in_loop(d):
    def f(x, n):
        i = torch.zeros((), dtype=torch.long)
        acc = torch.zeros(())
        while i < n:
            acc = acc + d.sample().float().sum()
            i += 1
        return acc, torch.rand(2)
    return f


_X = [(torch.ones(2),), (-torch.ones(2),), (torch.ones(2),)]
_XN = [(torch.ones(2), t(2)), (torch.ones(2), t(0)), (torch.ones(2), t(3))]


@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict"])
@pytest.mark.parametrize("name", sorted(DISTS))
def test_distribution_draws(name, strict):
    d = DISTS[name]()
    check(_unused(d), _X[:2], strict)
    check(_used(d), _X[:2], strict)
    if name in ("Binomial", "Multinomial", "VonMises") and strict:
        return          # (their samplers loop or branch on tensors inside torch: may refuse)
    check(_in_branch(d), _X, strict)
    check(_in_loop(d), _XN, strict)


def test_beta_sample_then_randint():
    beta = D.Beta(t(1.0), t(1.0))

    def f(x):
        lam = float(beta.sample())
        cx = int(torch.randint(6, ()))
        return x + cx, lam > -1.0
    check(f, _X, expect="convert")


_OPS = {
    "randperm": lambda x: torch.randperm(5),
    "multinomial": lambda x: torch.multinomial(x.abs() + 0.1, 2),
    "poisson": lambda x: torch.poisson(x.abs() * 3),
    "normal_tensors": lambda x: torch.normal(x, x.abs() + 1),
    "normal_mean_tensor": lambda x: torch.normal(x, 2.0),
    "rand_like": lambda x: torch.rand_like(x),
    "randn_like": lambda x: torch.randn_like(x),
    "randint_like": lambda x: torch.randint_like(x, 7),
    "bernoulli": lambda x: torch.bernoulli(x.abs() / 2),
    "binomial": lambda x: torch.binomial(t([4.0, 5.0]), t([0.3, 0.5])),
    "standard_gamma": lambda x: torch._standard_gamma(x.abs() + 1),
    "sample_dirichlet": lambda x: torch._sample_dirichlet(x.abs() + 1),
    "dropout": lambda x: F.dropout(x, 0.5),
    "dropout_module": lambda x: torch.nn.Dropout(0.5)(x),
    "dropout1d": lambda x: F.dropout1d(x.view(1, 2, 1).expand(1, 2, 3), 0.5),
    "dropout2d": lambda x: F.dropout2d(x.view(1, 2, 1, 1).expand(1, 2, 2, 2), 0.5),
    "dropout3d": lambda x: F.dropout3d(x.view(1, 2, 1, 1, 1).expand(1, 2, 2, 2, 2), 0.5),
    "alpha_dropout": lambda x: F.alpha_dropout(x, 0.5, training=True),
    "feature_alpha_dropout": lambda x: F.feature_alpha_dropout(x.view(1, 2, 1), 0.5, True),
    "rrelu": lambda x: F.rrelu(x, training=True),
    "gumbel_softmax": lambda x: F.gumbel_softmax(x, tau=0.5),
    "gumbel_softmax_hard": lambda x: F.gumbel_softmax(x, hard=True),
    "uniform_": lambda x: torch.empty(3).uniform_(-1, 1),
    "normal_": lambda x: torch.empty(3).normal_(),
    "bernoulli_": lambda x: torch.empty(3).bernoulli_(0.3),
    "exponential_": lambda x: torch.empty(3).exponential_(),
    "geometric_": lambda x: torch.empty(3).geometric_(0.4),
    "cauchy_": lambda x: torch.empty(3).cauchy_(),
    "log_normal_": lambda x: torch.empty(3).log_normal_(),
    "random_": lambda x: torch.empty(3).random_(10),
    "traced_uniform_": lambda x: (x * 1).uniform_(),
    "new_exponential_": lambda x: t([1.0, 2.0]).new(torch.Size([3])).exponential_(),
}


@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict"])
@pytest.mark.parametrize("name", sorted(_OPS))
def test_random_op_draws(name, strict):
    op = _OPS[name]

    def unused(x):
        op(x)
        return x + torch.rand(())

    def used(x):
        return op(x), torch.randint(9, (2,))

    def in_branch(x):
        if x.sum() > 0:
            y = op(x).float().sum()
        else:
            y = x.sum()
        return y, torch.rand(())
    for fn in (unused, used, in_branch):
        check(fn, _X, strict, expect="convert")


def test_generator_made_inside_converts():
    def f(x):
        g = torch.Generator().manual_seed(3)
        a = torch.rand(2, generator=g)
        torch.randn(2, generator=g)             # unused: still advances g
        return x + a + torch.rand(2, generator=g), torch.rand(())
    check(f, _X, expect="convert")
    check(f, _X, strict=True, expect="convert")


def test_generator_from_outside_never_wrong():
    gen = torch.Generator().manual_seed(5)

    def f(x):
        torch.rand(2, generator=gen)            # unused, advances the caller's generator
        return x + torch.rand(2, generator=gen)
    eager_gen = torch.Generator().manual_seed(5)

    def f_eager(x):
        torch.rand(2, generator=eager_gen)
        return x + torch.rand(2, generator=eager_gen)
    g = to_graph(f)
    for args in _X:
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            got = g(*args)
        torch.testing.assert_close(got, f_eager(*args))
    assert torch.equal(gen.get_state(), eager_gen.get_state())


def test_lstm_dropout_draws_kept():
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(2, 3, num_layers=2, dropout=0.5)

    def f(x):
        lstm(x)                                 # unused: its dropout still draws
        return lstm(x)[0] + torch.rand(())
    check(f, [(torch.randn(4, 1, 2),)] * 2, expect="convert")


# --------------------------------------------------------------- counter-driven effects
def _state(net):
    return ([(n, p.detach().clone(), p.requires_grad,
              None if p.grad is None else p.grad.clone()) for n, p in net.named_parameters()],
            [m.training for m in net.modules()])


def _same_state(a, b, where):
    for (n, p, r, g), (_, q, s, h) in zip(a[0], b[0]):
        assert r == s, f"{where}: {n}.requires_grad {r} vs {s}"
        torch.testing.assert_close(q, p, msg=lambda m: f"{where}: {n}: {m}")
        assert (g is None) == (h is None), f"{where}: {n}.grad {g} vs {h}"
        if g is not None:
            torch.testing.assert_close(h, g, msg=lambda m: f"{where}: {n}.grad: {m}")
    assert a[1] == b[1], f"{where}: training flags {a[1]} vs {b[1]}"


def run_steps(make, strict=False, n=5):
    """``make()`` -> (step, net); each step's result, the net's parameters, gradients,
    requires_grad and training flags and the RNG state after every call equal eager's.
    Returns 'convert' or 'fallback' (naming this file; strict: ConversionError)."""
    gen = torch.Generator().manual_seed(1)
    data = [(torch.randn(6, 5, generator=gen), torch.randint(0, 3, (6,), generator=gen))
            for _ in range(n)]
    torch.manual_seed(0)
    step_e, net_e = make()
    torch.manual_seed(0)
    step_c, net_c = make()
    g = to_graph(step_c, strict=strict)
    seen = set()
    for i, (x, y) in enumerate(data):
        torch.manual_seed(50 + i)
        want = step_e(x, y)
        want_rng = torch.get_rng_state()
        torch.manual_seed(50 + i)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            try:
                got = g(x, y)
            except ConversionError as e:
                assert strict and THIS_FILE in str(e), str(e)
                return "fallback"
        falls = [str(m.message) for m in w if issubclass(m.category, FallbackWarning)]
        for m in falls:
            assert THIS_FILE in m, m
        seen.add("fallback" if falls else "convert")
        _same(want, got, f"step {i}")
        _same_state(_state(net_e), _state(net_c), f"step {i}")
        assert torch.equal(torch.get_rng_state(), want_rng), f"step {i}: RNG state differs"
    return "fallback" if "fallback" in seen else "convert"


def _mlp(dropout=0.0):
    return torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(),
                               torch.nn.Dropout(dropout), torch.nn.Linear(8, 3))


def _trainer(effect, dropout=0.0, start=None, read=None):
    """A training step whose counter-driven ``if calls[0] == 2:`` runs ``effect(net)``;
    with ``read``, it returns ``read(net)`` asked after the backward too."""
    def make():
        net = _mlp(dropout)
        if start is not None:
            start(net)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        calls = [0]

        def step(x, y):
            if calls[0] == 2:
                effect(net)
            calls[0] += 1
            opt.zero_grad()
            loss = F.cross_entropy(net(x), y)
            loss.backward()
            answer = None if read is None else read(net)
            opt.step()
            return loss.detach(), answer
        return step, net
    return make


def _freeze(net):
    net[0].requires_grad_(False)


def _unfreeze(net):
    net[0].requires_grad_(True)


def _freeze_attr(net):
    net[0].weight.requires_grad = False


def _freeze_loop(net):
    for p in net[0].parameters():
        p.requires_grad_(False)


def _eval_and_back(net):
    net.eval()
    with torch.no_grad():
        net(torch.ones(2, 5))
    net.train()


def _eval_only(net):
    net.eval()


@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict"])
@pytest.mark.parametrize("effect,start,expect", [
    (_freeze, None, "convert"),
    (_unfreeze, _freeze, "convert"),
    (_freeze_attr, None, "convert"),
    (_freeze_loop, None, "convert"),
    (_eval_and_back, None, "convert"),
    (_eval_only, None, "fallback"),
], ids=["freeze", "unfreeze", "freeze_attr", "freeze_loop", "eval_and_back", "eval_only"])
def test_counter_branch_effects(effect, start, expect, strict):
    assert run_steps(_trainer(effect, dropout=0.3, start=start), strict) == expect


def test_eval_only_names_its_line():
    step, _ = _trainer(_eval_only)()
    with pytest.raises(ConversionError, match=r"net.training. changes while tracing a branch"):
        data = torch.randn(6, 5), torch.randint(0, 3, (6,))
        g = to_graph(step, strict=True)
        for _ in range(3):
            g(*data)


def test_freeze_on_tensor_condition():
    def make():
        net = _mlp()
        opt = torch.optim.SGD(net.parameters(), lr=0.1)

        def step(x, y):
            loss = F.cross_entropy(net(x), y)
            if loss < 1.2:
                net[0].requires_grad_(False)
            opt.zero_grad()
            loss = F.cross_entropy(net(x), y)
            loss.backward()
            opt.step()
            return loss.detach()
        return step, net
    assert run_steps(make, n=6) in ("convert", "fallback")


# ------------------------------------------------------------- _foreach_*_ in a step
def _ema_step(update):
    """timm ModelEmaV3: an EMA of the parameters updated by ``update(ema_ps, ps, w)`` with a
    weight from a carried counter."""
    def make():
        net = _mlp()
        ema = _mlp()
        ema.load_state_dict(net.state_dict())
        ema.requires_grad_(False)
        opt = torch.optim.Adam(net.parameters(), lr=1e-2)
        updates = [0]

        def step(x, y):
            opt.zero_grad()
            loss = F.cross_entropy(net(x), y)
            loss.backward()
            opt.step()
            updates[0] += 1
            decay = min(0.99, (1 + updates[0]) / (10 + updates[0]))
            with torch.no_grad():
                update(list(ema.parameters()), list(net.parameters()), 1.0 - decay)
            return loss.detach(), decay
        both = torch.nn.ModuleList([net, ema])
        return step, both
    return make


_FOREACH = {
    "lerp_": lambda e, p, w: torch._foreach_lerp_(e, p, w),
    "lerp_weights_list": lambda e, p, w: torch._foreach_lerp_(e, p, [w] * len(e)),
    "mul_add_": lambda e, p, w: (torch._foreach_mul_(e, 1.0 - w),
                                 torch._foreach_add_(e, p, alpha=w)),
    "addcmul_": lambda e, p, w: torch._foreach_addcmul_(e, p, p, w),
    "addcdiv_scalars": lambda e, p, w: torch._foreach_addcdiv_(
        e, p, [q.abs() + 1 for q in p], [w] * len(e)),
    "sub_div_": lambda e, p, w: (torch._foreach_sub_(e, p, alpha=w),
                                 torch._foreach_div_(e, 1.0 + w)),
    "copy_zero_": lambda e, p, w: (torch._foreach_zero_(e[:1]), torch._foreach_copy_(e[1:], p[1:])),
    "loop_lerp_": lambda e, p, w: [a.lerp_(b, w) for a, b in zip(e, p)],
}


# a traced number as ``alpha=``/``value=`` falls back in the per-tensor loop too
# (``a.add_(b, alpha=w)``): the foreach form does as the loop does
_FOREACH["loop_mul_add_"] = lambda e, p, w: [(a.mul_(1.0 - w), a.add_(b, alpha=w))
                                             for a, b in zip(e, p)]
_FALLS_BACK = {"mul_add_", "loop_mul_add_", "addcmul_", "addcdiv_scalars", "sub_div_"}


@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict"])
@pytest.mark.parametrize("name", sorted(_FOREACH))
def test_foreach_inplace_on_parameters(name, strict):
    expect = "fallback" if name in _FALLS_BACK else "convert"
    assert run_steps(_ema_step(_FOREACH[name]), strict, n=4) == expect


def test_foreach_on_traced_tensors():
    def f(x, w):
        a, b = [x * 1, x * 2], [x + 1, x - 1]
        torch._foreach_lerp_(a, b, w.sum())
        torch._foreach_mul_(a, w)
        return a
    check(f, [(torch.randn(3), torch.rand(())), (torch.randn(3), torch.rand(()))],
          expect="convert")
    check(f, [(torch.randn(3), torch.rand(()))], strict=True, expect="convert")


@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict"])
@pytest.mark.parametrize("read", [lambda net: net[0].weight.requires_grad,
                                  lambda net: net[0].weight.grad is None],
                         ids=["requires_grad", "grad_is_none"])
def test_flag_set_in_branch_then_read_falls_back(read, strict):
    # the counter's branch freezes a layer; the step then asks what depends on the path
    assert run_steps(_trainer(_freeze, read=read), strict) == "fallback"
