"""``:=`` in an operand Python evaluates only on some paths (the right of ``and``/``or``, a
branch of ``x if c else y``): converted code evaluates such an operand in a lambda, where
the name would be bound in the lambda, not in the function (a stale or unbound value after
it). Where the function reads the name elsewhere, it falls back, naming the line, and
equals eager; a binding read nowhere else, ``:=`` where it is always evaluated, and the
temporaries of chained comparisons still convert."""
import torch

from fidelity_checks import converts, falls_back

T = torch.tensor
POS, NEG, SMALL = T([1.0, 2.0]), T([-1.0, -3.0]), T([0.5, 0.6])
SIGNS = ((POS,), (NEG,), (SMALL,))
MESSAGE = "`m := ...` in an operand evaluated only on some paths"


def bound_before_and_rebound_behind_and(x):
    m = x.min()
    if x.sum() > 0 and (m := x.max()) > 1:
        return x * m
    return x + m


def behind_or(x):
    if x.sum() > 0 or (m := x.min()) < -2:
        return x
    return x * m


def in_a_conditional_branch(x):
    m = x.min()
    y = (m := x.max()) if x.sum() > 0 else x
    return y * m


def python_values_behind_and(x, n):
    m = 0
    if n > 1 and (m := n * 2) > 3:
        return x * m
    return x + m


def test_behind_and_falls_back_as_eager():
    falls_back(bound_before_and_rebound_behind_and, *SIGNS, match=MESSAGE)


def test_behind_or_falls_back_as_eager():
    falls_back(behind_or, (POS,), (T([-1.0, -0.5]),), match=MESSAGE)


def test_in_a_conditional_branch_falls_back_as_eager():
    falls_back(in_a_conditional_branch, *SIGNS, match=MESSAGE)


def test_python_values_behind_and_fall_back_as_eager():
    falls_back(python_values_behind_and, (POS, 3), (POS, 1), match=MESSAGE)


def leftmost_in_the_test(x):
    if (m := x.max()) > 1 and x.sum() > 0:
        return x * m
    return x - m


def chained_comparison_behind_and(x):
    if x.sum() > -10 and 0 < x.max() * 2 < 3:
        return x * 2
    return x


def binding_read_nowhere_else(x):
    if x.sum() > 0 and (m := x.max()) > 1:
        return x * 2
    return x


def test_always_evaluated_unread_and_chained_comparisons_convert():
    converts(leftmost_in_the_test, *SIGNS)
    converts(binding_read_nowhere_else, *SIGNS)
    converts(chained_comparison_behind_and, *SIGNS)
