"""torch's scan operators while tracing (``runtime/operators/scans.py``): differential,
eager vs ``to_graph`` (default and strict), values, structure and gradients.

``associative_scan`` / ``scan`` trace their combine function with ``vmap``/``make_fx`` on
meta tensors, which a trace cannot follow: the call fell back ("a meta tensor made outside
the trace"), and so did transformers' Mamba models, which scan with ``associative_scan``
where ``is_compiling()`` is True. The trace now runs the loop they stand for."""
from __future__ import annotations

import warnings

import pytest
import torch
from torch.utils import _pytree as pytree

from transpiler import FallbackWarning, to_graph

associative_scan = pytest.importorskip(
    "torch._higher_order_ops.associative_scan").associative_scan
scan = pytest.importorskip("torch._higher_order_ops.scan").scan


def _cumsum(x):
    return associative_scan(lambda a, b: a + b, x, dim=1, combine_mode="generic")


def _linear_recurrence(a, b):
    """Mamba's combine: (a_l * a_r, a_r * b_l + b_r), reversed, on the last dim."""
    return associative_scan(lambda l, r: (l[0] * r[0], r[0] * l[1] + r[1]), (a, b), dim=-1,
                            reverse=True, combine_mode="generic")


def _running_max_dict(x):
    out = associative_scan(lambda l, r: {"m": torch.maximum(l["m"], r["m"])}, {"m": x},
                           dim=0, combine_mode="generic")
    return out["m"] * 2


def _decay_scan(x, init):
    def step(c, xi):
        c = c * 0.5 + xi
        return c, (c.sum(), c.relu())
    return scan(step, init, x, dim=0)


def _reverse_scan_dim1(x, init):
    return scan(lambda c, xi: (c + xi, c * xi), init, x, dim=1, reverse=True)


def _scan_then_branch(x):
    y = associative_scan(lambda a, b: a + b, x, dim=0, combine_mode="generic")
    if y[-1].sum() > 0:
        return y * 2
    return -y


CASES = [
    (_cumsum, lambda: (torch.randn(3, 6, 4),)),
    (_linear_recurrence, lambda: (torch.rand(2, 3, 7), torch.randn(2, 3, 7))),
    (_running_max_dict, lambda: (torch.randn(5, 3),)),
    (_decay_scan, lambda: (torch.randn(4, 3, 2), torch.zeros(3, 2))),
    (_reverse_scan_dim1, lambda: (torch.randn(2, 5, 3), torch.ones(2, 3))),
    (_scan_then_branch, lambda: (torch.randn(6, 2),)),
]


def _leaves(tree):
    return pytree.tree_flatten(tree)


def _same(got, exp):
    g, gs = _leaves(got)
    e, es = _leaves(exp)
    assert gs == es
    for a, b in zip(g, e):
        assert a.dtype == b.dtype and a.shape == b.shape
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fn,make", CASES, ids=[c[0].__name__ for c in CASES])
@pytest.mark.parametrize("strict", [False, True])
def test_scan_operators_convert_and_match_eager(fn, make, strict):
    g = to_graph(fn, strict=strict)
    torch.manual_seed(0)
    for _ in range(3):
        args = make()
        with warnings.catch_warnings():
            warnings.simplefilter("error", FallbackWarning)
            got = g(*args)
        _same(got, fn(*args))


@pytest.mark.parametrize("fn,make", CASES[:5], ids=[c[0].__name__ for c in CASES[:5]])
def test_scan_operators_gradients_match_eager(fn, make):
    torch.manual_seed(1)
    args = make()

    def grads(f):
        xs = [a.clone().requires_grad_() for a in args]
        out = _leaves(f(*xs))[0]
        sum(o.float().sum() * (i + 1) for i, o in enumerate(out)).backward()
        return [x.grad for x in xs]

    g = to_graph(fn)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        got = grads(g)
    for a, b in zip(got, grads(fn)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_scan_is_a_loop_in_the_graph_not_a_fallback():
    g = to_graph(_cumsum)
    x = torch.randn(2, 4, 3)
    _same(g(x), _cumsum(x))
    text = str(g.graph(x))
    assert "stack" in text and text.count("add") >= 3


def test_pointwise_mode_on_cpu_raises_eagers_error():
    def f(x):
        return associative_scan(lambda a, b: a + b, x, dim=0)   # combine_mode="pointwise"
    x = torch.randn(4, 2)
    with pytest.raises(ValueError) as eager:
        f(x)
    with pytest.raises(ValueError) as converted:
        to_graph(f)(x)
    assert str(converted.value) == str(eager.value)


def test_combine_returning_another_structure_is_refused_not_wrong():
    def f(x):
        return associative_scan(lambda a, b: (a + b, a), x, dim=0, combine_mode="generic")
    x = torch.randn(4, 2)
    with pytest.raises(Exception):
        f(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        with pytest.raises(Exception):
            to_graph(f)(x)


# ----------------------------------------------------------------- transformers' Mamba models
def _mamba(name):
    transformers = pytest.importorskip("transformers")
    from benchmarks.torchvision_cpu import import_torchvision
    import_torchvision()
    small = dict(vocab_size=64, hidden_size=16, state_size=4, num_hidden_layers=2,
                 conv_kernel=4, use_cache=False)
    if name == "mamba":
        return transformers.MambaForCausalLM(transformers.MambaConfig(
            intermediate_size=32, **small))
    if name == "falcon_mamba":
        return transformers.FalconMambaForCausalLM(transformers.FalconMambaConfig(
            intermediate_size=32, **small))
    return transformers.Mamba2ForCausalLM(transformers.Mamba2Config(
        expand=2, head_dim=8, num_heads=4, n_groups=1, chunk_size=4, **small))


@pytest.mark.parametrize("name", ["mamba", "falcon_mamba", "mamba2"])
def test_mamba_models_convert_and_match_eager(name):
    torch.manual_seed(0)
    model = _mamba(name).eval()
    g = to_graph(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        for length in (7, 7, 5):
            ids = torch.randint(0, 64, (2, length))
            with torch.no_grad():
                torch.testing.assert_close(g(ids).logits, model(ids).logits,
                                           rtol=1e-5, atol=1e-5)
        model.train()
        ids = torch.randint(0, 64, (2, 6))
        model.zero_grad()
        model(ids).logits.pow(2).mean().backward()
        exp = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        g(ids).logits.pow(2).mean().backward()
        for p, e in zip(model.parameters(), exp):
            torch.testing.assert_close(p.grad, e, rtol=1e-4, atol=1e-6)


def _aliased_carry_and_output(x):
    def step(c, xi):
        s = c + xi
        return s, s                     # torch refuses one tensor as carry and output
    return scan(step, torch.zeros(3), x, dim=0)


def _aliased_input(x):
    return associative_scan(lambda a, b: b, x, dim=0, combine_mode="generic")


@pytest.mark.parametrize("fn", [_aliased_carry_and_output, _aliased_input],
                         ids=lambda f: f.__name__)
def test_aliasing_combine_functions_raise_eagers_error(fn):
    """torch's operators refuse a combine function returning one tensor twice or an input
    as it is ("Higher order ops do not support aliasing"); the loop would have run it."""
    x = torch.randn(4, 3)
    try:
        fn(x)
        eager = None
    except Exception as e:          # noqa: BLE001 - compared below
        eager = e
    for strict in (False, True):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FallbackWarning)
            try:
                to_graph(fn, strict=strict)(x)
                got = None
            except Exception as e:  # noqa: BLE001
                got = e
        if eager is None:
            assert got is None
        else:
            assert got is not None and (type(got) is type(eager) or strict), (got, eager)
