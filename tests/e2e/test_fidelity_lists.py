"""Lists grown in tensor loops (TensorList): item assignment, indexing, pop, slices,
concatenation, len, and gradients through the stacked list, against eager."""
import torch

from fidelity_checks import converts, falls_back, same_gradients

M1 = torch.tensor([[1., 2., 3.], [4., 5., 6.], [-7., 0., 1.]])
M2 = torch.tensor([[-1., -2., 3.], [-4., 5., -6.]])
INPUTS = ((M1,), (M2,))


def test_setitem_after_rows_loop():
    def f(M):
        L = []
        for r in M:
            L.append(r)
        if len(L) > 0:
            L[0] = L[0] * 0.5
        return L
    converts(f, *INPUTS)


def test_setitem_negative_and_staged_index():
    def f(M):
        L = []
        i = 0
        while i < M.shape[0] and M[i].sum() > -100:
            L.append(M[i] * 2)
            i += 1
        L[0] = L[0] * 0.5
        L[-1] = L[-1] + 1
        L[i - 1] = L[i - 1] * 3      # a staged index
        return torch.stack(L)
    converts(f, *INPUTS)


def test_setitem_inside_the_growing_loop():
    def f(M):
        L = [M[0] * 0]
        for r in M:
            L.append(r)
            L[0] = L[0] + r
        return L
    converts(f, *INPUTS)


def test_setitem_keeps_earlier_reads():
    def f(M):
        L = []
        for r in M:
            L.append(r + 1)
        first = L[0]
        L[0] = first * 10
        return first, L[0]
    converts(f, *INPUTS)


def test_last_and_int_index_under_len():
    def f(M):
        L = []
        t = M[0] * 0
        for j in range(3):
            for r in M:
                if r.sum() > 0:
                    L.append(r)
            if len(L) > j:
                t = t + L[j]
            if len(L) > 0:
                t = t + L[-1]
        return t, L
    converts(f, *INPUTS)


def test_pop_last_first_and_negative():
    def f(M):
        L = []
        t = M[0] * 0
        for r in M:
            L.append(r + 1)
            L.append(r * 2)
            if len(L) > 1:
                t = t - L.pop()
        a = L.pop(0)
        b = L.pop(-1)
        return t, a, b, L
    converts(f, *INPUTS)


def test_pop_then_index_after_a_while():
    def f(x):
        L = []
        h = x
        i = 0
        while i < 3 and h.sum() > -1e9:
            h = h * 2
            L.append(h)
            i += 1
        t = L.pop() + L[0]
        return t, L[1:], L[:-1]
    converts(f, (torch.ones(3),), (torch.tensor([1., -2., 3.]),))


def test_concatenation_and_extend():
    def f(M):
        L = []
        for r in M:
            L = L + [r * 2]
            L.extend((r, r - 1))
        L += [M[0]]
        return L
    converts(f, *INPUTS)


def test_len_of_list_grown_in_one_branch_then_loop():
    def f(a, M):
        L = []
        t = a * 1
        if a.sum() > 0:
            L.append(a)
        else:
            if a.sum() < -1:
                L.append(a * 2)
        for _ in range(2):
            if len(L) > 0:
                t = t + L[-1]
            L.append(t)
        return t, len(L)
    converts(f, (torch.ones(3), M1), (-torch.ones(3), M1), (torch.zeros(3) - 0.5, M2))


def test_prepend_falls_back():
    def f(M):
        L = [M[0] * 0]
        for r in M:
            L = [r] + L
        return L
    falls_back(f, *INPUTS)


def test_element_of_another_shape_falls_back():
    def f(M):
        L = []
        for r in M:
            L.append(r)
        L[0] = M.sum()
        return L
    falls_back(f, *INPUTS, match="share a shape")


# ------------------------------------------------------------------ gradients
def test_gradients_through_stacked_list_grown_in_while():
    def f(x, W):
        L = [x]
        h = x
        i = 0
        while i < 4 and h.sum() < 100:
            h = torch.tanh(W @ h + x)
            L.append(h)
            i += 1
        s = torch.stack(L)
        return (s * torch.sigmoid(s)).sum() + torch.cat(L).exp().sum() + L[-1].sum()
    torch.manual_seed(0)
    for n in (3, 64):
        same_gradients(f, (torch.randn(n), torch.randn(n, n) * 0.3),
                       (torch.randn(n), torch.randn(n, n) * 0.1))


def test_gradients_through_list_with_setitem_and_pop():
    def f(x, W):
        L = []
        for r in W:
            L.append(r * x)
        L[0] = L[0] * 0.5
        last = L.pop()
        return torch.stack(L, 1).pow(2).sum() + last.sum()
    torch.manual_seed(1)
    same_gradients(f, (torch.randn(3), torch.randn(3, 3)), (torch.randn(3), torch.randn(4, 3)))


def test_gradients_with_and_without_planned_buffers():
    def f(x, W):
        L = []
        h = x
        i = 0
        while h.norm() < 50 and i < 5:
            h = torch.relu(W @ h) + 1
            L.append(torch.tanh(h) * 2)
            i += 1
        return torch.stack(L).sum(0)
    torch.manual_seed(2)
    args = (torch.randn(16), torch.randn(16, 16) * 0.3)
    same_gradients(f, args)
    from transpiler import to_graph
    from e2e_helpers import assert_same
    g = to_graph(f, strict=True)
    with torch.no_grad():           # planned buffers may be used: values still eager's
        assert_same(g(*args), f(*args))
    same_gradients(f, args)        # and gradients after a no_grad call


def test_gradients_with_in_place_updates_of_fresh_values_in_the_loop():
    def f(x, W):
        L = []
        h = x
        i = 0
        while i < 3 and h.abs().sum() < 1e6:
            h = h * W[i]
            h += x                  # in place on a fresh value, before it is appended
            L.append(h)
            i += 1
        return torch.stack(L).pow(2).sum() + L[-1].sum()
    torch.manual_seed(3)
    same_gradients(f, (torch.randn(4), torch.randn(3, 4)), (torch.randn(4), torch.randn(3, 4)))


# ------------------------------------------------------------------ requires_grad per element
X_GRAD = (torch.tensor([1., -2., 3.], requires_grad=True), M1)


def test_elements_that_all_require_grad_convert():
    def f(x, M):
        L = [x * 2]
        for r in M:
            L.append(r * x)
        L[1] = L[1] * 0.5
        return L, L.pop(0)
    converts(f, X_GRAD)


def test_list_mixing_grad_and_no_grad_elements_falls_back():
    def f(x, M):
        with torch.no_grad():
            L = [x * 0.0]              # eager: this element never requires grad
        for r in M:
            if r.sum() > 0:
                L.append(r * x)
        return L
    falls_back(f, X_GRAD, match="require grad")


def test_element_read_from_mixed_list_falls_back():
    def f(x, M):
        L = []
        h = x.detach()
        i = 0
        while i < 3 and h.sum() > -1e9:
            L.append(h)                # the first element does not require grad
            h = h * x
            i += 1
        return L[-1] * 1, L[0] + 1
    falls_back(f, X_GRAD, match="require grad")


# ------------------------------------------------------------------ lists a tensor loop shrinks
A1, A2 = torch.tensor([1., 2., 3.]), torch.tensor([-1., 0.5, -3.])


def test_list_popped_in_a_tensor_loop_converts():
    def f(a, M):
        L = [a * 0.0, a + 1]
        t = a * 1
        for r in M:
            if len(L) > 1:
                t = t - L.pop()
            if torch.tanh(t).sum() > -0.5:
                break
        L.append(t)
        i = 0
        while i < 1 and a.sum() > -100:
            L.pop(0)
            i += 1
        return t, L
    converts(f, (A1, M1), (A2, M2))


def test_list_of_items_of_different_shapes_falls_back():
    def f(a, M):
        L = [a, M]
        for r in M:
            L.append(r)
        return len(L)
    falls_back(f, (A1, M1), (A2, M2), match="share a shape")
