"""``to_graph(module)`` is an ``nn.Module`` wrapping the original (like torch.compile's
``OptimizedModule``, without its ``_orig_mod.`` prefix): parameters, state dicts, modes,
dtypes, hooks, attributes, copies and DDP reach the original; results equal eager."""
import copy
import pickle
import socket
import warnings

import pytest
import torch
from torch import nn

from e2e_helpers import assert_same
from transpiler import (ConversionError, FallbackWarning, GraphFunction, ToGraphModule,
                        compare, to_code, to_graph)


class Net(nn.Module):
    """Tensor control flow, a buffer, a Python attribute, dropout and batch norm."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 6)
        self.bn = nn.BatchNorm1d(6)
        self.drop = nn.Dropout(0.5)
        self.register_buffer("shift", torch.tensor(0.25))
        self.scale = 2.0
        self.config = {"name": "net"}

    def forward(self, x):
        y = self.drop(self.bn(self.fc(x))) * self.scale
        if y.sum() > 0:
            y = y + self.shift
        else:
            y = y - self.shift
        return y.relu()


def _pair(seed=0):
    """(eager module, an identical module to wrap)."""
    torch.manual_seed(seed)
    eager = Net().eval()
    return eager, copy.deepcopy(eager)


def _inputs():
    return [torch.randn(5, 4) + 1, torch.randn(5, 4) - 1, torch.randn(3, 4)]


@pytest.fixture(autouse=True)
def _no_fallback():
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        yield


@pytest.mark.parametrize("strict", [False, True])
def test_is_a_module_that_wraps_the_original(strict):
    eager, m = _pair()
    w = to_graph(m, strict=strict)
    assert isinstance(w, nn.Module) and isinstance(w, ToGraphModule)
    assert w.original_module is m and w._orig_mod is m and w.graph_function._strict is strict
    assert isinstance(w.graph_function, GraphFunction)
    assert repr(w).startswith("to_graph(Net)(") and "(fc): Linear(in_features=4" in repr(w)
    for x in _inputs():                     # values, on both branches and a second batch
        assert_same(w(x), eager(x))


def test_names_are_the_originals():
    eager, m = _pair()
    w = to_graph(m)
    assert [(n, id(p)) for n, p in w.named_parameters()] == \
        [(n, id(p)) for n, p in m.named_parameters()]
    assert [n for n, _ in w.named_buffers()] == [n for n, _ in m.named_buffers()]
    assert [n for n, _ in w.named_modules()][1:] == [n for n, _ in m.named_modules()][1:]
    assert list(w.state_dict()) == list(m.state_dict()) == list(eager.state_dict())
    assert all(a is b for a, b in zip(w.state_dict(keep_vars=True).values(),
                                      m.state_dict(keep_vars=True).values()))


def test_load_state_dict_reaches_the_graph():
    eager, m = _pair(0)
    other, _ = _pair(1)
    w = to_graph(m)
    x = _inputs()[0]
    assert_same(w(x), eager(x))                     # traced with seed 0's weights
    w.load_state_dict(other.state_dict())           # loaded in place: the same graph runs
    assert torch.equal(m.fc.weight, other.fc.weight)
    assert_same(w(x), other(x))
    fresh = Net().eval()
    fresh.load_state_dict(w.state_dict())           # no prefix to strip
    assert_same(fresh(x), other(x))


def test_state_dict_of_a_parent_holding_a_wrapper():
    torch.manual_seed(0)
    parent = nn.Sequential(nn.Linear(4, 4), to_graph(Net().eval()))
    keys = list(parent.state_dict())
    assert "1.fc.weight" in keys and not any("_orig_mod" in k for k in keys)
    twin = nn.Sequential(nn.Linear(4, 4), Net().eval())
    twin.load_state_dict(parent.state_dict())
    parent.load_state_dict(twin.state_dict())
    x = _inputs()[1]
    assert_same(parent(x), twin(x))


@pytest.mark.parametrize("strict", [False, True])
def test_sgd_through_the_wrappers_parameters(strict):
    eager, m = _pair()
    eager.train()
    w = to_graph(m, strict=strict).train()
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.1, momentum=0.9)
    opt_w = torch.optim.SGD(w.parameters(), lr=0.1, momentum=0.9)
    for step, x in enumerate(_inputs()):
        for model, opt in ((eager, opt_e), (w, opt_w)):
            torch.manual_seed(step)                     # the same dropout mask
            opt.zero_grad()
            out = model(x)
            out.square().mean().backward()
            opt.step()
            outs = out if model is eager else (outs, out)
        assert_same(outs[1], outs[0])                   # the graph sees the updated weights
        for (name, p), q in zip(m.named_parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad, q.grad, msg=name)
            torch.testing.assert_close(p, q, msg=name)
        assert_same(m.bn.running_mean, eager.bn.running_mean)
        assert_same(m.bn.running_var, eager.bn.running_var)
    w.zero_grad()
    assert all(p.grad is None for p in m.parameters())


def test_train_and_eval_reach_the_original_and_choose_the_graph():
    eager, m = _pair()
    w = to_graph(m)
    x = _inputs()[0]
    assert w.train() is w and m.training and m.bn.training and w.training
    torch.manual_seed(3)
    got = w(x)
    eager.train()
    torch.manual_seed(3)
    assert_same(got, eager(x))
    assert w.eval() is w and not m.training and not m.drop.training and not w.training
    eager.eval()
    assert_same(w(x), eager(x))
    w.training = True                           # the attribute itself, as nn.Module has it
    assert m.training and w.training


def test_dtype_and_device_moves_reach_the_original():
    eager, m = _pair()
    w = to_graph(m)
    x = _inputs()[0]
    assert_same(w(x), eager(x))
    assert w.double() is w and m.fc.weight.dtype == torch.float64
    assert_same(w(x.double()), eager.double()(x.double()))
    assert w.to(torch.float32) is w and m.shift.dtype == torch.float32
    assert w.cpu() is w
    assert_same(w(x), eager.float()(x))


def test_hooks_on_the_wrapper_run_around_the_graph():
    eager, m = _pair()
    w = to_graph(m, strict=True)
    seen = []
    for model in (eager, w):
        model.register_forward_pre_hook(lambda mod, args: (args[0] * 2,))
        model.register_forward_hook(lambda mod, args, out: seen.append(out.shape) or out + 1)
    for x in _inputs():
        assert_same(w(x), eager(x))
    assert seen == [s for x in _inputs() for s in (x.shape[:1] + (6,),) * 2]


def test_hooks_on_the_original_are_traced_around_its_forward():
    """Forward hooks on the original are traced around the forward, as ``nn.Module``
    runs them (``module_hooks.hooked_call``); backward hooks there still fall back."""
    eager, m = _pair()
    for model in (eager, m):
        model.register_forward_hook(lambda mod, args, out: out * 3)
    x = _inputs()[0]
    assert_same(to_graph(m, strict=True)(x), eager(x))     # the hook ran once, as in eager
    m.register_full_backward_hook(lambda mod, gin, gout: None)
    with pytest.warns(FallbackWarning, match="hooks"):
        got = to_graph(m)(x)
    assert_same(got, eager(x))
    with pytest.raises(ConversionError, match="hooks"):
        to_graph(m, strict=True)(x)


def test_backward_hooks_on_the_wrapper_see_eagers_gradients():
    eager, m = _pair()
    w = to_graph(m, strict=True)
    seen = {eager: [], w: []}
    for model in (eager, w):
        model.register_full_backward_hook(
            lambda mod, gin, gout: seen[mod].append([g.clone() for g in gin + gout]))
    for x in _inputs()[:2]:
        xe, xw = x.clone().requires_grad_(), x.clone().requires_grad_()
        eager(xe).sum().backward()
        w(xw).sum().backward()
        assert_same(xw.grad, xe.grad)
    assert len(seen[w]) == len(seen[eager]) == 2
    for got, want in zip(seen[w], seen[eager]):
        assert_same(got, want)


def test_global_module_hooks_run_once_as_in_eager():
    eager, m = _pair()
    calls = []
    hook = torch.nn.modules.module.register_module_forward_hook(
        lambda mod, args, out: calls.append(type(mod).__name__))
    try:
        x = _inputs()[0]
        want = eager(x)
        expected, calls[:] = list(calls), []
        w = to_graph(m)
        with warnings.catch_warnings():     # (the hook's append of text: an append node)
            warnings.simplefilter("error", FallbackWarning)
            assert_same(w(x), want)
            assert calls == expected == ["Linear", "BatchNorm1d", "Dropout", "Net"]
            assert_same(w(x), want)
        assert calls == expected * 2
    finally:
        hook.remove()


def test_attributes_read_and_write_through():
    eager, m = _pair()
    w = to_graph(m)
    assert w.fc is m.fc and w.config is m.config and w.scale == 2.0
    x = _inputs()[0]
    assert_same(w(x), eager(x))
    w.scale = 3.0                               # a Python value the trace read
    eager.scale = 3.0
    assert m.scale == 3.0
    assert_same(w(x), eager(x))
    torch.manual_seed(5)
    w.fc = nn.Linear(4, 6)                      # registered on the original
    torch.manual_seed(5)
    eager.fc = nn.Linear(4, 6)
    assert m.fc is w.fc and "fc.weight" in w.state_dict()
    assert_same(w(x), eager(x))
    w.register_buffer("extra", torch.ones(1))   # nn.Module's own methods: the original
    assert "extra" in m.state_dict()
    w.note = "x"
    assert m.note == "x"
    del w.note
    assert not hasattr(m, "note")
    with pytest.raises(AttributeError, match="no attribute 'missing'"):
        w.missing


def test_the_graph_function_api_is_reachable():
    eager, m = _pair()
    w = to_graph(m)
    x = _inputs()[0]
    assert to_code(w) == to_code(m)
    graph = w.graph(x)
    assert any(n.op == "cond" for n in graph.nodes)
    assert w.get_concrete(x).graph is graph
    assert compare(w, x).ok
    assert "cond" in str(w.explain(x))


def test_no_double_wrap_and_methods_stay_graph_functions():
    eager, m = _pair()
    w = to_graph(m)
    assert to_graph(w) is w
    s = to_graph(w, strict=True)
    assert isinstance(s, ToGraphModule) and s.original_module is m and s.graph_function._strict
    f = to_graph(m.forward)
    assert isinstance(f, GraphFunction)
    x = _inputs()[1]
    assert_same(f(x), eager(x))

    class WithMethod(Net):
        @to_graph
        def double(self, x):
            return self.forward(x) * 2
    torch.manual_seed(0)
    wm = WithMethod().eval()
    torch.manual_seed(0)
    assert_same(wm.double(x), Net().eval()(x) * 2)


def test_deepcopy_and_pickle_rewrap_a_copy():
    eager, m = _pair()
    w = to_graph(m, strict=True)
    x = _inputs()[0]
    for twin in (copy.deepcopy(w), pickle.loads(pickle.dumps(w))):
        assert isinstance(twin, ToGraphModule) and twin.graph_function._strict
        assert twin.original_module is not m
        assert_same(twin(x), eager(x))
        with torch.no_grad():
            twin.fc.weight.add_(1)
        assert not torch.equal(twin.fc.weight, m.fc.weight)
        assert_same(w(x), eager(x))


def test_containers_answer_len_index_iteration():
    seq = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
    w = to_graph(seq)
    assert len(w) == 2 and w[0] is seq[0] and list(w) == list(seq) and bool(w)
    assert not to_graph(nn.Sequential())
    with pytest.raises(TypeError):
        len(to_graph(Net()))


def test_a_wrapped_block_inside_a_converted_model():
    torch.manual_seed(0)
    block = Net().eval()
    eager = nn.Sequential(nn.Linear(4, 4), block, nn.Linear(6, 2))
    model = nn.Sequential(eager[0], to_graph(block), eager[2])
    g = to_graph(model, strict=True)
    for x in _inputs():
        assert_same(g(x), eager(x))
    assert any(n.op == "cond" for n in g.graph(_inputs()[0]).nodes)


def test_cli_target_naming_a_wrapped_module(tmp_path, capsys):
    from transpiler import cli
    from transpiler.cli_targets import load_target
    path = tmp_path / "wrapped_user.py"
    path.write_text("import torch\nfrom transpiler import to_graph\n\n\n"
                    "class Small(torch.nn.Module):\n"
                    "    def forward(self, x):\n"
                    "        if x.sum() > 0:\n"
                    "            return x * 2\n"
                    "        return x\n\n\n"
                    "net = to_graph(Small())\n")
    target = load_target(f"{path}:net")
    assert isinstance(target, nn.Module) and not isinstance(target, ToGraphModule)
    assert cli.main(["code", f"{path}:net"]) == 0
    assert "tg.if_stmt" in capsys.readouterr().out


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_distributed_data_parallel_single_process_gloo():
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{_free_port()}",
                            rank=0, world_size=1)
    try:
        eager, m = _pair()
        eager.train()
        ddp = nn.parallel.DistributedDataParallel(to_graph(m, strict=True).train())
        for step, x in enumerate(_inputs()[:2]):
            torch.manual_seed(step)
            got = ddp(x)
            got.sum().backward()
            torch.manual_seed(step)
            want = eager(x)
            want.sum().backward()
            assert_same(got, want)
            for p, q in zip(m.parameters(), eager.parameters()):
                torch.testing.assert_close(p.grad, q.grad)
        assert list(ddp.module.state_dict()) == list(eager.state_dict())
    finally:
        dist.destroy_process_group()
