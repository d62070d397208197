"""Issue 15.3: data-parallel training with DistributedDataParallel (gloo, CPU).

Both spellings, ``DistributedDataParallel(to_graph(m))`` and ``to_graph(DDP(m))`` (which
converts ``ddp.module`` in place: ``transpiler.data_parallel``), train as eager DDP does:
the same losses, the same gradients (``None`` for a submodule a tensor branch skipped,
with ``find_unused_parameters=True``), the same parameters, and the reducer's buckets
all-reduced while the backward runs. A DDP module called inside a converted function is
refused (``runtime.distributed_modules``): default mode falls back, strict raises.

In-process tests use a 1-process gloo group (the reducer, its hooks and buckets are all
there; only the averaging is trivial); the example runs 2 processes.
"""
import warnings

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from transpiler import ConversionError, FallbackWarning, to_graph
from transpiler.module_wrapper import ToGraphModule

SPELLINGS = ["DDP(to_graph(m))", "to_graph(DDP(m))"]

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed missing")


@pytest.fixture(scope="module", autouse=True)
def process_group():
    if dist.is_initialized():
        pytest.skip("a process group is already initialized in this process")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
    dist.destroy_process_group()


class Skipping(torch.nn.Module):
    """A tensor ``if`` whose ``else`` skips ``self.wide`` (unused parameters)."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Linear(6, 12)
        self.norm = torch.nn.LayerNorm(12)
        self.wide = torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.GELU(),
                                        torch.nn.Linear(24, 12))
        self.head = torch.nn.Linear(12, 3)

    def forward(self, x):
        h = F.gelu(self.norm(self.embed(x)))
        if x.mean() > 0:
            h = h + self.wide(h)
        else:
            h = torch.tanh(h) * 0.5
        return self.head(h)


class Scaling(torch.nn.Module):
    """A tensor ``if`` where both branches use every parameter."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(6, 12)
        self.b = torch.nn.Linear(12, 3)

    def forward(self, x):
        h = torch.sigmoid(self.a(x))
        if x.mean() > 0:
            h = h * 2.0 - 1.0
        else:
            h = -h
        return self.b(h)


def batch(step, positive):
    g = torch.Generator().manual_seed(step)
    return (torch.randn(8, 6, generator=g) + (0.5 if positive else -0.5),
            torch.randint(3, (8,), generator=g))


def make(spelling, model_class, strict=True, **options):
    torch.manual_seed(0)
    model = model_class()
    if spelling == "eager":
        return model, DDP(model, **options)
    if spelling == "DDP(to_graph(m))":
        return model, DDP(to_graph(model, strict=strict), **options)
    return model, to_graph(DDP(model, **options), strict=strict)


def train(spelling, model_class, branches, strict=True, **options):
    """Losses, every step's gradients (None kept) and final parameters."""
    model, ddp = make(spelling, model_class, strict, **options)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    losses, grads = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        for step, positive in enumerate(branches):
            x, y = batch(step, positive)
            loss = F.cross_entropy(ddp(x), y)
            opt.zero_grad()
            loss.backward()
            grads.append([None if p.grad is None else p.grad.clone()
                          for p in model.parameters()])
            opt.step()
            losses.append(loss.detach())
    return losses, grads, [p.detach().clone() for p in model.parameters()]


def assert_close(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if w is None or g is None:
            assert g is None and w is None, "a gradient is None on one side only"
        else:
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("strict", [True, False])
@pytest.mark.parametrize("spelling", SPELLINGS)
def test_branch_skipping_a_submodule_trains_like_eager_ddp(spelling, strict):
    branches = [False, True, True, False, True]     # wide unused on steps 0 and 3
    want = train("eager", Skipping, branches, find_unused_parameters=True)
    got = train(spelling, Skipping, branches, strict, find_unused_parameters=True)
    assert_close(got[0], want[0])
    for step, (g, w) in enumerate(zip(got[1], want[1])):
        assert_close(g, w)
        assert (g[4] is None) == (not branches[step])     # wide.0.weight: only when taken
    assert_close(got[2], want[2])


@pytest.mark.parametrize("options", [{}, {"static_graph": True},
                                     {"gradient_as_bucket_view": True}])
@pytest.mark.parametrize("spelling", SPELLINGS)
def test_every_parameter_used_needs_no_unused_search(spelling, options):
    branches = [True, False, True, False]
    want = train("eager", Scaling, branches, **options)
    got = train(spelling, Scaling, branches, **options)
    assert_close(got[0], want[0])
    for g, w in zip(got[1], want[1]):
        assert_close(g, w)
    assert_close(got[2], want[2])


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_no_sync_accumulation_like_eager_ddp(spelling):
    grads = {}
    for name in ("eager", spelling):
        model, ddp = make(name, Skipping, find_unused_parameters=True)
        for step, positive in enumerate([True, False, True]):
            x, y = batch(step, positive)
            if step < 2:                # accumulated locally, all-reduced with the last
                with ddp.no_sync():
                    F.cross_entropy(ddp(x), y).backward()
            else:
                F.cross_entropy(ddp(x), y).backward()
        grads[name] = [None if p.grad is None else p.grad.clone() for p in model.parameters()]
    assert_close(grads[spelling], grads["eager"])


class Normalized(torch.nn.Module):
    """BatchNorm's buffers (DDP broadcasts them before each forward) and a tensor ``if``."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(6, 12)
        self.bn = torch.nn.BatchNorm1d(12)
        self.b = torch.nn.Linear(12, 3)

    def forward(self, x):
        h = self.bn(self.a(x))
        if x.mean() > 0:        # (not on h: a batch-normalized mean is 0 up to rounding)
            h = torch.relu(h)
        else:
            h = torch.tanh(h)
        return self.b(h)


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_buffers_train_and_evaluate_like_eager_ddp(spelling):
    results = {}
    for name in ("eager", spelling):
        model, ddp = make(name, Normalized)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        losses = []
        for step in range(4):
            x, y = batch(step, step % 2 == 1)
            if step == 3:
                ddp.eval()          # running statistics: the graph for eval mode
            loss = F.cross_entropy(ddp(x * (step + 1)), y)
            if step < 3:
                opt.zero_grad()
                loss.backward()
                opt.step()
            losses.append(loss.detach())
        results[name] = losses, [t.clone() for t in model.state_dict().values()]
    assert_close(results[spelling][0], results["eager"][0])
    assert_close(results[spelling][1], results["eager"][1])


def test_to_graph_of_ddp_converts_its_module_in_place():
    torch.manual_seed(0)
    model = Skipping()
    ddp = DDP(model, find_unused_parameters=True)
    keys, params = list(ddp.state_dict()), list(ddp.parameters())
    same = to_graph(ddp, strict=True)
    assert same is ddp and isinstance(ddp.module, ToGraphModule)
    assert ddp.module.original_module is model and ddp.module.graph_function._strict
    assert list(ddp.state_dict()) == keys                   # "module.embed.weight", ...
    assert all(a is b for a, b in zip(ddp.parameters(), params))
    converted = ddp.module
    assert to_graph(ddp, strict=True).module is converted        # not wrapped twice
    assert to_graph(ddp).module.original_module is model         # new options: rewrapped
    x, _ = batch(0, True)
    graph = ddp.module.graph(x)
    assert [n.op for n in graph.nodes].count("cond") == 1


class BucketEvents:
    """The order of gradient accumulations ("grad") and bucket all-reduce launches."""

    def __init__(self, model, ddp):
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
        self.events = []
        for p in model.parameters():
            p.register_post_accumulate_grad_hook(lambda p: self.events.append("grad"))

        def hook(state, bucket):
            in_backward = torch._C._current_graph_task_id() != -1
            self.events.append("bucket" if in_backward else "bucket after backward")
            return allreduce_hook(state, bucket)
        ddp.register_comm_hook(None, hook)


def bucket_events(spelling, steps=3):
    """Per step, the order of gradient accumulations and bucket all-reduce launches."""
    # ~200 bytes a bucket (with find_unused_parameters DDP buckets from the first step on;
    # without, it starts with one and rebuilds with a first bucket of 1 MB: one here too)
    model, ddp = make(spelling, Scaling, bucket_cap_mb=0.0002, find_unused_parameters=True)
    events = BucketEvents(model, ddp)
    per_step = []
    for step in range(steps):
        x, y = batch(step, step % 2 == 0)
        F.cross_entropy(ddp(x), y).backward()
        per_step.append(list(events.events))
        events.events.clear()
    return per_step


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_buckets_are_all_reduced_while_the_backward_runs(spelling):
    want, got = bucket_events("eager"), bucket_events(spelling)
    for step, (events, eager) in enumerate(zip(got, want)):
        assert events.count("bucket") == eager.count("bucket") > 0, (events, eager)
        assert "bucket after backward" not in events
        assert events.count("grad") == eager.count("grad") == 4
        # overlap: a bucket launched before the last gradient is accumulated
        last_grad = len(events) - 1 - events[::-1].index("grad")
        assert eager.count("bucket") >= 2 and events.index("bucket") < last_grad, events


def test_ddp_called_inside_a_converted_function_falls_back():
    torch.manual_seed(0)
    ddp = DDP(torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.GELU(),
                                  torch.nn.Linear(4, 3)))
    reduced = []
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    def counting(state, bucket):
        reduced.append(1)
        return allreduce_hook(state, bucket)
    ddp.register_comm_hook(None, counting)

    def loss_of(x, y):
        return F.cross_entropy(ddp(x), y)

    def forward_of(x, y):
        return F.cross_entropy(ddp.forward(x), y)

    for fn in (loss_of, forward_of):
        converted = to_graph(fn)
        for step in range(2):       # each call: DDP's forward runs, gradients all-reduced
            x, y = batch(step, True)
            before = len(reduced)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                loss = converted(x, y)
            if step == 0:
                messages = [str(w.message) for w in caught
                            if issubclass(w.category, FallbackWarning)]
                assert len(messages) == 1 and "DistributedDataParallel" in messages[0]
                assert "test_ddp.py" in messages[0]
            torch.testing.assert_close(loss, fn(x, y))
            loss.backward()
            assert len(reduced) > before
        with pytest.raises(ConversionError, match="DistributedDataParallel"):
            to_graph(fn, strict=True)(*batch(0, True))


def test_module_holding_a_ddp_module_falls_back():
    class Holder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = DDP(torch.nn.Linear(6, 3))

        def forward(self, x):
            return self.inner(x).relu()

    holder = Holder()
    with pytest.raises(ConversionError, match="DistributedDataParallel"):
        to_graph(holder, strict=True)(batch(0, True)[0])


def test_example_trains_on_two_processes_like_eager_ddp(tour):
    """examples/train_ddp.py's output in the suite's one run of examples/tour.py."""
    out = tour.section("train_ddp.py")
    assert out.count("-> equal") == 3, out
    assert "DIFFERS" not in out
    assert "losses, final parameters and buffers equal eager DDP's" in out
    for line in out.splitlines():
        if "buckets all-reduced" in line:      # every bucket launched inside backward
            count = line.split("buckets all-reduced ")[1].split()[0]
            assert f"({count} launched during backward)" in line, line
