"""A ``try`` whose handler may catch what the graph raises when it runs
(``runtime/try_replays.py``): differential, eager vs ``to_graph``. The graph follows the
body; a call whose graph raises runs eagerly (FallbackWarning naming the ``try``; strict:
ConversionError on that call), so eager's handler decides. They fell back on every call."""
from __future__ import annotations

import warnings

import pytest
import torch

from transpiler import ConversionError, FallbackWarning, to_graph


def _run(fn, *args):
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        try:
            out = ("ok", fn(*args))
        except Exception as e:  # noqa: BLE001 - compared with eager's
            out = ("raise", type(e), str(e))
    return out, [str(w.message) for w in rec if issubclass(w.category, FallbackWarning)]


def _same(got, exp):
    assert got[0] == exp[0], (got, exp)
    if got[0] == "raise":
        assert got[1:] == exp[1:], (got, exp)
        return
    a, b = got[1], exp[1]
    if isinstance(b, tuple):
        assert isinstance(a, tuple) and len(a) == len(b)
        for x, y in zip(a, b):
            _same(("ok", x), ("ok", y))
    elif isinstance(b, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), (a, b)
    else:
        assert a == b and type(a) is type(b), (a, b)


_EMB = torch.nn.Embedding(10, 3)


def validated_lookup(ids):
    try:                                            # LayoutLM / LiLT's bbox check
        e = _EMB(ids)
    except IndexError as err:
        raise IndexError("ids must be within 0-9") from err
    return e.sum(-1) * 2


def recovered_lookup(ids):
    try:
        e = _EMB(ids)
        how = "lookup"
    except IndexError:
        e = torch.zeros(ids.shape + (3,))
        how = "zeros"
    return e.sum(-1), how


def _lookup_in_helper(ids):
    return _EMB(ids).mean()


def caught_in_caller(ids):
    try:
        return _lookup_in_helper(ids)
    except (IndexError, RuntimeError):
        return torch.tensor(-1.0)


def dropout_then_lookup(ids, x):
    y = torch.nn.functional.dropout(x, 0.5, training=True)
    try:
        e = _EMB(ids)
    except IndexError:
        e = torch.ones(ids.shape + (3,))
    return y, e.sum()


_GOOD, _BAD = torch.tensor([1, 2, 3]), torch.tensor([1, 20, 3])


@pytest.mark.parametrize("fn", [validated_lookup, recovered_lookup, caught_in_caller],
                         ids=lambda f: f.__name__)
def test_a_call_whose_graph_raises_runs_eagerly(fn):
    default, strict = to_graph(fn), to_graph(fn, strict=True)
    with torch.no_grad():
        for ids in (_GOOD, _BAD, torch.tensor([0, 9, 4]), _BAD):
            bad = ids.max() > 9
            exp, _ = _run(fn, ids)
            got, warned = _run(default, ids)
            _same(got, exp)
            assert bool(warned) == bool(bad), warned
            assert all("inside a try whose handler may catch it" in w and
                       "test_try_replays.py:" in w for w in warned), warned
            got, _ = _run(strict, ids)
            if bad:
                assert got[0] == "raise" and got[1] is ConversionError, got
            else:
                _same(got, exp)


def test_the_graph_keeps_the_body_after_replays():
    g = to_graph(recovered_lookup)
    for ids in (_GOOD, _BAD, _GOOD, _BAD, torch.tensor([4, 4, 4])):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FallbackWarning)
            g(ids)
    assert "embedding" in str(g.graph(_GOOD))


def test_a_replay_draws_the_random_numbers_eager_draws():
    """The generator's state is put back before the replay: the same stream as eager."""
    x = torch.ones(64)
    g = to_graph(dropout_then_lookup)
    calls = [_GOOD, _BAD, _GOOD, _BAD, _GOOD]
    torch.manual_seed(0)
    exp = [dropout_then_lookup(ids, x) for ids in calls]
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        got = [g(ids, x) for ids in calls]
    for a, b in zip(got, exp):
        _same(("ok", a), ("ok", b))


def test_random_stream_after_replays_matches_eager():
    x = torch.ones(32)
    g = to_graph(dropout_then_lookup)
    torch.manual_seed(1)
    for ids in (_GOOD, _BAD, _BAD):
        dropout_then_lookup(ids, x)
    after_eager = torch.rand(4)
    torch.manual_seed(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        for ids in (_GOOD, _BAD, _BAD):
            g(ids, x)
    assert torch.equal(torch.rand(4), after_eager)


def printed_lookup(ids):
    print("looking up", ids.shape[0])
    try:
        e = _EMB(ids)
    except IndexError:
        e = torch.zeros(ids.shape + (3,))
    return e.sum()


def test_effects_before_the_try_keep_the_fallback(capsys):
    """A failed run cannot run again when the graph prints (an effect eager shows once)."""
    with pytest.warns(FallbackWarning, match="with effects"):
        got = to_graph(printed_lookup)(_GOOD)
    assert torch.equal(got, printed_lookup(_GOOD))
    with pytest.raises(ConversionError, match="with effects"):
        to_graph(printed_lookup, strict=True)(_GOOD)


def test_gradients_through_a_replaying_graph():
    emb = torch.nn.Embedding(10, 3)

    def f(ids, w):
        try:
            e = emb(ids)
        except IndexError as err:
            raise ValueError("bad ids") from err
        return (e * w).sum()

    g = to_graph(f)
    w1, w2 = torch.ones(3, requires_grad=True), torch.ones(3, requires_grad=True)
    f(_GOOD, w1).backward()
    exp_w, exp_e = w1.grad.clone(), emb.weight.grad.clone()
    emb.weight.grad = None
    g(_GOOD, w2).backward()
    assert torch.equal(w2.grad, exp_w) and torch.equal(emb.weight.grad, exp_e)
    with pytest.warns(FallbackWarning), pytest.raises(ValueError, match="bad ids"):
        g(_BAD, w2)


# --------------------------------------------------------------------- LayoutLM and LiLT
@pytest.mark.parametrize("name", ["layoutlm", "lilt"])
def test_layout_models_convert_and_raise_eagers_bbox_error(name):
    transformers = pytest.importorskip("transformers")
    from benchmarks.torchvision_cpu import import_torchvision
    import_torchvision()
    small = dict(vocab_size=64, hidden_size=48, num_hidden_layers=1, num_attention_heads=4,
                 intermediate_size=32, max_2d_position_embeddings=64)
    if name == "layoutlm":
        model = transformers.LayoutLMModel(transformers.LayoutLMConfig(**small))
    else:
        model = transformers.LiltModel(transformers.LiltConfig(**small))
    model.eval()
    g = to_graph(model)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 64, (2, 5), generator=gen)
    lo = torch.randint(0, 30, (2, 5, 2), generator=gen)
    bbox = torch.cat([lo, lo + 3], -1)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        for _ in range(2):
            torch.testing.assert_close(g(ids, bbox=bbox).last_hidden_state,
                                       model(ids, bbox=bbox).last_hidden_state,
                                       rtol=1e-5, atol=1e-5)
    too_far = bbox.clone()
    too_far[0, 0, 2] = 500
    with torch.no_grad():
        with pytest.raises(IndexError) as eager:
            model(ids, bbox=too_far)
        with pytest.warns(FallbackWarning, match="inside a try"):
            with pytest.raises(IndexError) as converted:
                g(ids, bbox=too_far)
    assert str(converted.value) == str(eager.value)
