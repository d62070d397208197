"""Data-parallel training: DistributedDataParallel (gloo, CPU) around a converted module.

A small model whose forward branches on a tensor (``if`` -> a ``cond`` node; the ``else``
branch skips a submodule, hence ``find_unused_parameters=True``) trains for some steps on
2 processes, each on its own shard of the data, three times from the same seed:

    eager             DistributedDataParallel(model)
    DDP(to_graph(m))  DistributedDataParallel(to_graph(model))
    to_graph(DDP(m))  to_graph(DistributedDataParallel(model)): converts ddp.module in
                      place, DDP's own forward (buffers, reducer, hooks) stays eager

and prints that every step's loss and the final parameters and buffers of the converted
runs equal the eager run's (the max difference), that the gradients' buckets were
all-reduced while the backward still ran (as in eager DDP), and the steps per second of
each. Exit code 1 when they differ. (DDP's own warning that find_unused_parameters found
no unused parameters comes from eager DDP too: step 1 takes the branch using them all.)

Run:  torchrun --nproc_per_node 2 examples/train_ddp.py
      python examples/train_ddp.py [--steps N]       (starts the 2 processes itself)
Many machines (the same command on each; the c10d rendezvous on host0 assigns the ranks,
so no --node_rank; with the static one instead: --master_addr host0 --node_rank i):
      torchrun --nnodes 2 --nproc_per_node 2 --rdzv_backend c10d \\
               --rdzv_endpoint host0:29400 --rdzv_id job1 examples/train_ddp.py
"""
import argparse
import datetime
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

from transpiler import to_graph  # noqa: E402

RTOL = 1e-5                     # the project's float32 agreement with eager


class Gated(torch.nn.Module):
    """Embed, batch-normalize (buffers: DDP broadcasts rank 0's before each forward); a
    wide residual block only for batches that lean positive."""

    def __init__(self, features=16, hidden=32, classes=4):
        super().__init__()
        self.embed = torch.nn.Linear(features, hidden)
        self.norm = torch.nn.BatchNorm1d(hidden)
        self.wide = torch.nn.Sequential(torch.nn.Linear(hidden, 4 * hidden), torch.nn.GELU(),
                                        torch.nn.Linear(4 * hidden, hidden))
        self.head = torch.nn.Linear(hidden, classes)

    def forward(self, x):
        h = F.gelu(self.norm(self.embed(x)))
        if x.mean() > 0:                # data-dependent: both branches in one cond node
            h = h + self.wide(h)
        else:                           # self.wide unused on this call
            h = torch.tanh(h) * 0.5
        return self.head(h)


def takes_wide(rank, step) -> bool:
    """Whether this rank's batch for this step leans positive (the ``then`` branch): none
    at step 0, then a mix, some steps on one rank only (``wide``'s gradient from one)."""
    return step * (rank + 1) % 3 == 1


def shard(rank, step, batch=16, features=16, classes=4):
    """This rank's batch for this step (a fixed seed per rank and step)."""
    g = torch.Generator().manual_seed(1000 * rank + step)
    x = torch.randn(batch, features, generator=g) + (0.3 if takes_wide(rank, step) else -0.3)
    return x, torch.randint(classes, (batch,), generator=g)


class BucketLog:
    """Counts the buckets DDP all-reduces (its default all-reduce, as a comm hook) and how
    many were launched while the backward still ran: eager DDP overlaps the two."""

    def __init__(self):
        self.buckets = self.during_backward = 0

    def hook(self):
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        def counting_allreduce_hook(state, bucket):
            self.buckets += 1
            # an autograd graph task is running: launched from inside loss.backward()
            self.during_backward += torch._C._current_graph_task_id() != -1
            return allreduce_hook(state, bucket)
        return counting_allreduce_hook


def train(spelling, rank, steps, strict=True):
    """Train a fresh model ``steps`` steps: (losses, final state, buckets, step times)."""
    torch.manual_seed(0)
    model = Gated()
    options = dict(find_unused_parameters=True, bucket_cap_mb=0.01)   # several buckets
    if spelling == "eager":
        ddp = DDP(model, **options)
    elif spelling == "DDP(to_graph(m))":
        ddp = DDP(to_graph(model, strict=strict), **options)
    else:
        ddp = to_graph(DDP(model, **options), strict=strict)
    log = BucketLog()
    ddp.register_comm_hook(None, log.hook())
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    losses, seconds = [], []
    for step in range(steps):
        started = time.perf_counter()
        x, y = shard(rank, step)
        loss = F.cross_entropy(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        seconds.append(time.perf_counter() - started)
        losses.append(loss.detach())
    state = [t.detach().clone() for t in model.state_dict().values()]   # params, buffers
    return torch.stack(losses), state, log, seconds


def max_difference(a, b):
    """The largest |a - b| and whether every element is within RTOL (relative) of b."""
    diff = max((x - y).abs().max().item() for x, y in zip(a, b) if x.numel())
    close = all(torch.allclose(x, y, rtol=RTOL, atol=RTOL) for x, y in zip(a, b))
    return diff, close


def worker(rank=None, world=None, port=None, steps=8) -> bool:
    """One rank: torchrun's (its environment says which) or started by ``main``.
    Whether the converted runs equal the eager one on every rank."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    if rank is None:                    # torchrun: RANK, WORLD_SIZE, MASTER_ADDR/PORT
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    else:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world, timeout=datetime.timedelta(seconds=120))
    try:
        return _compare(dist.get_rank(), dist.get_world_size(), steps)
    finally:
        dist.destroy_process_group()
        torch.set_num_threads(threads)


def _compare(rank, world, steps) -> bool:
    runs = {s: train(s, rank, steps) for s in ("eager", "DDP(to_graph(m))", "to_graph(DDP(m))")}
    eager_losses, eager_state, _, _ = runs["eager"]
    say = print if rank == 0 else (lambda *a, **k: None)
    say(f"{world} processes (gloo), {steps} steps; branch taken (rank: steps):")
    for r in range(world):
        say(f"  rank {r}: " + " ".join("then" if takes_wide(r, s) else "else"
                                     for s in range(steps)))
    say(f"{'step':>4} " + " ".join(f"{name:>18}" for name in runs))
    for step in range(steps):
        say(f"{step:>4} " + " ".join(f"{runs[n][0][step].item():>18.7f}" for n in runs))
    all_equal = True
    for name, (losses, state, log, seconds) in runs.items():
        loss_diff, loss_close = max_difference([losses], [eager_losses])
        state_diff, state_close = max_difference(state, eager_state)
        # every rank must agree (its own losses, DDP's synchronized parameters)
        verdict = torch.tensor([loss_diff, state_diff, float(not (loss_close and state_close))])
        dist.all_reduce(verdict, op=dist.ReduceOp.MAX)
        same = verdict[2].item() == 0
        all_equal &= same
        rate = 1 / statistics.median(seconds[1:]) if steps > 1 else float("nan")
        say(f"{name:>18}: first step {seconds[0]:.2f} s, then {rate:5.0f} steps/s (median); "
            f"buckets all-reduced {log.buckets} "
            f"({log.during_backward} launched during backward); max |loss - eager| = "
            f"{verdict[0].item():.2e}, max |state - eager| = {verdict[1].item():.2e} "
            f"-> {'equal' if same else 'DIFFERS'}")
    say("losses, final parameters and buffers equal eager DDP's" if all_equal else
        "converted DDP training DIFFERS from eager DDP")
    return all_equal


def _spawned(rank, world, port, steps):
    """A process ``main`` started: exit code 1 when the runs differ. It leaves by
    ``os._exit`` once its output is flushed: once in a CI run the interpreter's teardown
    after ``destroy_process_group`` aborted ('terminate called without an active
    exception', exit -6) after every result had been compared and printed."""
    code = 0 if worker(rank, world, port, steps) else 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--nproc", type=int, default=2, help="processes (without torchrun)")
    args = parser.parse_args(argv)
    if "RANK" in os.environ:                # started by torchrun: this is one of the ranks
        return 0 if worker(steps=args.steps) else 1
    # started by hand: rank 0 here, the others in fresh processes (torch.multiprocessing's
    # spawn: they import this file by name, so it also runs under runpy, as the tour does)
    import importlib
    import torch.multiprocessing as mp
    sys.path.insert(0, HERE)
    this = importlib.import_module("train_ddp")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    started, port = time.perf_counter(), free_port()
    context = mp.get_context("spawn")
    others = [context.Process(target=this._spawned, args=(rank, args.nproc, port, args.steps))
              for rank in range(1, args.nproc)]
    for process in others:
        process.start()
    try:
        equal = worker(0, args.nproc, port, args.steps)
    finally:
        for process in others:
            process.join(timeout=120)
            if process.is_alive():
                process.kill()
    codes = [process.exitcode for process in others]
    print(f"{args.nproc} processes (rank 0 here), all done in "
          f"{time.perf_counter() - started:.1f} s; other ranks' exit codes {codes}")
    return 0 if equal and all(code == 0 for code in codes) else 1


if __name__ == "__main__":
    if main():          # (exit only on failure: the tour runs this file in its process)
        sys.exit(1)
