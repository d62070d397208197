"""A list or tuple of Python numbers read at an index the graph knows only when it runs
(``runtime/operators/item_reads.py``, ``transpiler/converters/subscripts.py``), and the
elements of a list built in a tensor loop (``runtime/tensor_list.py``): the number eager
reads, of its type (an ``int`` stays an ``int``), ``IndexError("list index out of
range")`` where eager raises it, and a fallback naming the line where the element's type
would depend on the index. Each program runs eagerly and converted (strict where it
converts), on several inputs."""
import warnings

import pytest
import torch

from transpiler import ConversionError, FallbackWarning, to_graph


def backtrack(scores):
    """BiLSTM-CRF's Viterbi back-tracking: lists of ``.item()`` ints read by an int."""
    backpointers = []
    for step in scores:                     # (a static length: unrolled)
        backpointers.append([step[tag].argmax().item() for tag in range(step.shape[0])])
    best = scores[-1].sum(1).argmax().item()
    path = [best]
    for bptrs in reversed(backpointers):
        best = bptrs[best]
        path.append(best)
    return path


def float_tuple(x):
    scales = (0.5, 2.0, x[0].max().item())
    return x * scales[x.argmin().item() % 3]


def bool_flags(x):
    flags = [True, False, bool(x[0].sum() > 0)]
    if flags[int(x.argmax()) % 3]:
        return x + 1
    return x - 1


def negative_index(x):
    values = [1, 2, 3]
    return x + values[x.argmax().item() % 3 - 3]


def index_by_tensor(x):
    values = [10, 20, 30, 40]
    return values[x.argmax()]               # (a 0-d int64 tensor: eager's __index__)


def out_of_range(x):
    values = [1, 2]
    return x + values[x.argmax().item()]


def grown_in_tensor_loop(x):
    ids = [row.argmax().item() for row in x]     # (a loop over a tensor's rows)
    j = x.sum(0).argmax().item() % len(ids)
    return ids[j], ids[0], ids[-1], ids


CONVERTS = {
    backtrack: [torch.randn(4, 5, 5), torch.randn(1, 5, 5), torch.randn(6, 5, 5)],
    float_tuple: [torch.randn(3, 4), torch.randn(3, 4) + 2, torch.randn(5, 2)],
    bool_flags: [torch.randn(3, 4), -torch.ones(3, 4), torch.randn(5, 2)],
    negative_index: [torch.randn(3, 4), torch.randn(2), torch.randn(5, 2)],
    index_by_tensor: [torch.randn(4), torch.randn(2), torch.randn(3)],
    out_of_range: [torch.randn(3), torch.tensor([0.0, 1.0]), torch.tensor([2.0, 1.0])],
    grown_in_tensor_loop: [torch.randn(3, 4), torch.randn(5, 2), torch.randn(1, 3)],
}


def _outcome(fn, x):
    try:
        return fn(x), None
    except IndexError as e:
        return None, e


def _same(got, want):
    assert type(got) is type(want), (got, want)
    if isinstance(want, (list, tuple)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w)
    elif isinstance(want, torch.Tensor):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    else:
        assert got == want


@pytest.mark.parametrize("fn", list(CONVERTS), ids=lambda f: f.__name__)
def test_converts_and_reads_as_eager(fn):
    converted = to_graph(fn, strict=True)
    for x in CONVERTS[fn]:
        want, error = _outcome(fn, x)
        with warnings.catch_warnings():
            warnings.simplefilter("error", FallbackWarning)
            got, got_error = _outcome(converted, x)
        if error is not None:
            assert got_error is not None and str(got_error) == str(error)
        else:
            assert got_error is None, got_error
            _same(got, want)


def test_out_of_range_raises_where_eager_does():
    converted = to_graph(out_of_range, strict=True)
    with pytest.raises(IndexError, match="list index out of range"):
        converted(torch.tensor([0.0, 0.0, 5.0]))
    torch.testing.assert_close(converted(torch.tensor([1.0, 0.0])), torch.tensor([2.0, 1.0]))


def mixed_kinds(x):
    values = [1, 2.5]
    return x * values[x.argmax().item() % 2]


def tensor_items(x):
    rows = [x[0], x[1]]
    return rows[x.sum(0).argmax().item() % 2]


def grown_mixed(x):
    items = []
    for row in x:
        items.append(row.argmax().item())
        items.append(row.max())
    return items[x.sum().argmax().item()]


@pytest.mark.parametrize("fn, line", [(mixed_kinds, "values[x.argmax().item() % 2]"),
                                      (tensor_items, "rows[x.sum(0).argmax().item() % 2]"),
                                      (grown_mixed, "items.append(row.max())")],
                         ids=lambda v: getattr(v, "__name__", ""))
def test_an_item_whose_type_depends_on_the_index_falls_back(fn, line):
    converted = to_graph(fn)
    x = torch.randn(3, 4)
    with pytest.warns(FallbackWarning) as seen:
        got = converted(x)
    _same(got, fn(x))
    import linecache
    message = str(seen[0].message)
    where = message.split(": ")[0]
    file, lineno = where.rsplit(":", 1)
    assert line in linecache.getline(file, int(lineno))
    with pytest.raises(ConversionError):
        to_graph(fn, strict=True)(x)


def test_python_values_read_as_written():
    def pick(values, i):
        return values[i] * 2
    converted = to_graph(pick)
    for values, i in [([1, 2, 3], 1), ((0.5, 1.5), -1), ([True, False], 0)]:
        assert converted(values, i) == pick(values, i)
        assert type(converted(values, i)) is type(pick(values, i))
