"""A trace that told library code ``is_compiling()`` is True and then failed traces once
more with eager's answer (``runtime/library_compiling.py``). 18 transformers models skip
``if attention_mask is None and not is_torchdynamo_compiling(): attention_mask =
torch.ones(...)`` under torch.compile and then index the None mask (LongT5, ...): called
without a mask they fell back. Differential: eager vs ``to_graph``."""
from __future__ import annotations

import importlib
import sys
import textwrap
import warnings

import pytest
import torch

from transpiler import ConversionError, FallbackWarning, to_graph

LIBRARY = textwrap.dedent('''
    import torch

    def masked_sum(x, mask=None):
        if mask is None and not torch.compiler.is_compiling():
            mask = torch.ones(x.shape[0])
        return (x * mask[:, None]).sum(0)

    def compile_path(x):
        if torch.compiler.is_compiling():
            return x * 2                  # the path written for a graph: taken
        if (x > 0).all():
            return x * 2
        return x * 2

    def broken_both_ways(x, mask=None):
        if mask is None and not torch.compiler.is_compiling():
            mask = torch.ones(x.shape[0])
        return {str(x.sum().item()): mask}[0]
''')


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    root = tmp_path_factory.mktemp("env") / "site-packages"
    root.mkdir()
    (root / "tg_fake_library.py").write_text(LIBRARY)
    sys.path.insert(0, str(root))
    try:
        yield importlib.import_module("tg_fake_library")
    finally:
        sys.path.remove(str(root))
        sys.modules.pop("tg_fake_library", None)


def _quiet(fn, *args):
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        out = fn(*args)
    return out, [str(w.message) for w in rec if issubclass(w.category, FallbackWarning)]


def test_a_failed_compile_path_retraces_with_eagers_answer(lib):
    def f(x):
        return lib.masked_sum(x) + 1

    g, strict = to_graph(f), to_graph(f, strict=True)
    for x in (torch.randn(3, 2), torch.randn(3, 2), torch.randn(4, 2)):
        got, warned = _quiet(g, x)
        assert not warned, warned
        torch.testing.assert_close(got, f(x), rtol=0, atol=0)
        torch.testing.assert_close(strict(x), f(x), rtol=0, atol=0)


def test_the_compile_path_is_still_taken_where_it_traces(lib):
    g = to_graph(lambda x: lib.compile_path(x), strict=True)
    x = torch.randn(3)
    torch.testing.assert_close(g(x), x * 2)
    assert "cond" not in str(g.graph(x))         # (the eager path would branch on data)


def test_failing_both_ways_falls_back_with_the_first_reason(lib):
    def f(x):
        return lib.broken_both_ways(x)

    x = torch.randn(3, 2)
    with pytest.raises(Exception) as eager:
        f(x)
    with pytest.raises(ConversionError, match="tg_fake_library.py"):
        to_graph(f, strict=True)(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        with pytest.raises(type(eager.value)):
            to_graph(f)(x)


def test_longt5_encoder_without_a_mask_converts():
    transformers = pytest.importorskip("transformers")
    from benchmarks.torchvision_cpu import import_torchvision
    import_torchvision()
    cfg = transformers.AutoConfig.for_model(
        "longt5", vocab_size=64, d_model=16, d_kv=4, d_ff=32, num_layers=1,
        num_decoder_layers=1, num_heads=4, local_radius=2, use_cache=False)
    torch.manual_seed(0)
    model = transformers.LongT5EncoderModel(cfg).eval()
    g = to_graph(model)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        for n in (7, 9):
            ids = torch.randint(0, 64, (2, n))
            torch.testing.assert_close(g(ids)[0], model(ids)[0], rtol=1e-5, atol=1e-6)
