"""A view passed as an argument at a new storage offset shares the cached graph
(``transpiler.argument_offsets``): word_language_model's ``get_batch`` (``source[i:i +
bptt]``), rows ``x[i]``, ``narrow``, ``unfold``/``as_strided`` windows, ``chunk`` pieces,
slices along a non-contiguous dim, views of parameters. Only what changes the graph is in
the key: strides, the pattern of arguments that share storage (a graph writing one of them
in place falls back), and the offsets themselves only for a function whose trace asked
``storage_offset()``.

Each case runs eager and converted (strict and default) on twin tensors, every offset in
turn, and compares results, what the call wrote into the caller's base tensor, gradients
through the views, and the number of traces (``cache_info()``)."""
import warnings

import pytest
import torch
from torch import nn

from e2e_helpers import assert_same
from transpiler import ConversionError, FallbackWarning, RetracingWarning, to_graph

N = 100         # offsets per case


def _scaled_tanh(x):
    y = torch.tanh(x * 2.0) + 1.0
    if y.sum() > y.numel():                 # a tensor condition: a cond in the graph
        y = y * 0.5
    return y.sum(0), y


def _twins(make, seed=0):
    """Two equal base tensors from ``make(generator)``."""
    base = make(torch.Generator().manual_seed(seed))
    return base, base.clone()


def _each_view(fn, base_shape, view, strict, n=N):
    """``fn`` eager and converted on ``view(base, i)`` for i < n; the converted function
    (results and the bases compared after each call)."""
    eager_base, graph_base = _twins(lambda g: torch.randn(*base_shape, generator=g))
    g = to_graph(fn, strict=strict)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        for i in range(n):
            exp = fn(view(eager_base, i))
            got = g(view(graph_base, i))
            assert_same(got, exp, f"call {i}")
            assert_same(graph_base, eager_base, f"base after call {i}")
    return g


VIEWS = {
    "rows_dim0": ((4 * N + 4, 3), lambda b, i: b[4 * i:4 * i + 4]),
    "cols_dim1": ((3, N + 4), lambda b, i: b[:, i:i + 4]),             # non-contiguous
    "narrow": ((N + 4, 5), lambda b, i: b.narrow(0, i, 4)),
    "row": ((N, 6), lambda b, i: b[i]),
    "column": ((6, N), lambda b, i: b[:, i]),                         # stride N
    "unfold_window": ((N + 7,), lambda b, i: b.unfold(0, 8, 1)[i]),
    "as_strided_window": ((N + 8,), lambda b, i: b.as_strided((4, 2), (2, 1), i)),
    "chunk": ((4 * N, 3), lambda b, i: b.chunk(N)[i]),
    "split": ((4 * N, 3), lambda b, i: b.split(4)[i]),
    "transposed_block": ((4 * N + 4, 3), lambda b, i: b[4 * i:4 * i + 4].t()),
}


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "default"])
@pytest.mark.parametrize("name", list(VIEWS))
def test_views_at_new_offsets_share_one_graph(name, strict):
    shape, view = VIEWS[name]
    g = _each_view(_scaled_tanh, shape, view, strict)
    info = g.cache_info()
    assert info.traces == 1 and info.hits == N - 1 and info.evictions == 0, info


def _scale_in_place(x):
    x.mul_(2.0)
    if x.sum() > 0:
        x.add_(1.0)
    return x.sum()


def _set_first(x):
    x[0] = x[0] * 3.0 - 1.0
    return x.mean()


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "default"])
@pytest.mark.parametrize("fn", [_scale_in_place, _set_first])
@pytest.mark.parametrize("name", ["rows_dim0", "cols_dim1", "row", "column", "chunk"])
def test_in_place_writes_land_in_the_callers_base(name, fn, strict):
    shape, view = VIEWS[name]
    g = _each_view(fn, shape, view, strict, n=20)       # (the bases compared each call)
    assert g.cache_info().traces == 1, g.cache_info()


def _read_two(a, b):
    return (a * b).sum() + a.mean() - b.max()


def _write_one_read_other(a, b):
    c = b.sum()
    a.add_(1.0)
    return b.sum() - c


def _pairs(overlap):
    step = 2 if overlap else 4          # a[i:i + 4] and a[i + step:i + step + 4]
    return lambda b, i: (b[i:i + 4], b[i + step:i + step + 4])


@pytest.mark.parametrize("overlap", [True, False], ids=["overlapping", "adjacent"])
def test_two_views_of_one_base_read_share_one_graph(overlap):
    make = _pairs(overlap)
    eager_base, graph_base = _twins(lambda g: torch.randn(N + 8, 3, generator=g))
    g = to_graph(_read_two, strict=True)
    for i in range(N):
        assert_same(g(*make(graph_base, i)), _read_two(*make(eager_base, i)))
        assert_same(g(graph_base[i], graph_base[i + 1].clone()),      # distinct storages
                    _read_two(eager_base[i], eager_base[i + 1].clone()))
    assert g.cache_info().traces == 2, g.cache_info()   # one per sharing pattern


@pytest.mark.parametrize("overlap", [True, False], ids=["overlapping", "adjacent"])
def test_write_through_one_view_read_through_another_falls_back(overlap):
    make = _pairs(overlap)
    eager_base, graph_base = _twins(lambda g: torch.randn(N + 8, 3, generator=g))
    g = to_graph(_write_one_read_other)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(0, N, 5):
            assert_same(g(*make(graph_base, i)), _write_one_read_other(*make(eager_base, i)))
            assert_same(graph_base, eager_base)
    fell = [w for w in caught if issubclass(w.category, FallbackWarning)]
    assert len(fell) == 1 and "share storage" in str(fell[0].message)
    assert "test_view_argument_keys.py:" in str(fell[0].message)
    info = g.cache_info()
    assert info.traces == 0 and info.fallbacks == 1, info   # one signature for all offsets
    # separate storages: the graph, one trace, writes the caller's tensor
    a, b = graph_base[3], torch.ones(3)
    ea, eb = eager_base[3], torch.ones(3)
    assert_same(g(a, b), _write_one_read_other(ea, eb))
    assert_same(graph_base, eager_base)
    with pytest.raises(ConversionError, match="share storage"):
        to_graph(_write_one_read_other, strict=True)(*make(graph_base, 7))


def _offset_of(x):
    y = x[1:]
    return x * x.storage_offset() + y.storage_offset()


def _offset_if(x, ask):
    if ask:
        return x + x.storage_offset()
    return x * 2.0


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "default"])
def test_a_trace_that_reads_storage_offset_keys_on_it(strict):
    base = torch.randn(40, 3)
    g = to_graph(_offset_of, strict=strict)
    for i in [0, 4, 8, 4, 0, 12]:
        assert_same(g(base[i:i + 4]), _offset_of(base[i:i + 4]))
    assert g.cache_info().traces == 4, g.cache_info()   # one per offset


def test_offsets_enter_the_key_once_a_trace_reads_one():
    """Graphs traced before any read serve every offset; from the first read on, each
    offset is its own graph, on every path (the fast key, no entry functions)."""
    base = torch.randn(40, 3)
    g = to_graph(_offset_if, strict=True)
    for i in range(5):
        assert_same(g(base[i:i + 4], False), _offset_if(base[i:i + 4], False))
    assert g.cache_info().traces == 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RetracingWarning)        # (expected: a graph each)
        for _ in range(2):
            for i in range(5):
                assert_same(g(base[i:i + 4], True), _offset_if(base[i:i + 4], True))
                assert_same(g(base[i:i + 4], False), _offset_if(base[i:i + 4], False))
    # the first graph, then one per (offset, ask) once the key holds offsets: a cache of
    # them, never a trace per call
    assert g.cache_info().traces == 1 + 5 + 5, g.cache_info()
    assert g._entries.inline == ()


def test_gradients_through_view_arguments():
    weight = nn.Parameter(torch.randn(N + 4, 3))
    twin = nn.Parameter(weight.detach().clone())

    def loss(w, x):
        h = torch.tanh(w * x)
        if h.mean() > 0:
            h = h * 2.0
        return h.pow(2).sum()
    g = to_graph(loss, strict=True)
    x = torch.randn(4, 3)
    for i in range(N):
        g(weight[i:i + 4], x).backward()
        loss(twin[i:i + 4], x).backward()
    assert_same(weight.grad, twin.grad)
    assert g.cache_info().traces == 1, g.cache_info()


def test_views_of_parameters_as_arguments():
    lin = nn.Linear(3, 5)
    twin = nn.Linear(3, 5)
    twin.load_state_dict(lin.state_dict())

    def row_norm(w, b):
        return (w * w).sum() + b

    g = to_graph(row_norm, strict=True)
    for i in range(5):
        g(lin.weight[i], lin.bias[i]).backward()
        row_norm(twin.weight[i], twin.bias[i]).backward()
    assert_same((lin.weight.grad, lin.bias.grad), (twin.weight.grad, twin.bias.grad))
    assert g.cache_info().traces == 1, g.cache_info()


def _tbptt(source, bptt, strict):
    """A word_language_model-style loop without nn.RNN: ``data``/``target`` views of
    ``source`` per batch (the last one shorter), a hidden state carried between steps,
    an SGD step inside the converted function."""
    torch.manual_seed(0)
    model = nn.Linear(6, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    def step(data, target, hidden):
        opt.zero_grad()
        out = []
        for t in range(data.shape[0]):
            hidden = torch.tanh(model(torch.cat([data[t], hidden], 1)))
            out.append(hidden)
        loss = (torch.stack(out) - target).pow(2).mean()
        loss.backward()
        opt.step()
        return loss.detach(), hidden.detach()

    f = to_graph(step, strict=strict) if strict is not None else step
    hidden, losses = torch.zeros(2, 3), []
    for i in range(0, source.shape[0] - 1, bptt):
        n = min(bptt, source.shape[0] - 1 - i)
        loss, hidden = f(source[i:i + n], source[i + 1:i + 1 + n], hidden)
        losses.append(loss)
    return f, torch.stack(losses), [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "default"])
def test_tbptt_loop_traces_once_plus_the_shorter_last_batch(strict):
    source = torch.randn(4 * 20 + 3, 2, 3, generator=torch.Generator().manual_seed(1))
    _, exp_losses, exp_params = _tbptt(source, 4, None)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        f, losses, params = _tbptt(source, 4, strict)
    assert_same(losses, exp_losses)
    assert_same(params, exp_params)
    assert f.cache_info().traces == 2, f.cache_info()


def test_entry_functions_serve_new_offsets():
    """The generated entry function (``call_entry``) takes a view at a new offset, and
    still sends on a call whose strides differ."""
    base = torch.randn(N + 4, 4)
    g = to_graph(_scaled_tanh, strict=True)
    g(base[0:4])
    assert g._entries.inline
    assert "storage_offset" not in g._entries.inline[0].source
    for i in range(1, N):
        assert_same(g(base[i:i + 4]), _scaled_tanh(base[i:i + 4]))
    assert_same(g(base[0:4].t().contiguous().t()), _scaled_tanh(base[0:4]))   # strides
    assert g.cache_info().traces == 2, g.cache_info()


def _contiguous_or_not(x):
    if x.is_contiguous():               # a layout question answered at trace time
        return x * 2.0, x.stride()
    return x.contiguous() * 3.0, x.stride()


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "default"])
def test_layout_answers_other_than_the_offset_share_the_graph(strict):
    base = torch.randn(N + 4, 4)
    g = to_graph(_contiguous_or_not, strict=strict)
    for i in range(N):
        for v in (base[i:i + 4], base[i:i + 4].t()):
            assert_same(g(v), _contiguous_or_not(v))
    assert g.cache_info().traces == 2, g.cache_info()       # one per strides


def test_dynamic_sizes_and_offsets():
    """Sizes that change (a dynamic dim, traced from offset-0 calls) and views at other
    offsets: every call equals eager, a few graphs serve them all."""
    base = torch.randn(200, 3)
    g = to_graph(_scaled_tanh, strict=True)
    for i, n in [(0, 4), (0, 5), (0, 7)] + [(3 * k, 4 + k % 5) for k in range(1, 40)]:
        assert_same(g(base[i:i + n]), _scaled_tanh(base[i:i + n]))
    assert g.cache_info().traces <= 5, g.cache_info()     # (4 now: sizes new at an offset
    # are traced static, as dynamic dims are taken only from offset-0 tensors)
