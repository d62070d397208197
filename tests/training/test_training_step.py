"""The whole training step inside a converted function (issue 15.2).

``to_graph(step)`` where ``step`` runs the forward, the loss, ``opt.zero_grad()``,
``loss.backward()``, ``opt.step()`` (and schedulers, clipping, ``.grad`` reads,
``loss.item()``, branches on the loss, micro-batch accumulation) converts: one trace
serves every step, and losses, gradients, parameters and optimizer state equal eager's
over several steps with different batches. What a graph cannot repeat falls back with a
reason naming the line (strict: ConversionError).
"""
from __future__ import annotations

import copy
import re
import warnings

import pytest
import torch
import torch.nn.functional as F

from tests.e2e.autograd_programs import backward_inside
from transpiler import ConversionError, FallbackWarning, to_graph

STEPS = 4
TOL = 1e-5


# ------------------------------------------------------------------------- models
class GRULike(torch.nn.Module):
    """A small gated RNN: a Python ``for`` over the time steps."""

    def __init__(self, n_in=4, n_hidden=8):
        super().__init__()
        self.x2h = torch.nn.Linear(n_in, 2 * n_hidden)
        self.h2h = torch.nn.Linear(n_hidden, 2 * n_hidden)
        self.out = torch.nn.Linear(n_hidden, 3)

    def forward(self, xs):
        h = xs.new_zeros(xs.shape[1], self.h2h.in_features)
        for xt in xs:
            z, c = (self.x2h(xt) + self.h2h(h)).chunk(2, dim=-1)
            z = torch.sigmoid(z)
            h = z * h + (1 - z) * torch.tanh(c)
        return self.out(h)


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16),
                               torch.nn.GELU(), torch.nn.Linear(16, 3))


def convnet():
    return torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3, padding=1), torch.nn.ReLU(),
                               torch.nn.Conv2d(4, 4, 3, padding=1), torch.nn.ReLU(),
                               torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                               torch.nn.Linear(4, 3))


def batches(kind, step):
    g = torch.Generator().manual_seed(100 + step)
    scale = 4.0 if step % 2 else 0.3         # the loss crosses 1 both ways
    if kind == "mlp":
        x = torch.randn(5, 6, generator=g)
    elif kind == "conv":
        x = torch.randn(3, 2, 6, 6, generator=g)
    else:
        x = torch.randn(4, 3, 4, generator=g)      # (time, batch, features)
    y = torch.randn(x.shape[1] if kind == "rnn" else x.shape[0], 3, generator=g) * scale
    return x, y


MODELS = {"mlp": mlp, "conv": convnet, "rnn": GRULike}
OPTIMIZERS = {
    "sgd": lambda p: torch.optim.SGD(p, lr=0.05),
    "sgd_momentum": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True),
    "adam": lambda p: torch.optim.Adam(p, lr=0.01),
    "adamw": lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1),
}


def twins(kind, optimizer):
    """Two equal (model, optimizer, scheduler) triples: one for eager, one converted."""
    torch.manual_seed(0)
    model = MODELS[kind]()
    out = []
    for m in (model, copy.deepcopy(model)):
        opt = OPTIMIZERS[optimizer](m.parameters())
        out.append((m, opt, torch.optim.lr_scheduler.StepLR(opt, 2, 0.5)))
    return out


def assert_close(got, exp, what):
    if isinstance(exp, (tuple, list)):
        assert len(got) == len(exp), what
        for i, (g, e) in enumerate(zip(got, exp)):
            assert_close(g, e, f"{what}[{i}]")
        return
    if exp is None:
        assert got is None, what
        return
    g = torch.as_tensor(got, dtype=torch.float64)
    e = torch.as_tensor(exp, dtype=torch.float64)
    assert g.shape == e.shape, what
    assert torch.allclose(g, e, rtol=TOL, atol=TOL), f"{what}: {got} != {exp}"


def assert_same_state(m1, o1, m2, o2):
    for (name, p1), p2 in zip(m1.named_parameters(), m2.parameters()):
        assert_close(p2.detach(), p1.detach(), name)
        assert_close(p2.grad, p1.grad, name + ".grad")
    for s1, s2 in zip(o1.state.values(), o2.state.values()):
        for k in s1:
            assert_close(s2[k], s1[k], f"optimizer state {k}")
    assert o1.param_groups[0]["lr"] == o2.param_groups[0]["lr"]


def run_both(make_step, kind, optimizer, strict, steps=STEPS):
    """Run ``make_step(m, opt, sched)`` eagerly and converted, batch by batch; compare
    results every step and the whole state at the end. Returns the converted function."""
    (m1, o1, s1), (m2, o2, s2) = twins(kind, optimizer)
    eager, g = make_step(m1, o1, s1), to_graph(make_step(m2, o2, s2), strict=strict)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        for i in range(steps):
            x, y = batches(kind, i)
            exp = eager(x, y)
            got = g(x, y)
            assert_close(got, exp, f"step {i}")
    assert_same_state(m1, o1, m2, o2)
    assert g.cache_info().traces == 1, g.cache_info()     # params change in place: no retrace
    return g


# ------------------------------------------------------------------------- steps
def plain_step(m, opt, sched):
    def step(x, y):
        opt.zero_grad()
        loss = F.mse_loss(m(x), y)
        loss.backward()
        opt.step()
        return loss.detach()
    return step


def branchy_step(m, opt, sched):
    def step(x, y):
        opt.zero_grad()
        loss = F.mse_loss(m(x), y)
        if loss > 1:                    # a tensor if on the loss
            loss = loss * 0.5
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        first = next(iter(m.parameters())).grad.sum()
        opt.step()
        sched.step()
        return loss.item(), norm, first
    return step


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("kind", ["mlp", "conv", "rnn"])
def test_plain_step(kind, strict):
    run_both(plain_step, kind, "sgd_momentum", strict)


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("kind,optimizer", [("mlp", "sgd"), ("mlp", "adam"), ("conv", "adamw"),
                                            ("rnn", "adam"), ("rnn", "sgd_momentum")])
def test_branch_on_loss_clip_and_scheduler(kind, optimizer, strict):
    g = run_both(branchy_step, kind, optimizer, strict)
    x, y = batches(kind, 0)
    ops = [n.op for n in g.graph(x, y).nodes]
    assert "cond" in ops and "run_backward" in ops and ops.count("call_method") == 3, ops


def test_item_is_returned_as_a_python_float():
    (m, opt, sched), _ = twins("mlp", "sgd")
    g = to_graph(branchy_step(m, opt, sched), strict=True)
    loss, norm, first = g(*batches("mlp", 1))
    assert type(loss) is float      # (the graph's detached float64 stand-in, handed back)
    assert not norm.requires_grad and not first.requires_grad


def accumulate_step(m, opt, sched):
    def step(x, y):
        opt.zero_grad(set_to_none=False)
        total = 0.0
        for xb, yb in zip(x.chunk(2), y.chunk(2)):      # micro-batches
            loss = F.mse_loss(m(xb), yb) / 2
            if loss > 0.5:
                loss = loss * 0.9
            loss.backward()
            total = total + loss.detach()
        grads = [p.grad.clone() for p in m.parameters()]
        opt.step()
        return total, grads
    return step


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("kind", ["mlp", "conv"])
def test_gradient_accumulation_over_micro_batches(kind, strict):
    run_both(accumulate_step, kind, "adam", strict)


def functional_backward_step(m, opt, sched):
    def step(x, y):
        m.zero_grad()                                   # the module's own, set_to_none
        out = m(x)
        a, b = F.mse_loss(out, y), out.abs().mean()
        b.backward(retain_graph=True)                   # out's graph kept for the next
        before = [p.grad.clone() for p in m.parameters()]
        torch.autograd.backward([a], [torch.tensor(2.0)])
        torch.nn.utils.clip_grad_value_(m.parameters(), 0.1)
        opt.step()
        after = F.mse_loss(m(x), y)                     # sees the updated parameters
        return a.detach(), before, after.detach()
    return step


@pytest.mark.parametrize("strict", [False, True])
def test_autograd_backward_retain_graph_and_forward_after_step(strict):
    run_both(functional_backward_step, "mlp", "sgd", strict)


def until_step(m, opt, sched):
    def fit(x, y):
        loss = F.mse_loss(m(x), y)
        n = 0
        while loss > 0.5 and n < 4:             # a tensor while: steps inside the loop body
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss = F.mse_loss(m(x), y)          # reads the parameters the step changed
            n += 1
        return loss.detach(), n
    return fit


@pytest.mark.parametrize("strict", [False, True])
def test_train_until_a_loss_threshold_in_a_tensor_loop(strict):
    g = run_both(until_step, "mlp", "sgd", strict)
    assert "while" in [n.op for n in g.graph(*batches("mlp", 0)).nodes]


def test_grad_read_after_zero_grad_is_none_and_checked():
    (m, opt, sched), (m2, opt2, sched2) = twins("mlp", "sgd")

    def make(m, opt):
        def step(x, y):
            opt.zero_grad()
            none = [p.grad is None for p in m.parameters()]
            F.mse_loss(m(x), y).backward()
            return none, [p.grad is None for p in m.parameters()]
        return step
    g = to_graph(make(m2, opt2), strict=True)
    for i in range(3):
        x, y = batches("mlp", i)
        assert g(x, y) == make(m, opt)(x, y) == ([True] * 6, [False] * 6)


def test_grad_reached_on_one_branch_only_falls_back_and_set_to_none_runs():
    a = torch.nn.Parameter(torch.ones(2))
    b = torch.nn.Parameter(torch.ones(2))

    def f(x):
        a.grad = None                   # a setter node: runs on every call
        b.grad = None
        loss = (x * a).sum()
        if loss > 0:
            loss = loss + (x * b).sum()     # b gets a gradient on this path only
        loss.backward()
        return a.grad, b.grad

    def g_only(x):
        a.grad = None
        (x * a).sum().backward()
        return a.grad
    for x in (torch.ones(2), -torch.ones(2)):
        a.grad = torch.full((2,), 5.0)
        exp = g_only(x).clone()
        a.grad = torch.full((2,), 5.0)
        assert torch.equal(to_graph(g_only, strict=True)(x), exp)
    with pytest.raises(ConversionError, match="depends on the path"):
        to_graph(f, strict=True)(torch.ones(2))
    g = to_graph(f)
    with pytest.warns(FallbackWarning):
        got = g(-torch.ones(2))
    assert torch.equal(got[0], -torch.ones(2)) and got[1] is None


def test_leaf_made_inside_gets_its_gradient():
    g = to_graph(backward_inside, strict=True)
    for x in (torch.tensor([1.0, 2.0, 3.0]), torch.tensor([-1.0, -2.0, 0.5])):
        assert torch.equal(g(x), backward_inside(x))


# ------------------------------------------------------------------------- passes
class ParamOnly(torch.nn.Module):
    """A value computed from parameters alone (``fold_parameters`` would keep it) and
    in-place-prone activations (``plan_memory``'s ``relu_`` form)."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(6, 6)
        self.log_scale = torch.nn.Parameter(torch.zeros(6))
        self.head = torch.nn.Linear(6, 3)

    def forward(self, x):
        h = torch.relu(self.lin(x)) * self.log_scale.exp()
        h = torch.relu(h + 1) - 1
        return self.head(torch.tanh(h) * 2)


def test_parameter_only_values_follow_each_step():
    torch.manual_seed(0)
    m1 = ParamOnly()
    m2 = copy.deepcopy(m1)
    o1, o2 = torch.optim.SGD(m1.parameters(), lr=0.5), torch.optim.SGD(m2.parameters(), lr=0.5)

    def make(m, opt):
        def step(x, y):
            opt.zero_grad()
            loss = F.mse_loss(m(x), y)
            loss.backward()
            opt.step()
            return loss.detach(), m.log_scale.exp()
        return step
    g = to_graph(make(m2, o2), strict=True)
    for i in range(STEPS):
        x, y = batches("mlp", i)
        assert_close(g(x, y), make(m1, o1)(x, y), f"step {i}")
    assert_same_state(m1, o1, m2, o2)
    assert g.cache_info().traces == 1


def test_converted_model_in_an_eager_loop():
    """``to_graph(model)`` trained by an eager loop: folded parameter values, planned
    buffers and in-place forms stay right while the optimizer changes the weights."""
    torch.manual_seed(0)
    m1 = ParamOnly()
    m2 = copy.deepcopy(m1)
    gm = to_graph(m2, strict=True)
    o1, o2 = torch.optim.Adam(m1.parameters(), lr=0.05), torch.optim.Adam(m2.parameters(), lr=0.05)
    for i in range(STEPS):
        x, y = batches("mlp", i)
        for m, o in ((m1, o1), (gm, o2)):
            o.zero_grad()
            F.mse_loss(m(x), y).backward()
            o.step()
    assert_same_state(m1, o1, m2, o2)
    # the graph has what could go wrong: a folded parameter value and a planned buffer
    planned = gm._graph_function.graph(batches("mlp", 0)[0]).optimize()
    ops = [n.op for n in planned.walk()]
    assert "folded" in ops and any(k.startswith("planned") for n in planned.walk()
                                   for k in n.attrs), planned


@pytest.mark.parametrize("strict", [False, True])
def test_autograd_grad(strict):
    lin = torch.nn.Linear(3, 2)

    def f(x):
        y = lin(x).tanh().sum()
        if y > 0:
            y = y * 3
        gw, gx = torch.autograd.grad(y, [lin.weight, x], retain_graph=True)
        (gb,) = torch.autograd.grad(y * 2, lin.bias)
        return gw, gx, gb, y.detach(), lin.weight.grad
    g = to_graph(f, strict=strict)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        for sign in (1.0, -1.0, 1.0):
            x = (torch.randn(4, 3) * sign).requires_grad_()
            got, exp = g(x), f(x)
            assert_close(got, exp, "grads")
            assert not any(t.requires_grad for t in got[:3])
    assert g.cache_info().traces == 1


# ------------------------------------------------------------------------- fallbacks
class MySGD(torch.optim.SGD):
    def step(self, closure=None):           # not torch's own step
        return super().step(closure)


def custom_optimizer_step(m, opt, sched):
    def step(x, y):
        opt.zero_grad()
        F.mse_loss(m(x), y).backward()
        opt.step()
        return m[0].weight.detach().clone()
    return step


def closure_step(m, opt, sched):
    def step(x, y):
        def closure():
            opt.zero_grad()
            loss = F.mse_loss(m(x), y)
            loss.backward()
            return loss
        return opt.step(closure).detach()
    return step


def state_dict_step(m, opt, sched):
    def step(x, y):
        opt.zero_grad()
        F.mse_loss(m(x), y).backward()
        opt.step()
        return len(opt.state_dict()["state"])
    return step


@pytest.mark.parametrize("make_step,reason", [
    (custom_optimizer_step, "MySGD.step()"),
    (closure_step, "step(closure)"),
    (state_dict_step, "state_dict()"),
])
def test_what_a_graph_cannot_repeat_falls_back(make_step, reason):
    torch.manual_seed(0)
    m1 = mlp()
    m2 = copy.deepcopy(m1)
    cls = MySGD if make_step is custom_optimizer_step else torch.optim.SGD
    o1, o2 = cls(m1.parameters(), lr=0.1), cls(m2.parameters(), lr=0.1)
    eager, g = make_step(m1, o1, None), to_graph(make_step(m2, o2, None))
    for i in range(2):
        x, y = batches("mlp", i)
        exp = eager(x, y)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = g(x, y)
        said = [str(w.message) for w in caught if issubclass(w.category, FallbackWarning)]
        if i == 0:              # one warning, naming the line; later calls run eagerly
            assert len(said) == 1 and reason in said[0], said
            assert "test_training_step.py:" in said[0], said
        assert_close(got, exp, f"call {i}")
    for p1, p2 in zip(m1.parameters(), m2.parameters()):
        assert_close(p2.detach(), p1.detach(), "param")
    with pytest.raises(ConversionError, match=re.escape(reason)):
        to_graph(make_step(m2, o2, None), strict=True)(*batches("mlp", 0))
