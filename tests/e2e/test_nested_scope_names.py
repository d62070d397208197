"""A user's ``def``, lambda and list comprehension inside a converted function keep eager's
names and frames, though converters wrap the code around them in functions of their own
(``loop_body``, ``if_body``, a comprehension's function): ``__qualname__`` as eager gives it,
``logging``'s ``funcName`` and ``lineno``, and ``warnings.warn(..., stacklevel=2)`` naming
the line that called the nested function. Each program runs eagerly and converted (strict:
it must convert), on tensors and on Python numbers."""
import logging
import warnings

import pytest
import torch

from transpiler import to_graph

LOG = logging.getLogger("tests.nested_scope_names")


def def_in_for(x):
    names = []
    for _ in range(2):
        def step(t):
            return t * 2
        x = step(x)
        names.append(step.__qualname__)
    return x, names


def def_in_tensor_if(x):
    name = ""
    if x.sum() > 0:
        def pos(t):
            return t + 1
        x = pos(x)
        name = pos.__qualname__
    return x, name


def def_in_def_in_while(x):
    name = ""
    while x.abs().sum() < 10:
        def outer(t):
            def inner(u):
                return u * 2
            return inner(t), inner.__qualname__
        x, name = outer(x)
    return x, name


def lambda_in_listcomp(x):
    return x + 1, [(lambda: 0).__qualname__ for _ in range(2)]


def lambda_in_lambda(x):
    return (lambda t: (t, (lambda: 0).__qualname__))(x)


class Holder:
    def method(self, x):
        def helper(t):
            return t - 1
        for _ in range(2):
            def in_loop(t):
                return t
            x = in_loop(helper(x))
        return x, helper.__qualname__, in_loop.__qualname__


def logs_everywhere(x):
    def report(t):
        LOG.info("report %s", t.shape[0])
        return t
    x = report(x)
    y = [LOG.info("listcomp") or v for v in x]
    z = (lambda t: LOG.info("lambda") or t)(x)
    for _ in range(2):
        LOG.info("loop")
        def in_loop(t):
            LOG.info("def in loop")
            return t
        x = in_loop(x)
    if x.sum() > 0:
        LOG.info("branch")
    return x, y, z


def _deprecated(t):
    warnings.warn("old helper", DeprecationWarning, stacklevel=2)
    return t


def warns_from_nested(x):
    def old(t):
        warnings.warn("nested old", DeprecationWarning, stacklevel=2)
        return t
    for _ in range(2):
        x = old(x)
    if x.sum() > 0:
        x = _deprecated(x)
    return x


NAMES = [def_in_for, def_in_tensor_if, def_in_def_in_while, lambda_in_listcomp,
         lambda_in_lambda, Holder().method]
INPUTS = [torch.ones(3), -torch.ones(2), torch.full((2,), 3.0)]


def _name(fn):
    return fn.__name__


@pytest.mark.parametrize("fn", NAMES, ids=_name)
def test_qualnames_as_eager(fn):
    converted = to_graph(fn, strict=True)
    for x in INPUTS:
        want, got = fn(x.clone()), converted(x.clone())
        torch.testing.assert_close(got[0], want[0])
        assert got[1:] == want[1:]


@pytest.mark.parametrize("fn", NAMES[:2] + NAMES[3:], ids=_name)
def test_qualnames_on_python_numbers(fn):
    if fn is def_in_tensor_if:
        pytest.skip("x.sum() of a number")
    assert to_graph(fn)(2.0) == fn(2.0)


def _records(fn, x, caplog):
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=LOG.name):
        fn(x)
    return [(r.funcName, r.lineno, r.getMessage()) for r in caplog.records
            if r.name == LOG.name]


def test_log_records_name_the_nested_function(caplog):
    converted = to_graph(logs_everywhere, strict=True)
    for x in INPUTS:
        want = _records(logs_everywhere, x, caplog)
        assert {name for name, _, _ in want} == {"report", "<listcomp>", "<lambda>",
                                                 "logs_everywhere", "in_loop"}
        assert _records(converted, x, caplog) == want


def _warned(fn, x):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        fn(x)
    return [(str(w.message), w.filename, w.lineno) for w in seen]


def test_stacklevel_two_from_a_nested_def_names_its_caller():
    converted = to_graph(warns_from_nested, strict=True)
    for x in INPUTS:
        want = _warned(warns_from_nested, x)
        assert want and all(filename == __file__ for _, filename, _ in want)
        assert _warned(converted, x) == want
