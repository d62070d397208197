"""Guards checked by version tags (``runtime.guard_tags``): exactly as strict as a fingerprint.

A cached graph's guard re-takes the fingerprint of the Python values the trace read only
when a dict it looked into changed its version tag (or a list, a set, an object's class or
``__dict__``). Each case changes, between calls, something at depth in a config the trace
read -- through a closure, a global, a module's attribute, an argument -- and the next call
must equal eager's, in strict mode (no ConversionError) and in the default mode (no
FallbackWarning). Calls that change nothing take the tag path (``STATS.fast``), not a new
fingerprint (``STATS.slow``).
"""
import collections
import sys
import warnings

import pytest
import torch
import torch.nn as nn

from e2e_helpers import assert_same
from runtime import guard_tags
from transpiler import FallbackWarning, to_graph

POS = torch.tensor([1.0, 2.0, 3.0])
NEG = -POS


class Inner:
    def factor(self):
        return 1.0


class Other(Inner):
    def factor(self):
        return -2.0


class Cfg:
    BASE = 1.0


def _config(queue=False):
    """A config; ``queue``: with a deque, whose items no tag follows (an opaque walk: the
    fingerprint is taken on every call), else everything is checked by tags."""
    cfg = Cfg()
    cfg.sub = Inner()
    cfg.sub.inner = Inner()
    cfg.sub.inner.scale = 2.0
    cfg.layers = [1.0, 2.0]
    cfg.opts = {"k": 2, "shift": [0.5]}
    cfg.flags = {"a"}
    if queue:
        cfg.queue = collections.deque([1])
    return cfg


def body(x, cfg):
    s = cfg.sub.inner.scale * cfg.BASE
    for v in cfg.layers:
        x = x * v
    x = x + getattr(cfg.sub, "bias", 0.0) + cfg.opts["k"] + cfg.opts["shift"][0]
    if "b" in cfg.flags:
        x = x + 1
    x = x + len(getattr(cfg, "queue", ()))
    if x.sum() > 0:
        return x * s * cfg.sub.inner.factor()
    return x - s


def _set_dict(obj, attrs):
    obj.__dict__ = attrs


CHANGES = {      # name -> change(cfg)
    "deep_attribute": lambda cfg: setattr(cfg.sub.inner, "scale", 3.0),
    "list_appended": lambda cfg: cfg.layers.append(0.5),
    "list_item": lambda cfg: cfg.layers.__setitem__(0, -4.0),
    "attribute_added": lambda cfg: setattr(cfg.sub, "bias", 1.5),
    "attribute_deleted": lambda cfg: (setattr(cfg.sub, "bias", 1.5), delattr(cfg.sub, "bias")),
    "nested_list_in_dict": lambda cfg: cfg.opts["shift"].__setitem__(0, -1.0),
    "dict_value": lambda cfg: cfg.opts.__setitem__("k", 5),
    "set_added": lambda cfg: cfg.flags.add("b"),
    "deque_appended": lambda cfg: cfg.queue.append(2),        # state no tag follows
    "class_attribute": lambda cfg: setattr(Cfg, "BASE", -3.0),
    "class_assigned": lambda cfg: setattr(cfg.sub.inner, "__class__", Other),
    "dict_assigned": lambda cfg: _set_dict(cfg.sub.inner, {"scale": 7.0}),
}


def _closure(cfg):
    def fn(x):
        return body(x, cfg)
    return fn, lambda f, x: f(x)


CFG = None


def _global(cfg):
    global CFG
    CFG = cfg

    def fn(x):
        return body(x, CFG)
    return fn, lambda f, x: f(x)


class Holder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        return body(self.lin(x), self.cfg)


def _module(cfg):
    torch.manual_seed(0)
    return Holder(cfg), lambda f, x: f(x)


def _argument(cfg):
    return body, lambda f, x: f(x, cfg)


SPELLINGS = {"closure": _closure, "global": _global, "module": _module,
             "argument": _argument}


@pytest.fixture(autouse=True)
def _reset_class():
    yield
    Cfg.BASE = 1.0


def _agree(spelling, change, strict, grad=False):
    cfg = _config(queue=change is CHANGES["deque_appended"])
    fn, call = SPELLINGS[spelling](cfg)
    g = to_graph(fn, strict=strict)
    for step in range(3):
        if step == 1:
            change(cfg)
        for x in (POS, NEG):
            xe, xg = x.clone().requires_grad_(grad), x.clone().requires_grad_(grad)
            exp = call(fn, xe)
            with warnings.catch_warnings():
                warnings.simplefilter("error", FallbackWarning)
                got = call(g, xg)
            assert_same(got, exp)
            if grad:
                exp.sum().backward()
                got.sum().backward()
                assert_same(xg.grad, xe.grad)
    return g


@pytest.mark.parametrize("strict", [True, False])
@pytest.mark.parametrize("spelling", list(SPELLINGS))
@pytest.mark.parametrize("change", list(CHANGES))
def test_a_change_read_at_depth_is_seen(change, spelling, strict):
    _agree(spelling, CHANGES[change], strict)


@pytest.mark.parametrize("change", ["deep_attribute", "list_appended", "class_assigned"])
def test_gradients_after_a_change(change):
    _agree("closure", CHANGES[change], strict=True, grad=True)


@pytest.mark.parametrize("spelling", list(SPELLINGS))
def test_unchanged_calls_take_the_tag_path(spelling):
    cfg = _config()
    fn, call = SPELLINGS[spelling](cfg)
    g = to_graph(fn, strict=True)
    call(g, POS)
    call(g, POS)
    fast, slow = guard_tags.STATS.fast, guard_tags.STATS.slow
    for _ in range(5):
        assert_same(call(g, POS), call(fn, POS))
    assert guard_tags.STATS.fast >= fast + 5
    assert guard_tags.STATS.slow == slow       # nothing walked again
    cfg.sub.inner.scale = 4.0                  # a tag moves: walked again, traced again
    assert_same(call(g, POS), call(fn, POS))
    assert guard_tags.STATS.slow > slow


@pytest.mark.parametrize("spelling", list(SPELLINGS))
def test_a_value_replaced_by_an_equal_one_keeps_the_graph(spelling):
    cfg = _config()
    fn, call = SPELLINGS[spelling](cfg)
    g = to_graph(fn, strict=True)
    call(g, POS)
    traced = len(g._history)
    cfg.opts["shift"] = [0.5]                  # another list, equal: the same fingerprint
    cfg.sub.inner.scale = 2.0
    assert_same(call(g, POS), call(fn, POS))
    assert len(g._history) == traced           # (allowed to retrace; it need not)
    slow = guard_tags.STATS.slow
    assert_same(call(g, NEG), call(fn, NEG))   # the new tags were kept
    assert guard_tags.STATS.slow == slow
    cfg.opts["shift"][0] = 9.0                 # the new list is the one watched now
    assert_same(call(g, POS), call(fn, POS))


def test_an_equal_argument_object_and_then_a_changed_one():
    g = to_graph(body, strict=True)
    first, second = _config(), _config()
    assert_same(g(POS, first), body(POS, first))
    assert_same(g(POS, second), body(POS, second))     # equal, another object
    second.sub.inner.scale = -1.0
    assert_same(g(POS, second), body(POS, second))
    first.layers.append(3.0)
    assert_same(g(POS, first), body(POS, first))


SCALE = 2.0
UNRELATED = 0


def _reads_global(x):
    if x.sum() > 0:
        return x * SCALE
    return x


def test_global_and_cell_bindings():
    global SCALE, UNRELATED
    g = to_graph(_reads_global, strict=True)
    assert_same(g(POS), _reads_global(POS))
    traced = len(g._history)
    UNRELATED += 1              # the namespace's tag moves, the names it read hold
    assert_same(g(POS), _reads_global(POS))
    assert len(g._history) == traced
    try:
        SCALE = 3.0
        assert_same(g(POS), _reads_global(POS))
        assert len(g._history) == traced + 1
    finally:
        SCALE = 2.0

    scale = 2.0

    def fn(x):
        if x.sum() > 0:
            return x * scale
        return x
    h = to_graph(fn, strict=True)
    assert_same(h(POS), fn(POS))
    scale = 5.0
    assert_same(h(POS), fn(POS))
    assert_same(h(NEG), fn(NEG))


def test_seen_records_and_opaque_walks():
    cfg = _config(queue=True)
    printed = guard_tags.TaggedPrint(cfg)
    assert printed.seen.records is None        # the deque: state no tag follows
    del cfg.queue
    printed = guard_tags.TaggedPrint(cfg)
    assert printed.seen.records is not None
    tags = guard_tags.Tags([printed])
    assert tags() and tags()
    cfg.sub.inner.scale = 9.0
    assert not tags()
    cfg.sub.inner.scale = 2.0
    assert tags()
    cfg.flags.discard("a")
    assert not tags()
    cfg.flags.add("a")
    assert tags()


# ----------------------------------------------------------------- library objects, globals
import logging  # noqa: E402

from runtime.python_state import fingerprint  # noqa: E402

LOG = logging.getLogger("tograph_guard_tags.sub")
PARENT = logging.getLogger("tograph_guard_tags")


def _reads_logger(x, log):
    if log.isEnabledFor(logging.DEBUG):       # read at trace time: baked into the graph
        x = x * 2
    if log.getEffectiveLevel() <= logging.INFO:
        x = x + 1
    log.info("seen %s", 1)                    # staged: decided when the graph runs
    if x.sum() > 0:
        return x * 3
    return x


class _Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.records = []

    def emit(self, record):
        self.records.append(record.getMessage())


class LogHolder(nn.Module):
    def __init__(self, log):
        super().__init__()
        self.log = log

    def forward(self, x):
        return _reads_logger(x, self.log)


def _log_spellings():
    def by_global(x):
        return _reads_logger(x, LOG)

    def by_closure(x):
        return _reads_logger(x, log)
    log = LOG
    return {"global": (by_global, lambda f, x: f(x)),
            "closure": (by_closure, lambda f, x: f(x)),
            "module": (LogHolder(LOG), lambda f, x: f(x)),
            "argument": (_reads_logger, lambda f, x: f(x, LOG))}


LOG_CHANGES = {
    "own_level": lambda: LOG.setLevel(logging.DEBUG),
    "parent_level": lambda: PARENT.setLevel(logging.INFO),
    "disabled": lambda: setattr(LOG, "disabled", True),
    "logging_disable": lambda: logging.disable(logging.CRITICAL),
    "raised_level": lambda: (LOG.setLevel(logging.DEBUG), LOG.setLevel(logging.ERROR)),
}


@pytest.fixture
def _clean_logger():
    records = _Records()
    LOG.addHandler(records)
    LOG.setLevel(logging.NOTSET)
    PARENT.setLevel(logging.WARNING)
    yield records
    LOG.removeHandler(records)
    LOG.setLevel(logging.NOTSET)
    LOG.disabled = False
    PARENT.setLevel(logging.NOTSET)
    logging.disable(logging.NOTSET)


@pytest.mark.parametrize("strict", [True, False])
@pytest.mark.parametrize("spelling", ["global", "closure", "module", "argument"])
@pytest.mark.parametrize("change", list(LOG_CHANGES))
def test_a_logger_read_by_the_trace_behaves_as_eager(change, spelling, strict, _clean_logger):
    """A Logger's level or switches changed between calls (its own, a parent's, logging's
    global ``disable``): the graph's answers and its log records are eager's."""
    fn, call = _log_spellings()[spelling]
    g = to_graph(fn, strict=strict)
    for step in range(3):
        if step == 1:
            LOG_CHANGES[change]()
        for x in (POS, NEG):
            _clean_logger.records.clear()
            exp = call(fn, x.clone())
            eager_records = list(_clean_logger.records)
            _clean_logger.records.clear()
            with warnings.catch_warnings():
                warnings.simplefilter("error", FallbackWarning)
                got = call(g, x.clone())
            assert_same(got, exp)
            assert _clean_logger.records == eager_records


def test_a_logger_is_not_walked(_clean_logger):
    """A Logger counts by its own settings and its effective level: its tags are its own
    ``__dict__``, its ancestors', the manager's and its handler and filter lists -- not
    the manager's registry of every logger nor the handlers' insides."""
    printed = guard_tags.TaggedPrint(LOG, deep=True)
    assert printed.seen.records is not None and not printed.deep
    dicts, objects, lists = printed.seen.records[:3]
    assert len(dicts) <= 4          # its own, the parent's, root's, the manager's
    assert {type(o) for o, _, _ in objects.values()} == {logging.Logger}
    assert len(lists) == 2
    before = fingerprint(LOG)
    PARENT.setLevel(logging.DEBUG)      # what isEnabledFor answers moved: so does the print
    assert fingerprint(LOG) != before
    PARENT.setLevel(logging.WARNING)
    assert fingerprint(LOG) == before
    LOG.addHandler(logging.NullHandler())
    assert fingerprint(LOG) != before
    LOG.handlers.pop()
    assert fingerprint(LOG) == before

    g = to_graph(lambda x: _reads_logger(x, LOG), strict=True)
    g(POS), g(POS)
    fast, slow = guard_tags.STATS.fast, guard_tags.STATS.slow
    other = logging.getLogger("tograph_guard_tags_unrelated")
    for level in (logging.DEBUG, logging.ERROR, logging.NOTSET):
        other.setLevel(level)           # another logger: nothing the guard looked into
        assert_same(g(POS), _reads_logger(POS, LOG))
    assert guard_tags.STATS.fast >= fast + 3
    assert guard_tags.STATS.slow == slow


class Settings:
    pass


SETTINGS = Settings()
SETTINGS.scale = 2.0
SETTINGS.unused = [1]


def _reads_settings(x):
    if x.sum() > 0:
        return x * SETTINGS.scale
    return x - SETTINGS.scale


@pytest.mark.parametrize("strict", [True, False])
def test_an_attribute_of_a_global_object_read_by_the_trace(strict):
    g = to_graph(_reads_settings, strict=strict)
    for x in (POS, NEG):
        assert_same(g(x), _reads_settings(x))
    traced = len(g._history)
    SETTINGS.unused.append(2)           # not read: the graph stays right either way
    for x in (POS, NEG):
        assert_same(g(x), _reads_settings(x))
    try:
        SETTINGS.scale = -5.0           # read: traced again, eager's answer
        for x in (POS, NEG):
            assert_same(g(x), _reads_settings(x))
        assert len(g._history) > traced
    finally:
        SETTINGS.scale = 2.0
        SETTINGS.unused[:] = [1]


def test_sets_of_objects_and_of_values():
    """A set of numbers and text is compared with ``==``; one holding objects by their
    identities -- either way an item added or swapped is seen."""
    a, b = Inner(), Inner()
    holder = Cfg()
    holder.plain, holder.objects = {1, "x"}, {a}
    tags = guard_tags.Tags([guard_tags.TaggedPrint(holder)])
    assert tags()
    holder.plain.add(2.5)
    assert not tags()
    holder.plain.discard(2.5)
    assert tags()
    holder.objects.add(b)
    assert not tags()
    holder.objects.discard(a)
    assert not tags()
    holder.objects.discard(b)
    holder.objects.add(a)
    assert tags()


def _reads_environment(x):
    import os
    if os.environ.get("TOGRAPH_GUARD_TAGS_FLAG") == "1":
        return x * 2
    return x - 1


@pytest.mark.parametrize("strict", [True, False])
def test_the_environment_by_its_tag(strict, monkeypatch):
    """``os.environ`` read by the trace: checked by the version tag of the dict it keeps
    its text in; a variable set, changed back, another one set, all as eager."""
    import os
    monkeypatch.delenv("TOGRAPH_GUARD_TAGS_FLAG", raising=False)
    g = to_graph(_reads_environment, strict=strict)
    for value in (None, "1", "0", "1", None):
        if value is None:
            os.environ.pop("TOGRAPH_GUARD_TAGS_FLAG", None)
        else:
            os.environ["TOGRAPH_GUARD_TAGS_FLAG"] = value
        os.environ["TOGRAPH_GUARD_TAGS_OTHER"] = str(value)     # a tag moves: same graph
        for x in (POS, NEG):
            with warnings.catch_warnings():
                warnings.simplefilter("error", FallbackWarning)
                assert_same(g(x), _reads_environment(x))
    os.environ.pop("TOGRAPH_GUARD_TAGS_OTHER", None)
