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
