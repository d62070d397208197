"""DDP as a new user writes it, 2 gloo processes (torch.multiprocessing spawn).

Both spellings, ``DDP(to_graph(m), find_unused_parameters=True)`` and
``to_graph(DDP(m, ...))``, against eager DDP on the same data: the ranks DISAGREE on a
tensor ``if`` (rank 0 runs a submodule on even steps, rank 1 never), the forward takes a
keyword argument and returns a dict, BatchNorm buffers are broadcast, and every other step
accumulates under ``no_sync()``. Losses, parameters and buffers must equal eager DDP's
(the all-reduce averages the same gradients), with no FallbackWarning (strict mode).
"""
import os
import socket
import sys
import warnings

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed missing")

SPELLINGS = ("eager", "DDP(to_graph(m))", "to_graph(DDP(m))")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(6, 12)
        self.bn = nn.BatchNorm1d(12)
        self.wide = nn.Linear(12, 12)
        self.head = nn.Linear(12, 3)

    def forward(self, x, scale=1.0):
        h = torch.relu(self.bn(self.a(x)))
        if x.mean() > 0:
            h = h + self.wide(h)
        else:
            h = h * 0.5
        return {"logits": self.head(h) * scale, "features": h.detach()}


def data(rank, i):
    g = torch.Generator().manual_seed(1000 * rank + i)
    x = torch.randn(8, 6, generator=g)
    x = x + (0.7 if (rank == 0 and i % 2 == 0) else -0.7)
    return x, torch.randint(0, 3, (8,), generator=g)


def train(spelling, rank, accumulate, steps=4):
    from transpiler import to_graph
    torch.manual_seed(0)
    model = Net()
    if spelling == "eager":
        ddp = DDP(model, find_unused_parameters=True)
    elif spelling == "DDP(to_graph(m))":
        ddp = DDP(to_graph(model, strict=True), find_unused_parameters=True)
    else:
        ddp = to_graph(DDP(model, find_unused_parameters=True), strict=True)
    opt = torch.optim.SGD(ddp.parameters(), 0.05, momentum=0.9)
    losses = []
    for i in range(steps):
        x, y = data(rank, i)
        if accumulate and i % 2 == 0:
            with ddp.no_sync():
                loss = F.cross_entropy(ddp(x, scale=2.0)["logits"], y)
                loss.backward()
        else:
            loss = F.cross_entropy(ddp(x)["logits"], y)
            loss.backward()
            opt.step()
            opt.zero_grad()
        losses.append(loss.item())
    return losses, {k: v.clone() for k, v in ddp.state_dict().items()}


def worker(rank, world, port, queue):
    sys.path.insert(0, ROOT)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    report = []
    try:
        from transpiler import FallbackWarning
        for accumulate in (False, True):
            runs = {}
            for spelling in SPELLINGS:
                with warnings.catch_warnings():
                    warnings.simplefilter("error", FallbackWarning)
                    try:
                        runs[spelling] = train(spelling, rank, accumulate)
                    except Exception as e:          # reported to the test, not swallowed
                        runs[spelling] = f"{type(e).__name__}: {e}"[:300]
            for spelling in SPELLINGS[1:]:
                got, exp = runs[spelling], runs["eager"]
                if isinstance(got, str) or isinstance(exp, str):
                    report.append((accumulate, spelling, "raised", got, exp))
                    continue
                loss_diff = max(abs(a - b) for a, b in zip(got[0], exp[0]))
                keys_same = list(got[1]) == list(exp[1])
                state_diff = max((got[1][k].double() - exp[1][k].double()).abs().max().item()
                                 for k in exp[1]) if keys_same else float("inf")
                report.append((accumulate, spelling, "ok", loss_diff, state_diff))
    finally:
        dist.destroy_process_group()
        queue.put((rank, report))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_disagreeing_branches_no_sync_kwargs_dict_outputs():
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=worker, args=(r, 2, port, queue)) for r in range(2)]
    for p in procs:
        p.start()
    reports = dict(queue.get(timeout=300) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    for rank in (0, 1):
        assert len(reports[rank]) == 4, reports[rank]
        for accumulate, spelling, kind, *rest in reports[rank]:
            assert kind == "ok", (rank, accumulate, spelling, rest)
            loss_diff, state_diff = rest
            assert loss_diff <= 1e-6 and state_diff <= 1e-5, (rank, accumulate, spelling, rest)
