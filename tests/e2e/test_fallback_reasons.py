"""Fallback reasons name the construct that could not be converted (h100).

Two classes of misleading reasons, each fixed where the reason is made:

- ``.grad`` read after a backward that runs in a branch or loop body decided by a tensor
  (a tensor ``if``, ``if pred.item() != y.item(): continue``, FGSM's test loop): the
  branch traces the backward on its own stand-in of a tensor made in the function, so the
  read outside found no state and answered None; the user's next line failed ("tracing
  failed with AttributeError: 'NoneType' object has no attribute 'data'"). The read now
  refuses with the rule (``runtime/autograd_effects.read``): whether .grad is set depends on
  the path taken at run time; ``torch.autograd.grad`` in the branch converts.
- a Python number the function changes (``loop["n"] += 1``, ``self.n += 1``) is carried as
  a graph value; when that trace fails too, the refusal named only the change ("the
  function mutates closure variable ...") although the same change converts elsewhere. The
  reason now goes on with why carrying failed, its file:line first (``transpiler/api.
  _carry_failure``): CleanRL TD3's ``actor_loss`` None on one path, the annotated
  transformer's label-smoothing module attribute write.

Differential: eager vs ``to_graph`` default (eager's results, a FallbackWarning naming this
file's lines and the construct) and strict (``ConversionError`` with the same text), over
several calls, in a function, a loop, a method and a module's forward; neighbours that
convert stay converting.
"""
from __future__ import annotations

import os
import re
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.e2e.test_known_sizes_from_tensors import _same
from transpiler import ConversionError, FallbackWarning, to_graph

HERE = os.path.abspath(__file__)


def _line_of(text: str) -> int:
    with open(HERE) as f:
        lines = f.read().splitlines()
    found = [i + 1 for i, src in enumerate(lines) if src.endswith(f"  {text}")]
    assert len(found) == 1, (text, found)
    return found[0]


def fallback_reason(make, calls, lines, words):
    """``make()`` -> a fresh callable (eager and converted each get their own). Every call
    equals eager's; the FallbackWarning names this file at each of ``lines`` (source
    texts, the first being where it is reported) and holds each of ``words``; strict mode
    raises ConversionError with the same text."""
    eager, conv = make(), make()
    g = to_graph(conv)
    messages = []
    for args in calls:
        exp = eager(*args)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            got = g(*args)
        _same(got, exp)
        messages += [str(m.message) for m in w if issubclass(m.category, FallbackWarning)]
    assert messages, "expected a FallbackWarning"
    with pytest.raises(ConversionError) as info:
        to_graph(make(), strict=True)(*calls[0])
    for text in messages + [str(info.value)]:
        assert text.startswith(f"{HERE}:{_line_of(lines[0])}:"), text
        for line in lines[1:]:
            assert f"{HERE}:{_line_of(line)}:" in text, (line, text)
        for word in words:
            assert word in text, (word, text)
        assert "tracing failed with" not in text, text
    return messages


def converts(make, calls):
    eager, conv = make(), make()
    g = to_graph(conv, strict=True)
    for args in calls:
        _same(g(*args), eager(*args))


# ------------------------------------------------------- .grad after a branch's backward
def _grad_after_tensor_if():
    def f(x):
        x = x.clone().requires_grad_()
        if x.sum() > 0:
            (x * 2).sum().backward()
        grad = x.grad                   # READ-AFTER-IF
        return x.detach() if grad is None else grad.data * 2
    return f


def _grad_inside_tensor_if():
    def f(x):
        x = x.clone().requires_grad_()
        if x.sum() > 0:
            (x * x).sum().backward()
            return x.grad * 3           # READ-INSIDE-IF
        return x.detach()
    return f


def _fgsm_loop():
    """pytorch/tutorials fgsm_tutorial.py ``test``'s shape: a per-example ``continue``
    decided by ``.item()``, then a backward and ``data.grad.data``."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(4, 3), nn.LogSoftmax(dim=1))

    def test(batch, targets, epsilon):
        correct = 0
        for data, target in zip(batch, targets):
            data = data.clone().unsqueeze(0)
            data.requires_grad = True
            output = model(data)
            init_pred = output.max(1, keepdim=True)[1]
            if init_pred.item() != target.item():
                continue
            loss = F.nll_loss(output, target.view(1))
            model.zero_grad()
            loss.backward()
            data_grad = data.grad.data          # FGSM-READ
            perturbed = torch.clamp(data + epsilon * data_grad.sign(), 0, 1)
            correct += int(model(perturbed).argmax() == target)
        return correct
    return test


_X = [(torch.ones(3),), (-torch.ones(3),), (torch.arange(3.0),)]


@pytest.mark.parametrize("make,line", [
    (_grad_after_tensor_if, "# READ-AFTER-IF"),
    (_grad_inside_tensor_if, "# READ-INSIDE-IF"),
], ids=["after", "inside"])
def test_grad_after_branch_backward_names_the_rule(make, line):
    fallback_reason(make, _X, [line], [".grad read after a backward", "branch or loop body",
                                       "depends on the path taken at run time",
                                       "torch.autograd.grad"])


def test_fgsm_loop_names_the_rule():
    g = torch.Generator().manual_seed(3)
    calls = [(torch.rand(4, 4, generator=g), torch.randint(0, 3, (4,), generator=g), eps)
             for eps in (0.0, 0.1, 0.3)]
    fallback_reason(_fgsm_loop, calls, ["# FGSM-READ"], [".grad read after a backward",
                                                          "depends on the path taken"])


def _autograd_grad_in_branch():
    def f(x):
        x = x.clone().requires_grad_()
        loss = (x * x).sum()
        if x.sum() > 0:
            grad = torch.autograd.grad(loss, x)[0]
        else:
            grad = torch.zeros_like(x)
        return grad
    return f


def _grad_without_branch():
    def f(x):
        x = x.clone().requires_grad_()
        (x * x).sum().backward()
        return x.grad * 2
    return f


@pytest.mark.parametrize("make", [_autograd_grad_in_branch, _grad_without_branch],
                         ids=["autograd_grad_in_branch", "no_branch"])
def test_neighbours_convert(make):
    """What the reason advises converts: ``torch.autograd.grad`` in the branch; a
    backward outside any branch still converts."""
    converts(make, _X)


# --------------------------------------------- a counter whose carried trace fails too
def _counter_picks_result():
    """CleanRL TD3's delayed actor update: the result is None or a tensor by a counter."""
    state = {"n": 0}
    torch.manual_seed(0)
    lin = nn.Linear(3, 1)

    def step(x):
        out = None
        if state["n"] % 2 == 0:         # COUNTER-IF
            out = lin(x).sum()
        state["n"] += 1                 # COUNTER-ADD
        return out
    return step


class _Counter:
    def __init__(self):
        self.n = 0

    def step(self, x):
        out = None
        if self.n % 2 == 0:             # METHOD-IF
            out = x.sum()
        self.n += 1                     # METHOD-ADD
        return out


class _CountingModule(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(3, 2)
        self.calls = 0

    def forward(self, x):
        y = None
        if self.calls % 3 == 0:         # MODULE-IF
            y = self.lin(x)
        self.calls += 1                 # MODULE-ADD
        return y


_CALLS = [(torch.randn(2, 3, generator=torch.Generator().manual_seed(i)),) for i in range(4)]


@pytest.mark.parametrize("make,add,cond", [
    (_counter_picks_result, "# COUNTER-ADD", "# COUNTER-IF"),
    (lambda: _Counter().step, "# METHOD-ADD", "# METHOD-IF"),
    (_CountingModule, "# MODULE-ADD", "# MODULE-IF"),
], ids=["closure_dict", "method", "module_forward"])
def test_counter_reason_names_why_it_is_not_carried(make, add, cond):
    messages = fallback_reason(make, _CALLS, [add, cond],
                               ["nor can the number be carried as a graph value",
                                "on one path and NoneType None on the other"])
    assert all(re.search(r"mutates (closure variable 'state'|an attribute of the object)", m)
               for m in messages), messages


def _counter_only():
    state = {"n": 0}

    def step(x):
        state["n"] += 1
        return x * 2
    return step


def test_counter_alone_converts():
    """The neighbour: the same counter, the result not depending on it."""
    converts(_counter_only, _CALLS)


def _momentum_after_break():
    """FISTA's momentum ``t`` rebound after a tensor ``if ...: break`` (h99): ``t**2`` of the
    number the path chose. Its reason was an internal "unsupported operand type(s) for **
    or pow(): 'PathValue' and 'int'"."""
    import math

    def f(z):
        t = 1
        for _ in range(3):
            if z.sum() > 100:
                break
            t_next = (1 + math.sqrt(1 + 4 * t**2)) / 2  # POW-LINE
            z = z * 2
            t = t_next
        return z, t
    return f


def test_a_path_chosen_number_under_pow_names_the_rule():
    fallback_reason(_momentum_after_break, [(torch.ones(2),), (torch.full((2,), 60.0),)],
                    ["# POW-LINE"], ["a Python value that tensor-dependent control flow chose"])
