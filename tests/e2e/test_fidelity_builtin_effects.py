"""Python effects on objects that keep their state outside a ``__dict__``, in tensor regions.

A tensor ``if`` traces both branches and a tensor loop its body once, so an effect there
must be carried per path and iteration or the call must fall back (default: eager and one
FallbackWarning; strict: ConversionError). The effect watch sees iterators (list, range,
dict iterators, ``enumerate``/``zip`` over them), generators, ``itertools.count``, sets,
``deque``, ``array``, numpy arrays, ``StringIO``/``BytesIO`` and ``__slots__`` objects,
reached as a region's state, through a closure, a nested function, an attribute or a
global: changed in a region, they fall back; so does a method called in a region on a C
object whose state is not known (a hash's ``update``). ``sys.stdout.write``,
``sys.stderr.write``, ``warnings.warn`` and ``logger.info`` and its kin become graph nodes
(like ``print``): they act on every call that takes their path, as eager does. Regions
that only read such objects still convert.
"""
from __future__ import annotations

import array
import collections
import io
import itertools
import logging
import re
import sys
import warnings

import numpy as np
import pytest
import torch

from transpiler import ConversionError, FallbackWarning, to_graph

from e2e_helpers import _clone, assert_same
from fidelity_checks import converts, falls_back

POS, NEG = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([-1.0, -2.0, -3.0])
BIG = torch.tensor([8.0, 8.0, 8.0])
PATHS = [(POS,), (NEG,), (POS,)]


# ============================================================ effects that must fall back
def next_list_iterator_untaken(x):
    it = iter([1, 2, 3])
    if x.sum() > 0:
        next(it)
    return x * next(it)


def next_range_iterator_else(x):
    it = iter(range(10))
    if x.sum() > 0:
        y = x + 1
    else:
        y = x * next(it)
    return y, next(it)


def next_dict_iterator(x):
    it = iter({"a": 1, "b": 2})
    if x.sum() > 0:
        next(it)
    return x, next(it)


def next_through_enumerate(x):
    inner = iter([5, 6, 7])
    e = enumerate(inner)
    if x.sum() > 0:
        next(inner)
    return x, next(e)


def next_generator_expression(x):
    gen = (i * 2 for i in range(5))
    if x.sum() > 0:
        next(gen)
    return x * next(gen)


def _numbers():
    yield 1
    yield 2
    yield 3


def next_generator_function(x):
    gen = _numbers()
    if x.sum() > 0:
        next(gen)
    return x * next(gen)


def count_in_while(x):
    c = itertools.count()
    while x.sum() > 1:
        x = x / 2
        next(c)
    return x, next(c)


def count_in_branch(x):
    c = itertools.count(5)
    if x.sum() > 0:
        next(c)
    return x, next(c)


def iterator_by_nested_helper(x):
    it = iter([10, 20, 30])

    def take():
        return next(it)
    if x.sum() > 0:
        y = x + take()
    else:
        y = x
    return y, next(it)


def set_add_both(x):
    s = set()
    if x.sum() > 0:
        s.add("p")
    else:
        s.add("n")
    return sorted(s)


def set_discard_one(x):
    s = {1, 2, 3}
    if x.sum() > 0:
        s.discard(2)
    return x, sorted(s)


def set_through_closure(x):
    seen = set()

    def note(v):
        seen.add(v)
    if x.sum() > 0:
        note("pos")
    return x, sorted(seen)


def set_add_in_while(x):
    s = set()
    while x.sum() > 1:
        x = x / 2
        s.add(len(s))
    return x, len(s)


class Tracker:
    def __init__(self):
        self.seen = set()
        self.buf = io.StringIO()


def set_on_attribute(x):
    t = Tracker()
    if x.sum() > 0:
        t.seen.add("pos")
    return x, sorted(t.seen)


def stringio_both(x):
    buf = io.StringIO()
    if x.sum() > 0:
        buf.write("pos")
    else:
        buf.write("neg")
    return x, buf.getvalue()


def stringio_on_attribute_in_while(x):
    t = Tracker()
    while x.sum() > 1:
        x = x / 2
        t.buf.write("|")
    return x, t.buf.getvalue()


def bytesio_untaken(x):
    buf = io.BytesIO()
    if x.sum() > 0:
        buf.write(b"abc")
    return x, buf.getvalue()


def deque_rotate(x):
    d = collections.deque([1, 2, 3])
    if x.sum() > 0:
        d.rotate(1)
    return x, list(d)


def array_append(x):
    a = array.array("i", [1])
    if x.sum() > 0:
        a.append(2)
    return x, a.tolist()


def numpy_item_untaken(x):
    a = np.zeros(2)
    if x.sum() > 0:
        a[0] += 1
    return x, float(a[0])


def numpy_fill_by_helper(x):
    a = np.zeros(3)

    def fill():
        a.fill(2.0)
    if x.sum() > 0:
        fill()
    return x, float(a.sum())


def numpy_in_while(x):
    a = np.zeros(1)
    while x.sum() > 1:
        x = x / 2
        a += 1
    return x, float(a[0])


class Slotted:
    __slots__ = ("n",)

    def __init__(self):
        self.n = 0

    def bump(self):
        self.n += 1


def slots_by_method(x):
    s = Slotted()
    if x.sum() > 0:
        s.bump()
    return x, s.n


def hash_update_untaken(x):
    import hashlib
    h = hashlib.sha256()
    if x.sum() > 0:
        h.update(b"pos")
    return x, h.hexdigest()


def hash_update_in_while_by_helper(x):
    import hashlib
    h = hashlib.md5()

    def note():
        h.update(b".")
    while x.sum() > 1:
        x = x / 2
        note()
    return x, h.hexdigest()


FALLBACKS = [hash_update_untaken, hash_update_in_while_by_helper, next_list_iterator_untaken,
             next_range_iterator_else, next_dict_iterator,
             next_through_enumerate, next_generator_expression, next_generator_function,
             count_in_while, count_in_branch, iterator_by_nested_helper, set_add_both,
             set_discard_one, set_through_closure, set_add_in_while, set_on_attribute,
             stringio_both, stringio_on_attribute_in_while, bytesio_untaken, deque_rotate,
             array_append, numpy_item_untaken, numpy_fill_by_helper, numpy_in_while,
             slots_by_method]


@pytest.mark.parametrize("fn", FALLBACKS, ids=[f.__name__ for f in FALLBACKS])
def test_effect_in_region_falls_back(fn):
    falls_back(fn, (POS,), (NEG,), (BIG,), (POS,))


# ---------------------------------------------------------------- state the caller holds
GLOBAL_IT = None
GLOBAL_ARRAY = np.zeros(2)


def next_global_iterator_in_branch(x):
    if x.sum() > 0:
        x = x * next(GLOBAL_IT)
    return x


def next_global_iterator_top(x):
    return x * next(GLOBAL_IT)


def global_array_in_branch(x):
    if x.sum() > 0:
        GLOBAL_ARRAY[0] += 1
    return x


def next_argument_iterator(x, it):
    if x.sum() > 0:
        x = x + next(it)
    return x


@pytest.mark.parametrize("fn", [next_global_iterator_in_branch, next_global_iterator_top])
@pytest.mark.parametrize("strict", [False, True])
def test_global_iterator_consumed_as_eager(fn, strict):
    """The caller's iterator: consumed exactly as eager does, call after call (the trace's
    consumption is put back before the fallback runs eagerly)."""
    global GLOBAL_IT
    g = to_graph(fn, strict=strict)
    expected_it, GLOBAL_IT = iter(range(1, 100)), iter(range(1, 100))
    for x in (POS, NEG, POS, POS):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FallbackWarning)
            saved, before = GLOBAL_IT, expected_it.__reduce__()
            GLOBAL_IT = expected_it
            exp = fn(x)
            GLOBAL_IT = saved
            try:
                got = g(x)
            except ConversionError:
                assert strict
                assert GLOBAL_IT.__reduce__() == before, "the refused trace consumed it"
                return
        assert not strict, "strict mode converted a call that consumes a global iterator"
        assert_same(got, exp)
        assert next(GLOBAL_IT) == next(expected_it)


@pytest.mark.parametrize("strict", [False, True])
def test_global_array_changed_as_eager(strict):
    g = to_graph(global_array_in_branch, strict=strict)
    for x in (NEG, POS, POS, NEG):
        before = GLOBAL_ARRAY.copy()
        exp_x = global_array_in_branch(x)
        expected = GLOBAL_ARRAY.copy()
        GLOBAL_ARRAY[:] = before
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FallbackWarning)
            try:
                got = g(x)
            except ConversionError:
                assert strict
                assert (GLOBAL_ARRAY == before).all(), "the refused trace left its effect"
                return
        assert not strict
        assert_same(got, exp_x)
        assert (GLOBAL_ARRAY == expected).all(), (GLOBAL_ARRAY, expected)


def test_argument_iterator_consumed_as_eager():
    for strict in (False, True):
        g = to_graph(next_argument_iterator, strict=strict)
        for x in (POS, NEG, POS):
            it_e, it_g = iter([1, 2, 3]), iter([1, 2, 3])
            exp = next_argument_iterator(x, it_e)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FallbackWarning)
                try:
                    got = g(x, it_g)
                except ConversionError:
                    assert strict
                    break
            assert_same(got, exp)
            assert list(it_g) == list(it_e)


# ============================================================ reading only: still converts
def read_set_in_branch(x):
    s = {"a", "b"}
    if x.sum() > 0:
        y = x * len(s)
    else:
        y = x - int("a" in s)
    return y


def read_numpy_in_branch(x):
    a = np.array([2.0, 3.0])
    if x.sum() > 0:
        y = x * float(a[1])
    else:
        y = x + float(a.sum())
    return y


def untouched_iterator_and_generator(x):
    it = iter([4, 5])
    gen = (i for i in range(3))
    while x.sum() > 1:
        x = x / 2
    return x, next(it), next(gen)


def stringio_outside_region(x):
    buf = io.StringIO()
    buf.write("start")
    if x.sum() > 0:
        x = x + 1
    return x, buf.getvalue()


def slots_read_in_branch(x):
    s = Slotted()
    s.bump()
    if x.sum() > 0:
        x = x + s.n
    return x


PATTERN = re.compile("a+")


def pattern_match_in_branch(x):
    if x.sum() > 0:
        x = x + len(PATTERN.match("aaa").group(0))
    return x


READERS = [pattern_match_in_branch, read_set_in_branch, read_numpy_in_branch,
           untouched_iterator_and_generator,
           stringio_outside_region, slots_read_in_branch]


@pytest.mark.parametrize("fn", READERS, ids=[f.__name__ for f in READERS])
def test_reading_converts(fn):
    converts(fn, (POS,), (NEG,), (BIG,))


# ============================================================ staged: sys.stdout / stderr
def stdout_both(x):
    if x.sum() > 0:
        sys.stdout.write("pos\n")
    else:
        sys.stdout.write("neg\n")
    return x


def stderr_in_while(x):
    while x.sum() > 1:
        x = x / 2
        sys.stderr.write(".")
    return x


def stdout_top_and_helper(x):
    sys.stdout.write("start\n")

    def say(text):
        return sys.stdout.write(text)
    if x.sum() > 0:
        n = say("taken\n")
        x = x + n
    return x


def stdout_writelines_in_branch(x):
    if x.sum() > 0:
        sys.stdout.writelines(["a", "b\n"])
    else:
        sys.stderr.writelines(("c\n",))
    return x


def stdout_fstring_of_tensor(x):
    if x.sum() > 0:
        sys.stdout.write(f"sum {x.sum()}\n")
    return x


def _captured(capsys, fn, *args):
    out = fn(*args)
    text = capsys.readouterr()
    return out, text.out, text.err


@pytest.mark.parametrize("fn", [stdout_both, stderr_in_while, stdout_top_and_helper,
                                stdout_writelines_in_branch])
@pytest.mark.parametrize("strict", [False, True])
def test_stream_writes_on_every_call(capsys, fn, strict):
    g = to_graph(fn, strict=strict)
    for x in (POS, NEG, BIG, POS, NEG):
        exp, exp_out, exp_err = _captured(capsys, fn, x.clone())
        with warnings.catch_warnings():
            warnings.simplefilter("error", FallbackWarning)
            got, out, err = _captured(capsys, g, x.clone())
        assert_same(got, exp)
        assert (out, err) == (exp_out, exp_err)


def test_stream_write_of_run_time_text_falls_back(capsys):
    """The length ``write`` returns is known only when the graph runs: fall back."""
    g = to_graph(stdout_fstring_of_tensor)
    for x in (POS, NEG, POS):
        exp, exp_out, _ = _captured(capsys, stdout_fstring_of_tensor, x)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            got, out, _ = _captured(capsys, g, x)
        assert_same(got, exp)
        assert out == exp_out
    with pytest.raises(ConversionError, match="sys.stdout.write"):
        to_graph(stdout_fstring_of_tensor, strict=True)(POS)


# ============================================================ staged: warnings.warn
def warn_in_branch(x):
    if (x < 0).any():
        warnings.warn("negative values found", UserWarning)
        x = x.clamp(min=0)
    return x * 2


def warn_in_while(x):
    while x.sum() > 1:
        x = x / 2
        warnings.warn("halved", RuntimeWarning)
    return x


def warn_top_level_fstring(x):
    warnings.warn(f"total {x.sum()}")
    if x.sum() > 0:
        x = x + 1
    return x


def _deprecated_helper(x):
    warnings.warn("helper is deprecated", DeprecationWarning, stacklevel=2)
    return x + 1


def warn_stacklevel_helper(x):
    if x.sum() > 0:
        x = _deprecated_helper(x)
    return x


def warn_instance(x):
    if x.sum() < 0:
        warnings.warn(FutureWarning("an instance"))
    return x


def warn_to_caller(x):
    warnings.warn("see the caller", stacklevel=2)
    if x.sum() > 0:
        x = x * 3
    return x


def _recorded(fn, x, action="always"):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter(action)
        out = fn(x.clone())
    return out, [(str(m.message), m.category, m.filename, m.lineno) for m in w
                 if not issubclass(m.category, FallbackWarning)], \
        [m for m in w if issubclass(m.category, FallbackWarning)]


WARNERS = [warn_in_branch, warn_in_while, warn_top_level_fstring, warn_stacklevel_helper,
           warn_instance]


@pytest.mark.parametrize("fn", WARNERS, ids=[f.__name__ for f in WARNERS])
@pytest.mark.parametrize("strict", [False, True])
def test_warnings_on_every_call(fn, strict):
    """Message, category, file and line as eager's, on exactly the calls (and iterations)
    that take the path."""
    g = to_graph(fn, strict=strict)
    for x in (POS, NEG, BIG, NEG, POS):
        exp, exp_w, _ = _recorded(fn, x)
        got, got_w, fell = _recorded(g, x)
        assert not fell, [str(m.message) for m in fell]
        assert_same(got, exp)
        assert got_w == exp_w


@pytest.mark.parametrize("strict", [False, True])
def test_warning_shown_once_per_location_by_default(strict):
    g = to_graph(warn_in_branch, strict=strict)
    with warnings.catch_warnings(record=True) as w:
        warnings.resetwarnings()
        warnings.simplefilter("default")
        for x in (POS, NEG, NEG, POS, NEG):
            g(x.clone())
    assert [str(m.message) for m in w] == ["negative values found"]


@pytest.mark.parametrize("strict", [False, True])
def test_warning_as_error_raises_its_category(strict):
    g = to_graph(warn_in_branch, strict=strict)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        assert_same(g(POS.clone()), warn_in_branch(POS.clone()))
        with pytest.raises(UserWarning, match="negative values found"):
            g(NEG.clone())


def test_stacklevel_past_the_function_names_each_callers_line():
    g = to_graph(warn_to_caller, strict=True)
    for x in (POS, NEG):
        _, exp_w, _ = _recorded(warn_to_caller, x)      # (line in _recorded)
        got, got_w, _ = _recorded(g, x)
        assert got_w == exp_w
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        g(POS.clone())                                   # another line: this one
    assert [(m.filename, m.lineno) for m in w] == \
        [(__file__, sys._getframe().f_lineno - 2)]


class WarnsInForward(torch.nn.Module):
    def __init__(self, stacklevel):
        super().__init__()
        self.stacklevel = stacklevel

    def forward(self, x):
        if x.sum() < 0:
            warnings.warn("negative", UserWarning, stacklevel=self.stacklevel)
        return x * 2


class Outer(torch.nn.Module):
    def __init__(self, stacklevel):
        super().__init__()
        self.inner = WarnsInForward(stacklevel)

    def forward(self, x):
        return self.inner(x) + 1


@pytest.mark.parametrize("strict", [False, True])
def test_warning_in_module_forward(strict):
    """stacklevel=1 names the forward's line (converted); a stacklevel reaching past a
    forward would name torch's Module.__call__ frames eagerly: the call falls back."""
    for stacklevel, converted in ((1, True), (2, False)):
        model = Outer(stacklevel)
        g = to_graph(model, strict=strict)
        for x in (POS, NEG, NEG):
            exp, exp_w, _ = _recorded(model, x)
            try:
                got, got_w, fell = _recorded(g, x)
            except ConversionError:
                assert strict and not converted
                break
            assert bool(fell) == (not converted and x is POS), [str(m.message) for m in fell]
            assert_same(got, exp)
            assert got_w == exp_w


# ============================================================ gradients through staged ops
def grad_with_effects(x):
    if x.sum() > 0:
        warnings.warn("pos")
        sys.stdout.write("p\n")
        y = x * x
    else:
        y = x * 3
    return y


@pytest.mark.parametrize("strict", [False, True])
def test_gradients_with_staged_messages(strict, capsys):
    g = to_graph(grad_with_effects, strict=strict)
    for x in (POS, NEG):
        a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            grad_with_effects(a).sum().backward()
            exp_out = capsys.readouterr().out
            g(b).sum().backward()
            assert capsys.readouterr().out == exp_out
        torch.testing.assert_close(b.grad, a.grad)


# ============================================================ staged: logging
class _Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.seen = []

    def emit(self, record):
        self.seen.append((record.levelname, record.pathname, record.lineno, record.funcName,
                          record.getMessage()))


LOG = logging.getLogger("tograph_test_builtin_effects")
LOG.propagate = False
RECORDS = _Records()
LOG.addHandler(RECORDS)


def log_in_branch(x):
    if x.sum() < 0:
        LOG.warning("negative sum %s", x.sum())
        x = -x
    return x


def log_in_while_with_number(x):
    steps = 0
    while x.sum() > 1:
        x = x / 2
        steps += 1
        LOG.info("step %d", steps)
    return x


def log_fstring_and_level(x):
    if x.sum() > 0:
        LOG.log(logging.ERROR, f"positive {x.max()}")
    else:
        LOG.debug("not shown unless enabled")
    return x


def log_in_nested_helper(x):
    def note(v):
        LOG.error("value %s", v)
    if x.sum() > 0:
        note(x[0])
    return x


LOGGERS = [log_in_branch, log_in_while_with_number, log_fstring_and_level,
           log_in_nested_helper]


@pytest.mark.parametrize("fn", LOGGERS, ids=[f.__name__ for f in LOGGERS])
@pytest.mark.parametrize("strict", [False, True])
def test_logging_on_every_call(fn, strict):
    """Records with eager's level, file, line, function and message, on exactly the calls
    and iterations that take the path; the logger's level is asked when the graph runs."""
    g = to_graph(fn, strict=strict)
    for level, x in ((logging.INFO, POS), (logging.INFO, NEG), (logging.DEBUG, BIG),
                     (logging.WARNING, NEG), (logging.DEBUG, NEG), (logging.INFO, POS)):
        LOG.setLevel(level)
        RECORDS.seen.clear()
        exp = fn(x.clone())
        expected = list(RECORDS.seen)
        RECORDS.seen.clear()
        with warnings.catch_warnings():
            warnings.simplefilter("error", FallbackWarning)
            got = g(x.clone())
        assert_same(got, exp)
        assert RECORDS.seen == expected
    LOG.setLevel(logging.NOTSET)


def log_with_exc_info(x):
    if x.sum() > 0:
        LOG.warning("with info", exc_info=True)
    return x


def test_logging_it_cannot_repeat_falls_back():
    RECORDS.seen.clear()
    falls_back(log_with_exc_info, (POS,), (NEG,))


# ============================================================ saved graphs keep the nodes
def test_staged_messages_survive_save_and_load(tmp_path):
    import runtime
    from runtime import graph_ops
    graph = to_graph(warn_in_branch, strict=True).graph(POS.clone())
    graph.save(str(tmp_path / "g.tg"))
    loaded = runtime.load(str(tmp_path / "g.tg"))
    ops = [n for n in loaded.walk() if n.op == "warn_at"]
    assert len(ops) == 1
    assert graph_ops.warning_class(ops[0].args[0]) is UserWarning
