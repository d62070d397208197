"""SGD's step in a converted training step runs as one C loop (``runtime/kernels/sgd_step``)
and must keep eager's bits: parameters, momentum buffers, losses and version counters
equal to eager's (``torch.equal``) over many steps, for every SGD option; whatever the loop
cannot do exactly runs ``opt.step()`` itself."""
import copy
import warnings

import pytest
import torch
import torch.nn.functional as F

from runtime.kernels import sgd_step
from transpiler import to_graph

needs_kernel = pytest.mark.skipif(sgd_step._function() is None, reason="no C compiler")


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(13, 37)
        self.b = torch.nn.Linear(37, 5)
        self.unused = torch.nn.Linear(3, 3)       # no gradient: skipped, as eager

    def forward(self, x):
        h = torch.relu(self.a(x))
        if h.mean() > 0.2:                          # a data-dependent branch
            h = h * 2
        return self.b(h)


def step(model, opt, x, y):
    opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss.detach()


def _batches(n):
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(8, 13, generator=g), torch.randint(0, 5, (8,), generator=g))
            for _ in range(n)]


def _pair(make_opt, model=None):
    torch.manual_seed(0)
    model = model or Net()
    twin = copy.deepcopy(model)
    return (model, make_opt(model)), (twin, make_opt(twin))


def _count_fast(monkeypatch):
    hits = []
    run = sgd_step.run

    def counted(opt):
        done = run(opt)
        hits.append(done)
        return done
    monkeypatch.setattr(sgd_step, "run", counted)
    return hits


def _versions(model):
    return [p._version for p in model.parameters()]


def _assert_same(eager, conv, start=None):
    """Same parameters and optimizer state; with ``start`` (both models' version counters
    before training: a deep copy starts at 0, the initialized original does not), the same
    number of in-place changes."""
    (m1, o1), (m2, o2) = eager, conv
    for p, q in zip(m1.parameters(), m2.parameters()):
        assert torch.equal(p, q)
    if start is not None:
        moved = [[a - b for a, b in zip(_versions(m), v)] for m, v in zip((m1, m2), start)]
        assert moved[0] == moved[1]
    for p, q in zip(m1.parameters(), m2.parameters()):
        s1, s2 = o1.state.get(p, {}), o2.state.get(q, {})
        assert s1.keys() == s2.keys()
        for k in s1:
            assert torch.equal(s1[k], s2[k])


OPTIONS = [dict(lr=0.05, momentum=0.9),
           dict(lr=0.05),
           dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-3),
           dict(lr=0.05, momentum=0.8, dampening=0.3, weight_decay=5e-4, maximize=True),
           dict(lr=0.1, weight_decay=1e-2, maximize=True),
           dict(lr=3, momentum=0.5)]                     # int lr


@needs_kernel
@pytest.mark.parametrize("kw", OPTIONS, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_converted_step_keeps_eager_bits(kw, monkeypatch):
    hits = _count_fast(monkeypatch)
    eager, conv = _pair(lambda m: torch.optim.SGD(m.parameters(), **kw))
    converted = to_graph(step)
    start = (_versions(eager[0]), _versions(conv[0]))
    for x, y in _batches(12):
        l1 = step(*eager, x, y)
        l2 = converted(*conv, x, y)
        assert torch.equal(l1, l2)
    _assert_same(eager, conv, start)
    # the first step makes the momentum buffers (eager's clone); with momentum every later
    # step runs in C, without it every step
    assert hits.count(True) == (11 if kw.get("momentum") else 12)


@needs_kernel
def test_param_groups_and_a_scheduler(monkeypatch):
    hits = _count_fast(monkeypatch)

    def make(m):
        opt = torch.optim.SGD([{"params": m.a.parameters(), "lr": 0.1},
                               {"params": list(m.b.parameters()) + list(m.unused.parameters()),
                                "weight_decay": 1e-2, "nesterov": True}],
                              lr=0.02, momentum=0.9)
        return opt, torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)

    torch.manual_seed(0)
    m1 = Net()
    m2 = copy.deepcopy(m1)
    (o1, s1), (o2, s2) = make(m1), make(m2)

    def sched_step(model, opt, sched, x, y):
        loss = step(model, opt, x, y)
        sched.step()
        return loss

    converted = to_graph(sched_step)
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # no "scheduler before optimizer" warning
        for x, y in _batches(10):
            assert torch.equal(sched_step(m1, o1, s1, x, y), converted(m2, o2, s2, x, y))
    _assert_same((m1, o1), (m2, o2))
    assert s1.state_dict() == s2.state_dict()
    assert o2._opt_called
    assert hits.count(True) == 9


@needs_kernel
def test_hooks_and_subclasses_run_the_optimizer_itself(monkeypatch):
    hits = _count_fast(monkeypatch)
    seen = []

    class MySGD(torch.optim.SGD):
        pass

    for make in (lambda m: MySGD(m.parameters(), lr=0.1, momentum=0.9),
                 lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9,
                                           foreach=True),
                 lambda m: torch.optim.SGD(m.parameters(), lr=torch.tensor(0.1),
                                           momentum=0.9)):
        hits.clear()
        eager, conv = _pair(make)
        converted = to_graph(step)
        for x, y in _batches(4):
            assert torch.equal(step(*eager, x, y), converted(*conv, x, y))
        _assert_same(eager, conv)
        assert not any(hits)

    hits.clear()
    eager, conv = _pair(lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9))
    for _, opt in (eager, conv):
        opt.register_step_post_hook(lambda o, args, kwargs: seen.append(type(o).__name__))
    converted = to_graph(step)
    for x, y in _batches(4):
        assert torch.equal(step(*eager, x, y), converted(*conv, x, y))
    _assert_same(eager, conv)
    assert not any(hits) and len(seen) == 8


@needs_kernel
def test_plan_refuses_what_it_cannot_do_exactly():
    p = torch.nn.Parameter(torch.randn(6, 4))
    opt = torch.optim.SGD([p], lr=0.1, momentum=0.9)
    p.grad = torch.randn(6, 4)
    assert not sgd_step.run(opt)                 # first step: no momentum buffer yet
    opt.step()
    p.grad = torch.randn(4, 6).t()              # a non-contiguous gradient
    assert not sgd_step.run(opt)
    p.grad = p.grad.contiguous()
    before = p.detach().clone()
    assert sgd_step.run(opt)
    assert not torch.equal(before, p)
    q = torch.nn.Parameter(torch.randn(3, dtype=torch.float64))
    opt64 = torch.optim.SGD([q], lr=0.1)
    q.grad = torch.ones(3, dtype=torch.float64)
    assert not sgd_step.run(opt64)               # float64: torch's step


@needs_kernel
def test_version_counter_moves_so_autograd_sees_the_step():
    """A graph that saved a parameter cannot run backward after the step changed it, with
    the kernel as in eager."""
    lin = torch.nn.Linear(4, 4)
    opt = torch.optim.SGD(lin.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(2, 4, requires_grad=True)
    lin(x).sum().backward()
    opt.step()
    out = (lin(x) ** 2).sum()
    out.backward(retain_graph=True)
    assert sgd_step.run(opt)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.backward()


@needs_kernel
def test_large_parameters_split_over_threads_keep_bits():
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        p = torch.nn.Parameter(torch.randn(300_001))
        q = torch.nn.Parameter(p.detach().clone())
        o1 = torch.optim.SGD([p], lr=0.01, momentum=0.9, weight_decay=1e-4)
        o2 = torch.optim.SGD([q], lr=0.01, momentum=0.9, weight_decay=1e-4)
        for i in range(3):
            p.grad = torch.randn(300_001)
            q.grad = p.grad.clone()
            o1.step()
            if i == 0:
                o2.step()
            else:
                assert sgd_step.run(o2)
        assert torch.equal(p, q)
    finally:
        torch.set_num_threads(threads)
