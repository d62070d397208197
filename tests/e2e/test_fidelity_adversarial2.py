"""Adversarial round 2 (issues 12 and 16): programs written by a helper who has not seen the
fixes, plus functions adapted from other public projects (attribution beside each).

Every program runs eagerly and through ``to_graph`` (default and strict) on inputs taking
different paths through one cached graph. The oracle (``faithful``):
- default mode equals eager (values, dtypes, exact types, object attributes,
  ``requires_grad``, gradients, printed text, argument mutation, external state), whether it
  ran a graph or fell back with a FallbackWarning; an exception eager raises is raised with
  the same type;
- strict mode equals eager too, or raises ConversionError (never anything else);
- ``convert=True``: strict mode must convert (a refusal is a finding of lower priority).
Findings are ``xfail(strict=True)`` with the reason starting ``BUG:`` (silently wrong or
crash) or ``REFUSAL:`` (falls back where a conversion should plainly work).
"""
import collections
import contextlib
import copy
import dataclasses
import functools
import io
import itertools
import math
import types
import warnings

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from transpiler import ConversionError, FallbackWarning, to_graph

CASES = []


def case(*inputs, xfail=None, convert=False, grad=False, state=None):
    """Register ``fn`` to run on every argument tuple in ``inputs``. ``state``: a function
    returning a fresh ``(fn, observe)`` pair instead (for programs with external state:
    globals, class attributes, closures); ``observe()`` is compared after every call."""
    def deco(fn):
        marks = [pytest.mark.xfail(strict=True, reason=xfail)] if xfail else []
        CASES.append(pytest.param(fn, inputs, convert, grad, state, id=fn.__name__,
                                  marks=marks))
        return fn
    return deco


# --- the oracle -------------------------------------------------------------------------

def same(got, exp, path="out"):
    if isinstance(exp, torch.Tensor):
        assert isinstance(got, torch.Tensor), f"{path}: {type(got).__name__} for a tensor"
        assert type(got) is type(exp), f"{path}: {type(got).__name__} != {type(exp).__name__}"
        assert got.dtype == exp.dtype, f"{path}: dtype {got.dtype} != {exp.dtype}"
        assert got.shape == exp.shape, f"{path}: shape {tuple(got.shape)} != {tuple(exp.shape)}"
        assert got.requires_grad == exp.requires_grad, f"{path}: requires_grad"
        if exp.is_floating_point() or exp.is_complex():
            torch.testing.assert_close(got.detach(), exp.detach(), rtol=1e-5, atol=1e-5,
                                       equal_nan=True, msg=lambda m: f"{path}: {m}")
        else:
            assert torch.equal(got, exp), f"{path}: {got} != {exp}"
        return
    if isinstance(exp, (bool, int, float)) and type(got) is not type(exp):
        # the fuzzer's rule: a 0-d plain tensor may stand for a Python number of its kind
        assert type(got) is torch.Tensor and got.dim() == 0, \
            f"{path}: {type(got).__name__} {got!r} for {type(exp).__name__} {exp!r}"
        if isinstance(exp, bool):
            assert got.dtype == torch.bool and bool(got) == exp, f"{path}: {got} != {exp}"
        elif isinstance(exp, int):
            assert not got.is_floating_point() and got.dtype != torch.bool
            assert int(got) == exp, f"{path}: {got} != {exp}"
        else:
            assert got.is_floating_point(), f"{path}: float stood for by {got.dtype}"
            assert math.isclose(float(got), exp, rel_tol=1e-5, abs_tol=1e-5), \
                f"{path}: {got} != {exp}"
        return
    if "<locals>" in type(exp).__qualname__:  # a class made per call: one per call in eager
        assert type(got).__qualname__ == type(exp).__qualname__, f"{path}: local class"
    else:
        assert type(got) is type(exp), \
            f"{path}: {type(got).__name__} != {type(exp).__name__}"
    if isinstance(exp, float):
        assert (math.isnan(got) and math.isnan(exp)) or \
            math.isclose(got, exp, rel_tol=1e-5, abs_tol=1e-5), f"{path}: {got} != {exp}"
    elif isinstance(exp, (list, tuple)):
        assert len(got) == len(exp), f"{path}: length {len(got)} != {len(exp)}"
        for i, (a, b) in enumerate(zip(got, exp)):
            same(a, b, f"{path}[{i}]")
    elif isinstance(exp, dict):
        assert list(got) == list(exp), f"{path}: keys {list(got)} != {list(exp)}"
        for k in exp:
            same(got[k], exp[k], f"{path}[{k!r}]")
        if isinstance(exp, collections.defaultdict):
            assert got.default_factory is exp.default_factory, f"{path}: default_factory"
    elif isinstance(exp, (set, frozenset, str, bytes, type(None), torch.Size, torch.dtype,
                          torch.device, complex, range, types.FunctionType)):
        assert got == exp, f"{path}: {got!r} != {exp!r}"
    elif isinstance(exp, np.ndarray):
        assert got.dtype == exp.dtype and np.allclose(got, exp), f"{path}: {got} != {exp}"
    elif isinstance(exp, np.generic):
        assert np.isclose(got, exp), f"{path}: {got} != {exp}"
    elif isinstance(exp, nn.Module):
        same(dict(exp.state_dict()), dict(got.state_dict()), f"{path}.state_dict()")
    elif hasattr(exp, "__dict__"):
        same(dict(vars(got)), dict(vars(exp)), f"{path}.__dict__")
    else:
        assert got == exp, f"{path}: {got!r} != {exp!r}"


def _leaves(v, seen=None):
    """Tensors reachable from v (containers and object attributes)."""
    seen = set() if seen is None else seen
    if id(v) in seen:
        return []
    seen.add(id(v))
    if isinstance(v, torch.Tensor):
        return [v]
    if isinstance(v, dict):
        return [t for x in v.values() for t in _leaves(x, seen)]
    if isinstance(v, (list, tuple, set)):
        return [t for x in v for t in _leaves(x, seen)]
    if isinstance(v, nn.Module):
        return list(v.parameters())
    if hasattr(v, "__dict__") and not isinstance(v, type):
        return [t for x in vars(v).values() for t in _leaves(x, seen)]
    return []


def _run(fn, args):
    """(result, exception, stdout, fallback warnings) of ``fn(*args)``."""
    buf = io.StringIO()
    out = err = None
    with contextlib.redirect_stdout(buf), warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        try:
            out = fn(*args)
        except Exception as e:  # noqa: BLE001 - the oracle compares exceptions too
            err = e
    fell = [x for x in w if issubclass(x.category, FallbackWarning)]
    return out, err, buf.getvalue(), fell


def _backward(out, args):
    outs = [t for t in _leaves(out) if t.requires_grad and t.is_floating_point()]
    if not outs:
        return None
    sum(t.sum() for t in outs).backward()
    return [t.grad for t in _leaves(args) if t.is_leaf and t.requires_grad]


def faithful(fn, inputs, convert=False, grad=False, state=None):
    """Eager vs default vs strict on every input, one converted function per mode."""
    if state is not None:
        eager_fn, eager_obs = state()
    else:
        eager_fn, eager_obs = fn, (lambda: None)
    runs = []
    for strict in (False, True):
        if state is not None:
            prog, obs = state()
        else:
            prog, obs = fn, (lambda: None)
        runs.append((strict, to_graph(prog, strict=strict), obs))
    kept = []  # (graph result, eager result): compared again after every call
    for args in inputs:
        eargs = copy.deepcopy(args)
        exp, eerr, eout, _ = _run(eager_fn, eargs)
        egrads = _backward(exp, eargs) if grad and eerr is None else None
        estate = eager_obs()
        for strict, g, obs in runs:
            gargs = copy.deepcopy(args)
            got, gerr, gout, fell = _run(g, gargs)
            tag = "strict" if strict else "default"
            if strict and isinstance(gerr, ConversionError):
                assert not convert, f"strict refused: {gerr}"
                continue
            if eerr is not None:
                assert type(gerr) is type(eerr), \
                    f"{tag}: eager raised {eerr!r}, graph raised {gerr!r}"
                continue
            assert gerr is None, f"{tag}: eager ran, graph raised {type(gerr).__name__}: {gerr}"
            if convert and not strict:
                assert not fell, f"default fell back: {fell[0].message}"
            same(got, exp, f"{tag} out")
            same(gargs, eargs, f"{tag} args")
            assert gout == eout, f"{tag} printed {gout!r}, eager {eout!r}"
            same(obs(), estate, f"{tag} state")
            kept.append((got, exp, tag))
            if egrads is not None:
                ggrads = _backward(got, gargs)
                assert ggrads is not None, f"{tag}: no gradient path"
                same(ggrads, egrads, f"{tag} grads")
        for got, exp, tag in kept:
            same(got, exp, f"{tag} earlier result, after later calls")


def pytest_generate_tests(metafunc):
    if metafunc.function.__name__ == "test_program":
        metafunc.parametrize("fn,inputs,convert,grad,state", CASES)


def test_program(fn, inputs, convert, grad, state):
    faithful(fn, inputs, convert=convert, grad=grad, state=state)


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
    yield


T = torch.tensor


def R(*shape, seed=0, grad=False):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).requires_grad_(grad)


# =========================================================================================
# A. Objects, dataclasses, dict subclasses returned or kept
# =========================================================================================

@dataclasses.dataclass
class Out:
    loss: torch.Tensor
    steps: int = 0
    extra: list = dataclasses.field(default_factory=list)


@case((T([1.0, 2.0]),), (T([-3.0, 1.0]),), (T([0.5, -4.0]),))
def a_dataclass_built_in_branch(x):
    if x.sum() > 0:
        o = Out(x * 2, 1)
    else:
        o = Out(x - 1, 2)
    o.extra.append(x.mean())
    return o


@case((T([3.0, 1.0]),), (T([0.2, 0.1]),))
def a_dataclass_field_counted_in_while(x):
    o = Out(x)
    while o.loss.sum() > 1:
        o.loss = o.loss / 2
        o.steps += 1
    return o


class Holder:
    def __init__(self, t):
        self.t = t
        self.history = []


@case((T([1.0, 2.0]),), (T([-1.0, -2.0]),))
def a_plain_object_history_in_loop(x):
    h = Holder(x)
    for i in range(3):
        if h.t.sum() > 0:
            h.t = h.t - 1
            h.history.append(i)
    return h.t.sum(), h


class ModelOutput(collections.OrderedDict):
    """Hugging Face ModelOutput style: keys and attributes."""
    def __getattr__(self, k):
        try:
            return self[k]
        except KeyError:
            raise AttributeError(k)

    def to_tuple(self):
        return tuple(self.values())


@case((T([[1.0, 2.0]]),), (T([[-1.0, 0.5]]),))
def a_model_output_subclass(x):
    out = ModelOutput()
    out["logits"] = x * 3
    if x.sum() > 0:
        out["hidden"] = x.relu()
    else:
        out["hidden"] = x.abs()
    return out


@case((T([1.0, 2.0]),), (T([-1.0, 2.0]),))
def a_model_output_to_tuple(x):
    out = ModelOutput(a=x + 1)
    if x[0] > 0:
        out["b"] = x * 2
    return out.to_tuple()


@case((T([1.0, -2.0, 3.0]),), (T([-1.0, -2.0, 0.0]),))
def a_defaultdict_in_row_loop(x):
    d = collections.defaultdict(list)
    for v in x:
        if v > 0:
            d["pos"].append(v * 2)
        else:
            d["neg"].append(v)
    return d


class AttrDict(dict):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.note = "made"


@case((T([1.0]),), (T([-1.0]),))
def a_attrdict_with_attribute(x):
    d = AttrDict(x=x)
    if x.sum() > 0:
        d["y"] = x + 1
        d.note = "pos"
    return d


class Cache:
    """transformers DynamicCache style: lists of key/value tensors per layer."""
    def __init__(self):
        self.key_cache = []
        self.value_cache = []
        self.seen_tokens = 0

    def update(self, k, v, layer):
        if len(self.key_cache) <= layer:
            self.key_cache.append(k)
            self.value_cache.append(v)
        else:
            self.key_cache[layer] = torch.cat([self.key_cache[layer], k], dim=-2)
            self.value_cache[layer] = torch.cat([self.value_cache[layer], v], dim=-2)
        if layer == 0:
            self.seen_tokens += k.shape[-2]
        return self.key_cache[layer], self.value_cache[layer]


@case((R(1, 2, 4),), (R(1, 2, 4, seed=1),))
def a_dynamic_cache_returned(x):
    cache = Cache()
    for layer in range(2):
        k, v = cache.update(x * (layer + 1), x - layer, layer)
    k, v = cache.update(x, x, 0)
    if k.sum() > 0:
        out = k.mean()
    else:
        out = v.mean()
    return out, cache


@case((T([1.0, 2.0]), Holder(T([0.0]))), (T([-1.0, 2.0]), Holder(T([5.0]))))
def a_argument_object_attribute_set_in_branch(x, h):
    if x[0] > 0:
        h.t = x * 2
        h.history.append("set")
    return x + 1


@case((T([1.0, 2.0]), []), (T([9.0, 2.0]), [T(1.0)]))
def a_argument_list_appended_in_while(x, log):
    while x.sum() < 10:
        x = x * 2
        log.append(x.sum())
    return x


@case((T([1.0, 2.0]), {"a": T([0.0])}), (T([-1.0, 2.0]), {"a": T([1.0])}))
def a_argument_dict_setdefault_pop(x, d):
    if x[0] > 0:
        d.setdefault("b", x * 3)
        v = d.pop("a")
    else:
        v = d.pop("a", x)
    return v + 1


@case((T([1.0, 2.0]),), (T([-1.0, 2.0]),))
def a_dict_popitem_in_branch(x):
    d = {"a": x, "b": x * 2}
    if x[0] > 0:
        k, v = d.popitem()
    else:
        k, v = "none", x
    return k, v, d


Point = collections.namedtuple("Point", "x y")


@case((T([1.0]),), (T([-1.0]),))
def a_namedtuple_replace_in_branch(x):
    p = Point(x, x * 2)
    if x.sum() > 0:
        p = p._replace(y=x * 10)
    return p


@case((T([1.0, 3.0]),), (T([-1.0, 3.0]),))
def a_simple_namespace(x):
    ns = types.SimpleNamespace(a=x, flag=False)
    if x[0] > 0:
        ns.flag = True
        ns.b = x.sum()
    return ns


class Acc:
    def __init__(self):
        self.total = 0.0
        self.n = 0

    def __iadd__(self, v):
        self.total = self.total + v
        self.n += 1
        return self


@case((T([1.0, 2.0, 3.0]),), (T([-1.0, 2.0, -3.0]),))
def a_iadd_custom_object_in_row_loop(x):
    acc = Acc()
    for v in x:
        if v > 0:
            acc += v
    return acc.total, acc.n


class Temp:
    def __init__(self):
        self._c = 0.0
        self.sets = 0

    @property
    def c(self):
        return self._c

    @c.setter
    def c(self, v):
        self.sets += 1
        self._c = v


@case((T([1.0, 2.0]),), (T([-1.0, 2.0]),))
def a_property_setter_in_branch(x):
    t = Temp()
    if x[0] > 0:
        t.c = x.sum()
    else:
        t.c = x.mean()
        t.c = t.c * 2
    return t.c, t.sets


@case((T([1.0, 2.0]),), (T([-1.0, 2.0]),))
def a_frozen_dataclass_returned(x):
    @dataclasses.dataclass(frozen=True)
    class F2:
        a: torch.Tensor
        tag: str
    if x[0] > 0:
        return F2(x, "pos")
    return F2(-x, "neg")


@case((T([1.0, -2.0, 3.0]),), (T([-1.0, -2.0, -3.0]),))
def a_set_of_indices_in_row_loop(x):
    seen = set()
    for i, v in enumerate(x):
        if v > 0:
            seen.add(i)
    return len(seen), sorted(seen)


@case((T([2.0, 1.0]),), (T([-2.0, 1.0]),))
def a_tuple_of_object_and_none(x):
    h = Holder(x)
    if x[0] > 0:
        h.t = x * 2
        return h, None
    return h, x


# =========================================================================================
# B. The traced tensor showing through: type, class, isinstance, .type(), .new, introspection
# =========================================================================================

@case((T([1.0, 2.0]),), (T([-1.0, 2.0]),))
def b_type_name_in_branch(x):
    name = type(x).__name__
    if x[0] > 0:
        y = x * 2
    else:
        y = x
    return y, name, x.__class__.__name__, type(y) is torch.Tensor


@case((T([1.0, 2.0]),), (T([1, 2], dtype=torch.int64),))
def b_type_string(x):
    s = x.type()
    if s == "torch.FloatTensor":
        return x * 2, s
    return x + 1, s


@case((T([1.0, 2.0]),), (T([-1.0, 2.0]),))
def b_type_cast_by_name(x):
    y = x.type("torch.DoubleTensor")
    if y.sum() > 0:
        y = y * 2
    return y, x.type(torch.int32)


@case((T([1.0, 2.0]),), (T([-1.0, 2.0]),))
def b_new_with_size(x):
    a = x.new(torch.Size([2, 3])).zero_()
    b = x.new_zeros(3)
    c = x.new_tensor([1, 2])
    d = x.new_full((2,), 7)
    if x.sum() > 0:
        a = a + 1
    return a, b, c, d


@case((T([1.0, 2.0]),), (T([[1.0], [2.0]]),))
def b_introspection(x):
    info = (x.dim(), x.ndim, x.ndimension(), x.numel(), x.nelement(), x.element_size(),
            x.is_cuda, x.device.type, str(x.device), x.is_floating_point(),
            x.is_contiguous(), x.stride(), x.layout, x.is_sparse, x.is_leaf,
            x.requires_grad, x.grad_fn is None, torch.is_tensor(x), x.dtype.is_floating_point,
            x.storage_offset(), x.is_complex(), x.is_quantized, x.itemsize, x.nbytes)
    if x.sum() > 0:
        x = x + 1
    return x, info


@case((T([1.0, 2.0]),), (T([-1.0, 2.0]),))
def b_isinstance_dispatch(x):
    def conv(v):
        if isinstance(v, torch.Tensor):
            return v * 2
        if isinstance(v, (int, float)):
            return torch.tensor(float(v))
        raise TypeError(type(v))
    y = conv(x)
    if y.sum() > 0:
        y = conv(y.sum().item()) + y
    return y


@functools.singledispatch
def _sd(v):
    return "other"


@_sd.register
def _(v: torch.Tensor):
    return v * 3


@case((T([1.0, 2.0]),), (T([-1.0, -2.0]),))
def b_singledispatch_on_tensor(x):
    y = _sd(x)
    if y.sum() > 0:
        y = _sd(y)
    return y


@case((T([1.0, 2.0]),), (T([-1.0, 2.0]),))
def b_type_in_dict_lookup(x):
    handlers = {torch.Tensor: lambda v: v + 1, float: lambda v: v * 2}
    y = handlers[type(x)](x)
    while y.sum() < 5:
        y = handlers[type(y)](y)
    return y


@case((T([1.0, 2.0]),), (T([-1.0, 2.0]),))
def b_repr_of_dtype_shape(x):
    s = f"{x.dtype}|{tuple(x.shape)}|{x.size()}|{x.shape[0]}"
    if x[0] > 0:
        s = s + "|pos"
    return s


@case((T([1.0, 2.0]),), (T([-1.0, 2.0]),))
def b_dtype_compare_branch(x):
    if x.dtype == torch.float32 and x.is_floating_point():
        x = x.double()
    if x.sum() > 0:
        x = x.half().float()
    return x


@case((T([1.0, 2.0], requires_grad=True),), (T([-1.0, 2.0], requires_grad=True),), grad=True)
def b_requires_grad_read_in_branch(x):
    y = x * 2
    flag = y.requires_grad
    if y.sum() > 0:
        y = y.detach() + 1
    return y, flag, y.requires_grad, y.is_leaf


@case((T([1.0, 2.0]),), (T([-1.0, 2.0]),))
def b_hasattr_and_getattr(x):
    n = [a for a in ("shape", "grad", "names", "foo") if hasattr(x, a)]
    g = getattr(x, "grad", "none")
    if x.sum() > 0:
        x = x + 1
    return x, n, g


# =========================================================================================
# C. Views kept across in-place writes
# =========================================================================================

@case((T([[1.0, 2.0], [3.0, 4.0]]),), (T([[-1.0, 2.0], [3.0, 4.0]]),))
def c_row_view_then_write_in_branch(x):
    x = x.clone()
    row = x[0]
    if x.sum() > 5:
        x[0] = 100.0
    else:
        x[0, 1] = -5.0
    return row, x


@case((T([1.0, 2.0, 3.0, 4.0]),), (T([5.0, 6.0, 7.0, 8.0]),))
def c_flat_view_across_while(x):
    x = x.clone().view(2, 2)
    flat = x.view(-1)
    while x.sum() < 40:
        x.mul_(2)
    return flat


@case((T([[1.0, 2.0], [3.0, 4.0]]),), (T([[9.0, 2.0], [3.0, 4.0]]),))
def c_unbind_views_then_inplace(x):
    x = x.clone()
    a, b = x.unbind(0)
    if x[0, 0] > 5:
        x.mul_(2)
    return a, b


@case((T([[1.0, 2.0], [3.0, 4.0]]),), (T([[-1.0, 2.0], [3.0, 4.0]]),))
def c_transpose_view_write_in_cond(x):
    x = x.clone()
    t = x.t()
    if x[0, 0] > 0:
        x[0, 1] = 9.0
    return t, t.is_contiguous()


@case((T([[1.0, 2.0], [3.0, -4.0], [5.0, 6.0]]),), (T([[-1.0, 2.0], [3.0, 4.0], [-5.0, 6.0]]),))
def c_rows_collected_then_base_written(x):
    x = x.clone()
    rows = []
    for r in x:
        rows.append(r)
        if r.sum() < 0:
            r.zero_()
    x.add_(1)
    return rows


@case((T([[1.0, 2.0], [3.0, 4.0]]),), (T([[-1.0, 2.0], [3.0, -4.0]]),))
def c_diagonal_view_fill(x):
    x = x.clone()
    d = x.diagonal()
    if x.sum() > 0:
        x.fill_diagonal_(0.0)
    return d


@case((T([1.0, 2.0]), T([3.0, 4.0]), torch.zeros(2)), (T([-1.0, 2.0]), T([3.0, 4.0]), torch.zeros(2)))
def c_out_argument_in_branch(a, b, out):
    if a[0] > 0:
        torch.add(a, b, out=out)
    else:
        torch.mul(a, b, out=out)
    return out * 1


@case((T([[1.0, 2.0], [3.0, 4.0]]),), (T([[-1.0, 2.0], [3.0, 4.0]]),))
def c_inplace_on_argument_slice(x):
    if x[0, 0] > 0:
        x[:, 0] += 1
    else:
        x[1:] *= 2
    return x.sum()


@case((T([3.0, -2.0]),), (T([-3.0, -2.0]),))
def c_clamp_argument_in_while(x):
    while x.min() < 0:
        x.clamp_(min=-1.0)
        x.add_(0.5)
    return x


@case((T([1.0, 2.0, 3.0, 4.0]),), (T([-1.0, 2.0, 3.0, 4.0]),))
def c_narrow_view_inplace_on_view(x):
    x = x.clone()
    n = x.narrow(0, 1, 2)
    if x[0] > 0:
        n.mul_(10)
    return x


@case((T([1.0, 2.0]),), (T([-1.0, 2.0]),))
def c_expand_view_sees_base_write(x):
    x = x.clone()
    e = x.unsqueeze(0).expand(3, 2)
    if x[0] > 0:
        x[1] = 50.0
    return e


@case((T([5.0, 1.0, 3.0]),), (T([2.0, 8.0, 4.0]),))
def c_taken_list_of_views_in_while(x):
    work = x.clone()
    taken = []
    while work.min() < 100:
        j = work.argmin()
        taken.append(work[j])
        work[j] = 100.0
    return taken


@case((T([1.0, 2.0]),), (T([-1.0, 2.0]),))
def c_detach_shares_storage(x):
    x = x.clone()
    d = x.detach()
    if x[0] > 0:
        d.add_(10)
    return x


@case((T([[1.0, 2.0], [3.0, 4.0]]),), (T([[-1.0, 2.0], [3.0, 4.0]]),))
def c_reshape_view_written_through_view(x):
    x = x.clone()
    v = x.reshape(4)
    if v[0] > 0:
        v[3] = -1.0
    return x, v


# =========================================================================================
# D. Side effects reached indirectly inside tensor branches and loops
# =========================================================================================

class Counting:
    def __init__(self):
        self.enters = 0
        self.exits = 0

    def __enter__(self):
        self.enters += 1
        return self

    def __exit__(self, *exc):
        self.exits += 1
        return False


@case((T([1.0]), Counting()), (T([40.0]), Counting()))
def d_context_manager_counting_in_while(x, cm):
    while x.sum() < 50:
        with cm:
            x = x * 2
    return x


class Swallow:
    def __enter__(self):
        return self

    def __exit__(self, typ, val, tb):
        return typ is ValueError


@case((T([1.0]),), (T([-1.0]),))
def d_exit_swallows_error_raised_in_branch(x):
    y = x + 1
    with Swallow():
        if x.sum() < 0:
            raise ValueError("neg")
        y = y * 10
    return y


def _nonlocal_counter():
    calls = 0

    def f(x):
        nonlocal calls

        def bump(v):
            nonlocal calls
            calls += 1
            return v * 2
        while x.sum() < 20:
            x = bump(x)
        return x, calls
    return f, lambda: calls


@case((T([1.0]),), (T([3.0]),), (T([30.0]),), state=_nonlocal_counter)
def d_nonlocal_counter_in_inner_function(x):
    pass


class Watched:
    def __init__(self, t):
        self._t = t
        self.reads = 0

    @property
    def t(self):
        self.reads += 1
        return self._t


@case((T([1.0]), Watched(T([2.0]))), (T([30.0]), Watched(T([2.0]))))
def d_property_getter_counts_in_while(x, w):
    while x.sum() < 20:
        x = x * w.t
    return x


class CountingDescriptor:
    def __get__(self, obj, objtype=None):
        obj.gets = getattr(obj, "gets", 0) + 1
        return obj._scale


class Scaled:
    scale = CountingDescriptor()

    def __init__(self, s):
        self._scale = s


@case((T([1.0]), Scaled(2.0)), (T([-1.0]), Scaled(2.0)))
def d_descriptor_get_in_branch(x, s):
    if x.sum() > 0:
        x = x * s.scale
    return x


class Logger:
    def __init__(self):
        self.lines = []

    def log(self, msg):
        self.lines.append(msg)


@case((T([1.0]), Logger()), (T([30.0]), Logger()))
def d_method_call_logs_in_while(x, logger):
    i = 0
    while x.sum() < 20:
        x = x * 2
        i += 1
        logger.log(f"step {i}")
    return x


def _gen(n):
    for i in range(n):
        yield i * 2


@case((T([1.0]),), (T([-1.0]),))
def d_generator_helper_consumed_in_branch(x):
    it = _gen(5)
    a = next(it)
    if x.sum() > 0:
        b = next(it)
        c = next(it)
    else:
        b = 0
        c = 0
    return x * (a + b + c), list(it)


_IT = iter(range(100))


def _global_iterator_fn(x):
    while x.sum() < 20:
        x = x * 2 + next(_IT)
    return x


def test_d_global_iterator_next_in_while():
    global _IT
    _IT = iter(range(100))
    exp = (_global_iterator_fn(T([1.0])), next(_IT))
    _IT = iter(range(100))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = to_graph(_global_iterator_fn)(T([1.0]))
    same((got, next(_IT)), exp)


@case((T([1.0]),), (T([30.0]),))
def d_itertools_count_in_while(x):
    c = itertools.count()
    while x.sum() < 20:
        x = x * 2
        k = next(c)
    return x, next(c)


_GLOBAL_HITS = 0


def _global_counter_fn(x):
    global _GLOBAL_HITS
    if x.sum() > 0:
        _GLOBAL_HITS += 1
        x = x * 2
    return x


def test_d_global_counter_in_branch():
    global _GLOBAL_HITS
    inputs = (T([1.0]), T([-1.0]), T([2.0]))
    _GLOBAL_HITS = 0
    exp = [(_global_counter_fn(x), _GLOBAL_HITS) for x in inputs]
    for strict in (False, True):
        _GLOBAL_HITS = 0
        g = to_graph(_global_counter_fn, strict=strict)
        for x, (e, n) in zip(inputs, exp):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    got = g(x)
            except ConversionError:
                assert strict and _GLOBAL_HITS == 0
                continue
            same((got, _GLOBAL_HITS), (e, n))


class Numbers:
    def __init__(self):
        self.i = 0

    def __iter__(self):
        return self

    def __next__(self):
        self.i += 1
        return self.i - 1


@case((T([1.0]), Numbers()), (T([2.0]), Numbers()), (T([25.0]), Numbers()))
def d_custom_iterator_next_in_while(x, it):
    while x.sum() < 20:
        x = x * 2 + next(it)
    return x


def _class_counter_state():
    class Layer:
        calls = 0

        def __call__(self, v):
            type(self).calls += 1
            return v + 1
    layer = Layer()

    def f(x):
        while x.sum() < 5:
            x = layer(x)
        return x
    return f, lambda: Layer.calls


@case((T([1.0]),), (T([3.0]),), (T([9.0]),), state=_class_counter_state)
def d_class_level_counter_in_while(x):
    pass


@case((T([1.0, 2.0]), {}), (T([-1.0, 2.0]), {"n": 5}))
def d_dict_setdefault_counter_in_row_loop(x, stats):
    for v in x:
        if v > 0:
            stats["n"] = stats.setdefault("n", 0) + 1
    return x * 2


@case((T([1.0]),), (T([-1.0]),))
def d_lru_cached_helper_in_branch(x):
    @functools.lru_cache(maxsize=None)
    def table(n):
        return torch.arange(n, dtype=torch.float32)
    if x.sum() > 0:
        y = x + table(3).sum()
    else:
        y = x - table(2).sum()
    return y, table.cache_info().currsize


def _random_state():
    import random
    rng = random.Random(0)

    def f(x):
        while x.sum() < 20:
            x = x * 2 + rng.random()
        return x
    return f, lambda: rng.getstate()[1][:3]


@case((T([1.0]),), (T([5.0]),), state=_random_state)
def d_python_random_in_while(x):
    pass


@case((T([1.0]),), (T([30.0]),))
def d_torch_random_in_while(x):
    torch.manual_seed(1)
    while x.sum() < 20:
        x = x * 2 + torch.rand(1)
    return x, torch.rand(1)


@case((T([1.0]),), (T([-1.0]),))
def d_torch_generator_in_branch(x):
    g = torch.Generator().manual_seed(3)
    if x.sum() > 0:
        x = x + torch.randn(1, generator=g)
    return x, torch.randn(1, generator=g)


# =========================================================================================
# E. Argument attributes read by the trace and changed later (guards)
# =========================================================================================

class Cfg:
    def __init__(self, scale, sub=None, on=True):
        self.scale = scale
        self.sub = sub
        self.on = on


def _guard_cfg_state():
    cfg = Cfg(2.0, Cfg(3.0))
    n = [0]

    def f(x):
        n[0] += 1
        if n[0] == 2:
            cfg.scale = 5.0
        if n[0] == 3:
            cfg.sub.scale = -1.0
        if x.sum() > 0:
            return x * cfg.scale
        return x * cfg.sub.scale
    return f, lambda: None


@case((T([1.0]),), (T([1.0]),), (T([-1.0]),), state=_guard_cfg_state)
def e_cfg_changed_between_calls_via_closure(x):
    pass


@case((T([1.0]), Cfg(2.0, Cfg(3.0))), (T([1.0]), Cfg(5.0, Cfg(3.0))),
      (T([-1.0]), Cfg(5.0, Cfg(-1.0))), (T([-1.0]), Cfg(5.0, Cfg(-1.0), on=False)))
def e_cfg_argument_nested(x, cfg):
    if not cfg.on:
        return x
    if x.sum() > 0:
        return x * cfg.scale
    return x * cfg.sub.scale


def _mutated_arg_state():
    cfg = Cfg(2.0)
    calls = [0]

    def f(x, c):
        return x * c.scale

    def g(x):
        calls[0] += 1
        cfg.scale = float(calls[0])
        return to_graph_cache(f)(x, cfg)
    return g, lambda: None


@functools.lru_cache(maxsize=None)
def to_graph_cache(f):
    return to_graph(f)


def _same_cfg_object_mutated():
    """One cfg object passed on every call, its attribute changed between calls."""
    cfg = Cfg(2.0, Cfg(3.0))
    box = {}

    def f(x, c):
        if x.sum() > 0:
            return x * c.scale + c.sub.scale
        return x

    def run(x):
        k = box.setdefault("n", 0)
        box["n"] = k + 1
        cfg.scale = [2.0, 5.0, 7.0][k % 3]
        cfg.sub.scale = [3.0, 3.0, -4.0][k % 3]
        return box.setdefault("g", box.get("mode", f))(x, cfg)
    return run, box


def e_same_object_mutated_between_calls():
    for strict in (False, True):
        cfg = Cfg(2.0, Cfg(3.0))

        def f(x, c):
            if x.sum() > 0:
                return x * c.scale + c.sub.scale
            return x
        g = to_graph(f, strict=strict)
        x = T([1.0])
        for s, t in ((2.0, 3.0), (5.0, 3.0), (5.0, -4.0)):
            cfg.scale, cfg.sub.scale = s, t
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                got = g(x, cfg)
            same(got, f(x, cfg))


def test_e_same_object_mutated_between_calls():
    e_same_object_mutated_between_calls()


def test_e_list_argument_values_changed():
    for strict in (False, True):
        def f(x, ws):
            for w in ws:
                if x.sum() > 0:
                    x = x * w
            return x
        g = to_graph(f, strict=strict)
        ws = [1.0, 2.0]
        x = T([1.0])
        same(g(x, ws), f(x, ws))
        ws[1] = 10.0
        same(g(x, ws), f(x, ws))
        ws.append(3.0)
        same(g(x, ws), f(x, ws))


def test_e_dict_argument_value_changed():
    for strict in (False, True):
        def f(x, opts):
            if x.sum() > opts["thr"]:
                return x * opts["scale"]
            return x
        g = to_graph(f, strict=strict)
        opts = {"thr": 0.0, "scale": 2.0}
        x = T([1.0])
        same(g(x, opts), f(x, opts))
        opts["scale"] = -3.0
        same(g(x, opts), f(x, opts))
        opts["thr"] = 5.0
        same(g(x, opts), f(x, opts))


def test_e_module_attribute_changed():
    class Norm(nn.Module):
        def __init__(self):
            super().__init__()
            self.eps = 1e-5
            self.w = nn.Parameter(torch.ones(2))

        def forward(self, x):
            if x.abs().sum() > 0:
                return x / (x.norm() + self.eps) * self.w
            return x
    for strict in (False, True):
        m = Norm()
        g = to_graph(m, strict=strict)
        x = T([3.0, 4.0])
        same(g(x), m(x))
        m.eps = 10.0
        same(g(x), m(x))
        with torch.no_grad():
            m.w.mul_(3)
        same(g(x), m(x))


def test_e_module_train_eval_switch():
    class Drop(nn.Module):
        def __init__(self):
            super().__init__()
            self.p = 0.5

        def forward(self, x):
            if self.training and x.sum() > 0:
                return x * 0.0
            return x + 1
    for strict in (False, True):
        m = Drop()
        g = to_graph(m, strict=strict)
        x = T([1.0])
        same(g(x), m(x))
        m.eval()
        same(g(x), m(x))
        m.train()
        same(g(x), m(x))


def test_e_closure_cell_and_function_attribute_changed():
    for strict in (False, True):
        scale = 2.0

        def f(x):
            if x.sum() > 0:
                return x * scale * f.extra
            return x
        f.extra = 1.0
        g = to_graph(f, strict=strict)
        x = T([1.0])
        same(g(x), f(x))
        scale = 7.0  # noqa: F841 - read through the closure cell
        same(g(x), f(x))


def _self_attr_fn(x):
    if x.sum() > 0:
        return x * _self_attr_fn.extra
    return x


def test_e_function_attribute_changed():
    for strict in (False, True):
        _self_attr_fn.extra = 1.0
        g = to_graph(_self_attr_fn, strict=strict)
        x = T([1.0])
        same(g(x), _self_attr_fn(x))
        _self_attr_fn.extra = -1.0
        same(g(x), _self_attr_fn(x))


def test_e_mutable_default_argument_changed():
    for strict in (False, True):
        def f(x, ws=[1.0, 2.0]):  # noqa: B006 - the point of the test
            if x.sum() > 0:
                return x * ws[-1]
            return x
        g = to_graph(f, strict=strict)
        x = T([1.0])
        same(g(x), f(x))
        f.__defaults__[0].append(9.0)
        same(g(x), f(x))


def test_e_requires_grad_flip_between_calls():
    for strict in (False, True):
        def f(x):
            if x.sum() > 0:
                return x * 2, x.requires_grad
            return x, x.requires_grad
        g = to_graph(f, strict=strict)
        x = T([1.0])
        same(g(x), f(x))
        x2 = T([1.0], requires_grad=True)
        same(g(x2), f(x2))


@case((T([1.0]), "sum"), (T([1.0]), "mean"), (T([-1.0, 2.0]), "none"))
def e_string_mode_argument(x, reduction):
    y = x * 2
    if y.sum() > 0:
        y = y + 1
    if reduction == "sum":
        return y.sum()
    if reduction == "mean":
        return y.mean()
    return y


@case((T([1.0]), torch.float64), (T([1.0]), torch.int32), (T([-1.0]), torch.float16))
def e_dtype_argument(x, dt):
    if x.sum() > 0:
        return x.to(dt) * 2
    return x.to(dt)


# =========================================================================================
# F. Crashes: attention modules, growing loop state, nested attributes, recursion
# =========================================================================================

def test_f_multihead_attention_need_weights_false():
    torch.manual_seed(0)
    m = nn.MultiheadAttention(8, 2, batch_first=True).eval()

    def f(q):
        out, w = m(q, q, q, need_weights=False)
        if out.sum() > 0:
            out = out * 2
        return out, w
    faithful(f, [(R(1, 3, 8),), (R(1, 3, 8, seed=1),)])


def test_f_transformer_encoder_layer():
    torch.manual_seed(0)
    m = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0,
                                   batch_first=True).eval()
    faithful(m, [(R(2, 3, 8),), (R(2, 3, 8, seed=1),)])


def test_f_transformer_encoder_with_padding_mask():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=True)
    m = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    mask = T([[False, False, True], [False, False, False]])
    faithful(m, [(R(2, 3, 8), None, mask), (R(2, 3, 8, seed=1), None, mask)])


@case((T([[1.0, 2.0]]),), (T([[9.0, 9.0]]),))
def f_view_on_growing_loop_state(x):
    while x.sum() < 30:
        x = torch.cat([x, x * 2], dim=0)
        x = x.view(-1, x.size()[-1])
    return x


@case((T([[1.0, 2.0]]),), (T([[9.0, 9.0]]),))
def f_reshape_by_numel_of_growing_state(x):
    n = 0
    while x.numel() < 16 and x.sum() < 100:
        x = torch.cat([x, x + 1])
        n += 1
    return x.reshape(-1), n


class _Inner:
    def __init__(self, t):
        self.t = t


class _Outer:
    def __init__(self, t):
        self.b = _Inner(t)


@case((T([3.0]),), (T([0.5]),))
def f_nested_attribute_assigned_in_branch(x):
    a = _Outer(x)
    if x.sum() > 1:
        a.b.t = a.b.t - 1
    return a.b.t


@case((T([3.0]), _Outer(T([1.0]))), (T([0.5]), _Outer(T([2.0]))))
def f_nested_attribute_of_argument_in_branch(x, a):
    if x.sum() > 1:
        a.b.t = a.b.t + x
    return x * 2


def _halve_until(x, depth=0):
    if x.sum() < 1:
        return x, depth
    return _halve_until(x / 2, depth + 1)


@case((T([5.0]),), (T([0.5]),))
def f_recursion_depth_from_tensor(x):
    return _halve_until(x)


@case((T([5.0, 1.0]),), (T([-5.0, 1.0]),))
def f_python_recursion_fixed_depth(x):
    def tree(v, d):
        if d == 0:
            return v
        return tree(v * 2, d - 1) + tree(v + 1, d - 1)
    y = tree(x, 3)
    if y.sum() > 0:
        y = -y
    return y


def test_f_gru_cell_in_tensor_while():
    torch.manual_seed(0)
    cell = nn.GRUCell(3, 4)

    def f(x):
        h = torch.zeros(1, 4)
        steps = 0
        while h.abs().sum() < 2 and steps < 10:
            h = cell(x, h)
            steps += 1
        return h, steps
    faithful(f, [(R(1, 3),), (R(1, 3, seed=1) * 5,)])


def test_f_lstm_module_then_branch():
    torch.manual_seed(0)
    lstm = nn.LSTM(3, 4, batch_first=True)

    def f(x):
        out, (h, c) = lstm(x)
        if h.sum() > 0:
            return out[:, -1], c
        return out[:, 0], h
    faithful(f, [(R(2, 5, 3),), (R(2, 5, 3, seed=2),)])


@case((R(1, 2, 4, 4),), (R(1, 2, 4, 4, seed=3),))
def f_interpolate_with_size_from_item(x):
    s = int(x.abs().max().item() * 2) + 4
    y = F.interpolate(x, size=(s, s), mode="nearest")
    if y.mean() > 0:
        y = y + 1
    return y


# =========================================================================================
# G. try/finally, exceptions on tensor paths, assert, grad modes
# =========================================================================================

@case((T([1.0]), []), (T([40.0]), []))
def g_try_finally_in_while(x, log):
    while x.sum() < 30:
        try:
            x = x * 2
        finally:
            log.append("f")
    return x


@case((T([1.0]),), (T([-1.0]),))
def g_try_finally_around_tensor_if(x):
    steps = []
    try:
        if x.sum() > 0:
            x = x + 1
        else:
            x = x - 1
    finally:
        steps.append("done")
    return x, steps


@case((T([1.0]),), (T([-1.0]),))
def g_try_finally_with_return_in_branch(x):
    cleanup = [0]
    try:
        if x.sum() > 0:
            return x * 2, cleanup
        x = x - 1
    finally:
        cleanup[0] += 1
    return x, cleanup


@case((T([1.0]),), (T([-1.0]),))
def g_raise_in_tensor_branch_caught(x):
    try:
        if x.sum() < 0:
            raise ValueError("negative")
        y = x * 2
    except ValueError:
        y = x * 0
    return y


@case((T([1.0]),), (T([-1.0]),))
def g_raise_in_tensor_branch_uncaught(x):
    if x.sum() < 0:
        raise ValueError("negative input")
    return x * 2


@case((T([1.0]),), (T([-1.0]),))
def g_assert_on_tensor(x):
    assert x.sum() > 0, "must be positive"
    return x * 2


@case((T([1.0]),), (T([-1.0]),))
def g_assert_in_helper_on_tensor(x):
    def check(v):
        assert (v > 0).all()
        return v
    return check(x) + 1


@case((T([1.0, 2.0], requires_grad=True),), (T([-1.0, 2.0], requires_grad=True),), grad=True)
def g_no_grad_in_branch(x):
    y = x * 2
    if y.sum() > 0:
        with torch.no_grad():
            z = y * 3
    else:
        z = y * 3
    return y + z


@case((T([1.0, 2.0], requires_grad=True),), (T([-1.0, 2.0], requires_grad=True),), grad=True)
def g_enable_grad_inside_no_grad(x):
    with torch.no_grad():
        a = x * 2
        with torch.enable_grad():
            b = x * 3
        if a.sum() > 0:
            b = b + 1
    return a, b


@case((T([1.0, 2.0], requires_grad=True),), (T([-1.0, 2.0], requires_grad=True),))
def g_inference_mode_inside(x):
    with torch.inference_mode():
        y = x * 2
        if y.sum() > 0:
            y = y + 1
    return y.clone(), y.is_inference()


@case((T([1.0, 2.0], requires_grad=True),), (T([-1.0, 2.0], requires_grad=True),), grad=True)
def g_set_grad_enabled_flag(x):
    with torch.set_grad_enabled(bool(x.shape[0] > 5)):
        y = x * 2
    if x.sum() > 0:
        y = y + x
    return y, torch.is_grad_enabled()


@case((T([1.0]),), (T([-1.0]),))
def g_exception_object_kept(x):
    errors = []
    for i in range(2):
        try:
            if i == 1:
                raise KeyError(i)
            x = x + 1
        except KeyError as e:
            errors.append(str(e))
    if x.sum() > 0:
        x = x * 2
    return x, errors


# =========================================================================================
# H. Text: f-strings, format and % of tensors in tensor control flow
# =========================================================================================

@case((T([1.0]),), (T([40.0]),))
def h_print_fstring_in_while(x):
    i = 0
    while x.sum() < 30:
        x = x * 2
        i += 1
        print(f"step {i}: x={x}")
    return x


@case((T([1.0, 2.0]),), (T([-1.0, 2.0]),))
def h_percent_format_in_branch(x):
    if x.sum() > 2:
        s = "big %s" % x
    else:
        s = "small %.2f" % x.sum()
    return s


@case((T([1.0, 2.0]),), (T([-1.0, 2.0]),))
def h_str_format_item(x):
    msg = "total={:.3f} max={}".format(x.sum().item(), x.max())
    if x.sum() > 2:
        msg += "!"
    return msg


@case((T([1.0]),), (T([40.0]),))
def h_string_built_in_while(x):
    s = ""
    while x.sum() < 30:
        x = x * 2
        s += str(int(x.sum()) % 10)
    return x, s


@case((T([3.0, 1.0, 2.0]),), (T([-3.0, 1.0, 2.0]),))
def h_print_range_index_with_tensor_break(x):
    for j in range(3):
        if x[j] < 0:
            break
        print("step", j)
    return x


@case((T([1.0]),), (T([-1.0]),))
def h_print_tensor_repr_in_branch(x):
    if x.sum() > 0:
        print(repr(x * 2), x.shape, x.dtype)
    else:
        print("neg", x)
    return x


@case((T([1.5, -2.0]),), (T([-1.0, 2.0]),))
def h_fstring_format_spec_of_tensor(x):
    parts = []
    for v in x:
        if v > 0:
            parts.append(f"{v:.1f}")
        else:
            parts.append(f"[{v.item():+.2f}]")
    return ",".join(parts)


@case((T([1.0]),), (T([-1.0]),))
def h_tensor_text_as_dict_key(x):
    d = {}
    if x.sum() > 0:
        d[str(x)] = 1
    else:
        d["neg"] = 2
    return d


@case((T([1.0]),), (T([-1.0]),))
def h_logging_style_message(x):
    lines = []
    if x.sum() > 0:
        lines.append("value %r ok" % (x,))
    return x + 1, lines


# =========================================================================================
# I. Gradients through lists grown in tensor loops
# =========================================================================================

@case((T([1.0, 2.0], requires_grad=True),), (T([9.0, 9.0], requires_grad=True),), grad=True)
def i_list_appended_in_while_then_stacked(x):
    outs = []
    h = x
    while h.sum() < 20:
        h = h * 2
        outs.append(h)
    if not outs:
        return x * 1
    return torch.stack(outs).sum(0)


@case((T([1.0, 2.0], requires_grad=True),), (T([-1.0, 2.0], requires_grad=True),), grad=True)
def i_cat_of_rows_kept_in_for(x):
    keep = []
    for v in x:
        if v > 0:
            keep.append(v * v)
        else:
            keep.append(v.exp())
    return torch.stack(keep)


@case((T([1.0, 2.0], requires_grad=True),), (T([5.0, 2.0], requires_grad=True),), grad=True)
def i_sum_builtin_over_list_from_while(x):
    parts = []
    while x.sum() < 10:
        parts.append(x.sin())
        x = x + 1
    return sum(parts, torch.zeros(2)) + x


# =========================================================================================
# J. to_graph on odd callables, wrong argument counts
# =========================================================================================

def test_j_to_graph_none_is_type_error():
    with pytest.raises(TypeError):
        to_graph(None)
    with pytest.raises(TypeError):
        to_graph(None, strict=True)


def test_j_to_graph_builtin_and_c_function():
    x = T([-1.0, 2.0])
    for fn in (torch.relu, torch.Tensor.abs, F.softplus):
        for strict in (False, True):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", FallbackWarning)
                    got = to_graph(fn, strict=strict)(x)
            except (ConversionError, TypeError) as e:
                assert strict or isinstance(e, TypeError)
                assert "None:None" not in str(e) and "__code__" not in str(e), str(e)
                continue
            same(got, fn(x))


def test_j_functools_partial_and_callable_instance():
    def scale(x, k):
        if x.sum() > 0:
            return x * k
        return x

    class Scaler:
        def __init__(self, k):
            self.k = k

        def __call__(self, x):
            if x.sum() > 0:
                return x * self.k
            return x - self.k
    for fn in (functools.partial(scale, k=3.0), Scaler(2.0)):
        faithful(fn, [(T([1.0]),), (T([-1.0]),)], convert=True)


def test_j_wrong_argument_count_is_type_error_without_fallback():
    def f(x, y):
        if x.sum() > 0:
            return x + y
        return x
    for strict in (False, True):
        g = to_graph(f, strict=strict)
        with warnings.catch_warnings():
            warnings.simplefilter("error", FallbackWarning)
            with pytest.raises(TypeError):
                g(T([1.0]))
            with pytest.raises(TypeError):
                g(T([1.0]), T([1.0]), T([1.0]))
            same(g(T([1.0]), T([2.0])), f(T([1.0]), T([2.0])))


def test_j_staticmethod_classmethod_and_bound_method():
    class Ops:
        factor = 3.0

        def __init__(self):
            self.bias = 1.0

        @staticmethod
        def st(x):
            return x * 2 if x.sum() > 0 else x

        @classmethod
        def cm(cls, x):
            if x.sum() > 0:
                return x * cls.factor
            return x

        def bound(self, x):
            while x.sum() < 10:
                x = x + self.bias
            return x
    o = Ops()
    for fn in (Ops.st, Ops.cm, o.bound):
        faithful(fn, [(T([1.0]),), (T([-1.0]),)], convert=True)


def test_j_decorated_with_wraps_and_lambda():
    def logged(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            return fn(*args, **kwargs)
        return wrapper

    @logged
    def f(x):
        if x.sum() > 0:
            return x * 2
        return -x
    lam = lambda x: x * 2 if x.sum() > 0 else x - 1  # noqa: E731
    for fn in (f, lam):
        faithful(fn, [(T([1.0]),), (T([-1.0]),)])


def test_j_varargs_and_kwargs():
    def f(*xs, scale=1.0, **opts):
        total = xs[0] * 0
        for v in xs:
            if v.sum() > 0:
                total = total + v * scale
        if opts.get("neg"):
            total = -total
        return total
    for strict in (False, True):
        g = to_graph(f, strict=strict)
        a, b = T([1.0]), T([-2.0])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FallbackWarning)
            same(g(a, b, scale=2.0), f(a, b, scale=2.0))
            same(g(a, b, scale=2.0, neg=True), f(a, b, scale=2.0, neg=True))
            same(g(b, a, b), f(b, a, b))


# =========================================================================================
# K. numpy on traced values
# =========================================================================================

@case((T([1.0, 2.0]),), (T([-1.0, 2.0]),))
def k_numpy_of_tensor_in_branch(x):
    if x.sum() > 0:
        return torch.from_numpy(x.numpy() * 2)
    return x


@case((T([1.0, 2.0]),), (T([-1.0, 2.0]),))
def k_np_functions_on_tensor(x):
    s = np.sum(x.detach().numpy())
    return x * float(s)


@case((T([1.0, 2.0]),), (T([-1.0, 2.0]),))
def k_np_scalar_constant(x):
    k = np.float32(2.5)
    if x.sum() > 0:
        x = x * float(k)
    return x, np.pi * 1.0


@case((T([1.0, 2.0]),), (T([-1.0, 2.0]),))
def k_np_asarray_then_torch(x):
    a = np.asarray(x)
    m = a.max()
    return x - torch.tensor(m)


# =========================================================================================
# L. Neighbouring Python: match, walrus, enumerate/zip, sorting, builtins, closures
# =========================================================================================

@case((T([1.0, 2.0]),), (T([5.0, 2.0]),), (T([-1.0, 2.0]),))
def l_match_on_item(x):
    k = int(x[0].item())
    match k:
        case 1:
            return x * 2
        case 5:
            return x - 5
        case _:
            return x


@case((T([1.0]),), (T([30.0]),))
def l_walrus_in_tensor_while(x):
    n = 0
    while (s := x.sum()) < 20:
        x = x * 2
        n += 1
    return x, s, n


@case((T([[1.0, -2.0], [3.0, 4.0]]), T([1.0, 2.0])), (T([[-1.0, -2.0], [-3.0, 4.0]]), T([5.0, 6.0])))
def l_enumerate_zip_over_tensors(x, w):
    total = torch.zeros(2)
    for i, (row, wi) in enumerate(zip(x, w)):
        if row.sum() > 0:
            total = total + row * wi * (i + 1)
    return total


@case((T([3.0, -1.0, 2.0]),), (T([-3.0, 1.0, 0.5]),))
def l_sorted_by_tensor_values(x):
    items = [x[0], x[1], x[2]]
    items.sort(key=lambda t: t.item())
    return torch.stack(items), sorted(range(3), key=lambda i: float(x[i]))


@case((T([3.0, -1.0, 2.0]),), (T([3.0, 1.0, 2.0]),))
def l_any_all_over_tensors(x):
    pos = [v > 0 for v in x]
    if all(pos):
        return x * 2
    if any(pos):
        return x - 1
    return x


@case((T([3.0, -1.0, 2.0]),), (T([-3.0, 1.0, 2.0]),))
def l_min_max_builtins_on_tensors(x):
    a = max(x[0], x[1])
    b = min(x[1], x[2])
    return a, b, max(x), min(x.tolist())


@case((T([3.0, -1.0, 2.0]),), (T([-3.0, 1.0, 2.0]),))
def l_tolist_then_python_control_flow(x):
    total = 0.0
    for v in x.tolist():
        if v > 0:
            total += v
    return x * total, total


@case((T([3.0]),), (T([1.0]),))
def l_int_of_tensor_then_range(x):
    out = x
    for i in range(int(x)):
        out = out + i
    return out


@case((T([3.0, -1.0, 2.0]),), (T([3.0, 1.0, 2.0]),))
def l_for_over_rows_with_tensor_break(x):
    acc = torch.zeros(())
    for v in x:
        if v < 0:
            break
        acc = acc + v
    return acc


@case((T([3.0]),), (T([-3.0]),))
def l_nested_closure_factory(x):
    def make(k):
        def g(v):
            return v * k
        return g
    fs = [make(i) for i in range(3)]
    if x.sum() > 0:
        return fs[2](x)
    return fs[1](x)


@case((T([3.0]),), (T([-3.0]),))
def l_lambda_default_captures_loop_var(x):
    fs = [lambda v, i=i: v + i for i in range(3)]
    y = x
    for f in fs:
        if y.sum() > 0:
            y = f(y)
    return y


@case((T([1.0, 2.0]),), (T([4.0, 2.0]),))
def l_chained_comparison(x):
    if 0 < x.sum() < 5:
        return x * 2
    return x


@case((T([1.0]), None), (T([1.0]), T([2.0])))
def l_optional_tensor_is_none(x, mask):
    if mask is not None and mask.sum() > 0:
        x = x * mask
    return x


@case((T([1.0, 2.0]),), (T([-1.0, 2.0]),))
def l_dict_comprehension_in_branch(x):
    if x.sum() > 0:
        d = {k: x * i for i, k in enumerate("ab")}
    else:
        d = {k: x - i for i, k in enumerate("ab")}
    return d


@case((T([True, False]),), (T([False, False]),))
def l_bool_tensor_any_in_if(m):
    if m.any():
        return m.float().sum()
    return torch.tensor(-1.0)


@case((T([1, 2, 3]),), (T([7, 8, 9]),))
def l_int_tensor_floordiv_while(x):
    steps = 0
    while x.max() > 1:
        x = x // 2
        steps += 1
    return x, steps


class _Base(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2, 2)

    def forward(self, x):
        return self.lin(x)


class _Child(_Base):
    def forward(self, x):
        y = super().forward(x)
        if y.sum() > 0:
            y = y * 2
        return y


def test_l_super_forward_in_module():
    torch.manual_seed(0)
    m = _Child()
    faithful(m, [(R(3, 2),), (R(3, 2, seed=5),)], grad=False)


def test_l_forward_hooks_run():
    for strict in (False, True):
        torch.manual_seed(0)
        m = _Child()
        seen = []
        m.register_forward_hook(lambda mod, inp, out: seen.append(tuple(out.shape)))
        m.register_forward_pre_hook(lambda mod, inp: (inp[0] * 2,))
        g = to_graph(m, strict=strict)
        x = R(3, 2)
        try:
            got = g(x)
        except ConversionError:     # strict mode's fallback: the hooks are not converted
            assert strict and not seen
            continue
        got_seen = list(seen)
        seen.clear()
        exp = m(x)
        same(got, exp)
        assert got_seen == seen


def test_l_module_list_in_tensor_loop():
    torch.manual_seed(0)
    layers = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])

    def f(x):
        for layer in layers:
            if x.sum() > 0:
                x = layer(x)
            else:
                x = x.relu() + 0.1
        return x
    faithful(f, [(R(1, 2),), (R(1, 2, seed=4),)])


@case((T([1.0, 2.0]),), (T([-1.0, 2.0]),))
def l_inplace_on_argument_in_while(x):
    while x.sum() < 10:
        x.mul_(2).add_(1)
    return None


@case((T([1.0, 2.0]),), (T([-1.0, 2.0]),))
def l_return_argument_itself(x):
    if x.sum() > 0:
        x.add_(1)
    return x


@case((T([1.0, 2.0]),), (T([-1.0, 2.0]),))
def l_same_tensor_returned_twice(x):
    y = x * 2
    if y.sum() > 0:
        y = y + 1
    return y, y


@case((T([1.0, 2.0]),), (T([-1.0, 2.0]),))
def l_masking_with_python_condition(x):
    mask = x > 0
    positive_only = True
    if positive_only:
        x = x * mask
    if x.sum() > 2:
        x = x.masked_fill(~mask, -1.0)
    return x


@case((T([1.0, 2.0]), 2), (T([-1.0, 2.0]), 3))
def l_python_int_argument_in_tensor_while(x, k):
    i = 0
    while x.sum() < 20 and i < k:
        x = x * 2
        i += 1
    return x, i


@case((T([1.0, 2.0]),), (T([-1.0, 2.0]),))
def l_float_accumulator_isinstance(x):
    acc = 0.0
    if x.sum() > 0:
        acc += 1.5
    return x, isinstance(acc, float), type(acc).__name__


@case((T([1.0, 2.0]),), (T([-1.0, 2.0]),))
def l_tuple_unpack_swap_in_while(x):
    a, b = x[0], x[1]
    while a < b:
        a, b = b, a + 0.5
    return a, b


@case((T([2.0, 3.0]),), (T([-2.0, 3.0]),))
def l_complex_dtype_branch(x):
    z = torch.complex(x, x * 2)
    if x.sum() > 0:
        z = z * 1j
    return z, z.abs()


# =========================================================================================
# X. Code written elsewhere (public repositories), adapted to be self-contained. Each keeps a
#    note of where it comes from; changes are limited to names, imports and argument
#    plumbing. The licences of the originals apply to these excerpts.
# =========================================================================================

# --- dongdonghy/Detection-PyTorch-Notebook, chapter8/nms.py (method made a function;
#     the original reads `threshold` where its parameter is `thresh`: renamed to match)
def x_nms_notebook(bboxes, scores, threshold=0.5):
    x1 = bboxes[:, 0]
    y1 = bboxes[:, 1]
    x2 = bboxes[:, 2]
    y2 = bboxes[:, 3]
    areas = (x2 - x1 + 1) * (y2 - y1 + 1)
    _, order = scores.sort(0, descending=True)
    keep = []
    while order.numel() > 0:
        if order.numel() == 1:
            i = order.item()
            keep.append(i)
            break
        else:
            i = order[0].item()
            keep.append(i)
        xx1 = x1[order[1:]].clamp(min=x1[i])
        yy1 = y1[order[1:]].clamp(min=y1[i])
        xx2 = x2[order[1:]].clamp(max=x2[i])
        yy2 = y2[order[1:]].clamp(max=y2[i])
        inter = (xx2 - xx1).clamp(min=0) * (yy2 - yy1).clamp(min=0)
        iou = inter / (areas[i] + areas[order[1:]] - inter)
        idx = (iou <= threshold).nonzero().squeeze()
        if idx.numel() == 0:
            break
        order = order[idx + 1]
    return torch.LongTensor(keep)


_BOXES = T([[0.0, 0.0, 10.0, 10.0], [1.0, 1.0, 11.0, 11.0], [20.0, 20.0, 30.0, 30.0],
            [21.0, 19.0, 29.0, 31.0]])
_BOXES2 = T([[0.0, 0.0, 4.0, 4.0], [10.0, 10.0, 14.0, 14.0], [0.5, 0.5, 4.5, 4.5]])

case((_BOXES, T([0.9, 0.8, 0.7, 0.95])), (_BOXES2, T([0.1, 0.5, 0.3])))(x_nms_notebook)


# --- Rhyx14/secretary, x_secretary/computer_vision_utils/object_detection/nms.py
def x_nms_secretary(bboxes, scores, threshold=0.5):
    x1 = bboxes[:, 0]
    y1 = bboxes[:, 1]
    x2 = bboxes[:, 2]
    y2 = bboxes[:, 3]
    areas = (x2 - x1) * (y2 - y1)
    _, order = scores.sort(0, descending=True)
    keep = []
    while order.numel() > 0:
        if order.numel() == 1:
            break
        i = order[0].item()
        keep.append(i)
        xx1 = x1[order[1:]].clamp(min=x1[i])
        yy1 = y1[order[1:]].clamp(min=y1[i])
        xx2 = x2[order[1:]].clamp(max=x2[i])
        yy2 = y2[order[1:]].clamp(max=y2[i])
        w = (xx2 - xx1).clamp(min=0)
        h = (yy2 - yy1).clamp(min=0)
        inter = w * h
        ovr = inter / (areas[i] + areas[order[1:]] - inter)
        ids = (ovr <= threshold).nonzero().squeeze()
        if ids.numel() == 0:
            break
        order = order[ids + 1]
    return torch.LongTensor(keep)


case((_BOXES, T([0.9, 0.8, 0.7, 0.95])), (_BOXES2, T([0.1, 0.5, 0.3])))(x_nms_secretary)


# --- wchen61/DeepLearningModels, Detection/SSD/train.py (box_nms; the original's
#     clamp(min=...) on xx2/yy2 is kept as written)
def x_box_nms_ssd(bboxes, scores, threshold=0.5):
    x1 = bboxes[:, 0]
    y1 = bboxes[:, 1]
    x2 = bboxes[:, 2]
    y2 = bboxes[:, 3]
    areas = (x2 - x1) * (y2 - y1)
    _, order = scores.sort(0, descending=True)
    keep = []
    while order.numel() > 0:
        i = order[0]
        keep.append(i)
        if order.numel() == 1:
            break
        xx1 = x1[order[1:]].clamp(min=x1[i].item())
        yy1 = y1[order[1:]].clamp(min=y1[i].item())
        xx2 = x2[order[1:]].clamp(min=x2[i].item())
        yy2 = y2[order[1:]].clamp(min=y2[i].item())
        w = (xx2 - xx1).clamp(min=0)
        h = (yy2 - yy1).clamp(min=0)
        inter = w * h
        overlap = inter / (areas[i] + areas[order[1:]] - inter)
        ids = (overlap <= threshold).nonzero().squeeze()
        if ids.numel() == 0:
            break
        order = order[ids + 1]
    return torch.tensor(keep, dtype=torch.long)


case((_BOXES, T([0.9, 0.8, 0.7, 0.95])), (_BOXES2, T([0.1, 0.5, 0.3])))(x_box_nms_ssd)


# --- mingkaid/rl-prompt, rlprompt/models/model_utils.py (_top_k_logits, _top_p_logits)
def x_top_k_logits(logits, k):
    if k == 0:
        # no truncation
        return logits
    values, _ = torch.topk(logits, k=k)
    min_values = values[:, -1].unsqueeze(-1)
    return torch.where(logits < min_values, torch.full_like(logits, float("-inf")), logits)


def x_top_p_logits(logits, p):
    sorted_logits, sorted_indices = torch.sort(logits, descending=True)
    cumulative_probs = torch.cumsum(nn.functional.softmax(sorted_logits, dim=-1), dim=-1)
    # Remove tokens with cumulative probability above the threshold
    sorted_indices_to_remove = cumulative_probs > p
    # Shift the indices to the right to keep also the first token above the threshold
    sorted_indices_to_remove[:, 1:] = sorted_indices_to_remove[:, :-1].clone()
    sorted_indices_to_remove[:, 0] = 0
    for idx in range(logits.size(0)):
        batch_indices = sorted_indices[idx, sorted_indices_to_remove[idx]]
        logits[idx, batch_indices] = float("-inf")
    return logits


_LOGITS = T([[1.0, 3.0, 0.5, 2.0, -1.0], [0.2, 0.1, 4.0, 0.0, 0.3]])
case((_LOGITS, 0), (_LOGITS, 2), (_LOGITS * -1, 3))(x_top_k_logits)
case((_LOGITS.clone(), 0.5), (_LOGITS * 2, 0.9))(x_top_p_logits)


# --- A1ex-Chen/DL_project_log, GenderBias-VL/lvlm_inference/LAMM/src/ChEF/models/qwen/
#     qwen_generation_utils_top_k_logits.py (after huggingface's conversational-ai code)
def x_top_k_logits_qwen(logits, top_k=0, top_p=0.0, filter_value=-float("Inf")):
    if top_k > 0:
        indices_to_remove = logits < torch.topk(logits, top_k)[0][..., -1, None]
        logits[indices_to_remove] = filter_value
    if top_p > 0.0:
        sorted_logits, sorted_indices = torch.sort(logits, descending=True, dim=-1)
        cumulative_probs = torch.cumsum(F.softmax(sorted_logits, dim=-1), dim=-1)
        sorted_indices_to_remove = cumulative_probs > top_p
        sorted_indices_to_remove[..., 1:] = sorted_indices_to_remove[..., :-1].clone()
        sorted_indices_to_remove[..., 0] = 0
        for i in range(sorted_indices.size(0)):
            indices_to_remove = sorted_indices[i][sorted_indices_to_remove[i]]
            logits[i][indices_to_remove] = filter_value
    return logits


case((_LOGITS.clone(), 2, 0.0), (_LOGITS.clone(), 0, 0.8), (_LOGITS * 3, 3, 0.5))(
    x_top_k_logits_qwen)


# --- deepakdantagani/DeepLearningLab, src/dllab/generation/filters.py
def x_top_k_top_p_filtering(logits, top_k=0, top_p=0.0, filter_value=-float("inf")):
    if top_k > 0:
        k_values, _ = torch.topk(logits, top_k)  # [b * top_k]
        condition = logits < k_values[..., -1, None]  # [b, 1]
        logits = torch.where(condition, filter_value, logits)  # [b*v]
    return logits


case((_LOGITS, 0), (_LOGITS, 3))(x_top_k_top_p_filtering)


# --- pyg-team/pytorch_geometric, torch_geometric/utils/loop.py (early version)
def x_pyg_add_self_loops(edge_index, num_nodes=None):
    num_nodes = edge_index.max() + 1 if num_nodes is None else num_nodes
    loop = torch.arange(num_nodes, out=edge_index.new())
    loop = loop.unsqueeze(0).repeat(2, 1)
    edge_index = torch.cat([edge_index, loop], dim=1)
    return edge_index


def x_pyg_remove_self_loops(edge_index):
    row, col = edge_index
    edge_index = edge_index[:, row != col]
    return edge_index


_EDGES = T([[0, 1, 1, 2], [1, 0, 1, 2]])
_EDGES2 = T([[0, 3, 2], [3, 0, 1]])
case((_EDGES,), (_EDGES2,), (_EDGES, 5))(x_pyg_add_self_loops)
case((_EDGES,), (_EDGES2,), convert=True)(x_pyg_remove_self_loops)


# --- pyg-team/pytorch_geometric, torch_geometric/utils/loop.py (later version)
def x_pyg_contains_self_loops(edge_index):
    row, col = edge_index
    mask = row == col
    return mask.sum().item() > 0


def x_pyg_remove_self_loops_attr(edge_index, edge_attr=None):
    row, col = edge_index
    mask = row != col
    edge_attr = edge_attr if edge_attr is None else edge_attr[mask]
    mask = mask.unsqueeze(0).expand_as(edge_index)
    edge_index = edge_index[mask].view(2, -1)
    return edge_index, edge_attr


case((_EDGES,), (_EDGES2,))(x_pyg_contains_self_loops)
case((_EDGES, T([1.0, 2.0, 3.0, 4.0])), (_EDGES2, None))(x_pyg_remove_self_loops_attr)


# --- BUAADreamer/llmkiller, machine_learning/kmeans.py (comments translated; the seed is
#     set inside so eager and graph draw the same initial centroids)
def x_kmeans_llmkiller(data, k, max_iters=100, tol=1e-4):
    torch.manual_seed(0)
    n_samples = data.size(0)
    idx = torch.randperm(n_samples)[:k]
    centroids = data[idx]
    for i in range(max_iters):
        distances = torch.cdist(data, centroids)
        labels = torch.argmin(distances, dim=1)
        prev_centroids = centroids.clone()
        for j in range(k):
            mask = labels == j
            if mask.sum() > 0:
                centroids[j] = data[mask].mean(dim=0)
        if torch.norm(centroids - prev_centroids) < tol:
            break
    return centroids, labels


_PTS = torch.cat([R(6, 2, seed=1) + 3, R(6, 2, seed=2) - 3])
case((_PTS, 2), (_PTS * 0.1, 3, 5))(x_kmeans_llmkiller)


# --- yujianke100/GFDN, kmeans.py (seeded inside, as above)
def x_kmeans_gfdn(x, ncluster, niter=10):
    torch.manual_seed(0)
    N, D = x.size()
    c = x[torch.randperm(N)[:ncluster]]  # init clusters at random
    for i in range(niter):
        a = ((x[:, None, :] - c[None, :, :]) ** 2).sum(-1).argmin(1)
        c = torch.stack([x[a == k].mean(0) for k in range(ncluster)])
        nanix = torch.any(torch.isnan(c), dim=1)
        ndead = nanix.sum().item()
        c[nanix] = x[torch.randperm(N)[:ndead]]
    return c


case((_PTS, 2), (_PTS, 3, 4))(x_kmeans_gfdn)


# --- lichang-jin/Research_Exercise, VGGT/vggt/layers/drop_path.py
class XDropPathVGGT(nn.Module):
    """Drop paths (Stochastic Depth) per sample."""
    def __init__(self, drop_prob=None):
        super(XDropPathVGGT, self).__init__()
        self.drop_prob = drop_prob

    def forward(self, x):
        if self.drop_prob == 0.0 or not self.training:
            return x
        keep_prob = 1 - self.drop_prob
        shape = (x.shape[0],) + (1,) * (x.ndim - 1)
        random_tensor = x.new_empty(shape).bernoulli_(keep_prob)
        if keep_prob > 0.0:
            random_tensor.div_(keep_prob)
        return x * random_tensor


# --- SegmentationBLWX/sssegmentation, ssseg/modules/models/backbones/bricks/dropout/droppath.py
class XDropPathSsseg(nn.Module):
    def __init__(self, drop_prob=0.):
        super(XDropPathSsseg, self).__init__()
        self.drop_prob = drop_prob
        self.keep_prob = 1 - drop_prob

    def forward(self, x):
        if self.drop_prob == 0. or not self.training:
            return x
        shape = (x.shape[0], ) + (1, ) * (x.ndim - 1)
        random_tensor = self.keep_prob + torch.rand(shape, dtype=x.dtype, device=x.device)
        random_tensor.floor_()
        output = x.div(self.keep_prob) * random_tensor
        return output


def _seeded_call(m):
    def f(x):
        torch.manual_seed(7)
        return m(x)
    return f


@pytest.mark.parametrize("cls", [XDropPathVGGT, XDropPathSsseg])
@pytest.mark.parametrize("train", [False, True])     # (train: a reseed inside, staged)
def test_x_drop_path_modules(cls, train):
    m = cls(0.5).train(train)
    faithful(_seeded_call(m), [(R(4, 3),), (R(4, 3, seed=1),)])


@case((torch.ones(2),), (torch.ones(2),))
def d_manual_seed_inside_no_control_flow(x):
    torch.manual_seed(7)
    return x + torch.rand(2)


# --- jmaczan/darts-toolkit, src/core/regularization.py (DropPath)
class XDropPathDarts(nn.Module):
    def __init__(self, drop_prob: float = 0.0):
        super().__init__()
        self.drop_prob: float = drop_prob

    def forward(self, x):
        if self.drop_prob == 0.0 or not self.training:
            return x
        keep_prob = 1 - self.drop_prob
        shape = (x.shape[0],) + (1,) * (x.ndim - 1)
        random_tensor = keep_prob + torch.rand(shape, dtype=x.dtype, device=x.device)
        binary_tensor = torch.floor(random_tensor)
        output = x.div(keep_prob) * binary_tensor
        return output


def test_x_drop_path_darts_module_direct():
    m = XDropPathDarts(0.0)
    faithful(m, [(R(4, 3),), (R(4, 3, seed=1),)], convert=True)
    m.drop_prob = 0.3
    m.eval()
    faithful(m, [(R(4, 3),)], convert=True)


# --- shalei120/HopfieldLM, utils.py (from fairseq's utils: make_positions, fill_with_neg_inf)
def x_make_positions(tensor, padding_idx: int, onnx_trace: bool = False):
    mask = tensor.ne(padding_idx).int()
    return (torch.cumsum(mask, dim=1).type_as(mask) * mask).long() + padding_idx


def x_fill_with_neg_inf(t):
    """FP16-compatible function that fills a tensor with -inf."""
    return t.float().fill_(float("-inf")).type_as(t)


case((T([[5, 6, 1, 1], [1, 7, 8, 9]]), 1), (T([[0, 0, 3]]), 0))(x_make_positions)
case((T([1.0, 2.0]),), (T([1, 2]),), (T([1.0], dtype=torch.float16),))(x_fill_with_neg_inf)


# --- A1ex-Chen/DL_project_log, .../blip2_models/modeling_opt__make_causal_mask.py
#     (transformers' OPT _make_causal_mask)
def x_make_causal_mask(input_ids_shape, dtype, past_key_values_length=0):
    bsz, tgt_len = input_ids_shape
    mask = torch.full((tgt_len, tgt_len), torch.tensor(torch.finfo(dtype).min))
    mask_cond = torch.arange(mask.size(-1))
    mask.masked_fill_(mask_cond < (mask_cond + 1).view(mask.size(-1), 1), 0)
    mask = mask.to(dtype)
    if past_key_values_length > 0:
        mask = torch.cat([torch.zeros(tgt_len, past_key_values_length, dtype=dtype), mask],
                         dim=-1)
    return mask[None, None, :, :].expand(bsz, 1, tgt_len, tgt_len + past_key_values_length)


def _causal_from_ids(input_ids, past):
    return x_make_causal_mask(input_ids.shape, torch.float32, past)


case((T([[1, 2, 3]]), 0), (T([[1, 2, 3], [4, 5, 6]]), 2), convert=True)(_causal_from_ids)


# --- transformers' _expand_mask (as copied in many projects, e.g. the search corpus's
#     BLIP-2 / OPT excerpts)
def x_expand_mask(mask, dtype, tgt_len=None):
    if len(mask.size()) == 3:
        bsz, src_len, _ = mask.size()
        tgt_len = tgt_len if tgt_len is not None else src_len
        expanded_mask = mask[:, None, :, :].expand(bsz, 1, tgt_len, src_len).to(dtype)
    else:
        bsz, src_len = mask.size()
        tgt_len = tgt_len if tgt_len is not None else src_len
        expanded_mask = mask[:, None, None, :].expand(bsz, 1, tgt_len, src_len).to(dtype)
    inverted_mask = 1.0 - expanded_mask
    return inverted_mask.masked_fill(inverted_mask.to(torch.bool), torch.finfo(dtype).min)


case((T([[1, 1, 0]]), torch.float32), (T([[1, 0], [1, 1]]), torch.float32, 3),
     (T([[[1, 0], [1, 1]]]), torch.float32))(x_expand_mask)


# --- sh0416/brook, brook/utils.py
def x_masked_softmax_brook(vec, mask, dim=1):
    masked_vec = vec * mask.float()
    max_vec = torch.max(masked_vec, dim=dim, keepdim=True)[0]
    exps = torch.exp(masked_vec - max_vec)
    masked_exps = exps * mask.float()
    masked_sums = masked_exps.sum(dim, keepdim=True)
    zeros = (masked_sums == 0)
    masked_sums += zeros.float()
    return masked_exps / masked_sums


case((R(2, 4, grad=True), T([[1, 1, 0, 0], [0, 0, 0, 0]])),
     (R(2, 4, seed=1, grad=True), T([[1, 1, 1, 1], [1, 0, 1, 0]])), grad=True)(
    x_masked_softmax_brook)


# --- lms2004/OnnxFlow, test/test_op/test.py (d2l's sequence_mask / masked_softmax)
def x_sequence_mask(X, valid_len, value=0):
    maxlen = X.size(1)
    mask = torch.arange((maxlen), dtype=torch.float32, device=X.device)[None, :] < valid_len[:, None]
    X[~mask] = value
    return X


def x_masked_softmax_d2l(X, valid_lens):
    if valid_lens is None:
        return nn.functional.softmax(X, dim=-1)
    else:
        shape = X.shape
        if valid_lens.dim() == 1:
            valid_lens = torch.repeat_interleave(valid_lens, shape[1])
        else:
            valid_lens = valid_lens.reshape(-1)
        X = x_sequence_mask(X.reshape(-1, shape[-1]), valid_lens, value=-1e6)
        return nn.functional.softmax(X.reshape(shape), dim=-1)


case((R(2, 2, 4), T([2, 3])), (R(2, 2, 4, seed=1), None), (R(2, 2, 4, seed=2), T([[1, 2], [3, 4]])))(
    x_masked_softmax_d2l)


# --- quan-0811/neural_machine_translation_en_fr, utils.py
def x_mask_sequence(X, valid_len, value=-1e6):
    num_steps = X.size(1)
    mask = torch.arange(num_steps, device=X.device).unsqueeze(0) < valid_len.unsqueeze(-1)
    X[~mask] = value
    return X


def x_masked_softmax_nmt(X, valid_len):
    shape = X.shape
    batch_size, num_steps = shape[0], shape[1]
    if valid_len.dim() == 1:
        valid_lens = torch.zeros(size=(batch_size, num_steps), dtype=torch.long)
        for i in range(batch_size):
            valid_lens[i, :valid_len[i]] = torch.tensor([valid_len[i]] * valid_len[i])
        valid_len = valid_lens
    X = x_mask_sequence(X, valid_len)
    X = torch.softmax(X, dim=-1)
    row_mask = valid_len > 0
    X = X * row_mask.unsqueeze(-1)
    return X


case((R(2, 3, 3), T([2, 1])), (R(2, 3, 3, seed=1), T([3, 0])))(x_masked_softmax_nmt)


# --- kgokul03/SatelliteCarDetection, utils/metrics.py
def x_box_area(box):
    return (box[2] - box[0]) * (box[3] - box[1])


def x_box_iou_chunk(box1, box2):
    (a1, a2), (b1, b2) = box1[:, None].chunk(2, 2), box2.chunk(2, 1)
    inter = (torch.min(a2, b2) - torch.max(a1, b1)).clamp(0).prod(2)
    return inter / (x_box_area(box1.T)[:, None] + x_box_area(box2.T) - inter)


case((_BOXES, _BOXES2), (_BOXES2, _BOXES2))(x_box_iou_chunk)


# --- panwangaz/panwangaz.github.io, _posts/deeplearning/iou.py
def x_boxes_iou_normal(boxes_a, boxes_b):
    assert boxes_a.shape[1] == boxes_b.shape[1] == 4
    x_min = torch.max(boxes_a[:, 0, None], boxes_b[None, :, 0])
    x_max = torch.min(boxes_a[:, 2, None], boxes_b[None, :, 2])
    y_min = torch.max(boxes_a[:, 1, None], boxes_b[None, :, 1])
    y_max = torch.min(boxes_a[:, 3, None], boxes_b[None, :, 3])
    x_len = torch.clamp_min(x_max - x_min, min=0)
    y_len = torch.clamp_min(y_max - y_min, min=0)
    area_a = (boxes_a[:, 2] - boxes_a[:, 0]) * (boxes_a[:, 3] - boxes_a[:, 1])
    area_b = (boxes_b[:, 2] - boxes_b[:, 0]) * (boxes_b[:, 3] - boxes_b[:, 1])
    a_intersect_b = x_len * y_len
    iou = a_intersect_b / torch.clamp_min(area_a[:, None] + area_b[None, :] - a_intersect_b,
                                          min=1e-6)
    return iou


case((_BOXES, _BOXES2), (_BOXES2, _BOXES))(x_boxes_iou_normal)


# --- ABCCASa/ssl_object_detection, detection_model/model_utils.py (check_degenerate_boxes)
def x_check_degenerate_boxes(targets):
    for target_idx, target in enumerate(targets):
        boxes = target["boxes"]
        degenerate_boxes = boxes[:, 2:] <= boxes[:, :2]
        if degenerate_boxes.any():
            # print the first degenerate box
            bb_idx = torch.where(degenerate_boxes.any(dim=1))[0][0]
            degen_bb = boxes[bb_idx].tolist()
            torch._assert(
                False,
                "All bounding boxes should have positive height and width."
                f" Found invalid box {degen_bb} for target at index {target_idx}.",
            )


case(([{"boxes": _BOXES}, {"boxes": _BOXES2}],),
     ([{"boxes": _BOXES}, {"boxes": T([[0.0, 0.0, 0.0, 5.0]])}],))(x_check_degenerate_boxes)


# --- DETR util/box_ops.py style (as in the search corpus excerpt importing
#     torchvision.ops.box_iou); box_area and box_iou inlined to stay self-contained
def x_box_cxcywh_to_xyxy(x):
    x_c, y_c, w, h = x.unbind(-1)
    b = [(x_c - 0.5 * w), (y_c - 0.5 * h), (x_c + 0.5 * w), (y_c + 0.5 * h)]
    return torch.stack(b, dim=-1)


def x_generalized_box_iou(boxes1, boxes2):
    # degenerate boxes gives inf / nan results
    assert (boxes1[:, 2:] >= boxes1[:, :2]).all()
    assert (boxes2[:, 2:] >= boxes2[:, :2]).all()
    area1 = (boxes1[:, 2] - boxes1[:, 0]) * (boxes1[:, 3] - boxes1[:, 1])
    area2 = (boxes2[:, 2] - boxes2[:, 0]) * (boxes2[:, 3] - boxes2[:, 1])
    lt = torch.max(boxes1[:, None, :2], boxes2[:, :2])
    rb = torch.min(boxes1[:, None, 2:], boxes2[:, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[:, :, 0] * wh[:, :, 1]
    union = area1[:, None] + area2 - inter
    iou = inter / union
    lt = torch.min(boxes1[:, None, :2], boxes2[:, :2])
    rb = torch.max(boxes1[:, None, 2:], boxes2[:, 2:])
    wh = (rb - lt).clamp(min=0)
    area = wh[:, :, 0] * wh[:, :, 1]
    return iou - (area - union) / area


case((_BOXES, _BOXES2), (_BOXES, T([[5.0, 5.0, 1.0, 1.0]])))(x_generalized_box_iou)


def _giou_from_cxcywh(a, b):
    return x_generalized_box_iou(x_box_cxcywh_to_xyxy(a), x_box_cxcywh_to_xyxy(b))


case((T([[0.5, 0.5, 0.2, 0.2]], requires_grad=True), T([[0.4, 0.5, 0.3, 0.1]], requires_grad=True)),
     (T([[0.1, 0.5, 0.2, 0.4]], requires_grad=True), T([[0.4, 0.5, 0.3, 0.1]], requires_grad=True)),
     grad=True)(_giou_from_cxcywh)


# --- kmkurn/pytorch-crf, torchcrf/__init__.py (CRF._viterbi_decode, as a function of the
#     CRF's parameters; batch_first=False layout as in the original)
def x_crf_viterbi_decode(emissions, mask, start_transitions, end_transitions, transitions):
    seq_length, batch_size = mask.shape
    score = start_transitions + emissions[0]
    history = []
    for i in range(1, seq_length):
        broadcast_score = score.unsqueeze(2)
        broadcast_emission = emissions[i].unsqueeze(1)
        next_score = broadcast_score + transitions + broadcast_emission
        next_score, indices = next_score.max(dim=1)
        score = torch.where(mask[i].unsqueeze(1), next_score, score)
        history.append(indices)
    score += end_transitions
    seq_ends = mask.long().sum(dim=0) - 1
    best_tags_list = []
    for idx in range(batch_size):
        _, best_last_tag = score[idx].max(dim=0)
        best_tags = [best_last_tag.item()]
        for hist in reversed(history[:seq_ends[idx]]):
            best_last_tag = hist[idx][best_tags[-1]]
            best_tags.append(best_last_tag.item())
        best_tags.reverse()
        best_tags_list.append(best_tags)
    return best_tags_list


_EM = R(4, 2, 3, seed=3)
_CRF = (R(3, seed=4), R(3, seed=5), R(3, 3, seed=6))
case((_EM, T([[True, True], [True, True], [True, False], [True, False]]), *_CRF),
     (_EM * 2, T([[True, True], [True, True], [True, True], [False, True]]), *_CRF))(
    x_crf_viterbi_decode)


# =========================================================================================
# M. More neighbours: argument containers, module state, warnings, identity, shapes,
#    nested converted functions
# =========================================================================================

@case((T([1.0]), [T([0.0]), T([1.0])]), (T([-1.0]), [T([5.0])]))
def m_argument_list_item_replaced_in_branch(x, lst):
    if x.sum() > 0:
        lst[0] = x * 2
    return x + 1


@case((T([1.0]), [1, 2, 3]), (T([-1.0]), [4, 5]))
def m_argument_list_methods_in_branch(x, lst):
    if x.sum() > 0:
        lst.extend([7, 8])
        lst.insert(0, 9)
        lst.sort()
    else:
        lst.clear()
    return x * len(lst)


@case((T([1.0]), {"a": 1, "b": 2}), (T([-1.0]), {"a": 3}))
def m_argument_dict_update_and_del_in_branch(x, d):
    if x.sum() > 0:
        d.update(c=3)
        del d["a"]
    return x + 1


@case((T([1.0]), Cfg(1.0)), (T([-1.0]), Cfg(2.0)))
def m_argument_object_setattr_delattr_in_branch(x, c):
    if x.sum() > 0:
        setattr(c, "extra", 5)
        delattr(c, "sub")
    return x * c.scale


def test_m_batchnorm_train_in_tensor_branch_running_stats():
    torch.manual_seed(0)
    bn = nn.BatchNorm1d(2).train()

    def f(x):
        if x.sum() > 0:
            return bn(x)
        return x
    # the running statistics change only when the branch is taken
    for strict in (False, True):
        e_bn = copy.deepcopy(bn)
        g_bn = copy.deepcopy(bn)

        def fe(x, m=e_bn):
            if x.sum() > 0:
                return m(x)
            return x

        def fg(x, m=g_bn):
            if x.sum() > 0:
                return m(x)
            return x
        g = to_graph(fg, strict=strict)
        for x in (R(4, 2) + 1, R(4, 2, seed=1) - 5, R(4, 2, seed=2) + 2):
            exp = fe(x)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", FallbackWarning)
                    got = g(x)
            except ConversionError:
                assert strict
                break
            same(got, exp)
            same(g_bn.running_mean, e_bn.running_mean, "running_mean")
            same(g_bn.num_batches_tracked, e_bn.num_batches_tracked, "num_batches_tracked")


class _StepCounter(nn.Module):
    def __init__(self):
        super().__init__()
        self.steps = 0
        self.register_buffer("hits", torch.zeros(()))

    def forward(self, x):
        while x.sum() < 10:
            x = x * 2
            self.steps += 1
            self.hits += 1
        return x


def test_m_module_counter_and_buffer_in_tensor_while():
    for strict in (False, True):
        me, mg = _StepCounter(), _StepCounter()
        g = to_graph(mg, strict=strict)
        for x in (T([1.0]), T([20.0]), T([3.0])):
            exp = me(x)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", FallbackWarning)
                    got = g(x)
            except ConversionError:
                assert strict
                break
            same(got, exp)
            same(mg.hits, me.hits, "hits buffer")
            same(mg.steps, me.steps, "steps")


def test_m_warnings_warn_in_tensor_branch():
    def f(x):
        if x.sum() < 0:
            warnings.warn("negative input", RuntimeWarning)
            x = -x
        return x
    for strict in (False, True):
        g = to_graph(f, strict=strict)
        for x in (T([1.0]), T([-1.0]), T([2.0])):
            with warnings.catch_warnings(record=True) as we:
                warnings.simplefilter("always")
                exp = f(x)
            try:
                with warnings.catch_warnings(record=True) as wg:
                    warnings.simplefilter("always")
                    got = g(x)
            except ConversionError:
                assert strict
                break
            same(got, exp)
            if any(issubclass(w.category, FallbackWarning) for w in wg):
                continue
            assert [str(w.message) for w in wg] == [str(w.message) for w in we]


@case((T([1.0]),), (T([-1.0]),))
def m_identity_is_path_dependent(x):
    y = x
    if x.sum() > 0:
        y = x * 2
    return y, y is x


@case((T([1.0, 2.0]),), (T([-1.0, 2.0]),))
def m_tensor_data_assignment_in_branch(x):
    x = x.clone()
    if x.sum() > 0:
        x.data = x.data * 2
    return x


@case((T([1.0, 2.0], requires_grad=True),), (T([-1.0, 2.0], requires_grad=True),), grad=True)
def m_no_grad_decorated_helper_in_branch(x):
    @torch.no_grad()
    def frozen(v):
        return v * 3
    y = x * 2
    if y.sum() > 0:
        y = y + frozen(y)
    return y


@case((T([1.0, 2.0]),), (T([-1.0, 2.0]),))
def m_autocast_in_branch(x):
    w = torch.ones(2, 2)
    if x.sum() > 0:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = x @ w
        return y.float(), y.dtype
    return x @ w, (x @ w).dtype


@case((T([1.0, -2.0, 3.0]),), (T([1.0, -2.0, 3.0, 4.0, -5.0]),), (T([-1.0, 2.0]),))
def m_range_of_shape_with_changing_sizes(x):
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        if x[i] > 0:
            out[i] = x[i] * (i + 1)
    return out, x.shape[0] // 2, x[: x.shape[0] // 2]


@case((T([1.0, 2.0, 3.0]),), (T([1.0, 2.0, 3.0, 4.0, 5.0]),), (T([4.0, 5.0]),))
def m_arange_of_size_changing_sizes(x):
    idx = torch.arange(x.shape[0])
    while x.sum() < 30:
        x = x + idx
    return x, len(x), x.size()


@case((T([1.0]), T(True)), (T([1.0]), T(False)))
def m_bool_tensor_flag_argument(x, flag):
    if flag:
        return x * 2
    return x


@case((T([1.0]), 2.0), (T([1.0]), T(3.0)), (T([-1.0]), 2))
def m_scalar_or_tensor_argument(x, k):
    if x.sum() > 0:
        return x * k
    return x + k


_inner_g = to_graph(lambda v: v * 2 if v.sum() > 0 else v - 1)


@case((T([1.0]),), (T([-3.0]),))
def m_converted_function_called_in_branch(x):
    if x.sum() > -2:
        return _inner_g(x) + 1
    return _inner_g(-x)


@case((T([1.0, 2.0]),), (T([-1.0, 2.0]),))
def m_sum_builtin_of_generator_of_bools(x):
    n = sum(v > 0 for v in x)
    if n > 1:
        return x * 2, n
    return x, n


@case((T([1.0, 2.0]),), (T([-1.0, 2.0]),))
def m_len_and_bool_of_numel(x):
    y = x[x > 0]
    return len(x), bool(x.numel()), y


@case((T([1.0, 2.0]),), (T([-1.0, -2.0]),))
def m_tensor_as_dict_key_lookup(x):
    table = {}
    key = x
    table[key] = 1
    if x.sum() > 0:
        table[key] += 1
    return table[x], len(table)


@case((T([1.0, 2.0], requires_grad=True),), (T([-1.0, 2.0], requires_grad=True),))
def m_register_hook_in_branch(x):
    seen = []
    y = x * 2
    if y.sum() > 0:
        y.register_hook(lambda g: seen.append(1))
    y.sum().backward(retain_graph=True)
    return len(seen), x.grad


@case((T([3.0]),), (T([0.1]),))
def m_newton_sqrt(a):
    x = a.clone()
    it = 0
    while (x * x - a).abs() > 1e-6 and it < 50:
        x = x - (x * x - a) / (2 * x)
        it += 1
    return x, it


@case((T(0.0), T(3.0)), (T(-2.0), T(1.0)))
def m_bisection(lo, hi):
    f = lambda v: v ** 3 - v - 1  # noqa: E731
    for _ in range(40):
        mid = (lo + hi) / 2
        if f(mid) > 0:
            hi = mid
        else:
            lo = mid
        if hi - lo < 1e-4:
            break
    return (lo + hi) / 2


@case((T([1, 2, 3, 4]), T([1, 3, 4])), (T([5, 5]), T([5, 6, 7])))
def m_edit_distance_dp(a, b):
    n, m = a.shape[0], b.shape[0]
    d = torch.zeros(n + 1, m + 1)
    for i in range(n + 1):
        d[i, 0] = i
    for j in range(m + 1):
        d[0, j] = j
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            cost = 0.0 if a[i - 1] == b[j - 1] else 1.0
            d[i, j] = torch.min(torch.stack([d[i - 1, j] + 1, d[i, j - 1] + 1,
                                             d[i - 1, j - 1] + cost]))
    return d[n, m]


@case((T([5.0, 4.0, 3.5, 3.6, 3.7, 3.8]),), (T([5.0, 4.0, 3.0, 2.0, 1.0, 0.5]),))
def m_early_stopping_loop(losses):
    best = losses[0]
    bad = 0
    stopped_at = -1
    for i in range(1, losses.shape[0]):
        if losses[i] < best:
            best = losses[i]
            bad = 0
        else:
            bad += 1
        if bad >= 2:
            stopped_at = i
            break
    return best, bad, stopped_at


def test_m_clip_grad_norm_in_branch():
    """torch.nn.utils.clip_grad_norm_ pattern: grads scaled in place when the norm is big."""
    def clip(params, max_norm):
        total = torch.norm(torch.stack([p.grad.norm() for p in params]))
        clip_coef = max_norm / (total + 1e-6)
        if clip_coef < 1:
            for p in params:
                p.grad.mul_(clip_coef)
        return total
    for strict in (False, True):
        g = to_graph(clip, strict=strict)
        for scale in (10.0, 0.01):
            pe = [nn.Parameter(torch.ones(2)), nn.Parameter(torch.ones(3))]
            pg = [nn.Parameter(torch.ones(2)), nn.Parameter(torch.ones(3))]
            for p in pe + pg:
                p.grad = torch.full_like(p, scale)
            exp = clip(pe, 1.0)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", FallbackWarning)
                    got = g(pg, 1.0)
            except ConversionError:
                assert strict
                break
            same(got, exp)
            same([p.grad for p in pg], [p.grad for p in pe], "grads")


@case((T([1.0, 2.0]),), (T([-1.0, 2.0]),))
def m_sgd_step_under_no_grad_in_branch(x):
    w = torch.ones(2, requires_grad=True)
    loss = (w * x).sum()
    loss.backward()
    with torch.no_grad():
        if loss > 0:
            w -= 0.1 * w.grad
    return w.detach().clone(), w.requires_grad


@case((T([1.0, 2.0]),), (T([-1.0, 2.0]),))
def m_requires_grad_flag_set_in_branch(x):
    y = x.clone()
    if y.sum() > 0:
        y.requires_grad_()
    return y * 2, y.requires_grad


@case((T([1.0, 2.0]),), (T([-1.0, 2.0]),))
def m_round_and_math_on_float_accumulator(x):
    acc = 0.0
    for v in x:
        if v > 0:
            acc = acc + 1.25
    return round(acc), math.floor(acc), acc


@case((T([2.0]),), (T([-2.0]),))
def m_exception_message_from_tensor(x):
    try:
        if x.sum() < 0:
            raise ValueError(f"bad value {x}")
        return str(x.shape)
    except ValueError as e:
        return str(e)[:9]


@case((T([1.0, 2.0]),), (T([-1.0, 2.0]),))
def m_print_with_sep_end_in_branch(x):
    if x.sum() > 0:
        print("a", x.sum(), sep="|", end=";\n")
    else:
        print(x.shape, x.dtype, sep=",")
    return x


@case((T([1.0, 2.0]),), (T([-1.0, 2.0]),))
def m_is_scripting_and_compiling_checks(x):
    if torch.jit.is_scripting() or torch.compiler.is_compiling():
        return x
    if x.sum() > 0:
        return x * 2
    return x * 3


# =========================================================================================
# N. What the caller does with results: aliasing, identity, fresh containers; RNG streams
# =========================================================================================

def _both_modes(fn, check):
    """Run ``check(g)`` for a default-mode and a strict-mode conversion of fn; a strict
    ConversionError is a clean refusal."""
    for strict in (False, True):
        g = to_graph(fn, strict=strict)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FallbackWarning)
                check(g)
        except ConversionError:
            assert strict


def test_n_returned_argument_aliases_the_argument():
    def f(x):
        if x.sum() > 0:
            x.mul_(2)
        return x

    def check(g):
        for v in (T([1.0]), T([-1.0])):
            xe, xg = v.clone(), v.clone()
            oe, og = f(xe), g(xg)
            assert (og is xg) == (oe is xe)
            oe.add_(100)
            og.add_(100)
            same(xg, xe, "argument after writing the result")
    _both_modes(f, check)


def test_n_returned_view_of_argument_writes_through():
    def f(x):
        if x.sum() > 0:
            return x[0]
        return x[1]

    def check(g):
        for v in (T([1.0, 2.0]), T([-1.0, -2.0])):
            xe, xg = v.clone(), v.clone()
            f(xe).fill_(7.0)
            g(xg).fill_(7.0)
            same(xg, xe, "argument after writing the returned view")
    _both_modes(f, check)


def test_n_two_outputs_alias_each_other():
    def f(x):
        y = x * 2
        if y.sum() > 0:
            y = y + 1
        return y, y, y.view(-1)

    def check(g):
        for v in (T([1.0, 2.0]), T([-1.0, -2.0])):
            a, b, c = f(v)
            ga, gb, gc = g(v)
            a.add_(10)
            ga.add_(10)
            same((ga, gb, gc), (a, b, c))
    _both_modes(f, check)


def test_n_returned_list_is_fresh_per_call():
    def f(x):
        out = [x * 2]
        if x.sum() > 0:
            out.append(x + 1)
        return out

    def check(g):
        r1 = g(T([1.0]))
        r1.append("caller's")
        r1[0].add_(50)
        r2 = g(T([1.0]))
        same(r2, f(T([1.0])))
    _both_modes(f, check)


def test_n_tensor_default_argument_mutated_in_branch():
    def make():
        def f(x, acc=torch.zeros(1)):  # noqa: B008 - the point of the test
            if x.sum() > 0:
                acc.add_(x)
            return acc * 1
        return f
    fe = make()
    exp = [fe(v) for v in (T([1.0]), T([-1.0]), T([2.0]))]
    for strict in (False, True):
        fg = make()
        g = to_graph(fg, strict=strict)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FallbackWarning)
                got = [g(v) for v in (T([1.0]), T([-1.0]), T([2.0]))]
        except ConversionError:
            assert strict
            continue
        same(got, exp)
        same(fg.__defaults__[0], fe.__defaults__[0], "the default tensor")


def test_n_global_rng_stream_matches_eager():
    """Seeded outside: values drawn inside (only on the taken path) and the next draw after
    the call equal eager's."""
    def f(x):
        if x.sum() > 0:
            x = x + torch.rand(2)
        return x * torch.rand(1)

    def check(g):
        for v in (T([1.0, 1.0]), T([-1.0, -1.0]), T([2.0, 0.0])):
            torch.manual_seed(11)
            exp = (f(v), torch.rand(1))
            torch.manual_seed(11)
            got = (g(v), torch.rand(1))
            same(got, exp)
    _both_modes(f, check)


def test_n_dropout_in_untaken_branch_consumes_no_rng():
    def f(x):
        if x.sum() > 0:
            x = F.dropout(x, 0.5, training=True)
        return x, torch.randn(1)

    def check(g):
        for v in (T([1.0, 1.0, 1.0, 1.0]), T([-1.0, -1.0, -1.0, -1.0])):
            torch.manual_seed(3)
            exp = f(v)
            torch.manual_seed(3)
            same(g(v), exp)
    _both_modes(f, check)


def test_n_child_module_hook_called_in_branch():
    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(2, 2)
            self.b = nn.Linear(2, 2)

        def forward(self, x):
            if x.sum() > 0:
                return self.a(x)
            return self.b(x)
    for strict in (False, True):
        net = Net()
        calls = []
        net.a.register_forward_hook(lambda m, i, o: calls.append("a"))
        net.b.register_forward_pre_hook(lambda m, i: (i[0] + 100,))
        g = to_graph(net, strict=strict)
        for x in (T([[1.0, 1.0]]), T([[-1.0, -1.0]])):
            calls.clear()
            exp = net(x)
            exp_calls = list(calls)
            calls.clear()
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", FallbackWarning)
                    got = g(x)
            except ConversionError:
                assert strict
                break
            same(got, exp)
            assert calls == exp_calls


def test_n_set_default_dtype_inside():
    def f(x):
        old = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        try:
            z = torch.zeros(2)
            if x.sum() > 0:
                z = z + 1
        finally:
            torch.set_default_dtype(old)
        return z

    def check(g):
        for v in (T([1.0]), T([-1.0])):
            same(g(v), f(v))
            assert torch.get_default_dtype() == torch.float32
    _both_modes(f, check)


@case((T([1.0, 2.0]), T([True, False])), (T([-1.0, 2.0]), T([False, False])))
def n_masked_write_on_argument_in_while(x, m):
    while x.sum() < 10:
        x[m] = x[m] + 1
        x += 1
    return None


@case((T([1.0, 2.0]),), (T([-1.0, 2.0]),))
def n_returns_closure_capturing_tensor(x):
    if x.sum() > 0:
        k = x * 2
    else:
        k = x - 1
    return k, (lambda v: v + k)(T([1.0, 1.0]))


@case((T([[1.0, 2.0], [3.0, 4.0]]),), (T([[-1.0, 2.0], [3.0, -4.0]]),))
def n_kwargs_only_call_of_helper(x):
    def helper(*, a, b=2.0, **rest):
        if a.sum() > 0:
            return a * b + rest.get("c", 0)
        return a
    return helper(a=x, c=1.0), helper(b=3.0, a=-x)


# =========================================================================================
# O. Generation loops and model forwards in the style of Hugging Face transformers
# =========================================================================================

class _TinyLM(nn.Module):
    def __init__(self, vocab=6, dim=4):
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(vocab, dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, input_ids):
        return self.head(self.emb(input_ids).mean(1))


def _greedy_generate(model, input_ids, max_new_tokens=5, eos_token_id=2, pad_token_id=0):
    """transformers' greedy search loop, reduced: unfinished_sequences, eos, early stop."""
    unfinished = torch.ones(input_ids.shape[0], dtype=torch.long)
    steps = 0
    while True:
        logits = model(input_ids)
        next_tokens = torch.argmax(logits, dim=-1)
        next_tokens = next_tokens * unfinished + pad_token_id * (1 - unfinished)
        input_ids = torch.cat([input_ids, next_tokens[:, None]], dim=-1)
        unfinished = unfinished & ~(next_tokens == eos_token_id)
        steps += 1
        if unfinished.max() == 0 or steps >= max_new_tokens:
            break
    return input_ids


def test_o_greedy_generation_loop():
    m = _TinyLM()
    faithful(functools.partial(_greedy_generate, m),
             [(T([[1, 3], [4, 5]]),), (T([[2, 2], [0, 1]]),)])


class _HFStyleBlock(nn.Module):
    """transformers 5 style forward: try/finally around the body, ModelOutput result,
    optional past_key_values cache object, output_attentions flag."""
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.q = nn.Linear(4, 4)
        self.calls = 0

    def forward(self, hidden, attention_mask=None, past_key_values=None,
                output_attentions=False):
        try:
            scores = self.q(hidden) @ hidden.transpose(-1, -2)
            if attention_mask is not None:
                scores = scores.masked_fill(attention_mask[:, None, :] == 0, -1e9)
            attn = scores.softmax(-1)
            out = attn @ hidden
            if past_key_values is not None:
                past_key_values.update(out, out, 0)
            if out.abs().max() > 10:
                out = out / out.abs().max()
            result = ModelOutput(last_hidden_state=out)
            if output_attentions:
                result["attentions"] = attn
            return result
        finally:
            self.calls += 1


def test_o_hf_style_forward_with_try_finally():
    mask = T([[1, 1, 0], [1, 1, 1]])
    for strict in (False, True):
        me, mg = _HFStyleBlock(), _HFStyleBlock()
        g = to_graph(mg, strict=strict)
        for args in ((R(2, 3, 4),), (R(2, 3, 4, seed=1) * 20, mask),
                     (R(2, 3, 4, seed=2), mask, None, True)):
            exp = me(*args)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", FallbackWarning)
                    got = g(*args)
            except ConversionError:
                assert strict
                break
            same(got, exp)
            assert mg.calls == me.calls


def test_o_hf_style_forward_with_cache_object():
    for strict in (False, True):
        me, mg = _HFStyleBlock(), _HFStyleBlock()
        g = to_graph(mg, strict=strict)
        ce, cg = Cache(), Cache()
        try:
            for x in (R(1, 2, 4), R(1, 2, 4, seed=1) * 30):
                exp = me(x, None, ce)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", FallbackWarning)
                    got = g(x, None, cg)
                same(got, exp)
                same(cg, ce, "cache")
        except ConversionError:
            assert strict


def _beam_topk_step(scores, beam_size, finished):
    """fairseq-style: pick top beams, mark finished by eos, stop when all finished."""
    out = []
    while not finished.all():
        top, idx = scores.topk(beam_size, dim=-1)
        out.append(idx)
        finished = finished | (idx[:, 0] == 0)
        scores = scores.roll(1, dims=-1)
        if len(out) >= 4:
            break
    return torch.stack(out) if out else scores.new_zeros(0, dtype=torch.long)


@case((T([[0.1, 0.5, 0.4], [0.9, 0.05, 0.05]]), 2, T([False, False])),
      (T([[0.1, 0.5, 0.4], [0.9, 0.05, 0.05]]), 2, T([True, True])))
def o_beam_step_loop(scores, beam_size, finished):
    return _beam_topk_step(scores, beam_size, finished)
