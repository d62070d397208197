"""Tensors inside argument objects are graph inputs, and what the call writes to those
objects (an attribute rebound, a list appended to, a dict item set, in straight code or a
tensor branch/loop) is written back to the caller's objects after the graph runs, as eager
leaves them: the same objects and containers, real tensors (``runtime.argument_objects``).
Each case runs eager and converted on twin objects, call after call (sizes growing, values
changing), in strict and default mode; numbers and text the call sets (a counter) still
fall back."""
import collections
import types
import warnings

import pytest
import torch

from e2e_helpers import assert_same
from transpiler import ConversionError, FallbackWarning, to_graph


class State:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class Layer:
    def __init__(self, k):
        self.k = k


class TensorList(list):
    pass


def _x(step, n=3):
    g = torch.Generator().manual_seed(step)
    return torch.randn(1, n, generator=g)


def same_state(got, exp, path="state", seen=None):
    """Same classes, keys, lengths; tensors equal (and real torch.Tensors)."""
    seen = set() if seen is None else seen
    if id(exp) in seen:
        return
    seen.add(id(exp))
    if isinstance(exp, torch.Tensor):
        assert type(got) is type(exp), f"{path}: {type(got).__name__}"
        assert_same(got, exp, path)
        assert got.requires_grad == exp.requires_grad, f"{path}: requires_grad"
        return
    assert type(got) is type(exp), f"{path}: {type(got).__name__} != {type(exp).__name__}"
    if isinstance(exp, (list, tuple)):
        assert len(got) == len(exp), f"{path}: length {len(got)} != {len(exp)}"
        for i, (a, b) in enumerate(zip(got, exp)):
            same_state(a, b, f"{path}[{i}]", seen)
    elif isinstance(exp, dict):
        assert list(got) == list(exp), f"{path}: keys"
        for k in exp:
            same_state(got[k], exp[k], f"{path}[{k!r}]", seen)
    elif hasattr(exp, "__dict__"):
        assert list(vars(got)) == list(vars(exp)), f"{path}: attributes"
        for k in vars(exp):
            same_state(getattr(got, k), getattr(exp, k), f"{path}.{k}", seen)
    else:
        assert got == exp, f"{path}: {got!r} != {exp!r}"


def holders(obj):
    """The objects and containers reachable from ``obj`` (not tensors), by identity."""
    out, stack = [], [obj]
    while stack:
        v = stack.pop()
        if isinstance(v, torch.Tensor) or isinstance(v, (int, float, str, bool, type(None))):
            continue
        out.append(v)
        stack += list(v) if isinstance(v, (list, tuple)) else \
            list(v.values()) if isinstance(v, dict) else list(vars(v).values())
    return out


def check(fn, make, steps=4, strict=True):
    """``fn(x, *objects)`` converted against eager on twins made by ``make()``: results,
    the objects' state after each call, and the identity of the objects and containers
    that were there before each call (the call replaces tensors, not holders)."""
    g = to_graph(fn, strict=strict)
    eager, graph = make(), make()
    for step in range(steps):
        x = _x(step)
        before = [id(h) for h in holders(graph)]
        exp = fn(x, *eager)
        with warnings.catch_warnings():
            warnings.simplefilter("error", FallbackWarning)
            got = g(x, *graph)
        if any(exp is o for o in eager):
            assert got is graph[[exp is o for o in eager].index(True)]
        else:
            same_state(got, exp, "out")
        same_state(graph, eager)
        kept = {id(h) for h in holders(graph)}
        assert all(i in kept for i in before if i != id(graph)), "an object was replaced"
    return g


# ----------------------------------------------------------------- spellings of a write
def rebinds_with_cat(x, st):
    st.t = torch.cat([st.t, x], 0)
    return st.t.sum(0)


def appends_to_lists(x, cache):
    cache.ks.append(x * 2)
    cache.vs.append(x + 1)
    return torch.cat(cache.ks, 0).sum() + torch.cat(cache.vs, 0).mean()


def sets_dict_item(x, st):
    st.d["acc"] = st.d["acc"] + x
    st.d["last"] = x
    return st.d["acc"] * 2


def layers_updated(x, cache):
    for layer in cache.layers:
        layer.k = torch.cat([layer.k, x * len(layer.k)], 0)
    return cache.layers[-1].k.sum()


def list_subclass_items(x, tl):
    tl[0] = tl[0] * x
    tl.append(x)
    return tl[0]


def writes_in_tensor_branch(x, st):
    if x.sum() > 0:
        st.t = st.t + x
    else:
        st.t = st.t - x
    return st.t


def writes_in_tensor_while(x, st):
    i = 0
    while st.t.abs().sum() < 20.0 and i < 50:
        st.t = st.t * 2 + x.abs()
        i += 1
    return st.t


def returns_the_object(x, st):
    st.t = st.t * x
    return st


def flag_set(x, st):
    if not st.ready:            # a Python flag: the first call sets it
        st.ready = True
        st.t = torch.zeros_like(x)
    st.t = st.t + x
    return st.t


def new_object_appended(x, cache):
    cache.layers.append(Layer(x * 3))
    return sum(layer.k.sum() for layer in cache.layers)


def two_objects(x, src, dst):
    dst.t = src.t * x          # src read, dst written
    return dst.t + src.t


def ordered_dict_reordered(x, st):
    st.od["b"] = st.od["a"] + x          # an OrderedDict's order lives outside the dict
    st.od.move_to_end("a")
    return st.od["b"]


def namespace_written(x, ns):
    ns.h = torch.relu(ns.h + x) if ns.h is not None else x
    return ns.h


def make_state():
    return (State(t=torch.ones(2, 3)),)


def make_cache():
    return (State(ks=[torch.ones(1, 3)], vs=[torch.zeros(1, 3)]),)


def make_dict_state():
    return (State(d={"acc": torch.zeros(1, 3), "last": None}),)


def make_layers():
    return (State(layers=[Layer(torch.ones(2, 3)), Layer(torch.full((2, 3), 2.0))]),)


def make_list():
    return (TensorList([torch.ones(1, 3)]),)


CASES = [
    (rebinds_with_cat, make_state),
    (appends_to_lists, make_cache),
    (sets_dict_item, make_dict_state),
    (layers_updated, make_layers),
    (list_subclass_items, make_list),
    (writes_in_tensor_branch, make_state),
    (writes_in_tensor_while, make_state),
    (returns_the_object, make_state),
    (flag_set, lambda: (State(ready=False, t=None),)),
    (new_object_appended, make_layers),
    (two_objects, lambda: (State(t=torch.full((1, 3), 3.0)), State(t=None))),
    (ordered_dict_reordered, lambda: (State(od=collections.OrderedDict(a=torch.ones(1, 3))),)),
    (namespace_written, lambda: (types.SimpleNamespace(h=None),)),
]


@pytest.mark.parametrize("fn,make", CASES, ids=[c[0].__name__ for c in CASES])
def test_writes_to_argument_objects_convert(fn, make):
    check(fn, make, steps=3, strict=fn is not flag_set)   # (default mode: no warning)


def test_a_growing_dim_becomes_dynamic():
    """The attribute grown by ``torch.cat`` call after call: a second size makes its dim
    dynamic (as for a tensor argument), then one graph serves every length."""
    g = check(rebinds_with_cat, make_state, steps=6)
    assert g.cache_info().traces == 2


def test_another_object_of_the_same_structure():
    g = to_graph(rebinds_with_cat, strict=True)
    for rows in (2, 4):
        eager, graph = State(t=torch.ones(rows, 3)), State(t=torch.ones(rows, 3))
        for step in range(3):
            x = _x(step)
            assert_same(g(x, graph), rebinds_with_cat(x, eager))
            same_state(graph, eager)


def test_gradients_through_an_object_tensor():
    def f(x, st):
        st.h = torch.tanh(st.h.detach() @ st.w + x)
        return st.h.sum()

    def make():
        w = torch.linspace(-1, 1, 9).view(3, 3).requires_grad_()
        return State(w=w, h=torch.zeros(1, 3))
    g = to_graph(f, strict=True)
    eager, graph = make(), make()
    for step in range(3):
        x = _x(step)
        f(x, eager).backward()
        g(x, graph).backward()
        same_state(graph, eager)
        torch.testing.assert_close(graph.w.grad, eager.w.grad)


def test_aliased_tensor_and_inplace_write():
    """One tensor in two slots and as a tensor argument: one input; an in-place write
    through one name is seen through the others, as in eager."""
    def f(x, st):
        st.a.add_(x)
        st.b = st.b * 2         # st.b was st.a: the updated values
        return st.a + x

    def make():
        t = torch.ones(1, 3)
        return State(a=t, b=t)
    check(f, lambda: (make(),), steps=3)


def test_python_values_the_call_counts_fall_back():
    def bump(x, st):
        st.n += 1
        st.log.append("call")
        return x * st.n
    eager, graph = State(n=0, log=[]), State(n=0, log=[])
    g = to_graph(bump)
    for step in range(3):
        x = _x(step)
        exp = bump(x, eager)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            got = g(x, graph)
        assert step > 0 or any(issubclass(m.category, FallbackWarning) for m in w)
        assert_same(got, exp)
        assert (graph.n, graph.log) == (eager.n, eager.log)
    with pytest.raises(ConversionError, match="argument"):
        to_graph(bump, strict=True)(_x(0), State(n=0, log=[]))


def test_an_object_both_returned_and_stored_falls_back():
    def f(x, cache):
        layer = Layer(x)
        cache.layers.append(layer)
        return layer
    eager, graph = make_layers()[0], make_layers()[0]
    g = to_graph(f)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        got = g(_x(0), graph)
    assert any(issubclass(m.category, FallbackWarning) for m in w)
    exp = f(_x(0), eager)
    assert got is graph.layers[-1]
    same_state(graph, eager)
    same_state(got, exp)
