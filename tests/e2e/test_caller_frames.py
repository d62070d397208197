"""A call that runs eagerly (a fallback, its later calls, ``run_eagerly``) comes from a
frame standing for the user's line (``transpiler/caller_frames.py``): what looks one frame
up -- ``warnings.warn(..., stacklevel=2)``, ``logger.info(..., stacklevel=2)``,
``sys._getframe(1)``, ``inspect.stack()[1]`` -- sees the caller's file, line, function and
module, as eagerly, not ``transpiler/api.py``. Each check compares with the plain call."""
import inspect
import logging
import sys
import warnings

import pytest
import torch

from transpiler import FallbackWarning, run_eagerly, to_graph

LOG = logging.getLogger("tests.caller_frames")


def _falls_back(x):
    if x.sum() > 0:
        k = len(locals())       # (locals() in a tensor branch: a fallback)
    else:
        k = 1
    return x + k


def warns_deprecated(x):
    warnings.warn("deprecated", DeprecationWarning, stacklevel=2)
    return _falls_back(x)


def logs_caller(x):
    LOG.info("called", stacklevel=2)
    return _falls_back(x)


def caller_name(x):
    who = sys._getframe(1).f_code.co_name
    return _falls_back(x), who


def stack_caller(x):
    return _falls_back(x), inspect.stack()[1].function


class Net(torch.nn.Module):
    def forward(self, x):
        warnings.warn("module warning", UserWarning, stacklevel=2)
        return _falls_back(x)


def raises(x):
    if x.sum() > 0:
        k = len(locals())
    raise ValueError("user error")


INPUTS = [torch.ones(2), -torch.ones(2), torch.ones(3)]


def _warnings_of(fn, x):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        out = fn(x)
    return out, [(str(w.message), w.category, w.filename, w.lineno) for w in seen
                 if not issubclass(w.category, FallbackWarning)]


def _call_site(fn, x):          # one line, so eager and converted calls share it
    return _warnings_of(fn, x)


@pytest.mark.parametrize("x", INPUTS, ids=["pos", "neg", "3"])
def test_stacklevel_two_warning_names_the_caller(x):
    converted = to_graph(warns_deprecated)
    for _ in range(2):          # the fallback's first call, then its cached path
        want, got = _call_site(warns_deprecated, x), _call_site(converted, x)
        torch.testing.assert_close(got[0], want[0])
        assert got[1] == want[1] and want[1][0][2] == __file__


def test_stacklevel_two_log_record_names_the_caller(caplog):
    converted = to_graph(logs_caller)
    for x in INPUTS:
        records = []
        for fn in (logs_caller, converted):
            caplog.clear()
            with caplog.at_level(logging.INFO, logger=LOG.name):
                fn(x)
            records.append([(r.pathname, r.lineno, r.funcName) for r in caplog.records
                            if r.name == LOG.name])
        assert records[0] == records[1] and records[0][0][2] == \
            "test_stacklevel_two_log_record_names_the_caller"


@pytest.mark.parametrize("fn", [caller_name, stack_caller], ids=lambda f: f.__name__)
def test_the_callers_frame_is_the_callers(fn):
    converted = to_graph(fn)
    for x in INPUTS:
        want, got = fn(x), converted(x)
        assert got[1] == want[1] == "test_the_callers_frame_is_the_callers"


def test_run_eagerly_calls_from_the_callers_line():
    converted = to_graph(warns_deprecated)
    with run_eagerly(True):
        got = _call_site(converted, torch.ones(2))
    assert got[1] == _call_site(warns_deprecated, torch.ones(2))[1]


def test_a_module_that_falls_back_warns_as_eagerly():
    net = Net()
    converted = to_graph(net)
    for x in INPUTS:
        want, got = _call_site(net, x), _call_site(converted, x)
        torch.testing.assert_close(got[0], want[0])
        assert [w[:2] for w in got[1]] == [w[:2] for w in want[1]]


def test_the_users_error_keeps_its_traceback():
    converted = to_graph(raises)
    for x in INPUTS:
        with pytest.raises(ValueError, match="user error") as info:
            converted(x)
        frames = [f.name for f in info.traceback]
        assert frames[-1] == "raises"


def test_the_fallback_warning_names_the_callers_line():
    for fn in (to_graph(_falls_back), to_graph(Net())):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            fn(torch.ones(2)); line = sys._getframe().f_lineno
        fallback = [w for w in seen if issubclass(w.category, FallbackWarning)]
        assert fallback and all((w.filename, w.lineno) == (__file__, line) for w in fallback)
