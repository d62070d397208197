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
