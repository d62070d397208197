"""Adam's and AdamW's step in a converted training step run as one C loop
(``runtime/kernels/adam_step``) and must keep eager's bits: parameters, ``exp_avg``,
``exp_avg_sq``, ``max_exp_avg_sq``, ``step``, losses and version counters equal to eager's
(``torch.equal``) over many steps, for every option; whatever the loop cannot do exactly
runs ``opt.step()`` itself.

The rounding was found by experiment (torch 2.13 CPU, AVX512, MKL), each op against a C
candidate over sizes 1..100 and 65536+odd, 1 and 2 threads: ``lerp_`` is ``fma(w, end -
self, self)`` / ``fma(w - 1, end - self, end)`` (the plain formula, rounded per op, differs
in ~1 element of 5); ``addcmul_`` is ``fma(value * t1, t2, self)`` (rounding the product
and the sum separately differs); ``mul_``, ``/ float``, ``add_(eps)``, ``addcdiv_`` round
once per op; ``sqrt`` is MKL's ``vmsSqrt`` (1 element in 6 one ulp off IEEE's, elementwise,
so the kernel calls it; ``sqrtf`` fails the whole-step comparison on ~450 of 612 tensors).
The whole step then matched torch's for Adam and AdamW, both lerp branches, amsgrad,
maximize, L2 and decoupled decay, gradients from 1e-40 (denormals) to 1e19 (overflow)."""
import copy
import warnings

import pytest
import torch

from runtime.kernels import adam_step
from tests.training.test_sgd_step_kernel import Net, _batches, _pair, step
from transpiler import to_graph

needs_kernel = pytest.mark.skipif(adam_step._function() is None, reason="no C compiler")


def _count_fast(monkeypatch):
    hits = []
    run = adam_step.run

    def counted(opt):
        done = run(opt)
        hits.append(done)
        return done
    monkeypatch.setattr(adam_step, "run", counted)
    return hits


def _versions(model, opt):
    """Every version counter the step may move: parameters and optimizer state."""
    out = []
    for p in model.parameters():
        out.append(p._version)
        for k, t in sorted(opt.state.get(p, {}).items()):
            out.append((k, t._version))
    return out


def _assert_same(eager, conv):
    (m1, o1), (m2, o2) = eager, conv
    for p, q in zip(m1.parameters(), m2.parameters()):
        assert torch.equal(p, q)
        s1, s2 = o1.state.get(p, {}), o2.state.get(q, {})
        assert s1.keys() == s2.keys()
        for k in s1:
            assert s1[k].dtype == s2[k].dtype and torch.equal(s1[k], s2[k]), k


def _version_moves(before, after):
    return [b - a if isinstance(a, int) else (a[0], b[1] - a[1])
            for a, b in zip(before, after)]


OPTIONS = [(torch.optim.Adam, dict()),
           (torch.optim.Adam, dict(lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=1e-2)),
           (torch.optim.Adam, dict(lr=0.02, betas=(0.3, 0.9), amsgrad=True, maximize=True)),
           (torch.optim.Adam, dict(lr=0.005, weight_decay=5e-4, amsgrad=True)),
           (torch.optim.AdamW, dict()),
           (torch.optim.AdamW, dict(lr=0.01, betas=(0.5, 0.95), eps=1e-5, weight_decay=0.1,
                                    amsgrad=True)),
           (torch.optim.AdamW, dict(lr=0.003, weight_decay=0, maximize=True)),
           (torch.optim.AdamW, dict(lr=1, betas=(0.9, 0.999), weight_decay=1e-3))]  # int lr


def _id(case):
    cls, kw = case
    return cls.__name__ + "-" + ",".join(f"{k}={v}" for k, v in kw.items())


@needs_kernel
@pytest.mark.parametrize("case", OPTIONS, ids=_id)
def test_converted_step_keeps_eager_bits(case, monkeypatch):
    cls, kw = case
    hits = _count_fast(monkeypatch)
    eager, conv = _pair(lambda m: cls(m.parameters(), **kw))
    converted = to_graph(step)
    for i, (x, y) in enumerate(_batches(13)):
        before = (_versions(*eager), _versions(*conv))
        l1 = step(*eager, x, y)
        l2 = converted(*conv, x, y)
        assert torch.equal(l1, l2)
        if i:                           # (the first step makes the state)
            assert _version_moves(before[0], _versions(*eager)) == \
                _version_moves(before[1], _versions(*conv))
        _assert_same(eager, conv)
    # the first step makes the state (eager's zeros and step tensor); every later one in C
    assert hits.count(True) == 12
    assert conv[1].state[conv[0].a.weight]["step"].item() == 13


@needs_kernel
def test_param_groups_and_a_scheduler(monkeypatch):
    hits = _count_fast(monkeypatch)

    def make(m):
        opt = torch.optim.AdamW([{"params": m.a.parameters(), "lr": 0.01, "amsgrad": True},
                                 {"params": list(m.b.parameters()) +
                                  list(m.unused.parameters()),
                                  "weight_decay": 0.05, "betas": (0.7, 0.98)}],
                                lr=0.002)
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
def test_refused_cases_run_the_optimizer_itself(monkeypatch):
    hits = _count_fast(monkeypatch)
    seen = []

    class MyAdam(torch.optim.Adam):
        pass

    for make in (lambda m: MyAdam(m.parameters()),
                 lambda m: torch.optim.Adam(m.parameters(), foreach=True),
                 lambda m: torch.optim.AdamW(m.parameters(), fused=True),
                 lambda m: torch.optim.AdamW(m.parameters(), lr=torch.tensor(0.01)),
                 lambda m: torch.optim.Adam(m.parameters(), betas=(torch.tensor(0.9),
                                                                   torch.tensor(0.99)))):
        hits.clear()
        eager, conv = _pair(make)
        converted = to_graph(step)
        for x, y in _batches(4):
            assert torch.equal(step(*eager, x, y), converted(*conv, x, y))
        _assert_same(eager, conv)
        assert hits and not any(hits)

    hits.clear()
    eager, conv = _pair(lambda m: torch.optim.AdamW(m.parameters()))
    for _, opt in (eager, conv):
        opt.register_step_post_hook(lambda o, args, kwargs: seen.append(type(o).__name__))
    converted = to_graph(step)
    for x, y in _batches(4):
        assert torch.equal(step(*eager, x, y), converted(*conv, x, y))
    _assert_same(eager, conv)
    assert hits and not any(hits) and len(seen) == 8


@needs_kernel
def test_plan_refuses_what_it_cannot_do_exactly():
    p = torch.nn.Parameter(torch.randn(6, 4))
    opt = torch.optim.Adam([p])
    p.grad = torch.randn(6, 4)
    assert not adam_step.run(opt)                # first step: no state yet
    assert not opt.state
    opt.step()
    p.grad = torch.randn(4, 6).t()              # a non-contiguous gradient
    assert not adam_step.run(opt)
    p.grad = p.grad.contiguous()
    state = opt.state[p]
    state["step"] = torch.tensor(1.0, dtype=torch.float64)     # a float64 step
    assert not adam_step.run(opt)
    state["step"] = torch.tensor(1.0)
    state["exp_avg"] = state["exp_avg"].t().contiguous().t()   # a non-contiguous buffer
    assert not adam_step.run(opt)
    state["exp_avg"] = state["exp_avg"].contiguous()
    before = p.detach().clone()
    assert adam_step.run(opt)
    assert not torch.equal(before, p) and state["step"].item() == 2
    q = torch.nn.Parameter(torch.randn(3, dtype=torch.float64))
    opt64 = torch.optim.Adam([q])
    q.grad = torch.ones(3, dtype=torch.float64)
    opt64.step()
    assert not adam_step.run(opt64)              # float64: torch's step


@needs_kernel
def test_a_shared_step_tensor_is_refused():
    """Eager increments a shared step tensor once per parameter; the plan reads every step
    before the call, so it refuses."""
    p = torch.nn.Parameter(torch.randn(5))
    q = torch.nn.Parameter(torch.randn(5))
    opt = torch.optim.Adam([p, q])
    p.grad, q.grad = torch.randn(5), torch.randn(5)
    opt.step()
    opt.state[q]["step"] = opt.state[p]["step"]
    assert not adam_step.run(opt)


def _side_by_side(ps, make, grads):
    """Eager's steps on ``ps`` and the kernel's on copies (its first step torch's), with the
    gradients ``grads[step][parameter]`` (None: no gradient); asserts equal parameters and
    state, returns both (parameters, optimizer)."""
    qs = [torch.nn.Parameter(p.detach().clone()) for p in ps]
    o1, o2 = make(ps), make(qs)
    for i, step_grads in enumerate(grads):
        for p, q, g in zip(ps, qs, step_grads):
            p.grad, q.grad = g, None if g is None else g.clone()
        o1.step()
        if i == 0:
            o2.step()
        else:
            assert adam_step.run(o2)
    for p, q in zip(ps, qs):
        assert torch.equal(p, q)
        assert o1.state[p].keys() == o2.state[q].keys()
        for k in o1.state[p]:
            assert torch.equal(o1.state[p][k], o2.state[q][k])
    return (ps, o1), (qs, o2)


@needs_kernel
def test_unequal_step_counts_in_one_group():
    """A parameter that had no gradient on some steps has a smaller step count: its own
    bias corrections, as eager."""
    torch.manual_seed(0)
    ps = [torch.nn.Parameter(torch.randn(40)) for _ in range(3)]
    grads = [[None if k == 1 and i % 2 else torch.randn(40) for k in range(3)]
             for i in range(6)]
    _, (qs, o2) = _side_by_side(ps, lambda params: torch.optim.AdamW(params, lr=0.01), grads)
    assert o2.state[qs[1]]["step"].item() == 3 and o2.state[qs[0]]["step"].item() == 6


@needs_kernel
def test_version_counter_moves_so_autograd_sees_the_step():
    lin = torch.nn.Linear(4, 4)
    opt = torch.optim.AdamW(lin.parameters())
    x = torch.randn(2, 4, requires_grad=True)
    lin(x).sum().backward()
    opt.step()
    out = (lin(x) ** 2).sum()
    out.backward(retain_graph=True)
    assert adam_step.run(opt)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.backward()


@needs_kernel
@pytest.mark.parametrize("cls", [torch.optim.Adam, torch.optim.AdamW])
def test_large_parameters_split_over_threads_keep_bits(cls):
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        p = torch.nn.Parameter(torch.randn(300_001))
        grads = [[torch.randn(300_001)] for _ in range(4)]
        _side_by_side([p], lambda ps: cls(ps, lr=0.01, weight_decay=1e-2, amsgrad=True), grads)
    finally:
        torch.set_num_threads(threads)


@needs_kernel
def test_self_check_fails_a_sqrt_other_than_torchs():
    """Where torch's sqrt is not IEEE's (MKL's ``vmsSqrt``: 1 ulp off on ~1 element in 6),
    the kernel with ``sqrtf`` must fail the self-check: the check is what keeps a kernel
    that rounds differently off the optimizer's path."""
    fn, threads = adam_step._function(), torch.get_num_threads()
    root = adam_step._matches_torch(fn, threads)
    assert root is not False                    # this build: the kernel is used
    x = torch.rand(10_000, generator=torch.Generator().manual_seed(0))
    if torch.equal(x.sqrt(), x.double().sqrt().float()):
        pytest.skip("torch's sqrt is IEEE's here")
    assert root is not None and not adam_step._self_check(fn, None, threads)
