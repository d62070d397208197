"""``converters/subscripts.py``: an item read by a computed index becomes ``tg.getitem``;
constant indices, slices, tuples, stores and deletes stay as written. On Python values the
converted function reads, writes and raises as the original (``fake_tg.getitem`` is
``obj[index]``)."""
import pytest

from tests.transpiler import fake_tg
from transpiler import conversion


def reads(xs, i, d, k):
    a = xs[i]
    b = xs[i + 1] + xs[-1] + xs[0]
    c = d[k] + d[xs[0]]
    e = xs[1:][-i]
    xs[i] = a * 2
    del xs[-1]
    return a, b, c, e, xs[:i], [xs[j] for j in range(i)]


def test_computed_indices_become_getitem():
    source = conversion.to_source(reads)
    for text in ("tg.getitem(xs, i)", "tg.getitem(xs, (i + 1))", "tg.getitem(d, k)",
                 "tg.getitem(d, xs[0])", "xs[(- 1)]", "xs[0]", "xs[:i]", "xs[i] = "):
        assert text in source, (text, source)
    assert "tg.getitem(xs, j)" in source            # (a comprehension's element too)
    assert "del xs[(- 1)]" in source


@pytest.mark.parametrize("xs, i, d, k", [([1, 2, 3, 4], 1, {"a": 1, 1: 2}, "a"),
                                         ([5.0, 6.0, 7.0], 0, {"b": 3, 5.0: 4}, "b")])
def test_same_results_on_python_values(xs, i, d, k):
    fake_tg.calls.clear()
    got = fake_tg.convert(reads)(list(xs), i, dict(d), k)
    assert got == reads(list(xs), i, dict(d), k)
    assert fake_tg.calls["getitem"] >= 4


def test_the_error_is_eagers():
    with pytest.raises(IndexError, match="list index out of range"):
        fake_tg.convert(reads)([1], 3, {}, "a")
    with pytest.raises(KeyError):
        fake_tg.convert(reads)([1, 2, 3], 0, {}, "a")
