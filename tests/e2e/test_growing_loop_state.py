"""Loop state whose shape grows or shrinks along a dimension in a tensor ``while`` (issue
13, item 2): one ``while`` node carries it with that dimension known only at run time, and
the body reads its size as a run-time value. Decoding loops (``ids = cat([ids, nxt], 1)``
until every row has emitted ``eos``) in several spellings, a shrinking active set, lists
of tokens stacked at the end; each against eager, strict and default, on two calls with
different lengths (a size baked at trace time would show), and checked for a while node.
"""
import warnings

import pytest
import torch

from tests.e2e.e2e_helpers import (_clone, assert_same, case_collector, check,
                                   op_counts)
from transpiler import FallbackWarning, to_graph

cases, case = case_collector(loop=True)

V, D, EOS = 32, 16, 3


class Tiny(torch.nn.Module):
    """A decoder that reads the current length: positions from ``arange(T)``, a causal
    mask ``tril(ones(T, T))``, ``view(-1, h.size(-1))``."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb = torch.nn.Embedding(V, D)
        self.pos = torch.nn.Embedding(64, D)
        self.out = torch.nn.Linear(D, V)

    def forward(self, ids):
        T = ids.size(1)
        h = self.emb(ids) + self.pos(torch.arange(T))
        mask = torch.tril(torch.ones(T, T))
        att = (h @ h.transpose(1, 2) / D).masked_fill(mask == 0, float("-inf")).softmax(-1)
        h = att @ h
        return self.out(h.view(-1, h.size(-1))).view(ids.shape[0], T, -1)


MODEL = Tiny().eval()


def ids_of(batch, length, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, V, (batch, length), generator=g)


# two calls per case: other batch, other prompt length, other number of new tokens
CALLS = [(ids_of(2, 5, 0), 6), (ids_of(3, 3, 1), 9)]


@case(*CALLS)
def while_done_and_step(ids, max_new: int):
    done = torch.zeros(ids.shape[0], dtype=torch.bool)
    step = 0
    while not done.all() and step < max_new:
        logits = MODEL(ids)[:, -1, :]
        nxt = logits.argmax(-1)
        nxt = torch.where(done, torch.full_like(nxt, EOS), nxt)
        ids = torch.cat([ids, nxt[:, None]], 1)
        done = done | (nxt == EOS)
        step += 1
    return ids


@case(*CALLS)
def for_range_break_on_done(ids, max_new: int):
    done = torch.zeros(ids.shape[0], dtype=torch.bool)
    for _ in range(max_new):
        nxt = MODEL(ids)[:, -1].argmax(-1)
        nxt = torch.where(done, torch.full_like(nxt, EOS), nxt)
        ids = torch.cat((ids, nxt.unsqueeze(-1)), dim=-1)
        done = done | (nxt == EOS)
        if done.all():
            break
    return ids


@case(*CALLS)
def tokens_in_a_list_stacked(ids, max_new: int):
    toks = []
    done = torch.zeros(ids.shape[0], dtype=torch.bool)
    step = 0
    while step < max_new and not done.all():
        nxt = MODEL(ids)[:, -1].argmax(-1)
        toks.append(nxt)
        ids = torch.cat([ids, nxt[:, None]], dim=1)
        done = done | (nxt == EOS)
        step += 1
    return ids, torch.stack(toks, 1)


@case(*CALLS)
def length_and_count_returned(ids, max_new: int):
    start = ids.size(1)
    while ids.size(1) < start + max_new and not (ids[:, -1] == EOS).all():
        nxt = MODEL(ids)[:, -1].argmax(-1, keepdim=True)
        ids = torch.cat([ids, nxt], -1)
    return ids, ids.size(1) - start, ids.shape


@case((torch.tensor([5.0, 1.0, 9.0, 3.0, 0.5]),), (torch.tensor([2.0, 40.0, 7.0]),))
def shrinking_active_set(x):
    rounds = 0
    while x.numel() > 0:
        x = x[x > 1.0] / 2
        rounds += 1
    return x, rounds


@case((torch.arange(12.0).reshape(3, 4),), (torch.ones(2, 5),))
def shrinking_rows(x):
    total = x.sum() * 0
    while x.size(0) > 0 and x.sum() > 0:
        total = total + x[0].sum()
        x = x[1:]
    return total, x.shape[0]


@case((torch.tensor([1.0, 2.0]),), (torch.tensor([0.5, 0.25, 3.0]),))
def growing_vector_until_sum(x):
    while x.sum() < 20:
        x = torch.cat([x, x[-1:] * 2 + x.size(0)])
    return x, len(x)


@case((torch.ones(2, 1),), (torch.ones(3, 2),))
def growing_python_count_and_tensor(x):
    n = 1
    while x.sum() < 30:
        x = torch.cat([x, x[:, -1:] + n], 1)
        n += 1
    return x, n, x.size(-1) > 4


def _run(fn, args, strict):
    """``check`` in the given mode: every call equal to eager's, no warning."""
    return check(fn, *args, g=to_graph(fn, strict=strict))


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "default"])
@pytest.mark.parametrize("fn,inputs,cond,loop", cases)
def test_growing_state(fn, inputs, cond, loop, strict):
    with torch.no_grad():
        g = _run(fn, inputs, strict)
        for call in inputs:
            counts = op_counts(g.graph(*_clone(call)))
            assert counts["while"] == 1, counts     # one loop node carries the state


def test_gradients_through_growing_state():
    def grow(x, w):
        while x.size(0) < 6:
            x = torch.cat([x, (x[-1:] * w).tanh()])
        return x.sum()
    for n in (2, 3):
        x, w = torch.randn(n, 4), torch.randn(4, requires_grad=True)
        exp = torch.autograd.grad(grow(x, w), w)[0]
        got = torch.autograd.grad(to_graph(grow, strict=True)(x, w), w)[0]
        torch.testing.assert_close(got, exp)


def test_size_flag_to_torch_becomes_cond():
    """A run-time size comparison passed as a torch flag (is_causal) runs per value."""
    def f(q):
        while q.size(2) < 5 and q.abs().sum() > 0:      # (a tensor test: one while node)
            causal = q.size(2) > 1
            a = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=causal)
            q = torch.cat([q, a[:, :, -1:]], 2)
        return q
    g = to_graph(f, strict=True)
    for t in (1, 2):
        q = torch.randn(1, 2, t, 4)
        torch.testing.assert_close(g(q), f(q))
        assert op_counts(g.graph(q))["while"] == 1


def test_and_of_size_test_and_python_false_is_false():
    """``n > 1 and mask is None`` with a mask is the Python False on both paths."""
    def f(x, mask):
        flag = True
        while x.size(0) < 4 and x.sum() < 100:
            flag = x.size(0) > 1 and mask is None       # False, never a run-time value
            x = torch.cat([x, x[-1:] + (2.0 if flag is False else 5.0)])
        return x, flag
    g = to_graph(f, strict=True)
    for n in (1, 2):
        x = torch.zeros(n)
        assert_same(g(x, torch.ones(1)), f(x, torch.ones(1)))
        assert op_counts(g.graph(x, torch.ones(1)))["while"] == 1


def test_or_of_size_test_and_python_true_is_true():
    def f(x, mask):
        flag = False
        while x.size(0) < 4 and x.sum() < 100:
            flag = x.size(0) < 2 or mask is not None     # True, never a run-time value
            x = torch.cat([x, x[-1:] + (2.0 if flag is True else 5.0)])
        return x, flag
    g = to_graph(f, strict=True)
    for n in (1, 2):
        x = torch.zeros(n)
        assert_same(g(x, torch.ones(1)), f(x, torch.ones(1)))


def test_flag_to_torch_python_function_becomes_cond():
    """The same through a torch Python function (its flag reaches the traced op)."""
    def f(x):
        while x.size(0) < 6 and x.sum() > -1e9:
            x = torch.cat([x, torch.nn.functional.dropout(x[-1:] + 1, 0.5,
                                                          training=x.size(0) > 100)])
        return x
    g = to_graph(f, strict=True)
    for n in (1, 3):
        x = torch.randn(n, 2)
        torch.testing.assert_close(g(x), f(x))


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "default"])
def test_identity_of_a_run_time_bool(strict):
    """``flag is True`` where ``flag`` is a size test on growing state: its value decides
    (Python's ``is`` on the stand-in object answered False silently)."""
    def f(x, other):
        y, flag = 0.0, False
        while x.sum() < 30:
            flag = x.size(0) > 2
            y = y + (1.0 if flag is True else 2.0) + (10.0 if flag is not False else 0.0)
            y = y + (100.0 if x is True else 0.0) + (5.0 if other is False else 0.0)
            x = torch.cat([x, x[-1:] + 1])
        return x, y, flag is False
    g = to_graph(f, strict=strict)
    for x, other in ((torch.ones(1), False), (torch.ones(3) * 2, 0)):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert_same(g(x, other), f(x, other))


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "default"])
def test_run_time_size_as_a_branch_operand(strict):
    """A size computed from growing state and assigned in an ``if`` test (transformers'
    ``if (pad := kv_length - mask.shape[-1]) > 0: F.pad(mask, (0, pad))``) is read as a
    size inside the branch (it was a bare number there: pad's shape failed, fallback)."""
    def padded(m, n):
        if (pad := n - m.size(0)) > 0:
            return torch.nn.functional.pad(m, (0, pad))
        return m[:n]

    def f(x, m):
        y = m
        while x.sum() < 40:
            y = padded(m, x.size(0))
            x = torch.cat([x, x[-1:] + y.sum()])
        return x, y
    g = to_graph(f, strict=strict)
    for x, m in ((torch.ones(1), torch.ones(3)), (torch.ones(2) * 3, torch.ones(1) * 2)):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert_same(g(x, m), f(x, m))
