"""A list whose length is known only when the graph runs raises eager's error where it is
empty: ``pop()`` (``IndexError: pop from empty list``), ``torch.stack`` (``RuntimeError``)
and ``torch.cat`` (``ValueError``) of it, checked when the graph runs
(``TensorList.nonempty``); they gave ``[]`` or an empty tensor, silently."""
import pytest
import torch

from transpiler import to_graph


def pop_n(n):
    items = [torch.tensor(1), torch.tensor(2)]
    for _ in range(n):
        items.pop()
    return items


def stack_after_pops(n):
    items = [torch.tensor(1.0), torch.tensor(2.0)]
    for _ in range(n):
        items.pop()
    return torch.stack(items)


def cat_grown(n):
    items = []
    for i in range(n):
        items.append(torch.ones(2) * i)
    return torch.cat(items)


def _outcome(fn, n):
    try:
        return fn(n), None
    except Exception as e:      # noqa: BLE001 - compared with eager's
        return None, (type(e), str(e))


@pytest.mark.parametrize("fn", [pop_n, stack_after_pops, cat_grown], ids=lambda f: f.__name__)
def test_empty_lists_raise_as_eager(fn):
    converted = to_graph(fn, strict=True)
    errors = 0
    for n in [3, 1, 2, 0, 3]:
        want, want_error = _outcome(fn, torch.tensor(n))
        got, got_error = _outcome(converted, torch.tensor(n))
        assert got_error == want_error, n
        errors += want_error is not None
        if want_error is None:
            if isinstance(want, list):
                assert len(got) == len(want) and all(torch.equal(a, b) for a, b in zip(got, want))
            else:
                torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert errors
