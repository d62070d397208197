"""FSDP2 (``torch.distributed.fsdp.fully_shard``) with a converted module, gloo on CPU.

``fully_shard(to_graph(m))`` works: fully_shard swaps the wrapper's class (not the
original's: ``ToGraphModule.__setattr__``) and registers its hooks on the wrapper, which
run eagerly around the graph (gather the parameters, free them after); the graph reads the
parameters FSDP set in place, so one trace serves every step. ``fully_shard`` applied to a
submodule inside the converted module is per-call machinery inside the trace: refused
(``runtime.distributed_modules``: default mode falls back, strict raises). A 1-process
group here: FSDP's sharding, hooks and parameter swaps all run; the gathers are trivial
(the 2-process run is in the README's measurements).
"""
import warnings

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from transpiler import ConversionError, FallbackWarning, to_graph

fsdp = pytest.importorskip("torch.distributed.fsdp")
if not hasattr(fsdp, "fully_shard"):
    pytest.skip("this torch has no FSDP2 fully_shard", allow_module_level=True)


@pytest.fixture(scope="module")
def mesh():
    if dist.is_initialized():
        pytest.skip("a process group is already initialized in this process")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    from torch.distributed.device_mesh import init_device_mesh
    yield init_device_mesh("cpu", (1,))
    dist.destroy_process_group()


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(8, 16)
        self.l2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        h = torch.relu(self.l1(x))
        if x.mean() > 0:
            h = h * 2.0
        else:
            h = -h
        return self.l2(h)


def train(shard, steps=4):
    torch.manual_seed(0)
    model = Net()
    run = shard(model)
    opt = torch.optim.SGD(run.parameters(), lr=0.1)
    losses = []
    for step in range(steps):
        g = torch.Generator().manual_seed(step)
        x = torch.randn(4, 8, generator=g) + (0.5 if step % 2 else -0.5)
        loss = F.cross_entropy(run(x), torch.randint(4, (4,), generator=g))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return run, torch.stack(losses), [p.full_tensor().clone() for p in model.parameters()]


@pytest.mark.parametrize("strict", [True, False])
def test_fully_shard_of_a_converted_module_trains_like_eager(mesh, strict):
    def eager(m):
        fsdp.fully_shard(m, mesh=mesh)
        return m

    def converted(m):
        wrapper = to_graph(m, strict=strict)
        fsdp.fully_shard(wrapper, mesh=mesh)
        assert type(m) is Net and isinstance(wrapper, fsdp.FSDPModule)
        return wrapper

    _, want_losses, want_params = train(eager)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        run, losses, params = train(converted)
    torch.testing.assert_close(losses, want_losses, rtol=1e-5, atol=1e-6)
    for p, w in zip(params, want_params):
        torch.testing.assert_close(p, w, rtol=1e-5, atol=1e-6)
    info = run.graph_function.cache_info()
    assert info.traces == 1 and info.fallbacks == 0, info


def test_fully_shard_of_a_submodule_inside_falls_back(mesh):
    def per_layer(m, strict):
        fsdp.fully_shard(m.l1, mesh=mesh)
        wrapper = to_graph(m, strict=strict)
        fsdp.fully_shard(wrapper, mesh=mesh)
        return wrapper

    def eager(m):
        fsdp.fully_shard(m.l1, mesh=mesh)
        fsdp.fully_shard(m, mesh=mesh)
        return m

    _, want_losses, want_params = train(eager)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, losses, params = train(lambda m: per_layer(m, False))
    messages = [str(w.message) for w in caught if issubclass(w.category, FallbackWarning)]
    assert len(messages) == 1 and "FSDPModule" in messages[0], messages
    torch.testing.assert_close(losses, want_losses)
    for p, w in zip(params, want_params):
        torch.testing.assert_close(p, w)
    with pytest.raises(ConversionError, match="FSDPModule"):
        train(lambda m: per_layer(m, True), steps=1)
