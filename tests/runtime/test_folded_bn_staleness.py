"""An eval-mode batch norm folded into its convolution's weights (``kernels/folded_conv.py``)
sees every change to its sources, whichever way it is written: a train-mode call under
no_grad updates the running statistics in place without bumping their version counters
(torch's kernel and our graph's alike), as does a write through ``.data``. Each test calls
the converted module and the eager one alternately in eval and train, against eager."""
import warnings

import pytest
import torch
import torch.nn as nn

from transpiler import to_graph


def randn(*shape, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def conv_bn(cin=2, cout=4, momentum=0.1):
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1),
                         nn.BatchNorm2d(cout, momentum=momentum)).eval()


def linear_bn():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3)).eval()


def folds(g, x):
    with torch.no_grad():
        return any(n.op == "conv_bn" for n in g.graph(x).optimize().walk())


def same(g, m, x):
    """Eval call of the graph against eager; buffers are shared (one module)."""
    with torch.no_grad():
        got, exp = g(x), m(x)
    assert got.dtype == exp.dtype and got.shape == exp.shape
    torch.testing.assert_close(got, exp, rtol=1e-5, atol=1e-5)


def train_call(target, x, grad):
    target.train()
    with torch.set_grad_enabled(grad), warnings.catch_warnings():
        warnings.simplefilter("ignore")         # momentum=None falls back under grad
        out = target(x)
        if grad:
            out.sum().backward()
    target.eval()


# through: which callable runs the train step (the graph, or eager on the module)
@pytest.mark.parametrize("through", ["graph", "eager"])
@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("make,shape", [
    (conv_bn, (2, 2, 5, 6)),
    (lambda: conv_bn(64, 128), (2, 64, 5, 6)),   # a weight too large to compare: versions
    (lambda: conv_bn(momentum=None), (2, 2, 5, 6)),
    (linear_bn, (5, 4))], ids=["conv", "conv_large", "cumulative", "linear"])
def test_train_calls_between_eval_calls(make, shape, grad, through):
    m = make()
    g = to_graph(m)
    x = randn(*shape, seed=1)
    same(g, m, x)
    if make is conv_bn:
        assert folds(g, x)
    for step in range(3):           # several alternations, statistics moving each time
        before = m[1].running_mean.clone()
        train_call(g if through == "graph" else m, randn(*shape, seed=10 + step) + step + 1,
                   grad)
        assert not torch.equal(before, m[1].running_mean)
        same(g, m, x)
        same(g, m, x)


def test_reset_running_stats_between_eval_calls():
    m = conv_bn()
    g = to_graph(m)
    x = randn(2, 2, 5, 6, seed=1)
    train_call(m, randn(3, 2, 5, 6, seed=2) * 3 + 1, grad=False)
    same(g, m, x)
    m[1].reset_running_stats()
    same(g, m, x)
    train_call(g, randn(3, 2, 5, 6, seed=3) - 2, grad=False)
    same(g, m, x)
    m[1].reset_parameters()
    same(g, m, x)


@pytest.mark.parametrize("write", [
    lambda m: m[1].running_mean.data.add_(0.5),
    lambda m: m[1].running_var.data.mul_(3.0),
    lambda m: m[1].weight.data.mul_(-2.0),
    lambda m: m[0].weight.data.mul_(1.5),          # a small convolution weight
    lambda m: m[0].bias.data.sub_(1.0),
    lambda m: m[1].running_mean.copy_(torch.arange(4.0)),
    lambda m: m.load_state_dict({k: v * 2 if v.is_floating_point() else v
                                 for k, v in m.state_dict().items()}),
], ids=["mean_data", "var_data", "weight_data", "conv_weight_data", "conv_bias_data",
        "copy", "load_state_dict"])
def test_writes_bypassing_versions_are_seen(write):
    m = conv_bn()
    g = to_graph(m)
    x = randn(2, 2, 5, 6, seed=1)
    same(g, m, x)
    with torch.no_grad():
        write(m)
    same(g, m, x)
    with torch.no_grad():
        write(m)
    same(g, m, x)


def test_optimizer_step_between_eval_calls():
    m = conv_bn()
    g = to_graph(m)
    opt = torch.optim.SGD(m.parameters(), lr=0.5)
    x = randn(2, 2, 5, 6, seed=1)
    for step in range(3):
        same(g, m, x)
        train_call(g, randn(3, 2, 5, 6, seed=20 + step), grad=True)
        opt.step()
        opt.zero_grad()
    same(g, m, x)
