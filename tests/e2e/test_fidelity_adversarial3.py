"""Adversarial round 3: programs written as users write them, eager vs to_graph (default, strict).

Each scenario builds its own fresh state, wraps its function with the mode's wrapper, makes
several calls (changing state between them where guards are concerned) and returns what a
user could observe. Default mode must equal eager unless it warned FallbackWarning; strict
mode must equal eager unless it raised ConversionError.
"""
import collections
import contextlib
import io
import logging
import math
import os
import sys
import types
import warnings

import pytest
import torch
from torch import nn

from transpiler import ConversionError, FallbackWarning, RetracingWarning, to_graph


class _Raised:
    def __init__(self, e):
        self.kind = type(e)
        self.msg = str(e)

    def __repr__(self):
        return f"raised {self.kind.__name__}: {self.msg}"


def _same(a, b, path="out"):
    """Exact types, dtypes, values, requires_grad, strides; 0-d tensor may stand for a number."""
    if isinstance(b, torch.Tensor):
        assert type(a) is type(b), f"{path}: type {type(a)} != {type(b)}"
        assert a.dtype == b.dtype and a.shape == b.shape, f"{path}: {a.dtype}{tuple(a.shape)} != {b.dtype}{tuple(b.shape)}"
        assert a.requires_grad == b.requires_grad, f"{path}: requires_grad {a.requires_grad} != {b.requires_grad}"
        if b.layout == torch.strided and b.numel() > 1:
            assert a.stride() == b.stride(), f"{path}: stride {a.stride()} != {b.stride()}"
        if b.is_floating_point():
            torch.testing.assert_close(a.detach(), b.detach(), equal_nan=True)
        else:
            assert torch.equal(a, b), f"{path}: {a} != {b}"
        return
    if isinstance(b, (bool, int, float)) and isinstance(a, torch.Tensor):
        assert a.dim() == 0, f"{path}: {a!r} for {b!r}"
        if isinstance(b, bool):
            assert a.dtype == torch.bool
        elif isinstance(b, int):
            assert not a.is_floating_point() and a.dtype != torch.bool, f"{path}: {a!r} for {b!r}"
        else:
            assert a.is_floating_point(), f"{path}: {a!r} for {b!r}"
        assert abs(float(a) - float(b)) <= 1e-5 * (1 + abs(float(b))), f"{path}: {a!r} != {b!r}"
        return
    assert type(a) is type(b), f"{path}: type {type(a).__name__} != {type(b).__name__} ({a!r} vs {b!r})"
    if isinstance(b, _Raised):
        assert (a.kind, a.msg) == (b.kind, b.msg), f"{path}: {a!r} != {b!r}"
    elif isinstance(b, dict):
        assert list(a) == list(b), f"{path}: keys {list(a)} != {list(b)}"
        for k in b:
            _same(a[k], b[k], f"{path}[{k!r}]")
    elif isinstance(b, (list, tuple)):
        assert len(a) == len(b), f"{path}: len {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{path}[{i}]")
    elif hasattr(b, "__dict__") and type(b).__eq__ is object.__eq__ and not callable(b):
        _same(vars(a), vars(b), f"{path}.__dict__")
    elif isinstance(b, float):
        assert (math.isnan(a) and math.isnan(b)) or abs(a - b) <= 1e-5 * (1 + abs(b)), f"{path}: {a} != {b}"
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def _observe(scenario, wrap):
    out, err = io.StringIO(), io.StringIO()
    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter("always")
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                res = scenario(wrap)
            except ConversionError as e:
                res = e
            except Exception as e:  # noqa: BLE001 - what eager raises is observable
                res = _Raised(e)
    fell = [w for w in ws if issubclass(w.category, FallbackWarning)]
    user = [(w.category, str(w.message), w.filename, w.lineno) for w in ws
            if not issubclass(w.category, (FallbackWarning, RetracingWarning))]
    return res, out.getvalue(), err.getvalue(), user, fell


def differential(scenario):
    exp, eo, ee, ew, _ = _observe(scenario, lambda f: f)
    assert not isinstance(exp, ConversionError)
    got, go, ge, gw, fell = _observe(scenario, to_graph)
    # A loud fallback runs eagerly, so its results and output must match eager too.
    _same(got, exp)
    assert go == eo, f"stdout {go!r} != {eo!r}"
    assert ge == ee, f"stderr {ge!r} != {ee!r}"
    assert gw == ew, f"warnings {gw} != {ew}"
    sgot, so, se, sw, _ = _observe(scenario, lambda f: to_graph(f, strict=True))
    if isinstance(sgot, ConversionError):
        return "fell back" if fell else "strict refused"
    _same(sgot, exp, "strict")
    assert so == eo, f"strict stdout {so!r} != {eo!r}"
    assert sw == ew, f"strict warnings {sw} != {ew}"
    return "converted"


def T(*v):
    return torch.tensor(v, dtype=torch.float32)


# ---------------------------------------------------------------- guards: modules
def s_eval_toggle_dropout(wrap):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.5))

    def f(x):
        y = m(x)
        if y.sum() > 0:
            return y * 2
        return y - 1
    g = wrap(f)
    x = torch.ones(4, 3)
    r = []
    m.eval(); r.append(g(x))
    m.train(); torch.manual_seed(1); r.append(g(x))
    m.eval(); r.append(g(x))
    return r


def s_submodule_swapped(wrap):
    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.act = nn.ReLU()
            self.lin = nn.Linear(2, 2)

        def forward(self, x):
            h = self.act(self.lin(x))
            if h.mean() > 0.1:
                h = h * 3
            return h
    net = Net()
    g = wrap(net)
    x = T(1.0, -2.0)
    r = [g(x)]
    net.act = nn.Tanh()
    r.append(g(x))
    net.act = nn.Identity()
    r.append(g(x))
    return [t.detach() for t in r]


def s_modulelist_grown(wrap):
    torch.manual_seed(0)
    layers = nn.ModuleList([nn.Linear(2, 2)])

    def f(x):
        for layer in layers:
            x = layer(x)
            if x.sum() < 0:
                x = -x
        return x
    g = wrap(f)
    x = T(0.5, 0.25)
    r = [g(x).detach()]
    layers.append(nn.Linear(2, 2))
    r.append(g(x).detach())
    del layers[0]
    r.append(g(x).detach())
    return r


def s_parameter_replaced(wrap):
    lin = nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        lin.weight.fill_(1.0)

    def f(x):
        y = lin(x)
        while y.sum() < 10:
            y = y * 2
        return y
    g = wrap(f)
    x = T(1.0, 1.0)
    r = [g(x).detach()]
    lin.weight = nn.Parameter(torch.full((1, 2), 3.0))
    r.append(g(x).detach())
    with torch.no_grad():
        lin.weight.mul_(-1)  # in place: same parameter object, different values
        lin.weight.add_(5.0)
    r.append(g(x).detach())
    return r


def s_forward_hook_added_on_submodule(wrap):
    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(2, 2)

        def forward(self, x):
            h = self.a(x)
            if h.sum() > 0:
                return h + 1
            return h - 1
    net = Net()
    g = wrap(net)
    x = T(1.0, 2.0)
    r = [g(x).detach()]
    h = net.a.register_forward_hook(lambda mod, inp, out: out * 10)
    r.append(g(x).detach())
    h.remove()
    r.append(g(x).detach())
    return r


def s_pre_hook_added(wrap):
    lin = nn.Linear(2, 2)
    with torch.no_grad():
        lin.weight.copy_(torch.eye(2)); lin.bias.zero_()

    def f(x):
        y = lin(x)
        return y * 2 if y.max() > 1 else y
    g = wrap(f)
    x = T(0.5, 0.7)
    r = [g(x).detach()]
    h = lin.register_forward_pre_hook(lambda mod, inp: (inp[0] * 4,))
    r.append(g(x).detach())
    h.remove()
    r.append(g(x).detach())
    return r


def s_module_python_attr_flag(wrap):
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.use_skip = True
            self.scale = 2.0

        def forward(self, x):
            y = x * self.scale
            if self.use_skip:
                y = y + x
            if y.sum() > 3:
                y = y / 2
            return y
    net = Net()
    g = wrap(net)
    x = T(1.0, 1.0)
    r = [g(x)]
    net.use_skip = False
    r.append(g(x))
    net.scale = 5.0
    r.append(g(x))
    return r


def s_eval_batchnorm_running_stats(wrap):
    bn = nn.BatchNorm1d(2)

    def f(x):
        y = bn(x)
        if y.abs().sum() > 0:
            y = y + 1
        return y, bn.running_mean.clone()
    g = wrap(f)
    x = torch.tensor([[1.0, 2.0], [3.0, 5.0]])
    r = [g(x), g(x)]
    bn.eval()
    r.append(g(x))
    return [(a.detach(), b) for a, b in r]


# ---------------------------------------------------------------- guards: Python state
CFG = types.SimpleNamespace(scale=1.0, mode="add", depth=2)


def s_global_config_object(wrap):
    CFG.scale, CFG.mode, CFG.depth = 1.0, "add", 2

    def f(x):
        for _ in range(CFG.depth):
            if (x * CFG.scale).sum() > 0:
                x = x + 1 if CFG.mode == "add" else x * 2
        return x
    g = wrap(f)
    x = T(1.0, 2.0)
    r = [g(x)]
    CFG.mode = "mul"
    r.append(g(x))
    CFG.depth = 3
    r.append(g(x))
    CFG.scale = -1.0
    r.append(g(x))
    return r


class Holder:
    FACTOR = 2


def s_class_attr_changed(wrap):
    Holder.FACTOR = 2

    def f(x):
        h = Holder()
        if x.sum() > 0:
            return x * h.FACTOR
        return x
    g = wrap(f)
    r = [g(T(1.0))]
    Holder.FACTOR = 7
    r.append(g(T(1.0)))
    Holder.FACTOR = 2
    return r


def s_function_attr(wrap):
    def f(x):
        if x.sum() > f.threshold:
            return x - f.threshold
        return x
    f.threshold = 1.0
    g = wrap(f)
    r = [g(T(3.0))]
    f.threshold = 5.0
    r.append(g(T(3.0)))
    return r


def s_closure_list_mutated(wrap):
    weights = [1.0, 2.0]

    def f(x):
        acc = x * 0
        for w in weights:
            if x.sum() > w:
                acc = acc + w
        return acc
    g = wrap(f)
    r = [g(T(5.0))]
    weights.append(3.0)
    r.append(g(T(5.0)))
    weights[0] = 10.0
    r.append(g(T(5.0)))
    return r


def s_dict_config_arg(wrap):
    def f(x, cfg):
        if cfg["act"] == "relu":
            x = torch.relu(x)
        if x.sum() > cfg["th"]:
            x = x * cfg["mult"]
        return x
    g = wrap(f)
    cfg = {"act": "relu", "th": 0.0, "mult": 2}
    x = T(-1.0, 2.0)
    r = [g(x, cfg)]
    cfg["act"] = "none"
    r.append(g(x, cfg))
    cfg["mult"] = 3
    r.append(g(x, cfg))
    return r


def s_item_of_buffer(wrap):
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("steps", torch.tensor(0))

        def forward(self, x):
            if self.steps.item() > 1:
                return x * 10
            if x.sum() > 0:
                return x + 1
            return x
    net = Net()
    g = wrap(net)
    r = []
    for i in range(4):
        r.append(g(T(1.0)))
        net.steps += 1
    return r


def s_bool_of_global_tensor(wrap):
    flag = torch.tensor(True)

    def f(x):
        if bool(flag):
            x = x + 1
        while x.sum() < 5:
            x = x * 2
        return x
    g = wrap(f)
    r = [g(T(1.0))]
    flag.fill_(False)
    r.append(g(T(1.0)))
    return r


def s_requires_grad_param_toggled(wrap):
    torch.manual_seed(0)
    lin = nn.Linear(2, 1)

    def f(x):
        y = lin(x)
        if y.sum() > -100:
            y = y * 2
        return y.requires_grad, y
    g = wrap(f)
    x = T(1.0, 2.0)
    r = [g(x)]
    lin.requires_grad_(False)
    r.append(g(x))
    return [(a, b.detach()) for a, b in r]


# ---------------------------------------------------------------- tensor state
def s_strides_of_merged_if(wrap):
    def f(x):
        if x.sum() > 0:
            y = x.t()
        else:
            y = x * 1
        return y.contiguous().stride(), y + 0
    g = wrap(f)
    a = torch.arange(6.0).reshape(2, 3)
    return [g(a), g(-a)]


def s_result_strides_transpose_branch(wrap):
    def f(x):
        if x.mean() > 0:
            return x.transpose(0, 1)
        return x.transpose(0, 1) * 2
    g = wrap(f)
    a = torch.arange(6.0).reshape(2, 3)
    return [g(a), g(-a)]


def s_permute_loop(wrap):
    def f(x):
        n = 0
        while x.sum() > 1:
            x = x.permute(1, 0) / 2
            n += 1
        return x, n
    g = wrap(f)
    return [g(torch.ones(2, 3)), g(torch.ones(2, 3) * 8)]


def s_requires_grad_path_dependent(wrap):
    def f(x, w):
        if x.sum() > 0:
            y = x * w
        else:
            y = x + 1
        return y, y.requires_grad, y.is_leaf
    g = wrap(f)
    w = torch.tensor(2.0, requires_grad=True)
    return [tuple(v.detach() if isinstance(v, torch.Tensor) else v for v in g(T(1.0), w)),
            tuple(v.detach() if isinstance(v, torch.Tensor) else v for v in g(T(-1.0), w))]


def s_grad_through_while(wrap):
    def f(x):
        while x.norm() < 10:
            x = x * 1.5
        return x.sum()
    g = wrap(f)
    r = []
    for v in (1.0, 4.0):
        x = torch.tensor([v, v], requires_grad=True)
        out = g(x)
        out.backward()
        r.append((out.detach(), x.grad))
    return r


def s_default_dtype_changed_between_calls(wrap):
    def f(x):
        z = torch.zeros(2)
        if x.sum() > 0:
            z = z + torch.tensor([1.5, 2.5])
        return z
    g = wrap(f)
    r = [g(T(1.0))]
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        r.append(g(T(1.0)))
    finally:
        torch.set_default_dtype(old)
    r.append(g(T(1.0)))
    return r


def s_inference_mode_caller(wrap):
    def f(x):
        y = x * 2
        if y.sum() > 0:
            y = y + 1
        return y, y.requires_grad
    g = wrap(f)
    x = torch.ones(2, requires_grad=True)
    r = [tuple(v.detach() if isinstance(v, torch.Tensor) else v for v in g(x))]
    with torch.no_grad():
        r.append(g(x))
    with torch.inference_mode():
        a, b = g(torch.ones(2))
        r.append((a.clone(), b, a.is_inference()))
    return r


def s_parameter_subclass_result(wrap):
    p = nn.Parameter(torch.ones(2))

    def f(x):
        if x.sum() > 0:
            return p
        return p * 2
    g = wrap(f)
    a, b = g(T(1.0)), g(T(-1.0))
    return [type(a).__name__, a is p, type(b).__name__, b.detach()]


def s_autocast_caller(wrap):
    def f(x, w):
        y = x @ w
        if y.sum() > 0:
            y = y * 2
        return y
    g = wrap(f)
    x, w = torch.ones(2, 2), torch.ones(2, 2)
    r = [g(x, w)]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        r.append(g(x, w))
    r.append(g(x, w))
    return r


# ---------------------------------------------------------------- printed text
def s_print_number_updated_in_while(wrap):
    def f(x):
        steps = 0
        total = 0.0
        while x.sum() < 100:
            x = x * 3
            steps += 1
            total += 0.5
        print(f"steps={steps} total={total:.2f} shape={x.shape} dtype={x.dtype}")
        print("done", steps, total, sep="|")
        return x
    g = wrap(f)
    return [g(T(1.0, 2.0)), g(T(50.0, 60.0))]


def s_print_tensor_format_spec(wrap):
    def f(x):
        m = x.mean()
        if m > 0:
            print(f"mean {m.item():.3f} {x.sum().item():+.1e}")
        else:
            print("neg {:>8.2f}".format(m.item()))
        return m
    g = wrap(f)
    return [g(T(1.0, 2.0)), g(T(-3.0, 1.0))]


def s_stdout_write_in_branch(wrap):
    def f(x):
        if x.sum() > 0:
            sys.stdout.write("pos\n")
        else:
            sys.stderr.write("neg\n")
        return x
    g = wrap(f)
    return [g(T(1.0)), g(T(-1.0)), g(T(2.0))]


def s_warn_stacklevel_in_branch(wrap):
    def f(x):
        if x.sum() > 0:
            warnings.warn("positive input", UserWarning, stacklevel=2)
        return x + 1
    g = wrap(f)
    return [g(T(1.0)), g(T(-1.0)), g(T(3.0))]


_LOG = logging.getLogger("tograph_adv3")


def s_logging_in_loop(wrap):
    records = []

    class H(logging.Handler):
        def emit(self, rec):
            records.append((rec.levelname, rec.getMessage(), rec.funcName))
    h = H()
    _LOG.addHandler(h)
    _LOG.setLevel(logging.INFO)
    _LOG.propagate = False
    try:
        def f(x):
            while x.sum() < 10:
                _LOG.info("step %s", x.sum())
                x = x * 2
            _LOG.warning("final %.1f", x.sum())
            return x
        g = wrap(f)
        out = [g(T(1.0)), g(T(4.0))]
        _LOG.setLevel(logging.ERROR)
        out.append(g(T(1.0)))
    finally:
        _LOG.removeHandler(h)
    return out, records


def s_print_size_from_runtime_shape(wrap):
    def f(x):
        n = 1
        while x.sum() > 1:
            x = x[: x.shape[0] // 2 + 0] if x.shape[0] > 1 else x / 4
            n += 1
        print(x.shape, len(x), n)
        return x
    g = wrap(f)
    return [g(torch.ones(8)), g(torch.ones(1))]


def s_print_repr_of_list_of_tensors(wrap):
    def f(x):
        parts = [x, x * 2]
        if x.sum() > 0:
            parts = [x + 1]
        print(parts)
        print(repr(x.dtype), str(x.device))
        return parts
    g = wrap(f)
    return [g(T(1.0)), g(T(-1.0))]


def s_print_bool_of_comparison(wrap):
    def f(x):
        ok = bool(x.sum() > 0)
        print("ok:", ok, "val:", float(x.sum()), "int:", int(x.sum()))
        return x
    g = wrap(f)
    return [g(T(1.5)), g(T(-2.5))]


def s_print_file_stringio(wrap):
    buf = io.StringIO()

    def f(x):
        if x.sum() > 0:
            print("pos", x, file=buf)
        return x
    g = wrap(f)
    g(T(1.0)); g(T(-1.0)); g(T(2.0))
    return buf.getvalue()


# ---------------------------------------------------------------- random state
def s_manual_seed_then_rand_in_while(wrap):
    def f(x):
        torch.manual_seed(123)
        n = 0
        while x.sum() < 3:
            x = x + torch.rand(2)
            n += 1
        return x, n
    g = wrap(f)
    return [g(torch.zeros(2)), g(torch.ones(2) * 5), g(torch.zeros(2))]


def s_global_rng_continues(wrap):
    def f(x):
        if x.sum() > 0:
            return x + torch.randn(2)
        return x - torch.rand(2)
    g = wrap(f)
    torch.manual_seed(5)
    r = [g(T(1.0, 1.0)), g(T(-1.0, -1.0)), g(T(1.0, 1.0))]
    r.append(torch.rand(1))
    return r


def s_fork_rng(wrap):
    def f(x):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            noise = torch.rand(2)
        if x.sum() > 0:
            x = x + noise
        return x, torch.rand(1)
    g = wrap(f)
    torch.manual_seed(9)
    return [g(T(1.0, 1.0)), g(T(-1.0, 1.0))]


def s_dropout_train_functional(wrap):
    def f(x, training):
        y = nn.functional.dropout(x, 0.5, training=training)
        if y.sum() > 2:
            y = y / 2
        return y
    g = wrap(f)
    torch.manual_seed(3)
    x = torch.ones(8)
    return [g(x, True), g(x, False), g(x, True)]


def s_bernoulli_in_loop(wrap):
    def f(p):
        count = 0
        while count < 5 and torch.bernoulli(p).sum() < 2:
            count += 1
        return count
    g = wrap(f)
    torch.manual_seed(0)
    return [g(torch.full((3,), 0.3)), g(torch.full((3,), 0.9))]


# ---------------------------------------------------------------- builtin effects
def s_deque_in_branch(wrap):
    hist = collections.deque(maxlen=2)

    def f(x):
        if x.sum() > 0:
            hist.append(1)
        return x
    g = wrap(f)
    g(T(1.0)); g(T(-1.0)); g(T(1.0))
    return list(hist)


def s_iterator_next_in_loop(wrap):
    def f(x, scales):
        it = iter(scales)
        while x.sum() < 10:
            x = x * next(it)
        return x
    g = wrap(f)
    return [g(T(1.0), [2.0, 3.0, 4.0, 5.0]), g(T(1.0), [20.0, 1.0])]


def s_set_add_in_if(wrap):
    seen = set()

    def f(x):
        if x.max() > 1:
            seen.add("big")
        else:
            seen.add("small")
        return x
    g = wrap(f)
    g(T(2.0)); g(T(0.5))
    return sorted(seen)


def s_numpy_global_written(wrap):
    import numpy as np
    stats = np.zeros(2)

    def f(x):
        if x.sum() > 0:
            stats[0] += 1
        else:
            stats[1] += 1
        return x
    g = wrap(f)
    g(T(1.0)); g(T(-1.0)); g(T(1.0))
    return stats.tolist()


def s_generator_consumed_in_while(wrap):
    def f(x):
        gen = (i * 0.5 for i in range(1, 100))
        while x.sum() < 4:
            x = x + next(gen)
        return x
    g = wrap(f)
    return [g(T(0.0)), g(T(10.0))]


def s_stringio_local(wrap):
    def f(x):
        buf = io.StringIO()
        if x.sum() > 0:
            buf.write("pos")
        else:
            buf.write("neg")
        return x, buf.getvalue()
    g = wrap(f)
    return [g(T(1.0)), g(T(-1.0))]


# ---------------------------------------------------------------- path-dependent containers
def s_dict_key_added_on_one_path_then_used(wrap):
    def f(x):
        out = {"x": x}
        if x.sum() > 0:
            out["extra"] = x * 2
        return out
    g = wrap(f)
    return [g(T(1.0)), g(T(-1.0))]


def s_dict_key_then_in(wrap):
    def f(x):
        out = {"x": x}
        if x.sum() > 0:
            out["extra"] = x * 2
        if "extra" in out:
            return out["extra"] + 1
        return out["x"]
    g = wrap(f)
    return [g(T(1.0)), g(T(-1.0))]


def s_early_return_structures(wrap):
    def f(x):
        if x.sum() > 0:
            return x, (x * 2, [x + 1])
        if x.sum() < -5:
            return {"a": x}
        return [x, x]
    g = wrap(f)
    return [g(T(1.0)), g(T(-10.0)), g(T(-1.0))]


def s_caller_uses_path_structure(wrap):
    def f(x):
        if x.sum() > 0:
            res = (x, x + 1)
        else:
            res = (x,)
        return res

    g = wrap(f)
    out = []
    for v in (1.0, -1.0):
        r = g(T(v))
        out.append((len(r), r))
    return out


def s_list_length_by_path_then_len(wrap):
    def f(x):
        items = [x]
        if x.sum() > 0:
            items.append(x * 2)
        return len(items), torch.stack(items).sum(0)
    g = wrap(f)
    return [g(T(1.0)), g(T(-1.0))]


# ---------------------------------------------------------------- values changed after return
class Log:
    def __init__(self):
        self.log = []
        self.exits = 0

    def __enter__(self):
        self.log.append("enter")
        return self

    def __exit__(self, *a):
        self.log.append("exit")
        self.exits += 1
        return False


def s_with_return_log(wrap):
    def f(x):
        cm = Log()
        with cm:
            if x.sum() > 0:
                return x, cm.log, cm.exits
            cm.log.append("neg")
        return x * 2, cm.log, cm.exits
    g = wrap(f)
    return [g(T(1.0)), g(T(-1.0))]


def s_finally_mutates_returned_dict(wrap):
    def f(x):
        info = {"n": 0}
        try:
            if x.sum() > 0:
                info["n"] = 1
                return x, info
            return -x, info
        finally:
            info["done"] = True
    g = wrap(f)
    return [g(T(1.0)), g(T(-1.0))]


def s_finally_counter(wrap):
    def f(x):
        state = {"calls": []}
        try:
            while x.sum() < 8:
                x = x * 2
            return state
        finally:
            state["calls"].append(x.sum())
    g = wrap(f)
    return [g(T(1.0)), g(T(9.0))]


# ---------------------------------------------------------------- identity and aliasing
def s_is_same_list_through_if(wrap):
    def f(x):
        a = [x]
        b = a
        if x.sum() > 0:
            b = [x * 2]
        return a is b, b
    g = wrap(f)
    return [g(T(1.0)), g(T(-1.0))]


def s_alias_list_append_in_while(wrap):
    def f(x):
        acc = []
        alias = acc
        while x.sum() < 8:
            acc.append(x)
            x = x * 2
        return len(alias), x
    g = wrap(f)
    return [g(T(1.0)), g(T(9.0))]


def s_tensor_is_input(wrap):
    def f(x):
        y = x
        if x.sum() > 0:
            y = x + 0
        return y is x, y
    g = wrap(f)
    return [g(T(1.0)), g(T(-1.0))]


def s_returned_input_identity(wrap):
    def f(x):
        if x.sum() > 0:
            return x
        return x * 2
    g = wrap(f)
    a = T(1.0)
    b = T(-1.0)
    return [g(a) is a, g(b) is b]


def s_inplace_on_arg_in_branch(wrap):
    def f(x):
        if x.sum() > 0:
            x.mul_(2)
        else:
            x.add_(10)
        return x
    g = wrap(f)
    a, b = T(1.0, 2.0), T(-5.0, 1.0)
    ra, rb = g(a), g(b)
    return [ra is a, rb is b, a, b]


def s_view_alias_in_while(wrap):
    def f(x):
        v = x[0]
        while x.sum() < 10:
            x.add_(1)
        return v * 1
    g = wrap(f)
    return [g(torch.zeros(2)), g(torch.full((2,), 7.0))]


def s_dict_alias_updated_in_if(wrap):
    def f(x):
        d = {"v": x}
        same = d
        if x.sum() > 0:
            d["v"] = x + 1
        return same["v"], d is same
    g = wrap(f)
    return [g(T(1.0)), g(T(-1.0))]


# ---------------------------------------------------------------- mixed library-style
def s_hf_like_output(wrap):
    class Out(collections.OrderedDict):
        pass

    def f(x, return_dict):
        h = x
        hidden = []
        for _ in range(2):
            h = torch.tanh(h)
            if h.sum() > 0:
                h = h * 2
            hidden.append(h)
        if not return_dict:
            return (h, tuple(hidden))
        o = Out(last=h, hidden=tuple(hidden))
        return o
    g = wrap(f)
    r1 = g(T(1.0), True)
    r2 = g(T(-1.0), False)
    return [type(r1).__name__, dict(r1), r2]


def s_generation_loop_eos(wrap):
    def f(logits, max_new):
        tokens = []
        cur = logits
        for i in range(max_new):
            nxt = cur.argmax()
            tokens.append(nxt)
            if nxt == 0:
                break
            cur = torch.roll(cur, 1)
        return torch.stack(tokens), i
    g = wrap(f)
    return [g(T(0.1, 0.5, 0.2), 5), g(T(0.1, 0.2, 0.3), 5)]


def s_scalar_accumulated_as_python_float(wrap):
    def f(x):
        loss = 0.0
        for row in x:
            if row.sum() > 0:
                loss += row.sum().item()
        return loss, type(loss).__name__
    g = wrap(f)
    return [g(torch.tensor([[1.0, 2.0], [-3.0, 1.0]])), g(torch.tensor([[-1.0, -2.0], [3.0, 1.0]]))]


def s_int_counter_type_name(wrap):
    def f(x):
        k = 0
        while x.sum() > 1:
            x = x / 2
            k += 1
        return type(k).__name__, isinstance(k, int), k * 1.5
    g = wrap(f)
    return [g(T(8.0)), g(T(0.5))]


def s_method_replaced_on_class(wrap):
    class Scaler:
        def scale(self, t):
            return t * 2

    s = Scaler()

    def f(x):
        if x.sum() > 0:
            return s.scale(x)
        return x
    g = wrap(f)
    r = [g(T(1.0))]
    Scaler.scale = lambda self, t: t * 100
    r.append(g(T(1.0)))
    s.scale = lambda t: t - 1  # instance attribute shadows
    r.append(g(T(1.0)))
    return r


def s_global_module_global_rebound(wrap):
    global _ACT
    _ACT = torch.relu

    def f(x):
        y = _ACT(x)
        if y.sum() > 0.5:
            y = y * 2
        return y
    g = wrap(f)
    r = [g(T(-1.0, 1.0))]
    _ACT = torch.tanh
    r.append(g(T(-1.0, 1.0)))
    return r


_ACT = torch.relu


def s_getattr_string_attr(wrap):
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.kind = "a"
            self.a = nn.Identity()
            self.b = nn.Softplus()

        def forward(self, x):
            y = getattr(self, self.kind)(x)
            if y.sum() > 0:
                y = y + 1
            return y
    net = Net()
    g = wrap(net)
    r = [g(T(-1.0, 0.5))]
    net.kind = "b"
    r.append(g(T(-1.0, 0.5)))
    return r


def s_grad_of_module_param_after_call(wrap):
    torch.manual_seed(0)
    lin = nn.Linear(2, 1)

    def f(x):
        y = lin(x)
        if y.sum() > 0:
            y = y * 3
        else:
            y = y * -1
        return y.sum()
    g = wrap(f)
    r = []
    for v in (T(1.0, 2.0), T(-5.0, -5.0)):
        lin.zero_grad()
        g(v).backward()
        r.append(lin.weight.grad.clone())
    return r


# ---------------------------------------------------------------- second batch: path-dependent shapes
def s_shape_of_merged_if_tuple(wrap):
    def f(x):
        if x.sum() > 0:
            y = x.t()
        else:
            y = x * 1
        return tuple(y.shape), y.size(0), y.dim()
    g = wrap(f)
    a = torch.arange(6.0).reshape(2, 3)
    return [g(a), g(-a)]


def s_contiguous_stride_if(wrap):
    def f(x):
        if x.sum() > 0:
            y = x.t()
        else:
            y = x * 1
        return y.contiguous().stride()
    g = wrap(f)
    a = torch.arange(6.0).reshape(2, 3)
    return [g(a), g(-a)]


def s_numel_after_while_slicing(wrap):
    def f(x):
        while x.sum() > 4:
            x = x[1:]
        return x.numel(), x.shape[0]
    g = wrap(f)
    return [g(torch.ones(8)), g(torch.ones(3))]


def s_print_shape_of_path_dependent(wrap):
    def f(x):
        if x.sum() > 0:
            y = x.reshape(3, 2)
        else:
            y = x
        print(y.shape, y.size())
        return y
    g = wrap(f)
    a = torch.arange(6.0).reshape(2, 3)
    return [g(a), g(-a)]


def s_view_of_path_dependent_shape(wrap):
    def f(x):
        if x.sum() > 0:
            y = x.t()
        else:
            y = x
        return y.reshape(-1)[: y.shape[1]]
    g = wrap(f)
    a = torch.arange(6.0).reshape(2, 3)
    return [g(a), g(-a)]


def s_is_contiguous_after_if(wrap):
    def f(x):
        if x.sum() > 0:
            y = x.t()
        else:
            y = x.t().contiguous()
        return y.is_contiguous(), y + 0
    g = wrap(f)
    a = torch.arange(6.0).reshape(2, 3)
    return [g(a), g(-a)]


def s_dtype_of_merged_if(wrap):
    def f(x):
        if x.sum() > 0:
            y = x.double()
        else:
            y = x * 1
        return y.dtype, y
    g = wrap(f)
    return [g(T(1.0)), g(T(-1.0))]


def s_float_accum_print_precision(wrap):
    def f(x):
        total = 0.0
        while x.sum() < 10:
            x = x + 1
            total += 0.1
        print(total)
        return total
    g = wrap(f)
    return [g(T(7.0)), g(T(1.0))]


def s_int_from_tensor_in_fstring(wrap):
    def f(x):
        n = int(x.argmax())
        label = ["a", "b", "c"][n]
        return label
    g = wrap(f)
    return [g(T(3.0, 1.0, 0.0)), g(T(0.0, 0.0, 9.0))]


def s_item_used_for_list_index(wrap):
    def f(x, table):
        i = x.argmax().item()
        return table[i] * x
    g = wrap(f)
    return [g(T(3.0, 1.0), [2.0, 5.0]), g(T(0.0, 4.0), [2.0, 5.0])]


def s_tolist_in_branch(wrap):
    def f(x):
        vals = x.tolist()
        if sum(vals) > 0:
            return x * len(vals)
        return x
    g = wrap(f)
    return [g(T(1.0, 2.0)), g(T(-1.0, -5.0))]


def s_nonlocal_counter_in_loop(wrap):
    def f(x):
        calls = 0

        def step(t):
            nonlocal calls
            calls += 1
            return t * 2
        while x.sum() < 20:
            x = step(x)
        return x, calls
    g = wrap(f)
    return [g(T(1.0)), g(T(30.0)), g(T(3.0))]


def s_cm_exits_in_loop(wrap):
    def f(x):
        cm = Log()
        while x.sum() < 10:
            with cm:
                x = x * 2
        return x, cm.exits, cm.log
    g = wrap(f)
    return [g(T(1.0)), g(T(20.0))]


def s_obj_attr_str_in_loop(wrap):
    class R:
        tag = "start"

    def f(x):
        r = R()
        while x.sum() < 10:
            x = x * 2
            r.tag = "grew"
        return x, r.tag, f"{r.tag}!"
    g = wrap(f)
    return [g(T(1.0)), g(T(20.0))]


def s_none_vs_tensor_path(wrap):
    def f(x):
        mask = None
        if x.sum() > 0:
            mask = x > 0
        return mask is None, x
    g = wrap(f)
    return [g(T(1.0)), g(T(-1.0))]


def s_optional_arg_none(wrap):
    def f(x, bias=None):
        if bias is not None and bias.sum() > 0:
            x = x + bias
        return x
    g = wrap(f)
    return [g(T(1.0)), g(T(1.0), T(2.0)), g(T(1.0), T(-2.0)), g(T(1.0), None)]


def s_global_counter_incremented(wrap):
    global _CALLS
    _CALLS = 0

    def f(x):
        global _CALLS
        _CALLS += 1
        if x.sum() > 0:
            return x
        return -x
    g = wrap(f)
    g(T(1.0)); g(T(-1.0))
    return _CALLS


_CALLS = 0


def s_ema_update_buffer(wrap):
    class EMA(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("avg", torch.zeros(2))

        def forward(self, x):
            if self.training and x.sum() > 0:
                self.avg.mul_(0.9).add_(x * 0.1)
            return x - self.avg
    m = EMA()
    g = wrap(m)
    r = [g(T(1.0, 2.0)).clone(), g(T(-1.0, 2.0)).clone(), g(T(3.0, 3.0)).clone()]
    m.eval()
    r.append(g(T(5.0, 5.0)).clone())
    return r, m.avg.clone()


def s_sorted_by_tensor_key(wrap):
    def f(xs):
        best = max(xs, key=lambda t: t.sum().item())
        return best * 2
    g = wrap(f)
    return [g([T(1.0), T(3.0), T(2.0)]), g([T(5.0), T(3.0)])]


def s_min_key_len(wrap):
    def f(xs):
        shortest = min(xs, key=len)
        return shortest + 1
    g = wrap(f)
    return [g([T(1.0, 2.0), T(1.0)]), g([T(1.0), T(1.0, 2.0, 3.0)])]


def s_max_key_float(wrap):
    def f(xs):
        return max(xs, key=lambda t: float(t.sum()))
    g = wrap(f)
    return [g([T(1.0), T(3.0)]), g([T(7.0), T(3.0)])]


def s_max_two_args_key(wrap):
    def f(a, b):
        return max(a, b, key=lambda t: t.sum().item()) * 2
    g = wrap(f)
    return [g(T(1.0), T(3.0)), g(T(5.0), T(3.0))]


def s_builtin_sum_any_all(wrap):
    def f(xs):
        total = sum(xs)
        if any(t.sum() > 2 for t in xs):
            total = total * 2
        return total, all(bool(t.sum() > 0) for t in xs)
    g = wrap(f)
    return [g([T(1.0), T(3.0)]), g([T(-1.0), T(1.0)])]


def s_sorted_values_by_tensor(wrap):
    def f(scores):
        order = sorted(range(len(scores)), key=lambda i: scores[i].item(), reverse=True)
        return order, scores[order[0]]
    g = wrap(f)
    return [g([T(1.0), T(3.0), T(2.0)]), g([T(9.0), T(3.0), T(2.0)])]


def s_contiguous_stride_after_reshape_if(wrap):
    def f(x):
        if x.sum() > 0:
            y = x.t()
        else:
            y = x * 1
        return y.reshape(y.shape[0], -1).contiguous().stride()
    g = wrap(f)
    a = torch.arange(6.0).reshape(2, 3)
    return [g(a), g(-a)]


def s_max_key_default(wrap):
    def f(xs):
        return max(xs, default=None, key=lambda t: t.item())
    g = wrap(f)
    return [g([torch.tensor(1.0), torch.tensor(3.0)]), g([torch.tensor(5.0), torch.tensor(3.0)])]


def s_min_key_comprehension(wrap):
    def f(xs):
        return min([t + 0 for t in xs], key=lambda t: t.item())
    g = wrap(f)
    return [g([torch.tensor(1.0), torch.tensor(3.0)]), g([torch.tensor(5.0), torch.tensor(3.0)])]


def s_max_key_tuple(wrap):
    def f(xs):
        return max(tuple(xs), key=lambda t: t.item())
    g = wrap(f)
    return [g([torch.tensor(1.0), torch.tensor(3.0)]), g([torch.tensor(5.0), torch.tensor(3.0)])]


def s_max_key_identity(wrap):
    def f(xs):
        m = max(xs, key=lambda t: t.item())
        return m is xs[0]
    g = wrap(f)
    return [g([torch.tensor(1.0), torch.tensor(3.0)]), g([torch.tensor(5.0), torch.tensor(3.0)])]


def s_max_no_key(wrap):
    def f(xs):
        return max(xs), min(*xs) * 2
    g = wrap(f)
    return [g([torch.tensor(1.0), torch.tensor(3.0)]), g([torch.tensor(5.0), torch.tensor(3.0)])]


def s_max_range_key(wrap):
    def f(xs):
        return max(range(len(xs)), key=lambda i: xs[i].item())
    g = wrap(f)
    return [g([torch.tensor(1.0), torch.tensor(3.0)]), g([torch.tensor(5.0), torch.tensor(3.0)])]


NS = types.SimpleNamespace


def _deep_arg(depth):
    def scenario(wrap):
        leaf = NS(scale=2.0)
        cfg = leaf
        for _ in range(depth - 1):
            cfg = NS(nxt=cfg)

        def f(x, cfg):
            c = cfg
            for _ in range(depth - 1):
                c = c.nxt
            if x.sum() > 0:
                return x * c.scale
            return x
        g = wrap(f)
        r = [g(T(1.0), cfg)]
        leaf.scale = 5.0
        r.append(g(T(1.0), cfg))
        return r
    return scenario


s_deep_arg_attr_3 = _deep_arg(3)
s_deep_arg_attr_4 = _deep_arg(4)
s_deep_arg_attr_5 = _deep_arg(5)
s_deep_arg_attr_7 = _deep_arg(7)

DEEP = NS(a=NS(b=NS(c=NS(d=NS(e=NS(scale=2.0))))))


def s_deep_global_attr_chain(wrap):
    DEEP.a.b.c.d.e.scale = 2.0

    def f(x):
        if x.sum() > 0:
            return x * DEEP.a.b.c.d.e.scale
        return x
    g = wrap(f)
    r = [g(T(1.0))]
    DEEP.a.b.c.d.e.scale = 5.0
    r.append(g(T(1.0)))
    return r


def s_deep_arg_attr_chain_literal(wrap):
    cfg = NS(a=NS(b=NS(c=NS(d=NS(e=NS(scale=2.0))))))

    def f(x, cfg):
        if x.sum() > 0:
            return x * cfg.a.b.c.d.e.scale
        return x
    g = wrap(f)
    r = [g(T(1.0), cfg)]
    cfg.a.b.c.d.e.scale = 5.0
    r.append(g(T(1.0), cfg))
    return r


def s_deep_nested_lists(wrap):
    cfgs = [[[[[{"s": 2.0}]]]]]

    def f(x, c):
        return x * c[0][0][0][0][0]["s"]
    g = wrap(f)
    r = [g(T(1.0), cfgs)]
    cfgs[0][0][0][0][0]["s"] = 7.0
    r.append(g(T(1.0), cfgs))
    return r


def s_deep_sequential_attr(wrap):
    class Deep(nn.Module):
        def __init__(self):
            super().__init__()
            self.m = nn.Sequential(nn.Sequential(nn.Sequential(nn.Sequential(
                nn.Sequential(nn.LeakyReLU(0.1))))))

        def forward(self, x):
            y = self.m(x)
            return y * 2 if y.sum() > 0 else y
    net = Deep()
    g = wrap(net)
    r = [g(T(-1.0, 3.0))]
    net.m[0][0][0][0][0].negative_slope = 0.5
    r.append(g(T(-1.0, 3.0)))
    return r


def s_property_backed_config(wrap):
    class Cfg:
        def __init__(self):
            self._s = 2.0

        @property
        def scale(self):
            return self._s
    c = Cfg()

    def f(x):
        return x * c.scale if x.sum() > 0 else x
    g = wrap(f)
    r = [g(T(1.0))]
    c._s = 9.0
    r.append(g(T(1.0)))
    return r


def s_partial_closure_list(wrap):
    import functools
    scale = [2.0]

    def mul(t, k):
        return t * k * scale[0]
    p = functools.partial(mul, k=3.0)

    def f(x):
        return p(x) if x.sum() > 0 else x
    g = wrap(f)
    r = [g(T(1.0))]
    scale[0] = 10.0
    r.append(g(T(1.0)))
    return r


# ---------------------------------------------------------------- numbers carried by a tensor loop
def _count_steps(body):
    def scenario(wrap):
        g = wrap(body)
        return [g(T(1.0, 1.0)), g(T(20.0, 1.0)), g(T(2.0, 0.5))]
    return scenario


def _range_of_count(x):
    n = 0
    while x.sum() < 10:
        x = x * 2
        n += 1
    return range(n)


def _slice_of_count(x):
    n = 0
    while x.sum() < 10:
        x = x * 2
        n += 1
    return slice(0, n)


def _range_then_list(x):
    n = 0
    while x.sum() < 10:
        x = x * 2
        n += 1
    r = range(n)
    return len(r), list(r)


def _count_builtins(x):
    n = 0
    while x.sum() < 10:
        x = x * 2
        n += 1
    return 1 if n else 0, n or 7, not n, "ab" * n, [0] * n


def _count_loop_list(x):
    n = 0
    while x.sum() < 10:
        x = x * 2
        n += 1
    out = []
    for i in range(n):
        out.append(i)
    return out


def _count_fstring_specs(x):
    k = 0
    while x.sum() < 10:
        x = x * 2
        k += 1
    return f"{k:03d}|{k!r}|{k/3:.4f}|{k:>4}"


def _count_warn(x):
    n = 0
    while x.sum() < 10:
        x = x * 2
        n += 1
    warnings.warn(f"took {n} steps")
    return x


s_range_of_runtime_count = _count_steps(_range_of_count)
s_slice_of_runtime_count = _count_steps(_slice_of_count)
s_range_of_runtime_count_then_list = _count_steps(_range_then_list)
s_count_python_builtins = _count_steps(_count_builtins)
s_count_drives_python_loop = _count_steps(_count_loop_list)
s_count_fstring_specs = _count_steps(_count_fstring_specs)
s_count_in_warning_text = _count_steps(_count_warn)


# ---------------------------------------------------------------- Python values chosen by a tensor if
def _pv1(x):
    if x.sum() > 0:
        r = (x, "pos")
    else:
        r = (x, "neg")
    return r[1] + "!", r
def _pv2(x):
    label = "pos" if x.sum() > 0 else "neg"
    return {label: x}
def _pv3(x):
    label = "pos" if x.sum() > 0 else "neg"
    return label == "pos", label
def _pv4(x):
    cls = int if x.sum() > 0 else float
    return cls
def _pv5(x):
    fn = torch.relu if x.sum() > 0 else torch.tanh
    return fn(x), fn
def _pv6(x):
    d = {}
    if x.sum() > 0:
        d["a"] = x
    else:
        d["b"] = x
    return list(d.keys()), d
def _pv7(x):
    items = []
    if x.sum() > 0:
        items = [x, x]
    return items, bool(items)
def _pv8(x):
    out = (x,) if x.sum() > 0 else [x]
    return type(out).__name__
def _pv9(x):
    a = [1, 2]
    if x.sum() > 0:
        a = [3]
    return a, sum(a)
def _pv10(x):
    e = None
    if x.sum() > 0:
        e = ValueError("pos")
    return e is None, x
def _pv11(x):
    ids = [0]
    if x.sum() > 0:
        ids = ids + [1]
    return x[ids]
def _pv12(x):
    dev = x.device if x.sum() > 0 else torch.device("cpu")
    return str(dev), x.to(dev)
def _pv13(x):
    if x.sum() > 0:
        dt = torch.float64
    else:
        dt = torch.float16
    return x.to(dt), dt
def _pv14(x):
    shape = (2,) if x.sum() > 0 else (1, 2)
    return x.reshape(shape)
def _pv15(x):
    k = 2 if x.sum() > 0 else 1
    return x.repeat(k), torch.zeros(k)


def _three_paths(body):
    def scenario(wrap):
        g = wrap(body)
        return [g(T(1.0, 1.0)), g(T(20.0, 1.0)), g(T(-2.0, 0.5))]
    return scenario


s_path_tuple_str = _three_paths(_pv1)
s_path_dict_key_label = _three_paths(_pv2)
s_path_label_compare = _three_paths(_pv3)
s_path_type_chosen = _three_paths(_pv4)
s_path_function_chosen = _three_paths(_pv5)
s_path_dict_keys_by_path = _three_paths(_pv6)
s_path_list_truthiness = _three_paths(_pv7)
s_path_container_kind_name = _three_paths(_pv8)
s_path_int_list_sum = _three_paths(_pv9)
s_path_exception_or_none = _three_paths(_pv10)
s_path_index_list_by_path = _three_paths(_pv11)
s_path_device_chosen = _three_paths(_pv12)
s_path_dtype_chosen = _three_paths(_pv13)
s_path_shape_chosen = _three_paths(_pv14)
s_path_repeat_count_chosen = _three_paths(_pv15)


# ---------------------------------------------------------------- module trees changed between calls
def s_mod_sequential_member_replaced(wrap):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 1))
    def f(x):
        y = net(x)
        if y.sum() > 0:
            y = y * 2
        return y
    g = wrap(f)
    r = [g(T(1.0, 2.0)).detach()]
    net[1] = nn.Sigmoid()
    r.append(g(T(1.0, 2.0)).detach())
    net.insert(2, nn.Identity()) if hasattr(net, "insert") else net.append(nn.Identity())
    r.append(g(T(1.0, 2.0)).detach())
    return r
def s_mod_moduledict_grown_and_replaced(wrap):
    torch.manual_seed(0)
    d = nn.ModuleDict({"a": nn.Linear(2, 2)})
    def f(x, key):
        y = d[key](x)
        return y if y.sum() > 0 else -y
    g = wrap(f)
    r = [g(T(1.0, 2.0), "a").detach()]
    d["b"] = nn.Linear(2, 2)
    r.append(g(T(1.0, 2.0), "b").detach())
    d["a"] = nn.Identity()
    r.append(g(T(1.0, 2.0), "a").detach())
    return r
def s_mod_bias_removed(wrap):
    torch.manual_seed(0)
    lin = nn.Linear(2, 2)
    nn.init.ones_(lin.weight)
    def f(x):
        y = lin(x)
        return y * 2 if y.sum() > 0 else y
    g = wrap(f)
    r = [g(T(1.0, 2.0)).detach()]
    del lin.bias
    lin.register_parameter("bias", None)
    r.append(g(T(1.0, 2.0)).detach())
    return r
def s_mod_param_data_rebound(wrap):
    torch.manual_seed(0)
    lin = nn.Linear(2, 2)
    def f(x):
        y = lin(x)
        return y * 2 if y.sum() > 0 else y
    g = wrap(f)
    r = [g(T(1.0, 2.0)).detach()]
    lin.weight.data = torch.ones(2, 2)
    r.append(g(T(1.0, 2.0)).detach())
    lin.weight.data = torch.ones(2, 2).double()
    lin.bias.data = lin.bias.data.double()
    try:
        r.append(g(T(1.0, 2.0)).detach())
    except Exception as e:
        r.append(type(e).__name__)
    return r
def s_mod_module_dtype_roundtrip(wrap):
    torch.manual_seed(0)
    lin = nn.Linear(2, 2)
    def f(x):
        y = lin(x)
        return y * 2 if y.sum() > 0 else y
    g = wrap(f)
    r = [g(T(1.0, 2.0))]
    lin.half().float()
    r.append(g(T(1.0, 2.0)))
    lin.to(torch.float64)
    r.append(g(T(1.0, 2.0).double()))
    return [t.detach() for t in r]
def s_mod_global_module_forward_hook(wrap):
    torch.manual_seed(0)
    lin = nn.Linear(2, 2)
    def f(x):
        y = lin(x)
        return y * 2 if y.sum() > 0 else y
    g = wrap(f)
    r = [g(T(1.0, 2.0)).detach()]
    h = nn.modules.module.register_module_forward_hook(lambda mod, i, o: o + 100)
    try:
        r.append(g(T(1.0, 2.0)).detach())
    finally:
        h.remove()
    r.append(g(T(1.0, 2.0)).detach())
    return r
def s_mod_param_grad_hook(wrap):
    torch.manual_seed(0)
    lin = nn.Linear(2, 1)
    def f(x):
        y = lin(x)
        return y * 2 if y.sum() > 0 else y
    g = wrap(f)
    x = T(1.0, 2.0)
    r = []
    lin.weight.register_hook(lambda gr: gr * 0)
    out = g(x); out.sum().backward(); r.append(lin.weight.grad.clone())
    return r
def s_mod_submodule_eval_only(wrap):
    torch.manual_seed(0)
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)
        def forward(self, x):
            y = self.lin(x)
            if self.training:
                y = nn.functional.dropout(y, 0.5)
            return y.sum() if y.sum() > 0 else y.mean()
    net = Net()
    g = wrap(net)
    torch.manual_seed(1)
    r = [g(torch.ones(4, 2)).detach()]
    net.lin.eval()
    r.append(g(torch.ones(4, 2)).detach())
    net.eval()
    r.append(g(torch.ones(4, 2)).detach())
    return r
def s_mod_instance_forward_replaced(wrap):
    torch.manual_seed(0)
    lin = nn.Linear(2, 2)
    def f(x):
        y = lin(x)
        return y * 2 if y.sum() > 0 else y
    g = wrap(f)
    r = [g(T(1.0, 2.0)).detach()]
    lin.forward = lambda x: x * 0 + 3
    r.append(g(T(1.0, 2.0)).detach())
    return r
def s_mod_modulelist_slice_by_attr(wrap):
    torch.manual_seed(0)
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])
            self.n_active = 3
        def forward(self, x):
            for b in self.blocks[: self.n_active]:
                x = b(x)
                if x.norm() > 5:
                    x = x / x.norm()
            return x
    net = Net()
    g = wrap(net)
    r = [g(T(1.0, 2.0)).detach()]
    net.n_active = 1
    r.append(g(T(1.0, 2.0)).detach())
    net.blocks[0] = nn.Identity()
    r.append(g(T(1.0, 2.0)).detach())
    return r


# ---------------------------------------------------------------- autograd state, RNG, text
def _is_leaf_by_path_new_leaf(x):
    y = torch.zeros(2, requires_grad=True)
    if x.sum() > 0:
        y = y * 2
    return y.is_leaf


def _is_leaf_by_path_clone(x):
    y = x.clone().requires_grad_(True)
    z = y * 2 if x.sum() > 0 else y
    return z.is_leaf, z.requires_grad


def _grad_fn_by_path(x):
    y = x.clone().requires_grad_(True)
    z = y * 2 if x.sum() > 0 else y
    return z.grad_fn is None


def _rng_state_restored_in_if(x):
    torch.manual_seed(0)
    a = torch.rand(2)
    state = torch.get_rng_state()
    b = torch.rand(2)
    if x.sum() > 0:
        torch.set_rng_state(state)
    c = torch.rand(2)
    return a, b, c


def _detach_grad_fn(x):
    y = x.detach()
    if x.sum() > 0:
        y = y + 1
    return y, y.grad_fn is None


def _out_buffer_by_path(x):
    y = torch.empty(2)
    if x.sum() > 0:
        torch.add(x, 1, out=y)
    else:
        torch.mul(x, 2, out=y)
    return y


def _index_write_loop(x):
    y = x.clone()
    idx = 0
    while y.sum() < 10:
        y[idx % 2] += 3
        idx += 1
    return y, idx


def _print_mixed(x):
    print(f"{x}", repr(x.sum()), x.dtype, x.shape, x.sum() > 0, sep=";", end="$\n")
    return x


def _writelines_in_if(x):
    if x.sum() > 0:
        sys.stdout.writelines(["a\n", "b\n"])
    return x


def _expanded_strides_if(x):
    y = x.unsqueeze(0).expand(3, 2)
    if x.sum() > 0:
        y = y * 1
    return y.stride(), y


def _no_grad_then_if(x):
    with torch.no_grad():
        y = x * 2
    if x.sum() > 0:
        y = y + x
    return y.requires_grad


def _randint_in_while(x):
    while x.sum() < 10:
        x = x + torch.randint(1, 4, (2,)).float()
    return x


def _three_seeded(body, rg=False):
    def scenario(wrap):
        torch.manual_seed(0)
        g = wrap(body)
        args = [T(1.0, 1.0), T(20.0, 1.0), T(-2.0, 0.5)]
        if rg:
            args = [a.requires_grad_() for a in args]
        return [g(a) for a in args]
    return scenario


s_is_leaf_by_path_new_leaf = _three_seeded(_is_leaf_by_path_new_leaf)
s_is_leaf_by_path_clone = _three_seeded(_is_leaf_by_path_clone)
s_grad_fn_by_path = _three_seeded(_grad_fn_by_path)
s_rng_state_restored_in_if = _three_seeded(_rng_state_restored_in_if)
s_detach_grad_fn = _three_seeded(_detach_grad_fn)
s_detach_grad_fn_requires_grad_arg = _three_seeded(_detach_grad_fn, rg=True)
s_out_buffer_by_path = _three_seeded(_out_buffer_by_path)
s_index_write_loop = _three_seeded(_index_write_loop)
s_print_mixed = _three_seeded(_print_mixed)
s_writelines_in_if = _three_seeded(_writelines_in_if)
s_expanded_strides_if = _three_seeded(_expanded_strides_if)
s_no_grad_then_if = _three_seeded(_no_grad_then_if)
s_no_grad_then_if_requires_grad_arg = _three_seeded(_no_grad_then_if, rg=True)
s_randint_in_while = _three_seeded(_randint_in_while)


# ---------------------------------------------------------------- after return, identity
class Rec:
    def __init__(self): self.events = []; self.depth = 0
    def __enter__(self): self.depth += 1; self.events.append("in"); return self
    def __exit__(self, *a): self.depth -= 1; self.events.append("out"); return False
def _x_with_return_obj_after_while(x):
    r = Rec()
    with r:
        while x.sum() < 10:
            x = x * 2
        return x, r
def _x_with_return_depth(x):
    r = Rec()
    with r:
        if x.sum() > 0:
            return x, r.depth
    return -x, r.depth
def _x_finally_appends_returned_events(x):
    r = Rec()
    try:
        with r:
            if x.sum() > 0:
                return x, r.events
            return x + 1, r.events
    finally:
        r.events.append("fin")
def _x_finally_appends_returned_log(x):
    log = []
    try:
        if x.sum() > 0:
            return log
        log.append("neg")
        return log
    finally:
        log.append("done")
def _x_contextmanager_sink(x):
    @contextlib.contextmanager
    def scope(tag, sink):
        sink.append(tag)
        yield
        sink.append("/" + tag)
    sink = []
    with scope("a", sink):
        if x.sum() > 0:
            x = x * 2
    return x, sink
def _x_finally_rebinds_dict_value(x):
    out = {"v": x}
    try:
        if x.sum() > 0:
            return out
    finally:
        out["v"] = out["v"] + 100
    return out
def _x_finally_bumps_list_after_while(x):
    n = [0]
    try:
        while x.sum() < 10:
            x = x * 2
        return x, n
    finally:
        n[0] += 1
def _x_second_with_returns_events(x):
    r = Rec()
    with r:
        pass
    with r:
        if x.sum() > 0:
            return r.events, r.depth
    return r.events, r.depth
def _x_alias_by_conditional_expr(x):
    a = [x]
    b = a if x.sum() > 0 else list(a)
    b.append(x * 2)
    return a, b, a is b
def _x_is_after_while(x):
    t = x
    while t.sum() < 10:
        t = t * 2
    return t is x

def _x_alias_by_if_statement(x):
    a = [x]
    if x.sum() > 0:
        b = a
    else:
        b = list(a)
    b.append(x * 2)
    return a, b, a is b


def _x_is_after_for_break(x):
    t = x
    for _ in range(5):
        if t.sum() >= 10:
            break
        t = t * 2
    return t is x

s_with_return_obj_after_while = _three_seeded(_x_with_return_obj_after_while)
s_with_return_depth = _three_seeded(_x_with_return_depth)
s_finally_appends_returned_events = _three_seeded(_x_finally_appends_returned_events)
s_finally_appends_returned_log = _three_seeded(_x_finally_appends_returned_log)
s_contextmanager_sink = _three_seeded(_x_contextmanager_sink)
s_finally_rebinds_dict_value = _three_seeded(_x_finally_rebinds_dict_value)
s_finally_bumps_list_after_while = _three_seeded(_x_finally_bumps_list_after_while)
s_second_with_returns_events = _three_seeded(_x_second_with_returns_events)
s_alias_by_conditional_expr = _three_seeded(_x_alias_by_conditional_expr)
s_is_after_while = _three_seeded(_x_is_after_while)
s_alias_by_if_statement = _three_seeded(_x_alias_by_if_statement)
s_is_after_for_break = _three_seeded(_x_is_after_for_break)


# ---------------------------------------------------------------- state read by helpers and the process
HELPER_SCALE = 2.0
def helper(t):
    return t * HELPER_SCALE
def s_helper_global_changed(wrap):
    global HELPER_SCALE
    HELPER_SCALE = 2.0
    def f(x):
        return helper(x) if x.sum() > 0 else x
    g = wrap(f)
    r = [g(T(1.0))]
    HELPER_SCALE = 3.0
    r.append(g(T(1.0)))
    return r
def s_warning_filter_changed(wrap):
    def f(x):
        if x.sum() > 0:
            warnings.warn("pos", RuntimeWarning)
        return x
    g = wrap(f)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g(T(1.0))
    return g(T(1.0))
def s_stdout_replaced_between_calls(wrap):
    def f(x):
        if x.sum() > 0:
            print("pos", x.sum())
        return x
    g = wrap(f)
    buf = io.StringIO()
    old = sys.stdout
    g(T(1.0))
    sys.stdout = buf
    try:
        g(T(2.0))
    finally:
        sys.stdout = old
    return buf.getvalue()
def s_backends_flag_changed(wrap):
    def f(x):
        if torch.backends.cudnn.enabled and x.sum() > 0:
            return x * 2
        return x
    g = wrap(f)
    r = [g(T(1.0))]
    old = torch.backends.cudnn.enabled
    torch.backends.cudnn.enabled = False
    try:
        r.append(g(T(1.0)))
    finally:
        torch.backends.cudnn.enabled = old
    return r
def s_grad_mode_read(wrap):
    def f(x):
        if torch.is_grad_enabled() and x.sum() > 0:
            return x * 2
        return x
    g = wrap(f)
    r = [g(T(1.0))]
    with torch.no_grad():
        r.append(g(T(1.0)))
    return r
def s_environ_read(wrap):
    def f(x):
        if os.environ.get("ADV3_FLAG") == "1" and x.sum() > 0:
            return x * 2
        return x
    g = wrap(f)
    os.environ.pop("ADV3_FLAG", None)
    r = [g(T(1.0))]
    os.environ["ADV3_FLAG"] = "1"
    try:
        r.append(g(T(1.0)))
    finally:
        os.environ.pop("ADV3_FLAG", None)
    return r
def s_default_dtype_read(wrap):
    def f(x):
        if torch.get_default_dtype() == torch.float64 and x.sum() > 0:
            return x * 2
        return x
    g = wrap(f)
    r = [g(T(1.0))]
    torch.set_default_dtype(torch.float64)
    try:
        r.append(g(T(1.0)))
    finally:
        torch.set_default_dtype(torch.float32)
    return r
def s_embedding_padding_idx_changed(wrap):
    torch.manual_seed(0)
    emb = nn.Embedding(5, 2, padding_idx=0)
    def f(idx):
        e = emb(idx)
        return e.sum() if e.sum() > 0 else e.mean()
    g = wrap(f)
    r = [g(torch.tensor([1, 2])).detach()]
    emb.padding_idx = 1
    r.append(g(torch.tensor([1, 2])).detach())
    return r
def s_dict_threshold_boolean_mask(wrap):
    thr = {"v": 0.5}
    def f(x):
        keep = x > thr["v"]
        return x[keep] if keep.any() else x
    g = wrap(f)
    r = [g(T(1.0, 0.2))]
    thr["v"] = 0.1
    r.append(g(T(1.0, 0.2)))
    return r
def s_warning_once_registry(wrap):
    def f(x):
        if x.sum() > 0:
            warnings.warn("once per location")
        return x
    g = wrap(f)
    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter("default")
        g(T(1.0)); g(T(1.0)); g(T(-1.0)); g(T(2.0))
    return [str(w.message) for w in ws if "once" in str(w.message)]


# ---------------------------------------------------------------- a tensor-loop counter in Python arithmetic
def _z_tuple_list_repeat(x):
    n = 0
    while x.sum() < 10:
        x = x * 2
        n += 1
    return (n,) * 2, [n] + [1]
def _z_dict_value(x):
    n = 0
    while x.sum() < 10:
        x = x * 2
        n += 1
    return {"n": n}
def _z_max_min_pow(x):
    n = 0
    while x.sum() < 10:
        x = x * 2
        n += 1
    return max(n, 2), min(n, 1), pow(n, 2)
def _z_int_ops(x):
    n = 0
    while x.sum() < 10:
        x = x * 2
        n += 1
    return n // 2, n % 3, n ** 2, n << 1, n & 1
def _z_conversions(x):
    n = 0
    while x.sum() < 10:
        x = x * 2
        n += 1
    return float(n), int(n), bool(n)
def _z_sorted_sum(x):
    n = 0
    while x.sum() < 10:
        x = x * 2
        n += 1
    return sorted([n, 1, 0]), sum([n, n])
def _z_label_by_count(x):
    n = 0
    while x.sum() < 10:
        x = x * 2
        n += 1
    return "x" if n > 1 else "y"
def _z_comprehension(x):
    n = 0
    while x.sum() < 10:
        x = x * 2
        n += 1
    return [i * n for i in range(3)]
def _z_round_abs_divmod(x):
    n = 0
    while x.sum() < 10:
        x = x * 2
        n += 1
    return round(n / 3, 2), abs(n - 5), divmod(n, 2)
def _z_range_from_count(x):
    n = 0
    while x.sum() < 10:
        x = x * 2
        n += 1
    return list(range(n, 5)), tuple(reversed(range(n)))

s_count_tuple_list_repeat = _three_seeded(_z_tuple_list_repeat)
s_count_dict_value = _three_seeded(_z_dict_value)
s_count_max_min_pow = _three_seeded(_z_max_min_pow)
s_count_int_ops = _three_seeded(_z_int_ops)
s_count_conversions = _three_seeded(_z_conversions)
s_count_sorted_sum = _three_seeded(_z_sorted_sum)
s_count_label_by_count = _three_seeded(_z_label_by_count)
s_count_comprehension = _three_seeded(_z_comprehension)
s_count_round_abs_divmod = _three_seeded(_z_round_abs_divmod)
s_count_range_from_count = _three_seeded(_z_range_from_count)


SCENARIOS = {name[2:]: fn for name, fn in list(globals().items()) if name.startswith("s_")}
XFAIL: dict = {}     # (all fixed)


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=XFAIL[n])) if n in XFAIL else n
    for n in sorted(SCENARIOS)])
def test_adversarial3(name):
    differential(SCENARIOS[name])
