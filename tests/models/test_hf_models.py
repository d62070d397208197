"""Hugging Face models as they are (tiny configs from ``benchmarks/model_zoo.py``): each
converts with no fallback and matches eager -- output types (``CausalLMOutputWithPast``...),
``out.logits``, ``out[0]``, ``to_tuple()``, ``return_dict=False`` tuples, and the returned
cache (a fresh ``DynamicCache`` of real tensors each call, usable in a second call as
eager's) -- on a first call, a second call with other inputs, and another batch size.
"""
import os
import sys
import warnings

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

pytest.importorskip("transformers")

from benchmarks import model_zoo as Z  # noqa: E402
from transpiler import ConversionError, FallbackWarning, to_graph  # noqa: E402

CALLS = ((1, 1), (1, 2), (3, 3))        # (batch, seed): first, other inputs, other batch


def assert_like(got, exp, path="out"):
    """Same classes all the way down (ModelOutput subclasses, caches and their layers,
    tuples), tensors within 1e-4, other attributes equal; never eager's own object."""
    assert type(got) is type(exp), f"{path}: {type(got).__name__} != {type(exp).__name__}"
    if isinstance(exp, torch.Tensor):
        assert got.dtype == exp.dtype and got.shape == exp.shape, path
        torch.testing.assert_close(got, exp, rtol=1e-4, atol=1e-4, msg=lambda m: f"{path}: {m}")
    elif isinstance(exp, (list, tuple)):
        assert len(got) == len(exp), path
        for i, (a, b) in enumerate(zip(got, exp)):
            assert_like(a, b, f"{path}[{i}]")
    elif isinstance(exp, dict):                  # (a ModelOutput is an OrderedDict)
        assert list(got.keys()) == list(exp.keys()), path
        for k in exp:
            assert_like(got[k], exp[k], f"{path}[{k!r}]")
    elif hasattr(exp, "__dict__") and not isinstance(exp, (type, torch.nn.Module)) \
            and not callable(exp):
        assert got is not exp, f"{path}: eager's own object"
        assert set(vars(got)) == set(vars(exp)), f"{path}: attributes differ"
        for k in vars(exp):
            assert_like(vars(got)[k], vars(exp)[k], f"{path}.{k}")
    else:
        assert got == exp, f"{path}: {got!r} != {exp!r}"


def _call(fn, args, kwargs):
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        return fn(*args, **kwargs)


VARIANTS = [(name, variant, strict)
            for name in ("gpt2", "bert", "llama", "t5")
            for variant, strict in ((dict(), False),
                                    (dict(mask=True, use_cache=name != "bert"), True))]


@pytest.mark.parametrize("name,variant,strict", VARIANTS,
                         ids=[f"{n}-{'-'.join(v) or 'plain'}-{'strict' if s else 'default'}"
                              for n, v, s in VARIANTS])
def test_model_matches_eager(name, variant, strict):
    model, make = Z.MODELS[name](**variant)
    g = to_graph(model, strict=strict)
    seen = []
    for batch, seed in CALLS:
        args, kwargs = make(batch, seed)
        exp = _call(model, args, kwargs)
        got = _call(g, args, kwargs)
        assert_like(got, exp)
        assert_like(got[0], exp[0], "out[0]")
        assert_like(got.to_tuple(), exp.to_tuple(), "out.to_tuple()")
        if hasattr(exp, "logits"):
            assert_like(got.logits, exp.logits, "out.logits")
        cache = getattr(got, "past_key_values", None)
        assert (cache is not None) == bool(variant.get("use_cache")), "past_key_values"
        seen.append(got)
    assert seen[0] is not seen[1]
    if variant.get("use_cache"):
        assert seen[0].past_key_values is not seen[1].past_key_values


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_return_dict_false(name):
    model, make = Z.MODELS[name](use_cache=True)
    g = to_graph(model, strict=True)
    for batch, seed in CALLS[:2]:
        args, kwargs = make(batch, seed)
        kwargs["return_dict"] = False
        assert_like(_call(g, args, kwargs), _call(model, args, kwargs))


def _step_inputs(name, first_args, first_kwargs, out, batch):
    """The next decoding step's arguments, continuing from ``out``'s cache."""
    nxt = torch.randint(0, Z.VOCAB, (batch, 1), generator=torch.Generator().manual_seed(batch))
    if name == "t5":
        return (), dict(input_ids=first_args[0], decoder_input_ids=nxt,
                        encoder_outputs=(out.encoder_last_hidden_state,),
                        past_key_values=out.past_key_values)
    return (nxt,), dict(past_key_values=out.past_key_values)


@pytest.mark.parametrize("name", ["gpt2", "llama", "t5"])
def test_cache_feeds_a_second_call(name):
    """``model(next_ids, past_key_values=out.past_key_values)``, eagerly and converted, from
    eager's and the converted call's caches: the same logits, and both callers' caches
    grown the same (the converted call reproduces the growth or falls back cleanly)."""
    model, make = Z.MODELS[name](use_cache=True)
    g = to_graph(model)
    for batch, seed in ((1, 1), (2, 2)):
        args, kwargs = make(batch, seed)
        exp, got = _call(model, args, kwargs), _call(g, args, kwargs)
        assert_like(got, exp)
        exp_args, exp_kwargs = _step_inputs(name, args, kwargs, exp, batch)
        got_args, got_kwargs = _step_inputs(name, args, kwargs, got, batch)
        with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            exp2 = model(*exp_args, **exp_kwargs)
            got2 = g(*got_args, **got_kwargs)
        for w in caught:
            if w.category is FallbackWarning:
                assert ".py:" in str(w.message), str(w.message)        # names a line
        assert_like(got2.logits, exp2.logits, "second.logits")
        assert_like(got2.past_key_values, exp2.past_key_values, "second.past_key_values")
        assert_like(got.past_key_values, exp.past_key_values, "the first call's cache, grown")
        assert got2.past_key_values is got.past_key_values       # as eager: the same cache


def test_cache_passed_in_strict_never_crashes():
    model, make = Z.MODELS["gpt2"](use_cache=True)
    args, kwargs = make(1, 1)
    first = _call(model, args, kwargs)
    step_args, step_kwargs = _step_inputs("gpt2", args, kwargs, first, 1)
    try:
        with torch.no_grad():
            got = to_graph(model, strict=True)(*step_args, **step_kwargs)
    except ConversionError:
        return
    exp_first = _call(model, args, kwargs)
    exp_args, exp_kwargs = _step_inputs("gpt2", args, kwargs, exp_first, 1)
    with torch.no_grad():
        exp = model(*exp_args, **exp_kwargs)
    assert_like(got.logits, exp.logits)


def test_generate_matches_eager():
    """``to_graph(model).generate`` and ``to_graph(model.generate)``: eager's tokens; a
    fallback (if any) is a FallbackWarning naming a line, never a crash."""
    model, make = Z.MODELS["gpt2"](use_cache=True)
    (ids,), _ = make(2, 1)
    options = dict(max_new_tokens=5, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        exp = model.generate(ids, **options)
        for g in (to_graph(model).generate, to_graph(model.generate)):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                got = g(ids, **options)
            assert torch.equal(got, exp)
            for w in caught:
                if w.category is FallbackWarning:
                    assert ".py:" in str(w.message), str(w.message)
