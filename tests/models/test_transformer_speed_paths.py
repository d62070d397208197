"""The fast paths for transformer inference at batch 1 (``runtime/passes/encoder_layer.py``
and the per-call paths), each against eager: values (bit for bit where eager takes the
same fused op), batch 1 and 8, default and strict mode, a second call with other inputs,
gradients where autograd records, and the forms that must keep their traced ops."""
import warnings

import pytest
import torch
import torch.nn as nn

from runtime.passes.encoder_layer import _slow_path, encoder_layer
from transpiler import FallbackWarning, to_graph


def _encoder(norm_first=False, activation="relu", heads=4, batch_first=True, layers=2):
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(32, heads, 64, batch_first=batch_first,
                                       norm_first=norm_first, activation=activation)
    return nn.TransformerEncoder(layer, layers, enable_nested_tensor=False).eval()


def _ops(g, *args, **kwargs):
    entry = g.graph_function.get_concrete(*args, **kwargs)
    return [n.op for n in entry.optimized.walk()]


def _calls(m, strict, batch, mask=False):
    """Three calls with other inputs: (converted, eager) outputs and the converted wrapper."""
    g = to_graph(m, strict=strict)
    pairs = []
    for seed in (1, 2, 3):
        x = torch.randn(batch, 7, 32, generator=torch.Generator().manual_seed(seed))
        kwargs = {}
        if mask:
            pad = torch.zeros(batch, 7, dtype=torch.bool)
            pad[:, -1 - seed % 2:] = True
            kwargs["src_key_padding_mask"] = pad
        with warnings.catch_warnings():
            warnings.simplefilter("error", FallbackWarning)
            got = g(x, **kwargs)
        pairs.append((got, m(x, **kwargs), x, kwargs))
    return g, pairs


@pytest.mark.parametrize("norm_first,activation,batch,strict", [
    (False, "relu", 1, False), (False, "relu", 8, True), (False, nn.GELU(), 1, True),
    (False, "gelu", 8, False), (True, nn.ReLU(), 1, True), (True, "relu", 8, False),
    (True, "gelu", 1, False), (True, "gelu", 8, True)])
def test_encoder_layers_are_eagers_fused_op(norm_first, activation, batch, strict):
    m = _encoder(norm_first, activation)
    with torch.no_grad():
        g, pairs = _calls(m, strict, batch)
        for got, exp, _, _ in pairs:
            assert got.shape == exp.shape and got.dtype == exp.dtype
            assert torch.equal(got, exp)          # eager calls the very same op
        x = pairs[-1][2]
        ops = _ops(g, x)
    assert ops.count("encoder_layer") == 2
    assert "multi_head_attention_forward" not in ops and "layer_norm" not in ops


@pytest.mark.parametrize("norm_first", [False, True])
def test_with_autograd_the_layer_keeps_eagers_slow_path(norm_first):
    m = _encoder(norm_first, "gelu")
    g = to_graph(m)
    for seed in (1, 2):
        x = torch.randn(1, 7, 32, generator=torch.Generator().manual_seed(seed),
                        requires_grad=True)
        got, exp = g(x), m(x)
        torch.testing.assert_close(got, exp, rtol=1e-5, atol=1e-5)
        gx, = torch.autograd.grad(got.square().sum(), x)
        ex, = torch.autograd.grad(exp.square().sum(), x)
        torch.testing.assert_close(gx, ex, rtol=1e-5, atol=1e-5)
    params = [p for p in m.parameters()]
    got = torch.autograd.grad(g(x).sum(), params)
    exp = torch.autograd.grad(m(x).sum(), params)
    for a, b in zip(got, exp):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("use_gelu", [False, True])
def test_the_node_under_autograd_records_the_slow_path(norm_first, use_gelu):
    """A graph traced without autograd, run where autograd records (the node decides at
    run time): the slow path's ops, with eager's values and gradients."""
    m = _encoder(norm_first, "gelu" if use_gelu else "relu", layers=1)
    layer = m.layers[0]
    weights = [layer.self_attn.in_proj_weight, layer.self_attn.in_proj_bias,
               layer.self_attn.out_proj.weight, layer.self_attn.out_proj.bias,
               layer.norm1.weight, layer.norm1.bias, layer.norm2.weight, layer.norm2.bias,
               layer.linear1.weight, layer.linear1.bias, layer.linear2.weight,
               layer.linear2.bias]
    x = torch.randn(2, 5, 32)
    got = encoder_layer(x, 4, *weights[:4], use_gelu, norm_first, 1e-5, *weights[4:])
    assert got.requires_grad
    exp = layer(x)
    torch.testing.assert_close(got, exp, rtol=1e-6, atol=1e-6)
    g1 = torch.autograd.grad(got.sum(), weights)
    g2 = torch.autograd.grad(exp.sum(), weights)
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    with torch.no_grad():                        # the fused op and the slow path agree
        fast = encoder_layer(x, 4, *weights[:4], use_gelu, norm_first, 1e-5, *weights[4:])
        slow = _slow_path(x, 4, tuple(weights), use_gelu, norm_first, 1e-5)
        assert torch.equal(fast, layer(x))
    torch.testing.assert_close(fast, slow, rtol=1e-5, atol=1e-5)


def test_fast_path_switched_off_at_run_time_follows_eager():
    m = _encoder()
    g = to_graph(m)
    x = torch.randn(1, 7, 32)
    with torch.no_grad():
        assert torch.equal(g(x), m(x))
        torch.backends.mha.set_fastpath_enabled(False)
        try:
            got, exp = g(x), m(x)
        finally:
            torch.backends.mha.set_fastpath_enabled(True)
    torch.testing.assert_close(got, exp, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("form", ["odd_heads", "seq_first", "padding_mask", "train"])
def test_forms_eager_runs_slowly_keep_their_ops(form):
    m = _encoder(heads=1 if form == "odd_heads" else 4, batch_first=form != "seq_first")
    if form == "train":
        m.train()
        for mod in m.modules():                  # (no randomness: comparable)
            if isinstance(mod, nn.Dropout):
                mod.p = 0.0
            if isinstance(mod, nn.MultiheadAttention):
                mod.dropout = 0.0
    with torch.no_grad():
        x = torch.randn(7, 2, 32) if form == "seq_first" else torch.randn(2, 7, 32)
        g = to_graph(m, strict=True)
        kwargs = {}
        if form == "padding_mask":
            pad = torch.zeros(2, 7, dtype=torch.bool)
            pad[1, -2:] = True
            kwargs["src_key_padding_mask"] = pad
        for _ in range(2):
            got, exp = g(x, **kwargs), m(x, **kwargs)
            torch.testing.assert_close(got, exp, rtol=1e-5, atol=1e-5, equal_nan=True)
            x = x + 1
        assert "encoder_layer" not in _ops(g, x, **kwargs)


# ----------------------------------------------------------------- guard reads in C
def test_c_guards_answer_as_python_does():
    from runtime import c_guards
    from runtime.guard_tags import EMPTY, Bindings
    if c_guards._checker() is None:
        pytest.skip("no C compiler here: the Python comparison runs")
    a, b = {"x": 1}, dict.fromkeys(range(40))
    tags = c_guards.DictVersions([a, b])
    assert tags.unchanged() is True and tags.now().unchanged() is True
    a["x"] = 2
    assert tags.unchanged() is False and tags.now().unchanged() is True
    b.pop(3)
    assert tags.unchanged() is False
    assert c_guards.DictVersions([]).unchanged() is True

    first, second = object(), object()

    def make():
        value = first

        def read():
            return value

        def rebind(v):
            nonlocal value
            value = v

        def clear():
            nonlocal value
            del value
        return read, rebind, clear
    read, rebind, clear = make()
    cell = read.__closure__[0]
    refs = c_guards.CellRefs([cell], [first], EMPTY)
    bound = Bindings([], [(cell, first)])
    assert refs.unchanged() is True and bound()
    rebind(second)
    assert refs.unchanged() is False and not bound()
    rebind(first)
    assert refs.unchanged() is True and bound()
    clear()                                     # an empty cell
    assert refs.unchanged() is False and not bound()
    empty = Bindings([], [(cell, EMPTY)])
    assert c_guards.CellRefs([cell], [EMPTY], EMPTY).unchanged() is True and empty()
    rebind(first)
    assert not empty()


def test_guards_read_from_c_still_retrace_on_changes():
    """A converted model's guard (module dicts, globals, closure cells, config objects)
    with the C reads: each kind of change is still seen, strict mode, values as eager."""
    m = _encoder(layers=1)
    scale = [2.0]

    def run(x):
        return m(x) * scale[0]
    g = to_graph(run, strict=True)
    x = torch.randn(1, 7, 32)
    with torch.no_grad():
        assert torch.equal(g(x), run(x))
        m.layers[0].norm1.eps = 0.5                     # a module attribute
        torch.testing.assert_close(g(x), run(x), rtol=1e-5, atol=1e-5)
        scale[0] = 3.0                                   # a list the function reads
        torch.testing.assert_close(g(x), run(x), rtol=1e-5, atol=1e-5)
        m.layers[0].linear1.weight = nn.Parameter(torch.randn(64, 32))   # a parameter
        torch.testing.assert_close(g(x), run(x), rtol=1e-5, atol=1e-5)
        m.eval()                                          # tags move, nothing changed
        torch.testing.assert_close(g(x), run(x), rtol=1e-5, atol=1e-5)


def test_backend_flag_readers_answer_as_the_attribute_walk():
    """``trace_reads.backend_flags`` reads each flag without walking ``torch.backends``;
    its answers are the walk's, also after flags are set (and back)."""
    from runtime import trace_reads as tr
    walk = lambda: tuple(tr._flag(p) for p in tr._BACKEND_FLAGS)  # noqa: E731
    assert tr.backend_flags() == walk()
    before = torch.backends.mkldnn.enabled, torch.backends.cudnn.benchmark
    try:
        torch.backends.mkldnn.enabled = not before[0]
        torch.backends.cudnn.benchmark = not before[1]
        assert tr.backend_flags() == walk()
        assert tr.backend_flags()[:3:2] == (not before[0], not before[1])
    finally:
        torch.backends.mkldnn.enabled, torch.backends.cudnn.benchmark = before
    assert tr.backend_flags() == walk()
    with torch.backends.mkldnn.flags(enabled=False):
        assert tr.backend_flags()[0] is False and tr.backend_flags() == walk()


# ------------------------------------------------- the module tree's training flags
class _Flagged(nn.Module):
    @property
    def training(self):             # a class that decides ``training`` itself
        return self.__dict__.get("_mode", False)

    @training.setter
    def training(self, value):
        self.__dict__["_mode"] = value

    def forward(self, x):
        return x


def test_training_flags_follow_every_change_of_the_tree():
    from runtime.module_flags import TrainingFlags
    m = nn.Sequential(nn.Linear(3, 3), nn.Sequential(nn.Dropout(0.5), nn.ReLU())).eval()
    flags = TrainingFlags(m)
    read = lambda: tuple(x.training for x in m.modules())  # noqa: E731
    assert flags() == read() and flags() is flags()          # kept while nothing moved
    m[1][0].train()
    assert flags() == read() and flags()[3] is True
    m[1][0].training = False
    assert flags() == read()
    m[1].append(nn.Dropout(0.1).train())                     # the tree grows
    assert flags() == read() and len(flags()) == 6
    m[1][1] = nn.GELU()                                      # a submodule replaced
    assert flags() == read()
    m.train()
    assert flags() == read() and all(flags())
    odd = nn.Sequential(_Flagged(), nn.ReLU())
    odd_flags = TrainingFlags(odd)
    assert odd_flags() == tuple(x.training for x in odd.modules())
    odd[0].__dict__["_mode"] = True                          # no tag of its own to watch
    assert odd_flags()[1] is True


def test_converted_module_switches_modes_on_the_fast_path():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5), nn.Linear(8, 2)).eval()
    g = to_graph(m, strict=True)
    x = torch.randn(4, 8)
    for _ in range(2):
        assert torch.equal(g(x), m(x))
        m[1].train()                        # a submodule alone: dropout on
        torch.manual_seed(1)
        got = g(x)
        torch.manual_seed(1)
        assert torch.equal(got, m(x))
        m[1].eval()
        assert torch.equal(g(x), m(x))
        m[1] = nn.Dropout(0.25).train()     # replaced by a training one
        torch.manual_seed(2)
        got = g(x)
        torch.manual_seed(2)
        assert torch.equal(got, m(x))
        m[1] = nn.Dropout(0.5).eval()
