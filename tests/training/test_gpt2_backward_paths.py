"""Fewer autograd nodes in a transformer's training step, each rewrite exact:

* dropout with ``p=0`` in training mode (``F.dropout``, ``nn.Dropout(0.0)``, the alpha and
  feature kin, ``inplace=True``) returns its input itself in eager and draws no random
  number, so the graph drops it (``passes/drop_identity.py``), as it drops eval dropout;
* ``x.reshape(x.shape)`` / ``x.view(x.shape)`` (HF attention's ``reshape(b, -1, s, d)`` of
  a tensor already that shape) reads ``x`` (``passes/simplify.py``): one view node less in
  the backward; refused where an output would become an input's very object or the view
  is written in place.

Differential against eager, default and strict mode, two calls with different inputs,
values and every input's gradient; a float64 ``gradcheck``; the dropped nodes are checked
gone (optimized graph's ops, the backward's node types), and dropout with ``p > 0`` still
draws eager's random numbers. GPT-2 tiny: training steps equal eager's with no
``ReshapeAliasBackward0`` node and three fewer backward nodes than before (96, was 99).
"""
import warnings

import pytest
import torch
import torch.nn.functional as F

from runtime.passes.manager import optimize
from tests.e2e.e2e_helpers import assert_same, op_counts
from transpiler import to_graph


# ------------------------------------------------------------------------ the programs
def f_dropout(x, w):
    h = F.dropout(x @ w, p=0.0, training=True)
    return torch.tanh(h) + F.dropout(h, 0.0)                # training defaults to True


class DropModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(6, 6)
        self.drop = torch.nn.Dropout(0.0)
        self.drop_in = torch.nn.Dropout(p=0, inplace=True)

    def forward(self, x):
        return self.drop_in(torch.relu(self.drop(self.lin(x)))).sum(-1)


def f_alpha(x, w):
    y = F.alpha_dropout(x * w, 0.0, True) + F.feature_alpha_dropout(x, 0.0, True)
    return F.dropout2d(y.unsqueeze(0), 0.0, True).squeeze(0)


def f_reshape_same(x, w):                 # HF attention: (b, h, s, d) -> (b, -1, s, d)
    y = x * w
    z = y.reshape(y.shape[0], -1, y.shape[2], y.shape[3]).transpose(1, 2)
    return z.reshape(y.shape[0], y.shape[2], -1).sum(-1)


def f_view_same(x, w):
    y = torch.sigmoid(x + w)
    return y.view(y.shape) * y.view(4, 3, 5, 2)[0]


PROGRAMS = {"dropout": (f_dropout, lambda s: (torch.randn(5, 6, generator=s),
                                              torch.randn(6, 6, generator=s))),
            "alpha_feature": (f_alpha, lambda s: (torch.randn(3, 4, 5, generator=s),
                                                  torch.randn(5, generator=s))),
            "reshape_same": (f_reshape_same, lambda s: (torch.randn(2, 3, 4, 5, generator=s),
                                                        torch.randn(5, generator=s))),
            "view_same": (f_view_same, lambda s: (torch.randn(4, 3, 5, 2, generator=s),
                                                  torch.randn(2, generator=s)))}
DROPPED = {"dropout": "dropout", "alpha_feature": "alpha_dropout",
           "reshape_same": "reshape", "view_same": "view"}


def _inputs(name, seed, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    return [x.to(dtype).requires_grad_() for x in PROGRAMS[name][1](gen)]


def _run(fn, xs):
    out = fn(*xs)
    grads = torch.autograd.grad(out.sum(), xs)
    return out, grads


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_equals_eager_values_and_gradients(name, strict):
    fn = PROGRAMS[name][0]
    g = to_graph(fn, strict=strict)
    for seed in (0, 1):                                 # two calls: nothing baked in
        xs = _inputs(name, seed)
        with warnings.catch_warnings():
            warnings.simplefilter("error")              # no FallbackWarning either
            got = _run(g, xs)
        assert_same(got, _run(fn, xs))


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_rewritten_op_is_gone_from_the_optimized_graph(name):
    fn = PROGRAMS[name][0]
    xs = _inputs(name, 0)
    g = to_graph(fn, strict=True)
    op = DROPPED[name]
    traced = op_counts(g.graph(*xs))
    assert traced[op] >= 1                              # the program has the op ...
    after = op_counts(optimize(g.graph(*xs)))
    if name in ("view_same", "reshape_same"):           # ... the same-shape one goes
        assert after[op] <= traced[op] - 1, (traced, after)
    else:
        assert after[op] == 0, after


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_gradcheck_float64(name):
    g = to_graph(PROGRAMS[name][0], strict=True)
    assert torch.autograd.gradcheck(lambda *xs: g(*xs), _inputs(name, 3, torch.float64))


def test_module_with_zero_dropout_trains_like_eager():
    torch.manual_seed(0)
    eager = DropModel().train()
    conv = to_graph(DropModel().train(), strict=True)
    conv.load_state_dict(eager.state_dict())
    for seed in (0, 1):
        x = torch.randn(4, 6, generator=torch.Generator().manual_seed(seed))
        exp, got = eager(x), conv(x)
        exp.sum().backward()
        got.sum().backward()
        assert_same(got, exp)
        for (n, a), b in zip(eager.named_parameters(), conv.parameters()):
            assert torch.equal(a.grad, b.grad), n


def test_dropout_with_p_draws_eagers_numbers():
    def fn(x):
        return F.dropout(x, 0.3, training=True) + F.dropout(x, 0.0, training=True)
    g = to_graph(fn, strict=True)
    x = torch.randn(64, 8)
    g(x)                                                # traced
    for seed in (5, 6):
        torch.manual_seed(seed)
        exp = fn(x)
        after_eager = torch.get_rng_state()
        torch.manual_seed(seed)
        got = g(x)
        assert torch.equal(got, exp)
        assert torch.equal(torch.get_rng_state(), after_eager)
    assert op_counts(optimize(g.graph(x)))["dropout"] == 1     # only the p=0.3 one is kept


def test_zero_dropout_returned_is_the_input_itself():
    def fn(x):
        return F.dropout(x, 0.0, True), F.dropout(x * 2, 0.0, True)
    g = to_graph(fn, strict=True)
    for seed in (0, 1):
        x = torch.randn(3, generator=torch.Generator().manual_seed(seed))
        exp, got = fn(x), g(x)
        assert_same(got, exp)
        assert (got[0] is x) == (exp[0] is x)


def test_same_shape_view_keeps_aliasing():
    def returned(x):                    # a new view object of the input, in eager too
        return x.view(x.shape), x.reshape(x.shape) + 1

    def written(x):                     # writing the view writes the input
        y = x.reshape(x.shape)
        y.mul_(2)
        return x.sum()
    g = to_graph(returned, strict=True)
    for seed in (0, 1):
        x = torch.randn(2, 3, generator=torch.Generator().manual_seed(seed))
        got, exp = g(x), returned(x)
        assert_same(got, exp)
        assert got[0] is not x and got[0]._base is x
    gw = to_graph(written, strict=True)
    for seed in (0, 1):
        x = torch.randn(2, 3, generator=torch.Generator().manual_seed(seed))
        x2 = x.clone()
        assert_same(gw(x), written(x2))
        assert torch.equal(x, x2)


def _node_types(loss):
    seen, stack, names = set(), [loss.grad_fn], []
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        names.append(type(node).__name__)
        stack.extend(f for f, _ in node.next_functions)
    return names


def test_gpt2_training_steps_equal_eager_with_fewer_nodes():
    from benchmarks.training_check import Run, train_side_by_side
    from benchmarks.training_tasks import TASKS
    task = TASKS["gpt2"]("test")
    runs = {"eager": Run(task), "tograph": Run(task, wrap=lambda m: to_graph(m, strict=True))}
    diffs = train_side_by_side(task, runs, 2)
    assert runs["tograph"].error is None and runs["tograph"].fallbacks == []
    assert diffs["tograph"]["max_rel_diff"] <= 1e-5, diffs["tograph"]
    (ids,), target = task.batch(0)
    eager_names = _node_types(task.loss(runs["eager"].called(ids), target))
    names = _node_types(task.loss(runs["tograph"].called(ids), target))
    assert "ReshapeAliasBackward0" in eager_names
    assert "ReshapeAliasBackward0" not in names
    assert len(names) <= 96, sorted(names)              # was 99 (eager: 120)
