"""torch.nn's transformer fast paths, as eager takes them (``runtime/attention_fast_path.py``,
``runtime/encoder_nested_path.py``), against eager at every configuration that decides
them: batch-first or not, pre/post-norm, relu/gelu/callable activations, bool/float key
padding masks, attention masks, both, ``is_causal``, fully padded sequences, masks that
are not left-aligned, ``enable_nested_tensor=False``, train mode, grad on and off, inputs
requiring grad. Each case is strict (no fallback) and calls one graph with several masks
and batch sizes: values within 1e-5, NaN where eager has NaN, nothing more.

Eager's fused ops differ from their Python path in two ways the graph must repeat: a row
whose every key is masked is NaN (fused) rather than finite, and the encoder's nested path
leaves 0 at padded positions (the final norm's bias with a norm) where the dense path
computes values there -- when the mask is left-aligned, a run-time question.
"""
import warnings

import pytest
import torch
import torch.nn as nn

from transpiler import ConversionError, FallbackWarning, to_graph

E, HEADS = 16, 4


class Wrap(nn.Module):
    """A user's module calling the torch module (self-attention takes one tensor)."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x, **kwargs):
        if isinstance(self.m, nn.MultiheadAttention):
            return self.m(x, x, x, **kwargs)
        return self.m(x, **kwargs)


def _padding(batch, seq, kind, shift):
    m = torch.zeros(batch, seq, dtype=torch.bool)
    m[0, seq - 1 - shift:] = True                   # a left-aligned padded tail
    if kind == "fullrow":
        m[1, :] = True                              # a sequence that is all padding
    if kind == "notleft":
        m[1, shift] = True                          # padding in the middle
    return m


def _kwargs(kind, batch, seq, shift, names):
    """The mask arguments of one call (``names``: the module's spelling of them)."""
    pad_name, mask_name = names
    kw = {}
    if kind in ("pad", "fullrow", "notleft", "both"):
        kw[pad_name] = _padding(batch, seq, "pad" if kind == "both" else kind, shift)
    if kind == "float":
        kw[pad_name] = _padding(batch, seq, "pad", shift).float().masked_fill(
            _padding(batch, seq, "pad", shift), float("-inf"))
    if kind in ("attn", "both", "causal"):
        kw[mask_name] = nn.Transformer.generate_square_subsequent_mask(seq)
    if kind == "causal":
        kw["is_causal"] = True
    if kind == "attnrow":
        am = torch.zeros(seq, seq, dtype=torch.bool)
        am[shift + 1, :] = True                     # a query that sees no key
        kw[mask_name] = am
    return kw


def _same(got, exp):
    if isinstance(exp, tuple):
        assert isinstance(got, tuple) and len(got) == len(exp)
        for g, e in zip(got, exp):
            _same(g, e)
        return
    if exp is None:
        assert got is None
        return
    assert got.shape == exp.shape and got.dtype == exp.dtype
    assert torch.equal(got.isnan(), exp.isnan()), \
        f"NaN at {int(got.isnan().sum())} positions, eager {int(exp.isnan().sum())}"
    ok = ~exp.isnan()
    torch.testing.assert_close(got[ok], exp[ok], atol=1e-5, rtol=1e-5)


def _check(module, kind, batch_first, names, grad=False, needs_grad=False, extra=None,
           wrap=True):
    """A strict graph against eager over three calls (other masks, another batch size);
    returns eager's NaN count, so callers can check the case bites."""
    extra = extra or {}
    g = to_graph(Wrap(module) if wrap else module, strict=True)
    nans = 0
    for batch, shift in ((3, 1), (3, 2), (2, 0)):
        seq = 6
        x = torch.randn(batch, seq, E) if batch_first else torch.randn(seq, batch, E)
        x.requires_grad_(needs_grad)
        kw = dict(_kwargs(kind, batch, seq, shift, names), **extra)
        with torch.set_grad_enabled(grad):
            exp = module(x, x, x, **kw) if isinstance(module, nn.MultiheadAttention) \
                else module(x, **kw)
            got = g(x, **kw)
        _same(got, exp)
        nans += int((exp[0] if isinstance(exp, tuple) else exp).isnan().sum())
    return nans


# (mode, grad enabled, input requires grad): eval without autograd is the fused ops' case
_EVAL = ("eval", False, False)
_OTHER_MODES = [("eval", True, False), ("eval", True, True), ("train", True, False)]
_ROWS = ("fullrow", "attnrow")         # masks leaving a query no key: NaN where fused


def _mha_cases():
    kinds = ("pad", "fullrow", "float", "both", "causal", "attnrow")
    cases = [(k, bf, nw, _EVAL) for k in kinds
             for bf, nw in ((True, False), (True, True), (False, False))]
    return cases + [(k, True, False, m) for k in _ROWS for m in _OTHER_MODES]


@pytest.mark.parametrize("kind,batch_first,need_weights,mode", _mha_cases())
def test_multihead_attention(kind, batch_first, need_weights, mode):
    mode, grad, needs_grad = mode
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(E, HEADS, batch_first=batch_first).train(mode == "train")
    mha.dropout = 0.0
    nans = _check(mha, kind, batch_first, ("key_padding_mask", "attn_mask"), grad,
                  needs_grad, extra={"need_weights": need_weights})
    fused = mode == "eval" and batch_first and not grad
    # NaN rows: the fused op's, or the weights' softmax (need_weights); SDPA's are finite
    assert (nans > 0) == (kind in _ROWS and (fused or need_weights))


def _layer_cases():
    kinds = {(True, False, "relu"): ("pad", "fullrow", "notleft", "float", "both", "causal",
                                     "attnrow"),
             (True, True, "gelu"): ("pad", "fullrow", "attnrow"),
             (False, False, "relu"): ("fullrow", "both"),
             (True, False, "callable"): ("fullrow", "causal")}
    cases = [(k,) + c + (_EVAL,) for c, ks in kinds.items() for k in ks]
    return cases + [(k, True, False, "relu", m) for k in _ROWS for m in _OTHER_MODES]


@pytest.mark.parametrize("kind,batch_first,norm_first,activation,mode", _layer_cases())
def test_encoder_layer(kind, batch_first, norm_first, activation, mode):
    mode, grad, needs_grad = mode
    torch.manual_seed(0)
    act = {"relu": "relu", "gelu": "gelu", "callable": torch.tanh}[activation]
    layer = nn.TransformerEncoderLayer(E, HEADS, 32, dropout=0.0, batch_first=batch_first,
                                       norm_first=norm_first, activation=act)
    layer.train(mode == "train")
    names = ("src_key_padding_mask", "src_mask")
    fused = mode == "eval" and batch_first and activation != "callable" and not grad
    for wrap in (True, False):          # a user's module calling it, and to_graph(layer)
        nans = _check(layer, kind, batch_first, names, grad, needs_grad, wrap=wrap)
        assert (nans > 0) == (kind in _ROWS and fused)


def _encoder_cases():
    # (batch_first, norm_first, enable_nested_tensor, a final norm): the masks to try
    kinds = {(True, False, True, False): ("pad", "fullrow", "notleft", "float", "both",
                                          "causal"),
             (True, False, True, True): ("pad", "fullrow"),
             (True, False, False, False): ("pad", "fullrow"),
             (False, False, True, False): ("pad", "both"),
             (True, True, True, False): ("pad", "fullrow")}
    cases = [(k,) + c + (_EVAL,) for c, ks in kinds.items() for k in ks]
    return cases + [("pad", True, False, True, True, m) for m in _OTHER_MODES]


@pytest.mark.parametrize("kind,batch_first,norm_first,nested,norm,mode", _encoder_cases())
def test_encoder(kind, batch_first, norm_first, nested, norm, mode):
    mode, grad, needs_grad = mode
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)        # (enable_nested_tensor note)
        layer = nn.TransformerEncoderLayer(E, HEADS, 32, dropout=0.0,
                                           batch_first=batch_first, norm_first=norm_first)
        encoder = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(E) if norm else None,
                                        enable_nested_tensor=nested)
    encoder.train(mode == "train")
    names = ("src_key_padding_mask", "mask")
    for wrap in (True, False):          # a user's module calling it, and to_graph(encoder)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)    # (torch's nested-tensor note)
            _check(encoder, kind, batch_first, names, grad, needs_grad, wrap=wrap)


def test_default_mode_converts_quietly():
    """The reported case in default mode: no FallbackWarning, eager's zeros."""
    encoder = _nested_encoder()
    x = torch.randn(3, 7, E)
    mask = _padding(3, 7, "pad", 2)
    with torch.no_grad():
        with warnings.catch_warnings():
            warnings.simplefilter("error", FallbackWarning)
            got = to_graph(encoder)(x, src_key_padding_mask=mask)
        _same(got, encoder(x, src_key_padding_mask=mask))


def _nested_encoder(norm=None, mask_check=True):
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(E, HEADS, 32, dropout=0.0, batch_first=True)
    return nn.TransformerEncoder(layer, 2, norm=norm, mask_check=mask_check).eval()


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
def test_encoder_nested_path_zeroes_padding_per_call():
    """The reported case: one graph, masks left-aligned or not per call; eager's nested
    path leaves exact zeros (the norm's bias with a norm) at padded positions."""
    for norm in (None, nn.LayerNorm(E)):
        encoder = _nested_encoder(norm)
        g = to_graph(encoder, strict=True)
        x = torch.randn(3, 7, E)
        aligned = torch.zeros(3, 7, dtype=torch.bool)
        aligned[0, 5:] = True
        aligned[2, 3:] = True
        gap = aligned.clone()
        gap[1, 2] = True
        with torch.no_grad():
            for mask in (aligned, gap, aligned):
                exp, got = encoder(x, src_key_padding_mask=mask), g(x, src_key_padding_mask=mask)
                _same(got, exp)
            assert g.graph_function.cache_info().traces == 1
            padded = g(x, src_key_padding_mask=aligned)[aligned]
            want = torch.zeros(E) if norm is None else norm.bias.detach()
            assert torch.equal(padded, want.expand_as(padded))
            assert not torch.equal(g(x, src_key_padding_mask=gap)[gap], torch.zeros_like(
                g(x, src_key_padding_mask=gap)[gap]))


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
def test_encoder_run_time_conditions_follow_eager():
    """The nested path's and the NaN rows' conditions that change without a retrace
    (parameters' requires_grad, torch.backends.mha's switch) are read when the graph runs."""
    encoder = _nested_encoder()
    g = to_graph(encoder, strict=True)
    x = torch.randn(3, 6, E)
    mask = _padding(3, 6, "fullrow", 1)
    for flag in (True, False, True):
        for p in encoder.parameters():
            p.requires_grad_(flag)
        _same(g(x, src_key_padding_mask=mask), encoder(x, src_key_padding_mask=mask))
    try:
        torch.backends.mha.set_fastpath_enabled(False)
        with torch.no_grad():
            _same(g(x, src_key_padding_mask=mask), encoder(x, src_key_padding_mask=mask))
    finally:
        torch.backends.mha.set_fastpath_enabled(True)
    with torch.no_grad():
        _same(g(x, src_key_padding_mask=mask), encoder(x, src_key_padding_mask=mask))


def test_encoder_mask_check_off_falls_back():
    """mask_check=False: eager reads any mask as left-aligned (a gap shifts the tokens); a
    graph does not repeat that, so the call falls back naming the user's line."""
    encoder = _nested_encoder(mask_check=False)
    x = torch.randn(2, 5, E)
    mask = _padding(2, 5, "pad", 1)
    with torch.no_grad():
        exp = encoder(x, src_key_padding_mask=mask)
        for fn, where in ((Wrap(encoder), __file__), (encoder, "mask_check=False")):
            with warnings.catch_warnings(record=True) as ws:
                warnings.simplefilter("always")
                got = to_graph(fn)(x, src_key_padding_mask=mask)
            _same(got, exp)
            falls = [w for w in ws if issubclass(w.category, FallbackWarning)]
            assert len(falls) == 1 and "mask_check=False" in str(falls[0].message)
            assert where in str(falls[0].message)
            with pytest.raises(ConversionError, match="mask_check=False"):
                to_graph(fn, strict=True)(x, src_key_padding_mask=mask)


def test_encoder_layer_is_causal_hint_as_eager():
    """The fused op applies the mask as given and ignores ``is_causal``: a wrong hint, or a
    hint with no mask (which eager's Python path refuses), gives eager's result."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(E, HEADS, 32, dropout=0.0, batch_first=True).eval()
    x = torch.randn(2, 5, E)
    band = torch.full((5, 5), float("-inf")).triu(2)        # not the causal mask
    with torch.no_grad():
        for kw in ({"src_mask": band, "is_causal": True}, {"is_causal": True}):
            _same(to_graph(Wrap(layer), strict=True)(x, **kw), layer(x, **kw))


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
@pytest.mark.parametrize("batch_first", [True, False])
def test_transformer(batch_first):
    """nn.Transformer: the encoder's nested path feeds the decoder its zeros (the decoder
    attends to them without a memory mask); a fully padded target row is NaN as eager's."""
    torch.manual_seed(0)
    model = nn.Transformer(E, HEADS, 2, 2, 32, dropout=0.0, batch_first=batch_first).eval()
    g = to_graph(model, strict=True)
    wrapped = to_graph(_TransformerUser(model), strict=True)
    for shift in (1, 0):
        src = torch.randn(3, 6, E) if batch_first else torch.randn(6, 3, E)
        tgt = torch.randn(3, 4, E) if batch_first else torch.randn(4, 3, E)
        kwargs = {"src_key_padding_mask": _padding(3, 6, "pad", shift),
                  "tgt_key_padding_mask": _padding(3, 4, "fullrow", shift)}
        with torch.no_grad():
            exp = model(src, tgt, **kwargs)
            _same(g(src, tgt, **kwargs), exp)
            _same(wrapped(src, tgt, **kwargs), exp)


class _TransformerUser(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, src, tgt, **kwargs):
        return self.model(src, tgt, **kwargs)


def test_multihead_attention_top_level_self_attention():
    mha = nn.MultiheadAttention(E, HEADS, batch_first=True).eval()
    x = torch.randn(3, 6, E)
    mask = _padding(3, 6, "fullrow", 1)
    with torch.no_grad():
        _same(to_graph(mha, strict=True)(x, x, x, key_padding_mask=mask, need_weights=False),
              mha(x, x, x, key_padding_mask=mask, need_weights=False))
