"""A converted function called under changing default dtypes (``torch.set_default_dtype``)
matches eager on every call: values and dtypes.

The default dtype is part of a call's signature, so a change retraces; these check that
what the new trace builds does not come from something made under the old default:
shape inference's cache (keyed by op and argument metadata) and factory nodes
(``torch.ones(2)``) that read the default dtype when the graph runs or is folded rather
than when it was traced (``runtime/factory_dtypes.py``). Each program runs under float32,
float64, float32 again, bfloat16 and float64 again, with one converted function across
all of them; neighbours of the same kind (the default device, flush-denormal,
deterministic algorithms, the thread count) are checked at the end.
"""
import warnings

import pytest
import torch
from torch import nn

from transpiler import FallbackWarning, to_graph

F32, F64, BF16 = torch.float32, torch.float64, torch.bfloat16
SEQUENCE = (F32, F64, F32, BF16, F64)


@pytest.fixture(autouse=True)
def _restore_default_dtype():
    before = torch.get_default_dtype()
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def ones_after_double(x):
    return x.double() + torch.ones(2)


def arange_float(x):
    return x * 2 + torch.arange(2.0)


def zeros_ones_full(x):
    return (x + torch.zeros(2)) * torch.ones(2) + torch.full((2,), 0.25)


def full_of_int_and_float(x):
    return torch.full((2,), 3) * x + torch.full((2,), 1.5)


def linspace_eye(x):
    return x + torch.linspace(0.0, 1.0, 2) + torch.eye(2)[0]


def tensor_of_floats(x):
    return x.double() * torch.tensor([1.5, -2.25])


def tensor_scalar_times(x):
    return torch.tensor(2.5) * x + torch.scalar_tensor(0.5)


def seeded_rand(x):
    torch.manual_seed(0)
    return x + torch.rand(2) + torch.randn(2)


def python_scalars(x):
    return x.double() + 1.5, x * 0.5 + 1, (x > 0) * 2.5


def integers_to_floats(x):
    """Ops on integer tensors whose float result takes the default dtype."""
    n = torch.arange(4).reshape(2, 2)
    return (n / 2).sum(0) + x, torch.sqrt(n[0]) * 3, (x * 4).long() / 3


def fused_chain(x):
    return ((x.double() * 2 + torch.ones(2)).sin() * torch.arange(2.0) + 0.5).exp()


def row_softmax(x):
    return torch.softmax(x + torch.zeros(3, 2), dim=-1) * torch.full((3, 1), 2.0)


def while_with_factories(x):
    acc = x * 0 + torch.zeros(2)        # (x's and the default's dtype: the loop's)
    while acc.sum() < 10:
        acc = acc + x.abs() + torch.ones(2)
    return acc, acc + torch.arange(2.0)


def cond_with_factory(x):
    if x.sum() > 0:
        y = x + torch.ones(2)
    else:
        y = x - torch.full((2,), 0.5)
    return y


PROGRAMS = [ones_after_double, arange_float, zeros_ones_full, full_of_int_and_float,
            linspace_eye, tensor_of_floats, tensor_scalar_times, seeded_rand,
            python_scalars, integers_to_floats, fused_chain, row_softmax, while_with_factories,
            cond_with_factory]


def _input(fn):
    shape = (3, 2) if fn is row_softmax else (2,)
    return torch.linspace(-1.0, 2.0, 6, dtype=F32)[:shape[0] * shape[-1]].reshape(shape) \
        if fn is row_softmax else torch.tensor([0.75, -1.5], dtype=F32)


def _tolerance(dtype):
    return dict(rtol=2e-2, atol=2e-2) if dtype == BF16 else dict(rtol=1e-5, atol=1e-5)


def _same(got, want, default):
    flat_got, flat_want = _leaves(got), _leaves(want)
    assert len(flat_got) == len(flat_want)
    for g, w in zip(flat_got, flat_want):
        assert g.dtype == w.dtype, (default, g.dtype, w.dtype)
        assert g.shape == w.shape
        torch.testing.assert_close(g, w, **_tolerance(default))


def _leaves(value):
    return list(value) if isinstance(value, tuple) else [value]


def _alternate(fn, converted, make_input, sequence=SEQUENCE):
    for default in sequence:
        torch.set_default_dtype(default)
        x = make_input()
        want = fn(x)
        got = converted(x)
        _same(got, want, default)


@pytest.mark.parametrize("fn", PROGRAMS, ids=lambda f: f.__name__)
def test_alternating_default_dtypes_match_eager(fn):
    converted = to_graph(fn, strict=True)
    _alternate(fn, converted, lambda: _input(fn))


@pytest.mark.parametrize("fn", [ones_after_double, arange_float, fused_chain],
                         ids=lambda f: f.__name__)
def test_first_trace_under_float64_then_float32(fn):
    """The other order: traced first under float64, its cached inference is not float32's."""
    converted = to_graph(fn, strict=True)
    _alternate(fn, converted, lambda: _input(fn), sequence=(F64, F32, F64))


def test_factory_nodes_record_their_dtype():
    """The traced graph itself names the dtype a factory made (not read when it runs)."""
    converted = to_graph(ones_after_double, strict=True)
    x = _input(ones_after_double)
    torch.set_default_dtype(F64)
    graph = converted.graph(x)
    ones = [n for n in graph.nodes if n.op == "ones"]
    assert len(ones) == 1 and ones[0].kwargs.get("dtype") is F64
    assert ones[0].meta.dtype is F64
    torch.set_default_dtype(F32)
    optimized = graph.optimize()          # optimized (folded) under another default
    torch.set_default_dtype(F64)
    _same(optimized(x), ones_after_double(x), F64)


def test_gradients_through_factories_across_defaults():
    """The fused backward of a chain mixing a float32 leaf and factories of the default
    dtype: eager's gradient (float32, the leaf's) under each default."""
    def chain(x):
        return ((x * torch.ones(2) + torch.arange(2.0)).sin() * torch.full((2,), 1.5)).sum()

    converted = to_graph(chain, strict=True)
    for default in SEQUENCE:
        torch.set_default_dtype(default)
        x1 = torch.tensor([0.75, -1.5], dtype=F32, requires_grad=True)
        x2 = x1.detach().clone().requires_grad_()
        want, got = chain(x1), converted(x2)
        _same(got, want, default)
        want.backward()
        got.backward()
        _same(x2.grad, x1.grad, default)


class ZerosInForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(2, 2)

    def forward(self, x):
        h = torch.zeros(x.shape[0], 2)
        return self.linear(x) + h + torch.arange(2.0)


def test_module_with_zeros_in_forward():
    torch.manual_seed(0)
    module = ZerosInForward().eval()
    converted = to_graph(module, strict=True)
    x = torch.tensor([[0.5, -1.0], [2.0, 0.25]], dtype=F32)
    with torch.no_grad():
        _alternate(module, converted, lambda: x)


def test_default_device_cpu_explicitly():
    converted = to_graph(arange_float, strict=True)
    x = _input(arange_float)
    converted(x)
    torch.set_default_device("cpu")
    try:
        _alternate(arange_float, converted, lambda: x, sequence=(F32, F64))
    finally:
        torch.set_default_device(None)


def test_flush_denormal_and_deterministic_algorithms():
    """Flags changing numerics for later calls: a graph made before either change still
    gives eager's values (the kernels read neither when they are generated)."""
    def tiny(x):
        return x * torch.full((2,), 1e-30) * 1e-10 + torch.zeros(2)

    converted = to_graph(tiny, strict=True)
    x = torch.tensor([1.0, -2.0], dtype=F32)
    _same(converted(x), tiny(x), F32)
    deterministic = torch.are_deterministic_algorithms_enabled()
    try:
        torch.set_flush_denormal(True)
        torch.use_deterministic_algorithms(True)
        _alternate(tiny, converted, lambda: x, sequence=(F32, F64))
    finally:
        torch.set_flush_denormal(False)
        torch.use_deterministic_algorithms(deterministic)
    torch.set_default_dtype(F32)
    _same(converted(x), tiny(x), F32)


def test_thread_count_is_not_baked_into_kernels():
    """Kernels made under one thread count give eager's values under another."""
    converted = to_graph(row_softmax, strict=True)
    x = _input(row_softmax)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        _same(converted(x), row_softmax(x), F32)
        torch.set_num_threads(2)
        _alternate(row_softmax, converted, lambda: x, sequence=(F32, F64))
    finally:
        torch.set_num_threads(threads)


def test_no_fallback_warning_when_the_default_changes():
    converted = to_graph(fused_chain)
    x = _input(fused_chain)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        _alternate(fused_chain, converted, lambda: x)
