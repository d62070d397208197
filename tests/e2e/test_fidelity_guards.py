"""Python values a trace reads through its arguments are guarded.

A trace bakes the Python values it reads into its graph: ``x * cfg.scale`` multiplies by
the number ``cfg.scale`` held when it was traced. Reading it through an argument (an
object's attribute at any depth, an item of a list or dict, a module argument's plain
attribute) must be checked before the cached graph is reused: after ``cfg.scale = 3.0``
the next call must return what eager returns. Mutations of such values made by the
function itself are side effects a graph cannot repeat: they fall back.
"""
import dataclasses
import warnings

import pytest
import torch

from transpiler import ConversionError, FallbackWarning, to_graph

from e2e_helpers import assert_same

X = torch.tensor([1.0, -2.0, 3.0])


class Cfg:
    pass


@dataclasses.dataclass
class Options:
    scale: float = 2.0
    shift: int = 1
    sub: object = None


def make_cfg():
    c = Cfg()
    c.scale = 2.0
    c.sub = Cfg()
    c.sub.scale = 2.0
    c.sub.mode = "mul"
    return c


def attr(x, cfg):
    return x * cfg.scale


def nested_attr(x, cfg):
    return x * cfg.sub.scale


def list_of_objects(x, cfgs):
    return x * cfgs[0].scale


def dict_item(x, d):
    return x * d["k"]


def dict_of_objects(x, d):
    return x * d["cfg"].sub.scale


def string_attr_chooses_path(x, cfg):
    if cfg.sub.mode == "mul":
        return x * 2
    return x + 2


def dataclass_fields(x, o):
    return x * o.scale + o.shift


def attr_in_tensor_branch(x, cfg):
    if x.sum() > 0:
        x = x * cfg.scale
    else:
        x = x - cfg.sub.scale
    return x


def change_all(arg):
    """Change every value the programs above read, in place."""
    cfgs = arg if isinstance(arg, list) else list(arg.values()) if isinstance(arg, dict) \
        else [arg]
    for c in cfgs:
        if isinstance(c, (Cfg, Options)):
            c.scale = 3.0
            c.shift = 5
            if isinstance(c.__dict__.get("sub"), Cfg):
                c.sub.scale = 4.0
                c.sub.mode = "add"
    if isinstance(arg, dict) and "k" in arg:
        arg["k"] = 3.0


CASES = [
    (attr, make_cfg), (nested_attr, make_cfg), (list_of_objects, lambda: [make_cfg()]),
    (dict_item, lambda: {"k": 2.0}), (dict_of_objects, lambda: {"cfg": make_cfg()}),
    (string_attr_chooses_path, make_cfg), (dataclass_fields, lambda: Options()),
    (attr_in_tensor_branch, make_cfg),
]


@pytest.mark.parametrize("fn,make", CASES, ids=[fn.__name__ for fn, _ in CASES])
@pytest.mark.parametrize("strict", [True, False])
def test_a_changed_value_read_through_an_argument_is_not_stale(fn, make, strict):
    g = to_graph(fn, strict=strict)
    arg = make()
    for x in (X, -X):
        with warnings.catch_warnings():
            warnings.simplefilter("error", FallbackWarning)
            assert_same(g(x, arg), fn(x, arg))
            change_all(arg)                 # the same object, changed between calls
            assert_same(g(x, arg), fn(x, arg))
        arg = make()                        # and back, on a fresh object


def test_unchanged_object_argument_reuses_the_graph():
    g = to_graph(nested_attr, strict=True)
    cfg = make_cfg()
    for _ in range(3):
        g(X, cfg)
    assert len(g._entries) == 1 and len(g._history) == 1
    cfg.sub.scale = 5.0
    assert_same(g(X, cfg), nested_attr(X, cfg))
    assert len(g._history) == 2             # one retrace for the change


class Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.scale = 2.0


def module_argument(x, m):
    return m.lin(x) * m.scale


def test_module_argument_plain_attribute():
    torch.manual_seed(0)
    m = Scaled()
    g = to_graph(module_argument, strict=True)
    with torch.no_grad():
        assert_same(g(X, m), module_argument(X, m))
        m.scale = 3.0
        assert_same(g(X, m), module_argument(X, m))


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.cfg = make_cfg()

    def forward(self, x):
        return x * self.cfg.sub.scale


CONFIG = make_cfg()


def global_nested(x):
    return x * CONFIG.sub.scale


def test_method_object_and_global_nested_attributes():
    net = Net()
    g = to_graph(net, strict=True)
    assert_same(g(X), net(X))
    net.cfg.sub.scale = 3.0                 # self.cfg.sub.scale, read by the trace
    assert_same(g(X), net(X))
    gg = to_graph(global_nested, strict=True)
    assert_same(gg(X), global_nested(X))
    CONFIG.sub.scale = 7.0
    assert_same(gg(X), global_nested(X))


def bumps_nested(x, cfg):
    cfg.sub.count += 1                  # a side effect a graph would not repeat
    return x + 1


def bumps_nested_through_self(x, cfg):
    cfg.sub.seen.append(1)
    return x * 2


@pytest.mark.parametrize("fn", [bumps_nested, bumps_nested_through_self])
def test_mutating_a_nested_argument_falls_back(fn):
    def fresh():
        c = make_cfg()
        c.sub.count = 0
        c.sub.seen = []
        return c
    eager_cfg, graph_cfg = fresh(), fresh()
    g = to_graph(fn)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for _ in range(2):
            assert_same(g(X, graph_cfg), fn(X, eager_cfg))
    assert graph_cfg.sub.count == eager_cfg.sub.count and \
        graph_cfg.sub.seen == eager_cfg.sub.seen       # once per call, not per trace
    assert any(issubclass(x.category, FallbackWarning) for x in w)
    with pytest.raises(ConversionError, match="argument"):
        to_graph(fn, strict=True)(X, fresh())


def test_tensor_and_scalar_arguments_check_no_objects():
    def f(x, s):
        return x * s
    g = to_graph(f, strict=True)
    g(X, 2.0)
    (entry,) = g._entries.values()
    assert entry.arguments_hold is None     # the fast path pays for no argument guard
    assert_same(g(X, 3.0), f(X, 3.0))
