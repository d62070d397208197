"""A traced tensor answers what a program asks of it as the real tensor would: type(),
__class__, isinstance, .type(), .new / new_*, device and metadata queries; a Python number
carried as a 0-d graph value answers as the number; a value whose type depends on the path
taken at run time makes the call fall back (strict: ConversionError)."""
import warnings

import pytest
import torch
import torch.nn.functional as F

from e2e_helpers import assert_same, check
from transpiler import ConversionError, FallbackWarning, to_graph

POS, NEG = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([-1.0, -2.0, -4.0])


def both_modes(fn, *inputs):
    """Strict (converted, no warning) and default mode, each on every input, vs eager."""
    check(fn, *inputs)
    g = to_graph(fn)
    for args in inputs:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert_same(g(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args]),
                        fn(*args))


def falls_back(fn, *inputs, match=None):
    """Default mode: eager result and one FallbackWarning; strict: ConversionError."""
    for args in inputs:
        with pytest.warns(FallbackWarning, match=match):
            assert_same(to_graph(fn)(*args), fn(*args))
        with pytest.raises(ConversionError, match=match):
            to_graph(fn, strict=True)(*args)


# ------------------------------------------------------------------ type(), __class__
def type_is(x):
    y = x * 2.0 if x.sum() > 0 else x - 1.0
    return y * 2.0 if type(y) is torch.Tensor else y * 100.0


def type_name(x):
    if x.sum() > 0:
        y = x + 1.0
    else:
        y = x * 3.0
    return y, type(y).__name__, y.__class__.__name__, type(y) == torch.Tensor


def class_attr(x):
    y = x
    while y.abs().sum() < 20.0:
        y = y * 2.0
    return y + 1.0 if y.__class__ is torch.Tensor else y - 1.0


def isinstance_checks(x):
    y = torch.relu(x) if x.mean() > 0 else -x
    a = isinstance(y, torch.Tensor)
    b = isinstance(y, (int, float))
    c = isinstance(y, (float, torch.Tensor))
    return (y * 3.0 if a and not b and c else y), a, b, c


def issubclass_of_type(x):
    y = x.exp() if x.sum() > 0 else x.abs()
    return y if issubclass(type(y), torch.Tensor) else y * 0.0


@pytest.mark.parametrize("fn", [type_is, type_name, class_attr, isinstance_checks,
                                issubclass_of_type])
def test_type_questions_answer_as_a_tensor(fn):
    both_modes(fn, (POS.clone(),), (NEG.clone(),))


def test_type_questions_keep_gradients():
    def f(x):
        y = x * x if x.sum() > 0 else x * 3.0
        if type(y) is torch.Tensor and isinstance(y, torch.Tensor):
            y = y + 1.0
        return y.sum()
    g = to_graph(f, strict=True)
    for v in (POS, NEG):
        a, b = v.clone().requires_grad_(), v.clone().requires_grad_()
        f(a).backward()
        g(b).backward()
        assert torch.allclose(a.grad, b.grad)


def test_type_of_python_values_is_unchanged():
    def f(x, n):
        kinds = [type(n).__name__, type(2.5).__name__, type([x]).__name__, type("s") is str]
        return x * n, kinds, isinstance(n, int), type(n)(3)
    check(f, (POS, 2), (NEG, 3))


def test_type_of_a_traced_tensor_builds_a_tensor():
    def f(x):
        y = x + 1.0 if x.sum() > 0 else x
        made = type(y)(2, 3)            # torch.Tensor(2, 3): uninitialised
        return y, tuple(made.shape), made.dtype
    both_modes(f, (POS,), (NEG,))


# ------------------------------------------------------------------ .type()
def test_legacy_type_name_and_casts():
    def f(x):
        y = x * 2.0 if x.sum() > 0 else x
        return (y.type(), y.type("torch.DoubleTensor"), y.type(torch.HalfTensor),
                y.type(torch.LongTensor), y.type(torch.float64), y.type(torch.FloatTensor),
                y.long().type(), y.bool().type(), y.double().type())
    both_modes(f, (POS,), (NEG,))


def test_legacy_type_cast_keeps_gradients():
    def f(x):
        y = x.type(torch.DoubleTensor) if x.sum() > 0 else x.type("torch.DoubleTensor") * 2
        return (y * y).sum()
    g = to_graph(f, strict=True)
    for v in (POS, NEG):
        a, b = v.clone().requires_grad_(), v.clone().requires_grad_()
        f(a).backward()
        g(b).backward()
        assert a.grad.dtype == b.grad.dtype and torch.allclose(a.grad, b.grad)


# ------------------------------------------------------------------ .new and new_*
def test_new_by_sizes_is_uninitialised_of_that_shape():
    def f(x):
        y = x * 2.0 if x.sum() > 0 else x
        made = [y.new(torch.Size([5, 8])), y.new(5, 8), y.new(4), y.new(),
                y.new_empty(2, 3), y.new_empty((3,)), y.long().new(2, 2)]
        return y, [(tuple(m.shape), m.dtype) for m in made]
    both_modes(f, (POS,), (NEG,))


def test_new_with_data_and_new_filled():
    def f(x):
        y = x * 2.0 if x.sum() > 0 else x
        return (y.new([1, 2]), y.new((5, 8)), y.long().new([3.7, 4.2]), y.new_zeros(2, 3),
                y.new_zeros((2,)), y.new_ones(3), y.new_full((2, 2), 7), y.new_tensor([1, 2]),
                y.new_tensor([1, 2], dtype=torch.int32), y.new_zeros(2, dtype=torch.int64),
                y + y.new_ones(y.shape))
    both_modes(f, (POS,), (NEG,))


def test_new_tensors_are_fresh_on_every_call():
    def f(x):
        acc = x.new_zeros(3)
        acc.add_(x)
        if x.sum() > 0:
            acc.mul_(2.0)
        return acc
    check(f, (POS,), (NEG,), (POS * 3,))


# ------------------------------------------------------------------ metadata queries
def test_metadata_queries():
    def f(x):
        y = x.t().contiguous() if x.sum() > 0 else x.t() * 2 + 0.0
        return (y, y.device, y.is_cuda, y.is_cpu, y.dim(), y.ndim, y.element_size(), y.dtype,
                y.is_floating_point(), y.requires_grad, tuple(y.shape), y.size(0), y.numel(),
                y.is_contiguous(), y.stride(), y.get_device(), y.itemsize, y.nbytes,
                y.dtype.is_floating_point, y.is_leaf, y.grad is None, torch.is_tensor(y))
    m = torch.arange(6.0).reshape(3, 2).t()
    both_modes(f, (m,), (-m,))


def test_requires_grad_query_follows_the_input():
    def f(x):
        y = x * 2.0 if x.sum() > 0 else x + 1.0
        return y, y.requires_grad, y.detach().requires_grad
    g = to_graph(f, strict=True)
    for v in (POS, NEG):
        for rg in (False, True):
            a, b = v.clone().requires_grad_(rg), v.clone().requires_grad_(rg)
            assert_same(g(b), f(a))


# ------------------------------------------------------------------ library code
def test_library_code_keeps_working_on_traced_tensors():
    lin = torch.nn.Linear(3, 2)

    def f(x):
        y = F.relu(x) if x.sum() > 0 else F.softplus(x)
        z = lin(y.unsqueeze(0))
        return F.normalize(z, dim=1), F.layer_norm(y, (3,)), torch.nn.functional.dropout(y, 0.0)
    both_modes(f, (POS,), (NEG,))


# ------------------------------------------------------------------ Python-number stand-ins
def test_run_time_size_answers_as_an_int():
    def f(x):
        n = x[x > 0].shape[0]                     # known only at run time
        if x.sum() > 0:
            y = x * n
        else:
            y = x
        return y, type(n).__name__, isinstance(n, int), isinstance(n, torch.Tensor), \
            type(n) is int
    check(f, (POS,), (NEG,), (torch.tensor([1.0, -1.0, 2.0]),))


def counters_through_tensor_control_flow(x, n):
    k = 0
    acc = 0.0
    flag = False
    for j in range(3):
        if x.sum() > j:
            k += 1
            acc = acc + 0.5
            flag = True
        x = x - 1.0
    i = 0
    while x.abs().sum() < 30.0:
        x = x * 2.0
        i += 1
    return (x, k, acc, flag, i, type(k).__name__, type(acc) is float, isinstance(flag, bool),
            isinstance(i, int), isinstance(k, torch.Tensor), type(j).__name__)


def number_arithmetic_keeps_its_kind(x, n):
    k = 0
    if x.sum() > 0:
        k = k + 2
    h = k / 2
    q = k // 2
    m = -k * 1.5
    c = k > 1
    f = float(x.sum())
    i = int(x.max())
    b = bool(x.min() > -1.0)
    return (x * h, [type(v).__name__ for v in (k, h, q, m, c, f, i, b)],
            isinstance(h, float), isinstance(c, bool), k, h, q, m, c, f, i, b)


@pytest.mark.parametrize("fn", [counters_through_tensor_control_flow,
                                number_arithmetic_keeps_its_kind])
def test_python_number_stand_ins_answer_as_numbers(fn):
    both_modes(fn, (POS.clone(), 2), (NEG.clone(), 2), (torch.tensor([0.5, 0.1, 0.2]), 1))


def test_augmented_assignment_on_a_stand_in_rebinds_like_a_number():
    def f(x):
        k = 0
        if x.sum() > 0:
            k = k + 1
        j = k               # an alias: k += 1 below must not change j (ints are immutable)
        k += 1
        k *= 3
        return x * j, j, k, type(k).__name__
    both_modes(f, (POS,), (NEG,))


def path_dependent_type_in_branch(x):
    acc = 0.0
    if x.sum() > 0:
        acc = acc + x.sum()          # a tensor on this path, a float on the other
    return x, acc, isinstance(acc, float)


def path_dependent_type_in_loop(x):
    acc = 0.0
    for r in x:
        if r > 0:
            acc = acc + r
    return acc, type(acc).__name__


@pytest.mark.parametrize("fn", [path_dependent_type_in_branch, path_dependent_type_in_loop])
def test_a_type_known_only_at_run_time_falls_back(fn):
    falls_back(fn, (POS.clone(),), (NEG.clone(),), match="depends on the path taken")


def test_path_dependent_value_converts_when_its_type_is_not_asked():
    def f(x):
        acc = 0.0
        if x.sum() > 0:
            acc = acc + x.sum()
        return x * 2.0, acc
    check(f, (POS,), (NEG,))


def test_shape_with_a_run_time_dimension_answers_as_a_torch_size():
    def f(x):
        y = x[x > 0]                      # its length is known only at run time
        s = y.shape
        return (y, s, y.size(), type(s).__name__, isinstance(s, torch.Size), type(s) is tuple,
                torch.zeros(s), y.view(s[0], 1).shape, len(s))
    check(f, (POS,), (NEG,), (torch.tensor([1.0, -1.0, 2.0]),))
