"""Pattern fusion next to in-place writes: a fused node reads its inputs where the last
node it replaces read them, so a write of an input *between* the first replaced node and
the last must stop the fusion, and a write before or after must not (a training step's
``opt.step()`` after the forward). Differential: eager against the converted function;
and what the optimized graph holds."""
import copy

import pytest
import torch
import torch.nn.functional as F

from transpiler import to_graph


def _ops(f, *args):
    return [n.op for n in f.graph(*args).optimize().nodes]


def _check(fn, make_args, n=3):
    conv = to_graph(fn)
    for i in range(n):
        a, b = make_args(i), make_args(i)
        out_e, out_c = fn(*a), conv(*b)
        torch.testing.assert_close(out_c, out_e, rtol=1e-6, atol=1e-6)
        for x, y in zip(a, b):
            torch.testing.assert_close(y, x, rtol=1e-6, atol=1e-6)
    return conv


def _args(i):
    g = torch.Generator().manual_seed(i)
    return (torch.randn(4, 5, generator=g), torch.randn(5, 3, generator=g),
            torch.randn(3, generator=g))


def write_between(x, w, b):
    y = x @ w
    w.add_(1.0)                 # between the product and the add: addmm would see it
    return y + b


def write_bias_between(x, w, b):
    y = torch.matmul(x, w)
    b.mul_(2.0)                 # the add reads b after this in eager too
    return y + b


def write_after(x, w, b):
    out = x @ w + b
    w.sub_(0.5)                 # after the forward, like opt.step()
    b.sub_(0.25)
    return out


def write_before(x, w, b):
    w.mul_(0.5)
    return x @ w + b


def write_in_cond_between(x, w, b):
    y = x @ w
    if x.sum() > 0:
        w.add_(1.0)
    return y + b


def test_write_between_stops_addmm():
    conv = _check(write_between, _args)
    assert "addmm" not in _ops(conv, *_args(0))


def test_writes_before_and_after_keep_addmm():
    for fn in (write_after, write_before):
        conv = _check(fn, _args)
        assert "addmm" in _ops(conv, *_args(0)), fn.__name__
    _check(write_bias_between, _args)   # (not fused: any input written between stops it)


def test_write_in_a_branch_between_stops_addmm():
    def args(i):
        x, w, b = _args(i)
        return (x if i % 2 else -x.abs(), w, b)
    conv = _check(write_in_cond_between, args, n=4)
    assert "addmm" not in _ops(conv, *args(1))


def test_write_in_a_loop_body_after_the_add():
    """In a loop the write after the add comes before the next iteration's product: not
    between them."""
    def loop(x, w, b, n):
        acc = torch.zeros(4, 3)
        i = torch.tensor(0)
        while i < n:
            acc = acc + (x @ w + b)
            w.mul_(0.9)
            i += 1
        return acc

    _check(loop, lambda i: _args(i) + (torch.tensor(3 + i),))


def test_linear_with_write_between_through_a_view():
    def fn(x, w, b):
        y = torch.matmul(x, w.t())
        w.view(-1).add_(1.0)    # a write through a view of w
        return y + b

    def args(i):
        x, w, b = _args(i)
        return x, w.t().contiguous(), b

    conv = _check(fn, args)
    assert "linear" not in _ops(conv, *args(0))


def test_training_step_forward_fuses_like_the_model():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    twin = copy.deepcopy(model)
    o1 = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    o2 = torch.optim.SGD(twin.parameters(), lr=0.1, momentum=0.9)

    def step(m, opt, x, y):
        opt.zero_grad()
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    conv = to_graph(step)
    g = torch.Generator().manual_seed(0)
    for _ in range(6):
        x, y = torch.randn(5, 8, generator=g), torch.randint(0, 4, (5,), generator=g)
        torch.testing.assert_close(conv(twin, o2, x, y), step(model, o1, x, y),
                                   rtol=1e-6, atol=1e-7)
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(q, p, rtol=1e-6, atol=1e-7)
    ops = _ops(conv, twin, o2, x, y)
    assert ops.count("addmm") + ops.count("linear") == 2
