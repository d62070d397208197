"""Round 3 tensor-state fidelity: layout of a value whose shape is known only at run time,
``is_leaf`` of a cond/while output that is a leaf on one path only, and ``is`` after a
tensor ``while`` that may run no iteration. Each is answered exactly or falls back."""
import torch

from fidelity_checks import converts, falls_back, same_gradients


def M(*rows):
    return torch.tensor(rows, dtype=torch.float32)


A = torch.arange(6.0).reshape(2, 3)


# ---------------------------------------------------------------- layout of a run-time shape
def test_stride_of_path_dependent_shape_falls_back():
    def f(x):
        y = x.t() if x.sum() > 0 else x + 1
        return y.contiguous().stride()
    falls_back(f, (A,), (-A,), match="stride")


def test_is_contiguous_after_while_slicing_falls_back():
    def f(x):
        y = x
        while y.sum() > 10:
            y = y[:, 1:]
        return y.clone().is_contiguous(), y.sum()
    falls_back(f, (A + 1,), (-A,))


def test_stride_of_same_shape_branches_converts():
    def f(x):
        y = x * 2 if x.sum() > 0 else x - 1
        return y.contiguous().stride(), y
    converts(f, (A,), (-A,))


# ---------------------------------------------------------------- is_leaf by path
def test_is_leaf_new_leaf_rebound_in_while_falls_back():
    def f(x):
        y = torch.ones(2, requires_grad=True)
        while x.sum() > y.sum().detach():
            y = y * 2
        return y.is_leaf
    falls_back(f, (M(1.0, 1.0),), (M(20.0, 1.0),))


def test_grad_fn_leaf_on_one_path_falls_back():
    def f(x):
        y = torch.zeros(2, requires_grad=True)
        z = y + 1 if x.sum() > 0 else y
        return z.grad_fn is None
    falls_back(f, (M(1.0, 1.0),), (M(-2.0, 0.5),))


def test_is_leaf_agreeing_paths_converts():
    def f(x):
        y = torch.zeros(2, requires_grad=True)
        z = y * 2 if x.sum() > 0 else y + 1
        w = x * 0 if x.sum() > 0 else x
        return z.is_leaf, z.requires_grad, w.is_leaf, x * 2
    converts(f, (M(1.0, 1.0),), (M(-2.0, 0.5),))


# ---------------------------------------------------------------- `is` after a tensor while
def test_is_after_while_falls_back():
    def f(x):
        t = x
        while t.sum() < 10:
            t = t + 3
        return t is x, t
    falls_back(f, (M(20.0, 1.0),), (M(1.0, 1.0),))


def test_is_not_after_while_of_other_variable_falls_back():
    def f(x):
        y = x * 1
        t = y
        while t.sum() < 10:
            t = t * 2
        return t is not y
    falls_back(f, (M(20.0, 1.0),), (M(1.0, 1.0),))


def test_is_of_variable_the_loop_keeps_converts():
    def f(x):
        t = x
        k = x * 0
        while k.sum() < 3:
            k = k + 1
        return t is x, k
    converts(f, (M(20.0, 1.0),), (M(1.0, 1.0),))


def test_while_without_is_still_converts_with_gradients():
    def f(x):
        t = x
        while t.sum() < 10:
            t = t * 2
        return t
    converts(f, (M(20.0, 1.0),), (M(1.0, 1.0),))
    same_gradients(f, (M(20.0, 1.0),), (M(1.0, 1.0),))
