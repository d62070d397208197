"""Effects a trace could not undo, on state from outside the call, refused before they run.

``next()`` of the caller's generator, a ``for`` over it, ``zip``/``islice``/``sum`` given
it, a file read or write, ``random.random()``: a graph cannot repeat these, so the call
falls back; and the fallback must be decided before the trace advances anything, or the
eager re-run would take the next batch (``runtime/operators/outside_iterators.py``).

Each case is built twice: one copy runs eagerly, the other through ``to_graph`` (default
and strict: on ConversionError the test runs the function eagerly, as a user would), on
3+ calls. Compared after every call: results, printed text; at the end, what the iterator
yields next (or the file, the ``random`` state) and the program's state.
Iterators the call makes itself (``iter(list)``, ``model.parameters()``, a generator
expression, ``itertools.count`` made in the call) still convert.
"""
from __future__ import annotations

import contextlib
import io
import itertools
import random
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from e2e_helpers import assert_same
from transpiler import ConversionError, FallbackWarning, to_graph

THIS_FILE = __file__.rsplit("/", 1)[-1]
X = [torch.tensor([1.0, -2.0]), torch.tensor([0.5, 3.0]), torch.tensor([-1.0, 4.0]),
     torch.tensor([2.0, 2.0])]


def _drawn(it, n=3):
    """The next ``n`` items (fewer where it ends), as plain values."""
    out = []
    for _ in range(n):
        try:
            v = next(it)
        except StopIteration:
            out.append("<end>")
            break
        out.append(v.tolist() if isinstance(v, torch.Tensor) else v)
    return out


def _run(build, how):
    """(results, printed text per call, FallbackWarnings, ConversionErrors, the state after)
    of one fresh copy of the case run ``how``: "eager", "default" or "strict"."""
    fn, inputs, after = build()
    g = fn if how == "eager" else to_graph(fn, strict=how == "strict")
    results, texts, warned, refused = [], [], [], []
    for args in inputs:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            try:
                results.append(g(*args))
            except ConversionError as e:
                refused.append(str(e))
                results.append(fn(*args))       # (what the user would do: run it eagerly)
        texts.append(buf.getvalue())
        warned += [str(m.message) for m in w if issubclass(m.category, FallbackWarning)]
    return results, texts, warned, refused, after()


def check(build, text, strict):
    """The converted copy equals eager call by call; the first call falls back (strict:
    refuses) naming this file's line holding ``text``, or converts where ``text`` is None."""
    exp = _run(build, "eager")
    got = _run(build, "strict" if strict else "default")
    for i, (a, b) in enumerate(zip(got[0], exp[0])):
        assert_same(a, b, f"call {i}")
    assert got[1] == exp[1], "printed text differs"
    assert_same(got[4], exp[4], "state after the calls")
    messages = got[3] if strict else got[2]
    if text is None:
        assert not got[2] and not got[3], (got[2] + got[3])[0]
        return
    assert messages, "expected a fallback"
    _names_line(messages[0], text)


def _names_line(message, text):
    marker = THIS_FILE + ":"
    assert marker in message, f"the message does not name {THIS_FILE}: {message}"
    line = int(message.split(marker, 1)[1].split(":", 1)[0].split()[0])
    with open(__file__) as f:
        source = f.read().splitlines()[line - 1]
    assert text in source, f"named line {line} is {source.strip()!r}, not {text!r}"


# ------------------------------------------------------------------ the caller's iterators
def infinite(items):
    while True:
        yield from items


def noisy(items):
    for i, v in enumerate(items):
        print("loading batch", i)
        yield v


GLOBAL_DATA = None


def c_generator_global():
    global GLOBAL_DATA
    GLOBAL_DATA = infinite([1.0, 2.0, 3.0])

    def step(x):
        return x * next(GLOBAL_DATA)
    return step, [(x,) for x in X], lambda: _drawn(GLOBAL_DATA)


def c_generator_closure_prints():
    data = noisy([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])

    def step(x):
        v = next(data)
        return x + v
    return step, [(x,) for x in X], lambda: _drawn(data)


def c_generator_argument():
    data = infinite([3.0, 1.0])

    def step(x, batches):
        return x - next(batches)
    return step, [(x, data) for x in X], lambda: _drawn(data)


class Holder:
    def __init__(self, it):
        self.batches = it


def c_generator_attribute():
    holder = Holder(infinite([2.0, 5.0, 7.0]))

    def step(x):
        return x * next(holder.batches)
    return step, [(x,) for x in X], lambda: _drawn(holder.batches)


def c_generator_handed_back_by_get():
    loaders = {"train": infinite([1.0, 2.0, 3.0])}

    def step(x):
        return x + next(loaders.get("train"))
    return step, [(x,) for x in X], lambda: _drawn(loaders["train"])


def c_list_iterator():
    it = iter([4.0, 3.0, 2.0, 1.0, 0.0, -1.0])

    def step(x):
        return x * next(it)
    return step, [(x,) for x in X], lambda: _drawn(it)


def c_dict_items_iterator():
    items = iter({"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0, "e": 5.0, "f": 6.0}.items())

    def step(x):
        k, v = next(items)
        return x * v, k
    return step, [(x,) for x in X], lambda: _drawn(items)


def c_zip_object():
    pairs = zip([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], "abcdef")

    def step(x):
        v, k = next(pairs)
        return x + v, k
    return step, [(x,) for x in X], lambda: _drawn(pairs)


def c_enumerate_object():
    numbered = enumerate(infinite([0.5, 1.5]))

    def step(x):
        i, v = next(numbered)
        return x * v + i
    return step, [(x,) for x in X], lambda: _drawn(numbered)


def c_map_object():
    scaled = map(lambda v: v * 10, infinite([1.0, 2.0, 3.0]))

    def step(x):
        return x + next(scaled)
    return step, [(x,) for x in X], lambda: _drawn(scaled)


def c_itertools_count():
    counter = itertools.count(1)

    def step(x):
        it = next(counter)
        return x * min(1.0, it / 4)
    return step, [(x,) for x in X], lambda: _drawn(counter)


def c_itertools_cycle():
    lrs = itertools.cycle([0.1, 0.01, 0.001])

    def step(x):
        return x * next(lrs)
    return step, [(x,) for x in X], lambda: _drawn(lrs)


def c_islice_of_the_callers():
    data = infinite([1.0, 2.0, 3.0, 4.0, 5.0])

    def step(x):
        return x * sum(itertools.islice(data, 2))
    return step, [(x,) for x in X], lambda: _drawn(data)


def c_islice_object():
    first = itertools.islice(noisy([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]), 5)

    def step(x):
        return x + next(first)
    return step, [(x,) for x in X], lambda: _drawn(first)


def c_for_over_generator():
    data = noisy([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0])

    def step(x):
        for _, v in zip(range(2), data):
            x = x + v
        return x
    return step, [(x,) for x in X], lambda: _drawn(data)


def c_for_loop_on_it():
    data = itertools.islice(infinite([1.0, 2.0, 3.0]), 0, None)

    def step(x):
        for v in data:
            x = x * v
            if v > 2:
                break
        return x
    return step, [(x,) for x in X[:3]], lambda: _drawn(data)


def c_sum_of_generator_expression():
    data = infinite([1.0, 2.0, 3.0, 4.0])

    def step(x):
        return x * sum(v for _, v in zip(range(2), data))
    return step, [(x,) for x in X], lambda: _drawn(data)


def c_generator_expression_over_it():
    data = infinite([1.0, 2.0, 3.0, 4.0])

    def step(x):
        return x * next(v * 2 for v in data)
    return step, [(x,) for x in X], lambda: _drawn(data)


def c_dict_comprehension_next():
    data = noisy([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0])

    def step(x):
        batch = {k: next(data) for k in ("a", "b")}
        return x * batch["a"] + batch["b"]
    return step, [(x,) for x in X], lambda: _drawn(data)


def c_set_comprehension_over_it():
    pairs = zip(itertools.count(1), "abcdefghij")

    def step(x):
        seen = {k for _, k in pairs if k < "c"}
        return x * len(seen)
    return step, [(x,) for x in X[:2]], lambda: _drawn(pairs)


def c_any_of_the_callers_generator():
    flags = noisy([0.0, 1.0, 0.0, 0.0, 2.0, 0.0, 3.0, 0.0, 0.0, 4.0])

    def step(x):
        return x * any(flags)
    return step, [(x,) for x in X], lambda: _drawn(flags)


def c_zip_of_a_tensor_and_the_callers():
    data = infinite([1.0, 2.0, 3.0])

    def step(x):
        total = x.sum() * 0
        for row, v in zip(x, data):
            total = total + row * v
        return total
    return step, [(x,) for x in X], lambda: _drawn(data)


class Jitter(nn.Module):
    """A module drawing its offsets from a generator it holds."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2, 2)
        self.offsets = noisy([0.1 * i for i in range(10)])

    def forward(self, x):
        return self.lin(x) + next(self.offsets)


def c_module_attribute():
    torch.manual_seed(0)
    m = Jitter()
    return m, [(x,) for x in X], lambda: _drawn(m.offsets)


class BatchIter:
    """An ``iter(dataloader)``-like object: ``__next__`` in Python, a shuffled order from
    a generator it holds."""

    def __init__(self, data, seed):
        self.data = data
        self.order = iter(torch.randperm(len(data), generator=torch.Generator().manual_seed(
            seed)).tolist())
        self.taken = 0

    def __iter__(self):
        return self

    def __next__(self):
        self.taken += 1
        return self.data[next(self.order)]


def c_python_iterator_object():
    batches = BatchIter([torch.full((2,), float(i)) for i in range(6)], 0)

    def step(x):
        return x + next(batches)
    return step, [(x,) for x in X], lambda: (_drawn(batches), batches.taken)


def c_dataloader_iterator_training():
    torch.manual_seed(0)
    model = nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ds = torch.utils.data.TensorDataset(torch.arange(16.0).view(8, 2) / 8, torch.ones(8, 1))
    batches = iter(torch.utils.data.DataLoader(ds, batch_size=2, shuffle=True,
                                               generator=torch.Generator().manual_seed(1)))

    def step():
        return sgd_step(model, opt, next(batches))
    return step, [() for _ in range(3)], \
        lambda: ([p.detach().clone() for p in model.parameters()], _drawn(batches, 1))


def sgd_step(model, opt, batch):
    loss = F.mse_loss(model(batch[0]), batch[1])
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss


def c_file_readline():
    f = open(_lines_file())

    def step(x):
        return x * float(f.readline())
    return step, [(x,) for x in X], lambda: _closed(f, f.readline())


def c_file_write():
    path = _lines_file()
    f = open(path, "w")

    def step(x):
        f.write("step\n")
        return x * 2
    return step, [(x,) for x in X], lambda: (f.close(), open(path).read())[1]


def _closed(f, value):
    f.close()
    return value


def _lines_file():
    import tempfile
    f = tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False)
    f.write("".join(f"{i * 0.5}\n" for i in range(1, 10)))
    f.close()
    return f.name


def c_random_random():
    random.seed(3)

    def step(x):
        return x * random.random()
    return step, [(x,) for x in X], lambda: random.getstate()


def c_numpy_random():
    np.random.seed(5)

    def step(x):
        return x + float(np.random.rand())
    return step, [(x,) for x in X], lambda: np.random.rand()


FALLS_BACK = {
    c_generator_global: "return x * next(GLOBAL_DATA)",
    c_generator_closure_prints: "v = next(data)",
    c_generator_argument: "return x - next(batches)",
    c_generator_attribute: "return x * next(holder.batches)",
    c_generator_handed_back_by_get: 'next(loaders.get("train"))',
    c_list_iterator: "return x * next(it)",
    c_dict_items_iterator: "k, v = next(items)",
    c_zip_object: "v, k = next(pairs)",
    c_enumerate_object: "i, v = next(numbered)",
    c_map_object: "return x + next(scaled)",
    c_itertools_count: "it = next(counter)",
    c_itertools_cycle: "return x * next(lrs)",
    c_islice_of_the_callers: "itertools.islice(data, 2)",
    c_islice_object: "return x + next(first)",
    c_for_over_generator: "for _, v in zip(range(2), data):",
    c_for_loop_on_it: "for v in data:",
    c_sum_of_generator_expression: "sum(v for _, v in zip(range(2), data))",
    c_generator_expression_over_it: "return x * next(v * 2 for v in data)",
    c_module_attribute: "return self.lin(x) + next(self.offsets)",
    c_any_of_the_callers_generator: "return x * any(flags)",
    c_zip_of_a_tensor_and_the_callers: "for row, v in zip(x, data):",
    c_dict_comprehension_next: 'batch = {k: next(data) for k in ("a", "b")}',
    c_set_comprehension_over_it: 'seen = {k for _, k in pairs if k < "c"}',
    c_python_iterator_object: "return x + next(batches)",
    c_dataloader_iterator_training: "return sgd_step(model, opt, next(batches))",
    c_file_readline: "float(f.readline())",
    c_file_write: 'f.write("step\\n")',
    c_random_random: "random.random()",
    c_numpy_random: "np.random.rand()",
}


@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict"])
@pytest.mark.parametrize("build", list(FALLS_BACK), ids=[b.__name__[2:] for b in FALLS_BACK])
def test_refused_before_it_runs(build, strict):
    check(build, FALLS_BACK[build], strict)


# ---------------------------------------------------------- iterators the call makes
XS = [1.0, 2.0, 3.0]


def c_iter_of_a_global_list():
    def step(x):
        it = iter(XS)
        return x * next(it) + next(it)
    return step, [(x,) for x in X], lambda: list(XS)


def c_first_parameter():
    torch.manual_seed(0)
    model = nn.Linear(2, 2)

    def step(x):
        w = next(model.parameters())
        return model(x) + w.sum()
    return step, [(x,) for x in X], lambda: [p.detach().clone() for p in model.parameters()]


def c_generator_expression_over_a_list():
    def step(x):
        g = (v * 2 for v in XS)
        return x * next(g) + sum(g)
    return step, [(x,) for x in X], lambda: list(XS)


def c_count_made_in_the_call():
    def step(x):
        c = itertools.count(3)
        for _, v in zip(range(2), c):
            x = x * v
        return x + next(c)
    return step, [(x,) for x in X], lambda: None


def c_zip_and_map_made_in_the_call():
    def step(x):
        pairs = zip(map(lambda v: v + 1, XS), itertools.cycle([1.0, -1.0]))
        for a, s in pairs:
            x = x + a * s
        return x
    return step, [(x,) for x in X], lambda: None


def c_comprehensions_made_in_the_call():
    def step(x):
        scaled = {k: x * v for k, v in zip("abc", XS)}
        firsts = {int(v) for v in iter(XS) if v < 3}
        return scaled["c"] - sum(v for v in map(float, XS)) * len(firsts)
    return step, [(x,) for x in X], lambda: list(XS)


CONVERTS = [c_iter_of_a_global_list, c_first_parameter, c_generator_expression_over_a_list,
            c_count_made_in_the_call, c_zip_and_map_made_in_the_call,
            c_comprehensions_made_in_the_call]


@pytest.mark.parametrize("build", CONVERTS, ids=[b.__name__[2:] for b in CONVERTS])
def test_made_in_the_call_converts(build):
    check(build, None, strict=False)
