"""Fresh-eyes programs over torch.nn modules, used as a new user would: each a module (or a
small program module) called through ``to_graph(module)`` and through a converted function
that calls it, in train and eval, with and without grad, over several calls with different
inputs, compared with eager (outputs, input and parameter gradients, parameters, buffers and
module attributes after the calls, the RNG state, torch's warnings).

``run_case(case, combo)`` returns a verdict: "OK", "FALLBACK: <warning>", "WRONG: <what
differs>" or "CRASH: <exception eager does not raise>"."""
import contextlib
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import rnn as rnn_utils

from e2e_helpers import assert_same
from transpiler import FallbackWarning, RetracingWarning, to_graph

# combo -> (wrapped as, train mode, grad enabled)
COMBOS = {
    "module-train-grad": ("module", True, True),
    "module-eval-nograd": ("module", False, False),
    "function-train-nograd": ("function", True, False),
    "function-eval-grad": ("function", False, True),
}
CASES = {}


class Case:
    def __init__(self, name, make, inputs, combos=tuple(COMBOS), grad_inputs=True, before=None,
                 around=None):
        self.name, self.make, self.inputs, self.combos = name, make, inputs, combos
        self.grad_inputs = grad_inputs
        self.before = before or {}     # call index -> fn(module) run on both before that call
        self.around = around or {}     # call index -> a context manager factory around both calls


def case(name, make, inputs, **kw):
    CASES[name] = Case(name, make, inputs, **kw)


# ------------------------------------------------------------------------------ harness
def _split(inp):
    if isinstance(inp, tuple) and inp and isinstance(inp[-1], dict):
        return inp[:-1], inp[-1]
    return (inp if isinstance(inp, tuple) else (inp,)), {}


def _prep(v, grad):
    if isinstance(v, torch.Tensor):
        t = v.detach().clone()
        if grad and t.is_floating_point():
            t.requires_grad_(True)
        return t
    if isinstance(v, (list, tuple)):
        return type(v)(_prep(x, grad) for x in v)
    return v


def _flat(v):
    if isinstance(v, torch.Tensor):
        return [v]
    if isinstance(v, dict):
        return [t for x in v.values() for t in _flat(x)]
    if isinstance(v, (list, tuple)):
        return [t for x in v for t in _flat(x)]
    return []


def _loss(out):
    total = None
    for t in _flat(out):
        if t.requires_grad and t.is_floating_point():
            w = torch.cos(torch.arange(t.numel(), dtype=torch.float64) * 0.37 + 1.0)
            term = (t.double() * w.reshape(t.shape)).sum()
            total = term if total is None else total + term
    return total


def _dense(t):
    return t.to_dense() if t is not None and t.is_sparse else t


def _attrs(m):
    """Plain Python attributes and types of every submodule (lazy modules change class)."""
    out = {}
    for name, sub in m.named_modules():
        out[name + ".__class__"] = type(sub).__name__
        for k, v in vars(sub).items():
            if k.startswith("_") and k not in ("_u", "_v"):
                continue
            if isinstance(v, (bool, int, float, str, type(None))) or (
                    isinstance(v, tuple) and all(isinstance(x, (int, float)) for x in v)):
                out[f"{name}.{k}"] = v
    return out


def _user_warnings(w):
    return sorted(str(m.message) for m in w
                  if not issubclass(m.category, (FallbackWarning, RetracingWarning))
                  and "Triggered internally" not in str(m.message))  # C++ warn-once


def _compare(what, got, exp, diffs):
    try:
        assert_same(got, exp, what)
    except AssertionError as e:
        diffs.append(str(e).splitlines()[0][:200])


def make_caller(m):
    def call_module(*args, **kwargs):
        return m(*args, **kwargs)
    return call_module


def run_case(c, combo):
    wrap, train, grad = COMBOS[combo]
    torch.manual_seed(0)
    m_e = c.make()
    torch.manual_seed(0)
    m_c = c.make()
    m_e.train(train)
    m_c.train(train)
    g = to_graph(m_c) if wrap == "module" else to_graph(make_caller(m_c))
    torch.manual_seed(1)
    inputs = c.inputs()
    diffs, fallbacks = [], []
    for i, inp in enumerate(inputs):
        if i in c.before:
            c.before[i](m_e)
            c.before[i](m_c)
        args, kw = _split(inp)
        a_e, a_c = _prep(args, grad and c.grad_inputs), _prep(args, grad and c.grad_inputs)
        res = {}
        for side, fn, a in (("eager", m_e, a_e), ("graph", g, a_c)):
            torch.manual_seed(100 + i)
            around = c.around.get(i, contextlib.nullcontext)
            with torch.set_grad_enabled(grad), warnings.catch_warnings(record=True) as w, around():
                warnings.simplefilter("always")
                try:
                    out, err = fn(*a, **kw), None
                except Exception as e:  # noqa: BLE001 - compared with eager's
                    out, err = None, e
            res[side] = (out, err, torch.get_rng_state(), list(w))
        (exp, e_err, e_rng, e_w), (got, g_err, g_rng, g_w) = res["eager"], res["graph"]
        fallbacks += [f"call {i}: " + str(m.message).splitlines()[0][:200] for m in g_w
                      if issubclass(m.category, FallbackWarning)]
        if e_err is not None or g_err is not None:
            if g_err is None:
                diffs.append(f"call {i}: eager raised {type(e_err).__name__}, graph did not")
            elif e_err is None:
                return f"CRASH: call {i}: {type(g_err).__name__}: {str(g_err).splitlines()[0][:200]}"
            elif type(e_err) is not type(g_err):
                diffs.append(f"call {i}: eager raised {type(e_err).__name__}, "
                             f"graph {type(g_err).__name__}: {str(g_err)[:120]}")
            continue
        _compare(f"call {i} output", got, exp, diffs)
        _compare(f"call {i} arguments after the call", list(a_c), list(a_e), diffs)
        if any(isinstance(t, torch.Tensor) and t.is_inference() for t in _flat(exp)) != any(
                isinstance(t, torch.Tensor) and t.is_inference() for t in _flat(got)):
            diffs.append(f"call {i}: output is_inference() differs")
        if not torch.equal(e_rng, g_rng):
            diffs.append(f"call {i}: RNG state differs after the call")
        if _user_warnings(e_w) != _user_warnings(g_w):
            diffs.append(f"call {i}: warnings {_user_warnings(g_w)} != eager's {_user_warnings(e_w)}")
        if grad:
            le, lc = _loss(exp), _loss(got)
            if (le is None) != (lc is None):
                diffs.append(f"call {i}: output requires_grad differs")
            elif le is not None:
                le.backward()
                try:
                    lc.backward()
                except Exception as e:  # noqa: BLE001
                    return f"CRASH: call {i} backward: {type(e).__name__}: {str(e)[:200]}"
                for j, (x, y) in enumerate(zip(_flat(a_c), _flat(a_e))):
                    if y.requires_grad:
                        _compare(f"call {i} grad of input {j}", _dense(x.grad), _dense(y.grad), diffs)
        pe, pc = dict(m_e.named_parameters()), dict(m_c.named_parameters())
        if set(pe) != set(pc):
            diffs.append(f"call {i}: parameter names {sorted(pc)} != {sorted(pe)}")
        else:
            for k in pe:
                _compare(f"call {i} grad of {k}", _dense(pc[k].grad), _dense(pe[k].grad), diffs)
        se, sc = m_e.state_dict(), m_c.state_dict()
        _compare(f"call {i} state_dict", dict(sc), dict(se), diffs)
        ae, ac = _attrs(m_e), _attrs(m_c)
        if ae != ac:
            d = {k: (ac.get(k), ae.get(k)) for k in set(ae) | set(ac) if ae.get(k) != ac.get(k)}
            diffs.append(f"call {i}: module attributes (graph, eager) {d}")
    if diffs:
        return "WRONG: " + "; ".join(dict.fromkeys(diffs))
    if fallbacks:
        return "FALLBACK: " + " | ".join(fallbacks)
    return "OK"


def R(*shape):
    return torch.randn(*shape)


def I(hi, *shape):
    return torch.randint(0, hi, shape)


def prog(fwd, **mods):
    """A program as a user writes one: a module class whose forward is ``fwd``."""
    m = type(fwd.__name__.title().replace("_", ""), (nn.Module,), {"forward": fwd})()
    for k, v in mods.items():
        setattr(m, k, v)
    return m


# ------------------------------------------------------------------------ embeddings
def _emb_idx():
    return [(torch.tensor([[0, 2, 3], [4, 0, 9]]),), (I(10, 4, 3),), (torch.tensor([[1, 0, 7, 7, 2]]),)]


case("embedding_padding_idx", lambda: nn.Embedding(10, 4, padding_idx=0), _emb_idx,
     grad_inputs=False)


def _emb_max_norm():
    e = nn.Embedding(10, 4, max_norm=1.0)
    with torch.no_grad():
        e.weight.mul_(3.0)
    return e


case("embedding_max_norm", _emb_max_norm, _emb_idx, grad_inputs=False)
case("embedding_sparse", lambda: nn.Embedding(10, 4, sparse=True), _emb_idx)
case("embedding_scale_grad_by_freq", lambda: nn.Embedding(10, 4, scale_grad_by_freq=True),
     _emb_idx)


def functional_embedding_max_norm(self, idx):
    return F.embedding(idx, self.table, max_norm=0.5, norm_type=1.0) * 2


case("functional_embedding_max_norm",
     lambda: prog(functional_embedding_max_norm, table=nn.Parameter(torch.randn(10, 4) * 2)),
     _emb_idx)


def _bag_offsets():
    return [(I(10, 7), torch.tensor([0, 2, 2, 5])), (I(10, 4), torch.tensor([0, 1])),
            (I(10, 9), torch.tensor([0, 3, 6]))]


case("embeddingbag_sum_offsets", lambda: nn.EmbeddingBag(10, 3, mode="sum"), _bag_offsets)
case("embeddingbag_max_offsets", lambda: nn.EmbeddingBag(10, 3, mode="max"), _bag_offsets)
case("embeddingbag_mean_2d", lambda: nn.EmbeddingBag(10, 3),
     lambda: [(I(10, 2, 4),), (I(10, 5, 4),), (I(10, 1, 2),)])


def embeddingbag_per_sample(self, idx, offsets, w):
    return self.bag(idx, offsets, per_sample_weights=w)


case("embeddingbag_per_sample_weights",
     lambda: prog(embeddingbag_per_sample, bag=nn.EmbeddingBag(10, 3, mode="sum")),
     lambda: [(i, o, R(i.shape[0])) for i, o in _bag_offsets()])
case("embeddingbag_padding_last_offset",
     lambda: nn.EmbeddingBag(10, 3, mode="mean", padding_idx=0, include_last_offset=True),
     lambda: [(torch.tensor([0, 1, 0, 3, 4]), torch.tensor([0, 2, 5])),
              (torch.tensor([0, 0, 2]), torch.tensor([0, 2, 2, 3]))])

# ------------------------------------------------------------------------------ RNNs
def _rnn_inputs(bf, feat=4):
    shapes = [(5, 3), (7, 2), (4, 1)]
    return lambda: [(R(b, t, feat) if bf else R(t, b, feat),) for t, b in shapes]


case("rnn_tanh_2layer_batch_first", lambda: nn.RNN(4, 6, num_layers=2, batch_first=True),
     _rnn_inputs(True))
case("rnn_relu", lambda: nn.RNN(4, 6, nonlinearity="relu"), _rnn_inputs(False))
case("lstm_bidirectional_dropout", lambda: nn.LSTM(4, 5, num_layers=2, bidirectional=True,
                                                   dropout=0.4),
     lambda: [(R(3, 3, 4),), (R(3, 2, 4),), (R(2, 1, 4),)])
case("lstm_proj_size", lambda: nn.LSTM(4, 6, proj_size=3, batch_first=True), _rnn_inputs(True))
case("gru_h0", lambda: nn.GRU(4, 5, num_layers=2),
     lambda: [(R(5, 3, 4), R(2, 3, 5)), (R(2, 2, 4), R(2, 2, 5)), (R(6, 3, 4), R(2, 3, 5))])
case("lstm_unbatched_h0_c0", lambda: nn.LSTM(4, 5),
     lambda: [(R(5, 4), (R(1, 5), R(1, 5))), (R(3, 4), (R(1, 5), R(1, 5)))])
case("gru_bidirectional_dropout_batch_first",
     lambda: nn.GRU(4, 5, num_layers=3, bidirectional=True, dropout=0.5, batch_first=True),
     _rnn_inputs(True))


def rnncell_loop(self, x):
    h = torch.zeros(x.shape[1], 6)
    outs = []
    for t in range(x.shape[0]):
        h = self.cell(x[t], h)
        outs.append(h)
    return torch.stack(outs)


def lstmcell_loop(self, x):
    h = torch.zeros(x.shape[1], 6)
    c = torch.zeros(x.shape[1], 6)
    for xt in x:
        h, c = self.cell(xt, (h, c))
    return h, c


def grucell_until(self, x):
    h = self.cell(x)
    n = 0
    while h.abs().sum() < 20.0 and n < 10:
        h = self.cell(x, h) * 1.5
        n += 1
    return h, n


case("rnncell_loop", lambda: prog(rnncell_loop, cell=nn.RNNCell(4, 6)), _rnn_inputs(False))
case("lstmcell_loop", lambda: prog(lstmcell_loop, cell=nn.LSTMCell(4, 6)), _rnn_inputs(False))
case("grucell_tensor_while", lambda: prog(grucell_until, cell=nn.GRUCell(4, 6)),
     lambda: [(R(3, 4),), (R(2, 4) * 3,), (R(5, 4),)])


def packed_lstm_sorted(self, x, lengths):
    packed = rnn_utils.pack_padded_sequence(x, lengths, batch_first=True)
    out, (h, c) = self.lstm(packed)
    padded, lens = rnn_utils.pad_packed_sequence(out, batch_first=True)
    return padded, lens, h


def packed_gru_unsorted(self, x, lengths):
    packed = rnn_utils.pack_padded_sequence(x, lengths, batch_first=False, enforce_sorted=False)
    out, h = self.gru(packed)
    padded, lens = rnn_utils.pad_packed_sequence(out, total_length=x.shape[0])
    return padded, lens, h


case("packed_lstm_sorted_lengths_tensor",
     lambda: prog(packed_lstm_sorted, lstm=nn.LSTM(4, 5, batch_first=True)),
     lambda: [(R(3, 6, 4), torch.tensor([6, 4, 2])), (R(2, 5, 4), torch.tensor([5, 5])),
              (R(3, 6, 4), torch.tensor([5, 3, 1]))])
case("packed_lstm_sorted_lengths_list",
     lambda: prog(packed_lstm_sorted, lstm=nn.LSTM(4, 5, batch_first=True)),
     lambda: [(R(3, 6, 4), [6, 4, 2]), (R(2, 5, 4), [5, 5]), (R(3, 6, 4), [5, 3, 1])])
case("packed_gru_unsorted", lambda: prog(packed_gru_unsorted, gru=nn.GRU(4, 5)),
     lambda: [(R(6, 3, 4), torch.tensor([2, 6, 4])), (R(6, 3, 4), torch.tensor([6, 1, 3])),
              (R(4, 2, 4), torch.tensor([3, 4]))])


def pad_sequence_prog(self, a, b, c):
    padded = rnn_utils.pad_sequence([a, b, c], batch_first=True, padding_value=-1.0)
    return self.lin(padded)


case("pad_sequence", lambda: prog(pad_sequence_prog, lin=nn.Linear(3, 2)),
     lambda: [(R(2, 3), R(5, 3), R(1, 3)), (R(4, 3), R(4, 3), R(4, 3)), (R(1, 3), R(2, 3), R(6, 3))])


def pack_sequence_prog(self, a, b):
    out, h = self.rnn(rnn_utils.pack_sequence([a, b], enforce_sorted=False))
    return rnn_utils.pad_packed_sequence(out)[0], h


case("pack_sequence_unsorted", lambda: prog(pack_sequence_prog, rnn=nn.RNN(3, 4)),
     lambda: [(R(2, 3), R(5, 3)), (R(4, 3), R(1, 3)), (R(3, 3), R(3, 3))])

# ---------------------------------------------------------------------- normalization
_bn_in = lambda *s: (lambda: [(R(4, *s),), (R(8, *s) * 3 + 1,), (R(3, *s),)])
case("batchnorm1d_2d_input", lambda: nn.BatchNorm1d(5), _bn_in(5))
case("batchnorm1d_3d_input", lambda: nn.BatchNorm1d(5), _bn_in(5, 6))
case("batchnorm2d_no_running_stats", lambda: nn.BatchNorm2d(3, track_running_stats=False),
     _bn_in(3, 4, 4))
case("batchnorm2d_affine_false", lambda: nn.BatchNorm2d(3, affine=False), _bn_in(3, 4, 4))
case("batchnorm2d_momentum_none", lambda: nn.BatchNorm2d(3, momentum=None), _bn_in(3, 4, 4))
case("batchnorm3d", lambda: nn.BatchNorm3d(2, momentum=0.3), _bn_in(2, 3, 3, 3))
case("batchnorm1d_batch_1", lambda: nn.BatchNorm1d(5),
     lambda: [(R(4, 5),), (R(1, 5),), (R(1, 5, 3),)])


def _bn_trained():
    bn = nn.BatchNorm2d(3)
    bn.running_mean.uniform_(-1, 1)
    bn.running_var.uniform_(0.5, 2)
    return bn


case("batchnorm2d_loaded_stats_batch_1", _bn_trained,
     lambda: [(R(1, 3, 4, 4),), (R(1, 3, 2, 2),), (R(2, 3, 4, 4),)])
case("instancenorm1d_running_stats",
     lambda: nn.InstanceNorm1d(4, affine=True, track_running_stats=True), _bn_in(4, 7))
case("instancenorm2d_default", lambda: nn.InstanceNorm2d(3), _bn_in(3, 5, 5))
case("groupnorm", lambda: nn.GroupNorm(2, 6), _bn_in(6, 5))
case("layernorm_no_bias", lambda: nn.LayerNorm([4, 5], bias=False), _bn_in(4, 5))
case("rmsnorm", lambda: nn.RMSNorm(5), _bn_in(3, 5))
case("rmsnorm_eps_no_affine", lambda: nn.RMSNorm([3, 5], eps=1e-3, elementwise_affine=False),
     _bn_in(3, 5))
case("local_response_norm", lambda: nn.LocalResponseNorm(3), _bn_in(6, 4, 4))

# --------------------------------------------------------------------------- lazy modules
case("lazy_linear", lambda: nn.LazyLinear(3), lambda: [(R(2, 5),), (R(4, 5),), (R(1, 5),)])
case("lazy_conv2d", lambda: nn.LazyConv2d(4, 3, padding=1), _bn_in(2, 5, 5))
case("lazy_batchnorm1d", lambda: nn.LazyBatchNorm1d(), _bn_in(5))


def lazy_in_sequential(self, x):
    return self.net(x).relu()


case("lazy_linear_in_sequential",
     lambda: prog(lazy_in_sequential, net=nn.Sequential(nn.LazyLinear(6), nn.ReLU(), nn.LazyLinear(2))),
     lambda: [(R(3, 4),), (R(5, 4),), (R(2, 4),)])

# ---------------------------------------------------------------------------- dropout
_drop_in = lambda *s: (lambda: [(R(4, *s),), (R(6, *s),), (R(4, *s),)])
case("dropout", lambda: nn.Dropout(0.3), _drop_in(8))
case("alpha_dropout", lambda: nn.AlphaDropout(0.3), _drop_in(8))
case("dropout1d", lambda: nn.Dropout1d(0.5), _drop_in(6, 5))
case("dropout2d", lambda: nn.Dropout2d(0.5), _drop_in(6, 3, 3))
case("dropout3d", lambda: nn.Dropout3d(0.5), _drop_in(4, 2, 2, 2))
case("feature_alpha_dropout", lambda: nn.FeatureAlphaDropout(0.4), _drop_in(6, 3, 3))


def dropout_always(self, x):
    return self.lin(F.dropout(x, 0.5, training=True)) + F.dropout(x, 0.2, self.training).sum()


case("functional_dropout_training_flag", lambda: prog(dropout_always, lin=nn.Linear(5, 5)),
     _drop_in(5))


def rrelu_prog(self, x):
    return self.act(x) + self.prelu(x)


case("rrelu_prelu", lambda: prog(rrelu_prog, act=nn.RReLU(), prelu=nn.PReLU(3)),
     _drop_in(3, 4))

# --------------------------------------------------------------------- resampling, conv
_img = lambda c=2, h=5, w=6: (lambda: [(R(2, c, h, w),), (R(3, c, h + 2, w - 1),), (R(1, c, h, w),)])
case("upsample_nearest_scale", lambda: nn.Upsample(scale_factor=2), _img())
case("upsample_bilinear_align_corners_size",
     lambda: nn.Upsample(size=(7, 9), mode="bilinear", align_corners=True), _img())


def interp_variants(self, x):
    a = F.interpolate(x, scale_factor=1.5, mode="bilinear", recompute_scale_factor=True)
    b = F.interpolate(x, size=(3, 4), mode="bicubic", antialias=True, align_corners=False)
    c = F.interpolate(x, scale_factor=0.7, mode="nearest-exact")
    d = F.interpolate(x, size=(2, 3), mode="area")
    return a, b, c, d


case("interpolate_variants", lambda: prog(interp_variants), _img())
case("upsample_trilinear", lambda: nn.Upsample(scale_factor=(1, 2, 1.5), mode="trilinear"),
     lambda: [(R(1, 2, 3, 4, 4),), (R(2, 2, 2, 3, 4),)])
case("upsample_linear_1d", lambda: nn.Upsample(scale_factor=2.5, mode="linear"),
     lambda: [(R(2, 3, 4),), (R(1, 3, 7),)])


def shuffle_prog(self, x):
    y = self.up(x)
    return self.down(y) * 2, y


case("pixel_shuffle_unshuffle",
     lambda: prog(shuffle_prog, up=nn.PixelShuffle(2), down=nn.PixelUnshuffle(2)), _img(8, 3, 4))
case("channel_shuffle", lambda: nn.ChannelShuffle(2), _img(4, 3, 3))


def fold_unfold(self, x):
    cols = self.unfold(x)
    return self.fold(cols * 0.5), cols


case("fold_unfold",
     lambda: prog(fold_unfold, unfold=nn.Unfold(2, stride=1), fold=nn.Fold((5, 6), 2, stride=1)),
     lambda: [(R(2, 3, 5, 6),), (R(1, 3, 5, 6),)])


def conv_transpose_output_size(self, x):
    return self.ct(x, output_size=[x.shape[2] * 2, x.shape[3] * 2 - 1])


case("conv_transpose2d_output_size",
     lambda: prog(conv_transpose_output_size, ct=nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1)),
     _img())
case("conv2d_padding_same_even_kernel_dilation",
     lambda: nn.Conv2d(2, 3, 4, padding="same", dilation=2), _img())
case("conv1d_padding_valid", lambda: nn.Conv1d(3, 4, 3, padding="valid"),
     lambda: [(R(2, 3, 7),), (R(1, 3, 9),)])
case("conv2d_reflect", lambda: nn.Conv2d(2, 4, 3, padding=2, padding_mode="reflect"), _img())
case("conv2d_circular_groups", lambda: nn.Conv2d(4, 6, 3, padding=1, groups=2,
                                                 padding_mode="circular"), _img(4))
case("conv3d_replicate_same", lambda: nn.Conv3d(2, 2, 3, padding="same", padding_mode="replicate"),
     lambda: [(R(1, 2, 4, 4, 3),), (R(2, 2, 3, 5, 4),)])


def pad_modules(self, x):
    return self.a(x), self.b(x), self.c(x)


case("padding_modules", lambda: prog(pad_modules, a=nn.ReflectionPad2d((1, 0, 2, 1)),
                                     b=nn.CircularPad2d(1), c=nn.ConstantPad2d(1, 3.5)), _img())

# ---------------------------------------------------------------------------- pooling
def adaptive_pools(self, x):
    a = self.avg(x)
    m, idx = self.max(x)
    return a, m, idx


case("adaptive_pools_return_indices",
     lambda: prog(adaptive_pools, avg=nn.AdaptiveAvgPool2d((3, None)),
                  max=nn.AdaptiveMaxPool2d(2, return_indices=True)), _img())


def maxpool_unpool(self, x):
    y, idx = self.pool(x)
    return self.unpool(y, idx, output_size=x.shape[-2:]), idx


case("maxpool_ceil_indices_unpool",
     lambda: prog(maxpool_unpool, pool=nn.MaxPool2d(2, ceil_mode=True, return_indices=True),
                  unpool=nn.MaxUnpool2d(2)), lambda: [(R(2, 2, 6, 6),), (R(1, 2, 4, 6),)])
case("maxpool1d_ceil_dilation", lambda: nn.MaxPool1d(3, stride=2, dilation=2, ceil_mode=True),
     lambda: [(R(2, 3, 9),), (R(1, 3, 12),)])
case("fractional_max_pool2d", lambda: nn.FractionalMaxPool2d(2, output_ratio=0.5), _img(2, 8, 8))
case("fractional_max_pool2d_indices",
     lambda: nn.FractionalMaxPool2d(3, output_size=(4, 3), return_indices=True), _img(2, 8, 8))
case("avgpool_ceil_no_pad_divisor",
     lambda: nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True, count_include_pad=False,
                          divisor_override=None), _img())
case("lppool2d", lambda: nn.LPPool2d(2, 2), lambda: [(R(2, 3, 4, 4).abs(),), (R(1, 3, 6, 4).abs(),)])

# ----------------------------------------------------------------------------- losses
def ctc_prog(self, logits, targets, in_lens, tgt_lens):
    return self.loss(logits.log_softmax(2), targets, in_lens, tgt_lens)


case("ctc_loss", lambda: prog(ctc_prog, loss=nn.CTCLoss(blank=0, zero_infinity=True)),
     lambda: [(R(8, 2, 5), I(4, 2, 3) + 1, torch.tensor([8, 6]), torch.tensor([3, 2])),
              (R(6, 3, 5), I(4, 3, 3) + 1, torch.tensor([6, 6, 2]), torch.tensor([3, 1, 3]))])
case("cross_entropy_weights_ignore_smoothing",
     lambda: nn.CrossEntropyLoss(weight=torch.tensor([1.0, 2.0, 0.5, 1.5]), ignore_index=2,
                                 label_smoothing=0.1),
     lambda: [(R(5, 4), I(4, 5)), (R(3, 4), torch.tensor([2, 2, 2])), (R(6, 4), I(4, 6))])
case("cross_entropy_prob_targets", lambda: nn.CrossEntropyLoss(label_smoothing=0.2),
     lambda: [(R(5, 4), R(5, 4).softmax(1)), (R(2, 4), R(2, 4).softmax(1))])
case("cross_entropy_kdim_none", lambda: nn.CrossEntropyLoss(reduction="none", ignore_index=-1),
     lambda: [(R(2, 3, 4), torch.tensor([[0, -1, 2, 1], [1, 1, -1, 0]])), (R(1, 3, 2), I(3, 1, 2))])
case("nll_loss_weights_ignore",
     lambda: nn.NLLLoss(weight=torch.tensor([0.5, 1.0, 2.0]), ignore_index=1),
     lambda: [(R(4, 3).log_softmax(1), I(3, 4)), (R(2, 3).log_softmax(1), torch.tensor([1, 1]))])
case("kldiv_log_target_batchmean", lambda: nn.KLDivLoss(reduction="batchmean", log_target=True),
     lambda: [(R(3, 4).log_softmax(1), R(3, 4).log_softmax(1)), (R(5, 4).log_softmax(1), R(5, 4).log_softmax(1))])
case("bce_with_logits_pos_weight",
     lambda: nn.BCEWithLogitsLoss(pos_weight=torch.tensor([1.0, 3.0, 0.5])),
     lambda: [(R(4, 3), torch.rand(4, 3).round()), (R(2, 3), torch.rand(2, 3))])
case("margin_ranking", lambda: nn.MarginRankingLoss(margin=0.3),
     lambda: [(R(5), R(5), torch.tensor([1.0, -1, 1, -1, 1])), (R(2), R(2), torch.tensor([-1.0, -1]))])
case("triplet_distance_lambda",
     lambda: nn.TripletMarginWithDistanceLoss(
         distance_function=lambda a, b: 1.0 - F.cosine_similarity(a, b), margin=0.5, swap=True),
     lambda: [(R(4, 6), R(4, 6), R(4, 6)), (R(2, 6), R(2, 6), R(2, 6))])


def misc_losses(self, x, y, t):
    return (self.huber(x, y), self.smooth(x, y),
            self.poisson(x, y.abs()), self.cos(x, y, t.sign()), self.hinge(x, t.sign()))


case("misc_losses", lambda: prog(misc_losses, huber=nn.HuberLoss(delta=0.5),
                                 smooth=nn.SmoothL1Loss(beta=0.3),
                                 poisson=nn.PoissonNLLLoss(), cos=nn.CosineEmbeddingLoss(),
                                 hinge=nn.HingeEmbeddingLoss(reduction="sum")),
     lambda: [(R(4, 5), R(4, 5), R(4)), (R(2, 5), R(2, 5), R(2))])


case("gaussian_nll_loss", lambda: nn.GaussianNLLLoss(eps=1e-3),
     lambda: [(R(4, 5), R(4, 5), R(4, 5).abs()), (R(2, 5), R(2, 5), R(2, 1).abs())])


def similarity(self, a, b):
    return self.cos(a, b), self.pdist(a, b), self.bil(a, b)


case("cosine_pairwise_bilinear",
     lambda: prog(similarity, cos=nn.CosineSimilarity(dim=1, eps=1e-6),
                  pdist=nn.PairwiseDistance(p=1.5, keepdim=True), bil=nn.Bilinear(4, 4, 2)),
     lambda: [(R(3, 4), R(3, 4)), (R(5, 4), R(5, 4)), (torch.zeros(2, 4), R(2, 4))])


def shape_modules(self, x):
    y = self.flat(self.ident(x))
    return self.unflat(y), y


case("identity_flatten_unflatten",
     lambda: prog(shape_modules, ident=nn.Identity(7, k=3), flat=nn.Flatten(1, 2),
                  unflat=nn.Unflatten(1, (2, -1))), lambda: [(R(2, 4, 3, 2),), (R(3, 4, 3, 2),)])

# -------------------------------------------------------------------- parametrizations
P = nn.utils.parametrizations
case("weight_norm_parametrization", lambda: P.weight_norm(nn.Linear(4, 3)),
     lambda: [(R(2, 4),), (R(5, 4),), (R(1, 4),)])
case("spectral_norm_parametrization", lambda: P.spectral_norm(nn.Linear(4, 3)),
     lambda: [(R(2, 4),), (R(5, 4),), (R(1, 4),)])
case("orthogonal_parametrization", lambda: P.orthogonal(nn.Linear(4, 4)),
     lambda: [(R(2, 4),), (R(5, 4),)])


class Symmetric(nn.Module):
    def forward(self, w):
        return w.triu() + w.triu(1).transpose(0, 1)


def _param_custom():
    lin = nn.Linear(4, 4)
    nn.utils.parametrize.register_parametrization(lin, "weight", Symmetric())
    return lin


case("custom_parametrization", _param_custom, lambda: [(R(2, 4),), (R(3, 4),)])


def cached_parametrization(self, x):
    with nn.utils.parametrize.cached():
        return self.lin(x) + self.lin(x * 2)


case("custom_parametrization_cached",
     lambda: prog(cached_parametrization, lin=_param_custom()), lambda: [(R(2, 4),), (R(3, 4),)])
case("old_weight_norm_hook", lambda: nn.utils.weight_norm(nn.Linear(4, 3)),
     lambda: [(R(2, 4),), (R(5, 4),)])

# -------------------------------------------------------------- containers, init, misc
def module_dict_by_key(self, x, key):
    return self.heads[key](x)


case("module_dict_python_key",
     lambda: prog(module_dict_by_key, heads=nn.ModuleDict({"a": nn.Linear(3, 2), "b": nn.Linear(3, 4)})),
     lambda: [(R(2, 3), "a"), (R(2, 3), "b"), (R(5, 3), "a")])


def param_list_by_index(self, x, i):
    return x @ self.ws[i] + self.ws[-1].sum()


case("parameter_list_python_index",
     lambda: prog(param_list_by_index, ws=nn.ParameterList([nn.Parameter(torch.randn(3, 3)) for _ in range(3)])),
     lambda: [(R(2, 3), 0), (R(2, 3), 2), (R(4, 3), 1)])


def sequential_slice(self, x):
    h = self.seq[:2](x)
    return self.seq[2:](h), self.seq[-1](h[:, :2])


case("sequential_slicing",
     lambda: prog(sequential_slice, seq=nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2), nn.Softsign())),
     lambda: [(R(2, 3),), (R(5, 3),)])


def init_in_forward(self, x):
    w = torch.empty(x.shape[1], 3)
    nn.init.kaiming_uniform_(w, a=0.1)
    b = nn.init.constant_(torch.empty(3), 0.5)
    return x @ w + b


case("init_in_forward", lambda: prog(init_in_forward), lambda: [(R(2, 4),), (R(3, 4),), (R(2, 5),)])


def init_own_param(self, x):
    nn.init.zeros_(self.lin.bias)
    return self.lin(x)


case("init_own_parameter_in_forward", lambda: prog(init_own_param, lin=nn.Linear(3, 2)),
     lambda: [(R(2, 3),), (R(4, 3),)])


class CountingBuffer(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.register_buffer("calls", torch.zeros((), dtype=torch.long), persistent=False)
        self.register_buffer("ema", torch.zeros(3))

    def forward(self, x):
        y = self.lin(x)
        if self.training:
            self.calls += 1
            self.ema.mul_(0.9).add_(y.detach().mean(0), alpha=0.1)
        return y + self.ema


case("buffer_updates_non_persistent", CountingBuffer, lambda: [(R(2, 3),), (R(4, 3),), (R(2, 3),)])


def quant_stubs(self, x):
    return self.dequant(self.lin(self.quant(x)))


case("quant_dequant_stubs",
     lambda: prog(quant_stubs, quant=torch.ao.quantization.QuantStub(), lin=nn.Linear(3, 2),
                  dequant=torch.ao.quantization.DeQuantStub()), lambda: [(R(2, 3),), (R(4, 3),)])


def activations(self, x):
    return (self.sm2d(x), self.lsm(x), self.glu(x), self.thr(x), self.celu(x), self.hsh(x),
            self.softmin(x), self.mish(x))


case("activations", lambda: prog(activations, sm2d=nn.Softmax2d(), lsm=nn.LogSoftmax(dim=1),
                                 glu=nn.GLU(1), thr=nn.Threshold(0.1, -2.0), celu=nn.CELU(0.5),
                                 hsh=nn.Hardshrink(0.3), softmin=nn.Softmin(-1), mish=nn.Mish()),
     _img(4))
case("softmax_implicit_dim", lambda: nn.Softmax(), lambda: [(R(2, 3),), (R(2, 3, 4),)])


def inplace_relu(self, x):
    y = self.lin(x)
    self.act(y)
    return y, self.hardtanh(y * 3)


case("inplace_activations",
     lambda: prog(inplace_relu, lin=nn.Linear(3, 3), act=nn.ReLU(inplace=True),
                  hardtanh=nn.Hardtanh(-1, 1, inplace=True)), lambda: [(R(2, 3),), (R(4, 3),)])


def relu_inplace_on_input(self, x):
    return self.act(x) * 2


case("relu_inplace_on_argument", lambda: prog(relu_inplace_on_input, act=nn.ReLU(inplace=True)),
     lambda: [(R(2, 3),), (R(4, 3),)], combos=("module-eval-nograd", "function-train-nograd"))

# ------------------------------------------------- state changed by the user between calls
def _set(path, attr, value):
    def act(m):
        setattr(m.get_submodule(path) if path else m, attr, value)
    return act


def mlp_drop(self, x):
    return self.net(x)


def _mlp():
    return prog(mlp_drop, net=nn.Sequential(nn.Linear(4, 6), nn.Dropout(0.5), nn.Linear(6, 2)))


_x4 = lambda: [(R(3, 4),), (R(3, 4),), (R(3, 4),), (R(3, 4),)]
case("submodule_eval_between_calls", _mlp, _x4, before={1: lambda m: m.net[1].eval(),
                                                        3: lambda m: m.net[1].train()})
case("dropout_p_changed_between_calls", _mlp, _x4, before={1: _set("net.1", "p", 0.0),
                                                           2: _set("net.1", "p", 0.9)})


def _deep():
    inner = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))
    for _ in range(6):
        inner = nn.Sequential(inner, nn.Tanh())
    return prog(mlp_drop, net=inner)


def _deepest_dropout(m):
    return [s for s in m.modules() if isinstance(s, nn.Dropout)][0]


case("deeply_nested_dropout_eval_between_calls", _deep, _x4,
     before={1: lambda m: _deepest_dropout(m).eval(), 2: lambda m: _deepest_dropout(m).train()})
case("deeply_nested_dropout_p_between_calls", _deep, _x4,
     before={1: lambda m: setattr(_deepest_dropout(m), "p", 0.0)})


def bn_prog(self, x):
    return self.bn(x) * 2


case("batchnorm_eval_between_calls",
     lambda: prog(bn_prog, bn=nn.BatchNorm1d(4)), _x4,
     before={1: lambda m: m.bn.eval(), 2: lambda m: m.bn.train()})
case("batchnorm_track_running_stats_toggled",
     lambda: prog(bn_prog, bn=nn.BatchNorm1d(4)), _x4,
     before={1: _set("bn", "track_running_stats", False), 3: _set("bn", "track_running_stats", True)})
case("batchnorm_momentum_changed",
     lambda: prog(bn_prog, bn=nn.BatchNorm1d(4)), _x4, before={1: _set("bn", "momentum", 0.9)})
case("batchnorm_running_stats_reset",
     lambda: prog(bn_prog, bn=nn.BatchNorm1d(4)), _x4, before={2: lambda m: m.bn.reset_running_stats()})


def act_prog(self, x):
    return self.act(self.lin(x))


def _act():
    return prog(act_prog, lin=nn.Linear(4, 3), act=nn.ReLU())


def _new_linear(m):
    torch.manual_seed(7)
    m.lin = nn.Linear(4, 3)


case("new_submodule_assigned_between_calls", _act, _x4,
     before={1: _set("", "act", nn.Tanh()), 2: _new_linear})
case("new_submodule_different_shape", _act, lambda: [(R(3, 4),), (R(3, 4),), (R(2, 4),)],
     before={1: lambda m: (torch.manual_seed(7), setattr(m, "lin", nn.Linear(4, 5)))})
case("double_after_conversion", _act,
     lambda: [(R(3, 4),), (R(3, 4).double(),), (R(2, 4).double(),)],
     before={1: lambda m: m.double()})
case("half_after_conversion", _act,
     lambda: [(R(3, 4),), (R(3, 4).half(),)], before={1: lambda m: m.half()},
     combos=("module-eval-nograd", "function-train-nograd"))
case("requires_grad_off_between_calls", _act, _x4,
     before={1: lambda m: m.lin.requires_grad_(False), 3: lambda m: m.lin.weight.requires_grad_(True)})


def _load_new_weights(m):
    m.load_state_dict({k: v * 2 + 1 for k, v in m.state_dict().items()})


case("load_state_dict_between_calls", _act, _x4, before={1: _load_new_weights})


def _emb_prog():
    return prog(functional_embedding_max_norm, table=nn.Parameter(torch.randn(10, 4) * 2))


def _bump_table(m):
    with torch.no_grad():
        m.table.mul_(5.0)


case("embedding_max_norm_weight_bumped", _emb_prog, lambda: _emb_idx() + _emb_idx(),
     before={3: _bump_table}, grad_inputs=False)


# ------------------------------------------------------------------- hooks on the module
class Hooked(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.out = nn.Linear(3, 2)
        self.pre_calls = 0
        self.bwd_calls = 0

    def forward(self, x, scale=1.0):
        return self.out(self.lin(x) * scale)


def _pre_kwargs(mod, args, kwargs):
    mod.pre_calls += 1
    return args, {**kwargs, "scale": kwargs.get("scale", 1.0) * 2}


def _hooked_pre():
    m = Hooked()
    m.register_forward_pre_hook(_pre_kwargs, with_kwargs=True)
    return m


def _bwd_hook(mod, grad_in, grad_out):
    return (grad_in[0] * 3,)


def _hooked_bwd():
    m = Hooked()
    m.out.register_full_backward_hook(_bwd_hook)
    return m


def _fwd_hook_sub(mod, args, out):
    return out.relu()


def _hooked_sub():
    m = Hooked()
    m.lin.register_forward_hook(_fwd_hook_sub)
    return m


case("forward_pre_hook_with_kwargs", _hooked_pre,
     lambda: [(R(2, 4), {"scale": 0.5}), (R(3, 4),), (R(2, 4), {"scale": 3.0})])
case("full_backward_hook_on_submodule", _hooked_bwd, lambda: [(R(2, 4),), (R(3, 4),)])
case("forward_hook_on_submodule", _hooked_sub, lambda: [(R(2, 4),), (R(3, 4),)])


# -------------------------------------------------------------------- training steps
def clip_step(self, x):
    self.zero_grad()
    loss = self.lin(x).pow(2).mean()
    loss.backward()
    norm = nn.utils.clip_grad_norm_(self.parameters(), 0.5, foreach=True)
    return loss.detach(), norm


def clip_step_nonfinite(self, x):
    self.zero_grad()
    loss = self.lin(x).sum()
    loss.backward()
    return nn.utils.clip_grad_norm_(self.parameters(), 1.0, norm_type=2.0, error_if_nonfinite=True)


def clip_value_step(self, x):
    self.zero_grad()
    (self.lin(x) ** 2).sum().backward()
    nn.utils.clip_grad_value_(self.parameters(), 0.1)
    return self.lin.weight.grad.clone()


_grad_combos = ("module-train-grad", "function-eval-grad")
case("clip_grad_norm_foreach_step", lambda: prog(clip_step, lin=nn.Linear(4, 3)),
     lambda: [(R(3, 4),), (R(5, 4) * 10,), (R(2, 4),)], combos=_grad_combos, grad_inputs=False)
case("clip_grad_norm_error_if_nonfinite", lambda: prog(clip_step_nonfinite, lin=nn.Linear(4, 3)),
     lambda: [(R(3, 4),), (torch.tensor([[float("inf"), 1.0, 0.0, 2.0]]),), (R(2, 4),)],
     combos=_grad_combos, grad_inputs=False)
case("clip_grad_value_step", lambda: prog(clip_value_step, lin=nn.Linear(4, 3)),
     lambda: [(R(3, 4),), (R(5, 4) * 10,)], combos=_grad_combos, grad_inputs=False)


def sgd_step(self, x):
    loss = self.lin(x).pow(2).mean()
    loss.backward()
    with torch.no_grad():
        for p in self.parameters():
            p -= 0.1 * p.grad
            p.grad = None
    return loss.detach()


case("manual_sgd_step", lambda: prog(sgd_step, lin=nn.Linear(4, 3)),
     lambda: [(R(3, 4),), (R(5, 4),), (R(3, 4),)], combos=_grad_combos, grad_inputs=False)

# ------------------------------------------------------------------------------- more
case("embedding_from_pretrained_max_norm",
     lambda: nn.Embedding.from_pretrained(torch.randn(10, 4) * 3, freeze=False, max_norm=2.0,
                                          padding_idx=1), _emb_idx, grad_inputs=False)
def multilabel_losses(self, x, y, z):
    return self.a(x, y), self.b(x, z)


case("multilabel_margin_soft_margin",
     lambda: prog(multilabel_losses,
                  a=nn.MultiLabelMarginLoss(), b=nn.MultiLabelSoftMarginLoss()),
     lambda: [(R(3, 4), torch.tensor([[3, 0, -1, 1], [0, 1, 2, 3], [-1, 0, 0, 0]]), torch.rand(3, 4).round())])
case("multi_margin_weights", lambda: nn.MultiMarginLoss(p=2, margin=0.5, weight=torch.tensor([1.0, 2, 3])),
     lambda: [(R(4, 3), I(3, 4)), (R(2, 3), I(3, 2))])


def sdpa_prog(self, q, k, v):
    return F.scaled_dot_product_attention(q, k, v, dropout_p=0.3 if self.training else 0.0,
                                          is_causal=True)


case("sdpa_dropout_causal", lambda: prog(sdpa_prog),
     lambda: [(R(2, 2, 5, 4), R(2, 2, 5, 4), R(2, 2, 5, 4)), (R(1, 2, 3, 4), R(1, 2, 3, 4), R(1, 2, 3, 4))])

# -------------------------------------------------------- the caller's modes and flags
def _autocast():
    return torch.autocast("cpu", dtype=torch.bfloat16)


class _Float64Default:
    """torch.set_default_dtype(torch.float64) for one call, as a user might around it."""

    def __enter__(self):
        self.old = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)

    def __exit__(self, *exc):
        torch.set_default_dtype(self.old)


def lin_plus_new(self, x):
    return self.lin(x) + torch.arange(3.0) + torch.zeros(1)


_lin3 = lambda: prog(lin_plus_new, lin=nn.Linear(4, 3))
case("autocast_cpu_bf16_some_calls", _lin3, _x4, around={1: _autocast, 3: _autocast})
case("default_dtype_float64_some_calls", _lin3, _x4, around={1: _Float64Default})
case("inference_mode_some_calls", lambda: prog(bn_prog, bn=nn.BatchNorm1d(4)), _x4,
     around={1: torch.inference_mode}, combos=("module-train-grad", "function-eval-grad"))


def emb_reads_weight(self, idx):
    a = self.emb.weight.sum()
    y = self.emb(idx)
    return a, y, self.emb.weight.sum(), self.emb.weight.clone()


case("embedding_max_norm_weight_read_around",
     lambda: prog(emb_reads_weight, emb=_emb_max_norm()), _emb_idx, grad_inputs=False)


def bn_reads_stats(self, x):
    before = self.bn.running_mean.clone()
    y = self.bn(x)
    return y, before, self.bn.running_mean * 1, self.bn.num_batches_tracked + 0


case("batchnorm_stats_read_around_call", lambda: prog(bn_reads_stats, bn=nn.BatchNorm1d(4)), _x4)


def functional_bn_on_args(self, x, rm, rv):
    return F.batch_norm(x, rm, rv, training=True, momentum=0.2)


case("functional_batch_norm_argument_buffers", lambda: prog(functional_bn_on_args),
     lambda: [(R(4, 3), torch.zeros(3), torch.ones(3)), (R(6, 3), R(3), R(3).abs())],
     grad_inputs=False)


def _mul_params(m):
    with torch.no_grad():
        for p in m.parameters():
            p.mul_(1.5)


def _swap_data(m):
    torch.manual_seed(3)
    for p in m.parameters():
        p.data = torch.randn_like(p)


def _replace_lstm_weight(m):
    torch.manual_seed(4)
    m.weight_ih_l0 = nn.Parameter(torch.randn_like(m.weight_ih_l0))


_lstm_in = lambda: [(R(5, 2, 4),), (R(5, 2, 4),), (R(5, 2, 4),)]
case("lstm_params_changed_in_place_between_calls", lambda: nn.LSTM(4, 5), _lstm_in,
     before={1: _mul_params})
case("lstm_param_data_swapped_between_calls", lambda: nn.LSTM(4, 5), _lstm_in,
     before={1: _swap_data})
case("lstm_parameter_replaced_between_calls", lambda: nn.LSTM(4, 5), _lstm_in,
     before={1: _replace_lstm_weight})
case("linear_param_data_swapped_between_calls", _lin3, _x4, before={1: _swap_data})
case("conv_channels_last_between_calls", lambda: nn.Conv2d(2, 3, 3), _img(),
     before={1: lambda m: m.to(memory_format=torch.channels_last)})
case("dropout_inplace", lambda: nn.Dropout(0.5, inplace=True), _drop_in(5),
     combos=("module-eval-nograd", "function-train-nograd"))

# ------------------------------------------- RNG objects, plain tensors, checkpointing
class WithGenerator(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.gen = torch.Generator().manual_seed(123)

    def forward(self, x):
        noise = torch.randn(x.shape, generator=self.gen)
        keep = torch.rand(x.shape[0], 1, generator=self.gen) > 0.3
        return self.lin(x + noise) * keep


def _reseed(m):
    m.gen.manual_seed(5)


case("generator_attribute", WithGenerator, _x4, before={2: _reseed})


def sampling_ops(self, x):
    probs = x.softmax(-1)
    idx = torch.multinomial(probs, 2)
    b = torch.bernoulli(probs)
    g = F.gumbel_softmax(x, tau=0.5, hard=True)
    return idx, b, g, torch.randn_like(x), torch.randint_like(x, 5)


case("sampling_ops", lambda: prog(sampling_ops), _x4)


def seeded_forward(self, x):
    torch.manual_seed(42)
    return F.dropout(self.lin(x), 0.5, True), torch.rand(3)


case("manual_seed_in_forward", lambda: prog(seeded_forward, lin=nn.Linear(4, 4)), _x4)


def fork_rng_forward(self, x):
    with torch.random.fork_rng():
        torch.manual_seed(0)
        a = torch.rand(2)
    return self.lin(x) + a.sum(), torch.rand(2)


case("fork_rng_in_forward", lambda: prog(fork_rng_forward, lin=nn.Linear(4, 4)), _x4)


class PlainTensorAttr(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.scale = torch.tensor([1.0, 2.0, 3.0])      # neither parameter nor buffer

    def forward(self, x):
        return self.lin(x) * self.scale


def _fill_scale(m):
    m.scale.fill_(5.0)


def _new_scale(m):
    m.scale = torch.tensor([0.5, -1.0, 2.0])


case("plain_tensor_attribute_changed_in_place", PlainTensorAttr, _x4, before={1: _fill_scale})
case("plain_tensor_attribute_reassigned", PlainTensorAttr, _x4, before={1: _new_scale})


class Config:
    def __init__(self):
        self.use_gate = True
        self.eps = 1e-5
        self.extra = {"mult": 2.0}


class Configured(nn.Module):
    def __init__(self):
        super().__init__()
        self.config = Config()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        if self.config.use_gate:
            y = y * torch.sigmoid(y)
        return y * self.config.extra["mult"] + self.config.eps


def _cfg(m):
    m.config.use_gate = False
    m.config.extra["mult"] = -1.0


case("config_object_changed_between_calls", Configured, _x4, before={1: _cfg})


def checkpointed(self, x):
    h = torch.utils.checkpoint.checkpoint(self.block, x, use_reentrant=False)
    return self.out(h)


case("activation_checkpoint_with_dropout",
     lambda: prog(checkpointed, block=nn.Sequential(nn.Linear(4, 6), nn.Dropout(0.3), nn.GELU()),
                  out=nn.Linear(6, 2)), _x4)


def flatten_params_lstm(self, x):
    self.lstm.flatten_parameters()
    return self.lstm(x)[0]


case("lstm_flatten_parameters_in_forward", lambda: prog(flatten_params_lstm, lstm=nn.LSTM(4, 3)),
     lambda: [(R(3, 2, 4),), (R(3, 2, 4),)])


def tied(self, idx):
    h = self.emb(idx).mean(1)
    return self.dec(h)


def _tied():
    m = prog(tied, emb=nn.Embedding(10, 4), dec=nn.Linear(4, 10, bias=False))
    m.dec.weight = m.emb.weight
    return m


case("tied_weights", _tied, _emb_idx, grad_inputs=False)


def emb_twice_max_norm(self, idx):
    a = self.emb(idx)
    with torch.no_grad():
        self.emb.weight[idx[0, 0]] *= 4
    return a, self.emb(idx)


case("embedding_max_norm_twice_with_in_place_edit",
     lambda: prog(emb_twice_max_norm, emb=_emb_max_norm()), _emb_idx, grad_inputs=False)


def vec_to_params(self, x, v):
    nn.utils.vector_to_parameters(v, self.lin.parameters())
    return self.lin(x)


case("vector_to_parameters_in_forward", lambda: prog(vec_to_params, lin=nn.Linear(2, 2)),
     lambda: [(R(3, 2), R(6)), (R(3, 2), R(6))], grad_inputs=False)


def grad_mode_branch(self, x):
    y = self.lin(x)
    if torch.is_grad_enabled() and self.training:
        y = y + 1
    if torch.compiler.is_compiling():
        y = y * 100
    return y


case("branch_on_grad_mode_and_is_compiling", lambda: prog(grad_mode_branch, lin=nn.Linear(4, 4)),
     _x4)


def default_dtype_read(self, x):
    return x.to(torch.get_default_dtype()) + torch.ones(x.shape[-1])


case("get_default_dtype_read_some_calls", lambda: prog(default_dtype_read), _x4,
     around={1: _Float64Default})


class EmaTeacher(nn.Module):
    def __init__(self):
        super().__init__()
        self.student = nn.Linear(4, 4)
        self.teacher = nn.Linear(4, 4)

    @torch.no_grad()
    def update(self):
        for t, s in zip(self.teacher.parameters(), self.student.parameters()):
            t.mul_(0.9).add_(s, alpha=0.1)

    def forward(self, x):
        if self.training:
            self.update()
        return self.student(x), self.teacher(x)


case("no_grad_decorated_method_ema", EmaTeacher, _x4)


def enable_grad_inside(self, x):
    with torch.enable_grad():
        x = x.detach().requires_grad_(True)
        y = self.lin(x).pow(2).sum()
        (gx,) = torch.autograd.grad(y, x)
    return gx


case("enable_grad_inside_forward", lambda: prog(enable_grad_inside, lin=nn.Linear(4, 4)), _x4,
     grad_inputs=False)



case("embeddingbag_max_norm", lambda: _scaled(nn.EmbeddingBag(10, 3, mode="sum", max_norm=1.0)),
     _bag_offsets)


def _scaled(m):
    with torch.no_grad():
        for p in m.parameters():
            p.mul_(3.0)
    return m


def adaptive_log_softmax(self, x, target):
    out = self.asm(x, target)
    return out.output, out.loss, self.asm.log_prob(x), self.asm.predict(x)


case("adaptive_log_softmax_with_loss",
     lambda: prog(adaptive_log_softmax, asm=nn.AdaptiveLogSoftmaxWithLoss(6, 10, [4, 8], div_value=2.0)),
     lambda: [(R(5, 6), I(10, 5)), (R(3, 6), torch.tensor([0, 9, 5])), (R(4, 6), torch.tensor([1, 2, 3, 0]))])


def grid_sample_prog(self, x, theta):
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="reflection", align_corners=False)


case("affine_grid_sample", lambda: prog(grid_sample_prog),
     lambda: [(R(2, 3, 5, 6), R(2, 2, 3) * 0.3), (R(1, 3, 4, 4), R(1, 2, 3) * 0.3)])


def _assign_param(m):
    with torch.no_grad():
        m.weight = torch.eye(4) * 2       # parametrize: right_inverse, original updated in place


def _param_sym_inv():
    lin = nn.Linear(4, 4)
    nn.utils.parametrize.register_parametrization(lin, "weight", SymmetricInv())
    return lin


class SymmetricInv(Symmetric):
    def right_inverse(self, w):
        return w.triu()


case("parametrization_assigned_between_calls", _param_sym_inv, _x4, before={1: _assign_param})
case("old_spectral_norm_hook", lambda: nn.utils.spectral_norm(nn.Linear(4, 3)), _x4)


def functional_call_prog(self, x, w, b):
    return torch.func.functional_call(self.lin, {"weight": w, "bias": b}, (x,)) + self.lin(x)


case("functional_call_params_argument", lambda: prog(functional_call_prog, lin=nn.Linear(3, 2)),
     lambda: [(R(2, 3), R(2, 3), R(2)), (R(4, 3), R(2, 3), R(2)), (R(2, 3), R(2, 3), R(2))])
case("instancenorm_single_spatial_error", lambda: nn.InstanceNorm1d(3, track_running_stats=True),
     lambda: [(R(2, 3, 4),), (R(2, 3, 1),), (R(2, 3, 5),)])


# ------------------------------------------- eval-mode conv + batchnorm, state changed
def conv_bn_relu(self, x):
    return self.bn(self.conv(x)).relu()


def _conv_bn():
    m = prog(conv_bn_relu, conv=nn.Conv2d(2, 4, 3, padding=1), bn=nn.BatchNorm2d(4))
    with torch.no_grad():
        m.bn.running_mean.uniform_(-1, 1)
        m.bn.running_var.uniform_(0.5, 2.0)
        m.bn.weight.uniform_(0.5, 1.5)
    return m


def _bump_running_stats(m):
    with torch.no_grad():
        m.bn.running_mean.add_(0.5)
        m.bn.running_var.mul_(2.0)


def _bump_conv_weight(m):
    with torch.no_grad():
        m.conv.weight.mul_(-1.5)
        m.bn.bias.add_(1.0)


def _train_step_between(m):
    m.train()
    m(torch.linspace(-2, 4, 180).reshape(3, 2, 5, 6))
    m.eval()


_img4 = lambda: [(R(2, 2, 5, 6),), (R(2, 2, 5, 6),), (R(2, 2, 5, 6),), (R(2, 2, 5, 6),)]
_eval_combos = ("module-eval-nograd", "function-eval-grad")
case("conv_bn_eval_running_stats_changed_in_place", _conv_bn, _img4,
     before={1: _bump_running_stats, 3: _bump_running_stats}, combos=_eval_combos)
case("conv_bn_eval_weights_changed_in_place", _conv_bn, _img4,
     before={1: _bump_conv_weight}, combos=_eval_combos)
case("conv_bn_eval_train_call_between", _conv_bn, _img4,
     before={1: _train_step_between, 2: _train_step_between}, combos=_eval_combos)
case("conv_bn_eval_eps_changed", _conv_bn, _img4, before={1: _set("bn", "eps", 0.5)},
     combos=_eval_combos)
case("conv_bn_eval_load_state_dict", _conv_bn, _img4, before={2: _load_new_weights},
     combos=_eval_combos)


def linear_bn(self, x):
    return self.bn(self.lin(x))


def _lin_bn():
    return prog(linear_bn, lin=nn.Linear(4, 3), bn=nn.BatchNorm1d(3))


case("linear_bn_eval_stats_changed", _lin_bn, _x4, before={1: _bump_running_stats,
                                                          2: lambda m: m.bn.reset_parameters()},
     combos=_eval_combos)


def _swap_bn_buffers(m):
    m.bn.running_mean.data = torch.linspace(-1, 1, m.bn.num_features)
    m.bn.running_var.data = torch.linspace(0.5, 3, m.bn.num_features)


def _linear_train_between(m):
    m.train()
    m(torch.linspace(-2, 4, 24).reshape(6, 4))
    m.eval()


case("conv_bn_eval_buffer_data_swapped", _conv_bn, _img4, before={1: _swap_bn_buffers},
     combos=_eval_combos)
case("linear_bn_eval_train_call_between", _lin_bn, _x4, before={1: _linear_train_between},
     combos=_eval_combos)


def _bn_copy_stats(m):
    with torch.no_grad():
        m.bn.running_mean.copy_(torch.linspace(-1, 1, 4))


case("conv_bn_eval_stats_copied_in", _conv_bn, _img4, before={1: _bn_copy_stats},
     combos=_eval_combos)
