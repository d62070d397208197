"""A converted call hands back Python numbers where eager returns Python numbers
(``runtime/returned_numbers.py``).

Inside a trace a number that depends on tensors is a 0-d graph value standing for it; the
outermost call's result turns each such slot into the int/float/bool eager returns, inside
any structure, on every path, while a 0-d tensor eager returns stays a tensor. Each case
runs eagerly, converted (default) and converted strict: ``type`` equal at every place of
the result, values equal (numbers exactly), no fallback warning; calls twice (the cached
entry, the generated entry function).
"""
from __future__ import annotations

import collections
import dataclasses
import math
import warnings

import pytest
import torch
import torch.nn as nn

from transpiler import ConversionError, FallbackWarning, to_graph


def same(got, exp, path="out"):
    """``got`` is ``exp``: types equal everywhere, numbers exact, tensors equal."""
    assert type(got) is type(exp), f"{path}: {type(got).__name__} {got!r} vs " \
                                   f"{type(exp).__name__} {exp!r}"
    if isinstance(exp, torch.Tensor):
        assert got.dtype == exp.dtype and got.shape == exp.shape, f"{path}: {got!r} vs {exp!r}"
        torch.testing.assert_close(got.detach(), exp.detach(), rtol=1e-6, atol=1e-6)
    elif isinstance(exp, float) and math.isnan(exp):
        assert math.isnan(got), path
    elif isinstance(exp, (int, float, bool, str, type(None), range)):
        assert got == exp, f"{path}: {got!r} vs {exp!r}"
    elif isinstance(exp, dict):
        assert list(got) == list(exp), path
        for k in exp:
            same(got[k], exp[k], f"{path}[{k!r}]")
    elif isinstance(exp, (tuple, list)):
        assert len(got) == len(exp), path
        for i, (a, b) in enumerate(zip(got, exp)):
            same(a, b, f"{path}[{i}]")
    elif dataclasses.is_dataclass(exp):
        same(vars(got), vars(exp), path)
    else:
        raise AssertionError(f"{path}: no rule for {type(exp).__name__}")


def check(fn, *args):
    """``fn`` converted (default and strict) returns eager's result, types and all."""
    exp = fn(*args)
    for strict in (False, True):
        g = to_graph(fn, strict=strict)
        with warnings.catch_warnings():
            warnings.simplefilter("error", FallbackWarning)
            for _ in range(2):
                same(g(*args), exp)
    return exp


def check_fallback(fn, *args, says):
    """``fn`` cannot hand back eager's type: default mode falls back (eager's result, one
    warning naming this file), strict raises."""
    exp = fn(*args)
    with pytest.warns(FallbackWarning, match=says) as caught:
        same(to_graph(fn)(*args), exp)
    assert __file__ in str(caught[0].message)
    with pytest.raises(ConversionError, match=says):
        to_graph(fn, strict=True)(*args)


POS = torch.tensor([0.5, 1.25, 2.0])
NEG = -POS


# ------------------------------------------------------------------ casts of tensors
@pytest.mark.parametrize("x", [POS, NEG])
def test_item_int_float_bool_casts(x):
    def f(x):
        return x.sum().item(), float(x.max()), int(x.argmax()), bool(x.sum() > 0), \
            (x > 0).all().item(), x.long().sum().item()
    out = check(f, x)
    assert [type(v) for v in out] == [float, float, int, bool, bool, int]


def test_float_is_eagers_double_and_int_is_int64():
    def f(x):
        return x.double().sum().item() + 1e-12, int(x.long().sum()) + 2 ** 40
    check(f, torch.tensor([1.0, 2.0]))


def test_len_and_sizes():
    def f(x):
        return len(x), x.shape[1], x.numel(), x.dim(), x.size()
    check(f, torch.ones(4, 3))


def test_math_of_stand_ins():
    def f(x):
        v = x.abs().sum().item()
        return math.sqrt(v), math.floor(v), math.isfinite(v), round(v, 2), abs(-v), v // 1
    out = check(f, POS)
    assert [type(v) for v in out] == [float, int, bool, float, float, float]


def test_comparison_result_usable_as_python_bool():
    def f(x):
        return x.sum().item() == 3.75, int(x.argmax()) == 2
    a, b = check(f, POS)
    assert a is True and b is True


# ------------------------------------------------------------------ tensor control flow
@pytest.mark.parametrize("x", [POS, NEG])
def test_counter_changed_in_tensor_if(x):
    def f(x):
        k, lr, flag = 0, 0.1, False
        if x.sum() > 0:
            k, lr, flag = k + 1, lr * 0.5, True
        else:
            k = 2
        return k, lr, flag
    check(f, x)


@pytest.mark.parametrize("n", [0.0, 3.5, 9.0])
def test_counter_from_tensor_while_exit(n):
    def f(x):
        k, total = 0, 0.0
        while x.sum() > k:
            k += 1
            total += 0.5
        return k, total, k * 2, k / 4
    out = check(f, torch.tensor([n]))
    assert [type(v) for v in out] == [int, float, int, float]


def test_index_after_tensor_break():
    def f(x):
        i = 0
        for i in range(5):
            if x[i % 3] > 1:
                break
        return i
    check(f, POS)
    check(f, NEG)


@pytest.mark.parametrize("x", [POS, NEG])
def test_number_first_bound_in_a_tensor_loop(x):
    def f(x):
        for row in x:
            if row > 1:
                where = 1
                break
        else:
            where = -1
        return where
    check(f, x)


def test_nested_converted_helper_returns_number_inside():
    @to_graph
    def inner(x):
        return x.sum().item()

    def f(x):
        v = inner(x)        # a stand-in inside the trace: arithmetic and torch.tensor as eager
        return v * 2, torch.tensor(v), type(v) is float
    out = check(f, POS)
    assert type(out[1]) is torch.Tensor and out[2] is True


# ------------------------------------------------------------------ structures
NT = collections.namedtuple("NT", "loss n flags")


@dataclasses.dataclass
class Metrics:
    loss: float
    steps: int
    logits: torch.Tensor


def test_numbers_inside_returned_containers():
    def f(x):
        loss = x.pow(2).mean()
        return {"loss": loss.item(), "t": loss, "hist": [float(x[0]), (int(x.argmax()),)]}, \
            NT(loss.item(), int(x.argmin()), [bool(x[0] > 0), x > 0])
    out = check(f, POS)
    assert type(out[0]["loss"]) is float and type(out[1].n) is int


def test_numbers_inside_returned_dataclass():
    def f(x):
        k = 0
        if x.sum() > 0:
            k = 3
        return Metrics(x.mean().item(), k, x * 2)
    for x in (POS, NEG):
        out = check(f, x)
        assert type(out.loss) is float and type(out.steps) is int


def test_module_forward_returning_a_number():
    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 1)

        def forward(self, x):
            return self.lin(x).pow(2).mean().item()
    net = Net()
    exp = net(POS)
    g = to_graph(net)
    for _ in range(2):
        same(g(POS), exp)


def test_training_step_returns_loss_item():
    torch.manual_seed(0)
    net = nn.Linear(3, 1)
    twin = nn.Linear(3, 1)
    twin.load_state_dict(net.state_dict())

    def make(model):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)

        def step(x):
            opt.zero_grad()
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
            return loss.item()
        return step
    eager, conv = make(net), to_graph(make(twin))
    for _ in range(3):
        same(conv(POS), eager(POS))


# ------------------------------------------------------------------ tensors stay tensors
def test_zero_dim_tensors_stay_tensors():
    def f(x):
        s = x.sum()
        n = 0
        if s > 0:
            n = 1
        return s, x[0], x.argmax(), s > 0, torch.tensor(3), x.double().sum(), n
    out = check(f, POS)
    assert [type(v) for v in out[:6]] == [torch.Tensor] * 6 and type(out[6]) is int


def test_graph_level_apis_keep_tensors():
    """``.graph()`` and a Session running it hand back the graph's 0-d tensor."""
    import runtime

    def f(x):
        return x.sum().item()
    g = to_graph(f)
    assert type(g(POS)) is float
    graph = g.graph(POS)
    x_in = next(n for n in graph.nodes if n.op == "placeholder")
    out = runtime.Session(graph).run(graph.outputs, {x_in: POS})
    assert type(out) is torch.Tensor and out.dim() == 0 and out.dtype == torch.float64
    assert out.item() == f(POS)


# ------------------------------------------- undecidable: the 0-d tensor stands for it
@pytest.mark.parametrize("strict", [False, True])
def test_number_or_tensor_by_path_converts_with_a_stand_in(strict):
    """A number on one path and a tensor on the other cannot be told apart when the graph
    runs: the call converts and hands back the graph's 0-d tensor on both paths (eager's
    tensor, with its dtype, where eager's is one; a 0-d tensor of the number's kind standing
    for eager's number on the other), not a fallback."""
    def f(x):
        s = 0.0
        if x.sum() > 0:
            s = x.sum()
        return s
    g = to_graph(f, strict=strict)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        pos, neg = g(POS), g(NEG)
    assert type(pos) is torch.Tensor and pos.dtype == f(POS).dtype and torch.equal(pos, f(POS))
    assert type(neg) is torch.Tensor and neg.dim() == 0 and neg.dtype.is_floating_point
    assert type(f(NEG)) is float and neg.item() == f(NEG)
    assert g.cache_info().traces == 1


@pytest.mark.parametrize("x", [POS, NEG, torch.tensor([20.0, 1.0, 2.0])])
def test_lists_of_numbers_grown_in_tensor_control_flow(x):
    def f(x):
        out, flags, i = [], [], 0
        while x[i] < 10 and i < 2:
            out.append(x[i].item())
            flags.append(bool(x[i] > 1))
            i += 1
        ints = [1]
        if x.sum() > 0:
            ints.extend([2, 3])
        else:
            ints.insert(0, 9)
        return out, flags, ints, i
    check(f, x)


def test_list_of_tensors_grown_in_a_tensor_loop_stays_tensors():
    def f(x):
        out, i = [], 0
        while x[i] < 10 and i < 2:
            out.append(x[i] * 2)
            i += 1
        return out
    assert [type(v) for v in check(f, POS)] == [torch.Tensor] * 2


def test_requires_grad_chosen_by_a_branch_is_a_bool():
    def f(x):
        w = torch.ones(3)
        if x.sum() > 0:
            w.requires_grad_()
        return x * w, w.requires_grad
    check(f, POS)
    check(f, NEG)
