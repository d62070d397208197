"""torch.nn uses that fell back for no reason, and a warning given twice: differential
tests against eager (values, dtypes, gradients, the RNG state, torch's warnings), through
``to_graph`` in default and strict mode.

- packed sequences whose lengths the graph fixes (a Python list, ``pack_sequence``'s static
  sizes, a tensor made in the function from ints): ``pack_padded_sequence`` -> RNN/LSTM/GRU
  -> ``pad_packed_sequence`` convert with static sizes (``runtime.known_values``); lengths
  known only when the graph runs (a tensor argument) convert with run-time sizes, one
  graph for all lengths (``runtime.packed_sequences``);
- ``nn.GaussianNLLLoss`` (its negative-variance check is asked when the graph runs);
- ``nn.init.*_`` on a tensor made in forward (torch hands the tensor by keyword);
- ``nn.Softmax()`` with an implicit dim: torch's deprecation warning once per call, at
  eager's file and line (``runtime.inference_warnings``), under "always" and "default".
"""
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import rnn as rnn_utils

from e2e_helpers import assert_same
from transpiler import ConversionError, FallbackWarning, to_graph


def _prep(v):
    if isinstance(v, torch.Tensor):
        t = v.detach().clone()
        return t.requires_grad_(True) if t.is_floating_point() else t
    if isinstance(v, tuple) and hasattr(v, "_fields"):
        return type(v)(*(_prep(x) for x in v))
    if isinstance(v, (list, tuple)):
        return type(v)(_prep(x) for x in v)
    return v


def _tensors(v):
    if isinstance(v, torch.Tensor):
        return [v]
    if isinstance(v, (list, tuple)):
        return [t for x in v for t in _tensors(x)]
    return []


def _backward(out, params):
    outs = [t for t in _tensors(out) if t.requires_grad]
    total = sum((t * torch.cos(torch.arange(t.numel()).reshape(t.shape) * 0.3)).sum()
                for t in outs)
    total.backward()
    return [p.grad.clone() if p.grad is not None else None for p in params]


def _user_warnings(w):
    return [(m.category, str(m.message), m.filename, m.lineno) for m in w
            if not issubclass(m.category, FallbackWarning)]


def _run(fn, args, params):
    for p in params:
        p.grad = None
    args = _prep(args)
    torch.manual_seed(7)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = fn(*args)
    rng = torch.get_rng_state()
    grads = _backward(out, params) if any(t.requires_grad for t in _tensors(out)) else []
    input_grads = [t.grad for t in _tensors(args) if t.is_floating_point()]
    return out, rng, grads, input_grads, w


def differential(fn, calls, params=(), converts=True):
    """``fn`` eagerly vs ``to_graph(fn)`` and ``to_graph(fn, strict=True)`` on each call's
    arguments: outputs, RNG state, parameter and input gradients, torch's warnings. A
    converting case gives no FallbackWarning; a falling-back one gives one naming this
    file, and strict mode raises ConversionError (``converts=None``: either, equal to eager)."""
    params = list(params)
    for strict in (False, True):
        g = to_graph(fn, strict=strict)
        for args in calls:
            exp = _run(fn, args, params)
            if strict and converts is False:
                with pytest.raises(ConversionError, match=r"test_nn_needless_fallbacks\.py:\d+"):
                    g(*_prep(args))
                continue
            try:
                got = _run(g, args, params)
            except ConversionError:
                assert strict and converts is None     # (either way: not silently wrong)
                continue
            fallbacks = [m for m in got[4] if issubclass(m.category, FallbackWarning)]
            if converts:
                assert not fallbacks, str(fallbacks[0].message)
            else:
                assert len(fallbacks) <= 1 and all(
                    "test_nn_needless_fallbacks.py:" in str(m.message) for m in fallbacks)
            assert_same(got[0], exp[0])
            assert torch.equal(got[1], exp[1]), "RNG state after the call differs"
            for a, b in zip(got[2], exp[2]):
                assert_same(a, b, "parameter grad")
            for a, b in zip(got[3], exp[3]):
                assert_same(a, b, "input grad")
            assert _user_warnings(got[4]) == _user_warnings(exp[4])
        if converts:
            assert g.cache_info().traces >= 1


# ------------------------------------------------------------------ packed sequences
torch.manual_seed(0)
LSTM_BF = nn.LSTM(3, 4, batch_first=True)
LSTM_BI = nn.LSTM(3, 4, num_layers=2, bidirectional=True)
GRU = nn.GRU(3, 4)
RNN_BF = nn.RNN(3, 4, batch_first=True)


def R(*shape):
    return torch.randn(*shape)


def lstm_batch_first(x, lengths):
    packed = rnn_utils.pack_padded_sequence(x, lengths, batch_first=True)
    out, (h, c) = LSTM_BF(packed)
    padded, lens = rnn_utils.pad_packed_sequence(out, batch_first=True)
    return padded, lens, h, c


def lstm_unsorted_time_first(x, lengths):
    packed = rnn_utils.pack_padded_sequence(x, lengths, enforce_sorted=False)
    out, (h, c) = LSTM_BI(packed)
    padded, lens = rnn_utils.pad_packed_sequence(out, total_length=x.shape[0], padding_value=-1.0)
    return padded, lens, h, c


def gru_returns_packed(x, lengths):
    packed = rnn_utils.pack_padded_sequence(x, lengths, enforce_sorted=False)
    out, h = GRU(packed)
    return out, h, out.data.sum(), out.batch_sizes, packed.sorted_indices


def rnn_batch_first_unsorted(x, lengths):
    packed = rnn_utils.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    out, h = RNN_BF(packed, torch.zeros(1, x.shape[0], 4))
    return rnn_utils.pad_packed_sequence(out, batch_first=True, total_length=6)


def test_lstm_list_lengths_sorted_batch_first():
    differential(lstm_batch_first, [(R(3, 5, 3), [5, 3, 2]), (R(2, 4, 3), [4, 4]),
                                    (R(3, 5, 3), [4, 2, 1])], LSTM_BF.parameters())


def test_bidirectional_lstm_list_lengths_unsorted_total_length():
    differential(lstm_unsorted_time_first, [(R(5, 3, 3), [2, 5, 3]), (R(4, 2, 3), [1, 4])],
                 LSTM_BI.parameters())


def test_gru_returns_the_packed_sequence_and_its_fields():
    differential(gru_returns_packed, [(R(4, 3, 3), [2, 4, 1]), (R(4, 3, 3), [4, 4, 3])],
                 GRU.parameters())


def test_rnn_batch_first_unsorted_with_h0():
    differential(rnn_batch_first_unsorted, [(R(3, 6, 3), [1, 6, 2]), (R(2, 6, 3), [3, 5])],
                 RNN_BF.parameters())


def pack_sequence_prog(a, b, c):
    out, h = GRU(rnn_utils.pack_sequence([a, b, c], enforce_sorted=False))
    padded, lens = rnn_utils.pad_packed_sequence(out, batch_first=True)
    return padded, lens, h


def pack_sequence_sorted(a, b):
    out, h = RNN_BF(rnn_utils.pack_sequence([a, b]))
    return out.data, out.batch_sizes, h


def test_pack_sequence_lengths_from_static_sizes():
    differential(pack_sequence_prog, [(R(2, 3), R(5, 3), R(3, 3)), (R(4, 3), R(1, 3), R(4, 3))],
                 GRU.parameters())
    differential(pack_sequence_sorted, [(R(4, 3), R(2, 3)), (R(3, 3), R(3, 3))],
                 RNN_BF.parameters())


def lengths_made_in_function(x, n0, n1):
    lengths = torch.tensor([n0, n1])
    longest = int(lengths.max())        # a known value answers int()
    packed = rnn_utils.pack_padded_sequence(x[:, :longest], lengths, batch_first=True,
                                            enforce_sorted=False)
    out, h = RNN_BF(packed)
    return rnn_utils.pad_packed_sequence(out, batch_first=True)[0], longest


def test_lengths_tensor_made_from_python_ints():
    differential(lengths_made_in_function, [(R(2, 6, 3), 3, 5), (R(2, 6, 3), 6, 1)],
                 RNN_BF.parameters())


def gru_unsorted_total_length(x, lengths):
    packed = rnn_utils.pack_padded_sequence(x, lengths, enforce_sorted=False)
    out, h = GRU(packed)
    padded, lens = rnn_utils.pad_packed_sequence(out, total_length=x.shape[0])
    return padded, lens, h, out.batch_sizes, packed.unsorted_indices


def test_lengths_tensor_argument_converts_with_run_time_sizes():
    differential(lstm_batch_first, [(R(3, 5, 3), torch.tensor([5, 3, 2])),
                                    (R(3, 5, 3), torch.tensor([4, 4, 1])),
                                    (R(2, 4, 3), torch.tensor([4, 1]))], LSTM_BF.parameters())
    differential(lstm_unsorted_time_first, [(R(5, 3, 3), torch.tensor([2, 5, 3])),
                                            (R(5, 3, 3), torch.tensor([1, 1, 4]))],
                 LSTM_BI.parameters())
    differential(gru_unsorted_total_length, [(R(6, 3, 3), torch.tensor([2, 6, 4])),
                                             (R(6, 3, 3), torch.tensor([1, 3, 2]))],
                 GRU.parameters())
    g = to_graph(lstm_batch_first, strict=True)
    g(R(3, 5, 3), torch.tensor([5, 3, 2]))
    op = [n.op for n in g.graph(R(3, 5, 3), torch.tensor([5, 3, 2])).nodes]
    assert "_pack_padded_sequence" in op and "lstm" in op and "_pad_packed_sequence" in op


def test_random_lengths_each_batch_trace_a_bounded_number_of_times():
    """A fixed batch size, new lengths and padded length every batch: one graph per
    padded length at most (the time dim is dynamic after the second; hot sizes get their
    own), never one per lengths."""
    g = to_graph(gru_unsorted_total_length, strict=True)
    gen = torch.Generator().manual_seed(3)
    steps = set()
    for _ in range(30):
        t = int(torch.randint(3, 7, (), generator=gen))
        lengths = torch.randint(1, t + 1, (4,), generator=gen)
        x = torch.randn(t, 4, 3, generator=gen)
        assert_same(g(x, lengths), gru_unsorted_total_length(x, lengths))
        steps.add(t)
    assert g.cache_info().traces <= len(steps) + 1


def test_lengths_known_when_the_graph_runs_raise_as_eager():
    cases = [(lstm_batch_first, (R(3, 5, 3), torch.tensor([2, 5, 3])), RuntimeError,
              "sorted in decreasing order"),
             (lstm_batch_first, (R(2, 5, 3), torch.tensor([3, 0])), RuntimeError,
              "greater than 0"),
             (gru_unsorted_total_length, (R(4, 2, 3), torch.tensor([2, 1])), None, None)]
    for fn, args, error, text in cases:
        g = to_graph(fn, strict=True)
        g(R(*args[0].shape), torch.tensor(sorted(args[1].tolist(), reverse=True)).clamp(min=1))
        if error is None:           # total_length shorter than the longest: ValueError
            x = R(2, 2, 3)
            with pytest.raises(ValueError, match="total_length"):
                rnn_utils.pad_packed_sequence(rnn_utils.pack_padded_sequence(
                    R(3, 2, 3), torch.tensor([3, 1])), total_length=2)
            g2 = to_graph(lambda x, n: rnn_utils.pad_packed_sequence(
                rnn_utils.pack_padded_sequence(x, n), total_length=2)[0], strict=True)
            g2(x, torch.tensor([2, 1]))
            with pytest.raises(ValueError, match="Expected total_length to be at least"):
                g2(R(3, 2, 3), torch.tensor([3, 1]))
            continue
        with pytest.raises(error, match=text):
            fn(*_prep(args))
        with pytest.raises(error, match=text):
            g(*_prep(args))


def lstm_on_a_given_packed_sequence(packed):
    out, (h, c) = LSTM_BF(packed)
    return out.data, h


def test_a_packed_sequence_argument_falls_back_naming_the_line():
    """Its batch_sizes are an argument's values: the batch size the LSTM's zero state
    needs is known only when the graph runs."""
    packed = rnn_utils.pack_padded_sequence(R(3, 5, 3), [5, 3, 2], batch_first=True)
    differential(lstm_on_a_given_packed_sequence, [(packed,)], LSTM_BF.parameters(),
                 converts=False)


def lengths_written_in_place(x, n0, n1):
    lengths = torch.tensor([n0, n1])
    lengths[1] = 2                       # the value the trace knew is stale: not used
    packed = rnn_utils.pack_padded_sequence(x, lengths, batch_first=True)
    return RNN_BF(packed)[1]


def lengths_view_written_through_base(x, n0, n1):
    lengths = torch.tensor([n0, n1, 1])
    view = lengths[:2]
    lengths.sub_(1)                      # the view sees it eagerly
    packed = rnn_utils.pack_padded_sequence(x, view, batch_first=True)
    return RNN_BF(packed)[1], view


def test_known_lengths_written_in_place_are_not_baked_in():
    """The trace's known value is stale after the write: the lengths are read when the
    graph runs instead (run-time sizes)."""
    differential(lengths_written_in_place, [(R(2, 4, 3), 4, 3), (R(2, 4, 3), 3, 4)],
                 RNN_BF.parameters())
    differential(lengths_view_written_through_base, [(R(2, 4, 3), 4, 3)], RNN_BF.parameters())


def known_read_in_a_loop(x, n0):
    lengths = torch.tensor([n0, 1])
    out = x
    while out.sum() < 40:               # a tensor while: the body is traced once
        k = int(lengths[0])             # eager: n0, n0 + 1, ... (the write below)
        out = out + torch.ones(k).sum()
        lengths.add_(1)
    return out, lengths


def test_known_value_read_in_a_loop_body_that_writes_it():
    differential(known_read_in_a_loop, [(torch.zeros(2), 2), (torch.ones(3), 4)], converts=None)


def test_unsorted_list_lengths_with_enforce_sorted_raise_as_eager():
    for strict in (False, True):
        g = to_graph(lstm_batch_first, strict=strict)
        with pytest.raises(RuntimeError, match="sorted in decreasing order"):
            lstm_batch_first(R(3, 5, 3), [2, 5, 3])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FallbackWarning)
            with pytest.raises((RuntimeError, ConversionError), match="decreasing order"):
                g(R(3, 5, 3), [2, 5, 3])


# ------------------------------------------------------------------ GaussianNLLLoss
GNLL = nn.GaussianNLLLoss(eps=1e-3)
GNLL_FULL_SUM = nn.GaussianNLLLoss(full=True, reduction="sum")
GNLL_NONE = nn.GaussianNLLLoss(reduction="none")


def gaussian(inp, target, var):
    return GNLL(inp, target, var), GNLL_FULL_SUM(inp, target, var), GNLL_NONE(inp, target, var)


def gaussian_scalar_var(inp, target):
    return F.gaussian_nll_loss(inp, target, 0.5)


def test_gaussian_nll_loss_converts():
    differential(gaussian, [(R(4, 5), R(4, 5), R(4, 5).abs()), (R(2, 5), R(2, 5), R(2, 1).abs()),
                            (R(3, 5), R(3, 5), R(3).abs())])
    differential(gaussian_scalar_var, [(R(4, 5), R(4, 5))])
    m = to_graph(nn.GaussianNLLLoss(), strict=True)
    assert_same(m(*_prep((R(3, 2), R(3, 2), R(3, 2).abs()))).dtype, torch.float32)


def test_gaussian_nll_loss_negative_variance_raises_when_the_graph_runs():
    g = to_graph(gaussian, strict=True)
    g(R(2, 3), R(2, 3), R(2, 3).abs())
    with pytest.raises(ValueError, match="var has negative entry"):
        gaussian(R(2, 3), R(2, 3), -R(2, 3).abs())
    with pytest.raises(ValueError, match="var has negative entry"):
        g(R(2, 3), R(2, 3), -R(2, 3).abs())
    assert g.cache_info().traces == 1


# ------------------------------------------------------------------ nn.init in forward
def init_in_forward(x):
    w = torch.empty(x.shape[1], 3)
    nn.init.kaiming_uniform_(w, a=0.1)
    b = nn.init.constant_(torch.empty(3), 0.5)
    v = nn.init.uniform_(tensor=torch.empty(3), a=-0.1, b=0.1)
    n = nn.init.normal_(torch.empty(2, 3), std=0.2)
    nn.init.xavier_uniform_(n, gain=nn.init.calculate_gain("tanh"))
    z = nn.init.zeros_(torch.empty(3))
    return x @ w + b + v + z, n


def test_nn_init_on_tensors_made_in_forward():
    differential(init_in_forward, [(R(2, 4),), (R(3, 4),), (R(2, 5),)])


# ------------------------------------------------------------------ implicit-dim softmax
SOFTMAX = nn.Softmax()


def softmax_caller(x):
    return SOFTMAX(x) * 2


def softmax_functional(x):
    return F.softmax(x) + F.log_softmax(x)


def test_implicit_dim_softmax_warns_once_per_call_at_eagers_line():
    differential(softmax_caller, [(R(2, 3),), (R(2, 3),), (R(2, 3, 4),)])
    differential(softmax_functional, [(R(2, 3),), (R(4, 3),)])


def _warnings_of(fn, x):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        fn(x)
    return _user_warnings(w)


def test_implicit_dim_softmax_inside_modules_and_hooks():
    """to_graph(module): eager's frames above the op include nn.Module's call machinery
    (with hooks, its slow path): the warning names the same line."""
    torch.manual_seed(0)
    seq = nn.Sequential(nn.Linear(3, 3), nn.Softmax())
    hooked = nn.Softmax()
    hooked.register_forward_hook(lambda mod, inp, out: None)
    for module in (seq, hooked, nn.Softmax()):
        g = to_graph(module)
        if module is hooked:
            g.register_forward_hook(lambda mod, inp, out: None)
        for x in (R(2, 3), R(2, 3), R(4, 3)):
            exp = _warnings_of(module, x)
            assert len(exp) == 1
            assert _warnings_of(g, x) == exp


def _counts(fn, calls):
    """How many warnings each call gives under the default filter (once per location),
    the registries fresh (``catch_warnings`` resets them on entry)."""
    counts = []
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("default")
        for x in calls:
            before = len(w)
            fn(x)
            counts.append([(m.category, m.filename, m.lineno) for m in w[before:]])
    return counts


def test_implicit_dim_softmax_under_the_default_filter():
    calls = [R(2, 3), R(2, 3), R(5, 3), R(2, 3, 4)]
    for fn in (softmax_caller, SOFTMAX):
        exp = _counts(fn, calls)
        assert [len(c) for c in exp] == [1, 0, 0, 0]
        assert _counts(to_graph(fn), calls) == exp
    m = to_graph(nn.Softmax())
    with warnings.catch_warnings(record=True) as w:     # eager first: the graph's call is
        warnings.simplefilter("default")               # the same location, not again
        SOFTMAX(calls[0])
        m(calls[0])
        m(calls[1])
    assert len(w) == 1
