"""Views and aliasing across in-place writes: eager's results exactly, or a fallback.

A graph runs on real tensors, so views taken in traced code are real views when it runs;
the one place a trace holds copies is a list grown in a tensor loop (one stacked tensor).
An in-place write that eager would show through such a list's element falls back."""
import torch

from fidelity_checks import converts, falls_back

M1 = torch.tensor([[1., 2., 3.], [4., 5., 6.]])
M2 = torch.tensor([[-1., -2., 3.], [-4., 5., -6.]])
INPUTS = ((M1,), (M2,))


# ------------------------------------------------------------------ straight-line code
def test_write_through_view_and_base():
    def f(M):
        X = M.clone()
        Y, C, V = X[0], X[:, 1], X.view(6)
        Y.mul_(2.0)            # a view written through: X changes
        X.add_(1.0)            # the base written while views live: Y, C, V change
        C.add_(1.0)
        V[3] = 0.5
        return X, Y, C, V
    converts(f, *INPUTS)


def test_every_view_op_sees_a_later_write():
    def f(M):
        X = M.clone()
        a, b, (c, d) = X.t(), X.transpose(0, 1), X.unbind(0)
        e, g, h = X.narrow(1, 0, 2), X.reshape(6), X[0].unsqueeze(0)
        k, (s1, s2), q = X.select(1, 2), X.split(1, 0), X.chunk(3, 1)[1]
        ex, sq, dg = X[0:1].expand(3, 3), X[0:1].squeeze(0), X[:, :2].diagonal()
        X.mul_(2.0)
        c.add_(1.0)
        return a, b, c, d, e, g, h, k, s1, s2, q, ex, sq, dg, X
    converts(f, *INPUTS)


def test_reads_before_and_after_a_write_are_not_merged():
    def f(M):
        X = M.clone()
        Y = X[0]
        a, u = X.sum(), Y * 3
        Y.mul_(2.0)
        X.add_(1.0)
        b, w = X.sum(), Y * 3
        return a, b, u, w
    converts(f, *INPUTS)


def test_views_in_containers_and_detach_and_to():
    def f(M):
        X = M.clone()
        L, D = [X[0], X[1]], {"c": X[:, 0]}
        same, det = X.to(torch.float32), X.detach()
        L[0].mul_(3.0)
        det.add_(1.0)
        same.sub_(0.5)
        return L, D, X
    converts(f, *INPUTS)


# ------------------------------------------------------------------ tensor branches and loops
def test_views_written_in_tensor_branches():
    def f(M):
        X = M.clone()
        Y, C, V = X[0], X[:, 1], X.view(6)
        if M.sum() > 0:
            Y.mul_(2.0)
            X[1] = M[0] * 3
        else:
            C.add_(1.0)
            V[2] = 0.5
        return X, Y, C, V, Y + V[:3]
    converts(f, *INPUTS)


def test_views_written_in_tensor_loops():
    def f(M):
        X = M.clone()
        Y, C = X[0], X[:, 1]
        t = M[0] * 0
        i = 0
        while X.sum() < 30 and i < 5:
            Y.mul_(-1.0)
            X.add_(M)
            C.add_(1.0)
            t = t + Y + X.sum()
            i += 1
        return X, Y, C, t
    converts(f, *INPUTS)


def test_view_chosen_in_a_branch_then_base_written():
    def f(M):
        X = M.clone()
        if M.sum() > 0:
            Y = X[0]
        else:
            Y = X[1]
        X.add_(1.0)
        Y.mul_(2.0)
        return Y, X
    converts(f, *INPUTS)


def test_view_taken_each_iteration_of_a_row_loop():
    def f(M):
        X = M.clone()
        Y = X[0]
        for r in M:
            if r.sum() > 0:
                X.add_(r.sum())
            Y.mul_(0.5)
        i = 0
        while i < 2 and X.sum() < 1000:
            R = X[i]
            R.mul_(10.0)
            i += 1
        return X, Y
    converts(f, *INPUTS)


# ------------------------------------------------------------------ lists of views: fall back
D1, D2 = torch.tensor([3., 1., 7., 2.]), torch.tensor([9., 0., 4., 8.])


def test_view_appended_then_its_base_written_falls_back():
    def greedy(d):                  # eager: every taken element sees the later inf
        work = d.clone()
        taken = []
        while work.min() < 5:
            j = torch.argmin(work)
            taken.append(work[j])
            work[j] = float("inf")
        return taken, work
    falls_back(greedy, (D1,), (D2,), match="a tensor loop builds")


def test_write_before_append_in_the_same_body_falls_back():
    def f(d):                       # the next iteration's write reaches this one's element
        work = d.clone()
        taken = []
        i = 0
        while i < 3 and work.sum() > -1e9:
            work[i] = -1.0
            taken.append(work[i + 1])
            i += 1
        return taken, work
    falls_back(f, (D1,), (D2,), match="a tensor loop builds")


def test_appended_tensor_written_in_place_falls_back():
    def f(d):
        L = []
        h = d.clone()
        i = 0
        while i < 3 and h.sum() > -1e9:
            h = h * 2
            L.append(h)
            h += 1                  # eager: the list's element is h itself
            i += 1
        return L
    falls_back(f, (D1,), (D2,), match="a tensor loop builds")


def test_outer_view_appended_base_written_in_loop_falls_back():
    def f(M):
        X = M.clone()
        Y = X[0]
        L = []
        i = 0
        while i < 2 and X.sum() > -1e9:
            L.append(Y)
            X.add_(1.0)
            i += 1
        return L, X
    falls_back(f, *INPUTS, match="a tensor loop builds")


def test_element_read_from_grown_list_written_falls_back():
    def f(M):
        L = []
        for r in M:
            L.append(r)
        L[0].mul_(3.0)             # eager writes M's row: the argument changes
        return L
    falls_back(f, *INPUTS, match="a tensor loop builds")


def test_stack_of_grown_list_written_falls_back():
    def f(M):
        L = []
        for r in M:
            L.append(r * 2)
        S = torch.stack(L)
        S.add_(1.0)
        return L, S
    falls_back(f, *INPUTS, match="a tensor loop builds")


def test_fresh_tensor_each_iteration_written_then_appended_converts():
    def f(M):
        L = []
        i = 0
        while i < 2 and M.sum() > -1e9:
            X = M.clone()
            X[0] = 5.0 + i
            L.append(X[0])
            i += 1
        return L
    converts(f, *INPUTS)


def test_copies_appended_then_base_written_converts():
    def f(d):
        work = d.clone()
        taken = []
        i = 0
        while work.min() < 5 and i < 10:
            j = torch.argmin(work)
            taken.append(work[j].clone())
            work = torch.where(torch.arange(4) == j, torch.full_like(work, 99.0), work)
            i += 1
        return taken, work
    converts(f, (D1,), (D2,))


def test_python_list_of_views_zipped_with_rows_written_falls_back():
    def f(M):                       # a staged loop reads rows of a stacked copy of the list
        X = M.clone()
        for v, r in zip([X[0], X[1]], M):
            v.mul_(r.sum())
        return X
    falls_back(f, *INPUTS, match="list")


def test_view_leaving_a_branch_appended_then_base_written_falls_back():
    def f(M):
        X = M.clone()
        if M.sum() > 0:
            Y = X[0]
        else:
            Y = X[1]
        L = []
        i = 0
        while i < 2 and M.sum() > -1e9:
            L.append(Y)
            i += 1
        X.add_(1.0)
        return L, X
    falls_back(f, *INPUTS, match="a tensor loop builds")


def test_view_leaving_a_loop_appended_then_base_written_falls_back():
    def f(M):
        X = M.clone()
        Y = X[0]
        i = 0
        while i < 2 and X.sum() > -1e9:
            Y = X[i]
            i += 1
        L = []
        for r in M:
            L.append(Y)
        X.mul_(2.0)
        return L, X
    falls_back(f, *INPUTS, match="a tensor loop builds")
