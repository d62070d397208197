"""List comprehensions are converted: over a tensor they become a `while` node and a
list whose length is known at run time; over Python values they stay Python loops."""
import torch

from e2e_helpers import assert_same, op_counts
from transpiler import to_code, to_graph

M = torch.tensor([[1.0, 2.0], [-1.0, -2.0], [3.0, 4.0]])
M2 = torch.tensor([[-1.0, 2.0], [-1.0, -2.0], [-3.0, 4.0]])


def filtered_rows(x):
    return [r * 2 for r in x if r.sum() > 0]


def stacked_rows(x):
    return torch.stack([torch.tanh(r) if r.sum() > 0 else -r for r in x])


def python_product(x):
    pairs = [a * b for a in range(3) for b in (1, 10) if a != 1]
    return x * sum(pairs)


def nested(x):
    # outer over a Python tuple, inner over tensor rows (lists of lists whose inner
    # length is known only at run time are not supported: that falls back)
    return [[v * 2 for v in r if v > 0] for r in (x[0], x[1])]


def test_filtered_rows_have_run_time_length():
    g = to_graph(filtered_rows, strict=True)
    for x in (M, M2):
        got, want = g(x), filtered_rows(x)
        assert isinstance(got, list) and len(got) == len(want)
        for a, b in zip(got, want):
            assert_same(a, b)
    assert op_counts(g.graph(M))["while"] == 1


def test_comprehension_with_ternary_stacks():
    g = to_graph(stacked_rows, strict=True)
    for x in (M, M2):
        assert_same(g(x), stacked_rows(x))


def test_python_comprehension_stays_python():
    g = to_graph(python_product, strict=True)
    assert_same(g(M), python_product(M))
    assert op_counts(g.graph(M))["while"] == 0 and op_counts(g.graph(M))["cond"] == 0


def test_nested_comprehensions():
    g = to_graph(nested, strict=True)
    for x in (M, M2):
        got, want = g(x), nested(x)
        assert len(got) == len(want)
        for a, b in zip(got, want):
            assert len(a) == len(b)
            for u, v in zip(a, b):
                assert_same(u, v)


def test_to_code_shows_a_loop():
    code = to_code(filtered_rows)
    assert "def listcomp" in code and "tg.for_stmt" in code and "[r * 2" not in code
