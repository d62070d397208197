"""Guards on what a trace read: change it between calls, and the next call must equal eager.

Each case makes (fn, change): call the converted fn (strict and default mode) and eager,
change some Python state the trace read -- a class attribute, a submodule, a ModuleList's
length, a parameter's flag, a buffer's values, a hook, a user module's attribute -- and
call again: the converted result must equal eager's (a retrace), strict mode must still
convert (no ConversionError), and no FallbackWarning may appear.
"""
import enum
import sys
import types
import warnings

import pytest
import torch
import torch.nn as nn

from e2e_helpers import assert_same
from transpiler import ConversionError, FallbackWarning, to_graph

POS = torch.tensor([1.0, 2.0, 3.0])
NEG = -POS


def _agree(make, inputs=(POS, NEG)):
    """Both modes: equal to eager before and after ``change()``, on each input, without
    falling back; returns the converted functions (for their cache info)."""
    made = []
    for strict in (True, False):
        fn, change = make()
        g = to_graph(fn, strict=strict)
        for step in range(3):
            if step == 1:
                change()
            for x in inputs:
                exp = fn(x.clone())
                with warnings.catch_warnings():
                    warnings.simplefilter("error", FallbackWarning)
                    got = g(x.clone())
                assert_same(got, exp)
        made.append(g)
    return made


# ---------------------------------------------------------------- class attributes
class Scale:
    SCALE = 2.0


class SubScale(Scale):
    pass


def _class_attr_global():
    Scale.SCALE = 2.0

    def fn(x):
        if x.sum() > 0:
            return x * Scale.SCALE
        return x - Scale.SCALE
    return fn, lambda: setattr(Scale, "SCALE", 5.0)


def _class_attr_inherited():
    Scale.SCALE = 2.0

    def fn(x):
        if x.sum() > 0:
            return x * SubScale.SCALE
        return x
    return fn, lambda: setattr(Scale, "SCALE", 3.0)


def _class_attr_through_instance_closure():
    class Config:
        scale = 2.0
    cfg = Config()

    def fn(x):
        if x.sum() > 0:
            x = x * cfg.scale
        return x + cfg.scale
    return fn, lambda: setattr(Config, "scale", 7.0)


def _class_attr_added_on_instance():
    class Config:
        scale = 2.0
    cfg = Config()

    def fn(x):
        if x.sum() > 0:
            x = x * cfg.scale
        return x
    return fn, lambda: setattr(cfg, "scale", 4.0)      # shadows the class attribute


def _class_attr_int_to_float():
    class Config:
        k = 2
    cfg = Config()

    def fn(x):
        x = x.long() * cfg.k           # the result's dtype follows k's type
        if x.sum() > 0:
            x = x + 1
        return x
    return fn, lambda: setattr(Config, "k", 2.5)


class _ScaledModule(nn.Module):
    SCALE = 2.0

    def forward(self, x):
        if x.sum() > 0:
            x = x * self.SCALE
        return x


def _class_attr_of_module():
    _ScaledModule.SCALE = 2.0
    m = _ScaledModule()
    return m, lambda: setattr(_ScaledModule, "SCALE", 6.0)


def _classmethod_reads_class():
    class Holder:
        factor = 3.0

        @classmethod
        def apply(cls, x):
            if x.sum() > 0:
                return x * cls.factor
            return x
    return Holder.apply, lambda: setattr(Holder, "factor", 0.5)


def _method_monkeypatched():
    class Helper:
        def go(self, x):
            return x * 2
    h = Helper()

    def fn(x):
        if x.sum() > 0:
            return h.go(x)
        return x
    return fn, lambda: setattr(Helper, "go", lambda self, x: x * 10)


CLASS_CASES = [_class_attr_global, _class_attr_inherited, _class_attr_through_instance_closure,
               _class_attr_added_on_instance, _class_attr_int_to_float, _class_attr_of_module,
               _classmethod_reads_class, _method_monkeypatched]


@pytest.mark.parametrize("make", CLASS_CASES, ids=[m.__name__ for m in CLASS_CASES])
def test_class_attributes(make):
    _agree(make)


# ---------------------------------------------------------------- module trees
class _Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(3, 3)])
        self.act = nn.ReLU()
        self.drop = nn.Dropout(0.0)
        self.scale = 1.0

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
            if x.sum() > -100:
                x = self.act(x)
        return self.drop(x) * self.scale


def _stack(change):
    def make():
        torch.manual_seed(0)
        m = _Stack().eval()
        return m, lambda: change(m)
    make.__name__ = change.__name__
    return make


def module_list_append(m):
    m.layers.append(nn.Linear(3, 3))


def module_list_insert(m):
    m.layers.insert(0, nn.Linear(3, 3))         # (writes ModuleList._modules directly)


def module_list_delete(m):
    m.layers.append(nn.Linear(3, 3))
    del m.layers[0]


def module_list_setitem(m):
    m.layers[0] = nn.Linear(3, 3)


def submodule_swapped(m):
    m.act = nn.Tanh()


def submodule_deleted_then_added(m):
    del m.act
    m.act = nn.Sigmoid()


def plain_attribute(m):
    m.scale = 3.0


def parameter_replaced(m):
    m.layers[0].weight = nn.Parameter(torch.ones(3, 3))


def parameter_replaced_equal_values(m):
    m.layers[0].bias = nn.Parameter(m.layers[0].bias.detach().clone())
    with torch.no_grad():
        m.layers[0].bias.add_(1.0)       # the new one changes; the graph must use it


def forward_hook_added(m):
    m.act.register_forward_hook(lambda mod, args, out: out * 2)


def forward_pre_hook_added(m):
    m.layers[0].register_forward_pre_hook(lambda mod, args: (args[0] + 1,))


MODULE_CASES = [module_list_append, module_list_insert, module_list_delete, module_list_setitem,
                submodule_swapped, submodule_deleted_then_added, plain_attribute,
                parameter_replaced, parameter_replaced_equal_values, forward_hook_added,
                forward_pre_hook_added]


@pytest.mark.parametrize("change", MODULE_CASES, ids=[c.__name__ for c in MODULE_CASES])
def test_module_tree(change):
    _agree(_stack(change))


def test_dropout_probability_in_train_mode():
    # p changes what Dropout's forward does (p=0 vs p=1: identity vs zeros), in train mode
    def make():
        m = _Stack().train()
        return m, lambda: setattr(m.drop, "p", 1.0)
    _agree(make)


def test_global_module_swapped_inside():
    enc = nn.Sequential(nn.Linear(3, 3))

    def make():
        torch.manual_seed(0)
        enc[0] = nn.Linear(3, 3)

        def fn(x):
            y = enc(x)
            if y.sum() > 0:
                y = y * 2
            return y
        return fn, lambda: enc.append(nn.ReLU())
    _agree(make)


class _Cfg:
    def __init__(self):
        self.scale = 2.0


class _WithCfg(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = nn.Module()
        self.inner.cfg = _Cfg()

    def forward(self, x):
        if x.sum() > 0:
            x = x * self.inner.cfg.scale
        return x


def test_submodule_plain_object_attribute():
    def make():
        m = _WithCfg()
        return m, lambda: setattr(m.inner.cfg, "scale", 9.0)
    _agree(make)


# ---------------------------------------------------------------- real tensors' state
class _Flags(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(3))
        self.register_buffer("on", torch.tensor(True))
        self.register_buffer("steps", torch.tensor(2))

    def forward(self, x):
        y = x * self.w
        if self.w.requires_grad:
            y = y + 1
        if self.on:                          # a buffer's value read by Python
            y = y * 3
        for _ in range(int(self.steps)):
            if y.sum() > 0:
                y = y - 0.5
        if y.sum() > 0:
            y = y * 2
        return y


def _flags(change):
    def make():
        m = _Flags()
        return m, lambda: change(m)
    make.__name__ = change.__name__
    return make


def requires_grad_off(m):
    m.w.requires_grad_(False)


def buffer_value(m):
    m.on.fill_(False)


def buffer_count(m):
    m.steps.fill_(5)


FLAG_CASES = [requires_grad_off, buffer_value, buffer_count]


@pytest.mark.parametrize("change", FLAG_CASES, ids=[c.__name__ for c in FLAG_CASES])
def test_real_tensor_state(change):
    _agree(_flags(change))


def test_parameter_shape_read():
    class Pos(nn.Module):
        def __init__(self):
            super().__init__()
            self.pos = nn.Parameter(torch.zeros(3))

        def forward(self, x):
            n = self.pos.shape[0]
            if n > 3:
                x = torch.cat([x, x])[:n] * 0 + x.sum()
            if x.sum() > 0:
                x = x + 1
            return x

    def make():
        m = Pos()
        return m, lambda: setattr(m, "pos", nn.Parameter(torch.zeros(4)))
    _agree(make)


def test_traced_requires_grad_follows_parameter():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(3))

        def forward(self, x):
            y = x * self.w
            if y.requires_grad:           # answered from w's flag
                y = y * 10
            if y.sum() > 0:
                y = y + 1
            return y.detach()

    def make():
        m = M()
        return m, lambda: m.w.requires_grad_(False)
    _agree(make)


def test_grad_presence_read():
    w = torch.ones(3, requires_grad=True)

    def make():
        w.grad = None

        def fn(x):
            if w.grad is None:
                return x + 1
            if x.sum() > 0:
                return x * w.grad
            return x

        def change():
            w.grad = torch.full((3,), 4.0)
        return fn, change
    _agree(make)


# ---------------------------------------------------------------- user modules, globals
def test_user_module_attribute():
    config = types.ModuleType("tograph_test_user_config")
    config.__file__ = __file__          # a user's module (not a library)
    config.SCALE = 2.0
    sys.modules[config.__name__] = config
    namespace = {"config": config}
    exec(compile("def fn(x):\n"
                 "    if x.sum() > 0:\n"
                 "        return x * config.SCALE\n"
                 "    return x\n", __file__, "exec"), namespace)
    fn = namespace["fn"]
    g = to_graph(fn, strict=True)
    # (exec'd code has no source: this checks the guard record, not a conversion)
    from transpiler.side_effects import Snapshot, _user_module
    assert _user_module(config)
    snap = Snapshot.take(fn, (), {})
    snap.watch_arguments([])
    check = snap.compile_check()
    assert check()
    config.SCALE = 3.0
    assert not check()
    del g


# ---------------------------------------------------------------- no needless retrace
def test_unchanged_state_reuses_the_graph():
    torch.manual_seed(0)
    m = _Stack().eval()
    g = to_graph(m, strict=True)
    for _ in range(4):
        assert_same(g(POS), m(POS))
    assert len(g._history) == 1          # traced once: the guards held


def test_training_flag_switch_both_cached():
    torch.manual_seed(0)
    m = _Stack()
    g = to_graph(m, strict=True)
    for mode in (True, False, True, False):
        m.train(mode)
        assert_same(g(POS), m(POS))
    assert len(g._history) == 2          # one trace per mode, each reused


def test_state_touched_but_unchanged_reuses_the_graph():
    """The module guard's fast path compares dict version tags; a tag that moved with the
    state still the same (``eval()`` again, an attribute set to the object it held, a hook
    added and removed) runs the full comparison once and keeps the graph."""
    torch.manual_seed(0)
    m = _Stack().eval()
    g = to_graph(m, strict=True)
    assert_same(g(POS), m(POS))
    m.eval()
    m.scale = m.scale
    handle = m.layers[0].register_forward_hook(lambda mod, i, o: o * 100)
    handle.remove()
    for _ in range(2):
        assert_same(g(POS), m(POS))
    assert len(g._history) == 1


@pytest.mark.parametrize("change", ["hook", "parameter", "attribute", "delete"])
def test_change_after_fast_path_warmed(change):
    """After many cached calls (the fast path's tags settled), each kind of change is
    still seen: a hook on a module whose hook dict was empty, a parameter replaced, a plain
    attribute, a submodule deleted and set again."""
    torch.manual_seed(0)
    m = _Stack().eval()
    g = to_graph(m)
    for _ in range(3):
        g(POS)
    if change == "hook":
        m.layers[0].register_forward_hook(lambda mod, i, o: o * 100)
    elif change == "parameter":
        m.layers[0].weight = nn.Parameter(m.layers[0].weight.detach() * -1)
    elif change == "attribute":
        m.scale = 10.0
    else:
        del m.act
        m.act = nn.Tanh()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert_same(g(POS), m(POS))

# ---------------------------------------------------------------- hooks with Python effects
FEATURES = {}


def test_hook_storing_outputs_falls_back():
    # a feature-extraction hook writes the user's dict: a graph cannot repeat that, so
    # strict mode refuses and the default runs eagerly (the dict holds real tensors)
    torch.manual_seed(0)
    m = _Stack().eval()
    m.act.register_forward_hook(lambda mod, args, out: FEATURES.__setitem__("act", out))
    with pytest.raises(ConversionError):
        to_graph(m, strict=True)(POS)
    FEATURES.clear()
    with pytest.warns(FallbackWarning, match="FEATURES"):
        got = to_graph(m)(POS)
    assert type(FEATURES["act"]) is torch.Tensor
    FEATURES.clear()
    assert_same(got, m(POS))


def test_pure_hook_converts():
    torch.manual_seed(0)
    m = _Stack().eval()
    m.act.register_forward_hook(lambda mod, args, out: out + 1)
    g = to_graph(m, strict=True)
    for x in (POS, NEG):
        assert_same(g(x), m(x))


# ---------------------------------------------------------------- neighbours
def _backend_branch(x):
    if torch.backends.mkldnn.enabled:
        x = x + 1
    if x.sum() > 0:
        x = x * 2
    return x


def test_backend_flag_read():
    for strict in (True, False):
        g = to_graph(_backend_branch, strict=strict)
        for enabled in (True, False, True):
            with torch.backends.mkldnn.flags(enabled=enabled):
                for x in (POS, NEG):
                    assert_same(g(x), _backend_branch(x))


def _dict_keys(x, d):
    for k in d:
        if x.sum() > 0:
            x = x * d[k]
    return x


def test_dict_argument_key_added_in_place():
    for strict in (True, False):
        g = to_graph(_dict_keys, strict=strict)
        d = {"a": 2.0}
        assert_same(g(POS, d), _dict_keys(POS, d))
        d["b"] = 3.0
        assert_same(g(POS, d), _dict_keys(POS, d))
        del d["a"]
        assert_same(g(POS, d), _dict_keys(POS, d))


class _Mode(enum.Enum):
    UP = 1
    DOWN = 2


def _enum_mode(x, mode):
    if mode is _Mode.UP:
        x = x + 1
    if x.sum() > 0:
        x = x * 2
    return x


def test_enum_argument():
    for strict in (True, False):
        g = to_graph(_enum_mode, strict=strict)
        for mode in (_Mode.UP, _Mode.DOWN, _Mode.UP):
            for x in (POS, NEG):
                assert_same(g(x, mode), _enum_mode(x, mode))


def test_retrace_warning_names_read_state():
    from transpiler.api import RetracingWarning
    Scale.SCALE = 2.0

    def fn(x):
        if x.sum() > 0:
            return x * Scale.SCALE
        return x
    g = to_graph(fn, strict=True)
    with pytest.warns(RetracingWarning, match="Python state the last trace read changed"):
        for k in range(6):
            Scale.SCALE = float(k)
            assert_same(g(POS), fn(POS))
    Scale.SCALE = 2.0


# ---------------------------------------------------------------- deeper than the guard looks
class _Link:
    pass


def _chain(depth, scale):
    root = cur = _Link()
    for _ in range(depth):
        cur.a = _Link()
        cur = cur.a
    cur.scale = scale
    return root


def _read_chain(x, cfg):
    c = cfg
    while hasattr(c, "a"):
        c = c.a
    return x * c.scale


def _set_chain(cfg, scale):
    while hasattr(cfg, "a"):
        cfg = cfg.a
    cfg.scale = scale


@pytest.mark.parametrize("depth", [2, 6])
def test_argument_deeper_than_the_guard(depth):
    """Within the guard's depth a change retraces; past it the call falls back (strict:
    ConversionError) instead of reusing a graph whose read it could not watch."""
    cfg = _chain(depth, 2.0)
    g = to_graph(_read_chain)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert torch.equal(g(POS, cfg), POS * 2.0)
        _set_chain(cfg, 5.0)
        assert torch.equal(g(POS, cfg), POS * 5.0)
    fell_back = [m for m in w if issubclass(m.category, FallbackWarning)]
    assert bool(fell_back) == (depth > 4), [str(m.message) for m in w]
    if depth > 4:
        assert "nested deeper than" in str(fell_back[0].message)
        with pytest.raises(ConversionError, match="nested deeper than"):
            to_graph(_read_chain, strict=True)(POS, cfg)
