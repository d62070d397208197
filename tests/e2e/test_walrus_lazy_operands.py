"""``:=`` in an operand Python evaluates only on some paths. In an ``if`` test's ``and``/
``or`` chain the operands after the first become statements (``t = A``; ``if t: t = B``;
``if t:``), so the binding lands in the function and converts where the name is bound
on every path (assigned before the ``if``). Elsewhere (a branch of ``x if c else y``, an
``or`` inside the ``and``) converted code evaluates the operand in a lambda, where the name
would be bound in the lambda: where the function reads it elsewhere, that falls back,
naming the line, and equals eager. A binding read nowhere else, ``:=`` where it is always
evaluated, and the temporaries of chained comparisons convert."""
import torch

from fidelity_checks import converts, falls_back

T = torch.tensor
POS, NEG, SMALL = T([1.0, 2.0]), T([-1.0, -3.0]), T([0.5, 0.6])
SIGNS = ((POS,), (NEG,), (SMALL,))
MESSAGE = "`m := ...` in an operand evaluated only on some paths"


# ------------------------------------------------------------- in an if test: statements
def bound_before_and_rebound_behind_and(x):
    m = x.min()
    if x.sum() > 0 and (m := x.max()) > 1:
        return x * m
    return x + m


def bound_before_and_rebound_behind_or(x):
    m = x.min()
    if x.sum() < 0 or (m := x.max()) > 1:
        return x * m
    return x - m


def three_operands(x):
    m, k = x.min(), x.sum()
    if x.sum() > 0 and (m := x.max()) > 1 and (k := m * 2) < 5:
        return x * k
    return x + m - k


def python_values_behind_and(x, n):
    m = 0
    if n > 1 and (m := n * 2) > 3:
        return x * m
    return x + m


def test_bound_before_converts():
    converts(bound_before_and_rebound_behind_and, *SIGNS)
    converts(bound_before_and_rebound_behind_or, *SIGNS)
    converts(three_operands, *SIGNS, (T([0.5, 2.0]),))
    converts(python_values_behind_and, (POS, 3), (POS, 1))


def first_bound_behind_and(x):
    if x.sum() > 0 and (m := x.max()) > 1:
        return x * m
    return x


def first_bound_behind_or(x):
    if x.sum() > 0 or (m := x.min()) < -2:
        return x
    return x * m


def test_first_bound_behind_and_or_falls_back_naming_it():
    falls_back(first_bound_behind_and, *SIGNS, match="'m'")
    falls_back(first_bound_behind_or, (POS,), (T([-1.0, -0.5]),), match="'m'")


# ------------------------------------------------------------- in a lambda: falls back
def in_a_conditional_branch(x):
    m = x.min()
    y = (m := x.max()) if x.sum() > 0 else x
    return y * m


def or_inside_and(x):
    m = x.min()
    if x.sum() > 0 and (x.max() > 5 or (m := x.max()) > 1):
        return x * m
    return x + m


def test_bound_in_a_lambda_falls_back_as_eager():
    falls_back(in_a_conditional_branch, *SIGNS, match=MESSAGE)
    falls_back(or_inside_and, *SIGNS, match=MESSAGE)


# ------------------------------------------------------------- converts as before
def leftmost_in_the_test(x):
    if (m := x.max()) > 1 and x.sum() > 0:
        return x * m
    return x - m


def chained_comparison_behind_and(x):
    if x.sum() > -10 and 0 < x.max() * 2 < 3:
        return x * 2
    return x


def read_nowhere_else(x):
    y = x * 2 if x.sum() > 0 and (m := x.max()) > 1 else x
    return y


def test_always_evaluated_unread_and_chained_comparisons_convert():
    converts(leftmost_in_the_test, *SIGNS)
    converts(chained_comparison_behind_and, *SIGNS)
    converts(read_nowhere_else, *SIGNS)
