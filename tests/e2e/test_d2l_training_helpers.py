"""d2l.ai's training helpers and the list methods textbook code calls, converted and
compared with eager call after call (default and strict mode).

- ``sgd(params, lr, batch_size)`` on parameters a closure holds: ``param -= lr *
  param.grad / batch_size`` under ``no_grad`` writes the real leaf in place, and the name
  still stands for that leaf: its ``.grad`` (then ``zero_()``), ``is_leaf`` and
  ``requires_grad`` are the leaf's (``runtime.tensor_state.note_written_leaf``).
- A list built in a tensor loop (one stacked tensor, ``runtime.tensor_list``) answers
  ``list``'s methods as a list does (reverse, insert, pop, sort of integers, copy, clear,
  extend, ``*``, ``+``, slices, ``del``); the methods that find an element by its value
  (remove, index, count) and ``sort`` of floats or with a key fall back naming the line.
"""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

from e2e_helpers import assert_same
from transpiler import ConversionError, FallbackWarning, to_graph

MODES = [False, True]       # strict


def _calls(fn, inputs, strict):
    """``fn`` converted, called on each input; no FallbackWarning allowed."""
    g = to_graph(fn, strict=strict)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        return g, [g(*args) for args in inputs]


# ------------------------------------------------------------------ sgd on closure leaves
def _leaves(seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(4, 3, generator=g).requires_grad_(),
            torch.randn(3, generator=g).requires_grad_()]


def _train_step(params):
    def sgd(params, lr, batch_size):            # d2l.ai 3.4, verbatim
        with torch.no_grad():
            for param in params:
                param -= lr * param.grad / batch_size
                param.grad.zero_()

    def grad_clipping(params, theta):           # d2l.ai 9.5 (on a list of parameters)
        norm = torch.sqrt(sum(torch.sum((p.grad ** 2)) for p in params))
        if norm > theta:
            for param in params:
                param.grad[:] *= theta / norm

    def step(X, y, theta):
        W, b = params
        loss = F.mse_loss(X @ W + b, y)
        loss.backward()
        grad_clipping(params, theta)
        sgd(params, lr=0.1, batch_size=X.shape[0])
        return loss
    return step


def _batches():
    g = torch.Generator().manual_seed(3)
    return [(torch.randn(n, 4, generator=g), torch.randn(n, 3, generator=g), theta)
            for n, theta in ((5, 0.05), (5, 100.0), (7, 0.05), (5, 0.5))]


@pytest.mark.parametrize("strict", MODES)
def test_sgd_and_clipping_on_closure_leaves_equal_eager(strict):
    eager, conv = _leaves(0), _leaves(0)
    batches = _batches()
    expected = [_train_step(eager)(*b) for b in batches]
    g, got = _calls(_train_step(conv), batches, strict)
    for i, (a, b) in enumerate(zip(got, expected)):
        assert_same(a, b, f"loss {i}")
    for p, q in zip(conv, eager):
        assert_same(p, q, "param")
        assert p.is_leaf and p.requires_grad
        assert_same(p.grad, q.grad, "grad")
        assert not p.grad.any()         # zeroed in place, the same tensor as eager's
    assert g.cache_info().traces >= 1


def _leaf_questions(params):
    def step(x):
        loss = (x @ params[0]).sum()
        loss.backward()
        answers = []
        with torch.no_grad():
            for p in params:
                p -= 0.5 * p.grad
                answers.append((p.is_leaf, p.requires_grad, p.grad_fn is None,
                                p.grad is None))
                p.grad.zero_()
        return loss, answers
    return step


@pytest.mark.parametrize("strict", MODES)
def test_leaf_written_in_place_keeps_its_autograd_state(strict):
    eager = [torch.randn(3, 2).requires_grad_()]
    conv = [eager[0].detach().clone().requires_grad_()]
    xs = [(torch.randn(4, 3),) for _ in range(3)]
    expected = [_leaf_questions(eager)(*x) for x in xs]
    _, got = _calls(_leaf_questions(conv), xs, strict)
    for a, b in zip(got, expected):
        assert_same(a, b)
    assert_same(conv[0], eager[0], "param")
    assert_same(conv[0].grad, eager[0].grad, "grad")


# ------------------------------------------------------------------ list methods
def _items(x):
    out = []
    for row in x:               # a tensor loop: the list is one stacked tensor
        out.append(row.argmax().item())
    return out


def _rows(x):
    out = []
    for row in x:
        out.append(row * 2)
    return out


def m_reverse(x):
    L = _items(x)
    L.reverse()
    return L


def m_insert(x):
    L = _items(x)
    L.insert(1, 7)
    L.insert(-1, 8)
    L.insert(100, 9)
    L.insert(-100, 5)
    return L


def m_pop(x):
    L = _items(x)
    a = L.pop()
    b = L.pop(0)
    return L, a, b


def m_sort(x):
    L, M = _items(x), _items(x)
    L.sort()
    M.sort(reverse=True)
    return L, M


def m_copy(x):
    L = _items(x)
    M = L.copy()
    M.append(3)
    return L, M


def m_clear(x):
    L = _items(x)
    L.clear()
    L.append(2)
    return L


def m_mul(x):
    L = _items(x)
    M = _items(x)
    M *= 2
    return L * 2, 3 * L, L * 0, M


def m_add_extend(x):
    L = _items(x)
    M = L + [1, 2]
    L.extend([4, 5])
    return L, M, L + L


def m_slices(x):
    L = _items(x)
    return L[1:], L[:-1], L[::2]


def m_del(x):
    L, M, N, K = _items(x), _items(x), _items(x), _items(x)
    del L[0]
    del L[-1]
    del M[1:3]
    del N[:-2]
    del K[2:]
    return L, M, N, K


def m_tensor_rows(x):
    L = _rows(x)
    L.reverse()
    L.insert(0, x[0])
    last = L.pop()
    del L[1]
    return torch.stack(L), last, torch.stack(L.copy() * 2)


METHODS = [m_reverse, m_insert, m_pop, m_sort, m_copy, m_clear, m_mul, m_add_extend,
           m_slices, m_del, m_tensor_rows]


@pytest.mark.parametrize("strict", MODES)
@pytest.mark.parametrize("fn", METHODS, ids=lambda f: f.__name__)
def test_list_method_of_a_loop_built_list_equals_eager(fn, strict):
    g = torch.Generator().manual_seed(1)
    inputs = [(torch.randn(n, 4, generator=g),) for n in (5, 6, 4)]
    conv, got = _calls(fn, inputs, strict)
    for args, out in zip(inputs, got):
        assert_same(out, fn(*args))
    ops = [n.op for n in conv.graph(*inputs[0]).nodes]
    assert "while" in ops, "the list was not built in a tensor loop"


def v_remove(x):
    L = _items(x)
    L.remove(0)
    return L


def v_index(x):
    L = _items(x)
    return L.index(1)


def v_count(x):
    L = _items(x)
    return L.count(2)


def v_sort_key(x):
    L = _items(x)
    L.sort(key=lambda v: -v)
    return L


def v_sort_floats(x):
    L = []
    for row in x:
        L.append(row.sum().item())
    L.sort()
    return L


REFUSED = {v_remove: "L.remove(0)", v_index: "L.index(1)", v_count: "L.count(2)",
           v_sort_key: "L.sort(key=", v_sort_floats: "L.sort()"}


def _named_line(message, text):
    import re
    m = re.search(re.escape(__file__) + r":(\d+)", message)
    assert m, message
    with open(__file__) as f:
        assert text in f.read().splitlines()[int(m.group(1)) - 1], message


@pytest.mark.parametrize("fn", list(REFUSED), ids=lambda f: f.__name__)
def test_list_method_by_value_falls_back_naming_its_line(fn):
    x = torch.tensor([[0.0, 1.0, 2.0], [3.0, 2.0, 1.0], [1.0, 5.0, 0.0], [0.0, 0.0, 9.0]])
    g = to_graph(fn)
    with pytest.warns(FallbackWarning) as record:
        got = g(x)
    assert_same(got, fn(x))
    _named_line(str(record[0].message), REFUSED[fn])
    with pytest.raises(ConversionError) as err:
        to_graph(fn, strict=True)(x)
    _named_line(str(err.value), REFUSED[fn])


# ------------------------------------------------------------------ floats in a broken loop
def lr_range(x, start_lr: float = 1e-3, mult: float = 3.0):
    """fastai's LR range test shape: Python floats (the carried lr, ``item()`` losses)
    appended in a loop a tensor ``break`` ends."""
    lr = start_lr
    lrs, losses = [], []
    for it in range(8):
        loss = (x * lr).pow(2).sum()
        lrs.append(lr)
        losses.append(loss.item())
        if loss.item() > 4.0:
            break
        lr *= mult
    return lrs, losses


@pytest.mark.parametrize("strict", MODES)
def test_floats_appended_in_a_tensor_broken_loop_equal_eager(strict):
    inputs = [(torch.full((3,), v),) for v in (1.0, 30.0, 0.2, 1.0)]     # breaks at 5, 2, 7
    _, got = _calls(lr_range, inputs, strict)
    for (x,), out in zip(inputs, got):
        exp = lr_range(x)
        assert_same(out, exp)
        assert all(float(a) == b for a, b in zip(out[0], exp[0]))     # the doubles exactly
